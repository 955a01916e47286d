import { backend_util, Conv2DBackpropFilter, type Conv2DBackpropFilterAttrs, type KernelConfig, type TensorInfo } from '@tensorflow/tfjs-core';
import type { BackendWasm } from '@tensorflow/tfjs-backend-wasm';
import { gemmKernelsFor } from '../gemm';
import { aliasShape, asWasmBackend, f32View, heapMemory, wasmTranspose } from './wasmData';
import { wasmMatMul } from './matMul';

/**
 * The filter gradient of a 2-D convolution, which the wasm backend lacks (so no conv net
 * trains on it as shipped).
 *
 * dW[fh,fw,ci,co] = Σ_{b,oh,ow} x[b, oh·sh+fh−top, ow·sw+fw−left, ci] · dy[b,oh,ow,co].
 * With P = batch·outH·outW and K = fh·fw·ci this is colᵀ·dy, col being the im2col matrix
 * [P, K]. We write colᵀ [K, P] straight into the wasm heap (sequential writes, one pass
 * over x per filter tap; in WebAssembly, ../gemm's im2colT, where our module runs, else in JS
 * at about 5 ns a value) and let the fastest matMul we have do the K·P·co multiply-adds.
 * Batches are cut into chunks so that colᵀ stays below `maxColumnFloats`; the partial
 * products are summed in JS.
 */
let maxColumnFloats = 1 << 23; // 32 MiB of float32 per chunk

/** Floats of im2col matrix built at once by the conv gradients (filter and input). */
export function columnChunkFloats(): number {
  return maxColumnFloats;
}

/** Sets the colᵀ chunk size in floats and returns the previous one; tests use it to reach the chunked path on small tensors. */
export function setColumnChunkFloats(floats: number): number {
  const previous = maxColumnFloats;
  maxColumnFloats = Math.max(1, Math.floor(floats));
  return previous;
}

function conv2DBackpropFilter({ inputs, backend, attrs }: { inputs: Record<string, TensorInfo | undefined>; backend: unknown; attrs?: unknown }): TensorInfo {
  const wasm = asWasmBackend(backend, Conv2DBackpropFilter);
  const { strides, pad, dataFormat, dimRoundingMode, filterShape } = attrs as Conv2DBackpropFilterAttrs;
  let x = inputs.x as TensorInfo;
  let dy = inputs.dy as TensorInfo;
  if (x.dtype !== 'float32' || dy.dtype !== 'float32') {
    throw new Error(`Conv2DBackpropFilter on wasm supports float32 only, got x ${x.dtype} and dy ${dy.dtype}.`);
  }
  const owned: TensorInfo[] = [];
  try {
    if (dataFormat === 'NCHW') {
      x = wasmTranspose(wasm, x, [0, 2, 3, 1]);
      dy = wasmTranspose(wasm, dy, [0, 2, 3, 1]);
      owned.push(x, dy);
    }
    const info = backend_util.computeConv2DInfo(
      x.shape as [number, number, number, number], filterShape, strides, 1, pad, dimRoundingMode, false, 'channelsLast');
    return filterGradientNhwc(wasm, x, dy, info);
  } finally {
    for (const t of owned) wasm.disposeData(t.dataId);
  }
}

function filterGradientNhwc(wasm: BackendWasm, x: TensorInfo, dy: TensorInfo, info: backend_util.Conv2DInfo): TensorInfo {
  const { batchSize, inHeight, inWidth, inChannels, outHeight, outWidth, outChannels, filterHeight, filterWidth, strideHeight, strideWidth } = info;
  const top = info.padInfo.top;
  const left = info.padInfo.left;
  const k = filterHeight * filterWidth * inChannels;
  const perImage = outHeight * outWidth;
  const imagesPerChunk = Math.max(1, Math.min(batchSize, Math.floor(columnChunkFloats() / Math.max(1, k * perImage))));
  const filterShape = [filterHeight, filterWidth, inChannels, outChannels];

  let total: Float32Array | null = null;
  for (let b0 = 0; b0 < batchSize; b0 += imagesPerChunk) {
    const b1 = Math.min(batchSize, b0 + imagesPerChunk);
    const p = (b1 - b0) * perImage;
    const colT = wasm.makeOutput([k, p], 'float32');
    const wholeBatch = b0 === 0 && b1 === batchSize;
    const dyChunk = wholeBatch ? aliasShape(dy, [p, outChannels]) : wasm.makeOutput([p, outChannels], 'float32');
    let partial: TensorInfo;
    try {
      // Views are taken after every allocation above: an allocation may move the heap.
      if (!wholeBatch) {
        const dys = f32View(wasm, dy);
        f32View(wasm, dyChunk).set(dys.subarray(b0 * perImage * outChannels, b1 * perImage * outChannels));
      }
      const kernels = gemmKernelsFor(heapMemory(wasm));
      if (kernels) {
        kernels.im2colT(wasm.getMemoryOffset(x.dataId), wasm.getMemoryOffset(colT.dataId), b0, b1, inHeight, inWidth, inChannels, outHeight, outWidth, filterHeight, filterWidth, strideHeight, strideWidth, top, left);
      } else {
        im2colTInJs(f32View(wasm, x), f32View(wasm, colT), info, b0, b1);
      }
      partial = wasmMatMul(wasm, colT, dyChunk);
    } finally {
      wasm.disposeData(colT.dataId);
      if (!wholeBatch) wasm.disposeData(dyChunk.dataId);
    }
    if (wholeBatch) {
      return { dataId: partial.dataId, shape: filterShape, dtype: 'float32' };
    }
    const values = f32View(wasm, partial);
    if (total == null) {
      total = Float32Array.from(values);
    } else {
      for (let i = 0; i < total.length; i++) total[i] += values[i];
    }
    wasm.disposeData(partial.dataId);
  }
  return wasm.makeOutput(filterShape, 'float32', undefined, total ?? new Float32Array(k * outChannels));
}

/** colᵀ of images b0..b1-1 in JS, where our wasm module cannot run (no relaxed SIMD): the same values as im2colT. */
function im2colTInJs(xs: Float32Array, col: Float32Array, info: backend_util.Conv2DInfo, b0: number, b1: number): void {
  const { inHeight, inWidth, inChannels, outHeight, outWidth, filterHeight, filterWidth, strideHeight, strideWidth } = info;
  const top = info.padInfo.top;
  const left = info.padInfo.left;
  const p = (b1 - b0) * outHeight * outWidth;
  let row = 0;
  for (let fh = 0; fh < filterHeight; fh++) {
    for (let fw = 0; fw < filterWidth; fw++) {
      for (let ci = 0; ci < inChannels; ci++, row++) {
        let o = row * p;
        for (let b = b0; b < b1; b++) {
          const xImage = b * inHeight;
          for (let oh = 0; oh < outHeight; oh++) {
            const ih = oh * strideHeight + fh - top;
            if (ih < 0 || ih >= inHeight) {
              col.fill(0, o, o + outWidth);
              o += outWidth;
              continue;
            }
            const xRow = ((xImage + ih) * inWidth) * inChannels + ci;
            for (let ow = 0; ow < outWidth; ow++, o++) {
              const iw = ow * strideWidth + fw - left;
              col[o] = iw >= 0 && iw < inWidth ? xs[xRow + iw * inChannels] : 0;
            }
          }
        }
      }
    }
  }
}

export const conv2DBackpropFilterConfig: KernelConfig = {
  kernelName: Conv2DBackpropFilter,
  backendName: 'wasm',
  kernelFunc: conv2DBackpropFilter,
};

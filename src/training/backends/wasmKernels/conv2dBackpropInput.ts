import { backend_util, Conv2DBackpropInput, type Conv2DBackpropInputAttrs, type KernelConfig, type TensorInfo } from '@tensorflow/tfjs-core';
import type { BackendWasm } from '@tensorflow/tfjs-backend-wasm';
import { columnChunkFloats } from './conv2dBackpropFilter';
import { gemmKernelsFor } from '../gemm';
import { aliasShape, asWasmBackend, f32View, heapMemory, runShipped, wasmTranspose } from './wasmData';
import { wasmMatMul } from './matMul';

/**
 * The input gradient of a 2-D convolution (and the forward pass of Conv2DTranspose). The
 * shipped wasm kernel is a direct loop: ~25 ms for the second conv of the small CNN at batch
 * 64, ten times its forward conv.
 * - Stride 1 (most convs): a 'full' convolution of dy with the filter flipped in space and
 *   with in/out channels swapped, on the shipped XNNPACK Conv2D (about 3× faster than the
 *   path below on the small CNN).
 * - Otherwise: dcol = dy·Wᵀ ([P, co]·[co, K], the shipped XNNPACK matMul, with Wᵀ a tiny
 *   transpose), then col2im adds each row of dcol back into the input pixels its filter taps
 *   came from, in contiguous runs of `inChannels`.
 */
function conv2DBackpropInput({ inputs, backend, attrs }: { inputs: Record<string, TensorInfo | undefined>; backend: unknown; attrs?: unknown }): TensorInfo {
  const wasm = asWasmBackend(backend, Conv2DBackpropInput);
  const { strides, pad, dataFormat, dimRoundingMode, inputShape } = attrs as Conv2DBackpropInputAttrs;
  let dy = inputs.dy as TensorInfo;
  const filter = inputs.filter as TensorInfo;
  if (dy.dtype !== 'float32' || filter.dtype !== 'float32') {
    throw new Error(`Conv2DBackpropInput on wasm supports float32 only, got dy ${dy.dtype} and filter ${filter.dtype}.`);
  }
  const channelsFirst = dataFormat === 'NCHW';
  const nhwcShape: [number, number, number, number] = channelsFirst
    ? [inputShape[0], inputShape[2], inputShape[3], inputShape[1]] : inputShape;
  const owned: TensorInfo[] = [];
  try {
    if (channelsFirst) {
      dy = wasmTranspose(wasm, dy, [0, 2, 3, 1]);
      owned.push(dy);
    }
    const info = backend_util.computeConv2DInfo(
      nhwcShape, filter.shape as [number, number, number, number], strides, 1, pad, dimRoundingMode, false, 'channelsLast');
    const dx = fullConvolution(wasm, dy, filter, info) ?? inputGradientNhwc(wasm, dy, filter, info);
    if (!channelsFirst) {
      return dx;
    }
    owned.push(dx);
    return wasmTranspose(wasm, dx, [0, 3, 1, 2]);
  } finally {
    for (const t of owned) wasm.disposeData(t.dataId);
  }
}

/** dx = conv(dy, flip(W)ᵀ) with padding filter−1−pad; null where that does not apply. */
function fullConvolution(wasm: BackendWasm, dy: TensorInfo, filter: TensorInfo, info: backend_util.Conv2DInfo): TensorInfo | null {
  const { filterHeight: fh, filterWidth: fw, padInfo } = info;
  const pads = [fh - 1 - padInfo.top, fh - 1 - padInfo.bottom, fw - 1 - padInfo.left, fw - 1 - padInfo.right];
  if (info.strideHeight !== 1 || info.strideWidth !== 1 || pads.some((p) => p < 0)) {
    return null;
  }
  const flipped = runShipped('Reverse', wasm, { x: filter }, { dims: [0, 1] });
  let swapped: TensorInfo | null = null;
  try {
    swapped = wasmTranspose(wasm, flipped, [0, 1, 3, 2]);
    return runShipped('Conv2D', wasm, { x: dy, filter: swapped }, {
      strides: 1, dilations: 1, dataFormat: 'NHWC',
      pad: [[0, 0], [pads[0], pads[1]], [pads[2], pads[3]], [0, 0]],
    });
  } finally {
    wasm.disposeData(flipped.dataId);
    if (swapped != null) wasm.disposeData(swapped.dataId);
  }
}

function inputGradientNhwc(wasm: BackendWasm, dy: TensorInfo, filter: TensorInfo, info: backend_util.Conv2DInfo): TensorInfo {
  const { batchSize, inHeight, inWidth, inChannels, outHeight, outWidth, outChannels, filterHeight, filterWidth, strideHeight, strideWidth } = info;
  const top = info.padInfo.top;
  const left = info.padInfo.left;
  const k = filterHeight * filterWidth * inChannels;
  const perImage = outHeight * outWidth;
  const imagesPerChunk = Math.max(1, Math.min(batchSize, Math.floor(columnChunkFloats() / Math.max(1, k * perImage))));

  // dcol = dy·Wᵀ: our GEMM reads W transposed in place; the shipped matMul wants Wᵀ materialised once.
  const w = aliasShape(filter, [k, outChannels]);
  const wT = gemmKernelsFor(heapMemory(wasm)) ? undefined : wasmTranspose(wasm, w, [1, 0]);
  const dx = wasm.makeOutput([batchSize, inHeight, inWidth, inChannels], 'float32');
  try {
    f32View(wasm, dx).fill(0);
    for (let b0 = 0; b0 < batchSize; b0 += imagesPerChunk) {
      const b1 = Math.min(batchSize, b0 + imagesPerChunk);
      const p = (b1 - b0) * perImage;
      const wholeBatch = b0 === 0 && b1 === batchSize;
      const dyChunk = wholeBatch ? aliasShape(dy, [p, outChannels]) : wasm.makeOutput([p, outChannels], 'float32');
      let dcol: TensorInfo;
      try {
        if (!wholeBatch) {
          f32View(wasm, dyChunk).set(f32View(wasm, dy).subarray(b0 * perImage * outChannels, b1 * perImage * outChannels));
        }
        dcol = wT ? wasmMatMul(wasm, dyChunk, wT) : wasmMatMul(wasm, dyChunk, w, false, true);
      } finally {
        if (!wholeBatch) wasm.disposeData(dyChunk.dataId);
      }
      // Views after the allocations above, which may have moved the heap.
      const cols = f32View(wasm, aliasShape(dcol, [p * k]));
      const dxs = f32View(wasm, dx);
      let row = 0;
      for (let b = b0; b < b1; b++) {
        for (let oh = 0; oh < outHeight; oh++) {
          for (let ow = 0; ow < outWidth; ow++, row++) {
            let src = row * k;
            for (let fh = 0; fh < filterHeight; fh++) {
              const ih = oh * strideHeight + fh - top;
              if (ih < 0 || ih >= inHeight) {
                src += filterWidth * inChannels;
                continue;
              }
              const pixelRow = (b * inHeight + ih) * inWidth;
              for (let fw = 0; fw < filterWidth; fw++, src += inChannels) {
                const iw = ow * strideWidth + fw - left;
                if (iw < 0 || iw >= inWidth) continue;
                const dst = (pixelRow + iw) * inChannels;
                for (let c = 0; c < inChannels; c++) dxs[dst + c] += cols[src + c];
              }
            }
          }
        }
      }
      wasm.disposeData(dcol.dataId);
    }
  } catch (e) {
    wasm.disposeData(dx.dataId);
    throw e;
  } finally {
    if (wT) wasm.disposeData(wT.dataId);
  }
  return dx;
}

export const conv2DBackpropInputConfig: Omit<KernelConfig, 'setupFunc' | 'disposeFunc'> = {
  kernelName: Conv2DBackpropInput,
  backendName: 'wasm',
  kernelFunc: conv2DBackpropInput,
};

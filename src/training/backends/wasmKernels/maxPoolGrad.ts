import { backend_util, MaxPoolGrad, type KernelConfig, type MaxPoolGradAttrs, type TensorInfo } from '@tensorflow/tfjs-core';
import { asWasmBackend, f32View } from './wasmData';

/**
 * The gradient of 2-D max pooling: each output's dy goes to the input pixel that won its
 * window. The shipped wasm kernel spends ~30 ms per step on the small CNN's first pool
 * (64×26×26×8), more than all its convolutions; this one makes one pass over x, keeping
 * the running maximum of every channel of a window side by side so that the innermost loop
 * walks contiguous channels. Ties go to the first maximum in row-major window order and
 * NaN never wins, as in the cpu backend.
 */
function maxPoolGrad({ inputs, backend, attrs }: { inputs: Record<string, TensorInfo | undefined>; backend: unknown; attrs?: unknown }): TensorInfo {
  const wasm = asWasmBackend(backend, MaxPoolGrad);
  const dy = inputs.dy as TensorInfo;
  const x = inputs.input as TensorInfo;
  if (dy.dtype !== 'float32' || x.dtype !== 'float32') {
    throw new Error(`MaxPoolGrad on wasm supports float32 only, got dy ${dy.dtype} and input ${x.dtype}.`);
  }
  const { filterSize, strides, pad, dimRoundingMode } = attrs as MaxPoolGradAttrs;
  const info = backend_util.computePool2DInfo(x.shape as [number, number, number, number], filterSize, strides, 1, pad, dimRoundingMode);
  const { batchSize, inHeight, inWidth, inChannels: channels, outHeight, outWidth, filterHeight, filterWidth, strideHeight, strideWidth } = info;
  const top = info.padInfo.top;
  const left = info.padInfo.left;

  const dx = wasm.makeOutput(x.shape, 'float32');
  // Views after the allocation above, which may have moved the heap.
  const xs = f32View(wasm, x);
  const dys = f32View(wasm, dy);
  const dxs = f32View(wasm, dx);
  dxs.fill(0);
  const best = new Float32Array(channels);
  const at = new Int32Array(channels);
  let o = 0;
  for (let b = 0; b < batchSize; b++) {
    for (let oh = 0; oh < outHeight; oh++) {
      const h0 = Math.max(0, oh * strideHeight - top);
      const h1 = Math.min(inHeight, oh * strideHeight - top + filterHeight);
      for (let ow = 0; ow < outWidth; ow++, o += channels) {
        const w0 = Math.max(0, ow * strideWidth - left);
        const w1 = Math.min(inWidth, ow * strideWidth - left + filterWidth);
        best.fill(Number.NEGATIVE_INFINITY);
        at.fill(-1);
        for (let ih = h0; ih < h1; ih++) {
          for (let iw = w0; iw < w1; iw++) {
            const pixel = ((b * inHeight + ih) * inWidth + iw) * channels;
            for (let c = 0; c < channels; c++) {
              const v = xs[pixel + c];
              if (v > best[c]) {
                best[c] = v;
                at[c] = pixel + c;
              }
            }
          }
        }
        for (let c = 0; c < channels; c++) {
          if (at[c] >= 0) dxs[at[c]] += dys[o + c];
        }
      }
    }
  }
  return dx;
}

export const maxPoolGradConfig: Omit<KernelConfig, 'setupFunc' | 'disposeFunc'> = {
  kernelName: MaxPoolGrad,
  backendName: 'wasm',
  kernelFunc: maxPoolGrad,
};

import {
  backend_util, DepthwiseConv2dNativeBackpropFilter, DepthwiseConv2dNativeBackpropInput,
  type DepthwiseConv2dNativeBackpropFilterAttrs, type DepthwiseConv2dNativeBackpropInputAttrs, type KernelConfig, type TensorInfo,
} from '@tensorflow/tfjs-core';
import { asWasmBackend, f32View } from './wasmData';

/**
 * The two gradients of a depthwise convolution (DepthwiseConv2D and SeparableConv2D
 * layers), missing from the wasm backend. Depthwise work is small (fh·fw·c per output
 * pixel), so a direct loop over typed arrays is enough: the innermost loops run over
 * contiguous channels of x, dy and the filter, and sums are kept in float64.
 * Dilations are honoured (the cpu backend's versions ignore them; tfjs-core's gradient
 * refuses dilations > 1 before reaching either).
 */
type KernelArgs = { inputs: Record<string, TensorInfo | undefined>; backend: unknown; attrs?: unknown };

interface Geometry {
  batchSize: number; inHeight: number; inWidth: number; inChannels: number;
  outHeight: number; outWidth: number; multiplier: number;
  filterHeight: number; filterWidth: number;
  strideHeight: number; strideWidth: number; dilationHeight: number; dilationWidth: number;
  top: number; left: number;
}

function geometry(info: backend_util.Conv2DInfo): Geometry {
  return {
    batchSize: info.batchSize, inHeight: info.inHeight, inWidth: info.inWidth, inChannels: info.inChannels,
    outHeight: info.outHeight, outWidth: info.outWidth, multiplier: info.outChannels / info.inChannels,
    filterHeight: info.filterHeight, filterWidth: info.filterWidth,
    strideHeight: info.strideHeight, strideWidth: info.strideWidth,
    dilationHeight: info.dilationHeight, dilationWidth: info.dilationWidth,
    top: info.padInfo.top, left: info.padInfo.left,
  };
}

/**
 * Visits every (output pixel, filter tap) pair whose input pixel lies inside the image,
 * handing over the offsets of the x pixel, the dy pixel and the filter tap.
 */
function forEachTap(g: Geometry, visit: (xOffset: number, dyOffset: number, wOffset: number) => void): void {
  const outDepth = g.inChannels * g.multiplier;
  for (let b = 0; b < g.batchSize; b++) {
    for (let oh = 0; oh < g.outHeight; oh++) {
      for (let fh = 0; fh < g.filterHeight; fh++) {
        const ih = oh * g.strideHeight + fh * g.dilationHeight - g.top;
        if (ih < 0 || ih >= g.inHeight) continue;
        const xRow = (b * g.inHeight + ih) * g.inWidth;
        const dyRow = (b * g.outHeight + oh) * g.outWidth;
        for (let ow = 0; ow < g.outWidth; ow++) {
          for (let fw = 0; fw < g.filterWidth; fw++) {
            const iw = ow * g.strideWidth + fw * g.dilationWidth - g.left;
            if (iw < 0 || iw >= g.inWidth) continue;
            visit((xRow + iw) * g.inChannels, (dyRow + ow) * outDepth, (fh * g.filterWidth + fw) * outDepth);
          }
        }
      }
    }
  }
}

function checkFloat(kernelName: string, ...tensors: TensorInfo[]): void {
  for (const t of tensors) {
    if (t.dtype !== 'float32') {
      throw new Error(`${kernelName} on wasm supports float32 only, got ${t.dtype}.`);
    }
  }
}

function depthwiseBackpropFilter({ inputs, backend, attrs }: KernelArgs): TensorInfo {
  const wasm = asWasmBackend(backend, DepthwiseConv2dNativeBackpropFilter);
  const x = inputs.x as TensorInfo;
  const dy = inputs.dy as TensorInfo;
  checkFloat(DepthwiseConv2dNativeBackpropFilter, x, dy);
  const { strides, dilations, pad, dimRoundingMode, filterShape } = attrs as DepthwiseConv2dNativeBackpropFilterAttrs;
  const info = backend_util.computeConv2DInfo(
    x.shape as [number, number, number, number], filterShape, strides, dilations, pad, dimRoundingMode, true);
  const g = geometry(info);
  const xs = f32View(wasm, x);
  const dys = f32View(wasm, dy);
  const cIn = g.inChannels;
  const m = g.multiplier;
  const acc = new Float64Array(g.filterHeight * g.filterWidth * cIn * m);
  forEachTap(g, (xo, dyo, wo) => {
    for (let c = 0; c < cIn; c++) {
      const xv = xs[xo + c];
      const base = c * m;
      for (let j = 0; j < m; j++) acc[wo + base + j] += xv * dys[dyo + base + j];
    }
  });
  return wasm.makeOutput(info.filterShape, 'float32', undefined, Float32Array.from(acc));
}

function depthwiseBackpropInput({ inputs, backend, attrs }: KernelArgs): TensorInfo {
  const wasm = asWasmBackend(backend, DepthwiseConv2dNativeBackpropInput);
  const dy = inputs.dy as TensorInfo;
  const filter = inputs.filter as TensorInfo;
  checkFloat(DepthwiseConv2dNativeBackpropInput, dy, filter);
  const { strides, dilations, pad, dimRoundingMode, inputShape } = attrs as DepthwiseConv2dNativeBackpropInputAttrs;
  const info = backend_util.computeConv2DInfo(
    inputShape, filter.shape as [number, number, number, number], strides, dilations, pad, dimRoundingMode, true);
  const g = geometry(info);
  const dys = f32View(wasm, dy);
  const ws = f32View(wasm, filter);
  const cIn = g.inChannels;
  const m = g.multiplier;
  const acc = new Float64Array(g.batchSize * g.inHeight * g.inWidth * cIn);
  forEachTap(g, (xo, dyo, wo) => {
    for (let c = 0; c < cIn; c++) {
      const base = c * m;
      let s = 0;
      for (let j = 0; j < m; j++) s += dys[dyo + base + j] * ws[wo + base + j];
      acc[xo + c] += s;
    }
  });
  return wasm.makeOutput(inputShape, 'float32', undefined, Float32Array.from(acc));
}

export const depthwiseBackpropFilterConfig: KernelConfig = {
  kernelName: DepthwiseConv2dNativeBackpropFilter,
  backendName: 'wasm',
  kernelFunc: depthwiseBackpropFilter,
};

export const depthwiseBackpropInputConfig: KernelConfig = {
  kernelName: DepthwiseConv2dNativeBackpropInput,
  backendName: 'wasm',
  kernelFunc: depthwiseBackpropInput,
};

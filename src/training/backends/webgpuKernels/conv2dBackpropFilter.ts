/**
 * Conv2DBackpropFilter (a conv layer's weight gradient) for webgpu, in parallel over the positions
 * it sums.
 *
 * The shipped kernel (4.22) runs one thread per filter element, each summing x·dy over every
 * position of the batch: the CNN preset's first conv (3×3, 1 channel in, 8 out) is 72 threads of
 * 173,056 multiply-adds each at batch 256. On an H100 (2026-11-26, bench/webgpu/latency.ts
 * --kernels) its two calls took 56.6 ms of a 57.9 ms step's GPU time, and webgpu trained the CNN
 * at 0.02× PyTorch CUDA's speed.
 *
 * Here the B·outH·outW positions are split into chunks: pass 1 gives each (chunk, filter element)
 * its own thread (about 65,536 threads however small the filter), pass 2 sums the chunks' partial
 * sums per filter element. Threads next to each other take the next output channel at the same
 * position, so their reads of dy are contiguous and their read of x is shared. Only channels-last
 * (NHWC, what the presets and Keras layers use); channels-first goes to the shipped kernel.
 *
 * DepthwiseConv2dNativeBackpropFilter (separable and depthwise conv layers) had the same loop in
 * 4.22, with even fewer threads (a 3×3 depthwise filter over 32 channels: 288), and is done the
 * same way: filter [kh, kw, inChannels, channelMultiplier], dy's channel d1·multiplier + dm.
 * Dilated depthwise convolutions go to the shipped kernel.
 */
import { backend_util, type Conv2DBackpropFilterAttrs, type Conv2DBackpropFilterInputs, type DepthwiseConv2dNativeBackpropFilterAttrs, type DepthwiseConv2dNativeBackpropFilterInputs, type KernelConfig, type KernelFunc, type TensorInfo } from '@tensorflow/tfjs-core';
import type { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import { flatProgram, run } from './program';
import { shippedKernel } from './shipped';

/** Threads pass 1 aims for; fewer when the positions run out (a chunk has at least `minChunk`). */
const targetThreads = 1 << 16;
const minChunk = 32;

const partialsBody = (depthwise: boolean): string => `
  let chunk = index / uniforms.filterSize;
  let f = index - chunk * uniforms.filterSize;
  let d2 = f % uniforms.outChannels;
  let t = f / uniforms.outChannels;
  let d1 = t % uniforms.inChannels;
  let t2 = t / uniforms.inChannels;
  let wC = t2 % uniforms.filterWidth;
  let wR = t2 / uniforms.filterWidth;
  let outH = uniforms.dyShape[1];
  let outW = uniforms.dyShape[2];
  let start = chunk * uniforms.chunkLen;
  let end = min(start + uniforms.chunkLen, uniforms.positions);
  var b = start / (outH * outW);
  let r = start - b * outH * outW;
  var yR = r / outW;
  var yC = r - yR * outW;
  var sum = 0.0;
  for (var p = start; p < end; p++) {
    let xR = wR + yR * uniforms.strides[0] - uniforms.pads[0];
    let xC = wC + yC * uniforms.strides[1] - uniforms.pads[1];
    if (xR >= 0 && xR < uniforms.xShape[1] && xC >= 0 && xC < uniforms.xShape[2]) {
      sum += getX(b, xR, xC, d1) * getDy(b, yR, yC, ${depthwise ? 'd1 * uniforms.outChannels + d2' : 'd2'});
    }
    yC++;
    if (yC == outW) {
      yC = 0;
      yR++;
      if (yR == outH) {
        yR = 0;
        b++;
      }
    }
  }
  setOutputAtIndex(index, sum);
`;

const sumBody = `
  var sum = 0.0;
  for (var c = 0; c < uniforms.chunks; c++) {
    sum += getPartials(c, index);
  }
  setOutputAtIndex(index, sum);
`;

/** How pass 1 splits the positions: `chunks` of `chunkLen` (the last may be shorter). */
export function chunking(positions: number, filterSize: number): { chunks: number; chunkLen: number } {
  const wanted = Math.max(1, Math.min(Math.ceil(targetThreads / filterSize), Math.ceil(positions / minChunk)));
  const chunkLen = Math.ceil(positions / wanted);
  return { chunks: Math.ceil(positions / chunkLen), chunkLen };
}

/** dW of a conv (or, `depthwise`, a depthwise conv) from x and dy, in two passes (above). */
function filterGradient(backend: WebGPUBackend, x: TensorInfo, dy: TensorInfo, info: backend_util.Conv2DInfo, filterShape: [number, number, number, number], depthwise: boolean): TensorInfo {
  const [kh, kw, ci, co] = filterShape;
  const filterSize = kh * kw * ci * co;
  const positions = info.batchSize * info.outHeight * info.outWidth;
  const { chunks, chunkLen } = chunking(positions, filterSize);
  const key = depthwise ? 'gpuWorkbenchDepthwiseDerFilterPartials' : 'gpuWorkbenchConv2DDerFilterPartials';
  const partialsProgram = flatProgram([chunks, filterSize], key, ['x', 'dy'], 'pads : vec2<i32>, strides : vec2<i32>, filterWidth : i32, inChannels : i32, outChannels : i32, filterSize : i32, chunkLen : i32, positions : i32,', partialsBody(depthwise));
  const partials = run(backend, partialsProgram, [x, dy], 'float32', [
    { type: 'int32', data: [info.padInfo.top, info.padInfo.left] },
    { type: 'int32', data: [info.strideHeight, info.strideWidth] },
    { type: 'int32', data: [kw] },
    { type: 'int32', data: [ci] },
    { type: 'int32', data: [co] },
    { type: 'int32', data: [filterSize] },
    { type: 'int32', data: [chunkLen] },
    { type: 'int32', data: [positions] },
  ]);
  const sumProgram = flatProgram([kh, kw, ci, co], 'gpuWorkbenchDerFilterSum', ['partials'], 'chunks : i32,', sumBody);
  const dw = run(backend, sumProgram, [partials], 'float32', [{ type: 'int32', data: [chunks] }]);
  backend.disposeData(partials.dataId);
  return dw;
}

export function conv2dBackpropFilter(args: { inputs: Conv2DBackpropFilterInputs; backend: WebGPUBackend; attrs: Conv2DBackpropFilterAttrs }): TensorInfo {
  const { x, dy } = args.inputs as { x: TensorInfo; dy: TensorInfo };
  const { strides, pad, dataFormat, dimRoundingMode, filterShape } = args.attrs;
  const format = backend_util.convertConv2DDataFormat(dataFormat);
  if (format !== 'channelsLast' || x.dtype !== 'float32') {
    return (shippedKernel('Conv2DBackpropFilter') as unknown as (a: typeof args) => TensorInfo)(args);
  }
  const info = backend_util.computeConv2DInfo(x.shape as [number, number, number, number], filterShape, strides, 1, pad, dimRoundingMode, false, format);
  return filterGradient(args.backend, x, dy, info, filterShape, false);
}

export function depthwiseBackpropFilter(args: { inputs: DepthwiseConv2dNativeBackpropFilterInputs; backend: WebGPUBackend; attrs: DepthwiseConv2dNativeBackpropFilterAttrs }): TensorInfo {
  const { x, dy } = args.inputs as { x: TensorInfo; dy: TensorInfo };
  const { strides, dilations, pad, dimRoundingMode, filterShape } = args.attrs;
  const dilated = (Array.isArray(dilations) ? dilations : [dilations, dilations]).some((d) => d !== 1);
  if (dilated || x.dtype !== 'float32') {
    return (shippedKernel('DepthwiseConv2dNativeBackpropFilter') as unknown as (a: typeof args) => TensorInfo)(args);
  }
  const info = backend_util.computeConv2DInfo(x.shape as [number, number, number, number], filterShape, strides, 1, pad, dimRoundingMode, true);
  return filterGradient(args.backend, x, dy, info, filterShape, true);
}

export const conv2dBackpropFilterConfig: KernelConfig = {
  kernelName: 'Conv2DBackpropFilter',
  backendName: 'webgpu',
  kernelFunc: conv2dBackpropFilter as unknown as KernelFunc,
};

export const depthwiseBackpropFilterConfig: KernelConfig = {
  kernelName: 'DepthwiseConv2dNativeBackpropFilter',
  backendName: 'webgpu',
  kernelFunc: depthwiseBackpropFilter as unknown as KernelFunc,
};

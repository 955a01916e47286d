import { UnsortedSegmentSum, util, type KernelConfig, type TensorInfo, type UnsortedSegmentSumAttrs } from '@tensorflow/tfjs-core';
import { asWasmBackend, numericView } from './wasmData';

/**
 * Sums the rows of x that share a segment id. It is the gradient of GatherV2, so every
 * Embedding layer needs it to train, and the wasm backend lacks it. One pass over x;
 * ids outside [0, numSegments) are dropped, as TensorFlow does.
 */
function unsortedSegmentSum({ inputs, backend, attrs }: { inputs: Record<string, TensorInfo | undefined>; backend: unknown; attrs?: unknown }): TensorInfo {
  const wasm = asWasmBackend(backend, UnsortedSegmentSum);
  const x = inputs.x as TensorInfo;
  const segmentIds = inputs.segmentIds as TensorInfo;
  const { numSegments } = attrs as UnsortedSegmentSumAttrs;
  if (x.dtype !== 'float32' && x.dtype !== 'int32') {
    throw new Error(`UnsortedSegmentSum on wasm supports float32 and int32 x, got ${x.dtype}.`);
  }
  if (segmentIds.dtype !== 'int32') {
    throw new Error(`UnsortedSegmentSum on wasm needs int32 segment ids, got ${segmentIds.dtype}.`);
  }
  const rows = util.sizeFromShape(segmentIds.shape);
  const inner = util.sizeFromShape(x.shape.slice(segmentIds.shape.length));
  const xs = numericView(wasm, x);
  const ids = numericView(wasm, segmentIds);
  const acc = new Float64Array(numSegments * inner);
  for (let r = 0; r < rows; r++) {
    const id = ids[r];
    if (id < 0 || id >= numSegments) continue;
    const src = r * inner;
    const dst = id * inner;
    for (let i = 0; i < inner; i++) acc[dst + i] += xs[src + i];
  }
  const values = x.dtype === 'int32' ? Int32Array.from(acc) : Float32Array.from(acc);
  return wasm.makeOutput([numSegments, ...x.shape.slice(segmentIds.shape.length)], x.dtype, undefined, values);
}

export const unsortedSegmentSumConfig: KernelConfig = {
  kernelName: UnsortedSegmentSum,
  backendName: 'wasm',
  kernelFunc: unsortedSegmentSum,
};

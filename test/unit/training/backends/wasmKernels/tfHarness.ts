import * as assert from 'node:assert/strict';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import '@tensorflow/tfjs-backend-wasm';
// tfjs-core's node bundle registers no gradients; tfjs-layers' bundle registers them all.
import '@tensorflow/tfjs-layers';
import { relaxedSimdAvailable } from '../../../../../src/training/backends/gemm';
import { registerWasmKernels, unregisterWasmKernels, wasmKernelNames } from '../../../../../src/training/backends/wasmKernels/index';

/** Reproducible values in [-1, 1): the same inputs on both backends, run after run. */
export function pseudoRandom(size: number, seed: number): Float32Array {
  const out = new Float32Array(size);
  let s = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < size; i++) {
    s ^= s << 13; s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5; s >>>= 0;
    out[i] = s / 2147483648 - 1;
  }
  return out;
}

export interface Result { shape: number[]; values: Float32Array | Int32Array | Uint8Array }

/** Runs `build` with `backend` active and returns its output as plain data; every tensor it made is disposed. */
export async function runOn(backend: 'cpu' | 'wasm' | 'webgpu', build: () => tf.Tensor): Promise<Result> {
  const previous = tf.getBackend();
  await tf.setBackend(backend);
  try {
    assert.equal(tf.getBackend(), backend);
    const t = tf.tidy(build);
    const values = await t.data<'float32' | 'int32' | 'bool'>();
    const shape = t.shape.slice();
    t.dispose();
    return { shape, values };
  } finally {
    await tf.setBackend(previous);
  }
}

/**
 * Equal within 1e-4 relative to the reference tensor's scale: |a−e| ≤ 1e-4·max(|e|, rms(e))
 * per element. Element-wise relative error alone is meaningless for sums that cancel to ~0.
 */
export function assertClose(actual: Result, expected: Result, what: string, rtol = 1e-4): void {
  assert.deepEqual(actual.shape, expected.shape, `${what}: shape`);
  assert.equal(actual.values.length, expected.values.length, `${what}: size`);
  let sq = 0;
  for (const v of expected.values) sq += v * v;
  const rms = Math.sqrt(sq / Math.max(1, expected.values.length));
  let worst = 0;
  let worstAt = -1;
  for (let i = 0; i < expected.values.length; i++) {
    const e = expected.values[i];
    const a = actual.values[i];
    assert.ok(Number.isFinite(a), `${what}: element ${i} is ${a}`);
    const err = Math.abs(a - e) / Math.max(Math.abs(e), rms, 1e-30);
    if (err > worst) { worst = err; worstAt = i; }
  }
  assert.ok(worst <= rtol, `${what}: element ${worstAt} is ${actual.values[worstAt]}, cpu says ${expected.values[worstAt]} (relative error ${worst.toExponential(2)} > ${rtol})`);
}

/** Same computation on cpu (reference) and wasm or webgpu (with whatever kernels are registered). */
export async function compareWithCpu(what: string, build: () => tf.Tensor, rtol = 1e-4, backend: 'wasm' | 'webgpu' = 'wasm'): Promise<void> {
  const expected = await runOn('cpu', build);
  const actual = await runOn(backend, build);
  assertClose(actual, expected, what, rtol);
}

/** Initialises both backends, leaving the active one as it was (other suites share this process). */
export async function initBackends(): Promise<void> {
  relaxedSimdAvailable(true); // as every worker does: our GEMM and im2col run on Node 20 too
  await tf.ready(); // wasm initialises asynchronously: before this, getBackend() has no answer
  const previous = tf.getBackend();
  for (const name of ['cpu', 'wasm']) {
    assert.ok(await tf.setBackend(name), `backend ${name} failed to initialise`);
  }
  await tf.setBackend(previous);
}

export function ourKernelsRegistered(): boolean {
  return wasmKernelNames.every((name) => tf.getKernel(name, 'wasm') != null)
    && tf.getKernel('Conv2DBackpropFilter', 'wasm') != null;
}

/** Runs `body` with the wasm backend as shipped, then puts our kernels back if they were there. */
export async function withShippedWasm<T>(body: () => Promise<T>): Promise<T> {
  const had = tf.getKernel('Conv2DBackpropFilter', 'wasm') != null;
  unregisterWasmKernels();
  try {
    return await body();
  } finally {
    if (had) registerWasmKernels();
  }
}

export { tf, registerWasmKernels, unregisterWasmKernels, wasmKernelNames };

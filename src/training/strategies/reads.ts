/**
 * Reading tensors out of the backend. tfjs-backend-webgpu's `readSync` (`dataSync`) draws the
 * buffer through an OffscreenCanvas, which Node has not: on webgpu every read is an awaited
 * `data()` (one buffer map), and several tensors are concatenated on the GPU first so that
 * they leave it in one read. The other backends keep their synchronous reads, which cost no
 * extra copy and no trip through the event loop.
 */
import type { Tensor } from '@tensorflow/tfjs-core';
import type { Tf } from '../backends/types';

/** Whether the backend in use reads synchronously (everything but webgpu). */
export function readsSync(tf: Tf): boolean {
  return tf.getBackend() !== 'webgpu';
}

/** One tensor's float values. */
export async function valuesOf(tf: Tf, t: Tensor): Promise<Float32Array> {
  return (readsSync(tf) ? t.dataSync() : await t.data()) as Float32Array;
}

/** One scalar's value. */
export async function scalarOf(tf: Tf, t: Tensor): Promise<number> {
  return (await valuesOf(tf, t))[0];
}

/** Several tensors' float values, one after the other in one array; on webgpu in one read. */
export async function concatValues(tf: Tf, ts: readonly Tensor[]): Promise<Float32Array> {
  if (readsSync(tf)) {
    const out = new Float32Array(ts.reduce((n, t) => n + t.size, 0));
    let off = 0;
    for (const t of ts) {
      out.set(t.dataSync(), off);
      off += t.size;
    }
    return out;
  }
  if (ts.length === 0) return new Float32Array(0);
  const joined = tf.tidy(() => tf.concat(ts.map((t) => tf.reshape(t, [-1]))));
  try {
    return (await joined.data()) as Float32Array;
  } finally {
    joined.dispose();
  }
}

/**
 * How a ddp or dp step's gradients leave the backend for the ring (or dp's star): the flat
 * layout they travel in, and the read that fills it.
 *
 * On wasm and cpu a tensor's values already live in this process's memory: each gradient is
 * copied into the buffer as it is (`dataSync`, a memcpy). On webgpu they live on the GPU, where
 * every read is a command submission, a copy into a staging buffer and a map: reading tensor by
 * tensor would cost one round trip per weight (8 for the CNN preset, 6 for the MLP). There, the
 * pieces of each bucket (the ring's unit, `BucketedAllReduce.bucketFloats`) are concatenated
 * on the device and read once, the loss riding in the last bucket: one read per bucket per
 * step. (On webgpu in Node, the synchronous `dataSync` of a GPU tensor throws as well: tfjs's
 * readSync copies through an OffscreenCanvas.)
 */
import type { Optimizer, Tensor, Variable } from '@tensorflow/tfjs-core';
import type { Tf } from '../backends/types';
import { concatValues, readsSync } from './reads';

/**
 * The flat gradient buffer of a ddp or dp step: every variable's gradient at a fixed offset, last
 * layer first (PyTorch's bucket order), then one float for the loss. Backends that copy what
 * `tf.tensor` is given (wasm, tensorflow, webgpu) reuse one buffer; the cpu backend keeps the
 * array it is given, so it gets a fresh one each step.
 */
export class GradientBuffer {
  private readonly offsets: number[];
  private readonly total: number;
  private readonly reused: Float32Array | undefined;

  constructor(private readonly sizes: readonly number[], reuse: boolean) {
    this.offsets = new Array<number>(sizes.length);
    let off = 0;
    for (let i = sizes.length - 1; i >= 0; i--) {
      this.offsets[i] = off;
      off += sizes[i];
    }
    this.total = off + 1;
    this.reused = reuse ? new Float32Array(this.total) : undefined;
  }

  /** Floats in the buffer: every gradient and the loss. */
  get length(): number {
    return this.total;
  }

  next(): Float32Array {
    return this.reused ?? new Float32Array(this.total);
  }

  put(buf: Float32Array, i: number, values: Float32Array): void {
    if (values.length !== this.sizes[i]) throw new Error(`gradient ${i} has ${values.length} values, its variable ${this.sizes[i]}`);
    buf.set(values, this.offsets[i]);
  }

  view(buf: Float32Array, i: number): Float32Array {
    return buf.subarray(this.offsets[i], this.offsets[i] + this.sizes[i]);
  }

  /** Every piece of the layout, in buffer order: [start, size, index] (index -1: the loss). */
  pieces(): [number, number, number][] {
    const out: [number, number, number][] = this.sizes.map((size, i) => [this.offsets[i], size, i]);
    out.sort((a, b) => a[0] - b[0]);
    out.push([this.total - 1, 1, -1]);
    return out;
  }
}

/**
 * Reads a step's gradients (`grads[i]` for variable i) and its loss into `buf`, laid out by
 * `flat`; resolves with the loss. Disposes nothing: the caller owns the tensors.
 * `bucketFloats`: the size of the ring's buckets, one device read each (on webgpu, through
 * reads.ts's `concatValues`: the bucket's pieces joined on the GPU, then one `data()`).
 */
export async function readGradients(tf: Tf, flat: GradientBuffer, grads: readonly Tensor[], loss: Tensor, buf: Float32Array, bucketFloats: number): Promise<number> {
  if (buf.length !== flat.length) throw new Error(`the gradient buffer has ${buf.length} floats, the layout ${flat.length}`);
  if (readsSync(tf)) {
    grads.forEach((g, i) => flat.put(buf, i, g.dataSync() as Float32Array));
    buf[buf.length - 1] = loss.dataSync()[0];
    return buf[buf.length - 1];
  }
  const per = Math.max(1, Math.floor(bucketFloats));
  const pieces = flat.pieces();
  const reads: Promise<void>[] = [];
  for (let start = 0; start < flat.length; start += per) {
    const end = Math.min(flat.length, start + per);
    const parts: Tensor[] = [];
    const cut: Tensor[] = [];
    for (const [at, size, i] of pieces) {
      if (at + size <= start || at >= end) continue;
      const t = i < 0 ? loss : grads[i];
      if (t.size !== size) throw new Error(`gradient ${i} has ${t.size} values, its variable ${size}`);
      const from = Math.max(start, at) - at;
      const to = Math.min(end, at + size) - at;
      if (from === 0 && to === size) {
        parts.push(t);
      } else {
        const piece = tf.tidy(() => tf.slice(tf.reshape(t, [size]), from, to - from));
        cut.push(piece);
        parts.push(piece);
      }
    }
    // concatValues issues its concat and its read before its first await: every bucket's read is in flight at once.
    reads.push(concatValues(tf, parts).then((values) => {
      if (values.length !== end - start) throw new Error(`read ${values.length} gradient values for a bucket of ${end - start}`);
      buf.set(values, start);
    }).finally(() => tf.dispose(cut)));
  }
  await Promise.all(reads);
  return buf[buf.length - 1];
}

/** Hands the averaged gradients in `buf` to the optimizer as tensors of their variables' shapes. */
export function applyFlat(tf: Tf, optimizer: Optimizer, vars: readonly Variable[], flat: GradientBuffer, buf: Float32Array): void {
  const averaged = vars.map((v, i) => ({ name: v.name, tensor: tf.tensor(flat.view(buf, i), v.shape) }));
  optimizer.applyGradients(averaged);
  tf.dispose(averaged.map((a) => a.tensor));
}

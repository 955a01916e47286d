/**
 * Tensor uploads on the webgpu backend through `queue.writeBuffer`, not a fresh mapped buffer.
 *
 * tfjs-backend-webgpu 4.22 uploads a tensor that has CPU values (a batch, and every number an
 * op turns into a scalar tensor: Adam's `1 - beta1`, `epsilon`, the learning rate, ...) by
 * creating a MAP_WRITE staging buffer for it (`acquireBuffer(..., reuse = false)`), copying it
 * into the tensor's buffer and destroying it after the submit. Measured on an NVIDIA H100 with
 * Dawn and driver 580 (2026-11-26, bench/webgpu/latency.ts): an Adam step of the 784-512-512-10
 * MLP made 43 such buffers and took 51 ms; the same step with SGD made 5 and took 9.6 ms for 55
 * of its 127 dispatches: about 0.75 ms per staging buffer, most of the step, all of it CPU time.
 *
 * `queue.writeBuffer` hands the bytes to Dawn, which copies them through its own staging ring:
 * no buffer is made or destroyed. It is ordered before every command buffer submitted after it.
 * The target is safe to write at once: a buffer fresh from the pool is referenced by no command
 * still being recorded (tfjs releases a tensor's buffer to the pool only after the submit of the
 * commands that use it), and commands already submitted run before the write.
 */

/** The parts of tfjs-backend-webgpu's WebGPUBackend this touches (4.22). */
interface TensorData { values: ArrayLike<number> | null; dtype: string; shape: number[]; resource: unknown }
interface Backend {
  tensorMap: { get(dataId: object): TensorData | undefined };
  bufferManager: { acquireBuffer(size: number, usage: number): { size: number } };
  queue: { writeBuffer(buffer: unknown, offset: number, data: ArrayBufferView): void };
  uploadToGPU(dataId: object): void;
}

/** The usage tfjs gives a tensor's buffer (backend_webgpu.js, uploadToGPU). */
function tensorUsage(): number {
  const u = (globalThis as { GPUBufferUsage?: { STORAGE: number; COPY_SRC: number; COPY_DST: number } }).GPUBufferUsage;
  if (!u) throw new Error('GPUBufferUsage is not defined: dawn.node\'s globals are not loaded');
  return u.STORAGE | u.COPY_SRC | u.COPY_DST;
}

/**
 * Replaces `backend.uploadToGPU` by one that writes through `queue.writeBuffer`, for float32,
 * int32 and bool tensors (what training uploads); any other dtype goes the shipped way.
 * Returns the shipped method, to put back.
 */
export function uploadThroughWriteBuffer(backend: object): (dataId: object) => void {
  const b = backend as Backend;
  if (typeof b.uploadToGPU !== 'function' || !b.tensorMap || !b.bufferManager || !b.queue) {
    throw new Error('tfjs-backend-webgpu\'s WebGPUBackend has changed: uploadToGPU, tensorMap, bufferManager or queue is missing');
  }
  const shipped = b.uploadToGPU.bind(b);
  const usage = tensorUsage();
  b.uploadToGPU = (dataId: object) => {
    const data = b.tensorMap.get(dataId);
    if (!data || data.resource != null) return; // unknown here, or already on the GPU
    const values = data.values;
    if (values == null || !(data.dtype === 'float32' || data.dtype === 'int32' || data.dtype === 'bool')) {
      shipped(dataId);
      return;
    }
    const count = data.shape.reduce((a, d) => a * d, 1);
    const view = data.dtype === 'float32'
      ? (values instanceof Float32Array ? values : Float32Array.from(values))
      : (values instanceof Int32Array ? values : Int32Array.from(values));
    if (view.length !== count) {
      shipped(dataId); // not the layout tfjs would upload: leave it to tfjs
      return;
    }
    const buffer = b.bufferManager.acquireBuffer(count * 4, usage);
    if (count > 0) b.queue.writeBuffer(buffer, 0, view);
    data.values = null; // once uploaded, the values live on the GPU only (as tfjs does)
    data.resource = buffer;
  };
  return shipped;
}

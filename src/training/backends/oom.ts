/**
 * Out of memory, as each backend says it, and a guard for the one that does not say it.
 *
 * - tfjs-node-gpu / tfjs-node (libtensorflow): `ResourceExhaustedError: OOM when allocating
 *   tensor with shape[...]` ("Resource exhausted" in some builds).
 * - cpu backend: V8's `RangeError: Array buffer allocation failed` or `Invalid typed array length`.
 * - wasm backend: its heap grows up to 4 GiB - 64 KiB (`getHeapMax()` of tfjs-backend-wasm 4.22).
 *   Its allocator (emscripten's dlmalloc over `sbrk`) fails in two ways there, neither checked by
 *   the backend: `malloc` returns 0 when the heap cannot grow enough, and — the one that bit
 *   batch 8 of test/fixtures/jobs/big-activations.job.json — when the top of the heap plus the
 *   request passes 2^32 the 32-bit break pointer wraps around, `sbrk` sees a "new top" below
 *   the heap's size, grows nothing and hands out a block that runs past the end of the address
 *   space (measured: malloc(512 MiB) = 3,825,304,008 in a 3.91 GiB heap) and the break now
 *   points into live memory. The job then dies of whatever touches it first: V8's
 *   `RangeError: Invalid typed array length` where JS views the tensor, `RuntimeError: memory
 *   access out of bounds` where a kernel writes it, or it trains on corrupted memory.
 *   `guardWasmHeap` checks every tensor allocation for both and throws an `OutOfMemoryError`
 *   at the one that did not fit; allocations inside kernels (XNNPACK's own) cannot be wrapped
 *   from JS, so `wasmCrashAsOutOfMemory` reads a wasm trap with the heap within one allocation
 *   of its maximum as out of memory, naming the heap.
  */
import type { Tf } from './types';

/** Words that mean a process ran out of memory, in the messages of the backends (and of `guardWasmHeap`). */
const oomPattern = /out of memory|\bOOM\b|failed to allocate|Cannot enlarge memory|Array buffer allocation failed|Invalid typed array length|Resource ?exhausted/i;

export function isOutOfMemory(message: string): boolean {
  return oomPattern.test(message);
}

export class OutOfMemoryError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'OutOfMemoryError';
  }
}

/** The most the wasm backend's heap can grow to (tfjs-backend-wasm's `getHeapMax()`). */
export const wasmHeapMaxBytes = 4294901760;

const gib = (bytes: number) => `${(bytes / 2 ** 30).toFixed(2)} GiB`;

interface WasmModule {
  _malloc: (bytes: number) => number;
  HEAPU8: Uint8Array;
  asm?: { malloc?: (bytes: number) => number };
  gwHeapGuard?: true;
  /** The largest tensor allocation the guard has seen, in bytes. */
  gwLargest?: number;
}

function wasmModule(tf: Tf): WasmModule | undefined {
  if (tf.getBackend() !== 'wasm') return undefined;
  return (tf.backend() as unknown as { wasm?: WasmModule }).wasm;
}

/**
 * On the wasm backend: every allocation that the heap cannot hold throws an `OutOfMemoryError`
 * naming the size and the heap, instead of handing out address 0 or a block past the end of
 * the heap. Does nothing on other backends; installing it twice is harmless.
 */
export function guardWasmHeap(tf: Tf): void {
  const wasm = wasmModule(tf);
  if (!wasm || wasm.gwHeapGuard) return;
  // Module._malloc starts as a stub that replaces itself with asm.malloc on its first call: wrap the real one.
  const malloc = wasm.asm?.malloc ?? wasm._malloc;
  wasm._malloc = (bytes: number) => {
    wasm.gwLargest = Math.max(wasm.gwLargest ?? 0, bytes);
    // malloc takes a 32-bit size: 4 GiB would wrap around to a few bytes.
    const at = bytes > wasmHeapMaxBytes ? 0 : malloc(bytes) >>> 0;
    // A block must lie inside the heap (which malloc may just have grown): one that ends past it came from a wrapped break pointer.
    if (bytes > 0 && (at === 0 || at + bytes > wasm.HEAPU8.length)) throw new OutOfMemoryError(`out of memory: the wasm heap (${gib(wasm.HEAPU8.length)} of its ${gib(wasmHeapMaxBytes)} maximum) cannot hold another ${gib(bytes)} tensor`);
    return at;
  };
  wasm.gwHeapGuard = true;
}

/** How close to its maximum the heap must be for a wasm trap to be read as out of memory: one allocation (the largest seen), at least 256 MiB. */
export function wasmOomMargin(largestAllocation = 0): number {
  return Math.max(largestAllocation, 256 * 2 ** 20);
}

/**
 * A wasm trap (`RuntimeError: memory access out of bounds`, `unreachable`) with the heap at
 * `heapBytes`: out of memory when the heap is within `margin` of its maximum (an allocation
 * inside a kernel failed or wrapped, see the module comment), a real error otherwise.
 * Returns the message to report, or undefined when it is not out of memory.
 */
export function classifyWasmTrap(message: string, heapBytes: number | undefined, margin = wasmOomMargin()): string | undefined {
  if (heapBytes === undefined || !/^RuntimeError: /.test(message)) return undefined;
  if (heapBytes < wasmHeapMaxBytes - margin) return undefined;
  return `out of memory: the wasm heap is full (${gib(heapBytes)} of its ${gib(wasmHeapMaxBytes)} maximum) and the backend crashed allocating inside a kernel (${message})`;
}

/**
 * What a worker reports for `err`: an `OutOfMemoryError` in place of a wasm trap that
 * `classifyWasmTrap` reads as out of memory (on `tf`'s heap), else `err` itself.
 */
export function wasmCrashAsOutOfMemory(tf: Tf | undefined, err: unknown): unknown {
  // WebAssembly.RuntimeError (the lib here has no WebAssembly types): the only RuntimeError there is.
  if (!tf || !(err instanceof Error) || err.name !== 'RuntimeError') return err;
  const wasm = wasmModule(tf);
  const oom = classifyWasmTrap(`RuntimeError: ${err.message}`, wasm?.HEAPU8.length, wasmOomMargin(wasm?.gwLargest));
  return oom ? new OutOfMemoryError(oom) : err;
}

/**
 * Out of memory, as each backend says it, and a guard for the one that does not say it.
 *
 * - tfjs-node-gpu / tfjs-node (libtensorflow): `ResourceExhaustedError: OOM when allocating
 *   tensor with shape[...]` ("Resource exhausted" in some builds).
 * - cpu backend: V8's `RangeError: Array buffer allocation failed` or `Invalid typed array length`.
 * - wasm backend: its heap grows up to 4 GiB - 64 KiB (`getHeapMax()` of tfjs-backend-wasm 4.22)
 *   and then `malloc` returns 0, which the backend does not check: the tensor is placed at
 *   address 0 and overwrites the heap, and the job dies later of whatever broke first (measured
 *   here: `RuntimeError: memory access out of bounds` inside the next `malloc`, or inside
 *   `disposeData`), or trains on corrupted memory. `guardWasmHeap` turns that null pointer into
 *   an `OutOfMemoryError` at the allocation that did not fit.
 */
import type { Tf } from './backend';

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
}

/**
 * On the wasm backend: every allocation that the heap cannot hold throws an `OutOfMemoryError`
 * naming the size and the heap, instead of handing out address 0. Does nothing on other backends;
 * installing it twice is harmless.
 */
export function guardWasmHeap(tf: Tf): void {
  if (tf.getBackend() !== 'wasm') return;
  const wasm = (tf.backend() as unknown as { wasm?: WasmModule }).wasm;
  if (!wasm || wasm.gwHeapGuard) return;
  // Module._malloc starts as a stub that replaces itself with asm.malloc on its first call: wrap the real one.
  const malloc = wasm.asm?.malloc ?? wasm._malloc;
  wasm._malloc = (bytes: number) => {
    // malloc takes a 32-bit size: 4 GiB would wrap around to a few bytes.
    const at = bytes > wasmHeapMaxBytes ? 0 : malloc(bytes);
    if (at === 0 && bytes > 0) throw new OutOfMemoryError(`out of memory: the wasm heap (${gib(wasm.HEAPU8.length)} of its ${gib(wasmHeapMaxBytes)} maximum) cannot hold another ${gib(bytes)} tensor`);
    return at;
  };
  wasm.gwHeapGuard = true;
}

import type { BackendWasm } from '@tensorflow/tfjs-backend-wasm';
import { getKernel, type KernelFunc, type NamedAttrMap, type TensorInfo } from '@tensorflow/tfjs-core';

/**
 * Helpers shared by our wasm kernels: typed views on the wasm heap and calls into the
 * kernels the wasm backend ships.
 *
 * A view from `heapView` is only valid until the next allocation on the wasm heap: a
 * `makeOutput` or a shipped kernel may grow the memory and detach the old buffer. Every
 * kernel here therefore allocates first and takes its views last.
 */

export function asWasmBackend(backend: unknown, kernelName: string): BackendWasm {
  const b = backend as Partial<BackendWasm> | null;
  if (b == null || b.dataIdMap == null || b.wasm == null || typeof b.makeOutput !== 'function') {
    throw new Error(`${kernelName} (GPU Workbench wasm kernel) was called with a backend that is not the wasm backend.`);
  }
  return b as BackendWasm;
}

export function f32View(backend: BackendWasm, info: TensorInfo): Float32Array {
  if (info.dtype !== 'float32') {
    throw new Error(`expected a float32 tensor, got ${info.dtype}`);
  }
  return backend.typedArrayFromHeap(info) as Float32Array;
}

export function numericView(backend: BackendWasm, info: TensorInfo): Float32Array | Int32Array | Uint8Array {
  return backend.typedArrayFromHeap(info);
}

/**
 * Kernels the wasm backend shipped, saved before we replace any of them, so that our
 * replacements can delegate to the originals and `unregisterWasmKernels` can restore them.
 */
const shipped = new Map<string, KernelFunc>();

export function rememberShipped(kernelName: string, kernelFunc: KernelFunc): void {
  if (!shipped.has(kernelName)) {
    shipped.set(kernelName, kernelFunc);
  }
}

/** The kernel the wasm backend shipped under this name (the saved original where we replaced it). */
export function shippedKernel(kernelName: string): KernelFunc {
  const saved = shipped.get(kernelName);
  if (saved != null) {
    return saved;
  }
  const config = getKernel(kernelName, 'wasm');
  if (config == null) {
    throw new Error(`The wasm backend has no '${kernelName}' kernel: import '@tensorflow/tfjs-backend-wasm' before registering GPU Workbench's wasm kernels.`);
  }
  return config.kernelFunc;
}

export function runShipped(kernelName: string, backend: BackendWasm, inputs: Record<string, TensorInfo | undefined>, attrs: NamedAttrMap = {}): TensorInfo {
  const out = shippedKernel(kernelName)({ inputs, backend, attrs });
  if (Array.isArray(out)) {
    throw new Error(`wasm kernel ${kernelName} returned ${out.length} outputs where one was expected`);
  }
  return out;
}

/** Transposes with the wasm backend's own Transpose kernel. */
export function wasmTranspose(backend: BackendWasm, x: TensorInfo, perm: number[]): TensorInfo {
  return runShipped('Transpose', backend, { x }, { perm });
}

/** Swaps the last two axes: the transposed operand of a matMul, materialised once. */
export function transposeLastTwo(backend: BackendWasm, x: TensorInfo): TensorInfo {
  const rank = x.shape.length;
  const perm = [...Array(rank).keys()];
  perm[rank - 2] = rank - 1;
  perm[rank - 1] = rank - 2;
  return wasmTranspose(backend, x, perm);
}

/** The same data under another shape of equal size; no copy, the caller keeps ownership. */
export function aliasShape(x: TensorInfo, shape: number[]): TensorInfo {
  return { dataId: x.dataId, shape, dtype: x.dtype };
}

/** The backend's WebAssembly.Memory (its heap), for modules of ours that work on it in place. */
export function heapMemory(backend: BackendWasm): object | undefined {
  return (backend.wasm as { asm?: { memory?: object } }).asm?.memory;
}

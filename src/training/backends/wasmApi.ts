/**
 * What our hand-written WebAssembly modules (simdAdd, simdUpdate, backends/gemm) need of the
 * WebAssembly API, which this project's TypeScript libs do not declare, and the one way they
 * run over the wasm backend's heap: a module compiled once, instantiated once per
 * WebAssembly.Memory it imports as `env.mem`.
 */
export interface WasmApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports?: object) => { exports: unknown };
  validate(bytes: Uint8Array): boolean;
}

export const wasmApi: WasmApi | undefined = (globalThis as { WebAssembly?: WasmApi }).WebAssembly;

/**
 * A module's exports over each memory it is given. `compile` answers the compiled module, or
 * undefined where it cannot run (no SIMD, no relaxed SIMD): then nothing is cached, so a later
 * call may compile after all. A memory the instance cannot import (the threaded build's shared
 * memory) is remembered as unusable.
 */
export class ModuleOverMemory<T> {
  private readonly instances = new WeakMap<object, T | null>();

  constructor(private readonly compile: () => object | undefined) {}

  exportsFor(memory: object | undefined): T | undefined {
    if (memory == null || !wasmApi) return undefined;
    const cached = this.instances.get(memory);
    if (cached !== undefined) return cached ?? undefined;
    const module = this.compile();
    if (!module) return undefined;
    let instance: T | null;
    try {
      instance = new wasmApi.Instance(module, { env: { mem: memory } }).exports as T;
    } catch {
      instance = null;
    }
    this.instances.set(memory, instance);
    return instance ?? undefined;
  }
}

/**
 * Our float32 GEMM (see wat.ts for the WebAssembly text and why) run over the wasm backend's
 * own memory: no copies in or out, B packed into a scratch block of that heap.
 *
 * It needs relaxed SIMD (`f32x4.relaxed_madd`, part of WebAssembly 3.0): on by default in V8
 * 11.4+ (Node 22, every VS Code since 2023), behind `--experimental-wasm-relaxed-simd` in Node
 * 20's V8 11.3, which a worker turns on for itself before compiling the module (see
 * `relaxedSimdAvailable`). Where it cannot run, `gemmKernelsFor` answers undefined and matMul
 * keeps the shipped XNNPACK path.
 */
import { setFlagsFromString } from 'node:v8';
import { ModuleOverMemory, wasmApi as api } from '../wasmApi';
import { gemmModuleBase64 } from './gemmModule';

export interface GemmKernels {
  /** Packs opB (element (k, j) at b + k·rs + j·cs, bytes) into panels of 8 columns at dst: K·⌈N/8⌉·8 floats. */
  packB(b: number, rs: number, cs: number, K: number, N: number, dst: number): void;
  /** C[M×N] (rows ldc bytes apart) = opA·B (+ bias) (relu if relu ≠ 0); opA(i, k) at a + i·ars + k·acs; bias 0 or ⌈N/8⌉·8 floats; tile: 128 bytes of scratch. */
  gemm(a: number, ars: number, acs: number, bp: number, c: number, ldc: number, M: number, K: number, N: number, bias: number, relu: number, tile: number): void;
  /** The transposed im2col matrix [fh·fw·inC, (b1-b0)·outH·outW] of images b0..b1-1 of the NHWC input at x, written at col. */
  im2colT(x: number, col: number, b0: number, b1: number, inH: number, inW: number, inC: number, outH: number, outW: number, fh: number, fw: number, sh: number, sw: number, top: number, left: number): void;
}

/** Packed B per call at most (floats), so that a huge layer does not double its weights' memory: 1M floats (4 MB) unless a test says otherwise. */
let blockBudget = 1 << 20;

export function setGemmBlockBudget(floats: number): void {
  blockBudget = floats;
}

/** Columns of B packed at a time: whole panels of 8, as many as the budget holds at depth K. */
export function gemmBlockColumns(K: number, N: number): number {
  const panels = Math.max(1, Math.floor(blockBudget / (8 * Math.max(1, K))));
  return Math.min(Math.ceil(N / 8) * 8, panels * 8);
}

/** Floats of scratch a call needs: one packed block of B, one edge tile, the bias padded to whole panels. */
export function gemmScratchFloats(K: number, N: number): number {
  const n8 = Math.ceil(N / 8) * 8;
  return K * gemmBlockColumns(K, N) + 32 + n8;
}

let bytes: Uint8Array | undefined;
let compiled: object | undefined;
let failed = false;
/** GPU_WORKBENCH_WASM_GEMM=xnnpack: none of this module in any worker: the wasm backend's own matMul, and the JS im2col (a way out, and the benchmark's anchor). */
export const gemmOffByEnvironment = process.env.GPU_WORKBENCH_WASM_GEMM === 'xnnpack';
let enabled = !gemmOffByEnvironment;

function moduleBytes(): Uint8Array {
  bytes ??= new Uint8Array(Buffer.from(gemmModuleBase64, 'base64'));
  return bytes;
}

/**
 * Whether this process can compile the GEMM. With `enable`, a Node whose V8 has relaxed SIMD
 * only behind its flag (Node 20) gets the flag first: a worker process calls this before its
 * first matMul. The extension host never does (its Electron has it on by default).
 */
export function relaxedSimdAvailable(enable = false): boolean {
  if (!api) return false;
  if (api.validate(moduleBytes())) return true;
  if (!enable) return false;
  const v8 = /^(\d+)\.(\d+)/.exec(process.versions.v8 ?? '');
  // The flag exists from V8 9.x until relaxed SIMD shipped (11.4); asking another V8 for it would only print a warning.
  if (!v8 || Number(v8[1]) < 10 || Number(v8[1]) > 11) return false;
  setFlagsFromString('--experimental-wasm-relaxed-simd');
  failed = false;
  return api.validate(moduleBytes());
}

/** Turns our GEMM off (matMul goes back to the shipped XNNPACK path) or on again: for benchmarks and tests. */
export function useOurGemm(on: boolean): void {
  enabled = on;
}

function compiledModule(): object | undefined {
  if (compiled || failed || !api) return compiled;
  try {
    if (relaxedSimdAvailable()) compiled = new api.Module(moduleBytes());
    else failed = true;
  } catch {
    failed = true;
  }
  return compiled;
}

const kernels = new ModuleOverMemory<GemmKernels>(compiledModule);

/** The GEMM over `memory` (the wasm backend's WebAssembly.Memory), or undefined where it cannot run. */
export function gemmKernelsFor(memory: object | undefined): GemmKernels | undefined {
  return enabled ? kernels.exportsFor(memory) : undefined;
}

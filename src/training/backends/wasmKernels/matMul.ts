import type { BackendWasm } from '@tensorflow/tfjs-backend-wasm';
import { backend_util, BatchMatMul, _FusedMatMul, type KernelConfig, type KernelFunc, type NamedAttrMap, type TensorInfo } from '@tensorflow/tfjs-core';
import { gemmBlockColumns, gemmKernelsFor, gemmScratchFloats, type GemmKernels } from '../gemm';
import { asWasmBackend, heapMemory, runShipped, transposeLastTwo } from './wasmData';

/**
 * float32 matMul on the wasm backend, two ways:
 * - Ours (../gemm): relaxed-SIMD FMA tiles over the backend's own heap, transposed operands read
 *   in place; ~1.4-2x XNNPACK's rate on the MLP's shapes here. Used for float32 with any
 *   transposes and a bias of one value per column (or one value); relu is applied in the tiles,
 *   the other fused activations by the shipped element-wise kernel after. Every Dense layer's
 *   forward and backward.
 * - The shipped XNNPACK kernel otherwise, or where relaxed SIMD is missing. It is fast only on
 *   untransposed operands (~20 GFLOP/s here; a naive 1-2 GFLOP/s loop when either is transposed,
 *   as every backward matMul is), so a transposed operand is first materialised with the wasm
 *   Transpose kernel (O(n²), ~1 ms for 512×784). That also keeps clear of a shipped bug:
 *   tfjs-backend-wasm 4.22's _FusedMatMul with transposeB and a bias gives wrong values.
 */
interface MatMulAttrs { transposeA?: boolean; transposeB?: boolean; activation?: string }

function untransposed(kernelName: string, wasm: BackendWasm, inputs: Record<string, TensorInfo | undefined>, attrs: NamedAttrMap | undefined): TensorInfo {
  const a = inputs.a as TensorInfo;
  const b = inputs.b as TensorInfo;
  const at = (attrs ?? {}) as NamedAttrMap & MatMulAttrs;
  const transposeA = at.transposeA === true && a.dtype === 'float32';
  const transposeB = at.transposeB === true && b.dtype === 'float32';
  if (!transposeA && !transposeB) return runShipped(kernelName, wasm, inputs, attrs);
  const a2 = transposeA ? transposeLastTwo(wasm, a) : a;
  const b2 = transposeB ? transposeLastTwo(wasm, b) : b;
  try {
    return runShipped(kernelName, wasm, { ...inputs, a: a2, b: b2 }, {
      ...attrs,
      transposeA: at.transposeA === true && !transposeA,
      transposeB: at.transposeB === true && !transposeB,
    });
  } finally {
    if (a2 !== a) wasm.disposeData(a2.dataId);
    if (b2 !== b) wasm.disposeData(b2.dataId);
  }
}

const size = (shape: readonly number[]) => shape.reduce((p, d) => p * d, 1);

/** C = opA·opB (+ bias) (relu) with our GEMM, or undefined where it does not apply (the caller takes the shipped path). */
function ourMatMul(gemm: GemmKernels, wasm: BackendWasm, a: TensorInfo, b: TensorInfo, at: MatMulAttrs, bias?: TensorInfo): TensorInfo | undefined {
  if (a.dtype !== 'float32' || b.dtype !== 'float32' || a.shape.length < 2 || b.shape.length < 2) return undefined;
  const relu = at.activation === 'relu';
  if (at.activation !== undefined && at.activation !== 'linear' && !relu) return undefined;
  const ra = a.shape.length;
  const rb = b.shape.length;
  const [M, K] = at.transposeA ? [a.shape[ra - 1], a.shape[ra - 2]] : [a.shape[ra - 2], a.shape[ra - 1]];
  const [Kb, N] = at.transposeB ? [b.shape[rb - 1], b.shape[rb - 2]] : [b.shape[rb - 2], b.shape[rb - 1]];
  if (K !== Kb || M === 0 || N === 0 || K === 0) return undefined; // the shipped kernel names a mismatch
  if (bias && (bias.dtype !== 'float32' || !(size(bias.shape) === 1 || (size(bias.shape) === N && bias.shape[bias.shape.length - 1] === N)))) return undefined;
  const batchA = size(a.shape.slice(0, -2));
  const batchB = size(b.shape.slice(0, -2));
  let outBatch: number[];
  try {
    outBatch = backend_util.assertAndGetBroadcastShape(a.shape.slice(0, -2), b.shape.slice(0, -2));
  } catch {
    return undefined;
  }
  const batch = size(outBatch);
  if (!((batchA === batch || batchA === 1) && (batchB === batch || batchB === 1))) return undefined;

  const out = wasm.makeOutput([...outBatch, M, N], 'float32');
  let scratch: TensorInfo;
  try {
    scratch = wasm.makeOutput([gemmScratchFloats(K, N)], 'float32');
  } catch (err) {
    wasm.disposeData(out.dataId); // out of memory for the scratch: give the output back too
    throw err;
  }
  try {
    // Allocation is over: addresses from here on stay valid.
    const n8 = Math.ceil(N / 8) * 8;
    const block = gemmBlockColumns(K, N);
    const packed = wasm.getMemoryOffset(scratch.dataId);
    const tile = packed + K * block * 4;
    const biasAt = tile + 128;
    if (bias) {
      const padded = new Float32Array(n8);
      const values = wasm.typedArrayFromHeap(bias) as Float32Array;
      if (values.length === 1) padded.fill(values[0], 0, N);
      else padded.set(values);
      (wasm.typedArrayFromHeap(scratch) as Float32Array).set(padded, (biasAt - packed) / 4);
    }
    const aAt = wasm.getMemoryOffset(a.dataId);
    const bAt = wasm.getMemoryOffset(b.dataId);
    const cAt = wasm.getMemoryOffset(out.dataId);
    const [ars, acs] = at.transposeA ? [4, M * 4] : [K * 4, 4];
    const [brs, bcs] = at.transposeB ? [4, K * 4] : [N * 4, 4];
    // Column blocks of B (one for every Dense layer up to 1M weights), each packed once for the whole batch where B is shared.
    const shared = batchB === 1;
    for (let j0 = 0; j0 < N; j0 += block) {
      const width = Math.min(block, N - j0);
      for (let t = 0; t < batch; t++) {
        if (t === 0 || !shared) gemm.packB(bAt + (shared ? 0 : t) * K * N * 4 + j0 * bcs, brs, bcs, K, width, packed);
        gemm.gemm(aAt + (batchA > 1 ? t : 0) * M * K * 4, ars, acs, packed, cAt + (t * M * N + j0) * 4, N * 4, M, K, width, bias ? biasAt + j0 * 4 : 0, relu ? 1 : 0, tile);
      }
    }
  } catch (err) {
    wasm.disposeData(out.dataId);
    throw err;
  } finally {
    wasm.disposeData(scratch.dataId);
  }
  return out;
}

/** One float32 matMul on the wasm backend by the fastest path it has (for our other kernels too). */
export function wasmMatMul(wasm: BackendWasm, a: TensorInfo, b: TensorInfo, transposeA = false, transposeB = false): TensorInfo {
  const gemm = gemmKernelsFor(heapMemory(wasm));
  return (gemm && ourMatMul(gemm, wasm, a, b, { transposeA, transposeB })) ?? untransposed(BatchMatMul, wasm, { a, b }, { transposeA, transposeB });
}

/** The shipped kernel that applies a fused activation other than relu after our GEMM. */
const activationKernels: Record<string, string> = { elu: 'Elu', relu6: 'Relu6', sigmoid: 'Sigmoid', leakyrelu: 'LeakyRelu', prelu: 'Prelu' };

function matMulKernel(kernelName: string): KernelFunc {
  return ({ inputs, backend, attrs }) => {
    const wasm = asWasmBackend(backend, kernelName);
    const gemm = gemmKernelsFor(heapMemory(wasm));
    const a = inputs.a as TensorInfo;
    const b = inputs.b as TensorInfo;
    const at = (attrs ?? {}) as NamedAttrMap & MatMulAttrs & { leakyreluAlpha?: number };
    if (!gemm) return untransposed(kernelName, wasm, inputs, attrs);
    if (kernelName === BatchMatMul) return ourMatMul(gemm, wasm, a, b, { transposeA: at.transposeA, transposeB: at.transposeB }) ?? untransposed(kernelName, wasm, inputs, attrs);
    const activation = at.activation ?? 'linear';
    const then = activationKernels[activation];
    if (activation !== 'linear' && activation !== 'relu' && then === undefined) return untransposed(kernelName, wasm, inputs, attrs);
    const product = ourMatMul(gemm, wasm, a, b, { transposeA: at.transposeA, transposeB: at.transposeB, activation: then ? 'linear' : activation }, inputs.bias);
    if (!product || !then) return product ?? untransposed(kernelName, wasm, inputs, attrs);
    // Elu, Relu6, Sigmoid, LeakyRelu, Prelu: the shipped element-wise kernel on our product.
    try {
      return activation === 'prelu'
        ? runShipped(then, wasm, { x: product, alpha: inputs.preluActivationWeights }, {})
        : runShipped(then, wasm, { x: product }, activation === 'leakyrelu' ? { alpha: at.leakyreluAlpha ?? 0.2 } : {});
    } finally {
      wasm.disposeData(product.dataId);
    }
  };
}

export const batchMatMulConfig: Omit<KernelConfig, 'setupFunc' | 'disposeFunc'> = {
  kernelName: BatchMatMul,
  backendName: 'wasm',
  kernelFunc: matMulKernel(BatchMatMul),
};

export const fusedMatMulConfig: Omit<KernelConfig, 'setupFunc' | 'disposeFunc'> = {
  kernelName: _FusedMatMul,
  backendName: 'wasm',
  kernelFunc: matMulKernel(_FusedMatMul),
};

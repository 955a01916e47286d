import { BatchMatMul, _FusedMatMul, type KernelConfig, type KernelFunc, type NamedAttrMap, type TensorInfo } from '@tensorflow/tfjs-core';
import { asWasmBackend, runShipped, transposeLastTwo } from './wasmData';

/**
 * The wasm backend multiplies untransposed float32 matrices with XNNPACK (~20 GFLOP/s
 * here) but falls back to a naive loop when either operand is transposed (1-2 GFLOP/s),
 * and every backward pass of a dense layer asks for `dy·Wᵀ` and `xᵀ·dy`. Transposing
 * the operand once with the wasm Transpose kernel (O(n²), ~1 ms for 512×784) and then
 * taking the fast path is an order of magnitude faster.
 */
function untransposed(kernelName: string): KernelFunc {
  return ({ inputs, backend, attrs }) => {
    const a = inputs.a as TensorInfo;
    const b = inputs.b as TensorInfo;
    const at = (attrs ?? {}) as NamedAttrMap & { transposeA?: boolean; transposeB?: boolean };
    const wasm = asWasmBackend(backend, kernelName);
    const transposeA = at.transposeA === true && a.dtype === 'float32';
    const transposeB = at.transposeB === true && b.dtype === 'float32';
    if (!transposeA && !transposeB) {
      return runShipped(kernelName, wasm, inputs, attrs);
    }
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
  };
}

export const batchMatMulConfig: Omit<KernelConfig, 'setupFunc' | 'disposeFunc'> = {
  kernelName: BatchMatMul,
  backendName: 'wasm',
  kernelFunc: untransposed(BatchMatMul),
};

export const fusedMatMulConfig: Omit<KernelConfig, 'setupFunc' | 'disposeFunc'> = {
  kernelName: _FusedMatMul,
  backendName: 'wasm',
  kernelFunc: untransposed(_FusedMatMul),
};

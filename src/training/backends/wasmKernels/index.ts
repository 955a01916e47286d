import { getKernel, registerKernel, unregisterKernel, type KernelConfig } from '@tensorflow/tfjs-core';
import { conv2DBackpropFilterConfig } from './conv2dBackpropFilter';
import { conv2DBackpropInputConfig } from './conv2dBackpropInput';
import { depthwiseBackpropFilterConfig, depthwiseBackpropInputConfig } from './depthwiseConv2dBackprop';
import { gatherV2Config } from './gatherV2';
import { batchMatMulConfig, fusedMatMulConfig } from './matMul';
import { maxPoolGradConfig } from './maxPoolGrad';
import { samePaddingConfigs } from './samePadding';
import { unsortedSegmentSumConfig } from './unsortedSegmentSum';
import { rememberShipped } from './wasmData';

/**
 * Kernels that make the TF.js wasm backend (4.22) able to train, and train fast.
 *
 * Added — gradients the wasm backend does not ship, found by profiling the training of
 * dense, conv, depthwise/separable, conv1d/deconv and embedding/RNN models on cpu:
 *   Conv2DBackpropFilter (every Conv1D/Conv2D/Conv2DTranspose layer),
 *   DepthwiseConv2dNativeBackpropFilter / …BackpropInput (DepthwiseConv2D, SeparableConv2D),
 *   UnsortedSegmentSum (the gradient of Gather, i.e. Embedding).
 * Replaced — BatchMatMul and _FusedMatMul, which take a naive 1-2 GFLOP/s loop whenever an
 * operand is transposed (every backward matMul); ours transposes once and delegates to the
 * shipped kernel's fast path. The shipped configs are kept and restored by
 * `unregisterWasmKernels`. Also replaced, because the shipped versions are direct loops that
 * dominated a conv net's step once it could train at all: Conv2DBackpropInput (dy·Wᵀ on the
 * shipped matMul, then col2im) and MaxPoolGrad (one pass over x); and GatherV2, which needs
 * ~14 ms to pick one MNIST batch out of a dataset, as `model.fit` does for every batch.
 * Wrapped — Conv2D, FusedConv2D and the depthwise pair: `same` padding handed to the shipped
 * kernels as explicit numbers, since with a non-square filter and a stride above 1 the shipped
 * `same` path computes wrong values (samePadding.ts).
 */
const added: readonly KernelConfig[] = [
  conv2DBackpropFilterConfig,
  depthwiseBackpropFilterConfig,
  depthwiseBackpropInputConfig,
  unsortedSegmentSumConfig,
];
const replaced: readonly Omit<KernelConfig, 'setupFunc' | 'disposeFunc'>[] = [
  batchMatMulConfig, fusedMatMulConfig, conv2DBackpropInputConfig, maxPoolGradConfig, gatherV2Config, ...samePaddingConfigs,
];

/** Names of the kernels this module registers for 'wasm', added or replaced. */
export const wasmKernelNames: readonly string[] = [...added, ...replaced].map((k) => k.kernelName);

const shippedConfigs = new Map<string, KernelConfig>();

function isOurs(config: Pick<KernelConfig, 'kernelName' | 'kernelFunc'>): boolean {
  return getKernel(config.kernelName, 'wasm')?.kernelFunc === config.kernelFunc;
}

/**
 * Registers our kernels for the 'wasm' backend. Call it once `tf.setBackend('wasm')` has
 * resolved (it also works before, as long as '@tensorflow/tfjs-backend-wasm' is imported).
 * Idempotent. A kernel that the wasm backend already ships under an added name is left
 * alone: a later tfjs may bring its own.
 */
export function registerWasmKernels(): void {
  for (const config of replaced) {
    if (isOurs(config)) continue;
    const shipped = getKernel(config.kernelName, 'wasm');
    if (shipped == null) {
      throw new Error(`The wasm backend has no '${config.kernelName}' kernel to speed up: import '@tensorflow/tfjs-backend-wasm' before calling registerWasmKernels().`);
    }
    shippedConfigs.set(config.kernelName, shipped);
    rememberShipped(config.kernelName, shipped.kernelFunc);
    unregisterKernel(config.kernelName, 'wasm');
    // The shipped setup (cwrap of the C++ entry point) must still run when a wasm backend
    // is (re)initialised, since our kernel delegates to the shipped one.
    registerKernel({ ...config, setupFunc: shipped.setupFunc, disposeFunc: shipped.disposeFunc });
  }
  for (const config of added) {
    if (getKernel(config.kernelName, 'wasm') == null) {
      registerKernel(config);
    }
  }
}

/** Puts the wasm backend's kernel registry back as shipped (for benchmarks and tests). */
export function unregisterWasmKernels(): void {
  for (const config of added) {
    if (isOurs(config)) unregisterKernel(config.kernelName, 'wasm');
  }
  for (const config of replaced) {
    const shipped = shippedConfigs.get(config.kernelName);
    if (shipped != null && isOurs(config)) {
      unregisterKernel(config.kernelName, 'wasm');
      registerKernel(shipped);
    }
  }
}

import { getKernel, registerKernel, unregisterKernel, type KernelConfig } from '@tensorflow/tfjs-core';
import { conv2dBackpropFilterConfig, depthwiseBackpropFilterConfig } from './conv2dBackpropFilter';
import { maxPoolGradConfig } from './maxPoolGrad';
import { shippedKernels as shipped } from './shipped';

/**
 * Kernels that route around what tfjs-backend-webgpu (4.22) computes differently from the cpu
 * backend, found by checking every kernel the presets, strategies and optimizers run, forward
 * and backward, against cpu on lavapipe (test/unit/training/backends/webgpu/), or far slower
 * than it need be, found on a real GPU (bench/webgpu/latency.ts --kernels on an H100):
 *   MaxPoolGrad — a tie in a window sends the gradient to its last pixel, not the first (maxPoolGrad.ts).
 *   Conv2DBackpropFilter — one thread per filter element: 98 % of a CNN step's GPU time (conv2dBackpropFilter.ts);
 *   DepthwiseConv2dNativeBackpropFilter — the same loop (same file).
 * The shipped configs are kept and put back by `unregisterWebgpuKernels`.
 */
const replaced: readonly KernelConfig[] = [maxPoolGradConfig, conv2dBackpropFilterConfig, depthwiseBackpropFilterConfig];

/** Names of the kernels this module registers for 'webgpu'. */
export const webgpuKernelNames: readonly string[] = replaced.map((k) => k.kernelName);

function isOurs(config: KernelConfig): boolean {
  return getKernel(config.kernelName, 'webgpu')?.kernelFunc === config.kernelFunc;
}

/**
 * Registers our kernels for the 'webgpu' backend. Call it once '@tensorflow/tfjs-backend-webgpu'
 * is imported (it registers its kernels at import), before or after `tf.setBackend('webgpu')`.
 * Idempotent.
 */
export function registerWebgpuKernels(): void {
  for (const config of replaced) {
    if (isOurs(config)) continue;
    const theirs = getKernel(config.kernelName, 'webgpu');
    if (theirs == null) {
      throw new Error(`The webgpu backend has no '${config.kernelName}' kernel to replace: import '@tensorflow/tfjs-backend-webgpu' before calling registerWebgpuKernels().`);
    }
    shipped.set(config.kernelName, theirs);
    unregisterKernel(config.kernelName, 'webgpu');
    registerKernel(config);
  }
}

/** Puts the webgpu backend's kernels back as shipped (for tests and benchmarks). */
export function unregisterWebgpuKernels(): void {
  for (const config of replaced) {
    const theirs = shipped.get(config.kernelName);
    if (theirs != null && isOurs(config)) {
      unregisterKernel(config.kernelName, 'webgpu');
      registerKernel(theirs);
    }
  }
}

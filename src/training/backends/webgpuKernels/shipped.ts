import type { KernelConfig, KernelFunc } from '@tensorflow/tfjs-core';

/**
 * The webgpu backend's kernels as shipped, kept by index.ts when ours replace them: a kernel of
 * ours hands the cases it does not cover (channels-first convolutions) to the shipped one.
 */
export const shippedKernels = new Map<string, KernelConfig>();

export function shippedKernel(name: string): KernelFunc {
  const config = shippedKernels.get(name);
  if (!config) throw new Error(`The webgpu backend's own '${name}' kernel was not kept: registerWebgpuKernels() replaces it.`);
  return config.kernelFunc;
}

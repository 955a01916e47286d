/**
 * What our fused optimizers (fusedOptimizers.ts on wasm, webgpuKernels/adam.ts on webgpu) read of
 * tfjs's optimizers: the gradients `applyGradients` is handed, and Adam's own state, kept in
 * tfjs's variables so that checkpoints load in either.
 */
import type { Tensor, Variable } from '@tensorflow/tfjs-core';
import type { Tf } from './types';

export type Grads = Parameters<InstanceType<Tf['AdamOptimizer']>['applyGradients']>[0];
export interface Slot { originalName: string; variable: Variable }

/** tfjs's AdamOptimizer's fields (4.22). */
export interface AdamState {
  learningRate: number;
  beta1: number;
  beta2: number;
  epsilon: number;
  accBeta1: Variable;
  accBeta2: Variable;
  accumulatedFirstMoment: Slot[];
  accumulatedSecondMoment: Slot[];
}

/** The variable names of `grads`, in order (a map or a list of named tensors). */
export function names(grads: Grads): string[] {
  return Array.isArray(grads) ? grads.map((g) => g.name) : Object.keys(grads);
}

/** The gradient of the `i`th variable, `name`. */
export function gradientAt(grads: Grads, i: number, name: string): Tensor | undefined {
  return (Array.isArray(grads) ? grads[i]?.tensor : grads[name]) ?? undefined;
}

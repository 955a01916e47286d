/**
 * Adam, SGD and momentum updates done in one pass per variable on the wasm backend.
 *
 * tfjs's own `applyGradients` runs about ten ops per variable for Adam (mul, add, square, div,
 * sqrt, ...), each allocating a full-size tensor on the wasm heap: 10 ms a step for the
 * 784-512-512-10 MLP, a fifth of the step. Here the variable, its slots and the gradient are
 * read as Float32Array views of the wasm heap and updated in place in one loop, with every
 * intermediate rounded to float32 (`Math.fround`) in the order tfjs's ops round it, so the
 * result is the one `tf.train.adam` gives on that backend.
 *
 * The classes extend tfjs's optimizers and keep their state in the same tfjs variables (Adam's
 * `accBeta1/2`, `<name>/m`, `<name>/v`; momentum's `<name>/momentum`), so `getWeights`,
 * `setWeights`, `getClassName` and `dispose` are tfjs's own and checkpoints written by either
 * load in the other. Whenever one step cannot be done here (another backend is active, a
 * tensor lives on another backend, a dtype is not float32, Nesterov momentum) the step is
 * tfjs's `applyGradients` unchanged.
 *
 * The new weights go to a new buffer, as with tfjs's ops, never over the old ones: the wasm
 * backend's matMul (XNNPACK) packs a weight matrix once and keeps the packing under the
 * tensor's id until that id is disposed, so weights changed in place would be multiplied with
 * their stale packed copy. The optimizer's own slots (m, v, momentum) are never a matMul
 * operand and are updated in place; a slot buffer still shared with another tensor (as after
 * `setWeights`, for as long as the tensor handed in lives) is first copied, once.
 */
import type { BackendWasm } from '@tensorflow/tfjs-backend-wasm';
import type { Optimizer, Tensor, TensorInfo, Variable } from '@tensorflow/tfjs-core';
import type { Tf } from './types';
import { gradientAt, names, type AdamState, type Grads, type Slot } from './optimizerState';
import { simdKernelsFor, type UpdateKernels } from './simdUpdate';
import { heapMemory } from './wasmKernels/wasmData';
import { activeWebgpu, createWebgpuAdam } from './webgpuKernels/adam';

/** The wasm backend when it is the active one, else undefined. */
function activeWasm(tf: Tf): BackendWasm | undefined {
  if (tf.getBackend() !== 'wasm') return undefined;
  const b = tf.backend() as Partial<BackendWasm>;
  return b.dataIdMap != null && typeof b.typedArrayFromHeap === 'function' && typeof b.refCount === 'function' ? (b as BackendWasm) : undefined;
}

function onHeap(wasm: BackendWasm, t: Tensor): boolean {
  return t.dtype === 'float32' && !t.isDisposed && wasm.dataIdMap.has(t.dataId);
}

/** Gives `v` a buffer of its own if another tensor shares it (allocates: call before taking views). */
function unshare(tf: Tf, wasm: BackendWasm, v: Variable): void {
  if (wasm.refCount(v.dataId) <= 1) return;
  const copy = tf.tensor(v.dataSync(), v.shape, 'float32');
  v.assign(copy);
  copy.dispose();
}

function view(wasm: BackendWasm, t: TensorInfo): Float32Array {
  return wasm.typedArrayFromHeap(t) as Float32Array;
}

/** The SIMD kernels over the backend's memory, where WebAssembly SIMD runs on it. */
function simdKernels(wasm: BackendWasm): UpdateKernels | undefined {
  return simdKernelsFor(heapMemory(wasm));
}

/** The heap address of a tensor's data. */
function at(wasm: BackendWasm, t: TensorInfo): number {
  return wasm.getMemoryOffset(t.dataId);
}

/** SIMD covers whole vectors of 4 floats; the JS loop (the same arithmetic) does the last `size % 4` from here. */
function simdCount(simd: unknown, size: number): number {
  return simd ? size & ~3 : 0;
}

/** An uninitialised float32 buffer on the wasm heap for each variable's new value (allocates: call before taking views). */
function newBuffers(wasm: BackendWasm, xs: readonly Variable[]): TensorInfo[] {
  return xs.map((x) => wasm.makeOutput(x.shape, 'float32'));
}

/** Makes each buffer its variable's value; the old value is released as `assign` releases it. */
function swapIn(tf: Tf, wasm: BackendWasm, xs: readonly Variable[], buffers: readonly TensorInfo[]): void {
  xs.forEach((x, i) => {
    const t = tf.engine().makeTensorFromTensorInfo(buffers[i], wasm);
    x.assign(t);
    t.dispose();
  });
}

/** Creates the slot variables tfjs would create on its first step: zeros shaped like `value`, not trainable. */
function zerosSlot(tf: Tf, name: string, value: Variable): Slot {
  return { originalName: name, variable: tf.tidy(() => tf.zerosLike(value).variable(false)) };
}

/**
 * One Adam step over float32 arrays (m and v in place, the new weights into `out`): the arithmetic of tfjs's AdamOptimizer, each op
 * rounded to float32. `oma1`/`oma2` are 1 - beta^t in float32, `c1`/`c2` are (1 - beta) in float32.
 */
export function adamStep(x: Float32Array, out: Float32Array, m: Float32Array, v: Float32Array, g: Float32Array, b1: number, b2: number, c1: number, c2: number, oma1: number, oma2: number, eps: number, negLr: number): void {
  const f = Math.fround;
  const n = x.length;
  for (let i = 0; i < n; i++) {
    const gi = g[i];
    const mi = f(f(m[i] * b1) + f(gi * c1));
    const vi = f(f(v[i] * b2) + f(f(gi * gi) * c2));
    m[i] = mi;
    v[i] = vi;
    const mh = f(mi / oma1);
    const vh = f(vi / oma2);
    out[i] = f(f(f(mh / f(f(Math.sqrt(vh)) + eps)) * negLr) + x[i]);
  }
}

/** Adam fused on wasm (here) or on webgpu (webgpuKernels/adam.ts) for the backend active now; tfjs's own elsewhere. */
export function createAdam(tf: Tf, learningRate: number, beta1 = 0.9, beta2 = 0.999, epsilon?: number): Optimizer {
  if (activeWebgpu(tf)) return createWebgpuAdam(tf, learningRate, beta1, beta2, epsilon);
  if (!activeWasm(tf)) return tf.train.adam(learningRate, beta1, beta2, epsilon);
  class FusedAdam extends tf.AdamOptimizer {
    override applyGradients(grads: Grads): void {
      const wasm = activeWasm(tf);
      const self = this as unknown as AdamState;
      const list = names(grads);
      const vars = list.map((name) => tf.engine().registeredVariables[name]);
      if (!wasm || !onHeap(wasm, self.accBeta1) || !onHeap(wasm, self.accBeta2)) return super.applyGradients(grads);
      // Allocations first (slots, private copies): any may grow the heap and detach earlier views.
      const work: { x: Variable; m: Variable; v: Variable; g: Tensor }[] = [];
      for (let i = 0; i < list.length; i++) {
        const x = vars[i];
        if (x == null) return super.applyGradients(grads);
        self.accumulatedFirstMoment[i] ??= zerosSlot(tf, `${list[i]}/m`, x);
        self.accumulatedSecondMoment[i] ??= zerosSlot(tf, `${list[i]}/v`, x);
        const g = gradientAt(grads, i, list[i]);
        if (g == null) continue;
        const m = self.accumulatedFirstMoment[i].variable;
        const v = self.accumulatedSecondMoment[i].variable;
        if (![x, m, v, g].every((t) => onHeap(wasm, t)) || g.size !== x.size) return super.applyGradients(grads);
        work.push({ x, m, v, g });
      }
      for (const w of work) {
        unshare(tf, wasm, w.m);
        unshare(tf, wasm, w.v);
      }
      unshare(tf, wasm, self.accBeta1);
      unshare(tf, wasm, self.accBeta2);
      const xs = work.map((w) => w.x);
      const outs = newBuffers(wasm, xs);
      const f = Math.fround;
      const acc1 = view(wasm, self.accBeta1);
      const acc2 = view(wasm, self.accBeta2);
      const b1 = f(self.beta1);
      const b2 = f(self.beta2);
      const c1 = f(1 - self.beta1);
      const c2 = f(1 - self.beta2);
      const oma1 = f(1 - acc1[0]);
      const oma2 = f(1 - acc2[0]);
      const eps = f(self.epsilon);
      const negLr = f(-self.learningRate);
      const simd = simdKernels(wasm)?.adam;
      work.forEach((w, i) => {
        const done = simdCount(simd, w.x.size);
        simd?.(at(wasm, w.x), at(wasm, outs[i]), at(wasm, w.m), at(wasm, w.v), at(wasm, w.g), done, b1, b2, c1, c2, oma1, oma2, eps, negLr);
        if (done === w.x.size) return;
        const tail = (t: TensorInfo) => view(wasm, t).subarray(done);
        adamStep(tail(w.x), tail(outs[i]), tail(w.m), tail(w.v), tail(w.g), b1, b2, c1, c2, oma1, oma2, eps, negLr);
      });
      acc1[0] = f(acc1[0] * b1);
      acc2[0] = f(acc2[0] * b2);
      swapIn(tf, wasm, xs, outs);
      this.incrementIterations();
    }
  }
  return new FusedAdam(learningRate, beta1, beta2, epsilon);
}

interface MomentumState {
  learningRate: number;
  momentum: number;
  useNesterov: boolean;
  accumulations: Slot[];
}

/** out = x + c·g (c = -learning rate), or with momentum a = μ·a + g (in place); out = x + c·a: tfjs's SGD/momentum ops, rounded to float32. */
export function sgdStep(x: Float32Array, out: Float32Array, g: Float32Array, negLr: number): void {
  const f = Math.fround;
  for (let i = 0, n = x.length; i < n; i++) out[i] = f(f(negLr * g[i]) + x[i]);
}

export function momentumStep(x: Float32Array, out: Float32Array, a: Float32Array, g: Float32Array, mu: number, negLr: number): void {
  const f = Math.fround;
  for (let i = 0, n = x.length; i < n; i++) {
    const ai = f(f(mu * a[i]) + g[i]);
    a[i] = ai;
    out[i] = f(f(negLr * ai) + x[i]);
  }
}

export function createSgd(tf: Tf, learningRate: number): Optimizer {
  if (!activeWasm(tf)) return tf.train.sgd(learningRate);
  class FusedSgd extends tf.SGDOptimizer {
    override applyGradients(grads: Grads): void {
      const wasm = activeWasm(tf);
      if (!wasm) return super.applyGradients(grads);
      const list = names(grads);
      const work: { x: Variable; g: Tensor }[] = [];
      for (let i = 0; i < list.length; i++) {
        const g = gradientAt(grads, i, list[i]);
        if (g == null) continue;
        const x = tf.engine().registeredVariables[list[i]];
        if (x == null || !onHeap(wasm, x) || !onHeap(wasm, g) || g.size !== x.size) return super.applyGradients(grads);
        work.push({ x, g });
      }
      const xs = work.map((w) => w.x);
      const outs = newBuffers(wasm, xs);
      const negLr = Math.fround(-this.learningRate);
      const simd = simdKernels(wasm)?.sgd;
      work.forEach((w, i) => {
        const done = simdCount(simd, w.x.size);
        simd?.(at(wasm, w.x), at(wasm, outs[i]), at(wasm, w.g), done, negLr);
        if (done === w.x.size) return;
        const tail = (t: TensorInfo) => view(wasm, t).subarray(done);
        sgdStep(tail(w.x), tail(outs[i]), tail(w.g), negLr);
      });
      swapIn(tf, wasm, xs, outs);
      this.incrementIterations();
    }
  }
  return new FusedSgd(learningRate);
}

export function createMomentum(tf: Tf, learningRate: number, momentum: number, useNesterov = false): Optimizer {
  if (!activeWasm(tf) || useNesterov) return tf.train.momentum(learningRate, momentum, useNesterov);
  class FusedMomentum extends tf.MomentumOptimizer {
    override applyGradients(grads: Grads): void {
      const wasm = activeWasm(tf);
      const self = this as unknown as MomentumState;
      const list = names(grads);
      if (!wasm || self.useNesterov) return super.applyGradients(grads);
      const work: { x: Variable; a: Variable; g: Tensor }[] = [];
      for (let i = 0; i < list.length; i++) {
        const x = tf.engine().registeredVariables[list[i]];
        if (x == null) return super.applyGradients(grads);
        self.accumulations[i] ??= zerosSlot(tf, `${list[i]}/momentum`, x);
        const g = gradientAt(grads, i, list[i]);
        if (g == null) continue;
        const a = self.accumulations[i].variable;
        if (![x, a, g].every((t) => onHeap(wasm, t)) || g.size !== x.size) return super.applyGradients(grads);
        work.push({ x, a, g });
      }
      for (const w of work) unshare(tf, wasm, w.a);
      const xs = work.map((w) => w.x);
      const outs = newBuffers(wasm, xs);
      const mu = Math.fround(self.momentum);
      const negLr = Math.fround(-self.learningRate);
      const simd = simdKernels(wasm)?.momentum;
      work.forEach((w, i) => {
        const done = simdCount(simd, w.x.size);
        simd?.(at(wasm, w.x), at(wasm, outs[i]), at(wasm, w.a), at(wasm, w.g), done, mu, negLr);
        if (done === w.x.size) return;
        const tail = (t: TensorInfo) => view(wasm, t).subarray(done);
        momentumStep(tail(w.x), tail(outs[i]), tail(w.a), tail(w.g), mu, negLr);
      });
      swapIn(tf, wasm, xs, outs);
      this.incrementIterations();
    }
  }
  return new FusedMomentum(learningRate, momentum, useNesterov);
}

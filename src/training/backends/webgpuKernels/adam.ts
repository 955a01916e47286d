/**
 * Adam on the webgpu backend in three dispatches per variable, where tfjs's own `applyGradients`
 * runs about a dozen (mul, add, square, div, sqrt, ... each its own dispatch, 127 a step for the
 * 784-512-512-10 MLP against 55 with SGD; on an H100 each dispatch costs about 0.17 ms of CPU in
 * tfjs-backend-webgpu and Dawn, and the step is CPU-bound). Per variable:
 *   m' = m·β1 + g·(1-β1)            (one program)
 *   v' = v·β2 + g²·(1-β2)           (one program)
 *   x' = (m'/(1-β1^t)) / (√(v'/(1-β2^t)) + ε) · (-lr) + x   (one program, reading m' and v')
 * in the order tfjs's ops compute it, every intermediate a float32. The hyperparameters and the
 * bias corrections go in as uniforms, never as uploaded scalar tensors.
 *
 * Each result is a new buffer that the variable, m or v is assigned, as tfjs's ops give; nothing
 * is written in place, so a tensor sharing a slot's buffer (after `setWeights`) keeps its values.
 * The state is tfjs's own (`accBeta1/2`, `<name>/m`, `<name>/v`), so `getWeights`, `setWeights`,
 * `getClassName` and `dispose` are tfjs's and checkpoints load in either. β1^t and β2^t are kept
 * as numbers beside `accBeta1/2` (which get the same values, as CPU-held scalars: no dispatch),
 * so a step never reads the GPU; `setWeights` re-reads them once. A step that cannot be done here
 * (another backend active, a tensor of another backend or dtype) is tfjs's `applyGradients`.
 */
import type { Optimizer, Tensor, TensorInfo, Variable } from '@tensorflow/tfjs-core';
import type { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import type { Tf } from '../types';
import { gradientAt, names, type AdamState, type Grads, type Slot } from '../optimizerState';
import { flatProgram, run } from './program';

interface TensorMap { tensorMap: { has(id: object): boolean } }

/** The webgpu backend when it is the active one, else undefined. */
export function activeWebgpu(tf: Tf): WebGPUBackend | undefined {
  if (tf.getBackend() !== 'webgpu') return undefined;
  const b = tf.backend() as Partial<WebGPUBackend> & Partial<TensorMap>;
  return typeof (b as { runWebGPUProgram?: unknown }).runWebGPUProgram === 'function' && b.tensorMap != null ? (b as WebGPUBackend) : undefined;
}

function onDevice(backend: WebGPUBackend, t: Tensor): boolean {
  return t.dtype === 'float32' && !t.isDisposed && (backend as unknown as TensorMap).tensorMap.has(t.dataId);
}

// The inputs are read by flat index: every operand has the variable's size (checked before).
const momentProgram = (size: number, squared: boolean) => flatProgram([size], squared ? 'gpuWorkbenchAdamSecondMoment' : 'gpuWorkbenchAdamFirstMoment', ['moment', 'grad'], 'beta : f32, oneMinusBeta : f32,', `
  let g = grad[index];
  setOutputAtIndex(index, moment[index] * uniforms.beta + ${squared ? '(g * g)' : 'g'} * uniforms.oneMinusBeta);
`);

const valueProgram = (size: number) => flatProgram([size], 'gpuWorkbenchAdamValue', ['value', 'firstMoment', 'secondMoment'], 'oneMinusAccBeta1 : f32, oneMinusAccBeta2 : f32, epsilon : f32, negLr : f32,', `
  let mHat = firstMoment[index] / uniforms.oneMinusAccBeta1;
  let vHat = secondMoment[index] / uniforms.oneMinusAccBeta2;
  setOutputAtIndex(index, (mHat / (sqrt(vHat) + uniforms.epsilon)) * uniforms.negLr + value[index]);
`);

const f32 = (...data: number[]) => data.map((d) => ({ type: 'float32' as const, data: [d] }));

/** A TensorInfo from `run` as a tensor shaped like `like`. */
function tensorOf(tf: Tf, backend: WebGPUBackend, out: TensorInfo, like: Tensor): Tensor {
  return tf.engine().makeTensorFromTensorInfo({ dataId: out.dataId, shape: like.shape, dtype: 'float32' }, backend);
}

function assignFrom(tf: Tf, backend: WebGPUBackend, target: Variable, out: TensorInfo): void {
  const t = tensorOf(tf, backend, out, target);
  target.assign(t);
  t.dispose();
}

/**
 * The slot tfjs makes on its first step (zeros shaped like `value`, not trainable), its zeros
 * held on the CPU: uploaded by a write at its first use, where zerosLike would be a dispatch.
 */
function zerosSlot(tf: Tf, name: string, value: Variable): Slot {
  return { originalName: name, variable: tf.tidy(() => tf.tensor(new Float32Array(value.size), value.shape, 'float32').variable(false)) };
}

/** Adam whose steps on the webgpu backend are three dispatches per variable (module comment). */
export function createWebgpuAdam(tf: Tf, learningRate: number, beta1 = 0.9, beta2 = 0.999, epsilon?: number): Optimizer {
  const f = Math.fround;
  class WebgpuAdam extends tf.AdamOptimizer {
    /** β1^t and β2^t as accBeta1/2 hold them (float32), for the uniforms. */
    private acc: [number, number] = [f(beta1), f(beta2)];

    override applyGradients(grads: Grads): void {
      const self = this as unknown as AdamState;
      const backend = activeWebgpu(tf);
      const b1 = f(self.beta1);
      const b2 = f(self.beta2);
      const fallback = () => {
        super.applyGradients(grads);
        this.acc = [f(this.acc[0] * b1), f(this.acc[1] * b2)];
      };
      if (!backend) return fallback();
      const list = names(grads);
      const work: { x: Variable; m: Variable; v: Variable; g: Tensor }[] = [];
      for (let i = 0; i < list.length; i++) {
        const x = tf.engine().registeredVariables[list[i]];
        if (x == null) return fallback();
        self.accumulatedFirstMoment[i] ??= zerosSlot(tf, `${list[i]}/m`, x);
        self.accumulatedSecondMoment[i] ??= zerosSlot(tf, `${list[i]}/v`, x);
        const g = gradientAt(grads, i, list[i]);
        if (g == null) continue;
        const m = self.accumulatedFirstMoment[i].variable;
        const v = self.accumulatedSecondMoment[i].variable;
        if (![x, m, v, g].every((t) => onDevice(backend, t)) || g.size !== x.size || m.size !== x.size || v.size !== x.size) return fallback();
        work.push({ x, m, v, g });
      }
      const [acc1, acc2] = this.acc;
      const c1 = f(1 - self.beta1);
      const c2 = f(1 - self.beta2);
      const valueUniforms = f32(f(1 - acc1), f(1 - acc2), f(self.epsilon), f(-self.learningRate));
      for (const { x, m, v, g } of work) {
        const newM = run(backend, momentProgram(x.size, false), [m, g], 'float32', f32(b1, c1));
        const newV = run(backend, momentProgram(x.size, true), [v, g], 'float32', f32(b2, c2));
        const newX = run(backend, valueProgram(x.size), [x, newM, newV], 'float32', valueUniforms);
        assignFrom(tf, backend, m, newM);
        assignFrom(tf, backend, v, newV);
        assignFrom(tf, backend, x, newX);
      }
      this.acc = [f(acc1 * b1), f(acc2 * b2)];
      tf.tidy(() => {
        self.accBeta1.assign(tf.scalar(this.acc[0]));
        self.accBeta2.assign(tf.scalar(this.acc[1]));
      });
      this.incrementIterations();
    }

    override async setWeights(weightValues: Parameters<Optimizer['setWeights']>[0]): Promise<void> {
      await super.setWeights(weightValues);
      const self = this as unknown as AdamState;
      this.acc = [(await self.accBeta1.data())[0], (await self.accBeta2.data())[0]];
    }
  }
  return new WebgpuAdam(learningRate, beta1, beta2, epsilon);
}

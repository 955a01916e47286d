import * as assert from 'node:assert/strict';
import * as tfl from '@tensorflow/tfjs-layers';
import type { Tf } from '../../../../../src/training/backends/types';
import { buildModel, lossFn, makeOptimizer } from '../../../../../src/training/job/model';
import type { JobSpec, ModelSource } from '../../../../../src/training/job/spec';
import { pipelineLayers } from '../../../../../src/training/strategies/pipeline';
import { embeddingNet, mlp, quadrantBatch, randomBatch, richCnn, setDeterministicWeights, smallCnn } from '../wasmKernels/models';
import { assertClose, tf, type Result } from '../wasmKernels/tfHarness';
import { onBackend, type Backend, webgpuOrSkip } from './webgpuHarness';

/**
 * Whole backward passes and K training steps on webgpu against the cpu backend, with the
 * webgpu backend's defaults (small tensors handed to cpu, as in a worker). Every read is
 * asynchronous: on webgpu in Node, dataSync() of a tensor on the GPU throws (its readSync needs
 * an OffscreenCanvas).
 */

const api = { ...tf, ...tfl } as unknown as Tf;

async function values(t: tf.Tensor): Promise<Result> {
  return { shape: t.shape.slice(), values: await t.data<'float32'>() };
}

/** Gradients of the loss with respect to every weight, one Result per weight, in model order. */
async function weightGradients(backend: Backend, build: () => tfl.Sequential, inputShape: number[], intMax?: number): Promise<Result[]> {
  return onBackend(backend, async () => {
    const model = build();
    setDeterministicWeights(model, 50);
    const { x, y } = randomBatch(6, inputShape, 60, intMax);
    const { value, grads } = tf.variableGrads(() => {
      const p = model.apply(x, { training: true }) as tf.Tensor;
      return tf.losses.softmaxCrossEntropy<tf.Tensor, tf.Scalar>(y, tf.log(tf.add(p, 1e-7)));
    });
    const out: Result[] = [];
    for (const w of model.trainableWeights) {
      const g = grads[(w.read() as tf.Variable).name];
      assert.ok(g != null, `no gradient for ${w.name}`);
      out.push(await values(g));
    }
    tf.dispose([x, y, value, ...Object.values(grads)]);
    model.dispose();
    return out;
  });
}

interface Run { losses: number[]; weights: Result[] }

/**
 * `steps` optimizer steps of a preset on `backend`, as a `single` worker takes them
 * (computeGradients then applyGradients); the losses and the final weights.
 */
async function trainPreset(backend: Backend, src: ModelSource, inputShape: number[], optimizer: JobSpec['optimizer'], steps: number): Promise<Run> {
  return onBackend(backend, async () => {
    const model = await buildModel(api, src, inputShape, 10, 11);
    const opt = makeOptimizer(api, optimizer);
    const vars = model.trainableWeights.map((w) => w.read() as tf.Variable);
    const batch = inputShape.length === 3 ? quadrantBatch(16, inputShape[0], 12) : randomBatch(16, inputShape, 12);
    const losses: number[] = [];
    for (let step = 0; step < steps; step++) {
      const { value, grads } = opt.computeGradients(() => lossFn(api, 'categoricalCrossentropy', batch.y, model.apply(batch.x, { training: true }) as tf.Tensor), vars);
      opt.applyGradients(grads);
      losses.push((await value.data())[0]);
      tf.dispose([value, ...Object.values(grads)]);
    }
    const weights: Result[] = [];
    for (const v of vars) weights.push(await values(v));
    tf.dispose([batch.x, batch.y]);
    opt.dispose();
    model.dispose();
    return { losses, weights };
  });
}

/**
 * K steps of a 2-stage pipeline on one backend, as pipeline.ts takes them: per micro-batch the
 * first stage's output crosses the boundary as plain floats, the last stage differentiates its
 * share of the loss with respect to its weights and its input (a variable), that input gradient
 * crosses back, and the first stage differentiates sum(out · dy); each stage steps its own
 * optimizer once per batch on the gradients summed over micro-batches. The final weights.
 */
async function trainPipelined(backend: Backend, src: ModelSource, inputShape: number[], optimizer: JobSpec['optimizer'], steps: number, micro: number): Promise<Result[]> {
  return onBackend(backend, async () => {
    const model = await buildModel(api, src, inputShape, 10, 11);
    const layers = pipelineLayers(model);
    const split = Math.ceil(layers.length / 2);
    const stages = [layers.slice(0, split), layers.slice(split)];
    const stageVars = stages.map((ls) => ls.flatMap((l) => l.trainableWeights.map((w) => w.read() as tf.Variable)));
    const opts = stages.map(() => makeOptimizer(api, optimizer));
    const batch = inputShape.length === 3 ? quadrantBatch(16, inputShape[0], 12) : randomBatch(16, inputShape, 12);
    const m = 16;
    const through = (ls: typeof layers, x: tf.Tensor) => ls.reduce<tf.Tensor>((t, l) => l.apply(t, { training: true }) as tf.Tensor, x);
    for (let step = 0; step < steps; step++) {
      const acc = stageVars.map((vs) => vs.map((v) => tf.zerosLike(v) as tf.Tensor));
      const add = (s: number, grads: tf.NamedTensorMap) => {
        acc[s] = acc[s].map((a, i) => {
          const sum = tf.add(a, grads[stageVars[s][i].name]);
          a.dispose();
          return sum;
        });
      };
      for (let k = 0; k < micro; k++) {
        const from = Math.floor((k * m) / micro);
        const n = Math.floor(((k + 1) * m) / micro) - from;
        const x = tf.slice(batch.x, from, n);
        const y = tf.slice(batch.y, from, n);
        const out0 = tf.tidy(() => through(stages[0], x));
        const act = tf.tensor(await out0.data(), out0.shape); // the frame to the next stage
        out0.dispose();
        const xv = tf.variable(act, true);
        const last = tf.variableGrads(() => tf.mul<tf.Scalar>(lossFn(api, 'categoricalCrossentropy', y, through(stages[1], xv)), n / m), [...stageVars[1], xv]);
        add(1, last.grads);
        const dy = tf.tensor(await last.grads[xv.name].data(), act.shape); // the frame back
        const first = tf.variableGrads(() => tf.sum(tf.mul(through(stages[0], x), dy)), stageVars[0]);
        add(0, first.grads);
        tf.dispose([x, y, act, xv, dy, last.value, first.value, ...Object.values(last.grads), ...Object.values(first.grads)]);
      }
      stages.forEach((_, s) => opts[s].applyGradients(stageVars[s].map((v, i) => ({ name: v.name, tensor: acc[s][i] }))));
      tf.dispose(acc.flat());
    }
    const weights: Result[] = [];
    for (const v of stageVars.flat()) weights.push(await values(v));
    tf.dispose([batch.x, batch.y]);
    opts.forEach((o) => o.dispose());
    model.dispose();
    return weights;
  });
}

describe('training on webgpu against the cpu backend', function () {
  this.timeout(180_000);
  before(async function () {
    await webgpuOrSkip(this);
  });

  // Depthwise and separable convs are checked kernel by kernel (kernels.test.ts): their whole model takes half a minute on lavapipe.
  const gradientCases: [string, () => tfl.Sequential, number[], number?][] = [
    ['MLP 784-65-33-10', () => mlp([65, 33]), [784]],
    ['small CNN (conv, maxpool, dense)', smallCnn, [28, 28, 1]],
    ['CNN with batch norm, strided conv and average pooling', richCnn, [12, 12, 2]],
    ['Embedding', embeddingNet, [6], 30],
  ];
  for (const [name, build, shape, intMax] of gradientCases) {
    it(`${name}: every weight's gradient matches the cpu backend`, async () => {
      const expected = await weightGradients('cpu', build, shape, intMax);
      const actual = await weightGradients('webgpu', build, shape, intMax);
      assert.equal(actual.length, expected.length);
      // A whole backward pass chains float32 kernels: 1e-3 of each gradient's scale (each kernel alone is held to 1e-4).
      actual.forEach((g, i) => assertClose(g, expected[i], `${name}, weight ${i}`, 1e-3));
    });
  }

  const presets: [string, ModelSource, number[]][] = [
    ['MLP 784-65-33-10', { kind: 'preset', preset: 'mlp', hiddenUnits: [65, 33] }, [784]],
    ['CNN 8-16', { kind: 'preset', preset: 'cnn', filters: [8, 16] }, [12, 12, 1]],
  ];
  const optimizers: JobSpec['optimizer'][] = [
    { name: 'sgd', learningRate: 0.1, momentum: 0 },
    { name: 'momentum', learningRate: 0.05, momentum: 0.9 },
    { name: 'adam', learningRate: 0.01, momentum: 0 },
  ];
  const K = 6;
  for (const [label, src, shape] of presets) {
    for (const optimizer of optimizers) {
      it(`${label}, ${optimizer.name}: ${K} steps give the losses and weights of the cpu backend`, async () => {
        const cpu = await trainPreset('cpu', src, shape, optimizer, K);
        const gpu = await trainPreset('webgpu', src, shape, optimizer, K);
        gpu.losses.forEach((l, i) => assert.ok(Math.abs(l - cpu.losses[i]) <= 1e-3 * Math.abs(cpu.losses[i]), `step ${i + 1}: loss ${l} on webgpu, ${cpu.losses[i]} on cpu`));
        // The model learns: the last loss is below the first, on both.
        assert.ok(cpu.losses[K - 1] < cpu.losses[0], `cpu losses ${cpu.losses.join(', ')}`);
        gpu.weights.forEach((w, i) => assertClose(w, cpu.weights[i], `weight ${i} after ${K} steps`, 1e-3));
      });
    }
    // Momentum, whose update is linear in the gradients: Adam divides by sqrt(v), so where a weight's
    // moments nearly cancel, float32 noise of micro-batch sums (1e-6) moves it by up to 2e-3 of the scale.
    it(`${label}, momentum: ${K} steps of a 2-stage pipeline with 3 micro-batches on webgpu give single's weights on cpu`, async () => {
      const momentum: JobSpec['optimizer'] = { name: 'momentum', learningRate: 0.05, momentum: 0.9 };
      const single = await trainPreset('cpu', src, shape, momentum, K);
      const piped = await trainPipelined('webgpu', src, shape, momentum, K, 3);
      assert.equal(piped.length, single.weights.length);
      piped.forEach((w, i) => assertClose(w, single.weights[i], `weight ${i} after ${K} steps`, 1e-3));
    });
  }
});

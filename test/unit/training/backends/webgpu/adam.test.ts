import * as assert from 'node:assert/strict';
import * as tfl from '@tensorflow/tfjs-layers';
import type { Tf } from '../../../../../src/training/backends/types';
import { buildModel, lossFn, makeOptimizer } from '../../../../../src/training/job/model';
import type { ModelSource } from '../../../../../src/training/job/spec';
import { randomBatch } from '../wasmKernels/models';
import { assertClose, pseudoRandom, tf } from '../wasmKernels/tfHarness';
import { onBackend, webgpuOrSkip } from './webgpuHarness';

/**
 * Adam on webgpu (webgpuKernels/adam.ts): three dispatches per variable where tfjs's own Adam
 * runs about a dozen, with the weights and the m/v slots of tfjs's Adam on cpu, and checkpoints
 * (getWeights/setWeights) that load in either.
 */

const api = { ...tf, ...tfl } as unknown as Tf;
const presets: { name: string; src: ModelSource; shape: number[] }[] = [
  { name: 'MLP', src: { kind: 'preset', preset: 'mlp', hiddenUnits: [64, 32] }, shape: [784] },
  { name: 'CNN', src: { kind: 'preset', preset: 'cnn', filters: [8, 16] }, shape: [28, 28, 1] },
];
const lr = 1e-2;
const steps = 4;
// Each element is the same chain of float32 roundings on both (bit-equal on lavapipe), but WGSL's division and
// sqrt may be a few ulp off, and after setWeights tfjs's Adam takes β^t from pow on the active backend (6e-6 off on lavapipe).
const rtol = 2e-5;

type Device = { createCommandEncoder: (...a: unknown[]) => unknown };

/** Runs `body` counting the compute dispatches it records (as bench/webgpu/latency.ts counts them). */
async function countDispatches(body: () => void | Promise<void>): Promise<number> {
  if (tf.getBackend() !== 'webgpu') {
    await body();
    return NaN;
  }
  const backend = tf.backend() as unknown as { device: Device; commandEncoder: unknown; submitQueue(): void; endComputePassEncoder(): void };
  // Close the open pass and encoder, so the dispatches of the body go through an encoder made while counting.
  backend.endComputePassEncoder();
  if (backend.commandEncoder != null) backend.submitQueue();
  const device = backend.device;
  const create = device.createCommandEncoder;
  let counting = true;
  let n = 0;
  device.createCommandEncoder = (...a: unknown[]) => {
    const encoder = create.apply(device, a) as { beginComputePass: (...b: unknown[]) => unknown };
    const begin = encoder.beginComputePass;
    encoder.beginComputePass = (...b: unknown[]) => {
      const pass = begin.apply(encoder, b) as { dispatchWorkgroups: (...c: unknown[]) => unknown };
      const dispatch = pass.dispatchWorkgroups;
      pass.dispatchWorkgroups = (...c: unknown[]) => {
        if (counting) n++;
        return dispatch.apply(pass, c);
      };
      return pass;
    };
    return encoder;
  };
  try {
    await body();
  } finally {
    counting = false;
    device.createCommandEncoder = create;
  }
  return n;
}

interface Start { shapes: number[][]; values: Float32Array[] }

/** The preset's initial weights (its variables' shapes and values). */
async function presetWeights(p: (typeof presets)[number]): Promise<Start> {
  return onBackend('cpu', async () => {
    const model = await buildModel(api, p.src, p.shape, 10, 3);
    const ws = model.trainableWeights.map((w) => w.read());
    const start = { shapes: ws.map((w) => w.shape.slice()), values: await Promise.all(ws.map(async (w) => (await w.data()) as Float32Array)) };
    model.dispose();
    return start;
  });
}

/** The gradient of variable i at step k: fixed pseudo-random values. */
function gradient(start: Start, i: number, k: number): tf.Tensor {
  return tf.tensor(pseudoRandom(start.values[i].length, 100 * k + i + 1), start.shapes[i]);
}

let unique = 0;

interface Trainer { opt: tf.Optimizer; vars: tf.Variable[] }

function trainer(start: Start, opt: tf.Optimizer): Trainer {
  const tag = `adamTest${unique++}`;
  return { opt, vars: start.values.map((v, i) => tf.variable(tf.tensor(v, start.shapes[i]), true, `${tag}_${i}`)) };
}

/** Adam step k on the active backend; returns the dispatches it recorded. */
async function step(t: Trainer, start: Start, k: number): Promise<number> {
  const grads = t.vars.map((v, i) => ({ name: v.name, tensor: gradient(start, i, k) }));
  const n = await countDispatches(() => t.opt.applyGradients(grads));
  tf.dispose(grads.map((g) => g.tensor));
  return n;
}

async function snapshot(t: Trainer): Promise<{ weights: Float32Array[]; slots: { name: string; values: Float32Array }[] }> {
  return {
    weights: await Promise.all(t.vars.map(async (v) => (await v.data()) as Float32Array)),
    slots: await Promise.all((await t.opt.getWeights()).map(async (w) => ({ name: w.name, values: (await w.tensor.data()) as Float32Array }))),
  };
}

function assertSame(actual: Awaited<ReturnType<typeof snapshot>>, expected: Awaited<ReturnType<typeof snapshot>>, what: string): void {
  actual.weights.forEach((w, i) => assertClose({ shape: [w.length], values: w }, { shape: [w.length], values: expected.weights[i] }, `${what}: weight ${i}`, rtol));
  assert.equal(actual.slots.length, expected.slots.length, `${what}: as many optimizer weights`);
  actual.slots.forEach((s, i) => {
    assert.equal(s.name.replace(/^adamTest\d+_/, ''), expected.slots[i].name.replace(/^adamTest\d+_/, ''), `${what}: optimizer weight ${i}'s name`);
    assertClose({ shape: [s.values.length], values: s.values }, { shape: [s.values.length], values: expected.slots[i].values }, `${what}: ${s.name}`, rtol);
  });
}

function dispose(t: Trainer): void {
  t.opt.dispose();
  tf.dispose(t.vars);
}

/** tfjs's Adam on cpu: the reference, after `count` steps. */
async function reference(start: Start, count: number): Promise<Awaited<ReturnType<typeof snapshot>>> {
  return onBackend('cpu', async () => {
    const t = trainer(start, tf.train.adam(lr));
    for (let k = 0; k < count; k++) await step(t, start, k);
    const s = await snapshot(t);
    dispose(t);
    return s;
  });
}

describe('webgpu Adam in three dispatches per variable', function () {
  before(async function () {
    await webgpuOrSkip(this);
  });

  for (const p of presets) {
    it(`${p.name}: ${steps} steps give tfjs's Adam on cpu (weights, m and v), each step 3 dispatches per variable`, async function () {
      this.timeout(120_000);
      const start = await presetWeights(p);
      const expected = await reference(start, steps);
      await onBackend('webgpu', async () => {
        const t = trainer(start, makeOptimizer(api, { name: 'adam', learningRate: lr, momentum: 0 }));
        let tensors = 0;
        for (let k = 0; k < steps; k++) {
          assert.equal(await step(t, start, k), 3 * t.vars.length, `step ${k}: dispatches`);
          if (k === 0) tensors = tf.memory().numTensors; // the first step makes the slots
          else assert.equal(tf.memory().numTensors, tensors, `step ${k} leaves no tensor behind`);
        }
        assertSame(await snapshot(t), expected, `${p.name} on webgpu`);
        dispose(t);
      });
    });
  }

  it('a checkpoint of the webgpu Adam continues in tfjs\'s Adam on cpu, and one of tfjs\'s Adam on cpu continues on webgpu', async function () {
    this.timeout(120_000);
    const start = await presetWeights(presets[0]);
    const expected = await reference(start, steps + 1);
    // webgpu -> cpu
    const saved = await onBackend('webgpu', async () => {
      const t = trainer(start, makeOptimizer(api, { name: 'adam', learningRate: lr, momentum: 0 }));
      for (let k = 0; k < steps; k++) await step(t, start, k);
      const s = await snapshot(t);
      dispose(t);
      return s;
    });
    const onCpu = await onBackend('cpu', async () => {
      const t = trainer({ shapes: start.shapes, values: saved.weights }, tf.train.adam(lr));
      await t.opt.setWeights(saved.slots.map((s, i) => ({ name: s.name, tensor: tf.tensor(s.values, i === 0 ? [] : start.shapes[(i - 1) % start.shapes.length]) })));
      await step(t, start, steps);
      const s = await snapshot(t);
      dispose(t);
      return s;
    });
    assertSame(onCpu, expected, 'webgpu checkpoint, one more step on cpu');
    // cpu -> webgpu
    const fromCpu = await reference(start, steps);
    await onBackend('webgpu', async () => {
      const t = trainer({ shapes: start.shapes, values: fromCpu.weights }, makeOptimizer(api, { name: 'adam', learningRate: lr, momentum: 0 }));
      await t.opt.setWeights(fromCpu.slots.map((s, i) => ({ name: s.name, tensor: tf.tensor(s.values, i === 0 ? [] : start.shapes[(i - 1) % start.shapes.length]) })));
      assert.equal(await step(t, start, steps), 3 * t.vars.length, 'the step after setWeights is the fused one');
      assertSame(await snapshot(t), expected, 'cpu checkpoint, one more step on webgpu');
      dispose(t);
    });
  });

  it('a step it cannot fuse (its gradients on the cpu backend) is tfjs\'s, and the fused steps after it go on from there', async function () {
    this.timeout(120_000);
    const start = await presetWeights(presets[0]);
    const expected = await reference(start, 4);
    await onBackend('webgpu', async () => {
      const t = trainer(start, makeOptimizer(api, { name: 'adam', learningRate: lr, momentum: 0 }));
      assert.equal(await step(t, start, 0), 3 * t.vars.length, 'step 0 is fused');
      const onCpu = await onBackend('cpu', () => t.vars.map((v, i) => ({ name: v.name, tensor: gradient(start, i, 1) })));
      const tfjs = await countDispatches(() => t.opt.applyGradients(onCpu));
      tf.dispose(onCpu.map((g) => g.tensor));
      assert.ok(tfjs > 3 * t.vars.length, `step 1 (gradients on cpu) is tfjs's: ${tfjs} dispatches`);
      assert.equal(await step(t, start, 2), 3 * t.vars.length, 'step 2 is fused again');
      assert.equal(await step(t, start, 3), 3 * t.vars.length, 'step 3 is fused');
      assertSame(await snapshot(t), expected, 'after a step of tfjs\'s');
      dispose(t);
    });
  });

  it('a training step of the 784-512-512-10 MLP runs at most 70 dispatches, where tfjs\'s Adam ran about 127', async function () {
    this.timeout(120_000);
    await onBackend('webgpu', async () => {
      const src: ModelSource = { kind: 'preset', preset: 'mlp', hiddenUnits: [512, 512] };
      const perStep = async (opt: tf.Optimizer): Promise<number> => {
        const model = await buildModel(api, src, [784], 10, 7);
        const vars = model.trainableWeights.map((w) => w.read() as tf.Variable);
        const { x, y } = randomBatch(16, [784], 11);
        const one = async () => {
          const { value, grads } = opt.computeGradients(() => lossFn(api, 'categoricalCrossentropy', y, model.apply(x, { training: true }) as tf.Tensor), vars);
          opt.applyGradients(grads);
          await value.data();
          tf.dispose([value, ...Object.values(grads)]);
        };
        await one();
        const n = await countDispatches(one);
        tf.dispose([x, y]);
        opt.dispose();
        model.dispose();
        return n;
      };
      const ours = await perStep(makeOptimizer(api, { name: 'adam', learningRate: 1e-3, momentum: 0 }));
      const theirs = await perStep(tf.train.adam(1e-3));
      const sgd = await perStep(tf.train.sgd(1e-3));
      assert.ok(ours <= 70, `a step ran ${ours} dispatches (tfjs's Adam: ${theirs}, SGD: ${sgd})`);
      // SGD's update is 2 dispatches per variable (mul, add), ours 3: one more per variable, 6 variables.
      assert.equal(ours, sgd + 6, `ours ${ours}, SGD ${sgd}`);
      assert.ok(theirs > ours + 50, `tfjs's Adam ran ${theirs}, ours ${ours}`);
    });
  });
});

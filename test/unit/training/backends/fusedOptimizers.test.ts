import * as assert from 'node:assert/strict';
import type { Optimizer } from '@tensorflow/tfjs-core';
import type { Tf } from '../../../../src/training/backends/types';
import { createAdam, createMomentum, createSgd } from '../../../../src/training/backends/fusedOptimizers';
import { simdKernelsFor } from '../../../../src/training/backends/simdUpdate';
import { makeOptimizer } from '../../../../src/training/job/model';
import { initBackends, pseudoRandom, tf } from './wasmKernels/tfHarness';

const tfAll = tf as unknown as Tf;
let unique = 0;

/** A two-layer net's variables (20-15-3: sizes 300, 15 and 45, so the SIMD path has tails), the same values for every call with the same seed. */
function net(seed: number): tf.Variable[] {
  const id = `fused${unique++}`;
  return [
    tf.tidy(() => tf.variable(tf.mul(tf.tensor(pseudoRandom(20 * 15, seed), [20, 15]), 0.3), true, `${id}/w1`)),
    tf.tidy(() => tf.variable(tf.mul(tf.tensor(pseudoRandom(15, seed + 1), [15]), 0.1), true, `${id}/b1`)),
    tf.tidy(() => tf.variable(tf.mul(tf.tensor(pseudoRandom(15 * 3, seed + 2), [15, 3]), 0.3), true, `${id}/w2`)),
  ];
}

const x = () => tf.tensor(pseudoRandom(8 * 20, 11), [8, 20]);
const y = () => tf.tensor(pseudoRandom(8 * 3, 12), [8, 3]);

/** The gradients of `vars` on a fixed batch (batch `k` of a few). */
function gradients(vars: tf.Variable[], k: number): { name: string; tensor: tf.Tensor }[] {
  return tf.tidy(() => {
    const xs = tf.mul(x(), 1 + 0.1 * (k % 3));
    const { grads } = tf.variableGrads(() => tf.mean(tf.square(tf.sub(tf.matMul(tf.relu(tf.add(tf.matMul(xs, vars[0]), vars[1])), vars[2]), y()))), vars);
    return vars.map((v) => ({ name: v.name, tensor: grads[v.name] }));
  });
}

/** One training step of `vars` by `optimizer`; resolves to the tfjs kernels the optimizer's update ran. */
async function step(optimizer: Optimizer, vars: tf.Variable[], k: number): Promise<string[]> {
  const grads = gradients(vars, k);
  const info = await tf.profile(() => optimizer.applyGradients(grads));
  tf.dispose(grads.map((g) => g.tensor));
  return info.kernelNames;
}

function values(vars: tf.Variable[]): Float32Array[] {
  return vars.map((v) => v.dataSync() as Float32Array);
}

function assertSame(actual: Float32Array[], expected: Float32Array[], what: string, tol = 1e-6): void {
  actual.forEach((a, i) => {
    for (let j = 0; j < a.length; j++) {
      assert.ok(Math.abs(a[j] - expected[i][j]) <= tol, `${what}: variable ${i} element ${j} is ${a[j]}, tfjs says ${expected[i][j]}`);
    }
  });
}

async function slotNames(o: Optimizer): Promise<string[]> {
  return (await o.getWeights()).map((w) => w.name.replace(/^fused\d+\//, ''));
}

describe('fused optimizers (one pass per variable on the wasm backend)', function () {
  this.timeout(60_000);
  let previous = '';

  before(async () => {
    await initBackends();
    previous = tf.getBackend();
    await tf.setBackend('wasm');
  });
  after(async () => {
    await tf.setBackend(previous);
  });

  const cases: { name: string; make: (fused: boolean) => Optimizer }[] = [
    { name: 'adam', make: (fused) => (fused ? createAdam(tfAll, 0.01) : tf.train.adam(0.01)) },
    { name: 'sgd', make: (fused) => (fused ? createSgd(tfAll, 0.05) : tf.train.sgd(0.05)) },
    { name: 'momentum', make: (fused) => (fused ? createMomentum(tfAll, 0.05, 0.9) : tf.train.momentum(0.05, 0.9)) },
  ];

  for (const c of cases) {
    it(`${c.name}: 25 steps give tfjs's weights and state, in one pass (no tfjs kernel)`, async () => {
      const ref = net(1);
      const fused = net(1);
      const oRef = c.make(false);
      const oFused = c.make(true);
      assert.equal(oFused.getClassName(), oRef.getClassName());
      for (let k = 0; k < 25; k++) {
        assert.ok((await step(oRef, ref, k)).length > 0, 'tfjs runs kernels (the check below can fail)');
        const ran = await step(oFused, fused, k);
        assert.deepEqual(ran.filter((name) => k > 0 || name !== 'ZerosLike'), [], 'the fused step runs no tfjs kernel (but those making its zero slots on the first step)');
      }
      assertSame(values(fused), values(ref), c.name);
      assert.deepEqual(await slotNames(oFused), await slotNames(oRef));
      const [sRef, sFused] = [await oRef.getWeights(), await oFused.getWeights()];
      assertSame(sFused.map((w) => w.tensor.dataSync() as Float32Array), sRef.map((w) => w.tensor.dataSync() as Float32Array), `${c.name} state`);
      tf.dispose([...ref, ...fused]);
      oRef.dispose();
      oFused.dispose();
    });
  }

  it('adam resumes from a state saved by tfjs (and the other way) and gives the same weights', async () => {
    const ref = net(3);
    const oRef = tf.train.adam(0.01);
    for (let k = 0; k < 5; k++) await step(oRef, ref, k);
    const saved = (await oRef.getWeights()).map((w) => ({ name: w.name, tensor: tf.clone(w.tensor) }));
    const savedValues = saved.map((w) => w.tensor.dataSync().slice());
    const weights = ref.map((v) => tf.clone(v));
    const weightValues = weights.map((w) => w.dataSync().slice());

    // Fused and tfjs both resumed from the tfjs state (setWeights recomputes beta^t, so a resumed
    // Adam differs from an uninterrupted one in the last bits): the saved tensors stay alive and
    // are shared with both optimizers' slots, and both models' weights with `weights`.
    const fused = net(99);
    const resumed = net(97);
    fused.forEach((v, i) => v.assign(weights[i]));
    resumed.forEach((v, i) => v.assign(weights[i]));
    const oFused = createAdam(tfAll, 0.01);
    const oResumed = tf.train.adam(0.01);
    await oFused.setWeights(saved);
    await oResumed.setWeights(saved);
    for (let k = 5; k < 12; k++) {
      await step(oRef, ref, k);
      await step(oResumed, resumed, k);
      await step(oFused, fused, k);
    }
    assertSame(values(fused), values(resumed), 'after resume');
    assertSame(values(fused), values(ref), 'after resume, against uninterrupted steps');
    // The tensors that were handed in are not written through.
    saved.forEach((w, i) => assert.deepEqual(w.tensor.dataSync(), savedValues[i], `saved state ${w.name} unchanged`));
    weights.forEach((w, i) => assert.deepEqual(w.dataSync(), weightValues[i], 'weights handed to assign unchanged'));

    // tfjs's Adam resumes from the fused one's state.
    const back = net(98);
    back.forEach((v, i) => v.assign(fused[i]));
    const oBack = tf.train.adam(0.01);
    await oBack.setWeights(await oFused.getWeights());
    for (let k = 12; k < 16; k++) {
      await step(oBack, back, k);
      await step(oFused, fused, k);
    }
    assertSame(values(back), values(fused), 'tfjs after the fused state');
    tf.dispose([...ref, ...fused, ...resumed, ...back, ...weights, ...saved.map((w) => w.tensor)]);
    [oRef, oFused, oResumed, oBack].forEach((o) => o.dispose());
  });

  it('the SIMD kernels run on the wasm backend\'s memory here (Node has WebAssembly SIMD)', () => {
    const memory = (tf.backend() as unknown as { wasm: { asm?: { memory?: object } } }).wasm.asm?.memory;
    assert.ok(memory, 'the wasm backend exposes its memory');
    const kernels = simdKernelsFor(memory);
    assert.deepEqual([typeof kernels?.adam, typeof kernels?.sgd, typeof kernels?.momentum], ['function', 'function', 'function']);
  });

  it('a step leaks no tensors and no wasm memory', async () => {
    const vars = net(5);
    const o = createAdam(tfAll, 0.01);
    await step(o, vars, 0);
    const before = tf.memory();
    for (let k = 1; k < 4; k++) await step(o, vars, k);
    assert.equal(tf.memory().numTensors, before.numTensors);
    assert.equal(tf.memory().numBytes, before.numBytes);
    tf.dispose(vars);
    o.dispose();
  });

  it('makeOptimizer gives the fused optimizers on wasm and tfjs\'s own on cpu', async () => {
    const onWasm = makeOptimizer(tfAll, { name: 'adam', learningRate: 0.01, momentum: 0 });
    assert.notEqual(Object.getPrototypeOf(onWasm), tf.AdamOptimizer.prototype);
    assert.ok(onWasm instanceof tf.AdamOptimizer);
    onWasm.dispose();
    await tf.setBackend('cpu');
    try {
      const onCpu = makeOptimizer(tfAll, { name: 'adam', learningRate: 0.01, momentum: 0 });
      assert.equal(Object.getPrototypeOf(onCpu), tf.AdamOptimizer.prototype);
      onCpu.dispose();
    } finally {
      await tf.setBackend('wasm');
    }
  });
});

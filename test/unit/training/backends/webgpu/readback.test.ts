import * as assert from 'node:assert/strict';
import * as tfl from '@tensorflow/tfjs-layers';
import type { Tf } from '../../../../../src/training/backends/types';
import { buildModel, lossFn, makeOptimizer } from '../../../../../src/training/job/model';
import type { JobSpec, ModelSource } from '../../../../../src/training/job/spec';
import { applyFlat, GradientBuffer, readGradients } from '../../../../../src/training/strategies/gradients';
import { BucketedAllReduce } from '../../../../../src/training/transport/ring';
import { randomBatch } from '../wasmKernels/models';
import { assertClose, initBackends, tf } from '../wasmKernels/tfHarness';
import { onBackend, type Backend, webgpuOrSkip } from './webgpuHarness';

/**
 * Gradients leave the GPU for the ring once per step, one read per bucket (strategies/gradients.ts),
 * and K data-parallel steps with that readback give the weights of `single`.
 */

const api = { ...tf, ...tfl } as unknown as Tf;
const mlpPreset: ModelSource = { kind: 'preset', preset: 'mlp', hiddenUnits: [65, 33] };
const cnnPreset: ModelSource = { kind: 'preset', preset: 'cnn', filters: [8, 16] };

interface Reads { async: number; sync: number; kernels: number }

/** Counts the active backend's reads (its `read` and `readSync`) and the kernels run while `body` runs. */
async function countReads<T>(body: () => Promise<T>): Promise<{ result: T; reads: Reads }> {
  const backend = tf.backend() as unknown as { read: (id: object) => Promise<unknown>; readSync: (id: object) => unknown };
  const engine = tf.engine() as unknown as { runKernel: (...a: unknown[]) => unknown };
  const { read, readSync } = backend;
  const runKernel = engine.runKernel;
  const reads: Reads = { async: 0, sync: 0, kernels: 0 };
  backend.read = (id) => { reads.async++; return read.call(backend, id); };
  backend.readSync = (id) => { reads.sync++; return readSync.call(backend, id); };
  engine.runKernel = (...a: unknown[]) => { reads.kernels++; return runKernel.apply(engine, a); };
  try {
    return { result: await body(), reads };
  } finally {
    backend.read = read;
    backend.readSync = readSync;
    engine.runKernel = runKernel;
  }
}

/** One batch's gradients of a preset, read into a GradientBuffer with buckets of `bucketFloats`; also how many reads that took. */
async function readOnce(backend: Backend, src: ModelSource, inputShape: number[], bucketFloats: number): Promise<{ buf: Float32Array; reads: Reads; sizes: number[] }> {
  return onBackend(backend, async () => {
    const model = await buildModel(api, src, inputShape, 10, 21);
    const opt = makeOptimizer(api, { name: 'sgd', learningRate: 0.1, momentum: 0 });
    const vars = model.trainableWeights.map((w) => w.read() as tf.Variable);
    const { x, y } = randomBatch(8, inputShape, 22);
    const { value, grads } = opt.computeGradients(() => lossFn(api, 'categoricalCrossentropy', y, model.apply(x, { training: true }) as tf.Tensor), vars);
    const sizes = vars.map((v) => v.size);
    const flat = new GradientBuffer(sizes, false);
    const buf = flat.next();
    const { reads } = await countReads(() => readGradients(api, flat, vars.map((v) => grads[v.name]), value, buf, bucketFloats));
    tf.dispose([x, y, value, ...Object.values(grads)]);
    opt.dispose();
    model.dispose();
    return { buf, reads, sizes };
  });
}

/**
 * K steps of data parallelism over replicas in one process, replica r on `rows[r]` rows of each
 * batch of 12: each computes the gradients of its slice, reads them out with the strategies'
 * readback, the buffers are averaged weighted by slice size (ddp's ring mean for equal slices,
 * dp's weighted mean on rank 0 for uneven ones), and every replica applies the mean. Returns
 * replica 0's weights.
 */
async function dataParallel(backend: Backend, src: ModelSource, inputShape: number[], optimizer: JobSpec['optimizer'], rows: number[], steps: number, bucketFloats: number): Promise<Float32Array[]> {
  const ranks = rows.length;
  const total = rows.reduce((a, b) => a + b, 0);
  const starts = rows.map((_, r) => rows.slice(0, r).reduce((a, b) => a + b, 0));
  return onBackend(backend, async () => {
    const replicas = await Promise.all(Array.from({ length: ranks }, async () => {
      const model = await buildModel(api, src, inputShape, 10, 31);
      return { model, opt: makeOptimizer(api, optimizer), vars: model.trainableWeights.map((w) => w.read() as tf.Variable) };
    }));
    const flat = new GradientBuffer(replicas[0].vars.map((v) => v.size), false);
    const { x, y } = randomBatch(total, inputShape, 32);
    for (let step = 0; step < steps; step++) {
      const bufs: Float32Array[] = [];
      for (const [r, { model, opt, vars }] of replicas.entries()) {
        const xs = tf.slice(x, starts[r], rows[r]);
        const ys = tf.slice(y, starts[r], rows[r]);
        const { value, grads } = opt.computeGradients(() => lossFn(api, 'categoricalCrossentropy', ys, model.apply(xs, { training: true }) as tf.Tensor), vars);
        const buf = flat.next();
        await readGradients(api, flat, vars.map((v) => grads[v.name]), value, buf, bucketFloats);
        bufs.push(buf);
        tf.dispose([xs, ys, value, ...Object.values(grads)]);
      }
      const mean = bufs[0].map((_, k) => bufs.reduce((s, b, r) => s + rows[r] * b[k], 0) / total);
      for (const { opt, vars } of replicas) applyFlat(api, opt, vars, flat, mean.slice());
    }
    const weights: Float32Array[] = [];
    for (const v of replicas[0].vars) weights.push(await v.data<'float32'>());
    tf.dispose([x, y]);
    for (const { model, opt } of replicas) {
      opt.dispose();
      model.dispose();
    }
    return weights;
  });
}

describe('gradient readback for the ring', function () {
  this.timeout(180_000);

  describe('on wasm and cpu', () => {
    before(async () => {
      await initBackends();
    });

    it('each gradient is copied as it is: one synchronous read per tensor and the loss, no kernel run', async () => {
      for (const backend of ['cpu', 'wasm'] as const) {
        const { buf, reads, sizes } = await readOnce(backend, mlpPreset, [784], 1000);
        assert.deepEqual(reads, { async: 0, sync: sizes.length + 1, kernels: 0 }, `${backend}: reads`);
        assert.equal(buf.length, sizes.reduce((a, b) => a + b, 0) + 1);
      }
    });
  });

  describe('on webgpu', () => {
    before(async function () {
      await webgpuOrSkip(this);
    });

    it('the MLP preset\'s 6 gradients and its loss leave the GPU in one read (one bucket: PyTorch\'s 25 MB)', async () => {
      const { reads } = await readOnce('webgpu', mlpPreset, [784], BucketedAllReduce.defaultBucketFloats);
      assert.deepEqual({ async: reads.async, sync: reads.sync }, { async: 1, sync: 0 });
    });

    it('small buckets: one read per bucket, a gradient cut across two buckets, the buffer the one cpu fills', async () => {
      // 784·65 + 65 + 65·33 + 33 + 33·10 + 10 + 1 = 53 544 floats; buckets of 20 000 cut the first kernel (last in the buffer) twice.
      const bucket = 20_000;
      const gpu = await readOnce('webgpu', mlpPreset, [784], bucket);
      const cpu = await readOnce('cpu', mlpPreset, [784], bucket);
      assert.deepEqual({ async: gpu.reads.async, sync: gpu.reads.sync }, { async: Math.ceil(gpu.buf.length / bucket), sync: 0 });
      assert.equal(gpu.reads.async, 3);
      assertClose({ shape: [gpu.buf.length], values: gpu.buf }, { shape: [cpu.buf.length], values: cpu.buf }, 'gradient buffer', 1e-3);
      // The loss rides in the last float.
      assert.ok(Math.abs(gpu.buf[gpu.buf.length - 1] - cpu.buf[cpu.buf.length - 1]) <= 1e-4 * Math.abs(cpu.buf[cpu.buf.length - 1]));
    });

    it('the CNN preset in buckets of 257 floats: big gradients cut, small ones joined, the whole buffer as on cpu', async () => {
      const gpu = await readOnce('webgpu', cnnPreset, [10, 10, 1], 257);
      const cpu = await readOnce('cpu', cnnPreset, [10, 10, 1], 257);
      assert.equal(gpu.reads.async, Math.ceil(gpu.buf.length / 257));
      assertClose({ shape: [gpu.buf.length], values: gpu.buf }, { shape: [cpu.buf.length], values: cpu.buf }, 'gradient buffer', 1e-3);
    });

    const K = 4;
    it(`MLP 784-65-33-10, momentum: ${K} steps of dp over 3 replicas with uneven slices (5, 4, 3 rows) on webgpu give single's weights on cpu`, async () => {
      const optimizer: JobSpec['optimizer'] = { name: 'momentum', learningRate: 0.05, momentum: 0.9 };
      const single = await dataParallel('cpu', mlpPreset, [784], optimizer, [12], K, BucketedAllReduce.defaultBucketFloats);
      const dp = await dataParallel('webgpu', mlpPreset, [784], optimizer, [5, 4, 3], K, BucketedAllReduce.defaultBucketFloats);
      dp.forEach((w, i) => assertClose({ shape: [w.length], values: w }, { shape: [single[i].length], values: single[i] }, `weight ${i}`, 1e-3));
    });
    for (const [label, src, shape] of [['MLP 784-65-33-10', mlpPreset, [784]], ['CNN 8-16', cnnPreset, [12, 12, 1]]] as const) {
      for (const optimizer of [{ name: 'momentum', learningRate: 0.05, momentum: 0.9 }, { name: 'adam', learningRate: 0.01, momentum: 0 }] as JobSpec['optimizer'][]) {
        it(`${label}, ${optimizer.name}: ${K} steps of 2-replica ddp on webgpu (bucketed readback) give single's weights on cpu`, async () => {
          const single = await dataParallel('cpu', src, [...shape], optimizer, [12], K, BucketedAllReduce.defaultBucketFloats);
          const ddp = await dataParallel('webgpu', src, [...shape], optimizer, [6, 6], K, 5000);
          ddp.forEach((w, i) => assertClose({ shape: [w.length], values: w }, { shape: [single[i].length], values: single[i] }, `weight ${i}`, 1e-3));
        });
      }
    }
  });
});

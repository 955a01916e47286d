import * as assert from 'node:assert/strict';
import type { Optimizer } from '@tensorflow/tfjs-core';
import * as tfl from '@tensorflow/tfjs-layers';
import type { Tf } from '../../../../../src/training/backends/types';
import { uploadThroughWriteBuffer } from '../../../../../src/training/backends/webgpuUpload';
import { buildModel, lossFn } from '../../../../../src/training/job/model';
import type { ModelSource } from '../../../../../src/training/job/spec';
import { randomBatch } from '../wasmKernels/models';
import { tf } from '../wasmKernels/tfHarness';
import { onBackend, shadersOnly, webgpuOrSkip } from './webgpuHarness';

/**
 * Uploads on webgpu go through queue.writeBuffer (webgpuUpload.ts): an Adam step makes no GPU
 * buffer once the pool is warm, where tfjs-backend-webgpu's own upload makes a staging buffer per
 * uploaded tensor (43 a step for this MLP: on an H100 most of the step's time), and the values
 * that arrive are the ones sent.
 */

const api = { ...tf, ...tfl } as unknown as Tf;
const mlp: ModelSource = { kind: 'preset', preset: 'mlp', hiddenUnits: [64, 32] };

interface WebgpuBackend { device: { createBuffer: (d: unknown) => unknown }; uploadToGPU: (id: object) => void }

/** Runs `body` counting the buffers the webgpu device makes. */
async function countBuffers(body: () => Promise<void>): Promise<number> {
  const device = (tf.backend() as unknown as WebgpuBackend).device;
  const create = device.createBuffer;
  let made = 0;
  device.createBuffer = (d: unknown) => {
    made++;
    return create.call(device, d);
  };
  try {
    await body();
  } finally {
    device.createBuffer = create;
  }
  return made;
}

/** Buffers made by Adam steps 4-6 of a small MLP (steps 1-3 fill the pool), and the weights after them. */
async function adamSteps(): Promise<{ made: number; weights: Float32Array[] }> {
  const model = await buildModel(api, mlp, [784], 10, 5);
  // tfjs's own Adam, its scalars uploaded each step (makeOptimizer's webgpu Adam passes them as uniforms, webgpuKernels/adam.ts).
  const opt: Optimizer = api.train.adam(1e-2);
  const vars = model.trainableWeights.map((w) => w.read() as tf.Variable);
  const { x, y } = randomBatch(16, [784], 6);
  const step = async () => {
    const { value, grads } = opt.computeGradients(() => lossFn(api, 'categoricalCrossentropy', y, model.apply(x, { training: true }) as tf.Tensor), vars);
    opt.applyGradients(grads);
    await value.data();
    tf.dispose([value, ...Object.values(grads)]);
  };
  for (let i = 0; i < 3; i++) await step();
  const made = await countBuffers(async () => {
    for (let i = 0; i < 3; i++) await step();
  });
  const weights = await Promise.all(vars.map(async (v) => (await v.data()) as Float32Array));
  tf.dispose([x, y]);
  opt.dispose();
  model.dispose();
  return { made, weights };
}

describe('webgpu uploads through queue.writeBuffer', function () {
  before(async function () {
    await webgpuOrSkip(this);
  });

  it('an Adam step makes no buffer once the pool is warm; tfjs\'s own upload makes one per uploaded tensor; the weights are the same', async function () {
    this.timeout(120_000);
    await onBackend('webgpu', async () => {
      const backend = tf.backend() as unknown as WebgpuBackend;
      assert.ok(Object.prototype.hasOwnProperty.call(backend, 'uploadToGPU'), 'the production loader puts our upload on the backend');
      const ours = await adamSteps();
      const patched = backend.uploadToGPU;
      delete (backend as Partial<WebgpuBackend>).uploadToGPU; // tfjs-backend-webgpu's own, from its prototype
      let shipped: Awaited<ReturnType<typeof adamSteps>>;
      try {
        shipped = await adamSteps();
      } finally {
        backend.uploadToGPU = patched;
      }
      assert.equal(ours.made, 0, `our upload made ${ours.made} buffers in 3 warm Adam steps`);
      assert.ok(shipped.made >= 3 * 10, `tfjs's upload made ${shipped.made} buffers in 3 Adam steps: a staging buffer per scalar`);
      ours.weights.forEach((w, i) => assert.deepEqual(Array.from(w), Array.from(shipped.weights[i]), `weights ${i}: the same bytes went up, the same weights came out`));
    });
  });

  it('float32, int32 and bool values arrive as sent, into new and into reused pool buffers', async function () {
    await onBackend('webgpu', () => shadersOnly(async () => {
      for (let round = 0; round < 2; round++) { // round 1 takes the buffers round 0 gave back to the pool
        const f = tf.tensor2d([[1.5, -2.25, 3e-8], [4, 5, 6 + round]]);
        const i = tf.tensor1d([7, -8, 2 ** 30, round], 'int32');
        const b = tf.tensor1d([true, false, true, round === 1], 'bool');
        // An op makes webgpu upload its inputs (shaders only: no hand-off of small tensors to the CPU), then read back.
        const results = tf.tidy(() => [tf.add(f, tf.zerosLike(f)), tf.add(i, tf.zerosLike(i)), tf.logicalAnd(b, b)]);
        const out = await Promise.all(results.map((t) => t.data()));
        tf.dispose(results);
        assert.deepEqual(Array.from(out[0]), Array.from(new Float32Array([1.5, -2.25, 3e-8, 4, 5, 6 + round])));
        assert.deepEqual(Array.from(out[1]), [7, -8, 2 ** 30, round]);
        assert.deepEqual(Array.from(out[2]), [1, 0, 1, round === 1 ? 1 : 0]);
        tf.dispose([f, i, b]);
      }
    }));
  });

  it('says so when tfjs-backend-webgpu no longer has what it replaces', function () {
    assert.throws(() => uploadThroughWriteBuffer({ uploadToGPU() { /* a different backend */ } }), /WebGPUBackend has changed: uploadToGPU, tensorMap, bufferManager or queue is missing/);
  });
});

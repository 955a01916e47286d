import * as assert from 'node:assert/strict';
import type { LayersModel } from '@tensorflow/tfjs-layers';
import * as tfl from '@tensorflow/tfjs-layers';
import type { Tf } from '../../../../../src/training/backends/types';
import { buildModel, lossFn, makeOptimizer } from '../../../../../src/training/job/model';
import type { JobSpec, ModelSource } from '../../../../../src/training/job/spec';
import { randomBatch } from '../wasmKernels/models';
import { assertClose, tf, type Result } from '../wasmKernels/tfHarness';
import { onBackend, shadersOnly, webgpuOrSkip } from './webgpuHarness';

/**
 * Every kernel call that real training steps of the presets make — forward, loss, gradients,
 * optimizer update, evaluation — recorded on the cpu backend with its very inputs (ReLU zeros,
 * softmax outputs, Adam's moments), then each distinct call replayed on webgpu and compared with
 * what cpu returned. A kernel the presets start to use is checked without anyone listing it.
 */

interface Recorded { name: string; inputs: [string, { shape: number[]; dtype: tf.DataType; values: Float32Array | Int32Array | Uint8Array }][]; attrs: tf.NamedAttrMap }

type Engine = { runKernel: (name: string, inputs: tf.NamedTensorMap, attrs: tf.NamedAttrMap) => tf.Tensor | tf.Tensor[] };

/** Runs `body` on cpu, keeping one call per distinct (kernel, input shapes and dtypes, attributes). */
async function record(body: () => Promise<void>): Promise<Recorded[]> {
  const engine = tf.engine() as unknown as Engine;
  const original = engine.runKernel.bind(engine);
  const calls = new Map<string, Recorded>();
  let depth = 0;
  engine.runKernel = (name, inputs, attrs) => {
    const present = Object.entries(inputs).filter((e): e is [string, tf.Tensor] => e[1] != null);
    const key = `${name} ${JSON.stringify(present.map(([k, t]) => [k, t.shape, t.dtype]))} ${JSON.stringify(attrs ?? {})}`;
    if (depth === 0 && !calls.has(key)) {
      calls.set(key, { name, inputs: present.map(([k, t]) => [k, { shape: t.shape.slice(), dtype: t.dtype, values: t.dataSync<'float32' | 'int32' | 'bool'>().slice() }]), attrs: JSON.parse(JSON.stringify(attrs ?? {})) as tf.NamedAttrMap });
    }
    depth++;
    try {
      return original(name, inputs, attrs);
    } finally {
      depth--;
    }
  };
  try {
    await onBackend('cpu', body);
  } finally {
    engine.runKernel = original;
  }
  return [...calls.values()];
}

async function replay(backend: 'cpu' | 'webgpu', call: Recorded): Promise<Result[]> {
  return onBackend(backend, async () => {
    const inputs = Object.fromEntries(call.inputs.map(([k, i]) => [k, tf.tensor(i.values, i.shape, i.dtype)]));
    const out = tf.engine().runKernel<tf.Tensor | tf.Tensor[]>(call.name, inputs, call.attrs);
    const outs = Array.isArray(out) ? out : [out];
    const results: Result[] = [];
    for (const t of outs) results.push({ shape: t.shape.slice(), values: await t.data<'float32' | 'int32' | 'bool'>() });
    tf.dispose([...outs, ...Object.values(inputs)]);
    return results;
  });
}

const api = { ...tf, ...tfl } as unknown as Tf;

/** K steps of a preset with an optimizer, as a `single` worker takes them, then an evaluation pass. */
async function presetSteps(src: ModelSource, inputShape: number[], optimizer: JobSpec['optimizer'], loss: JobSpec['loss']): Promise<void> {
  const model: LayersModel = await buildModel(api, src, inputShape, 10, 5);
  const opt = makeOptimizer(api, optimizer);
  const { x, y } = randomBatch(6, inputShape, 90);
  const vars = model.trainableWeights.map((w) => w.read() as tf.Variable);
  for (let step = 0; step < 2; step++) {
    const { value, grads } = opt.computeGradients(() => lossFn(api, loss, y, model.apply(x, { training: true }) as tf.Tensor), vars);
    opt.applyGradients(grads);
    tf.dispose([value, ...Object.values(grads)]);
  }
  // trainLoop.ts's evaluate(): accuracy and the loss at inference.
  tf.dispose(tf.tidy(() => {
    const out = model.apply(x, { training: false }) as tf.Tensor;
    return [tf.sum(tf.cast(tf.equal(tf.argMax(out, -1), tf.argMax(y, -1)), 'float32')), lossFn(api, loss, y, out)];
  }));
  tf.dispose([x, y]);
  opt.dispose();
  model.dispose();
}

describe('every kernel call of preset training steps, replayed on webgpu', function () {
  this.timeout(180_000);
  before(async function () {
    await webgpuOrSkip(this);
  });

  const presets: [string, ModelSource, number[]][] = [
    // Hidden sizes off the 32-wide matMul tiles; the CNN on 14×14 images pools to odd 7×7 and 3×3.
    ['MLP 784-65-33-10', { kind: 'preset', preset: 'mlp', hiddenUnits: [65, 33] }, [784]],
    ['CNN conv8-pool-conv16-pool-dense10', { kind: 'preset', preset: 'cnn', filters: [8, 16] }, [14, 14, 1]],
  ];
  const optimizers: JobSpec['optimizer'][] = [
    { name: 'sgd', learningRate: 0.05, momentum: 0 },
    { name: 'momentum', learningRate: 0.05, momentum: 0.9 },
    { name: 'adam', learningRate: 0.01, momentum: 0 },
  ];
  for (const [label, src, shape] of presets) {
    for (const optimizer of optimizers) {
      for (const loss of optimizer.name === 'adam' ? ['categoricalCrossentropy', 'softmaxCrossentropy'] as const : ['categoricalCrossentropy'] as const) {
        it(`${label}, ${optimizer.name}, ${loss}: every kernel call matches cpu`, async () => {
          const calls = await record(() => presetSteps(src, shape, optimizer, loss));
          const names = new Set(calls.map((c) => c.name));
          for (const expected of src.kind === 'preset' && src.preset === 'cnn' ? ['FusedConv2D', 'MaxPool', 'MaxPoolGrad', 'Conv2DBackpropFilter', 'Conv2DBackpropInput'] : ['_FusedMatMul', 'BatchMatMul']) {
            assert.ok(names.has(expected), `the recording holds no ${expected} call (it has ${[...names].join(', ')})`);
          }
          const wrong: string[] = [];
          for (const call of calls) {
            const expected = await replay('cpu', call);
            const actual = await shadersOnly(() => replay('webgpu', call));
            try {
              assert.equal(actual.length, expected.length, 'number of outputs');
              actual.forEach((a, i) => assertClose(a, expected[i], `output ${i}`));
            } catch (err) {
              wrong.push(`${call.name} ${JSON.stringify(call.inputs.map(([k, i]) => `${k} ${i.shape.join('x')}`))} ${JSON.stringify(call.attrs)}: ${(err as Error).message.split('\n')[0]}`);
            }
          }
          assert.deepEqual(wrong, [], `${wrong.length} of ${calls.length} kernel calls differ from cpu`);
        });
      }
    }
  }
});

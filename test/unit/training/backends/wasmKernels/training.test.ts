import * as assert from 'node:assert/strict';
import type * as tfl from '@tensorflow/tfjs-layers';
import { setColumnChunkFloats } from '../../../../../src/training/backends/wasmKernels/conv2dBackpropFilter';
import { embeddingNet, mlp, quadrantBatch, randomBatch, richCnn, separableCnn, setDeterministicWeights, smallCnn } from './models';
import { assertClose, initBackends, registerWasmKernels, runOn, tf, unregisterWasmKernels, withShippedWasm, type Result } from './tfHarness';

async function onBackend<T>(backend: 'cpu' | 'wasm', body: () => T | Promise<T>): Promise<T> {
  const previous = tf.getBackend();
  await tf.setBackend(backend);
  try {
    return await body();
  } finally {
    await tf.setBackend(previous);
  }
}

async function fitOnce(build: () => tfl.Sequential, inputShape: number[], intMax?: number): Promise<void> {
  const model = build();
  model.compile({ optimizer: 'sgd', loss: 'categoricalCrossentropy' });
  const { x, y } = randomBatch(4, inputShape, 40, intMax);
  try {
    await model.fit(x, y, { epochs: 1, batchSize: 4, verbose: 0 });
  } finally {
    tf.dispose([x, y]);
    model.dispose();
  }
}

/** Gradients of the loss with respect to every weight, one Result per weight, in model order. */
async function weightGradients(backend: 'cpu' | 'wasm', build: () => tfl.Sequential, inputShape: number[]): Promise<Result[]> {
  return onBackend(backend, async () => {
    const model = build();
    setDeterministicWeights(model, 50);
    const { x, y } = randomBatch(6, inputShape, 60);
    const { grads } = tf.variableGrads(() => {
      const p = model.apply(x, { training: true }) as tf.Tensor;
      return tf.losses.softmaxCrossEntropy<tf.Tensor, tf.Scalar>(y, tf.log(tf.add(p, 1e-7)));
    });
    const out: Result[] = [];
    for (const w of model.trainableWeights) {
      const g = grads[(w.read() as tf.Variable).name];
      assert.ok(g != null, `no gradient for ${w.name}`);
      out.push({ shape: g.shape.slice(), values: await g.data<'float32'>() });
    }
    tf.dispose([x, y, ...Object.values(grads)]);
    model.dispose();
    return out;
  });
}

describe('training under the wasm backend', function () {
  this.timeout(60_000);

  before(async () => {
    await initBackends();
    registerWasmKernels();
  });

  describe('as shipped (our kernels unregistered)', () => {
    it('cannot train a conv net: the error names Conv2DBackpropFilter', async () => {
      await withShippedWasm(() => onBackend('wasm', async () => {
        await assert.rejects(fitOnce(smallCnn, [28, 28, 1]), /Kernel 'Conv2DBackpropFilter' not registered for backend 'wasm'/);
      }));
    });
    it('cannot train depthwise or separable convs: the error names their backprop kernels', async () => {
      await withShippedWasm(() => onBackend('wasm', async () => {
        await assert.rejects(fitOnce(separableCnn, [10, 10, 2]),
          /Kernel '(DepthwiseConv2dNativeBackpropInput|DepthwiseConv2dNativeBackpropFilter|Conv2DBackpropFilter)' not registered for backend 'wasm'/);
      }));
    });
    it('cannot train an Embedding layer: the error names UnsortedSegmentSum', async () => {
      await withShippedWasm(() => onBackend('wasm', async () => {
        await assert.rejects(fitOnce(embeddingNet, [6], 30), /Kernel 'UnsortedSegmentSum' not registered for backend 'wasm'/);
      }));
    });
  });

  describe('with our kernels', () => {
    it('a small CNN trains: the loss falls over a few Adam steps', async () => {
      await onBackend('wasm', async () => {
        const model = smallCnn();
        setDeterministicWeights(model, 70);
        model.compile({ optimizer: tf.train.adam(0.01), loss: 'categoricalCrossentropy' });
        const { x, y } = quadrantBatch(16, 28, 71);
        const losses: number[] = [];
        for (let step = 0; step < 8; step++) {
          losses.push(Number(await model.trainOnBatch(x, y)));
        }
        tf.dispose([x, y]);
        model.dispose();
        assert.ok(losses.every(Number.isFinite), `losses ${losses.join(', ')}`);
        assert.ok(losses[losses.length - 1] < 0.5 * losses[0], `loss went ${losses.map((l) => l.toFixed(3)).join(' → ')}`);
      });
    });

    it('depthwise/separable and Embedding models train a step', async () => {
      await onBackend('wasm', async () => {
        await fitOnce(separableCnn, [10, 10, 2]);
        await fitOnce(embeddingNet, [6], 30);
      });
    });

    const gradientCases: [string, () => tfl.Sequential, number[]][] = [
      ['MLP 784-32-32-10', () => mlp([32, 32]), [784]],
      ['small CNN (conv, maxpool, dense)', smallCnn, [28, 28, 1]],
      ['CNN with batch norm, strided conv and average pooling', richCnn, [12, 12, 2]],
      ['depthwise + separable CNN', separableCnn, [10, 10, 2]],
    ];
    for (const [name, build, shape] of gradientCases) {
      it(`${name}: every weight's gradient matches the cpu backend`, async () => {
        const expected = await weightGradients('cpu', build, shape);
        const actual = await weightGradients('wasm', build, shape);
        assert.equal(actual.length, expected.length);
        // Whole backward passes chain float32 kernels (XNNPACK on wasm, JS doubles on cpu):
        // 1e-3 of each gradient's scale; every single kernel is held to 1e-4 in kernels.test.
        actual.forEach((g, i) => assertClose(g, expected[i], `${name}, weight ${i}`, 1e-3));
      });
    }

    it('inference is unchanged: MLP and CNN forward passes match the cpu backend', async () => {
      for (const [build, shape] of [[() => mlp([64, 64]), [784]], [smallCnn, [28, 28, 1]]] as const) {
        const predict = (): tf.Tensor => {
          const model = build();
          setDeterministicWeights(model, 80);
          const { x } = randomBatch(8, [...shape], 81);
          const out = model.predict(x) as tf.Tensor;
          model.dispose();
          return out;
        };
        assertClose(await runOn('wasm', predict), await runOn('cpu', predict), `forward ${shape.join('x')}`);
      }
    });

    it('leaves no tensor behind on the wasm heap', async () => {
      await onBackend('wasm', () => {
        const backend = tf.engine().backend;
        const x = tf.tensor4d(Array.from({ length: 3 * 6 * 6 * 2 }, (_, i) => i % 7), [3, 6, 6, 2]);
        const dy = tf.ones([3, 6, 6, 4]);
        const before = backend.numDataIds();
        const previous = setColumnChunkFloats(700);
        try {
          for (const chunk of [700, 1 << 23]) {
            setColumnChunkFloats(chunk);
            tf.dispose(tf.engine().runKernel('Conv2DBackpropFilter', { x, dy }, { strides: 1, pad: 'same', dataFormat: 'NHWC', filterShape: [3, 3, 2, 4] }));
            for (const strides of [1, 2]) {
              const dyIn = tf.ones([3, 6 / strides, 6 / strides, 4]);
              const filter = tf.ones([3, 3, 2, 4]);
              tf.dispose([dyIn, filter, tf.engine().runKernel('Conv2DBackpropInput', { dy: dyIn, filter }, { strides, pad: 'same', dataFormat: 'NHWC', inputShape: [3, 6, 6, 2] })]);
            }
          }
          // tidy returns (keeps) its result: dispose it too.
          tf.dispose(tf.tidy(() => tf.matMul(tf.ones([5, 3]), tf.ones([4, 5]), true, true)));
          tf.dispose(tf.tidy(() => tf.gather(x, tf.tensor1d([2, 0], 'int32'))));
          tf.dispose(tf.tidy(() => tf.unsortedSegmentSum(tf.ones([4, 2]), tf.tensor1d([0, 1, 0, 1], 'int32'), 2)));
        } finally {
          setColumnChunkFloats(previous);
        }
        assert.throws(() => tf.tidy(() => tf.gather(x, tf.tensor1d([9], 'int32'))), /index value 9/);
        assert.equal(backend.numDataIds(), before);
        tf.dispose([x, dy]);
      });
    });

    it('registering twice is harmless and unregistering restores the shipped kernels', () => {
      const shippedFree = tf.getKernel('Conv2DBackpropFilter', 'wasm');
      assert.ok(shippedFree != null, 'registered in before()');
      const ours = tf.getKernel('BatchMatMul', 'wasm').kernelFunc;
      registerWasmKernels();
      assert.equal(tf.getKernel('BatchMatMul', 'wasm').kernelFunc, ours);
      unregisterWasmKernels();
      try {
        assert.equal(tf.getKernel('Conv2DBackpropFilter', 'wasm'), undefined);
        assert.notEqual(tf.getKernel('BatchMatMul', 'wasm').kernelFunc, ours);
        assert.ok(tf.getKernel('BatchMatMul', 'wasm').setupFunc != null, 'the shipped config, setup included, is back');
      } finally {
        registerWasmKernels();
      }
      assert.equal(tf.getKernel('BatchMatMul', 'wasm').kernelFunc, ours);
    });
  });
});

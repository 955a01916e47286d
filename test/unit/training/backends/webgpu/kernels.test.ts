import * as assert from 'node:assert/strict';
import { registerWebgpuKernels, unregisterWebgpuKernels } from '../../../../../src/training/backends/webgpuKernels/index';
import { pseudoRandom, runOn, tf } from '../wasmKernels/tfHarness';
import { compareOnWebgpu, matMulPrograms, shadersOnly, webgpuOrSkip, withMatMulProgram } from './webgpuHarness';

/**
 * Every kernel family the presets (MLP, CNN), the strategies and the optimizers run, on webgpu
 * against the cpu backend, its shaders only (no hand-off of small tensors to cpu). Sizes are
 * chosen off the shaders' tiles (workgroups of 64/128/256, matMul tiles of 32 and vec4 paths):
 * 33, 65, 17, and multiples of 4 for the vec4 variants. Whole training steps are in
 * training.test.ts; the replay of every kernel call of real preset steps is in replay.test.ts.
 */

type Pad = 'same' | 'valid' | [[number, number], [number, number], [number, number], [number, number]];

function tensor(shape: number[], seed: number): tf.Tensor {
  return tf.tensor(pseudoRandom(shape.reduce((a, b) => a * b, 1), seed), shape);
}

function runKernel(name: string, inputs: Record<string, tf.Tensor>, attrs: Record<string, unknown>): tf.Tensor {
  return tf.engine().runKernel<tf.Tensor>(name, inputs, attrs as tf.NamedAttrMap);
}

function convInfo(xShape: number[], filterShape: number[], strides: number | [number, number], pad: Pad, depthwise = false): tf.backend_util.Conv2DInfo {
  return tf.backend_util.computeConv2DInfo(xShape as [number, number, number, number], filterShape as [number, number, number, number], strides, 1, pad, undefined, depthwise);
}

describe('webgpu kernels against the cpu backend', function () {
  this.timeout(120_000);
  before(async function () {
    await webgpuOrSkip(this);
  });

  describe('matMul on each of tfjs-backend-webgpu\'s four programs (reduce, split-K, small output, packed 32×32 tiles)', () => {
    const shapes: { m: number; k: number; n: number; batch?: number }[] = [
      { m: 33, k: 65, n: 17 },
      { m: 5, k: 784, n: 65 }, // a dense layer's forward at a small batch
      { m: 65, k: 9, n: 33 }, // dW = xᵀ·dy: the shared dimension is the batch
      { m: 3, k: 33, n: 10, batch: 2 },
    ];
    for (const [program, id] of Object.entries(matMulPrograms)) {
      for (const s of shapes) {
        if (program === 'splitK' && s.batch) continue; // split-K is only chosen (and only written) for batch 1
        for (const [ta, tb] of [[false, false], [true, false], [false, true], [true, true]] as const) {
          const lead = s.batch ? [s.batch] : [];
          const a = [...lead, ...(ta ? [s.k, s.m] : [s.m, s.k])];
          const b = [...lead, ...(tb ? [s.n, s.k] : [s.k, s.n])];
          it(`${program}: ${a.join('x')}${ta ? 'ᵀ' : ''} · ${b.join('x')}${tb ? 'ᵀ' : ''}`, async () => {
            await withMatMulProgram(id, () => compareOnWebgpu('matMul', () => tf.matMul(tensor(a, 1), tensor(b, 2), ta, tb)));
          });
        }
      }
      it(`${program}: fused matMul + bias + relu (a dense layer), and + bias alone (the softmax layer's logits)`, async () => {
        await withMatMulProgram(id, async () => {
          for (const activation of ['relu', 'linear'] as const) {
            await compareOnWebgpu(`fused ${activation}`, () => tf.fused.matMul({ a: tensor([33, 65], 3), b: tensor([65, 17], 4), bias: tensor([17], 5), activation }));
          }
        });
      });
    }
    it('a shared dimension of 2049 takes split-K on its own, batch 1 (its atomic adds)', async () => {
      await compareOnWebgpu('split-K', () => tf.matMul(tensor([7, 2049], 6), tensor([2049, 9], 7)));
    });
    it('a 256 × 784 · 784 × 512 product (MLP-512\'s first layer at batch 256)', async () => {
      await compareOnWebgpu('matMul 256x784x512', () => tf.matMul(tensor([256, 784], 8), tensor([784, 512], 9)));
    });
  });

  describe('conv2d, forward and both gradients', () => {
    const cases: { x: number[]; f: number[]; strides: number | [number, number]; pad: Pad }[] = [
      { x: [2, 7, 7, 3], f: [3, 3, 3, 4], strides: 1, pad: 'same' }, // the CNN preset's conv: 3×3, same
      { x: [2, 9, 9, 1], f: [3, 3, 1, 8], strides: 1, pad: 'same' }, // its first layer: one input channel
      { x: [2, 7, 7, 3], f: [3, 3, 3, 4], strides: 1, pad: 'valid' },
      { x: [3, 8, 9, 2], f: [3, 3, 2, 5], strides: 2, pad: 'same' },
      { x: [1, 9, 8, 2], f: [2, 3, 2, 6], strides: [2, 1], pad: 'same' },
      { x: [2, 8, 8, 3], f: [3, 1, 3, 4], strides: 2, pad: 'same' }, // non-square filter, stride 2 (wrong on shipped wasm)
      { x: [4, 5, 5, 6], f: [1, 1, 6, 3], strides: 1, pad: 'valid' },
      { x: [1, 6, 6, 33], f: [3, 3, 33, 65], strides: 1, pad: 'same' }, // channels off the 4- and 32-wide tiles
      { x: [2, 6, 6, 2], f: [3, 3, 2, 3], strides: 1, pad: [[0, 0], [1, 2], [0, 1], [0, 0]] },
      // Our Conv2DBackpropFilter splits the B·outH·outW positions into chunks (conv2dBackpropFilter.ts):
      // 23 chunks of 32 positions, the last one short, chunks across image boundaries (143 positions an image);
      { x: [5, 13, 11, 2], f: [3, 3, 2, 3], strides: 1, pad: 'same' },
      // the CNN preset's first conv at batch 64 (896 chunks of 56 positions), and its second at batch 16 (56 of 56).
      { x: [64, 28, 28, 1], f: [3, 3, 1, 8], strides: 1, pad: 'same' },
      { x: [16, 14, 14, 8], f: [3, 3, 8, 16], strides: 1, pad: 'same' },
    ];
    for (const c of cases) {
      const label = `x ${c.x.join('x')}, filter ${c.f.join('x')}, strides ${String(c.strides)}, pad ${JSON.stringify(c.pad)}`;
      const info = convInfo(c.x, c.f, c.strides, c.pad);
      it(`Conv2D and FusedConv2D (bias, relu): ${label}`, async () => {
        await compareOnWebgpu('conv2d', () => tf.conv2d(tensor(c.x, 10) as tf.Tensor4D, tensor(c.f, 11) as tf.Tensor4D, c.strides, c.pad));
        await compareOnWebgpu('fused conv2d', () => tf.fused.conv2d({ x: tensor(c.x, 12) as tf.Tensor4D, filter: tensor(c.f, 13) as tf.Tensor4D, strides: c.strides, pad: c.pad, bias: tensor([c.f[3]], 14), activation: 'relu' }));
      });
      it(`Conv2DBackpropFilter and Conv2DBackpropInput: ${label}`, async () => {
        await compareOnWebgpu('dW', () => runKernel('Conv2DBackpropFilter', { x: tensor(c.x, 15), dy: tensor(info.outShape, 16) }, { strides: c.strides, pad: c.pad, dataFormat: 'NHWC', filterShape: c.f }));
        await compareOnWebgpu('dx', () => runKernel('Conv2DBackpropInput', { dy: tensor(info.outShape, 17), filter: tensor(c.f, 18) }, { strides: c.strides, pad: c.pad, dataFormat: 'NHWC', inputShape: c.x }));
      });
    }
  });

  it('Conv2DBackpropFilter channels-first (NCHW) goes to the shipped kernel and agrees with cpu', async () => {
    const x = [2, 3, 7, 6];
    const info = tf.backend_util.computeConv2DInfo(x as [number, number, number, number], [3, 3, 3, 4], 1, 1, 'same', undefined, false, 'channelsFirst');
    await compareOnWebgpu('dW NCHW', () => runKernel('Conv2DBackpropFilter', { x: tensor(x, 40), dy: tensor(info.outShape, 41) }, { strides: 1, pad: 'same', dataFormat: 'NCHW', filterShape: [3, 3, 3, 4] }));
  });

  describe('pooling', () => {
    const cases: { x: number[]; size: number | [number, number]; strides: number | [number, number]; pad: 'same' | 'valid' }[] = [
      { x: [2, 8, 8, 3], size: 2, strides: 2, pad: 'valid' }, // the CNN preset's pool
      { x: [2, 7, 9, 4], size: 2, strides: 2, pad: 'same' },
      { x: [1, 9, 9, 2], size: 3, strides: 2, pad: 'same' },
      { x: [2, 6, 6, 3], size: 3, strides: 1, pad: 'same' },
      { x: [3, 7, 5, 1], size: [2, 3], strides: [1, 2], pad: 'valid' },
      { x: [1, 14, 14, 33], size: 2, strides: 2, pad: 'valid' },
    ];
    for (const c of cases) {
      const outShape = tf.backend_util.computePool2DInfo(c.x as [number, number, number, number], c.size, c.strides, 1, c.pad).outShape;
      const label = `x ${c.x.join('x')}, pool ${String(c.size)}, strides ${String(c.strides)}, pad ${c.pad}`;
      it(`maxPool and its gradient: ${label}`, async () => {
        await compareOnWebgpu('maxPool', () => tf.maxPool(tensor(c.x, 20) as tf.Tensor4D, c.size, c.strides, c.pad));
        await compareOnWebgpu('dx', () => tf.grad((x: tf.Tensor) => tf.sum(tf.mul(tf.maxPool(x as tf.Tensor4D, c.size, c.strides, c.pad), tensor(outShape, 21))))(tensor(c.x, 22)));
      });
      it(`avgPool and its gradient: ${label}`, async () => {
        await compareOnWebgpu('avgPool', () => tf.avgPool(tensor(c.x, 23) as tf.Tensor4D, c.size, c.strides, c.pad));
        await compareOnWebgpu('dx', () => tf.grad((x: tf.Tensor) => tf.sum(tf.mul(tf.avgPool(x as tf.Tensor4D, c.size, c.strides, c.pad), tensor(outShape, 24))))(tensor(c.x, 25)));
      });
    }

    // A ReLU before the pool (the CNN preset) makes windows of equal zeros; quantised inputs make equal maxima.
    const ties = (): tf.Tensor => tf.relu(tf.round(tf.mul(tensor([2, 6, 6, 3], 26), 2)));
    const tiedGradient = (): tf.Tensor => tf.grad((v: tf.Tensor) => tf.sum(tf.mul(tf.maxPool(v as tf.Tensor4D, 2, 2, 'valid'), tf.add(tensor([2, 3, 3, 3], 27), 2))))(ties());
    it('MaxPoolGrad: a tie goes to the first of the equal pixels, as on cpu (the shipped kernel picks the last)', async () => {
      await compareOnWebgpu('dx with ties', tiedGradient);
    });
    it('MaxPoolGrad as shipped sends a tie\'s gradient elsewhere (what our kernel replaces)', async () => {
      unregisterWebgpuKernels();
      try {
        await assert.rejects(compareOnWebgpu('dx with ties (shipped)', tiedGradient), /relative error/);
      } finally {
        registerWebgpuKernels();
      }
    });
    it('MaxPoolGrad: NaN and -Infinity never win a window, as on cpu', async () => {
      const values = Array.from(pseudoRandom(32, 28));
      values[5] = Number.NaN;
      values[16] = Number.NEGATIVE_INFINITY;
      values[17] = Number.NEGATIVE_INFINITY;
      values[20] = Number.NEGATIVE_INFINITY;
      values[21] = Number.NEGATIVE_INFINITY;
      const x = () => tf.tensor(values, [2, 4, 4, 1]);
      const grad = () => runKernel('MaxPoolGrad', { dy: tf.add(tf.reshape(tf.range(0, 8), [2, 2, 2, 1]), 1), input: x(), output: tf.maxPool(x() as tf.Tensor4D, 2, 2, 'valid') }, { filterSize: 2, strides: 2, pad: 'valid' });
      const cpu = await runOn('cpu', grad);
      const gpu = await shadersOnly(() => runOn('webgpu', grad));
      assert.deepEqual(Array.from(gpu.values), Array.from(cpu.values));
    });
  });

  describe('depthwise conv (separable layers), forward and gradients', () => {
    const cases: { x: number[]; f: number[]; strides: number; pad: Pad }[] = [
      { x: [2, 7, 7, 3], f: [3, 3, 3, 1], strides: 1, pad: 'same' },
      { x: [2, 7, 7, 3], f: [3, 3, 3, 2], strides: 1, pad: 'valid' },
      { x: [3, 8, 9, 2], f: [3, 3, 2, 3], strides: 2, pad: 'same' },
      { x: [1, 9, 8, 4], f: [2, 2, 4, 1], strides: 2, pad: 'valid' },
      // our DepthwiseConv2dNativeBackpropFilter's chunks (conv2dBackpropFilter.ts): 176 chunks of 32 positions, channel multiplier 2
      { x: [8, 22, 32, 3], f: [3, 3, 3, 2], strides: 1, pad: 'same' },
    ];
    for (const c of cases) {
      const info = convInfo(c.x, c.f, c.strides, c.pad, true);
      it(`x ${c.x.join('x')}, filter ${c.f.join('x')}, strides ${c.strides}, pad ${String(c.pad)}`, async () => {
        await compareOnWebgpu('depthwise', () => tf.depthwiseConv2d(tensor(c.x, 30) as tf.Tensor4D, tensor(c.f, 31) as tf.Tensor4D, c.strides, c.pad));
        await compareOnWebgpu('dW', () => runKernel('DepthwiseConv2dNativeBackpropFilter', { x: tensor(c.x, 32), dy: tensor(info.outShape, 33) }, { strides: c.strides, dilations: 1, pad: c.pad, filterShape: c.f }));
        await compareOnWebgpu('dx', () => runKernel('DepthwiseConv2dNativeBackpropInput', { dy: tensor(info.outShape, 34), filter: tensor(c.f, 35) }, { strides: c.strides, dilations: 1, pad: c.pad, inputShape: c.x }));
      });
    }
  });

  describe('reductions (loss, bias gradients, metrics)', () => {
    for (const shape of [[33, 65], [256, 10], [3, 1000], [2, 14, 14, 17]]) {
      it(`sum, mean and max over each axis and all of ${shape.join('x')}`, async () => {
        for (const axis of [...shape.keys(), null]) {
          await compareOnWebgpu(`sum axis ${axis}`, () => tf.sum(tensor(shape, 40), axis ?? undefined));
          await compareOnWebgpu(`mean axis ${axis}`, () => tf.mean(tensor(shape, 41), axis ?? undefined));
          await compareOnWebgpu(`max axis ${axis}`, () => tf.max(tensor(shape, 42), axis ?? undefined));
        }
        // The bias gradient of a conv layer: the sum over batch, rows and columns.
        if (shape.length === 4) await compareOnWebgpu('sum [0, 1, 2]', () => tf.sum(tensor(shape, 43), [0, 1, 2]));
      });
    }
    it('a sum over 200 000 values (a reduction of several workgroups)', async () => {
      await compareOnWebgpu('sum 200k', () => tf.sum(tensor([200_000], 44)));
    });
    it('argMax (accuracy) and equal', async () => {
      await compareOnWebgpu('argMax', () => tf.argMax(tensor([65, 10], 45), -1));
      await compareOnWebgpu('accuracy', () => tf.sum(tf.cast(tf.equal(tf.argMax(tensor([65, 10], 46), -1), tf.argMax(tensor([65, 10], 47), -1)), 'float32')));
    });
  });

  describe('softmax and the losses', () => {
    for (const shape of [[33, 10], [256, 10], [5, 65]]) {
      it(`softmax, log, clip and both losses on ${shape.join('x')}, with their gradients`, async () => {
        const logits = () => tf.mul(tensor(shape, 50), 6);
        const labels = () => tf.oneHot(tf.tensor1d(Array.from({ length: shape[0] }, (_, i) => (i * 7) % shape[1]), 'int32'), shape[1]);
        await compareOnWebgpu('softmax', () => tf.softmax(logits()));
        await compareOnWebgpu('categorical cross-entropy', () => tf.neg(tf.mean(tf.sum(tf.mul(labels(), tf.log(tf.clipByValue(tf.softmax(logits()), 1e-7, 1 - 1e-7))), -1))));
        await compareOnWebgpu('softmax cross-entropy', () => tf.losses.softmaxCrossEntropy(labels(), logits()));
        await compareOnWebgpu('d logits (categorical)', () => tf.grad((z: tf.Tensor) => tf.neg(tf.mean(tf.sum(tf.mul(labels(), tf.log(tf.clipByValue(tf.softmax(z), 1e-7, 1 - 1e-7))), -1))))(logits()));
        await compareOnWebgpu('d logits (softmax cross-entropy)', () => tf.grad((z: tf.Tensor) => tf.losses.softmaxCrossEntropy(labels(), z))(logits()));
      });
    }
  });

  describe('element-wise ops of the optimizers and activations, on and off the vec4 path', () => {
    for (const shape of [[33], [64], [65, 33], [3, 3, 8, 16]]) {
      it(`sgd, momentum and adam arithmetic on ${shape.join('x')}`, async () => {
        const x = () => tensor(shape, 60);
        const g = () => tensor(shape, 61);
        await compareOnWebgpu('x - lr·g', () => tf.add(x(), tf.mul(tf.scalar(-0.01), g())));
        await compareOnWebgpu('μ·a + g', () => tf.add(tf.mul(tf.scalar(0.9), x()), g()));
        await compareOnWebgpu('adam', () => {
          const m = tf.add(tf.mul(x(), 0.9), tf.mul(g(), 0.1));
          const v = tf.add(tf.mul(tf.square(x()), 0.999), tf.mul(tf.square(g()), 0.001));
          return tf.add(tf.mul(tf.div(tf.div(m, 0.1), tf.add(tf.sqrt(tf.div(v, 0.001)), 1e-7)), -0.001), x());
        });
        await compareOnWebgpu('relu and its gradient', () => tf.grad((v: tf.Tensor) => tf.sum(tf.mul(tf.relu(v), g())))(x()));
        await compareOnWebgpu('broadcast bias add', () => tf.add(x(), tensor([shape[shape.length - 1]], 62)));
      });
    }
  });

  describe('data movement (batches, the gradient readback, the pipeline\'s boundaries)', () => {
    it('oneHot and cast of labels', async () => {
      await compareOnWebgpu('oneHot', () => tf.cast(tf.oneHot(tf.tensor1d(Array.from({ length: 65 }, (_, i) => (i * 3) % 10), 'int32'), 10), 'float32'));
    });
    it('concat of flattened tensors of odd sizes, and slices of the result', async () => {
      const parts = () => [tensor([33, 17], 70), tensor([17], 71), tensor([3, 3, 1, 5], 72), tensor([1], 73)].map((t) => tf.reshape(t, [-1]));
      await compareOnWebgpu('concat', () => tf.concat(parts()));
      await compareOnWebgpu('slice', () => tf.slice(tf.concat(parts()), 500, 123));
      await compareOnWebgpu('reshape of a slice', () => tf.reshape(tf.slice(tf.concat(parts()), 561, 45), [3, 3, 1, 5]));
    });
    it('transpose and gather', async () => {
      await compareOnWebgpu('transpose', () => tf.transpose(tensor([2, 33, 5, 3], 74), [0, 3, 1, 2]));
      await compareOnWebgpu('gather', () => tf.gather(tensor([65, 7], 75), tf.tensor1d([3, 0, 64, 3, 9], 'int32')));
    });
  });
});

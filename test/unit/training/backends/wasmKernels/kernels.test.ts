import * as assert from 'node:assert/strict';
import { useOurGemm } from '../../../../../src/training/backends/gemm';
import { setColumnChunkFloats } from '../../../../../src/training/backends/wasmKernels/conv2dBackpropFilter';
import { compareWithCpu, initBackends, pseudoRandom, registerWasmKernels, runOn, tf } from './tfHarness';

type Pad = 'same' | 'valid' | [[number, number], [number, number], [number, number], [number, number]];

function tensor(shape: number[], seed: number): tf.Tensor {
  return tf.tensor(pseudoRandom(shape.reduce((a, b) => a * b, 1), seed), shape);
}

/** Calls a kernel directly, the way a gradient function does, with explicit attributes. */
function runKernel(name: string, inputs: Record<string, tf.Tensor>, attrs: Record<string, unknown>): tf.Tensor {
  return tf.engine().runKernel<tf.Tensor>(name, inputs, attrs as tf.NamedAttrMap);
}

function convInfo(xShape: number[], filterShape: number[], strides: number | [number, number], dilations: number | [number, number], pad: Pad, depthwise: boolean): tf.backend_util.Conv2DInfo {
  return tf.backend_util.computeConv2DInfo(
    xShape as [number, number, number, number], filterShape as [number, number, number, number], strides, dilations, pad, undefined, depthwise);
}

interface ConvCase { x: number[]; f: number[]; strides: number | [number, number]; pad: Pad }

/** The shapes, strides and paddings both convolution gradients are checked on, then the extra cases of one. */
function convCases(...extra: ConvCase[]): ConvCase[] {
  return [
    { x: [2, 7, 7, 3], f: [3, 3, 3, 4], strides: 1, pad: 'same' },
    { x: [2, 7, 7, 3], f: [3, 3, 3, 4], strides: 1, pad: 'valid' },
    { x: [3, 8, 9, 2], f: [3, 3, 2, 5], strides: 2, pad: 'same' },
    { x: [3, 8, 9, 2], f: [3, 3, 2, 5], strides: 2, pad: 'valid' },
    { x: [1, 9, 8, 2], f: [2, 3, 2, 6], strides: [2, 1], pad: 'same' },
    { x: [4, 5, 5, 6], f: [1, 1, 6, 3], strides: 1, pad: 'valid' },
    ...extra,
  ];
}

/** Runs a check with our wasm module (im2col and GEMM in WebAssembly) and without it (JS and XNNPACK, where relaxed SIMD is missing). */
async function bothWays(check: (way: string) => Promise<void>): Promise<void> {
  for (const ours of [true, false]) {
    useOurGemm(ours);
    try {
      await check(ours ? 'our wasm module' : 'without it');
    } finally {
      useOurGemm(true);
    }
  }
}

describe('wasm kernels against the cpu backend', function () {
  before(async () => {
    await initBackends();
    registerWasmKernels();
  });

  describe('Conv2DBackpropFilter', () => {
    const cases = convCases(
      { x: [2, 6, 7, 1], f: [5, 5, 1, 8], strides: 1, pad: 'same' },
      { x: [2, 6, 6, 2], f: [3, 3, 2, 3], strides: 1, pad: [[0, 0], [1, 2], [0, 1], [0, 0]] },
    );
    for (const c of cases) {
      it(`x ${c.x.join('x')}, filter ${c.f.join('x')}, strides ${String(c.strides)}, pad ${JSON.stringify(c.pad)}`, async () => {
        const info = convInfo(c.x, c.f, c.strides, 1, c.pad, false);
        // colᵀ built by our wasm module (im2colT), and in JS where that module cannot run (no relaxed SIMD).
        await bothWays((way) => compareWithCpu(`dW (${way})`, () => runKernel('Conv2DBackpropFilter',
          { x: tensor(c.x, 1), dy: tensor(info.outShape, 2) },
          { strides: c.strides, pad: c.pad, dataFormat: 'NHWC', filterShape: c.f })));
      });
    }

    it('NCHW input and output gradient', async () => {
      const xNhwc = [2, 6, 5, 3];
      const f = [3, 3, 3, 4];
      const info = convInfo(xNhwc, f, 1, 1, 'same', false);
      const [b, h, w, co] = info.outShape;
      await compareWithCpu('dW (NCHW)', () => runKernel('Conv2DBackpropFilter',
        { x: tensor([2, 3, 6, 5], 3), dy: tensor([b, co, h, w], 4) },
        { strides: 1, pad: 'same', dataFormat: 'NCHW', filterShape: f }));
    });

    it('batches cut into chunks sum to the same gradient', async () => {
      const x = [5, 6, 6, 2];
      const f = [3, 3, 2, 4];
      const info = convInfo(x, f, 1, 1, 'same', false);
      // One image's colᵀ is 18 × 36 floats: a limit of 1000 puts one image in each chunk.
      const previous = setColumnChunkFloats(1000);
      try {
        await compareWithCpu('dW (chunked)', () => runKernel('Conv2DBackpropFilter',
          { x: tensor(x, 5), dy: tensor(info.outShape, 6) },
          { strides: 1, pad: 'same', dataFormat: 'NHWC', filterShape: f }));
      } finally {
        setColumnChunkFloats(previous);
      }
    });
  });

  describe('Conv2DBackpropInput (replaces the shipped direct loop)', () => {
    const cases = convCases(
      { x: [2, 6, 6, 2], f: [3, 3, 2, 3], strides: 1, pad: [[0, 0], [1, 2], [0, 1], [0, 0]] },
      // Padding wider than the filter: the full-convolution path does not apply, im2col does.
      { x: [2, 5, 5, 2], f: [3, 3, 2, 3], strides: 1, pad: [[0, 0], [3, 0], [1, 3], [0, 0]] },
    );
    for (const c of cases) {
      it(`x ${c.x.join('x')}, filter ${c.f.join('x')}, strides ${String(c.strides)}, pad ${JSON.stringify(c.pad)}`, async () => {
        const info = convInfo(c.x, c.f, c.strides, 1, c.pad, false);
        // dy·Wᵀ with W read transposed by our GEMM, and with Wᵀ materialised for XNNPACK where it cannot run.
        await bothWays((way) => compareWithCpu(`dx (${way})`, () => runKernel('Conv2DBackpropInput',
          { dy: tensor(info.outShape, 31), filter: tensor(c.f, 32) },
          { strides: c.strides, pad: c.pad, dataFormat: 'NHWC', inputShape: c.x })));
      });
    }

    it('NCHW', async () => {
      const info = convInfo([2, 6, 5, 3], [3, 3, 3, 4], 2, 1, 'same', false);
      const [b, h, w, co] = info.outShape;
      await compareWithCpu('dx (NCHW)', () => runKernel('Conv2DBackpropInput',
        { dy: tensor([b, co, h, w], 33), filter: tensor([3, 3, 3, 4], 34) },
        { strides: 2, pad: 'same', dataFormat: 'NCHW', inputShape: [2, 3, 6, 5] }));
    });

    it('batches cut into chunks give the same gradient (strided: the im2col path)', async () => {
      const info = convInfo([5, 7, 7, 2], [3, 3, 2, 4], 2, 1, 'same', false);
      // One image's dcol is 16 × 18 floats: a limit of 300 puts one image in each chunk.
      const previous = setColumnChunkFloats(300);
      try {
        await compareWithCpu('dx (chunked)', () => runKernel('Conv2DBackpropInput',
          { dy: tensor(info.outShape, 35), filter: tensor([3, 3, 2, 4], 36) },
          { strides: 2, pad: 'same', dataFormat: 'NHWC', inputShape: [5, 7, 7, 2] }));
      } finally {
        setColumnChunkFloats(previous);
      }
    });

    it('conv2dTranspose (its forward pass at inference) matches', async () => {
      await compareWithCpu('conv2dTranspose', () => tf.conv2dTranspose(
        tensor([2, 4, 4, 5], 37) as tf.Tensor4D, tensor([3, 3, 2, 5], 38) as tf.Tensor4D, [2, 8, 8, 2], 2, 'same'));
    });
  });

  describe('MaxPoolGrad (replaces the shipped direct loop)', () => {
    const cases: { x: number[]; size: number | [number, number]; strides: number | [number, number]; pad: 'same' | 'valid' }[] = [
      { x: [2, 8, 8, 3], size: 2, strides: 2, pad: 'valid' },
      { x: [2, 7, 9, 4], size: 2, strides: 2, pad: 'same' },
      { x: [1, 9, 9, 2], size: 3, strides: 2, pad: 'same' },
      { x: [2, 6, 6, 3], size: 3, strides: 1, pad: 'same' },
      { x: [3, 7, 5, 1], size: [2, 3], strides: [1, 2], pad: 'valid' },
    ];
    for (const c of cases) {
      const outShape = tf.backend_util.computePool2DInfo(c.x as [number, number, number, number], c.size, c.strides, 1, c.pad).outShape;
      it(`x ${c.x.join('x')}, pool ${String(c.size)}, strides ${String(c.strides)}, pad ${c.pad}`, async () => {
        await compareWithCpu('dx', () => tf.grad((x: tf.Tensor) => tf.sum(tf.mul(
          tf.maxPool(x as tf.Tensor4D, c.size, c.strides, c.pad), tensor(outShape, 41))))(tensor(c.x, 40)));
      });
    }
    it('ties go to the same pixel as on cpu (ReLU zeros, repeated values), and NaN never wins', async () => {
      const x = (): tf.Tensor => tf.relu(tf.round(tf.mul(tensor([2, 6, 6, 3], 42), 2)));
      await compareWithCpu('dx with ties', () => tf.grad((v: tf.Tensor) => tf.sum(tf.mul(
        tf.maxPool(v as tf.Tensor4D, 2, 2, 'valid'), tensor([2, 3, 3, 3], 43))))(x()));
      // A NaN in a window: the gradient goes to the window's largest number, exactly as on cpu.
      const values = Array.from(pseudoRandom(16, 44));
      values[5] = Number.NaN;
      const withNan = () => tf.tensor(values, [1, 4, 4, 1]);
      const run = (backend: 'cpu' | 'wasm') => runOn(backend, () => runKernel('MaxPoolGrad', { dy: tf.ones([1, 2, 2, 1]), input: withNan(), output: tf.maxPool(withNan() as tf.Tensor4D, 2, 2, 'valid') }, { filterSize: 2, strides: 2, pad: 'valid' }));
      assert.deepEqual(Array.from((await run('wasm')).values), Array.from((await run('cpu')).values));
    });
  });

  describe('forward convolutions with `same` padding (the shipped kernels are wrong for non-square filters with a stride)', () => {
    const cases: { x: number[]; f: [number, number]; strides: [number, number]; dilations?: number }[] = [
      { x: [2, 8, 8, 3], f: [3, 1], strides: [2, 2] },
      { x: [1, 8, 8, 2], f: [5, 1], strides: [1, 2] },
      { x: [1, 9, 2, 2], f: [1, 3], strides: [3, 1] },
      { x: [1, 2, 9, 1], f: [3, 2], strides: [1, 3] },
      { x: [2, 9, 9, 4], f: [3, 3], strides: [2, 2] },
      { x: [1, 8, 8, 2], f: [3, 1], strides: [1, 1], dilations: 2 },
    ];
    for (const c of cases) {
      const label = `x ${c.x.join('x')}, filter ${c.f.join('x')}, strides ${c.strides.join(',')}${c.dilations ? `, dilation ${c.dilations}` : ''}`;
      const ci = c.x[3];
      it(`conv2d and fused conv2d (bias, relu): ${label}`, async () => {
        await compareWithCpu('conv2d', () => tf.conv2d(tensor(c.x, 50) as tf.Tensor4D, tensor([...c.f, ci, 3], 51) as tf.Tensor4D, c.strides, 'same', 'NHWC', c.dilations ?? 1));
        await compareWithCpu('fused conv2d', () => tf.fused.conv2d({ x: tensor(c.x, 52) as tf.Tensor4D, filter: tensor([...c.f, ci, 3], 53) as tf.Tensor4D, strides: c.strides, pad: 'same', dilations: c.dilations ?? 1, bias: tensor([3], 54), activation: 'relu' }));
      });
      it(`depthwise and fused depthwise: ${label}`, async () => {
        await compareWithCpu('depthwise', () => tf.depthwiseConv2d(tensor(c.x, 55) as tf.Tensor4D, tensor([...c.f, ci, 2], 56) as tf.Tensor4D, c.strides, 'same', 'NHWC', c.dilations ?? 1));
        await compareWithCpu('fused depthwise', () => tf.fused.depthwiseConv2d({ x: tensor(c.x, 57) as tf.Tensor4D, filter: tensor([...c.f, ci, 2], 58) as tf.Tensor4D, strides: c.strides, pad: 'same', dilations: c.dilations ?? 1, bias: tensor([ci * 2], 59), activation: 'relu' }));
      });
    }
    it('a Conv2D layer with a 3×1 kernel at stride 2 trains the same on wasm as on cpu (its gradients included)', async () => {
      const loss = () => {
        const x = tensor([2, 8, 8, 2], 60);
        const w = tensor([3, 1, 2, 4], 61);
        return tf.grad((ww: tf.Tensor) => tf.sum(tf.square(tf.conv2d(x as tf.Tensor4D, ww as tf.Tensor4D, 2, 'same'))))(w);
      };
      await compareWithCpu('dW through a strided same conv', loss);
    });
  });

  describe('depthwise conv gradients', () => {
    const cases: { x: number[]; f: number[]; strides: number; pad: Pad }[] = [
      { x: [2, 7, 7, 3], f: [3, 3, 3, 1], strides: 1, pad: 'same' },
      { x: [2, 7, 7, 3], f: [3, 3, 3, 2], strides: 1, pad: 'valid' },
      { x: [3, 8, 9, 2], f: [3, 3, 2, 3], strides: 2, pad: 'same' },
      { x: [1, 9, 8, 4], f: [2, 2, 4, 1], strides: 2, pad: 'valid' },
    ];
    for (const c of cases) {
      const label = `x ${c.x.join('x')}, filter ${c.f.join('x')}, strides ${c.strides}, pad ${String(c.pad)}`;
      const info = convInfo(c.x, c.f, c.strides, 1, c.pad, true);
      it(`DepthwiseConv2dNativeBackpropFilter ${label}`, async () => {
        await compareWithCpu('dW', () => runKernel('DepthwiseConv2dNativeBackpropFilter',
          { x: tensor(c.x, 7), dy: tensor(info.outShape, 8) },
          { strides: c.strides, dilations: 1, pad: c.pad, filterShape: c.f }));
      });
      it(`DepthwiseConv2dNativeBackpropInput ${label}`, async () => {
        await compareWithCpu('dx', () => runKernel('DepthwiseConv2dNativeBackpropInput',
          { dy: tensor(info.outShape, 9), filter: tensor(c.f, 10) },
          { strides: c.strides, dilations: 1, pad: c.pad, inputShape: c.x }));
      });
    }

    // The cpu backend's backprop kernels ignore dilations, so dilated cases are checked by
    // the adjoint identity against the forward depthwise conv, which both backends dilate:
    // <dy, conv(x, w)> = <backpropFilter(x, dy), w> = <backpropInput(dy, w), x>.
    for (const pad of ['same', 'valid'] as const) {
      it(`dilation 2, pad ${pad}: both gradients are the adjoints of the forward conv`, async () => {
        const xShape = [2, 9, 9, 3];
        const fShape = [3, 3, 3, 2];
        const info = convInfo(xShape, fShape, 1, 2, pad, true);
        const x = () => tensor(xShape, 11);
        const w = () => tensor(fShape, 12);
        const dy = () => tensor(info.outShape, 13);
        const forward = await runOn('cpu', () => tf.sum(tf.mul(dy(), tf.depthwiseConv2d(x() as tf.Tensor4D, w() as tf.Tensor4D, 1, pad, 'NHWC', 2))));
        const viaFilter = await runOn('wasm', () => tf.sum(tf.mul(w(), runKernel('DepthwiseConv2dNativeBackpropFilter',
          { x: x(), dy: dy() }, { strides: 1, dilations: 2, pad, filterShape: fShape }))));
        const viaInput = await runOn('wasm', () => tf.sum(tf.mul(x(), runKernel('DepthwiseConv2dNativeBackpropInput',
          { dy: dy(), filter: w() }, { strides: 1, dilations: 2, pad, inputShape: xShape }))));
        const ref = forward.values[0];
        assert.ok(Math.abs(viaFilter.values[0] - ref) <= 1e-4 * Math.abs(ref), `filter adjoint ${viaFilter.values[0]} vs ${ref}`);
        assert.ok(Math.abs(viaInput.values[0] - ref) <= 1e-4 * Math.abs(ref), `input adjoint ${viaInput.values[0]} vs ${ref}`);
      });
    }
  });

  describe('UnsortedSegmentSum', () => {
    it('sums float rows by segment, drops ids out of range, leaves empty segments at 0', async () => {
      await compareWithCpu('segment sum', () => tf.unsortedSegmentSum(
        tensor([7, 3], 14), tf.tensor1d([2, 0, 2, 5, 1, 0, -1], 'int32'), 5));
    });
    it('int32 values with inner dimensions', async () => {
      await compareWithCpu('segment sum int32', () => tf.unsortedSegmentSum(
        tf.tensor3d([...Array(24).keys()], [4, 3, 2], 'int32'), tf.tensor1d([1, 3, 1, 0], 'int32'), 4));
    });
    it('is the gradient of gather (what an Embedding layer trains through)', async () => {
      const table = (): tf.Tensor => tensor([6, 4], 15);
      const ids = (): tf.Tensor => tf.tensor2d([[1, 3, 3], [0, 5, 1]], [2, 3], 'int32');
      await compareWithCpu('d table', () => tf.grad((t: tf.Tensor) => tf.sum(tf.mul(tf.gather(t, ids()), tensor([2, 3, 4], 16))))(table()));
    });
  });

  describe('BatchMatMul and _FusedMatMul with transposed operands', () => {
    const shapes: { a: number[]; b: number[] }[] = [
      { a: [5, 7], b: [7, 3] },
      { a: [1, 6], b: [6, 4] },
      { a: [2, 4, 5], b: [2, 5, 3] },
      { a: [3, 4, 5], b: [1, 5, 2] },
    ];
    for (const s of shapes) {
      for (const [ta, tb] of [[false, false], [true, false], [false, true], [true, true]] as const) {
        const aShape = ta ? [...s.a.slice(0, -2), s.a[s.a.length - 1], s.a[s.a.length - 2]] : s.a;
        const bShape = tb ? [...s.b.slice(0, -2), s.b[s.b.length - 1], s.b[s.b.length - 2]] : s.b;
        it(`matMul ${aShape.join('x')}${ta ? 'ᵀ' : ''} · ${bShape.join('x')}${tb ? 'ᵀ' : ''}`, async () => {
          await compareWithCpu('matMul', () => tf.matMul(tensor(aShape, 17), tensor(bShape, 18), ta, tb));
        });
      }
    }
    for (const [ta, tb] of [[true, false], [false, true], [true, true]] as const) {
      it(`fused matMul + bias + relu, transposeA ${ta}, transposeB ${tb}`, async () => {
        const a = ta ? [6, 5] : [5, 6];
        const b = tb ? [4, 6] : [6, 4];
        await compareWithCpu('fused', () => tf.fused.matMul({
          a: tensor(a, 19), b: tensor(b, 20), transposeA: ta, transposeB: tb, bias: tensor([4], 21), activation: 'relu',
        }));
      });
    }
    it('gradients of a matMul (which transpose) match', async () => {
      await compareWithCpu('dA', () => tf.grad((a: tf.Tensor) => tf.sum(tf.square(tf.matMul(a as tf.Tensor2D, tensor([6, 3], 23) as tf.Tensor2D))))(tensor([4, 6], 22)));
      await compareWithCpu('dB', () => tf.grad((b: tf.Tensor) => tf.sum(tf.square(tf.matMul(tensor([4, 6], 22) as tf.Tensor2D, b as tf.Tensor2D))))(tensor([6, 3], 23)));
    });
  });

  describe('GatherV2', () => {
    it('rows along axis 0 (a batch picked out of a dataset)', async () => {
      await compareWithCpu('gather rows', () => tf.gather(tensor([10, 20], 24), tf.tensor1d([3, 0, 9, 3, 7], 'int32')));
    });
    it('along an inner axis, with rank-2 indices and narrow slices', async () => {
      await compareWithCpu('gather axis 1', () => tf.gather(tensor([3, 5, 2], 25), tf.tensor2d([[4, 0], [1, 1]], [2, 2], 'int32'), 1));
    });
    it('batchDims 1', async () => {
      await compareWithCpu('gather batchDims', () => tf.gather(tensor([2, 4, 3], 26), tf.tensor2d([[3, 1], [0, 2]], [2, 2], 'int32'), 1, 1));
    });
    it('int32 and bool values', async () => {
      await compareWithCpu('gather int32', () => tf.gather(tf.tensor2d([[1, 2], [3, 4], [5, 6]], [3, 2], 'int32'), tf.tensor1d([2, 0], 'int32')));
      await compareWithCpu('gather bool', () => tf.gather(tf.tensor1d([true, false, true, true], 'bool'), tf.tensor1d([1, 2, 1], 'int32')));
    });
    it('an index out of range throws, naming the index', async () => {
      await assert.rejects(runOn('wasm', () => tf.gather(tensor([4, 2], 27), tf.tensor1d([1, 4], 'int32'))), /index value 4 is not in \[0, 3\]/);
    });
  });
});

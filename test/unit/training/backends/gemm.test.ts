import * as assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import wabt from 'wabt';
import * as tf from '@tensorflow/tfjs-core';
import { gemmBlockColumns, gemmKernelsFor, relaxedSimdAvailable, setGemmBlockBudget, useOurGemm } from '../../../../src/training/backends/gemm';
import { gemmModuleBase64 } from '../../../../src/training/backends/gemm/gemmModule';
import { gemmWat } from '../../../../src/training/backends/gemm/wat';
import { repoRoot } from '../../../paths';
import { registerWasmKernels } from '../../../../src/training/backends/wasmKernels/index';
import { compareWithCpu, initBackends, ourKernelsRegistered, pseudoRandom, runOn } from './wasmKernels/tfHarness';

const moduleFile = join(repoRoot, 'src', 'training', 'backends', 'gemm', 'gemmModule.ts');

async function assemble(): Promise<Uint8Array> {
  const m = (await wabt()).parseWat('gemm.wat', gemmWat(), { simd: true, relaxed_simd: true, bulk_memory: true });
  try {
    m.validate();
    return m.toBinary({}).buffer;
  } finally {
    m.destroy();
  }
}

describe('our wasm GEMM (relaxed SIMD) for matMul', function () {
  this.timeout(60_000);

  it('the committed module is the assembled wat.ts (UPDATE_WASM=1 rewrites it)', async () => {
    const bytes = Buffer.from(await assemble()).toString('base64');
    if (process.env.UPDATE_WASM === '1' && bytes !== gemmModuleBase64) {
      const text = readFileSync(moduleFile, 'utf8').replace(/gemmModuleBase64 =\n {2}'[^']*'/, `gemmModuleBase64 =\n  '${bytes}'`);
      writeFileSync(moduleFile, text);
      return;
    }
    assert.equal(gemmModuleBase64, bytes, 'src/training/backends/gemm/gemmModule.ts is stale: run UPDATE_WASM=1 npx mocha out/test/unit/training/backends/gemm.test.js');
  });

  // After a rewrite the module loaded in this process is the stale one: the rest runs next time.
  if (process.env.UPDATE_WASM !== '1') describe('through the wasm backend\'s matMul', () => {
    let available = false;
    const tensor = (shape: number[], seed: number) => tf.tensor(pseudoRandom(shape.reduce((p, d) => p * d, 1), seed), shape);

    before(async () => {
      available = relaxedSimdAvailable(true); // Node 20 needs the V8 flag, as a worker sets it
      await initBackends();
      registerWasmKernels();
      assert.ok(ourKernelsRegistered());
    });

    it('runs here: relaxed SIMD is available to a worker on this Node, and the GEMM instantiates over the wasm heap', async () => {
      assert.ok(available, `relaxed SIMD should be available on Node ${process.versions.node} (V8 ${process.versions.v8}) with the flag`);
      await runOn('wasm', () => {
        const backend = tf.backend() as unknown as { wasm: { asm?: { memory?: object } } };
        assert.ok(gemmKernelsFor(backend.wasm.asm?.memory), 'no GEMM over the wasm backend\'s memory');
        return tf.scalar(0);
      });
    });

    // Tiles are 4 rows × 8 columns: sizes below, at and across those edges, and the MLP's own.
    const shapes: [number, number, number][] = [[1, 1, 1], [3, 5, 7], [4, 8, 8], [5, 9, 9], [37, 19, 13], [64, 33, 130], [256, 784, 10]];
    for (const [M, K, N] of shapes) {
      for (const [ta, tb] of [[false, false], [true, false], [false, true], [true, true]] as const) {
        it(`${M}×${K} · ${K}×${N}${ta ? ', A transposed' : ''}${tb ? ', B transposed' : ''} equals the cpu backend`, async () => {
          await compareWithCpu('matMul', () => tf.matMul(tensor(ta ? [K, M] : [M, K], 1), tensor(tb ? [N, K] : [K, N], 2), ta, tb), 1e-5);
        });
      }
    }

    it('batched, with either operand broadcast over the batch', async () => {
      await compareWithCpu('3·(5×6)·(6×7)', () => tf.matMul(tensor([3, 5, 6], 3), tensor([3, 6, 7], 4)), 1e-5);
      await compareWithCpu('(2,3)·(5×6) · (1,1)·(6×9)ᵀ', () => tf.matMul(tensor([2, 3, 5, 6], 5), tensor([1, 1, 9, 6], 6), false, true), 1e-5);
      await compareWithCpu('(1)·(6×5)ᵀ · (4)·(6×3)', () => tf.matMul(tensor([1, 6, 5], 7), tensor([4, 6, 3], 8), true, false), 1e-5);
    });

    it('fused: bias per column (shape [N] or [1, N]) or one value, with each of tfjs\'s fused activations', async () => {
      for (const activation of ['linear', 'relu', 'elu', 'sigmoid', 'relu6', 'leakyrelu'] as const) {
        for (const biasShape of [[13], [1, 13], [1]]) {
          await compareWithCpu(`fused ${activation}, bias ${biasShape.join('×')}`, () => tf.fused.matMul({
            a: tensor([9, 11], 9), b: tensor([13, 11], 10), transposeB: true, bias: tensor(biasShape, 11), activation,
          }), 1e-5);
        }
      }
      await compareWithCpu('fused relu, no bias', () => tf.fused.matMul({ a: tensor([11, 9], 12), b: tensor([11, 13], 13), transposeA: true, activation: 'relu' }), 1e-5);
      await compareWithCpu('fused leakyrelu alpha 0.3', () => tf.fused.matMul({ a: tensor([9, 11], 22), b: tensor([11, 13], 23), activation: 'leakyrelu', leakyreluAlpha: 0.3 }), 1e-5);
      await compareWithCpu('fused prelu', () => tf.fused.matMul({ a: tensor([9, 11], 24), b: tensor([11, 13], 25), bias: tensor([13], 26), activation: 'prelu', preluActivationWeights: tensor([13], 27) }), 1e-5);
    });

    it('gradients of a Dense layer (fused matMul + bias + relu) match the cpu backend', async () => {
      const x = tensor([33, 20], 14);
      const w = tensor([20, 17], 15);
      const bias = tensor([17], 16);
      const f = (xx: tf.Tensor, ww: tf.Tensor, bb: tf.Tensor) => tf.sum(tf.square(tf.fused.matMul({ a: xx, b: ww, bias: bb, activation: 'relu' })));
      for (let i = 0; i < 3; i++) {
        await compareWithCpu(`gradient ${i}`, () => tf.grads(f)([x, w, bias])[i], 1e-5);
      }
    });

    it('with our GEMM off, the XNNPACK path (what runs where relaxed SIMD is missing) gives the same numbers up to rounding', async () => {
      // transposeB with a bias: tfjs-backend-wasm 4.22's own _FusedMatMul gets this wrong (measured: 12 of
      // 13 columns off); both of our paths hand XNNPACK untransposed operands or skip it.
      const build = () => tf.fused.matMul({ a: tensor([30, 40], 17), b: tensor([50, 40], 18), transposeB: true, bias: tensor([50], 19), activation: 'relu' });
      const expected = await runOn('cpu', build);
      const ours = await runOn('wasm', build);
      useOurGemm(false);
      let shipped;
      try {
        shipped = await runOn('wasm', build);
      } finally {
        useOurGemm(true);
      }
      let worst = 0;
      let differ = 0;
      ours.values.forEach((v: number, i: number) => {
        worst = Math.max(worst, Math.abs(v - shipped.values[i]), Math.abs(v - expected.values[i]));
        if (v !== shipped.values[i]) differ++;
      });
      assert.ok(worst < 1e-4, `largest difference ${worst}`);
      // FMA rounds once where XNNPACK rounds twice: some bits differ, which shows the two paths really ran.
      assert.ok(differ > 0, 'our GEMM and XNNPACK gave identical bits: was our GEMM used at all?');
    });

    it('a wide B is packed a block of columns at a time (bounded scratch), with the same result', async () => {
      assert.equal(gemmBlockColumns(784, 512), 512, 'every MLP layer here in one block');
      assert.equal(gemmBlockColumns(25088, 4096), 40, 'a VGG-sized layer: 40 columns (4 MB) at a time');
      setGemmBlockBudget(8 * 19 * 2); // 2 panels of 8 columns at depth 19
      try {
        assert.equal(gemmBlockColumns(19, 45), 16);
        await compareWithCpu('blocks of 16 columns', () => tf.fused.matMul({ a: tensor([23, 19], 28), b: tensor([45, 19], 29), transposeB: true, bias: tensor([45], 30), activation: 'relu' }), 1e-5);
        await compareWithCpu('blocks, batched with a shared B', () => tf.matMul(tensor([3, 7, 19], 31), tensor([19, 45], 32)), 1e-5);
        await compareWithCpu('blocks, batched B', () => tf.matMul(tensor([3, 19, 7], 33), tensor([3, 45, 19], 34), true, true), 1e-5);
      } finally {
        setGemmBlockBudget(1 << 20);
      }
    });

    it('leaves no scratch behind: the wasm backend\'s buffers, tensor count and bytes are as before', async () => {
      await runOn('wasm', () => {
        // The scratch is a backend buffer the engine never sees: count the backend's own data ids.
        const buffers = () => (tf.backend() as unknown as { numDataIds(): number }).numDataIds();
        const before = tf.memory();
        const beforeBuffers = buffers();
        for (let i = 0; i < 5; i++) tf.tidy(() => tf.matMul(tensor([20, 30], 20), tensor([30, 40], 21)).dataSync());
        const after = tf.memory();
        assert.equal(buffers(), beforeBuffers, 'backend buffers');
        assert.equal(after.numTensors, before.numTensors);
        assert.equal(after.numBytes, before.numBytes);
        return tf.scalar(0);
      });
    });
  });
});

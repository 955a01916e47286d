/**
 * Training throughput of the TF.js wasm backend as shipped and with GPU Workbench's kernels
 * (src/training/backends/wasmKernels), against the plain cpu backend measured in the same run.
 *
 *   npx tsc -p . && node out/bench/wasm/training.js [--seconds S] [--rounds R] [--optimizer sgd|adam]...
 *   (or: npm run bench -- wasm)
 *
 * Models (issue 4): the MNIST MLP 784-512-512-10 at batch 256, and a small CNN (conv 8 3×3 →
 * maxpool → conv 16 3×3 → maxpool → dense 10) on 28×28×1 at batch 64. Each configuration
 * trains with `trainOnBatch` on pre-built batches (no data pipeline in the measurement) for
 * at least S seconds after one warm-up step; configurations are interleaved over R rounds and
 * the best round is kept, since other processes share this machine's cores. Prints samples/s
 * of wall time and samples per CPU second of this process (process.cpuUsage: all backends
 * here run on one thread, so this is the figure that other load on the machine disturbs
 * least), each with its ratio to the cpu anchor; then matMul GFLOP/s for the transposed
 * shapes of a dense backward pass, and what the wasm backend runs with (SIMD, threads).
 * "XNNPACK matMul": our kernels with the shipped matMul for untransposed operands (transposing
 * first), as before our relaxed-SIMD GEMM (src/training/backends/gemm), which the last row uses.
 */
import { cpus, loadavg } from 'node:os';
import * as tf from '@tensorflow/tfjs-core';
import type * as tfl from '@tensorflow/tfjs-layers';
import '@tensorflow/tfjs-backend-cpu';
import * as wasmBackend from '@tensorflow/tfjs-backend-wasm';
import { relaxedSimdAvailable, useOurGemm } from '../../src/training/backends/gemm';
import { registerWasmKernels, unregisterWasmKernels } from '../../src/training/backends/wasmKernels/index';
import { mlp, randomBatch, setDeterministicWeights, smallCnn } from '../../test/unit/training/backends/wasmKernels/models';

type Config = 'cpu' | 'wasm as shipped' | 'wasm + our kernels' | 'wasm + ours, XNNPACK matMul';
const configs: Config[] = ['cpu', 'wasm as shipped', 'wasm + ours, XNNPACK matMul', 'wasm + our kernels'];

function arg(name: string, fallback: string): string[] {
  const values: string[] = [];
  process.argv.forEach((a, i) => { if (a === `--${name}` && process.argv[i + 1] != null) values.push(process.argv[i + 1]); });
  return values.length ? values : [fallback];
}
const seconds = Number(arg('seconds', '3')[0]);
const rounds = Number(arg('rounds', '2')[0]);
const optimizers = arg('optimizer', 'sgd,adam').flatMap((o) => o.split(','));

async function use(config: Config): Promise<void> {
  if (config.startsWith('wasm + our')) registerWasmKernels(); else unregisterWasmKernels();
  useOurGemm(config === 'wasm + our kernels');
  await tf.setBackend(config === 'cpu' ? 'cpu' : 'wasm');
}

interface Rate { wall: number; cpu: number }

/** Samples per wall second and per CPU second, or the error that stopped training. */
async function throughput(config: Config, build: () => tfl.Sequential, inputShape: number[], batch: number, optimizer: string): Promise<Rate | Error> {
  await use(config);
  const model = build();
  setDeterministicWeights(model, 1);
  model.compile({ optimizer: optimizer === 'adam' ? tf.train.adam(1e-3) : tf.train.sgd(0.01), loss: 'categoricalCrossentropy' });
  const batches = [0, 1, 2, 3].map((i) => randomBatch(batch, inputShape, 100 + i));
  try {
    await model.trainOnBatch(batches[0].x, batches[0].y);
    let steps = 0;
    const start = performance.now();
    const cpuStart = process.cpuUsage();
    while (performance.now() - start < seconds * 1000 || steps < 3) {
      const b = batches[steps % batches.length];
      await model.trainOnBatch(b.x, b.y);
      steps++;
    }
    const wallS = (performance.now() - start) / 1000;
    const used = process.cpuUsage(cpuStart);
    const cpuS = (used.user + used.system) / 1e6;
    return { wall: (steps * batch) / wallS, cpu: (steps * batch) / cpuS };
  } catch (e) {
    return e instanceof Error ? e : new Error(String(e));
  } finally {
    batches.forEach((b) => tf.dispose([b.x, b.y]));
    model.dispose();
  }
}

function gflops(m: number, k: number, n: number, ta: boolean, tb: boolean): number {
  const a = tf.randomNormal(ta ? [k, m] : [m, k]);
  const b = tf.randomNormal(tb ? [n, k] : [k, n]);
  tf.matMul(a, b, ta, tb).dispose();
  let runs = 0;
  const start = performance.now();
  while (performance.now() - start < 400 || runs < 2) {
    tf.matMul(a, b, ta, tb).dispose();
    runs++;
  }
  const ms = (performance.now() - start) / runs;
  tf.dispose([a, b]);
  return (2 * m * k * n) / ms / 1e6;
}

async function main(): Promise<void> {
  await tf.setBackend('wasm');
  console.log(`node ${process.version}, ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), load average ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  console.log(`wasm: SIMD ${String(await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT'))}, multithreading ${String(await tf.env().getAsync('WASM_HAS_MULTITHREAD_SUPPORT'))}, threads ${wasmBackend.getThreadsCount()}, relaxed SIMD (our GEMM) ${String(relaxedSimdAvailable(true))}`);

  const models: { name: string; build: () => tfl.Sequential; shape: number[]; batch: number }[] = [
    { name: 'MLP 784-512-512-10, batch 256', build: () => mlp([512, 512]), shape: [784], batch: 256 },
    { name: 'CNN conv8-pool-conv16-pool-dense10, batch 64', build: smallCnn, shape: [28, 28, 1], batch: 64 },
  ];
  for (const optimizer of optimizers) {
    for (const m of models) {
      const best = new Map<Config, Rate | Error>();
      for (let r = 0; r < rounds; r++) {
        for (const config of configs) {
          const result = await throughput(config, m.build, m.shape, m.batch, optimizer);
          const prev = best.get(config);
          if (prev == null || prev instanceof Error) {
            best.set(config, result);
          } else if (!(result instanceof Error)) {
            best.set(config, { wall: Math.max(prev.wall, result.wall), cpu: Math.max(prev.cpu, result.cpu) });
          }
        }
      }
      const anchor = best.get('cpu');
      const ratio = (v: number, a: number | undefined): string => (a == null ? '' : `(${(v / a).toFixed(2)}× cpu)`);
      console.log(`\n${m.name}, ${optimizer} (best of ${rounds} rounds of ≥${seconds}s)`);
      for (const config of configs) {
        const v = best.get(config);
        const a = anchor instanceof Error ? undefined : anchor;
        const text = v != null && !(v instanceof Error)
          ? `${v.wall.toFixed(0).padStart(6)} samples/s ${ratio(v.wall, a?.wall).padEnd(14)} ${v.cpu.toFixed(0).padStart(6)} samples/CPU-s ${ratio(v.cpu, a?.cpu)}`
          : `does not train: ${v?.message.split('\n')[0] ?? '?'}`;
        console.log(`  ${config.padEnd(20)} ${text}`);
      }
    }
  }

  console.log('\nmatMul GFLOP/s on wasm (the dense backward pass transposes one operand)');
  const shapes: [number, number, number, boolean, boolean, string][] = [
    [256, 784, 512, false, false, 'x·W1 (forward)'],
    [784, 256, 512, true, false, 'xᵀ·dy (dW1)'],
    [256, 512, 512, false, true, 'dy·W2ᵀ (dx2)'],
  ];
  for (const [mm, k, n, ta, tb, label] of shapes) {
    const row: string[] = [];
    for (const config of ['wasm as shipped', 'wasm + ours, XNNPACK matMul', 'wasm + our kernels'] as const) {
      await use(config);
      row.push(`${config} ${gflops(mm, k, n, ta, tb).toFixed(1).padStart(5)}`);
    }
    console.log(`  ${label.padEnd(16)} [${mm}×${k}]·[${k}×${n}]  ${row.join('   ')}`);
  }
  registerWasmKernels();
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});

/**
 * Where a ddp step's time goes, per phase, on W worker processes (W = 1 is `single` with the
 * same per-process setup: the same backend, one wasm thread with SIMD, the same code).
 *
 *   npx tsc -p . && node out/bench/train/_phases.js [mlp512|cnn|mlp128] [steps] [transport]
 *
 * Each worker builds the job's model with the job's own code (backend.ts, model.ts, data.ts,
 * ring.ts) and runs `steps` steps of the ddp step, timing each phase with the wall clock and
 * the process's CPU clock:
 *   batch    gather the local batch, make x and y tensors
 *   grads    forward + backward (optimizer.computeGradients) and reading the gradients out
 *   reduce   the bucketed all-reduce of the gradients and the loss (wait for the peer included)
 *   apply    gradients back into tensors and the optimizer's update
 * The same loop with no ring (W = 1) is the anchor. Printed per step, and the compute
 * slowdown: per-sample forward/backward time on W workers / on one.
 */
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Tensor, Variable } from '@tensorflow/tfjs-core';
import { loadBackend } from '../../src/training/backends/backend';
import { loadDataset } from '../../src/training/job/data';
import { loadJobFile } from '../../src/training/job/spec';
import { buildModel, lossFn, makeOptimizer } from '../../src/training/job/model';
import { BucketedAllReduce, Ring, type RingTransport } from '../../src/training/transport/ring';
import { shardIndices } from '../../src/training/strategies/sampler';
import { GradientBuffer } from '../../src/training/strategies/worker';
import { repoRoot } from '../../test/paths';

const phases = ['batch', 'grads', 'reduce', 'apply'] as const;
type Phase = (typeof phases)[number];
export interface PhaseReport { worldSize: number; rank: number; localBatch: number; steps: number; wallMs: Record<Phase | 'total', number>; cpuMs: Record<Phase | 'total', number>; transport: string }

export function jobFileFor(model: string): string {
  if (model === 'mlp128') return join(repoRoot, 'examples', 'mnist', 'mnist-ddp.job.json');
  return join(repoRoot, 'bench', 'train', `${model}.job.json`);
}

async function child(model: string, worldSize: number, rank: number, dir: string, steps: number, transport: RingTransport, independent: boolean): Promise<PhaseReport> {
  const spec = loadJobFile(jobFileFor(model), { strategy: worldSize > 1 ? 'ddp' : 'single', devices: worldSize, backend: 'wasm' });
  const backend = await loadBackend('wasm');
  const tf = backend.tf;
  const data = await loadDataset(spec.data, spec.file);
  const net = await buildModel(tf, spec.model, data.inputShape, data.numClasses, spec.seed);
  const optimizer = makeOptimizer(tf, spec.optimizer);
  const vars = net.trainableWeights.map((w) => w.read() as Variable);
  const localBatch = spec.batchSize / worldSize;
  const width = data.inputShape.reduce((a, b) => a * b, 1);
  const shard = shardIndices({ datasetSize: data.train.count, worldSize, rank, seed: spec.seed, epoch: 0 });
  // Independent: the same local batch and shard, but a ring of one (no communication at all).
  const ring = independent ? await Ring.join({ rank: 0, worldSize: 1, dir }) : await Ring.join({ rank, worldSize, dir, transport });
  const reducer = new BucketedAllReduce(ring);
  const flat = new GradientBuffer(vars.map((v) => v.size), backend.name === 'wasm');
  const wall: Record<Phase | 'total', number> = { batch: 0, grads: 0, reduce: 0, apply: 0, total: 0 };
  const cpu: Record<Phase | 'total', number> = { batch: 0, grads: 0, reduce: 0, apply: 0, total: 0 };
  const cpuNow = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  };
  let c = cpuNow();
  const xbuf = new Float32Array(localBatch * width);
  const labels = new Int32Array(localBatch);
  let t = performance.now();
  const lap = (p: Phase) => {
    const now = performance.now();
    wall[p] += now - t;
    t = now;
    const cn = cpuNow();
    cpu[p] += cn - c;
    c = cn;
  };
  const warmup = 3;
  const stepsInShard = Math.floor(shard.length / localBatch);
  for (let s = 0; s < steps + warmup; s++) {
    if (s === warmup) {
      for (const p of phases) wall[p] = cpu[p] = 0;
      wall.total = t = performance.now();
      cpu.total = c = cpuNow();
    }
    const rows = shard.subarray((s % stepsInShard) * localBatch, ((s % stepsInShard) + 1) * localBatch);
    for (let i = 0; i < rows.length; i++) {
      xbuf.set(data.train.xs.subarray(rows[i] * width, (rows[i] + 1) * width), i * width);
      labels[i] = data.train.labels[rows[i]];
    }
    const x = tf.tensor(xbuf, [rows.length, ...data.inputShape]);
    const y = tf.tidy(() => tf.cast(tf.oneHot(tf.tensor1d(labels, 'int32'), data.numClasses), 'float32'));
    lap('batch');
    // The ddp step of worker.ts, phase by phase.
    const { value, grads } = optimizer.computeGradients(() => lossFn(tf, spec.loss, y, net.apply(x, { training: true }) as Tensor), vars);
    tf.dispose([x, y]);
    if (ring.worldSize === 1) {
      value.dataSync();
      lap('grads');
      lap('reduce');
      optimizer.applyGradients(grads);
      tf.dispose([value, ...Object.values(grads)]);
      lap('apply');
      continue;
    }
    const buf = flat.next();
    vars.forEach((v, i) => flat.put(buf, i, grads[v.name].dataSync() as Float32Array));
    buf[buf.length - 1] = value.dataSync()[0];
    tf.dispose([value, ...Object.values(grads)]);
    lap('grads');
    await reducer.meanFlat(buf);
    lap('reduce');
    const averaged = vars.map((v, i) => ({ name: v.name, tensor: tf.tensor(flat.view(buf, i), v.shape) }));
    optimizer.applyGradients(averaged);
    tf.dispose(averaged.map((a) => a.tensor));
    lap('apply');
  }
  wall.total = performance.now() - wall.total;
  cpu.total = cpuNow() - cpu.total;
  ring.close();
  return { worldSize, rank, localBatch, steps, wallMs: wall, cpuMs: cpu, transport: independent ? 'independent' : ring.transport };
}

/**
 * `worldSize` workers at once. `independent`: each trains on its own (batch/W rows, no ring),
 * which is the most any data parallelism can get out of this machine for W processes; `alone`:
 * one such worker by itself (what the smaller batch alone costs).
 */
export async function measurePhases(model: string, worldSize: number, steps: number, transport: RingTransport = 'shm', mode: 'ring' | 'independent' | 'alone' = 'ring'): Promise<PhaseReport[]> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-bench-phases-'));
  try {
    return await Promise.all(Array.from({ length: mode === 'alone' ? 1 : worldSize }, (_, rank) => new Promise<PhaseReport>((resolve, reject) => {
      const c = fork(__filename, ['--child', model, String(worldSize), String(rank), dir, String(steps), transport, mode], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      c.on('message', (m: PhaseReport | { error: string }) => ('error' in m ? reject(new Error(`rank ${rank}: ${m.error}`)) : resolve(m)));
      c.on('exit', (code) => { if (code !== 0) reject(new Error(`rank ${rank} exited ${code}`)); });
    })));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export function formatPhases(r: PhaseReport): string {
  const per = (ms: number) => (ms / r.steps).toFixed(2).padStart(6);
  return [
    `W=${r.worldSize} rank ${r.rank} (batch ${r.localBatch}, ${r.transport}), ms per step:`,
    `  wall ${phases.map((p) => `${p} ${per(r.wallMs[p])}`).join('  ')}  total ${per(r.wallMs.total)}`,
    `  CPU  ${phases.map((p) => `${p} ${per(r.cpuMs[p])}`).join('  ')}  total ${per(r.cpuMs.total)}`,
  ].join('\n');
}

/** Samples/s of a group of workers that ran at once: all their samples over the slowest one's time. */
export const sps = (rs: PhaseReport[]): number => (rs[0].localBatch * rs.length * rs[0].steps) / (Math.max(...rs.map((r) => r.wallMs.total)) / 1000);

async function main(): Promise<void> {
  const model = process.argv[2] ?? 'mlp512';
  const steps = Number(process.argv[3] ?? 30);
  const transport = (process.argv[4] ?? 'shm') as RingTransport;
  console.log(`${cpus().length} cores, load ${loadavg()[0].toFixed(1)}; ${model}, ${steps} steps per worker after 3 warm-up steps`);
  const one = await measurePhases(model, 1, steps, transport);
  const two = await measurePhases(model, 2, steps, transport);
  const pair = await measurePhases(model, 2, steps, transport, 'independent');
  for (const r of [...one, ...two]) console.log(formatPhases(r));
  console.log(`2 independent workers (batch/2 each, no ring): efficiency ${((100 * sps(pair)) / (2 * sps(one))).toFixed(0)}%, the ceiling for 2 processes here`);
  const perSample = (r: PhaseReport) => r.wallMs.grads / (r.steps * r.localBatch);
  const slow = Math.max(...two.map(perSample)) / perSample(one[0]);
  console.log(`forward+backward per sample on 2 workers / on 1: ×${slow.toFixed(2)}; samples/s 1 worker ${sps(one).toFixed(0)}, 2 workers ${sps(two).toFixed(0)}: efficiency ${((100 * sps(two)) / (2 * sps(one))).toFixed(0)}%`);
}

if (process.argv[2] === '--child') {
  const [model, w, rank, dir, steps, transport, mode] = process.argv.slice(3);
  child(model, Number(w), Number(rank), dir, Number(steps), transport as RingTransport, mode !== 'ring').then(
    (r) => process.send?.(r, () => process.exit(0)),
    (err: unknown) => process.send?.({ error: String((err as Error).stack ?? err) }, () => process.exit(1)),
  );
} else if (require.main === module) {
  main().catch((err: unknown) => { console.error(err); process.exitCode = 1; });
}

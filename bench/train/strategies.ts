/**
 * Training throughput per strategy and all-reduce bandwidth, as ratios measured in one run.
 *
 *   npx tsc -p . && node out/bench/train/strategies.js [epochs]
 *
 * 1. Samples/s of `single` (the anchor), `dp` and `ddp` on 2 workers, on the bundled MNIST MLP
 *    (784-128-10, global batch 128), from the job's own `job/done` metrics. Scaling efficiency
 *    = samples/s on W workers / (W × single). On a 2-core machine the two workers share the
 *    cores with everything else, so efficiency here is a floor.
 * 2. Ring all-reduce of 2.7 MB (the gradient size) between 2 processes over Unix
 *    domain sockets, against memcpy of the same bytes in this process: bus bandwidth
 *    (2(W-1)/W × bytes / time) as a fraction of memcpy bandwidth.
 */
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JobMetrics } from '../../src/training/events';
import { runJob } from '../../src/training/job';
import type { Strategy } from '../../src/training/jobSpec';
import { Ring } from '../../src/training/ring';
import { repoRoot } from '../../test/paths';

const epochs = Number(process.argv[2] ?? 2);
const job = join(repoRoot, 'examples', 'mnist', 'mnist-ddp.job.json');
const floats = Math.round(2.7e6 / 4);
const rounds = 30;

async function throughput(strategy: Strategy, devices: number): Promise<JobMetrics> {
  const handle = runJob({ file: job, overrides: { strategy, devices, epochs, checkpointDir: mkdtempSync(join(tmpdir(), 'gw-bench-ckpt-')) }, onEvent: () => undefined });
  const final = await handle.finished;
  if (final.type !== 'job/done') throw new Error(`${strategy}: ${final.reason}`);
  return final.metrics;
}

/** Child side of the all-reduce bench: join the ring, all-reduce `rounds` times, report ms. */
async function ringChild(rank: number, dir: string): Promise<void> {
  const ring = await Ring.join({ rank, worldSize: 2, dir });
  const data = new Float32Array(floats).fill(rank + 1);
  await ring.allReduceSum(data); // warm-up
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < rounds; i++) await ring.allReduceSum(data);
  const ms = Number(process.hrtime.bigint() - t0) / 1e6 / rounds;
  process.send?.({ ms }, () => { ring.close(); process.exit(0); });
}

async function allReduceMs(): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-bench-ring-'));
  try {
    const times = await Promise.all([0, 1].map((rank) => new Promise<number>((resolve, reject) => {
      const child = fork(__filename, ['--ring-child', String(rank), dir]);
      child.on('message', (m: { ms: number }) => resolve(m.ms));
      child.on('exit', (code) => { if (code !== 0) reject(new Error(`ring rank ${rank} exited ${code}`)); });
    })));
    return Math.max(...times);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function memcpyMs(): number {
  const src = new Float32Array(floats).fill(1);
  const dst = new Float32Array(floats);
  dst.set(src);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < rounds * 4; i++) dst.set(src);
  return Number(process.hrtime.bigint() - t0) / 1e6 / (rounds * 4);
}

async function main(): Promise<void> {
  console.log(`${cpus().length} cores, load ${loadavg()[0].toFixed(1)}; MNIST MLP, global batch 128, ${epochs} epochs`);
  const single = await throughput('single', 1);
  const rows: [string, JobMetrics][] = [['single', single], ['dp ×2', await throughput('dp', 2)], ['ddp ×2', await throughput('ddp', 2)]];
  for (const [name, m] of rows) {
    const w = name === 'single' ? 1 : 2;
    console.log(`${name.padEnd(8)} ${Math.round(m.samplesPerSecond).toString().padStart(6)} samples/s  ×${(m.samplesPerSecond / single.samplesPerSecond).toFixed(2)} of single  efficiency ${((100 * m.samplesPerSecond) / (w * single.samplesPerSecond)).toFixed(0)}%  test accuracy ${(100 * m.testAccuracy).toFixed(1)}%`);
  }
  const ring = await allReduceMs();
  const copy = memcpyMs();
  const bytes = floats * 4;
  const busGBs = (bytes / 1e9) / (ring / 1000); // 2(W-1)/W = 1 for W = 2
  const copyGBs = (bytes / 1e9) / (copy / 1000);
  console.log(`all-reduce 2.7 MB, 2 processes: ${ring.toFixed(2)} ms (${busGBs.toFixed(2)} GB/s bus), memcpy ${copy.toFixed(3)} ms (${copyGBs.toFixed(1)} GB/s): ${(100 * busGBs / copyGBs).toFixed(1)}% of memcpy`);
}

if (process.argv[2] === '--ring-child') void ringChild(Number(process.argv[3]), process.argv[4]);
else main().catch((err: unknown) => { console.error(err); process.exitCode = 1; });

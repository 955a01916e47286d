/**
 * Training throughput per strategy, ddp's scaling against PyTorch's, the pipeline bubble and the
 * all-reduce bandwidth, as ratios measured in one run.
 *
 *   npx tsc -p . && node out/bench/train/strategies.js [--rounds R] [--models mlp512,cnn,mlp128] [--no-torch]
 *   (or: npm run bench -- train)
 *
 * 1. Samples/s of `single` (the anchor), `single` with the wasm backend's own matMul (XNNPACK)
 *    instead of our GEMM (GPU_WORKBENCH_WASM_GEMM=xnnpack), `dp` and `ddp` on 2 workers and `pipeline` on 2 stages
 *    (2 and 4 micro-batches), from the jobs themselves: the `job/epoch` throughput of the last of
 *    2 epochs (training steps and their events; no start-up, evaluation or checkpoint). Models:
 *    the issue's MLP 784-512-512-10 at global batch 256 (bench/train/mlp512.job.json), its small
 *    CNN at 128 (cnn.job.json), and the bundled example MLP 784-128-10 at 128. Every worker is
 *    one process on the wasm backend with one thread and SIMD, `single` included, so efficiency
 *    = samples/s on W workers / (W × single) compares like with like. The global batch is the
 *    same for every strategy (each of W workers trains on batch/W rows).
 * 2. Where a ddp step's time goes on 2 workers against 1 (bench/train/_phases.ts).
 * 3. PyTorch (Debian python3-torch, CPU, gloo, one thread per process) on the same models, data
 *    and global batch: single and DDP on 2 processes (bench/train/torch_ddp.py). Skipped, with a
 *    line saying why, when /usr/bin/python3 has no torch.
 * 4. Ring all-reduce of 2.7 MB (the MLP's gradients) between 2 and 4 processes, over the shared
 *    memory transport and over sockets, against memcpy of the same bytes: bus bandwidth
 *    (2(W-1)/W × bytes / time) as a fraction of memcpy bandwidth.
 * Every configuration runs R rounds (default 1), interleaved, and keeps its best, since other
 * processes share this machine's cores; the load average is printed before and after.
 */
import { fork, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadDataset } from '../../src/training/job/data';
import type { JobMetrics } from '../../src/training/job/events';
import { runJob } from '../../src/training/launchers/coordinator';
import { loadJobFile, type JobOverrides } from '../../src/training/job/spec';
import { Ring, type RingTransport } from '../../src/training/transport/ring';
import { repoRoot } from '../../test/paths';
import { formatPhases, jobFileFor, measurePhases, sps, type PhaseReport } from './_phases';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}
const rounds = Number(arg('rounds', '1'));
const models = arg('models', 'mlp512,cnn,mlp128').split(',');
const withTorch = !process.argv.includes('--no-torch');
const python = '/usr/bin/python3';
const floats = Math.round(2.7e6 / 4);

interface Config { readonly name: string; readonly workers: number; readonly overrides: JobOverrides; readonly env?: Record<string, string> }

const configs: Config[] = [
  { name: 'single', workers: 1, overrides: { strategy: 'single', devices: 1 } },
  // The anchor of our GEMM: the same job with the wasm backend's own matMul (XNNPACK, no FMA).
  { name: 'single, XNNPACK matMul', workers: 1, overrides: { strategy: 'single', devices: 1 }, env: { GPU_WORKBENCH_WASM_GEMM: 'xnnpack' } },
  { name: 'dp ×2', workers: 2, overrides: { strategy: 'dp', devices: 2 } },
  { name: 'ddp ×2', workers: 2, overrides: { strategy: 'ddp', devices: 2 } },
  { name: 'pipeline 2 stages, 2 micro', workers: 2, overrides: { strategy: 'pipeline', devices: 2, pipeline: { stages: 2, microBatches: 2, schedule: 'gpipe' } } },
  { name: 'pipeline 2 stages, 4 micro', workers: 2, overrides: { strategy: 'pipeline', devices: 2, pipeline: { stages: 2, microBatches: 4, schedule: 'gpipe' } } },
];

interface Run { samplesPerSecond: number; metrics: JobMetrics }

/** The job's last-epoch training throughput, and its final metrics. */
async function runConfig(model: string, c: Config): Promise<Run> {
  let last = NaN;
  const saved = { ...process.env };
  Object.assign(process.env, c.env ?? {}); // the workers inherit it
  const handle = runJob({
    file: jobFileFor(model),
    overrides: { ...c.overrides, epochs: 2, backend: 'wasm', checkpointDir: mkdtempSync(join(tmpdir(), 'gw-bench-ckpt-')) },
    onEvent: (e) => { if (e.type === 'job/epoch') last = e.samplesPerSecond; },
  });
  const final = await handle.finished.finally(() => {
    for (const k of Object.keys(c.env ?? {})) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
  });
  if (final.type !== 'job/done') throw new Error(`${model} ${c.name}: ${final.reason}`);
  return { samplesPerSecond: last, metrics: final.metrics };
}

function best<T>(runs: T[], key: (t: T) => number): T {
  return runs.reduce((a, b) => (key(b) > key(a) ? b : a));
}

const pct = (x: number) => `${(100 * x).toFixed(0)}%`;
const num = (x: number) => Math.round(x).toString().padStart(6);

// ---- PyTorch ----

interface TorchResult { samples_per_s: number; ms_per_step: number; world: number; threads: number; torch: string }

function torchMissing(): string | undefined {
  if (!existsSync(python)) return `${python} does not exist`;
  const r = spawnSync(python, ['-c', 'import torch, torch.distributed as d; assert d.is_gloo_available(), "no gloo"; print(torch.__version__)'], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) return `${python} cannot import torch with gloo: ${(r.stderr || r.error?.message || '').trim().split('\n').pop()}`;
  return undefined;
}

function runTorch(model: string, world: number, batch: number, dataFile: string, steps: number): TorchResult {
  const r = spawnSync(python, [join(repoRoot, 'bench', 'train', 'torch_ddp.py'), '--model', model, '--batch', String(batch), '--world', String(world), '--steps', String(steps), '--threads', '1', '--data', dataFile], { encoding: 'utf8', timeout: 300_000 });
  const line = (r.stdout ?? '').trim().split('\n').pop() ?? '';
  try {
    return JSON.parse(line) as TorchResult;
  } catch {
    throw new Error(`torch_ddp.py ${model} world ${world} printed no result (exit ${r.status ?? r.signal}): ${(r.stderr || line).trim().split('\n').slice(-3).join(' | ')}`);
  }
}

/** The job's training rows as the file torch_ddp.py reads: int32 rows, int32 width, float32 features, int32 labels. */
async function writeData(model: string, file: string): Promise<void> {
  const spec = loadJobFile(jobFileFor(model));
  const data = await loadDataset(spec.data, spec.file);
  const width = data.inputShape.reduce((a, b) => a * b, 1);
  const head = new Int32Array([data.train.count, width]);
  writeFileSync(file, Buffer.concat([Buffer.from(head.buffer), Buffer.from(data.train.xs.buffer, data.train.xs.byteOffset, data.train.xs.byteLength), Buffer.from(data.train.labels.buffer, data.train.labels.byteOffset, data.train.labels.byteLength)]));
}

// ---- all-reduce ----

/** Child side of the all-reduce bench: join the ring, all-reduce 30 times, report ms. */
async function ringChild(rank: number, worldSize: number, dir: string, transport: RingTransport): Promise<void> {
  const ring = await Ring.join({ rank, worldSize, dir, transport });
  const data = new Float32Array(floats).fill(rank + 1);
  for (let i = 0; i < 3; i++) await ring.allReduceSum(data); // warm-up
  const n = 30;
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < n; i++) await ring.allReduceSum(data);
  const ms = (performance.now() - t0) / n;
  const c = process.cpuUsage(c0);
  await ring.allReduceSum(new Float32Array(1)); // nobody closes before everybody is done
  process.send?.({ ms, cpuMs: (c.user + c.system) / 1000 / n }, () => { ring.close(); process.exit(0); });
}

/** Wall ms of one all-reduce (the slowest rank), and the CPU ms it costs a rank (the most of any): the work, without the waiting. */
async function allReduceMs(worldSize: number, transport: RingTransport): Promise<{ ms: number; cpuMs: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-bench-ring-'));
  try {
    const times = await Promise.all(Array.from({ length: worldSize }, (_, rank) => new Promise<{ ms: number; cpuMs: number }>((resolve, reject) => {
      const child = fork(__filename, ['--ring-child', String(rank), String(worldSize), dir, transport]);
      child.on('message', (m: { ms: number; cpuMs: number }) => resolve(m));
      child.on('exit', (code) => { if (code !== 0) reject(new Error(`ring rank ${rank} exited ${code}`)); });
    })));
    return { ms: Math.max(...times.map((t) => t.ms)), cpuMs: Math.max(...times.map((t) => t.cpuMs)) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function memcpyMs(): number {
  const src = new Float32Array(floats).fill(1);
  const dst = new Float32Array(floats);
  dst.set(src);
  let bestMs = Infinity;
  for (let r = 0; r < 5; r++) {
    const t0 = performance.now();
    for (let i = 0; i < 40; i++) dst.set(src);
    bestMs = Math.min(bestMs, (performance.now() - t0) / 40);
  }
  return bestMs;
}

async function main(): Promise<void> {
  console.log(`${cpus().length} cores (${cpus()[0]?.model ?? '?'}), load ${loadavg().map((l) => l.toFixed(1)).join(' ')}; ${rounds} round(s), best kept; wasm backend, 1 thread + SIMD per worker`);
  const ours = new Map<string, Map<string, Run>>();
  for (const model of models) {
    const spec = loadJobFile(jobFileFor(model));
    console.log(`\n-- ${model}: ${spec.model.kind === 'preset' ? (spec.model.preset === 'mlp' ? `MLP 784-${spec.model.hiddenUnits.join('-')}-10` : `CNN filters ${spec.model.filters.join(',')}`) : spec.model.kind}, global batch ${spec.batchSize}, Adam`);
    const runs = new Map<string, Run[]>();
    const wanted = model === 'mlp512' ? configs : configs.filter((c) => !c.name.startsWith('pipeline'));
    for (let r = 0; r < rounds; r++) {
      for (const c of wanted) {
        try {
          const run = await runConfig(model, c);
          runs.set(c.name, [...(runs.get(c.name) ?? []), run]);
        } catch (err) {
          console.log(`${c.name}: failed: ${(err as Error).message}`);
        }
      }
    }
    const bestRuns = new Map([...runs].map(([k, v]) => [k, best(v, (x) => x.samplesPerSecond)]));
    ours.set(model, bestRuns);
    const single = bestRuns.get('single')?.samplesPerSecond ?? NaN;
    for (const c of wanted) {
      const run = bestRuns.get(c.name);
      if (!run) continue;
      const p = run.metrics.pipeline;
      const extra = p ? `  bubble ${pct(p.bubbleFraction)} measured vs ${pct(p.idealBubbleFraction)} ideal (p-1)/(m+p-1): ×${(p.bubbleFraction / p.idealBubbleFraction).toFixed(2)}` : '';
      console.log(`${c.name.padEnd(27)} ${num(run.samplesPerSecond)} samples/s  ×${(run.samplesPerSecond / single).toFixed(2)} of single${c.workers > 1 ? `  efficiency ${pct(run.samplesPerSecond / (c.workers * single))}` : ''}  test accuracy ${(100 * run.metrics.testAccuracy).toFixed(1)}%${extra}`);
    }
  }

  console.log('\n-- where a ddp step goes (mlp512, 20 steps; wall and CPU ms per step per phase)');
  let phases: { one: PhaseReport[]; two: PhaseReport[]; pair: PhaseReport[]; half: PhaseReport[] } | undefined;
  try {
    phases = { one: await measurePhases('mlp512', 1, 20), two: await measurePhases('mlp512', 2, 20), pair: await measurePhases('mlp512', 2, 20, 'shm', 'independent'), half: await measurePhases('mlp512', 2, 20, 'shm', 'alone') };
    for (const r of [...phases.one, ...phases.two]) console.log(formatPhases(r));
    const cpuPerSample = (rs: PhaseReport[]) => rs.reduce((t, r) => t + r.cpuMs.grads, 0) / rs.reduce((t, r) => t + r.steps * r.localBatch, 0);
    console.log(`forward+backward CPU per sample: batch ${phases.one[0].localBatch} alone ${cpuPerSample(phases.one).toFixed(3)} ms, batch ${phases.half[0].localBatch} alone ${cpuPerSample(phases.half).toFixed(3)} ms (×${(cpuPerSample(phases.half) / cpuPerSample(phases.one)).toFixed(2)}: the smaller batch), 2 independent workers at once ${cpuPerSample(phases.pair).toFixed(3)} ms, ddp ×2 ${cpuPerSample(phases.two).toFixed(3)} ms`);
    console.log(`same loop, 1 worker ${num(sps(phases.one))} samples/s, ddp ×2 ${num(sps(phases.two))}: efficiency ${pct(sps(phases.two) / (2 * sps(phases.one)))}; 2 independent workers at once (batch/2 each, no ring) ${num(sps(phases.pair))}: ${pct(sps(phases.pair) / (2 * sps(phases.one)))}, the most 2 processes get out of this machine`);
  } catch (err) {
    console.log(`failed: ${(err as Error).message}`);
  }

  const torch = new Map<string, { single: TorchResult; ddp: TorchResult }>();
  console.log('\n-- PyTorch (python3-torch, CPU, gloo), 1 thread per process, same data and global batch');
  const missing = withTorch ? torchMissing() : 'skipped (--no-torch)';
  if (missing) console.log(`PyTorch side skipped: ${missing}`);
  else {
    if (!existsSync('/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3')) console.log('warning: libopenblas0-pthread is not installed: this torch uses the reference BLAS (about 9x slower), not a fair anchor');
    const dataDir = mkdtempSync(join(tmpdir(), 'gw-bench-torch-'));
    try {
      for (const model of models) {
        const spec = loadJobFile(jobFileFor(model));
        const file = join(dataDir, `${model}.bin`);
        await writeData(model, file);
        const steps = model === 'cnn' ? 40 : 60;
        try {
          const singles: TorchResult[] = [];
          const ddps: TorchResult[] = [];
          for (let r = 0; r < rounds; r++) {
            singles.push(runTorch(model, 1, spec.batchSize, file, steps));
            ddps.push(runTorch(model, 2, spec.batchSize, file, steps));
          }
          const s = best(singles, (x) => x.samples_per_s);
          const d = best(ddps, (x) => x.samples_per_s);
          torch.set(model, { single: s, ddp: d });
          console.log(`${model.padEnd(7)} torch ${s.torch}: single ${num(s.samples_per_s)} samples/s, DDP ×2 ${num(d.samples_per_s)} samples/s: efficiency ${pct(d.samples_per_s / (2 * s.samples_per_s))}`);
        } catch (err) {
          console.log(`${model}: ${(err as Error).message}`);
        }
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }

  console.log('\n-- all-reduce of 2.7 MB against memcpy');
  const copy = memcpyMs();
  const bytes = floats * 4;
  const copyGBs = bytes / 1e9 / (copy / 1000);
  const ring: Record<string, { ms: number; cpuMs: number }> = {};
  for (const w of [2, 4]) {
    for (const t of ['shm', 'socket'] as const) {
      const runs: { ms: number; cpuMs: number }[] = [];
      for (let r = 0; r < rounds; r++) runs.push(await allReduceMs(w, t));
      const m = { ms: Math.min(...runs.map((x) => x.ms)), cpuMs: Math.min(...runs.map((x) => x.cpuMs)) };
      ring[`${t}${w}`] = m;
      const bus = (ms: number) => ((2 * (w - 1)) / w) * (bytes / 1e9) / (ms / 1000);
      console.log(`${w} processes, ${t.padEnd(6)} ${m.ms.toFixed(2).padStart(6)} ms wall  ${bus(m.ms).toFixed(2)} GB/s bus = ${(100 * bus(m.ms) / copyGBs).toFixed(1)}% of memcpy; ${m.cpuMs.toFixed(2)} ms CPU per rank = ${(100 * bus(m.cpuMs) / copyGBs).toFixed(1)}% (memcpy ${copy.toFixed(3)} ms, ${copyGBs.toFixed(1)} GB/s)`);
    }
  }

  console.log('\n-- summary (ratios)');
  for (const model of models) {
    const o = ours.get(model);
    const t = torch.get(model);
    const single = o?.get('single')?.samplesPerSecond ?? NaN;
    const ddp = o?.get('ddp ×2')?.samplesPerSecond ?? NaN;
    const effOurs = ddp / (2 * single);
    const parts = [`${model}: ddp efficiency ours ${pct(effOurs)}`];
    if (t) {
      const effTorch = t.ddp.samples_per_s / (2 * t.single.samples_per_s);
      parts.push(`PyTorch ${pct(effTorch)} (ours/theirs ×${(effOurs / effTorch).toFixed(2)})`);
      const xnn = o?.get('single, XNNPACK matMul')?.samplesPerSecond;
      parts.push(`throughput tfjs/PyTorch single ×${(single / t.single.samples_per_s).toFixed(2)}${xnn ? ` (×${(xnn / t.single.samples_per_s).toFixed(2)} with XNNPACK's matMul)` : ''}, ddp ×${(ddp / t.ddp.samples_per_s).toFixed(2)}`);
    }
    console.log(parts.join('; '));
  }
  const pipe = ours.get('mlp512');
  for (const m of [2, 4]) {
    const p = pipe?.get(`pipeline 2 stages, ${m} micro`)?.metrics.pipeline;
    if (p) console.log(`pipeline 2 stages, ${m} micro-batches: bubble ${pct(p.bubbleFraction)} measured / ${pct(p.idealBubbleFraction)} ideal = ×${(p.bubbleFraction / p.idealBubbleFraction).toFixed(2)}`);
  }
  if (ring.shm2) console.log(`all-reduce 2.7 MB, 2 processes: shm ${ring.shm2.ms.toFixed(2)} ms wall / ${ring.shm2.cpuMs.toFixed(2)} ms CPU, socket ${ring.socket2.ms.toFixed(2)} / ${ring.socket2.cpuMs.toFixed(2)} ms; bus bandwidth / memcpy: shm ${(100 * copy / ring.shm2.ms).toFixed(1)}% wall, ${(100 * copy / ring.shm2.cpuMs).toFixed(1)}% CPU`);
  if (phases) {
    const one = phases.one[0];
    const two = phases.two.reduce((a, b) => (b.wallMs.total > a.wallMs.total ? b : a));
    const per = (r: PhaseReport, k: keyof PhaseReport['wallMs']) => r.wallMs[k] / r.steps;
    console.log(`mlp512 ddp step on 2 workers: forward+backward per sample ×${((per(two, 'grads') / two.localBatch) / (per(one, 'grads') / one.localBatch)).toFixed(2)} of one worker's, all-reduce (waiting included) ${pct(per(two, 'reduce') / per(two, 'total'))} of the step, optimizer update ${pct(per(two, 'apply') / per(two, 'total'))} (the same work as single's: it does not shrink with the batch)`);
  }
  console.log(`load ${loadavg().map((l) => l.toFixed(1)).join(' ')} at the end`);
}

if (process.argv[2] === '--ring-child') void ringChild(Number(process.argv[3]), Number(process.argv[4]), process.argv[5], process.argv[6] as RingTransport);
else main().catch((err: unknown) => { console.error(err); process.exitCode = 1; });

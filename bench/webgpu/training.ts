/**
 * Training throughput on the webgpu backend (Dawn, tfjs-backend-webgpu + our webgpu kernels),
 * on wasm (with our kernels, as a worker runs it) and in PyTorch, measured in one run, printed
 * as ratios against PyTorch.
 *
 *   npx tsc -p . && node out/bench/webgpu/training.js [--seconds S] [--rounds R] [--no-torch] [--python PATH]
 *   (or: npm run bench -- webgpu; on a machine without node_modules, `bash scripts/device-kit.sh`
 *   bundles it as dist/bench-webgpu.js beside dawn.node and the wasm files)
 *
 * Models (issue 14, item 9): the MLP preset 784-512-512-10 at batch 256 and 1024, and the CNN
 * preset (conv 8 → pool → conv 16 → pool → dense 10 on 28×28×1) at batch 256, built by the job
 * code (model.ts) with Adam. A step is a `single` worker's: computeGradients, applyGradients,
 * and the loss read back (on webgpu that read is where the step waits for the GPU). Batches are
 * pre-built (no data pipeline). Each configuration trains for at least S seconds after two
 * warm-up steps (shader compilation); configurations, PyTorch included, are interleaved over R
 * rounds and the best round of each is kept, since other processes share this machine.
 *
 * PyTorch (bench/train/torch_ddp.py, the same models, Adam, batch): on CUDA where
 * torch.cuda.is_available() — the anchor for a GPU — else on the CPU with one thread, as a wasm
 * worker runs. On a software adapter (lavapipe, SwiftShader) the webgpu figure is printed as
 * software and not compared: it says the code path works, not how fast a GPU would run it.
 */
import { spawnSync } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import type { LayersModel } from '@tensorflow/tfjs-layers';
import type { Tensor, Variable } from '@tensorflow/tfjs-core';
import { loadBackend } from '../../src/training/backends/backend';
import type { Tf } from '../../src/training/backends/types';
import { buildModel, lossFn, makeOptimizer } from '../../src/training/job/model';
import type { ModelSource } from '../../src/training/job/spec';
import { randomBatch } from '../../test/unit/training/backends/wasmKernels/models';
import { initWebgpu, webgpuAdapter } from '../../test/unit/training/backends/webgpu/webgpuHarness';
import { repoRoot } from '../../test/paths';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}
const seconds = Number(arg('seconds', '4'));
const rounds = Number(arg('rounds', '2'));
const withTorch = !process.argv.includes('--no-torch');
// Debian's python3-torch belongs to /usr/bin/python3; elsewhere (a GPU machine's venv) say which one.
const python = arg('python', process.env.GPU_WORKBENCH_PYTHON ?? '/usr/bin/python3');

interface Case { name: string; torchModel: string; src: ModelSource; shape: number[]; batch: number }
const cases: Case[] = [
  { name: 'MLP 784-512-512-10, batch 256', torchModel: 'mlp512', src: { kind: 'preset', preset: 'mlp', hiddenUnits: [512, 512] }, shape: [784], batch: 256 },
  { name: 'MLP 784-512-512-10, batch 1024', torchModel: 'mlp512', src: { kind: 'preset', preset: 'mlp', hiddenUnits: [512, 512] }, shape: [784], batch: 1024 },
  { name: 'CNN conv8-pool-conv16-pool-dense10, batch 256', torchModel: 'cnn', src: { kind: 'preset', preset: 'cnn', filters: [8, 16] }, shape: [28, 28, 1], batch: 256 },
];

type Backend = 'webgpu' | 'wasm';

/** Samples per second of `single` steps on `backend`, or the error that stopped it. */
async function throughput(tf: Tf, backend: Backend, c: Case): Promise<number | Error> {
  await tf.setBackend(backend);
  let model: LayersModel | undefined;
  const batches = [0, 1].map((i) => randomBatch(c.batch, c.shape, 200 + i));
  try {
    model = await buildModel(tf, c.src, c.shape, 10, 7);
    const net = model;
    const optimizer = makeOptimizer(tf, { name: 'adam', learningRate: 1e-3, momentum: 0 });
    const vars = net.trainableWeights.map((w) => w.read() as Variable);
    const step = async (k: number) => {
      const { x, y } = batches[k % batches.length];
      const { value, grads } = optimizer.computeGradients(() => lossFn(tf, 'categoricalCrossentropy', y, net.apply(x, { training: true }) as Tensor), vars);
      optimizer.applyGradients(grads);
      const loss = (await value.data())[0];
      tf.dispose([value, ...Object.values(grads)]);
      if (!Number.isFinite(loss)) throw new Error(`loss ${loss} at step ${k}`);
    };
    await step(0);
    await step(1);
    let steps = 0;
    const start = performance.now();
    while (performance.now() - start < seconds * 1000 || steps < 3) await step(steps++);
    const rate = (steps * c.batch) / ((performance.now() - start) / 1000);
    optimizer.dispose();
    return rate;
  } catch (e) {
    return e instanceof Error ? e : new Error(String(e));
  } finally {
    batches.forEach((b) => tf.dispose([b.x, b.y]));
    model?.dispose();
  }
}

interface Torch { samplesPerSecond: number; device: string; torch: string }

function torchRate(c: Case, device: 'cuda' | 'cpu'): Torch | Error {
  const r = spawnSync(python, [join(repoRoot, 'bench', 'train', 'torch_ddp.py'), '--model', c.torchModel, '--batch', String(c.batch), '--world', '1', '--steps', device === 'cuda' ? '200' : '20', '--warmup', '3', '--device', device], { encoding: 'utf8', timeout: 600_000 });
  if (r.status !== 0) return new Error((r.stderr || r.stdout || `exit ${r.status}`).trim().split('\n').pop() ?? '');
  const out = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as { samples_per_s: number; device: string; torch: string };
  return { samplesPerSecond: out.samples_per_s, device: out.device, torch: out.torch };
}

function torchDevice(): { device: 'cuda' | 'cpu' } | { missing: string } {
  const r = spawnSync(python, ['-c', 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")'], { encoding: 'utf8' });
  if (r.status !== 0) return { missing: `${python} has no torch (${(r.stderr || '').trim().split('\n').pop() ?? ''})` };
  return { device: r.stdout.trim() === 'cuda' ? 'cuda' : 'cpu' };
}

async function main(): Promise<void> {
  const why = await initWebgpu();
  const wasm = await loadBackend('wasm'); // our wasm kernels, relaxed-SIMD GEMM and heap guard, as a worker
  const tf = wasm.tf;
  const adapter = webgpuAdapter();
  console.log(`node ${process.version}, ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), load average ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  const software = adapter?.software === true;
  console.log(why ? `webgpu: not measured: ${why}` : `webgpu: ${adapter?.description || adapter?.device || '?'} (vendor ${adapter?.vendor}, architecture ${adapter?.architecture})${software ? ': a SOFTWARE adapter (WebGPU on the CPU): its figures say the code path runs, not how fast a GPU is; not compared' : ''}`);
  const dev = withTorch ? torchDevice() : { missing: '--no-torch' };
  console.log('device' in dev ? `PyTorch: ${python}, on ${dev.device === 'cuda' ? 'CUDA (the anchor on a GPU machine)' : 'the CPU, one thread (as a wasm worker)'}` : `PyTorch: not measured: ${dev.missing}`);

  for (const c of cases) {
    const best = new Map<Backend, number | Error>();
    const backends: Backend[] = why ? ['wasm'] : ['webgpu', 'wasm'];
    let torch: Torch | Error | undefined;
    // PyTorch runs inside each round too, so that every figure saw the same load.
    for (let r = 0; r < rounds; r++) {
      for (const b of backends) {
        const v = await throughput(tf, b, c);
        const prev = best.get(b);
        best.set(b, prev == null || prev instanceof Error ? v : v instanceof Error ? prev : Math.max(prev, v));
      }
      if ('device' in dev) {
        const t = torchRate(c, dev.device);
        if (torch == null || torch instanceof Error || (!(t instanceof Error) && t.samplesPerSecond > torch.samplesPerSecond)) torch = t;
      }
    }
    const anchor = torch && !(torch instanceof Error) ? torch.samplesPerSecond : undefined;
    console.log(`\n${c.name}, adam (best of ${rounds} rounds of ≥${seconds}s)`);
    const line = (label: string, v: number | Error | undefined, compare: boolean, note = '') => {
      const text = v == null ? 'not measured' : v instanceof Error ? `does not train: ${v.message.split('\n')[0]}` : `${v.toFixed(0).padStart(7)} samples/s ${compare && anchor ? `(${(v / anchor).toFixed(2)}× PyTorch)` : ''}`;
      console.log(`  ${label.padEnd(28)} ${text}${note}`);
    };
    if (torch instanceof Error) console.log(`  PyTorch failed: ${torch.message}`);
    else if (torch) line(`PyTorch ${torch.torch} (${torch.device})`, torch.samplesPerSecond, false, ' (anchor)');
    if (!why) line(software ? 'webgpu (SOFTWARE adapter)' : 'webgpu', best.get('webgpu'), !software, software ? '  (software: not compared)' : '');
    line('wasm (1 thread, our kernels)', best.get('wasm'), true);
  }
  console.log(`\nload average after: ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
}

main().then(() => process.exit(0), (e: unknown) => {
  console.error(e);
  process.exit(1);
});

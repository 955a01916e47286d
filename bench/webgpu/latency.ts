/**
 * Where a webgpu training step's time goes. On an H100 (2026-11-26, bench/webgpu/training.ts)
 * webgpu trained at 0.02× PyTorch CUDA's samples/s, and at batch 256 and 1024 alike about 50 ms
 * a step: a cost per step, not per sample. This counts, per `single` step (computeGradients,
 * applyGradients, the loss read back), what the step asks of the GPU: queue submits, buffer
 * maps (GPU→CPU reads, each a wait for the GPU), compute dispatches, pipelines and buffers
 * created; and times the step reading its loss every step against reading it once at the end,
 * with tfjs-backend-webgpu's hand-off of small tensors to the CPU (WEBGPU_CPU_FORWARD) on and
 * off, with our uploads (queue.writeBuffer, webgpuUpload.ts) and tfjs's own (a staging buffer per
 * tensor), and a bare read round trip. The process's CPU time per step beside the wall time says
 * whether the step waits for the GPU or for the CPU that feeds it (JS, Dawn's validation,
 * Vulkan command recording: on lavapipe the shaders themselves also run on the CPU, in other threads).
 *
 *   npx tsc -p . && node out/bench/webgpu/latency.js [--steps N] [--case TEXT]     (or dist/bench-webgpu-latency.js)
 *
 * --case keeps only the models whose name contains TEXT (e.g. `--case CNN`), for a profile of one.
 * --kernels adds, per model, the GPU time of one step by shader program, from timestamp queries
 * (tf.time; the device must have 'timestamp-query', which webgpu.ts asks for where the adapter has
 * it): a step whose process CPU time matches its wall time may still be waiting for the GPU, since
 * Dawn's mapAsync is awaited by polling on the CPU.
 *
 * Counts and times are printed as they are: the ratios that matter are between the rows of one run.
 */
import { loadavg } from 'node:os';
import type { LayersModel } from '@tensorflow/tfjs-layers';
import type { Tensor, Variable } from '@tensorflow/tfjs-core';
import { buildModel, lossFn, makeOptimizer } from '../../src/training/job/model';
import type { ModelSource } from '../../src/training/job/spec';
import { randomBatch } from '../../test/unit/training/backends/wasmKernels/models';
import { initWebgpu, webgpuAdapter } from '../../test/unit/training/backends/webgpu/webgpuHarness';
import { loadBackend } from '../../src/training/backends/backend';
import type { Tf } from '../../src/training/backends/types';

let tf: Tf;

const stepsArg = process.argv.indexOf('--steps');
const steps = stepsArg > 0 ? Number(process.argv[stepsArg + 1]) : 20;
const caseArg = process.argv.indexOf('--case');
const only = caseArg > 0 ? process.argv[caseArg + 1] : '';
const kernels = process.argv.includes('--kernels');

interface Counts { submits: number; maps: number; dispatches: number; pipelines: number; buffers: number; writes: number }
const counts: Counts = { submits: 0, maps: 0, dispatches: 0, pipelines: 0, buffers: 0, writes: 0 };
const zero = (): Counts => ({ submits: 0, maps: 0, dispatches: 0, pipelines: 0, buffers: 0, writes: 0 });
const snapshot = (): Counts => ({ ...counts });
const diff = (a: Counts, b: Counts): Counts => {
  const d = zero();
  for (const k of Object.keys(d) as (keyof Counts)[]) d[k] = b[k] - a[k];
  return d;
};

type Fn = (...args: unknown[]) => unknown;
/** Wraps `obj[name]` to count its calls under `key` (none: not counted), keeping `this`; `after` sees what it returned. */
function count(obj: Record<string, unknown>, name: string, key: keyof Counts | undefined, after?: (ret: unknown) => void): void {
  const original = obj[name] as Fn | undefined;
  if (typeof original !== 'function') return;
  obj[name] = function (this: unknown, ...args: unknown[]) {
    if (key) counts[key]++;
    const ret = original.apply(this === undefined ? obj : this, args);
    after?.(ret);
    return ret;
  };
}

function instrument(device: Record<string, unknown>): void {
  count(device.queue as Record<string, unknown>, 'submit', 'submits');
  count(device.queue as Record<string, unknown>, 'writeBuffer', 'writes');
  count(device, 'createComputePipeline', 'pipelines');
  count(device, 'createComputePipelineAsync', 'pipelines');
  count(device, 'createBuffer', 'buffers', (buffer) => count(buffer as Record<string, unknown>, 'mapAsync', 'maps'));
  count(device, 'createCommandEncoder', undefined, (encoder) => {
    count(encoder as Record<string, unknown>, 'beginComputePass', undefined, (pass) => count(pass as Record<string, unknown>, 'dispatchWorkgroups', 'dispatches'));
  });
}

const cases: { name: string; src: ModelSource; shape: number[]; batch: number; optimizer?: 'sgd' }[] = [
  { name: 'MLP 784-512-512-10, batch 256', src: { kind: 'preset', preset: 'mlp', hiddenUnits: [512, 512] }, shape: [784], batch: 256 },
  { name: 'MLP 784-512-512-10, batch 256, SGD (no Adam: its ops and scalars out of the step)', src: { kind: 'preset', preset: 'mlp', hiddenUnits: [512, 512] }, shape: [784], batch: 256, optimizer: 'sgd' },
  { name: 'CNN conv8-pool-conv16-pool-dense10, batch 256', src: { kind: 'preset', preset: 'cnn', filters: [8, 16] }, shape: [28, 28, 1], batch: 256 },
];

/** A case's model, optimizer and batch, and its training step (loss returned), after 3 warm-up steps; `done` frees them. */
async function warmedUp(c: (typeof cases)[number]): Promise<{ step: () => Tensor; done: () => void }> {
  const model: LayersModel = await buildModel(tf, c.src, c.shape, 10, 7);
  const optimizer = makeOptimizer(tf, { name: c.optimizer ?? 'adam', learningRate: 1e-3, momentum: 0 });
  const vars = model.trainableWeights.map((w) => w.read() as Variable);
  const batch = randomBatch(c.batch, c.shape, 11);
  const step = () => {
    const { value, grads } = optimizer.computeGradients(() => lossFn(tf, 'categoricalCrossentropy', batch.y, model.apply(batch.x, { training: true }) as Tensor), vars);
    optimizer.applyGradients(grads);
    tf.dispose(Object.values(grads));
    return value;
  };
  for (let i = 0; i < 3; i++) {
    const v = step();
    await v.data();
    v.dispose();
  }
  const done = (): void => {
    tf.dispose([batch.x, batch.y]);
    optimizer.dispose();
    model.dispose();
  };
  return { step, done };
}

/** The GPU time of one step by shader program (timestamp queries through tf.time), after 3 warm-up steps. */
async function kernelTimes(c: (typeof cases)[number]): Promise<string> {
  const { step, done } = await warmedUp(c);
  const t = await tf.time(() => step().dispose());
  done();
  if (typeof t.kernelMs !== 'number') return `  GPU time by program: not measured (${t.kernelMs.error})`;
  const by = new Map<string, { ms: number; n: number }>();
  for (const part of (t.getExtraProfileInfo?.() ?? '').split(', ')) {
    const m = /^(.*): ([\d.e+-]+)$/.exec(part);
    if (!m) continue;
    const e = by.get(m[1]) ?? { ms: 0, n: 0 };
    e.ms += Number(m[2]);
    e.n++;
    by.set(m[1], e);
  }
  // Our own kernels (webgpuKernels/: fused Adam, max-pool gradient) are plain objects, which tfjs names by their constructor.
  const top = [...by].map(([name, e]): [string, { ms: number; n: number }] => [name === 'Object' ? 'Object (our kernels: fused Adam, max-pool gradient)' : name, e]).sort((a, b) => b[1].ms - a[1].ms).slice(0, 10);
  return `  GPU time of one step (timestamp queries, each program in its own pass): ${t.kernelMs.toFixed(2)} ms in ${[...by.values()].reduce((a, e) => a + e.n, 0)} programs\n${top.map(([name, e]) => `    ${e.ms.toFixed(3).padStart(9)} ms  ${String(e.n).padStart(3)}x ${name}`).join('\n')}`;
}

async function measure(c: (typeof cases)[number], readEvery: 'step' | 'end'): Promise<{ ms: number; cpuMs: number; per: Counts }> {
  const { step, done } = await warmedUp(c);
  const before = snapshot();
  const start = performance.now();
  const cpu0 = process.cpuUsage();
  let last: Tensor | undefined;
  for (let i = 0; i < steps; i++) {
    const v = step();
    if (readEvery === 'step') {
      await v.data();
      v.dispose();
    } else {
      last?.dispose();
      last = v;
    }
  }
  if (last) {
    await last.data();
    last.dispose();
  }
  const ms = (performance.now() - start) / steps;
  const cpu = process.cpuUsage(cpu0);
  const cpuMs = (cpu.user + cpu.system) / 1000 / steps;
  const d = diff(before, snapshot());
  const per = zero();
  for (const k of Object.keys(per) as (keyof Counts)[]) per[k] = Math.round((d[k] / steps) * 10) / 10;
  done();
  return { ms, cpuMs, per };
}

async function main(): Promise<void> {
  const why = await initWebgpu();
  if (why) throw new Error(`webgpu: ${why}`);
  tf = (await loadBackend('wasm')).tf; // tfjs with its layers, as training.ts has it
  await tf.setBackend('webgpu');
  const a = webgpuAdapter();
  console.log(`webgpu on ${a?.description || a?.device} (vendor ${a?.vendor}${a?.software ? ', SOFTWARE' : ''}); Dawn flags: ${process.env.GPU_WORKBENCH_DAWN_FLAGS || 'none'}; ${steps} steps per row after 3 warm-up steps; load ${loadavg()[0].toFixed(1)}`);
  instrument((tf.backend() as unknown as { device: Record<string, unknown> }).device);
  const env = tf.env();

  // A bare GPU→CPU read: one add of two 1-element tensors on the GPU, read back.
  env.set('WEBGPU_CPU_FORWARD', false);
  const one = tf.tensor1d([1]);
  const times: number[] = [];
  const before = snapshot();
  for (let i = 0; i < 50; i++) {
    const t0 = performance.now();
    const s = tf.add(one, one);
    await s.data();
    s.dispose();
    times.push(performance.now() - t0);
  }
  times.sort((x, y) => x - y);
  const rt = diff(before, snapshot());
  console.log(`read round trip (add + data()): median ${times[25].toFixed(3)} ms, min ${times[0].toFixed(3)} ms; per read ${rt.submits / 50} submits, ${rt.maps / 50} maps`);
  one.dispose();

  for (const c of cases.filter((k) => k.name.includes(only))) {
    console.log(`\n${c.name}${c.optimizer ? '' : ', adam'}`);
    // Uploads: ours (queue.writeBuffer, src/training/backends/webgpuUpload.ts) against tfjs-backend-webgpu's own (a staging buffer per tensor).
    const backend = tf.backend() as unknown as { uploadToGPU: unknown };
    const ours = backend.uploadToGPU;
    // --steps 0: no timed rows (with --kernels: only the GPU time by program).
    for (const [upload, cpuForward] of steps > 0 ? ([['writeBuffer', true], ['staging', true], ['writeBuffer', false]] as const) : []) {
      env.set('WEBGPU_CPU_FORWARD', cpuForward);
      if (upload === 'staging') delete (backend as { uploadToGPU?: unknown }).uploadToGPU;
      else backend.uploadToGPU = ours;
      for (const readEvery of ['step', 'end'] as const) {
        const { ms, cpuMs, per } = await measure(c, readEvery);
        console.log(`  upload ${upload.padEnd(11)} WEBGPU_CPU_FORWARD=${String(cpuForward).padEnd(5)} loss read every ${readEvery.padEnd(4)}: ${ms.toFixed(2).padStart(8)} ms/step, this process's CPU ${cpuMs.toFixed(2)} ms/step (${((c.batch * 1000) / ms).toFixed(0)} samples/s); per step: ${per.submits} submits, ${per.maps} maps, ${per.dispatches} dispatches, ${per.writes} writeBuffer, ${per.buffers} buffers made, ${per.pipelines} pipelines made`);
      }
    }
    backend.uploadToGPU = ours;
    env.set('WEBGPU_CPU_FORWARD', true);
    if (kernels) console.log(await kernelTimes(c));
  }
}

main().then(() => process.exit(0), (e: unknown) => {
  console.error(e);
  process.exit(1);
});

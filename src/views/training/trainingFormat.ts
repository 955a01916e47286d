/**
 * The words and picks of "Start Training…", kept free of `vscode` so that they are unit-tested
 * in Node: progress text, quick-pick items built from a GPU snapshot, and the messages that end
 * a job. `training.ts` turns them into VS Code calls.
 */
import { basename } from 'node:path';
import type { PanelJobWorker } from '../../common/protocol';
import type { GpuSnapshot } from '../../gpu/types';
import { otherJobsRun, type ExistingRun, type FolderJob } from '../../training/job/checkpoint';
import type { JobEvent, JobMetrics, WorkerInfo } from '../../training/job/events';
import type { BackendChoice, Strategy } from '../../training/job/spec';

type StepEvent = Extract<JobEvent, { type: 'job/step' }>;
type FailedEvent = Extract<JobEvent, { type: 'job/failed' }>;

/** The strategies `runJob` runs, in the order the quick pick offers them. */
export const engineStrategies: readonly Strategy[] = ['single', 'dp', 'ddp', 'pipeline'];

const rate = (x: number): string => `${Math.round(x).toLocaleString('en-US')} samples/s`;
const pct = (x: number): string => `${(100 * x).toFixed(2)}%`;
const secs = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

/** "epoch 1/2 · step 26/63 · loss 0.517 · 4,150 samples/s" */
export function progressText(e: StepEvent, epochs: number): string {
  return `epoch ${e.epoch}/${epochs} · step ${e.step}/${e.stepsPerEpoch} · loss ${e.loss.toFixed(3)} · ${rate(e.samplesPerSecond)}`;
}

/** How far the job is, 0..100, counting the epochs a resumed job skips as done. */
export function progressPercent(e: StepEvent, epochs: number): number {
  if (epochs <= 0 || e.stepsPerEpoch <= 0) return 0;
  const done = (e.epoch - 1) * e.stepsPerEpoch + e.step;
  return Math.max(0, Math.min(100, (100 * done) / (epochs * e.stepsPerEpoch)));
}

/** The GPU index of a worker's device string (`gpu:1 (CUDA_VISIBLE_DEVICES=1)`), null for `cpu`. */
export function gpuIndexOf(device: string): number | null {
  const m = /^gpu:(\d+)/.exec(device);
  return m ? Number(m[1]) : null;
}

export function panelWorkers(workers: readonly WorkerInfo[]): PanelJobWorker[] {
  return workers.map((w) => ({ rank: w.rank, gpuIndex: gpuIndexOf(w.device), device: w.device }));
}

export interface StrategyItem {
  readonly label: string;
  readonly description: string;
  readonly detail: string;
  readonly strategy: Strategy;
}

const strategyWords: Record<Strategy, { description: string; detail: string }> = {
  single: { description: 'one device', detail: 'The whole model and batch on one device.' },
  dp: { description: 'DataParallel', detail: 'One coordinator scatters each batch over the devices, averages the gradients and steps once (torch.nn.DataParallel).' },
  ddp: { description: 'DistributedDataParallel', detail: 'One worker per device with its own shard of the data; gradients averaged by a ring all-reduce (torch DDP).' },
  pipeline: { description: 'pipeline parallel', detail: 'The layers split into stages on different devices; each batch cut into micro-batches (GPipe).' },
};

/** The strategies the engine runs, the job's own first and marked as such. */
export function strategyItems(jobStrategy: Strategy, supported: readonly Strategy[] = engineStrategies): StrategyItem[] {
  const order = [jobStrategy, ...supported.filter((s) => s !== jobStrategy)].filter((s) => supported.includes(s));
  return order.map((s) => ({
    label: s,
    description: s === jobStrategy ? `${strategyWords[s].description} · from the job file` : strategyWords[s].description,
    detail: strategyWords[s].detail,
    strategy: s,
  }));
}

/** The TF.js backend a job will get, as far as the editor can tell before starting it (the workers pick it for real, `backend.ts`). */
export interface PlannedBackend {
  /** A GPU backend is installed; whether it loads, the job's start says. */
  readonly gpu: boolean;
  /** The backend the workers will run on: "wasm", "tensorflow (tfjs-node)", "tensorflow-gpu (tfjs-node-gpu)", "webgpu (NVIDIA: 580.65.06)". */
  readonly name: string;
  /** Why not a GPU one, e.g. "@tensorflow/tfjs-node-gpu is not installed". */
  readonly why?: string;
}

/** What the editor knows of the WebGPU adapters on this machine (backends/webgpu.ts's listWebgpuAdapters): the adapters, or why there are none. */
export type PlannedAdapters = { readonly adapters: readonly { readonly software: boolean; readonly description: string; readonly device: string }[] } | { readonly error: string };

/**
 * What the workers of a job with backend `choice` will run on, in the order `loadBackend`
 * tries them, from which optional packages `installed` says the training host can load and
 * which WebGPU adapters Dawn lists (`webgpu`, when known).
 */
export function plannedBackend(choice: BackendChoice, installed: (pkg: string) => boolean, webgpu?: PlannedAdapters): PlannedBackend {
  const gpuPkg = '@tensorflow/tfjs-node-gpu';
  const cpuPkg = '@tensorflow/tfjs-node';
  const adapters = webgpu && 'adapters' in webgpu ? webgpu.adapters : [];
  const hardware = adapters.find((a) => !a.software);
  const software = adapters.find((a) => a.software);
  const name = (a: { description: string; device: string }) => a.description || a.device;
  // Why auto will not use webgpu, when we know it.
  const noWebgpu = !webgpu ? undefined : 'error' in webgpu ? `no WebGPU adapter (${webgpu.error})` : software ? `the only WebGPU adapter is software (${name(software)})` : undefined;
  switch (choice) {
    case 'wasm': case 'cpu': return { gpu: false, name: choice, why: `the job's "backend" is "${choice}"` };
    case 'tensorflow': return { gpu: false, name: 'tensorflow (tfjs-node)', why: 'the job\'s "backend" is "tensorflow", libtensorflow on the CPU' };
    case 'webgpu':
      if (!webgpu) return { gpu: true, name: 'webgpu' };
      if (hardware) return { gpu: true, name: `webgpu (${name(hardware)})` };
      if (software) return { gpu: false, name: `webgpu (software: ${name(software)})`, why: `the only WebGPU adapter is software, its shaders run on the CPU` };
      return { gpu: false, name: 'none', why: `the job's "backend" is "webgpu" but ${noWebgpu ?? 'Dawn lists no adapter'}: the job will fail` };
    case 'tensorflow-gpu':
    case 'auto': {
      if (installed(gpuPkg)) return { gpu: true, name: 'tensorflow-gpu (tfjs-node-gpu)' };
      if (choice === 'tensorflow-gpu') return { gpu: false, name: 'none', why: `the job's "backend" is "tensorflow-gpu" but ${gpuPkg} is not installed: the job will fail` };
      if (hardware) return { gpu: true, name: `webgpu (${name(hardware)})` };
      const why = noWebgpu ? `${gpuPkg} is not installed; ${noWebgpu}` : `${gpuPkg} is not installed`;
      return installed(cpuPkg) ? { gpu: false, name: 'tensorflow (tfjs-node)', why } : { gpu: false, name: 'wasm', why };
    }
  }
}

export interface DeviceItem {
  readonly label: string;
  readonly description: string;
  /** What the device really runs, when that is not what the label says (a GPU with no GPU backend). */
  readonly detail?: string;
  /** What to pass as the job's `devices` override: indices of GPUs, or a count of CPU workers. */
  readonly devices: number | number[];
  readonly picked: boolean;
}

export interface DeviceChoices {
  /** GPUs to pick from (several at once unless the strategy is single), or counts of CPU workers (one). */
  readonly kind: 'gpus' | 'cpu';
  readonly items: DeviceItem[];
  readonly canPickMany: boolean;
  /** The quick pick's placeholder: what the user is choosing and why there is no GPU. */
  readonly placeholder: string;
  /** Appended to the quick pick's title: where the job will really run (" · runs on CPU (wasm)"); '' on a GPU backend. */
  readonly titleNote: string;
}

const gibText = (mib: number): string => `${(mib / 1024).toFixed(1)} GiB`;

/**
 * Quick-pick items for the devices, from the GPU monitor's latest snapshot: each GPU with its
 * name and free memory (the job's devices picked), or, without GPUs, counts of CPU workers.
 */
export function deviceChoices(snapshot: GpuSnapshot | null, strategy: Strategy, jobDevices: readonly number[], cpuCount: number, backend?: PlannedBackend): DeviceChoices {
  const gpus = snapshot?.devices ?? [];
  const cpuNote = backend && !backend.gpu ? ` · runs on CPU (${backend.name})` : '';
  if (gpus.length > 0) {
    const wanted = new Set(strategy === 'single' ? jobDevices.slice(0, 1) : jobDevices);
    const items = gpus.map((d) => {
      const free = d.memoryUsedMiB != null && d.memoryTotalMiB != null ? `${gibText(d.memoryTotalMiB - d.memoryUsedMiB)} free of ${gibText(d.memoryTotalMiB)}` : 'free memory not reported';
      const busy = snapshot!.processes.filter((p) => p.gpuIndex === d.index).length;
      return {
        label: `GPU ${d.index} · ${d.name ?? 'unnamed GPU'}`,
        description: busy ? `${free} · ${busy} process${busy === 1 ? '' : 'es'}` : free,
        devices: [d.index],
        picked: wanted.has(d.index),
        // No GPU backend: the GPU gets a worker process, but the work is done on the CPU.
        ...(backend && !backend.gpu ? { detail: `runs on a CPU worker (${backend.name}), not on this GPU: ${backend.why ?? 'no GPU backend'}` } : {}),
      };
    });
    // A job asking for more devices than there are keeps its first ones picked.
    if (!items.some((i) => i.picked)) items.slice(0, strategy === 'single' ? 1 : Math.min(items.length, Math.max(1, jobDevices.length))).forEach((_, k) => { items[k] = { ...items[k], picked: true }; });
    return {
      kind: 'gpus',
      items,
      canPickMany: strategy !== 'single',
      placeholder: backend && !backend.gpu
        ? `The job will run on CPU workers (${backend.name}), one per picked GPU: no GPU backend (${backend.why ?? 'none loads'})`
        : strategy === 'single' ? 'The GPU to train on' : `The GPUs to train on, one ${strategy === 'dp' ? 'replica' : 'worker'} each`,
      titleNote: cpuNote,
    };
  }
  const why = snapshot?.error ? `no GPU (${snapshot.error.split('\n')[0]})` : snapshot ? 'no GPU found' : 'no GPU reading';
  const counts = strategy === 'single' ? [1] : [...new Set([jobDevices.length, 2, 4, 8].filter((n) => n >= 1 && (n <= Math.max(2, cpuCount) || n === jobDevices.length)))].sort((a, b) => a - b);
  const preferred = strategy === 'single' ? 1 : counts.includes(jobDevices.length) ? jobDevices.length : counts[0];
  const items = counts.map((n) => ({
    label: `${n} CPU worker${n === 1 ? '' : 's'}`,
    description: n > cpuCount ? `more workers than the ${cpuCount} CPU cores: slower` : n === preferred ? 'as the job file says' : '',
    devices: n,
    picked: n === preferred,
  }));
  // The preferred count first: a single-choice quick pick selects its first item.
  items.sort((a, b) => Number(b.picked) - Number(a.picked));
  return { kind: 'cpu', items, canPickMany: false, placeholder: `Training runs on CPU workers${backend ? ` (${backend.name})` : ''}: ${why}`, titleNote: cpuNote };
}

type StartedEvent = Extract<JobEvent, { type: 'job/started' }>;

/** Where a job really ran, from its job/started: "on CPU (wasm)", "on GPU 0, 1 (tensorflow)". */
export function ranOn(started: Pick<StartedEvent, 'backend' | 'workers'>): string {
  const gpus = started.workers.map((w) => gpuIndexOf(w.device)).filter((i): i is number => i !== null);
  return gpus.length > 0 ? `on GPU ${[...new Set(gpus)].join(', ')} (${started.backend})` : `on CPU (${started.backend})`;
}

/** "mnist-ddp finished: test accuracy 93.45% after 2 epochs on CPU (wasm) (4,150 samples/s, 12.3 s)." */
export function doneMessage(job: string, m: JobMetrics, started?: Pick<StartedEvent, 'backend' | 'workers'>): string {
  return `Training ${job} finished: test accuracy ${pct(m.testAccuracy)} after ${m.epochs} epoch${m.epochs === 1 ? '' : 's'}${started ? ` ${ranOn(started)}` : ''} (${rate(m.samplesPerSecond)}, ${secs(m.durationMs)}).`;
}

/** What happened and what to try, from `job/failed`: "Training mnist-ddp failed on rank 1: … Try: …". */
export function failureMessage(job: string, e: FailedEvent): string {
  if (e.cancelled) return `Training ${job} was stopped.`;
  const where = e.rank !== undefined ? ` on rank ${e.rank}` : '';
  const reason = e.reason.trim().replace(/\s*\n\s*/g, '; ');
  const hint = e.hint?.trim();
  return `Training ${job} failed${where}: ${reason}${/[.!?]$/.test(reason) ? '' : '.'}${hint ? ` Try: ${hint}` : ''}`;
}

/** The training host process itself ended before the job did. */
export function hostExitMessage(job: string, code: number | null, signal: string | null): string {
  const how = signal ? `was killed by ${signal}` : `exited with code ${code ?? 'unknown'}`;
  const hint = signal === 'SIGKILL' ? ' SIGKILL usually means the out-of-memory killer: try a smaller batchSize or fewer devices.' : ' See the log for its last words.';
  return `The training host for ${job} ${how} before the job ended; its workers were stopped.${hint}`;
}

/**
 * Appends a loss point, thinning the series to at most `max` points by dropping every other
 * old point, so that a long job's curve keeps its shape and the panel's messages stay small.
 */
export function appendLoss(steps: number[], loss: number[], step: number, value: number, max = 1000): void {
  if (!Number.isFinite(value)) return;
  steps.push(step);
  loss.push(value);
  if (steps.length <= max) return;
  const keep = (_: number, i: number): boolean => i % 2 === 0 || i === steps.length - 1;
  const s = steps.filter(keep);
  const l = loss.filter(keep);
  steps.splice(0, steps.length, ...s);
  loss.splice(0, loss.length, ...l);
}

/** A name in `taken` (file names in the folder) that is free: mnist.job.json, mnist-2.job.json, … */
export function templateFileName(taken: ReadonlySet<string>, stem = 'mnist'): string {
  for (let i = 1; ; i++) {
    const name = i === 1 ? `${stem}.job.json` : `${stem}-${i}.job.json`;
    if (!taken.has(name)) return name;
  }
}

/** The bundled MNIST example as a new job file: an MLP with DDP on 2 devices. */
export function templateJobText(fileName: string): string {
  const job = {
    name: basename(fileName).replace(/\.job\.json$/, ''),
    model: { preset: 'mlp', hiddenUnits: [128] },
    data: { mnist: { trainSize: 8000, testSize: 2000 } },
    batchSize: 128,
    epochs: 2,
    optimizer: { name: 'adam', learningRate: 0.002 },
    seed: 42,
    strategy: 'ddp',
    devices: 2,
    checkpointDir: 'checkpoints',
  };
  return `${JSON.stringify(job, null, 2)}\n`;
}

/** The question Start Training asks when the job's checkpoint folder already holds a run. */
export interface ExistingRunPrompt {
  readonly message: string;
  readonly detail: string;
  /** The buttons, in order: Resume (only with a whole checkpoint to resume from), then Start Over; closing the dialog cancels. */
  readonly buttons: readonly ('Resume' | 'Start Over')[];
}

export function existingRunPrompt(run: ExistingRun, job: FolderJob & { readonly epochs: number }, folder: string): ExistingRunPrompt {
  const n = run.epochs.length;
  const latest = run.latest;
  const saved = run.savedAt ? `, saved ${run.savedAt.replace('T', ' ').replace(/\.\d+Z$/, ' UTC')}` : '';
  const over = `Start Over: move the earlier run into ${folder}/previous-<time>/ (kept, nothing deleted) and train from epoch 1.`;
  // Another job's run (the template's "checkpoints" is shared by every job file of a folder): resuming would load another model's weights.
  const other = latest ? otherJobsRun(run, job) : undefined;
  if (latest && other) {
    return {
      message: `${folder} already holds a run that is not ${job.name}'s: ${other} (${latest.epoch} epoch${latest.epoch === 1 ? '' : 's'} done, latest ${latest.dir}${saved}).`,
      detail: `Resume is not offered: it would continue this job from another job's weights. ${over} Or give this job its own "checkpointDir".`,
      buttons: ['Start Over'],
    };
  }
  const message = latest
    ? `${folder} already holds a run of ${run.job ?? job.name}: ${latest.epoch} epoch${latest.epoch === 1 ? '' : 's'} done (latest ${latest.dir}${saved}).`
    : `${folder} already holds ${n} checkpoint folder${n === 1 ? '' : 's'} of an earlier run, with no latest.json naming a whole one.`;
  const repaired = latest?.repaired ? ` (${latest.repaired}: ${latest.dir} is the newest whole checkpoint)` : '';
  const resume = latest
    ? latest.epoch >= job.epochs
      ? `Resume: the job's ${job.epochs} epoch${job.epochs === 1 ? ' is' : 's are'} done already, so it only evaluates the model (raise "epochs" to train on)${repaired}.`
      : `Resume: continue after epoch ${latest.epoch}, up to epoch ${job.epochs}, in the same folder${repaired}.`
    : '';
  return { message, detail: [resume, over].filter((l) => l).join('\n'), buttons: latest ? ['Resume', 'Start Over'] : ['Start Over'] };
}

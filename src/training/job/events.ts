/**
 * Messages of the training host, typed once and imported by both ends.
 *
 * Three boundaries:
 * - `JobEvent`: the training host (`dist/trainingHost.js`, or the CLI running the same
 *   coordinator in-process) to whoever started the job (the extension, `gpu-workbench train`).
 * - `HostCommand`: the extension to the forked training host.
 * - `WorkerMessage` / `CoordinatorMessage`: the coordinator and its worker processes (one per
 *   device). Only control and metrics travel here; gradients go peer to peer over the ring.
 */
import type { JobOverrides, JobSpec, Strategy } from './spec';
import type { PipelineMetrics } from '../strategies/pipelineSchedule';
import type { ScriptProblem } from '../launchers/pythonErrors';
import type { ElasticEvent } from '../launchers/multinode';
import type { ModelMemory, RankMemory } from '../../common/companionProtocol';

/** The WebGPU adapter a worker got, as Dawn reports it (backends/webgpu.ts's `WebgpuAdapter`). */
export interface WorkerAdapter {
  readonly vendor: string;
  readonly architecture: string;
  readonly device: string;
  /** The driver's description: "NVIDIA: 580.65.06", "llvmpipe: Mesa 25.0.7 (LLVM 15.0.6)". */
  readonly description: string;
  readonly driver?: string;
  /** A CPU implementation of Vulkan (lavapipe, SwiftShader). */
  readonly software: boolean;
}

/** One worker process of a job, as `job/started` lists it. */
export interface WorkerInfo {
  readonly rank: number;
  readonly pid: number;
  /** What the worker really runs on: `gpu:1 (CUDA_VISIBLE_DEVICES=1)`, `gpu (webgpu adapter ...)` or `cpu`. */
  readonly device: string;
  /** The TF.js backend that loaded: `tensorflow` (tfjs-node or tfjs-node-gpu), `webgpu`, `wasm` or `cpu`. */
  readonly backend: string;
  /** webgpu: the adapter this worker got. */
  readonly adapter?: WorkerAdapter;
}

/** Per-layer line of the model summary. */
export interface LayerSummary {
  readonly name: string;
  readonly className: string;
  readonly outputShape: string;
  readonly params: number;
}

export interface JobMetrics {
  readonly testAccuracy: number;
  readonly testLoss: number;
  readonly trainLoss: number;
  readonly epochs: number;
  readonly steps: number;
  /** Training samples per second over the whole job (all workers together). */
  readonly samplesPerSecond: number;
  readonly durationMs: number;
  readonly checkpoint?: string;
  /** pipeline jobs: the split, per-stage busy and idle time, and the measured bubble. */
  readonly pipeline?: PipelineMetrics;
  /** torchrun jobs: the command line, its exit code, and how many problems (CUDA errors, exceptions of the script) its output showed. */
  readonly torchrun?: { readonly command: readonly string[]; readonly exitCode: number; readonly problems: number };
  /** torchrun jobs: the last value of each metric the script reported or printed (see scriptMetrics.ts). */
  readonly reported?: Readonly<Record<string, number>>;
}

/** Sent by the training host to its client, in this order: started, summary, (step | memory | rankMemory | epoch | checkpoint | log)*, then done or failed. */
export type JobEvent =
  /** Every worker loaded its backend, model and data. Lists what the job REALLY got, e.g. "backend wasm (CPU), 2 workers, no GPU: @tensorflow/tfjs-node-gpu is not installed". */
  | {
      readonly type: 'job/started';
      readonly job: string;
      readonly file: string;
      readonly strategy: Strategy;
      readonly backend: string;
      /** One line for people: backend, worker count, why there is no GPU. */
      readonly description: string;
      readonly workers: readonly WorkerInfo[];
      readonly epochs: number;
      readonly stepsPerEpoch: number;
      readonly globalBatch: number;
      readonly trainSamples: number;
      readonly testSamples: number;
      /** Epoch the job starts at (> 0 when resumed from a checkpoint). */
      readonly startEpoch: number;
    }
  /**
   * Once before the first step, from rank 0: layers, output shapes, parameters and a memory estimate per device.
   * torchrun jobs: after the first optimizer step of the first rank to report, from the Python companion, with
   * the model's memory as measured (and its 16-bit estimates) and the summary as the job's log shows it.
   */
  | { readonly type: 'job/summary'; readonly layers: readonly LayerSummary[]; readonly totalParams: number; readonly trainableParams: number; readonly estimatedBytesPerDevice: number; readonly memory?: ModelMemory; readonly text?: string }
  /** After every optimizer step, from rank 0. `loss` is the mean over the global batch. */
  | { readonly type: 'job/step'; readonly epoch: number; readonly step: number; readonly stepsPerEpoch: number; readonly globalStep: number; readonly loss: number; readonly samplesPerSecond: number }
  /** At the end of every epoch, after the evaluation on the test split. */
  | { readonly type: 'job/epoch'; readonly epoch: number; readonly epochs: number; readonly trainLoss: number; readonly testLoss: number; readonly testAccuracy: number; readonly samplesPerSecond: number; readonly durationMs: number }
  /**
   * Per worker, every few steps: TF.js tensors and bytes, and the process's resident memory.
   * `deviceBytes` (webgpu): the bytes of device buffers the backend holds, its pool of free
   * buffers included (tf.memory().numBytesAllocatedInGPU): what this worker holds on its GPU by
   * TF.js's own count, beside nvidia-smi's figure for the whole process.
   */
  | { readonly type: 'job/memory'; readonly rank: number; readonly step: number; readonly numTensors: number; readonly numBytes: number; readonly rssBytes: number; readonly deviceBytes?: number }
  /**
   * torchrun jobs, from the Python companion: one rank's memory on one device after each of its
   * optimizer steps. CUDA: the caching allocator's allocated, reserved and the step's peak
   * allocated bytes; CPU (`kind: 'cpu'`): the process's resident memory and its peak in the step.
   */
  | ({ readonly type: 'job/rankMemory' } & RankMemory)
  /**
   * torchrun jobs: metrics of the script, exactly from a `::report::{...}` line or the companion's
   * `report()` (`source: 'report'`), or read from a line of its output in a common form
   * (`loss 0.123`, `loss=0.123`, `Loss: 0.1`, a tqdm postfix; `source: 'output'`, see
   * scriptMetrics.ts). `epoch` / `step` when the report or the line named them.
   */
  | { readonly type: 'job/report'; readonly source: 'report' | 'output'; readonly rank?: number; readonly metrics: Readonly<Record<string, number>>; readonly epoch?: number; readonly step?: number }
  /** A checkpoint (weights and optimizer state) was written after an epoch. */
  | { readonly type: 'job/checkpoint'; readonly epoch: number; readonly dir: string }
  /** Something worth telling that is not a failure: a tensor leak, a backend fallback. */
  /** `problem`: torchrun jobs, a CUDA error line of the script's output, explained, or an exception of the script; with the user's file:line when the traceback had it. */
  /** `elastic`: multi-node torchrun jobs, what the elastic agent reported (this node's rank after a rendezvous round, a restart of the same job's workers). */
  | { readonly type: 'job/log'; readonly level: 'info' | 'warning'; readonly rank?: number; readonly message: string; readonly problem?: ScriptProblem; readonly elastic?: ElasticEvent }
  /** The job finished; every worker process has exited. */
  | { readonly type: 'job/done'; readonly metrics: JobMetrics }
  /** The job ended early; every worker process has exited. `rank` is the worker that failed first, when one did. */
  /**
   * `problem`: torchrun jobs, the problem the engine chose as the cause (the failing rank's exception
   * or CUDA error, as its `job/log` event carried it), so that every reader names the same one; absent
   * when the cause is no problem of the script (a rank killed by a signal, an exit code, torchrun's own
   * error, a signal to torchrun): then `reason` and `hint` say it all.
   */
  | { readonly type: 'job/failed'; readonly reason: string; readonly rank?: number; readonly hint?: string; readonly cancelled?: boolean; readonly problem?: ScriptProblem };

/** Sent by the extension to the forked training host. */
export type HostCommand =
  /** Run a job file; the host answers with `JobEvent`s. One job at a time: a second start while one runs gets `job/failed`. */
  /** `runsDir`: where the run's record and log go (see runRecord.ts); none without it. */
  | { readonly type: 'host/start'; readonly file: string; readonly overrides?: JobOverrides; readonly resume?: boolean; readonly runsDir?: string }
  /** Stop the running job: its workers are killed and `job/failed` with `cancelled: true` follows. */
  | { readonly type: 'host/cancel' };

/** Sent by the coordinator to one worker. */
export type CoordinatorMessage =
  /** First message: who the worker is and what to run. */
  | { readonly type: 'worker/init'; readonly rank: number; readonly worldSize: number; readonly ringDir: string; readonly spec: JobSpec; readonly resume: boolean }
  /** Every worker is ready: start training. */
  | { readonly type: 'worker/go' };

/** Sent by a worker to the coordinator. */
export type WorkerMessage =
  | { readonly type: 'worker/ready'; readonly rank: number; readonly pid: number; readonly device: string; readonly backend: string; readonly adapter?: WorkerAdapter; readonly backendNote: string; readonly stepsPerEpoch: number; readonly trainSamples: number; readonly testSamples: number; readonly startEpoch: number }
  | { readonly type: 'worker/event'; readonly event: JobEvent }
  | { readonly type: 'worker/done'; readonly rank: number; readonly metrics: JobMetrics }
  | { readonly type: 'worker/failed'; readonly rank: number; readonly reason: string; readonly hint?: string; readonly peerLost: boolean };

/** Validates a command that arrives over IPC; undefined for anything malformed. */
export function parseHostCommand(value: unknown): HostCommand | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const m = value as { type?: unknown; file?: unknown; overrides?: unknown; resume?: unknown };
  switch (m.type) {
    case 'host/start':
      if (typeof m.file !== 'string') return undefined;
      return { type: 'host/start', file: m.file, resume: m.resume === true, overrides: parseOverrides(m.overrides), ...(typeof (m as { runsDir?: unknown }).runsDir === 'string' ? { runsDir: (m as { runsDir: string }).runsDir } : {}) };
    case 'host/cancel':
      return { type: 'host/cancel' };
    default:
      return undefined;
  }
}

/** Keeps only well-typed overrides; the job's own validation checks the values. */
function parseOverrides(value: unknown): JobOverrides {
  if (typeof value !== 'object' || value === null) return {};
  const v = value as Record<string, unknown>;
  const out: JobOverrides = {};
  const str = (k: string): string | undefined => (typeof v[k] === 'string' ? v[k] : undefined);
  const int = (k: string): number | undefined => (Number.isInteger(v[k]) ? (v[k] as number) : undefined);
  const strategy = str('strategy');
  if (strategy === 'single' || strategy === 'dp' || strategy === 'ddp' || strategy === 'pipeline') out.strategy = strategy;
  const backend = str('backend');
  if (backend === 'auto' || backend === 'tensorflow-gpu' || backend === 'webgpu' || backend === 'tensorflow' || backend === 'wasm' || backend === 'cpu') out.backend = backend;
  if (int('devices') !== undefined) out.devices = int('devices');
  else if (Array.isArray(v.devices) && v.devices.every((d) => Number.isInteger(d))) out.devices = v.devices as number[];
  if (int('epochs') !== undefined) out.epochs = int('epochs');
  if (int('batchSize') !== undefined) out.batchSize = int('batchSize');
  if (int('maxStepsPerEpoch') !== undefined) out.maxStepsPerEpoch = int('maxStepsPerEpoch');
  if (str('checkpointDir') !== undefined) out.checkpointDir = str('checkpointDir');
  if (str('python') !== undefined) out.python = str('python');
  if (typeof v.pipeline === 'object' && v.pipeline !== null) {
    const p = v.pipeline as Record<string, unknown>;
    const pipeline: NonNullable<JobOverrides['pipeline']> = {};
    if (Number.isInteger(p.stages)) pipeline.stages = p.stages as number;
    if (Number.isInteger(p.microBatches)) pipeline.microBatches = p.microBatches as number;
    if (p.schedule === 'gpipe' || p.schedule === '1f1b') pipeline.schedule = p.schedule;
    out.pipeline = pipeline;
  }
  return out;
}

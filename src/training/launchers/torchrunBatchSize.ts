/**
 * Find Max Batch Size for a torchrun job (issue #15 item 2): the same search as for TF.js jobs
 * (`searchBatchSize`: double while it fits, then bisect after the first out of memory), where a
 * trial is a real run of the job — torchrun with its own number of processes — with the batch
 * size set where the job's `"batchSize"` says (`torchrunBatchArg.ts`), ended by the Python
 * companion after a few optimizer steps (GPU_WORKBENCH_MAX_STEPS, exit status 0).
 *
 * Out of memory: the companion's `oom` message (the script's uncaught torch.cuda.OutOfMemoryError,
 * "CUDA out of memory", or on a CPU the allocator's "DefaultCPUAllocator: can't allocate memory"
 * under the trial's memory limit), else the same words in the job's failure (a run whose channel
 * did not connect), else a rank killed by SIGKILL (the kernel's OOM killer). Any other failure
 * stops the search and is shown as the job's failure says it.
 *
 * On a host without a GPU, each process of a trial gets a memory limit (GPU_WORKBENCH_MEMORY_LIMIT,
 * set by the companion as RLIMIT_DATA, see python/gpu_workbench/_trial.py): by default its share
 * of the memory available when the search starts, so a trial fails with the CPU allocator's
 * error instead of the machine swapping or the OOM killer picking a process.
 */
import { existsSync } from 'node:fs';
import { freemem } from 'node:os';
import { basename } from 'node:path';
import type { CompanionMessage } from '../../common/companionProtocol';
import type { JobOverrides } from '../job/spec';
import { companionPythonPath, CompanionMissingError } from './companionChannel';
import { findMaxBatchSize, NotSearchableError, searchBatchSize, trialSlot, type DeviceResult, type FindBatchSizeEvent, type FindBatchSizeHandle, type FindBatchSizeOptions, type FindBatchSizeResult, type TrialReport, type TrialRun } from './findBatchSize';
import { isTorchrunJob, loadTorchrunJob, runTorchrun, type TorchrunSpec } from './torchrun';
import { withBatchSize } from './torchrunBatchArg';

/** The largest batch a torchrun search tries unless told (the script's data set is unknown to it). */
export const torchrunDefaultMaxBatchSize = 65536;
/** The batch a search starts from when the job sets none. */
export const torchrunDefaultStart = 32;

/** The words of an out-of-memory error of torch, in a job's failure (no message from the companion). */
const torchOutOfMemory = /OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|DefaultCPUAllocator: (?:can't allocate memory|not enough memory)|\bMemoryError\b/;

export function isTorchOutOfMemory(reason: string): boolean {
  return torchOutOfMemory.test(reason);
}

/** Whether this host has a GPU a torch script could use (NVIDIA's or ROCm's device nodes). */
export function hostHasGpu(): boolean {
  return existsSync('/dev/nvidiactl') || existsSync('/dev/kfd');
}

/** The default memory limit of each process of a CPU trial: its share of 90 % of the memory available now. */
export function defaultMemoryLimitBytes(processes: number, available = freemem()): number {
  return Math.floor((0.9 * available) / Math.max(1, processes));
}

/** The refusal for a torchrun job that does not say how its script takes its batch size. */
export function noBatchSizeSetting(file: string): string {
  return `${basename(file)} does not say how its script takes its batch size, so Find Max Batch Size cannot try one: add "batchSize": {"arg": "--batch-size"} (the script's option, its value in "args") or "batchSize": {"env": "BATCH_SIZE"} (an environment variable, its value in "env") to the job.`;
}

export interface TorchrunTrialOptions {
  readonly steps: number;
  /** Each process's memory limit in bytes (CPU trials), none when undefined. */
  readonly memoryLimitBytes?: number;
}

/** One trial: the job at `batchSize`, ended after `steps` optimizer steps by the companion. */
export function runTorchrunTrial(spec: TorchrunSpec, batchSize: number, o: TorchrunTrialOptions): TrialRun {
  const set = withBatchSize(spec.batchSize ?? { arg: '--batch-size' }, spec.args, spec.env, batchSize);
  const env = {
    ...set.env,
    GPU_WORKBENCH_MAX_STEPS: String(o.steps),
    GPU_WORKBENCH_BATCH_SIZE: String(batchSize),
    ...(o.memoryLimitBytes !== undefined ? { GPU_WORKBENCH_MEMORY_LIMIT: String(o.memoryLimitBytes) } : {}),
  };
  let oom: Extract<CompanionMessage, { type: 'oom' }> | undefined;
  let torch: string | undefined;
  let deviceLabel: string | undefined;
  let steps = 0;
  const handle = runTorchrun({ ...spec, args: set.args, env }, () => undefined, {
    onMessage: (m) => {
      if (m.type === 'oom') oom ??= m;
      else if (m.type === 'hooks') torch = m.torch;
      else if (m.type === 'memory') {
        steps++;
        if (m.rank === 0 || deviceLabel === undefined) {
          const index = m.kind === 'cuda' ? Number(m.device.slice('cuda:'.length)) : -1;
          deviceLabel = m.kind === 'cuda' ? `gpu:${spec.devices?.[index] ?? index}` : 'cpu';
        }
      }
    },
  });
  const report = handle.finished.then((final): TrialReport & { deviceLabel?: string; backend?: string } => {
    const seen = { ...(deviceLabel ? { deviceLabel } : {}), ...(torch ? { backend: `torch ${torch}` } : {}) };
    if (final.type === 'job/done') {
      // The companion hooked torch but saw no optimizer step: the trial measured nothing (and did not stop early).
      if (torch !== undefined && steps === 0) return { ...seen, outcome: { kind: 'error', reason: `the script ran to its end at a batch of ${batchSize} without an optimizer step (torch.optim), so the trial measured no training step`, hint: 'Find Max Batch Size measures a few optimizer steps of the script (each trial stops after them); a script that steps no torch.optim optimizer cannot be searched.' } };
      return { ...seen, outcome: { kind: 'fits' } };
    }
    if (final.cancelled) return { ...seen, outcome: { kind: 'cancelled' } };
    if (oom) return { ...seen, outcome: { kind: 'oom', reason: `${oom.error}: ${oom.message}${oom.worldSize > 1 ? ` (rank ${oom.rank})` : ''}` } };
    if (isTorchOutOfMemory(final.reason) || /was killed by SIGKILL/.test(final.reason)) return { ...seen, outcome: { kind: 'oom', reason: final.reason } };
    return { ...seen, outcome: { kind: 'error', reason: final.reason, ...(final.hint ? { hint: final.hint } : {}) } };
  });
  return { report, cancel: () => handle.cancel() };
}

export interface TorchrunSearchOptions {
  readonly file: string;
  readonly overrides?: JobOverrides;
  readonly maxBatchSize?: number;
  readonly steps?: number;
  /** Each process's memory limit in MiB for the trials; 0 for none. Default: none on a host with a GPU, else `defaultMemoryLimitBytes`. */
  readonly memoryLimitMiB?: number;
  readonly onEvent?: (e: FindBatchSizeEvent) => void;
}

/** Searches the largest batch of a torchrun job; throws `JobFileError` for a bad job, `NotSearchableError` for one without a batch size setting. */
export function findTorchrunBatchSize(o: TorchrunSearchOptions): FindBatchSizeHandle {
  const spec = loadTorchrunJob(o.file, o.overrides ?? {});
  if (!spec.batchSize) throw new NotSearchableError(noBatchSizeSetting(spec.file));
  try {
    companionPythonPath();
  } catch (err) {
    if (err instanceof CompanionMissingError) throw new NotSearchableError(`${err.message}: without it a trial cannot stop after a few steps`);
    throw err;
  }
  const setting = spec.batchSize;
  const steps = o.steps ?? 2;
  const max = Math.max(1, o.maxBatchSize ?? torchrunDefaultMaxBatchSize);
  const memoryLimitBytes = o.memoryLimitMiB !== undefined ? (o.memoryLimitMiB > 0 ? o.memoryLimitMiB * 2 ** 20 : undefined) : hostHasGpu() ? undefined : defaultMemoryLimitBytes(spec.nprocPerNode);
  const slot = trialSlot();
  const finished = (async (): Promise<FindBatchSizeResult> => {
    let label: string | undefined;
    let backend: string | undefined;
    const result = await searchBatchSize({
      start: setting.current ?? torchrunDefaultStart,
      max,
      trial: async (batch) => {
        const r = await slot.run(() => runTorchrunTrial(spec, batch, { steps, ...(memoryLimitBytes !== undefined ? { memoryLimitBytes } : {}) }));
        if (!r) return { outcome: { kind: 'cancelled' } };
        label ??= r.deviceLabel;
        backend ??= r.backend;
        return { outcome: r.outcome };
      },
      onTrial: (t) => o.onEvent?.({ type: 'batch/trial', device: 0, ...(label ? { deviceLabel: label } : {}), batchSize: t.batchSize, outcome: t.outcome }),
    });
    const device: DeviceResult = { ...result, device: 0, ...(label ? { deviceLabel: label } : {}), ...(backend ? { backend } : {}) };
    const complete = result.limit === 'memory' || result.limit === 'max';
    const out: FindBatchSizeResult = {
      job: spec.name,
      file: spec.file,
      strategy: 'single',
      jobDevices: spec.nprocPerNode,
      devices: [device],
      perDevice: result.batchSize,
      maxBatchSize: max,
      ...(complete && result.batchSize > 0 ? { suggestedBatchSize: result.batchSize } : {}),
      torchrun: { ...(setting.arg !== undefined ? { arg: setting.arg } : { env: setting.env! }), processes: spec.nprocPerNode, ...(memoryLimitBytes !== undefined ? { memoryLimitBytes } : {}) },
    };
    o.onEvent?.({ type: 'batch/done', result: out });
    return out;
  })();
  return { finished, cancel: slot.cancel };
}

/** Find Max Batch Size for any job file: a torchrun job's search, else the TF.js one (`findMaxBatchSize`). */
export function findJobBatchSize(o: FindBatchSizeOptions): FindBatchSizeHandle {
  return isTorchrunJob(o.file) ? findTorchrunBatchSize(o) : findMaxBatchSize(o);
}

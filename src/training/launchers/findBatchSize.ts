/**
 * Find Max Batch Size: the largest batch one device can train on, found by trying.
 *
 * The search is Lightning's `scale_batch_size` (mode "power", then "binsearch") with
 * Accelerate's `find_executable_batch_size` for a start that does not fit: from the start
 * batch, double while a trial fits (halve while it does not), then binary-search between the
 * largest batch that fit and the smallest that ran out of memory, to the exact batch. The upper
 * bound is what one device can get of the training set (all of it; for dp and ddp, whose batch
 * is global, its share per device) or the caller's: a larger batch trains on no more examples.
 * When every device fits that bound, memory is not the limit and nothing is suggested.
 *
 * A trial is a few steps of the job with strategy `single` on one device, in a fresh worker
 * process (`runJob`): an allocation that failed can leave a backend unusable (the wasm heap is
 * corrupted, see `oom.ts`), and a process that dies takes only its trial with it. Out of memory
 * is told apart from a real error by `isOutOfMemory`; a real error stops the search and is
 * reported as it is. On a GPU machine each device gets its own search (they may differ in
 * memory); CPU "devices" share the host's memory, so one search answers for all.
 */
import { basename } from 'node:path';
import { loadDataset } from '../job/data';
import type { JobEvent } from '../job/events';
import { runJob, type JobHandle } from './coordinator';
import { loadJobFile, type JobOverrides, type JobSpec } from '../job/spec';
import { isOutOfMemory } from '../backends/oom';
import { isTorchrunJob } from './torchrun';
import { batchSizeText } from './torchrunBatchArg';

export type TrialOutcome =
  | { readonly kind: 'fits' }
  | { readonly kind: 'oom'; readonly reason: string }
  | { readonly kind: 'error'; readonly reason: string; readonly hint?: string }
  | { readonly kind: 'cancelled' };

/** What a trial learnt besides its outcome: the most examples one device can get of the training set bounds the batch. */
export interface TrialReport {
  readonly outcome: TrialOutcome;
  readonly trainSamples?: number;
}

/** The largest batch one device of the job can get from a training set of `trainSamples`: all of it, or for dp/ddp (a global batch split over the devices) its share. */
export function perDeviceBound(spec: { readonly strategy: JobSpec['strategy']; readonly devices: number }, trainSamples: number): number {
  return spec.strategy === 'dp' || spec.strategy === 'ddp' ? Math.max(1, Math.floor(trainSamples / Math.max(1, spec.devices))) : trainSamples;
}

export interface TrialRecord {
  readonly batchSize: number;
  readonly outcome: TrialOutcome;
}

export interface SearchOptions {
  /** The first batch to try (clamped to 1..max, before it runs). */
  readonly start: number;
  /** The largest batch worth trying. */
  readonly max: number;
  readonly trial: (batchSize: number) => Promise<TrialReport>;
  readonly onTrial?: (record: TrialRecord) => void;
}

export interface SearchResult {
  /** The largest batch that fit; 0 when not even a batch of 1 did. */
  readonly batchSize: number;
  /**
   * Why the search stopped there: `memory` (the next batch up ran out of memory), `max` (the
   * upper bound fits), `error` (a trial failed for another reason), `cancelled`.
   */
  readonly limit: 'memory' | 'max' | 'error' | 'cancelled';
  /** The upper bound in the end (the training set may have lowered it). */
  readonly max: number;
  readonly trials: readonly TrialRecord[];
  readonly error?: { readonly reason: string; readonly hint?: string };
}

/** Power then binary search over `trial`; see the module comment. */
export async function searchBatchSize(o: SearchOptions): Promise<SearchResult> {
  let max = Math.max(1, Math.floor(o.max));
  const trials: TrialRecord[] = [];
  let fits = 0; // the largest batch that fit
  let fails = Infinity; // the smallest that ran out of memory
  const done = (limit: SearchResult['limit'], error?: SearchResult['error']): SearchResult => ({ batchSize: fits, limit, max, trials, ...(error ? { error } : {}) });
  /** Runs one trial; returns the result when the search must stop there (a real error, cancelled). */
  const attempt = async (batch: number): Promise<SearchResult | undefined> => {
    const report = await o.trial(batch);
    if (report.trainSamples !== undefined && report.trainSamples < max) max = report.trainSamples;
    // Recorded at the batch really tried. Should a first trial have run above a bound it only
    // learnt from that trial, an out of memory there says nothing about the bound: the next
    // trial is the bound.
    const record = { batchSize: batch, outcome: report.outcome };
    trials.push(record);
    o.onTrial?.(record);
    switch (report.outcome.kind) {
      case 'fits': fits = Math.max(fits, Math.min(batch, max)); return undefined;
      case 'oom': fails = Math.min(fails, batch > max ? max + 1 : batch); return undefined;
      case 'error': return done('error', { reason: report.outcome.reason, ...(report.outcome.hint ? { hint: report.outcome.hint } : {}) });
      case 'cancelled': return done('cancelled');
    }
  };

  // Power: double while it fits, halve while it does not, until the bounds meet or close in.
  let batch = Math.min(Math.max(1, Math.floor(o.start)), max);
  for (;;) {
    const stop = await attempt(batch);
    if (stop) return stop;
    if (fits >= max) return done('max');
    if (fits > 0 && fails !== Infinity) break;
    if (fails === 1) return done('memory'); // not even one example fits
    batch = fits > 0 ? Math.min(2 * fits, max) : fails === max + 1 ? max : Math.max(1, Math.floor(fails / 2));
  }
  // Binary search between the largest that fit and the smallest that did not.
  while (fails - fits > 1) {
    const stop = await attempt(Math.floor((fits + fails) / 2));
    if (stop) return stop;
  }
  return done(fits >= max ? 'max' : 'memory');
}

/** One trial: `steps` steps of the job at `batchSize` on `device`, strategy single, in fresh worker processes. */
export interface TrialRun {
  readonly report: Promise<TrialReport & { readonly deviceLabel?: string; readonly backend?: string }>;
  cancel(): void;
}

/** The trial under way of a search, and the search's cancel: it stops that trial, and no trial starts after it. */
export function trialSlot(): { run: (start: () => TrialRun) => Promise<Awaited<TrialRun['report']> | undefined>; cancel: () => void } {
  let current: TrialRun | undefined;
  let cancelled = false;
  return {
    /** `start()`'s trial's report; undefined, with no trial started, after a cancel. */
    run: async (start) => {
      if (cancelled) return undefined;
      current = start();
      return current.report;
    },
    cancel: () => {
      cancelled = true;
      current?.cancel();
    },
  };
}

export function runTrial(file: string, overrides: JobOverrides, device: number, batchSize: number, steps: number, workerScript?: string): TrialRun {
  let started: Extract<JobEvent, { type: 'job/started' }> | undefined;
  const handle: JobHandle = runJob({
    file,
    overrides: { ...overrides, strategy: 'single', devices: [device], batchSize, trialSteps: steps },
    ...(workerScript ? { workerScript } : {}),
    onEvent: (e) => {
      if (e.type === 'job/started') started = e;
    },
  });
  const report = handle.finished.then((final) => {
    const seen = { ...(started ? { trainSamples: started.trainSamples, deviceLabel: started.workers[0]?.device, backend: started.backend } : {}) };
    if (final.type === 'job/done') return { ...seen, outcome: { kind: 'fits' } as const };
    if (final.cancelled) return { ...seen, outcome: { kind: 'cancelled' } as const };
    // The kernel's OOM killer ends a worker with SIGKILL, without a word.
    if (isOutOfMemory(final.reason) || (started && /was killed by SIGKILL/.test(final.reason))) return { ...seen, outcome: { kind: 'oom', reason: final.reason } as const };
    return { ...seen, outcome: { kind: 'error', reason: final.reason, ...(final.hint ? { hint: final.hint } : {}) } as const };
  });
  return { report, cancel: () => handle.cancel() };
}

/** The search for one device. */
export interface DeviceResult extends SearchResult {
  /** The device index of the job. */
  readonly device: number;
  /** What the trial's worker really ran on (`gpu:1 (CUDA_VISIBLE_DEVICES=1)`, `cpu`) and its backend. */
  readonly deviceLabel?: string;
  readonly backend?: string;
}

export interface FindBatchSizeResult {
  readonly job: string;
  readonly file: string;
  readonly strategy: JobSpec['strategy'];
  /** How many devices the job runs on. */
  readonly jobDevices: number;
  /** One search per GPU; one for all when the devices are the host's CPU. */
  readonly devices: readonly DeviceResult[];
  /** The training set's size, as the trials loaded it. */
  readonly trainSamples?: number;
  /** The --max-batch-size the search was given, if any. */
  readonly maxBatchSize?: number;
  /** The largest batch that fits on every device searched; 0 when none does. */
  readonly perDevice: number;
  /**
   * The job's `batchSize` that gives each device that batch: per device × devices for dp/ddp
   * (the job's batch is global; for dp an upper bound, see `suggestionCaveat`), rounded down
   * to a multiple of the micro-batches for pipeline; never more than the training set.
   * Undefined when no batch fits, a search did not finish, or memory is not the limit (every
   * device fit the bound: see `memoryIsNotTheLimit`).
   */
  readonly suggestedBatchSize?: number;
  /** A torchrun job: where its script takes the batch size (the result goes there), its processes, each one's memory limit in the trials. */
  readonly torchrun?: { readonly arg?: string; readonly env?: string; readonly processes: number; readonly memoryLimitBytes?: number };
}

export type FindBatchSizeEvent =
  | { readonly type: 'batch/trial'; readonly device: number; readonly deviceLabel?: string; readonly batchSize: number; readonly outcome: TrialOutcome }
  | { readonly type: 'batch/done'; readonly result: FindBatchSizeResult };

export interface FindBatchSizeOptions {
  readonly file: string;
  /** The same overrides as a training run (backend, devices, strategy, micro-batches). */
  readonly overrides?: JobOverrides;
  /** The largest batch worth trying (default: the training set). */
  readonly maxBatchSize?: number;
  /** Optimizer steps per trial (default 2: the first allocates the optimizer's state). */
  readonly steps?: number;
  readonly onEvent?: (e: FindBatchSizeEvent) => void;
  readonly workerScript?: string;
  /** torchrun jobs: each process's memory limit in MiB for CPU trials (0: none). */
  readonly memoryLimitMiB?: number;
}

export interface FindBatchSizeHandle {
  readonly finished: Promise<FindBatchSizeResult>;
  /** Stops the trial under way; the result says `cancelled`. */
  cancel(): void;
}

/** The job's batch size for `perDevice` examples on each device. */
export function suggestBatchSize(spec: Pick<JobSpec, 'strategy' | 'devices' | 'pipeline'>, perDevice: number): number | undefined {
  if (perDevice < 1) return undefined;
  switch (spec.strategy) {
    case 'dp': case 'ddp': return perDevice * spec.devices.length;
    case 'pipeline': {
      // Every stage sees whole micro-batches; the search measured the whole model on one device, so this is on the safe side.
      const m = spec.pipeline.microBatches;
      return perDevice >= m ? perDevice - (perDevice % m) : undefined;
    }
    case 'single': return perDevice;
  }
}

/**
 * The warning that goes with a dp suggestion: the trials ran strategy single, one replica's
 * share, but in dp rank 0 (the coordinator replica) also holds the whole global batch it
 * scatters and every replica's gradients, so per device × devices is an upper bound that can
 * run out of memory on rank 0's device. Undefined for the other strategies (ddp replicas are
 * alike; pipeline is measured with the whole model on one device, on the safe side).
 */
export function suggestionCaveat(r: Pick<FindBatchSizeResult, 'strategy' | 'perDevice' | 'suggestedBatchSize' | 'jobDevices'>): string | undefined {
  if (r.strategy !== 'dp' || r.suggestedBatchSize === undefined || r.jobDevices < 2) return undefined;
  return `This is an upper bound for dp: the trials measured one replica's share (${r.perDevice}), but rank 0, the coordinator, also holds the whole batch of ${r.suggestedBatchSize} and every replica's gradients, so it can run out of memory there; if it does, lower batchSize (or use ddp, whose replicas are alike).`;
}

/** Why Find Max Batch Size does not run a job of this kind (a correct file it cannot search), or undefined. */
export class NotSearchableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NotSearchableError';
  }
}

/**
 * Searches the largest batch per device of a TF.js job file; throws `JobFileError` for a bad job.
 * A torchrun job is `findTorchrunBatchSize`'s (torchrunBatchSize.ts; `findJobBatchSize` there takes either).
 */
export function findMaxBatchSize(o: FindBatchSizeOptions): FindBatchSizeHandle {
  if (isTorchrunJob(o.file)) throw new NotSearchableError(`${basename(o.file)} is a torchrun job: findTorchrunBatchSize searches it`);
  if (o.memoryLimitMiB !== undefined) throw new NotSearchableError(`--memory-limit applies to torchrun jobs only: ${basename(o.file)} is a TF.js job, whose trials run out of their backend's own memory`);
  const spec = loadJobFile(o.file, o.overrides);
  const slot = trialSlot();
  const steps = o.steps ?? 2;
  const perDeviceStart = Math.max(1, Math.floor(spec.strategy === 'dp' || spec.strategy === 'ddp' ? spec.batchSize / spec.devices.length : spec.batchSize));
  const finished = (async (): Promise<FindBatchSizeResult> => {
    const results: DeviceResult[] = [];
    // The bound is known before the first trial (the data loaded once here), so a job batchSize
    // above what a device gets (16000 for 8,000 samples on ddp x2) starts the search at that
    // share (4000), not at a batch the trial could not really run.
    let trainSamples = await loadDataset(spec.data, spec.file).then((d) => d.train.count, () => undefined);
    const bound = (samples: number) => perDeviceBound({ strategy: spec.strategy, devices: spec.devices.length }, samples);
    const max = Math.min(o.maxBatchSize ?? Number.MAX_SAFE_INTEGER, trainSamples !== undefined ? bound(trainSamples) : Number.MAX_SAFE_INTEGER);
    for (const device of spec.devices) {
      let label: string | undefined;
      let backend: string | undefined;
      const result = await searchBatchSize({
        start: perDeviceStart,
        max,
        trial: async (batch) => {
          const r = await slot.run(() => runTrial(spec.file, o.overrides ?? {}, device, batch, steps, o.workerScript));
          if (!r) return { outcome: { kind: 'cancelled' } };
          label ??= r.deviceLabel;
          backend ??= r.backend;
          trainSamples ??= r.trainSamples;
          // A trial runs strategy single on the whole set; one device of the job gets its share.
          return r.trainSamples === undefined ? r : { ...r, trainSamples: bound(r.trainSamples) };
        },
        onTrial: (t) => o.onEvent?.({ type: 'batch/trial', device, ...(label ? { deviceLabel: label } : {}), batchSize: t.batchSize, outcome: t.outcome }),
      });
      results.push({ ...result, device, ...(label ? { deviceLabel: label } : {}), ...(backend ? { backend } : {}) });
      // CPU workers share the host's memory: one search answers for every device.
      if (result.limit === 'error' || result.limit === 'cancelled' || !label?.startsWith('gpu')) break;
    }
    const complete = results.every((r) => r.limit === 'memory' || r.limit === 'max');
    const perDevice = Math.min(...results.map((r) => r.batchSize));
    const out0: FindBatchSizeResult = {
      job: spec.name, file: spec.file, strategy: spec.strategy, jobDevices: spec.devices.length, devices: results, perDevice,
      ...(trainSamples !== undefined ? { trainSamples } : {}), ...(o.maxBatchSize !== undefined ? { maxBatchSize: o.maxBatchSize } : {}),
    };
    // Nothing to suggest when every device fit all the data it can get; a search stopped by
    // memory or by --max-batch-size suggests the batch found.
    const suggested = complete && !memoryIsNotTheLimit(out0) ? suggestBatchSize(spec, perDevice) : undefined;
    const out: FindBatchSizeResult = { ...out0, ...(suggested !== undefined ? { suggestedBatchSize: suggested } : {}) };
    o.onEvent?.({ type: 'batch/done', result: out });
    return out;
  })();
  return { finished, cancel: slot.cancel };
}

/** What stopped the search of a device that fit its bound: all the data one device gets, or the --max-batch-size given. */
export function searchBound(r: Pick<FindBatchSizeResult, 'strategy' | 'jobDevices' | 'trainSamples'>, max: number): 'data' | 'max-batch-size' {
  return r.trainSamples !== undefined && max === perDeviceBound({ strategy: r.strategy, devices: r.jobDevices }, r.trainSamples) ? 'data' : 'max-batch-size';
}

/**
 * Every device fit all the data it can get: nothing to change for memory's sake. Not so when
 * --max-batch-size stopped the search: larger batches were not tried.
 */
export function memoryIsNotTheLimit(r: Pick<FindBatchSizeResult, 'devices' | 'perDevice' | 'strategy' | 'jobDevices' | 'trainSamples'>): boolean {
  return r.perDevice > 0 && r.devices.length > 0 && r.devices.every((d) => d.limit === 'max' && searchBound(r, d.max) === 'data');
}

/** The data one device gets, for people: "the whole 256-sample training set", "a device's share of the 8,000-sample training set for ddp on 2 devices". */
export function dataBoundText(r: Pick<FindBatchSizeResult, 'strategy' | 'jobDevices' | 'trainSamples'>): string {
  const set = `${(r.trainSamples ?? 0).toLocaleString('en-US')}-sample training set`;
  return (r.strategy === 'dp' || r.strategy === 'ddp') && r.jobDevices > 1 ? `a device's share of the ${set} for ${r.strategy} on ${r.jobDevices} devices` : `the whole ${set}`;
}

/** Why a device's search stopped at `max` with every trial fitting, for people: the data, or the --max-batch-size given. */
export function boundText(r: Pick<FindBatchSizeResult, 'strategy' | 'jobDevices' | 'trainSamples'>, max: number): string {
  if (searchBound(r, max) === 'max-batch-size') return `reached --max-batch-size ${max}; larger batches were not tried`;
  return `the largest size tried, ${max}, fit: the data holds only ${max} per device (${dataBoundText(r)})`;
}

/** The batch size found, for people: "128 per device"; a torchrun job's "128 (--batch-size 128, each of 2 processes)". */
export function perWhat(r: Pick<FindBatchSizeResult, 'torchrun'>, n: number): string {
  if (!r.torchrun) return `${n.toLocaleString('en-US')} per device`;
  const each = r.torchrun.processes > 1 ? `, each of ${r.torchrun.processes} processes` : '';
  return `${n.toLocaleString('en-US')} (${batchSizeText(r.torchrun, n)}${each})`;
}

/** The setting to make, for people: `"batchSize": 128`; a torchrun job's `--batch-size 128` or `BATCH_SIZE=128`. */
export function settingText(r: Pick<FindBatchSizeResult, 'torchrun'>, n: number): string {
  return r.torchrun ? batchSizeText(r.torchrun, n) : `"batchSize": ${n}`;
}

/** Where it goes, for people: `ddp.job.json`; a torchrun job's `the "args" of ddp.job.json`. */
export function settingPlace(r: Pick<FindBatchSizeResult, 'torchrun' | 'file'>): string {
  return r.torchrun ? `the "${r.torchrun.env !== undefined ? 'env' : 'args'}" of ${basename(r.file)}` : basename(r.file);
}

/** Where a trial measured, for people: "CPU (wasm)", "GPU 1 (tensorflow)". */
export function measuredOn(d: Pick<DeviceResult, 'device' | 'deviceLabel' | 'backend'>): string {
  const gpu = d.deviceLabel ? /^gpu:(\d+)/.exec(d.deviceLabel) : null;
  const where = gpu ? `GPU ${gpu[1]}` : d.deviceLabel === 'cpu' ? 'CPU' : d.deviceLabel ?? `device ${d.device}`;
  return `${where}${d.backend ? ` (${d.backend})` : ''}`;
}

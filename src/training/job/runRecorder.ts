/**
 * Keeps one run's record (runRecord.ts) and log file up to date from the job's events. The engine
 * wraps its `onEvent` with `recordRun` where both the CLI and the editor pass (`runJob`,
 * `runTorchrun`), so every run they start is recorded the same way.
 *
 * The record is rewritten when something it shows changes (started, an epoch, a checkpoint, the
 * end), metrics of a script at most once a second; the log gets one line per event for people
 * (a torchrun job's output lines as the script printed them), flushed at most every half second
 * and at the end. A record that cannot be written (a read-only folder) costs the run nothing:
 * one warning event, then the run goes on unrecorded.
 */
import { appendFileSync, mkdirSync } from 'node:fs';
import { hostname } from 'node:os';
import type { JobEvent, JobMetrics } from './events';
import type { JobOverrides } from './spec';
import { RunCurves } from './runCurves';
import { logFile, newRunId, writeRunRecord, type RunKind, type RunRecord } from './runRecord';

export interface RecordRunOptions {
  /** The runs folder (`runsFolder(workspace)`). */
  readonly dir: string;
  readonly kind: RunKind;
  readonly file: string;
  readonly name: string;
  readonly overrides?: JobOverrides;
  readonly resume?: boolean;
  readonly checkpointDir?: string;
  /** torchrun: what the run is, before any event says it. */
  readonly strategy?: string;
  readonly backend?: string;
  readonly devices?: readonly string[];
  readonly now?: () => Date;
}

/** A recorder: `event` for every event of the job (before passing it on). */
export interface RunRecorder {
  readonly id: string;
  readonly dir: string;
  event(e: JobEvent): void;
  current(): RunRecord;
}

const finite = (v: number): boolean => Number.isFinite(v);

/** The metrics a finished training job reports, without the ones it has none of (NaN: a torchrun job's). */
function doneMetrics(m: JobMetrics): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of ['trainLoss', 'testLoss', 'testAccuracy', 'samplesPerSecond'] as const) if (finite(m[k])) out[k] = m[k];
  return out;
}

/** One line of the log for an event, or '' for none. */
function logLine(e: JobEvent, state: { every: number }): string {
  switch (e.type) {
    case 'job/started':
      state.every = Math.max(1, Math.round(e.stepsPerEpoch / 10));
      return [`${e.job}: ${e.strategy}, ${e.description}`, ...e.workers.map((w) => `  rank ${w.rank}  pid ${w.pid}  ${w.device}  ${w.backend}`)].join('\n');
    case 'job/step':
      return e.step % state.every === 0 || e.step === e.stepsPerEpoch ? `epoch ${e.epoch}  step ${e.step}/${e.stepsPerEpoch}  loss ${e.loss.toFixed(4)}  ${Math.round(e.samplesPerSecond)} samples/s` : '';
    case 'job/epoch':
      return `epoch ${e.epoch}/${e.epochs} done  train loss ${e.trainLoss.toFixed(4)}  test loss ${e.testLoss.toFixed(4)}  test accuracy ${(100 * e.testAccuracy).toFixed(2)}%`;
    case 'job/checkpoint':
      return `checkpoint: ${e.dir}`;
    case 'job/log':
      return e.level === 'warning' ? `warning: ${e.message}` : e.message;
    case 'job/done':
      return `done${finite(e.metrics.testAccuracy) ? `: test accuracy ${(100 * e.metrics.testAccuracy).toFixed(2)}%` : ''} in ${(e.metrics.durationMs / 1000).toFixed(1)} s`;
    case 'job/failed':
      return e.cancelled ? 'stopped' : `failed${e.rank !== undefined ? ` (rank ${e.rank})` : ''}: ${e.reason}${e.hint ? `\nhint: ${e.hint}` : ''}`;
    case 'job/summary':
    case 'job/memory':
    case 'job/rankMemory':
    case 'job/report':
      return '';
    default: {
      const never: never = e;
      return never;
    }
  }
}

/** Starts the record of a run (status running) and returns its recorder; undefined with `warn` called when the folder cannot be written. */
export function recordRun(o: RecordRunOptions, warn: (message: string) => void): RunRecorder | undefined {
  const now = o.now ?? (() => new Date());
  const started = now();
  const id = newRunId(o.name, started);
  let record: RunRecord = {
    version: 1, id, kind: o.kind, name: o.name, file: o.file, status: 'running', startedAt: started.toISOString(), pid: process.pid, host: hostname(),
    ...(o.overrides && Object.keys(o.overrides).length ? { overrides: o.overrides } : {}),
    ...(o.resume ? { resumed: true } : {}),
    ...(o.strategy ? { strategy: o.strategy } : {}),
    ...(o.backend ? { backend: o.backend } : {}),
    ...(o.devices ? { devices: o.devices } : {}),
    ...(o.checkpointDir ? { checkpointDir: o.checkpointDir } : {}),
    metrics: {},
  };
  const log = logFile(o.dir, id);
  try {
    mkdirSync(o.dir, { recursive: true });
    writeRunRecord(o.dir, record);
    appendFileSync(log, '');
  } catch (err) {
    warn(`the run is not recorded: cannot write ${o.dir} (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
    return undefined;
  }
  const curves = new RunCurves();
  /** The record's curves, as they are now (the builders keep them bounded). */
  const withCurves = (): Partial<RunRecord> => (curves.size ? { curves: curves.toRecord() } : {});
  let broken = false;
  const write = () => {
    if (broken) return;
    record = { ...record, ...withCurves() };
    try {
      writeRunRecord(o.dir, record);
    } catch (err) {
      broken = true;
      warn(`the run's record stopped being written: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
    }
  };
  let pending: string[] = [];
  let flushTimer: NodeJS.Timeout | undefined;
  const flush = () => {
    clearTimeout(flushTimer);
    flushTimer = undefined;
    if (!pending.length) return;
    const text = `${pending.join('\n')}\n`;
    pending = [];
    try {
      appendFileSync(log, text);
    } catch {
      // The record says where the log is; a log that cannot grow loses lines, not the run.
    }
  };
  let metricsTimer: NodeJS.Timeout | undefined;
  const state = { every: 1 };
  const update = (change: Partial<RunRecord>) => { record = { ...record, ...change }; };
  return {
    id,
    dir: o.dir,
    current: () => ({ ...record, ...withCurves() }),
    event(e: JobEvent): void {
      const line = logLine(e, state);
      if (line) {
        pending.push(line);
        flushTimer ??= setTimeout(flush, 500);
        flushTimer.unref?.();
      }
      switch (e.type) {
        case 'job/started':
          update({
            name: e.job, strategy: e.strategy, backend: e.backend, description: e.description, epochs: e.epochs, epochsDone: e.startEpoch,
            devices: e.workers.map((w) => w.device),
          });
          write();
          break;
        case 'job/epoch':
          for (const k of ['trainLoss', 'testLoss', 'testAccuracy', 'samplesPerSecond'] as const) curves.add(k, 'epoch', e.epoch, e[k]);
          update({ epochsDone: e.epoch, epochs: e.epochs, metrics: { ...record.metrics, trainLoss: e.trainLoss, testLoss: e.testLoss, testAccuracy: e.testAccuracy, samplesPerSecond: e.samplesPerSecond } });
          write();
          break;
        case 'job/checkpoint':
          update({ checkpointEpoch: e.epoch });
          write();
          break;
        case 'job/report':
          curves.report(e.metrics, e.step);
          update({ metrics: { ...record.metrics, ...e.metrics, ...(e.epoch !== undefined ? { epoch: e.epoch } : {}), ...(e.step !== undefined ? { step: e.step } : {}) } });
          metricsTimer ??= setTimeout(() => { metricsTimer = undefined; write(); }, 1000);
          metricsTimer.unref?.();
          break;
        case 'job/done':
        case 'job/failed': {
          clearTimeout(metricsTimer);
          metricsTimer = undefined;
          const ended = now().toISOString();
          // A torchrun job's metrics are the script's own, as its reports named them.
          if (e.type === 'job/done') update({ status: 'done', endedAt: ended, ...(e.metrics.torchrun ? {} : { metrics: { ...record.metrics, ...doneMetrics(e.metrics) } }) });
          else update({ status: e.cancelled ? 'cancelled' : 'failed', endedAt: ended, ...(e.cancelled ? {} : { reason: e.reason }), ...(e.hint ? { hint: e.hint } : {}) });
          flush();
          write();
          break;
        }
        case 'job/step':
          // The training loss of every step; written with the next epoch, report or end (no write per step).
          curves.add('loss', 'step', e.globalStep, e.loss);
          break;
        case 'job/summary':
        case 'job/memory':
        case 'job/rankMemory':
        case 'job/log':
          break;
        default: {
          const never: never = e;
          void never;
        }
      }
    },
  };
}

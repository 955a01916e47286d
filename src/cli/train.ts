/**
 * `gpu-workbench train JOB.json`: runs a training job headless, with progress lines for
 * people or one JSON event per line (`--json`) for machines, ending with `job/done` or
 * `job/failed`. The same coordinator as the extension's training host.
 */
import { readFileSync } from 'node:fs';
import { basename, relative, resolve } from 'node:path';
import type { RankMemory } from '../common/companionProtocol';
import { mib } from '../common/units';
import type { JobEvent } from '../training/job/events';
import { boundText, measuredOn, memoryIsNotTheLimit, NotSearchableError, settingPlace, settingText, suggestionCaveat, type FindBatchSizeEvent, type FindBatchSizeResult, type TrialOutcome } from '../training/launchers/findBatchSize';
import { runJob } from '../training/launchers/coordinator';
import { findJobBatchSize } from '../training/launchers/torchrunBatchSize';
import { metricsText } from '../training/launchers/scriptMetrics';
import { runsFolder } from '../training/job/runRecord';
import { launchCommands, torchVersion } from '../training/launchers/multinode';
import { isTorchrunJob, loadTorchrunJob, slurmBatchText } from '../training/launchers/torchrun';
import { JobFileError, type BackendChoice, type JobOverrides, type Strategy } from '../training/job/spec';
import { commandLineArgs, parseCommandLine, UsageError } from './args';
import { GrowthWatch, scriptLinter } from './growthWatch';
import type { Linter } from '../lint/linter';

const help = `usage: gpu-workbench train JOB.json [options]

Runs a training job (a *.job.json file, see schemas/job.schema.json) and prints its progress.

options:
  --strategy S       single | dp | ddp | pipeline (overrides the job's strategy)
  --devices D        how many devices (N) or which ones (0,1,...); one worker process each
  --epochs N         train for N epochs
  --backend B        auto | tensorflow-gpu | webgpu | tensorflow | wasm | cpu (auto: the
                     first that loads in that order; webgpu only on a hardware adapter,
                     a software one such as lavapipe only when asked for by name)
  --resume           continue from the last checkpoint in the job's checkpointDir (the newest
                     whole epoch-N when latest.json is unreadable; never another job's run); without
                     it a checkpointDir that holds an earlier run has that run moved into
                     previous-<time>/ inside it first: two runs never share one folder
  --micro-batches N  pipeline: micro-batches per batch
  --schedule S       pipeline: gpipe | 1f1b
  --python PATH      torchrun jobs ("kind": "torchrun"): the interpreter that has PyTorch
                     (default: the job's "python", else python3)
  --runs-dir DIR     where the run's record and log go (default: .gpu-workbench/runs under
                     the current folder, where the editor's Runs view lists them)
  --no-record        write no run record (a tuning trial: its experiment records it)
  --print-launch     torchrun jobs: print the command each node runs (the job's nnodes and
                     rendezvous, a fresh rendezvous id unless the job has one, flags spelt
                     for the interpreter's torch) instead of running the job
  --json             print one JSON event per line (job/started, job/step, ...), ending with
                     job/done or job/failed
  --find-batch-size  instead of training, find the largest batch that fits on each device:
                     a few steps per trial, each in a fresh worker process, doubling while
                     it fits, then a binary search up to the first out-of-memory batch
                     (with --json: batch/trial events, then batch/done or batch/failed).
                     A torchrun job names how its script takes its batch size ("batchSize":
                     {"arg": "--batch-size"} or {"env": "BATCH_SIZE"}); each trial is a real
                     torchrun run, stopped after the trial's steps
  --max-batch-size N --find-batch-size: the largest batch worth trying (default: what one
                     device gets of the training set: all of it, for dp/ddp its share;
                     65536 for a torchrun job)
  --trial-steps N    --find-batch-size: optimizer steps per trial (default 2)
  --memory-limit MiB --find-batch-size, torchrun jobs: each process's memory in a trial on
                     the CPU (default on a host without a GPU: its share of 90% of the memory
                     available; 0: no limit)
  -h, --help         show this help

Exit code 0 when the job finished (or a batch size was found), 1 when it failed, 2 for bad
options, 130 when interrupted.`;

interface Options {
  file: string;
  json: boolean;
  resume: boolean;
  overrides: JobOverrides;
  findBatchSize?: { maxBatchSize?: number; steps?: number; memoryLimitMiB?: number };
  /** --runs-dir; --no-record: null. */
  runsDir?: string | null;
  printLaunch?: boolean;
}

const strategies: readonly Strategy[] = ['single', 'dp', 'ddp', 'pipeline'];
const backends: readonly BackendChoice[] = ['auto', 'tensorflow-gpu', 'webgpu', 'tensorflow', 'wasm', 'cpu'];

export function parseTrainArgs(argv: string[]): Options | 'help' {
  const o: Options = { file: '', json: false, resume: false, overrides: {} };
  const files: string[] = [];
  let find = false;
  const searchOptions: string[] = [];
  const search: { maxBatchSize?: number; steps?: number; memoryLimitMiB?: number } = {};
  for (const { arg, name, value } of commandLineArgs(argv)) {
    switch (name) {
      case '-h': case '--help': return 'help';
      case '--json': o.json = true; break;
      case '--resume': o.resume = true; break;
      case '--print-launch': o.printLaunch = true; break;
      case '--strategy': {
        const v = value();
        if (!strategies.includes(v as Strategy)) throw new UsageError(`--strategy expects one of ${strategies.join(', ')}, got '${v}'`);
        o.overrides.strategy = v as Strategy;
        break;
      }
      case '--backend': {
        const v = value();
        if (!backends.includes(v as BackendChoice)) throw new UsageError(`--backend expects one of ${backends.join(', ')}, got '${v}'`);
        o.overrides.backend = v as BackendChoice;
        break;
      }
      case '--devices': {
        const v = value();
        if (/^[1-9]\d*$/.test(v) && !v.includes(',')) o.overrides.devices = Number(v);
        else if (/^\d+(,\d+)+$/.test(v) || /^\d+,?$/.test(v)) o.overrides.devices = v.split(',').filter((s) => s !== '').map(Number);
        else throw new UsageError(`--devices expects a count (2) or a list of device indices (0,1), got '${v}'`);
        break;
      }
      case '--micro-batches': {
        const v = value();
        if (!/^[1-9]\d*$/.test(v)) throw new UsageError(`--micro-batches expects a whole number of at least 1, got '${v}'`);
        o.overrides.pipeline = { ...o.overrides.pipeline, microBatches: Number(v) };
        break;
      }
      case '--schedule': {
        const v = value();
        if (v !== 'gpipe' && v !== '1f1b') throw new UsageError(`--schedule expects gpipe or 1f1b, got '${v}'`);
        o.overrides.pipeline = { ...o.overrides.pipeline, schedule: v };
        break;
      }
      case '--python':
        o.overrides.python = value();
        break;
      case '--runs-dir':
        o.runsDir = resolve(value());
        break;
      case '--no-record':
        o.runsDir = null;
        break;
      case '--find-batch-size': find = true; break;
      case '--max-batch-size': case '--trial-steps': {
        const v = value();
        if (!/^[1-9]\d*$/.test(v)) throw new UsageError(`${name} expects a whole number of at least 1, got '${v}'`);
        search[name === '--max-batch-size' ? 'maxBatchSize' : 'steps'] = Number(v);
        searchOptions.push(name);
        break;
      }
      case '--memory-limit': {
        const v = value();
        if (!/^(0|[1-9]\d*)$/.test(v)) throw new UsageError(`--memory-limit expects a whole number of MiB (0 for no limit), got '${v}'`);
        search.memoryLimitMiB = Number(v);
        searchOptions.push(name);
        break;
      }
      case '--epochs': {
        const v = value();
        if (!/^[1-9]\d*$/.test(v)) throw new UsageError(`--epochs expects a whole number of at least 1, got '${v}'`);
        o.overrides.epochs = Number(v);
        break;
      }
      default:
        if (arg.startsWith('-')) throw new UsageError(`unknown option '${arg}'`);
        files.push(arg);
    }
  }
  if (files.length !== 1) throw new UsageError(files.length === 0 ? 'which job? give the path of a *.job.json file' : `one job at a time, got ${files.length} files`);
  if (!find && searchOptions.length) throw new UsageError(`${searchOptions[0]} only applies with --find-batch-size`);
  if (find && o.resume) throw new UsageError('--find-batch-size trains nothing to resume: drop --resume');
  if (find) o.findBatchSize = search;
  if (o.printLaunch && (find || o.resume)) throw new UsageError(`--print-launch runs nothing: drop ${find ? '--find-batch-size' : '--resume'}`);
  o.file = files[0];
  return o;
}

const pct = (x: number) => `${(100 * x).toFixed(2)}%`;
const rate = (x: number) => `${Math.round(x).toLocaleString('en-US')} samples/s`;
const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** The per-rank memory a text view last showed, and what came since (torchrun jobs). */
interface RankMemoryState {
  readonly latest: Map<string, RankMemory>;
  shownAt?: number;
  changed: boolean;
}

/** What formatEvent remembers between events of one job. */
export interface FormatState {
  every: number;
  memory?: RankMemoryState;
  /** The clock (tests): Date.now. */
  now?: () => number;
}

/** How often the text output shows the per-rank memory line: once every rank has sent its first step, then at most this often, and at the end. */
export const rankMemoryEveryMs = 10_000;

/** One rank and device's memory after its last step, compact: `rank 1 step 12 cuda:1 1.2 GiB allocated / 2.0 GiB reserved, step peak 1.6 GiB`. */
export function rankMemoryText(m: RankMemory): string {
  const head = `rank ${m.rank} step ${m.step}`;
  if (m.kind === 'cuda') return `${head} ${m.device} ${mib(m.allocatedBytes)} allocated / ${mib(m.reservedBytes)} reserved, step peak ${mib(m.peakAllocatedBytes)}`;
  return `${head} cpu rss ${mib(m.rssBytes)}, ${m.peakSinceStart ? 'peak since start' : 'step peak'} ${mib(m.peakRssBytes)}`;
}

function memoryLine(memory: RankMemoryState): string {
  memory.changed = false;
  const rows = [...memory.latest.values()].sort((a, b) => a.rank - b.rank || a.device.localeCompare(b.device));
  return `memory: ${rows.map(rankMemoryText).join(' | ')}`;
}

/** The per-rank memory line for a `job/rankMemory` event, or '' while it keeps quiet. */
function rankMemoryEvent(e: Extract<JobEvent, { type: 'job/rankMemory' }>, state: FormatState): string {
  const memory: RankMemoryState = (state.memory ??= { latest: new Map<string, RankMemory>(), changed: false });
  memory.latest.set(`${e.rank}\0${e.device}`, e);
  memory.changed = true;
  const now = (state.now ?? Date.now)();
  const ranks = new Set([...memory.latest.values()].map((m) => m.rank));
  if (ranks.size < e.worldSize) return '';
  if (memory.shownAt !== undefined && now - memory.shownAt < rankMemoryEveryMs) return '';
  memory.shownAt = now;
  return memoryLine(memory);
}

/** The per-rank memory line when it changed since it was last shown (what the end of a job prints first), else ''. */
export function unshownMemoryLine(state: FormatState): string {
  return state.memory?.changed ? memoryLine(state.memory) : '';
}

/** Turns events into the progress lines a person reads; returns '' for events it keeps quiet about. */
export function formatEvent(e: JobEvent, state: FormatState): string {
  // The memory of every rank at the end, when it changed since it was last shown.
  if ((e.type === 'job/done' || e.type === 'job/failed') && state.memory?.changed) {
    const last = unshownMemoryLine(state);
    const rest = formatEvent(e, { ...state, memory: undefined });
    return rest ? `${last}\n${rest}` : last;
  }
  switch (e.type) {
    case 'job/rankMemory':
      return rankMemoryEvent(e, state);
    case 'job/started': {
      state.every = Math.max(1, Math.round(e.stepsPerEpoch / 5));
      const workers = e.workers.map((w) => `  rank ${w.rank}  pid ${w.pid}  ${w.device}  ${w.backend}`);
      const resumed = e.startEpoch > 0 ? `, resuming after epoch ${e.startEpoch}` : '';
      return [`${e.job}: ${e.strategy}, ${e.description}`, ...workers, `${e.trainSamples} train / ${e.testSamples} test samples, global batch ${e.globalBatch}, ${e.stepsPerEpoch} steps per epoch, ${e.epochs} epochs${resumed}`].join('\n');
    }
    case 'job/summary': {
      if (e.text) return e.text; // torchrun: the companion's summary, with the model's memory
      const rows = e.layers.map((l) => `  ${l.name.padEnd(24)} ${l.className.padEnd(14)} ${l.outputShape.padEnd(18)} ${l.params.toLocaleString('en-US')}`);
      return [`model: ${e.totalParams.toLocaleString('en-US')} parameters (${e.trainableParams.toLocaleString('en-US')} trainable), about ${mib(e.estimatedBytesPerDevice)} per device`, ...rows].join('\n');
    }
    case 'job/step':
      if (e.step % state.every !== 0 && e.step !== e.stepsPerEpoch && e.step !== 1) return '';
      return `epoch ${e.epoch}  step ${e.step}/${e.stepsPerEpoch}  loss ${e.loss.toFixed(4)}  ${rate(e.samplesPerSecond)}`;
    case 'job/epoch':
      return `epoch ${e.epoch}/${e.epochs} done: train loss ${e.trainLoss.toFixed(4)}, test loss ${e.testLoss.toFixed(4)}, test accuracy ${pct(e.testAccuracy)}, ${rate(e.samplesPerSecond)} (${secs(e.durationMs)})`;
    case 'job/memory':
    case 'job/report':
      return '';
    case 'job/checkpoint':
      return `checkpoint: ${relative(process.cwd(), e.dir) || e.dir}`;
    case 'job/log':
      return [`${e.level === 'warning' ? 'warning: ' : ''}${e.rank !== undefined ? `rank ${e.rank}: ` : ''}${e.message}`, ...(e.problem ? e.problem.hints.map((h) => `  hint: ${h}`) : [])].join('\n');
    case 'job/done': {
      const m = e.metrics;
      if (m.torchrun) return `done: torchrun exited 0 after ${secs(m.durationMs)}${m.torchrun.problems ? ` (${m.torchrun.problems} problem${m.torchrun.problems > 1 ? 's' : ''} in its output)` : ''}${m.reported ? `; last metrics: ${metricsText(m.reported)}` : ''}`;
      if (m.pipeline) return `done: test accuracy ${pct(m.testAccuracy)} after ${m.epochs} epochs, ${m.steps} steps, ${rate(m.samplesPerSecond)}, ${secs(m.durationMs)}; pipeline bubble ${pct(m.pipeline.bubbleFraction)} measured, ${pct(m.pipeline.idealBubbleFraction)} ideal`;
      return `done: test accuracy ${pct(m.testAccuracy)} after ${m.epochs} epochs, ${m.steps} steps, ${rate(m.samplesPerSecond)}, ${secs(m.durationMs)}`;
    }
    case 'job/failed':
      return [`training failed${e.rank !== undefined ? ` (rank ${e.rank})` : ''}: ${e.reason}`, ...(e.hint ? [`hint: ${e.hint}`] : [])].join('\n');
  }
}

function outcomeText(o: TrialOutcome): string {
  switch (o.kind) {
    case 'fits': return 'fits';
    case 'oom': return `out of memory: ${o.reason}`;
    case 'error': return `failed: ${o.reason}`;
    case 'cancelled': return 'cancelled';
  }
}

/** The progress lines of Find Max Batch Size for people. */
export function formatBatchEvent(e: FindBatchSizeEvent): string {
  if (e.type === 'batch/trial') return `batch ${e.batchSize}${e.deviceLabel ? ` on ${e.deviceLabel}` : ''}: ${outcomeText(e.outcome)}`;
  const r = e.result;
  const lines = r.devices.map((d) => {
    const where = `${measuredOn(d)}${d.deviceLabel && d.deviceLabel !== 'cpu' ? ` [${d.deviceLabel}]` : ''}`;
    const trials = `${d.trials.length} trial${d.trials.length === 1 ? '' : 's'}`;
    switch (d.limit) {
      case 'memory': return d.batchSize > 0 ? `largest batch that fits: ${d.batchSize} on ${where} (${d.batchSize + 1} runs out of memory; ${trials})` : `not even a batch of 1 fits on ${where}: the model alone is too large for its memory`;
      case 'max': return `a batch of ${d.batchSize} fits on ${where}: ${boundText(r, d.max)} (${trials})`;
      case 'error': return `the search stopped on ${where}: ${d.error?.reason ?? 'a trial failed'}${d.error?.hint ? `\nhint: ${d.error.hint}` : ''}`;
      case 'cancelled': return `the search was cancelled on ${where}${d.batchSize > 0 ? ` (${d.batchSize} fits)` : ''}`;
    }
  });
  const why: Record<Strategy, string> = {
    single: '',
    dp: ` (${r.perDevice} per device x ${r.jobDevices} devices: the job's batch is global)`,
    ddp: ` (${r.perDevice} per device x ${r.jobDevices} devices: the job's batch is global)`,
    pipeline: ' (a multiple of the micro-batches; measured with the whole model on one device, so on the safe side)',
  };
  if (memoryIsNotTheLimit(r)) lines.push(`memory is not the limit here: every batch the training set can fill fits; keep "batchSize" as it is in ${basename(r.file)}`);
  else if (r.suggestedBatchSize !== undefined) lines.push(`set ${settingText(r, r.suggestedBatchSize)} in ${settingPlace(r)}${r.torchrun ? torchrunWhy(r.torchrun) : why[r.strategy]}`);
  const caveat = suggestionCaveat(r);
  if (caveat) lines.push(`warning: ${caveat}`);
  return lines.join('\n');
}

/** What a torchrun search's batch size is: the script's own, per process; measured under a memory limit on the CPU. */
function torchrunWhy(t: NonNullable<FindBatchSizeResult['torchrun']>): string {
  const parts: string[] = [];
  if (t.processes > 1) parts.push(`the script's batch per process, measured with all ${t.processes} processes running`);
  if (t.memoryLimitBytes !== undefined) parts.push(`each process limited to ${mib(t.memoryLimitBytes)} of memory in the trials`);
  return parts.length ? ` (${parts.join('; ')})` : '';
}

/** `--print-launch`: every node's command on stdout; exit 1 for a job that is no torchrun job or is invalid. */
function printLaunch(opts: Options): number {
  if (!isTorchrunJob(opts.file)) {
    process.stderr.write(`--print-launch: ${opts.file} is no torchrun job ("kind": "torchrun"): a TF.js job runs on this machine only\n`);
    return 1;
  }
  try {
    const spec = loadTorchrunJob(opts.file, opts.overrides, opts.overrides.python);
    process.stdout.write(`${spec.nodes?.launcher === 'slurm' ? slurmBatchText(spec, torchVersion(spec.python)) : launchCommands(spec, torchVersion(spec.python))}\n`);
    return 0;
  } catch (err) {
    if (!(err instanceof JobFileError)) throw err;
    process.stderr.write(`${err.message}\nhint: Fix the job file; its schema is schemas/job.schema.json.\n`);
    return 1;
  }
}

/** `--find-batch-size`: exit 0 with a batch size, 1 when none fits or a trial failed, 130 when interrupted. */
async function findBatchSize(opts: Options): Promise<number> {
  // Forked with an IPC channel (the extension's Find Max Batch Size), the parent going away
  // (its window closed, the extension host died) disconnects it: then nobody reads stdout.
  let orphaned = false;
  const write = (e: FindBatchSizeEvent) => { if (!orphaned) process.stdout.write(`${opts.json ? JSON.stringify(e) : formatBatchEvent(e)}\n`); };
  let handle;
  try {
    handle = findJobBatchSize({ file: opts.file, overrides: opts.overrides, ...opts.findBatchSize, onEvent: write });
  } catch (err) {
    if (!(err instanceof JobFileError) && !(err instanceof NotSearchableError)) throw err;
    // A correct file this search cannot try (a torchrun job that names no batch size setting): no schema hint.
    const hint = err instanceof JobFileError ? 'Fix the job file; its schema is schemas/job.schema.json.' : undefined;
    if (opts.json) process.stdout.write(`${JSON.stringify({ type: 'batch/failed', reason: err.message, ...(hint ? { hint } : {}) })}\n`);
    else process.stderr.write(`find batch size ${hint ? 'failed' : 'refused'}: ${err.message}\n${hint ? `hint: ${hint}\n` : ''}`);
    return 1;
  }
  const onSignal = () => handle.cancel();
  // Cancel the search (which ends the trial's workers) when the parent is gone, instead of
  // running trials until a write to the broken pipe kills the CLI.
  const onDisconnect = () => {
    orphaned = true;
    handle.cancel();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // Listening refs the channel, so remove the listener in the end; one already gone counts too.
  const ipc = typeof process.send === 'function';
  if (ipc) {
    if (process.connected) process.once('disconnect', onDisconnect);
    else onDisconnect();
  }
  try {
    const result = await handle.finished;
    if (result.devices.some((d) => d.limit === 'cancelled')) return 130;
    return result.suggestedBatchSize !== undefined || (result.perDevice > 0 && result.devices.every((d) => d.limit === 'memory' || d.limit === 'max')) ? 0 : 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    if (ipc) process.off('disconnect', onDisconnect);
  }
}

/** The growth watch of a torchrun job (undefined for other jobs, or where its file does not load: runJob says why). */
async function growthWatchFor(opts: Options, createLinter: (() => Promise<Linter>) | undefined): Promise<{ watch: GrowthWatch; dispose(): void } | undefined> {
  if (!createLinter || !isTorchrunJob(opts.file)) return undefined;
  let script: string;
  try {
    script = loadTorchrunJob(opts.file, opts.overrides, opts.overrides.python).script;
  } catch {
    return undefined;
  }
  let linter: Linter;
  try {
    linter = await createLinter();
  } catch (err) {
    // The job runs all the same; a growth warning then says why it names no cause.
    const why = err instanceof Error ? err.message : String(err);
    return { watch: new GrowthWatch(script, () => { throw new Error(`the linter did not load: ${why}`); }), dispose: () => undefined };
  }
  return { watch: new GrowthWatch(script, scriptLinter(linter, (p) => readFileSync(p, 'utf8'))), dispose: () => linter.dispose() };
}

/**
 * `gpu-workbench train`. `lint.createLinter` gives torchrun jobs the growth warning with its OOM hint; the CLI's
 * entry passes it, so that the extension, which bundles this module for its formatting, does not bundle the linter.
 */
export async function run(argv: string[], lint: { createLinter?: () => Promise<Linter> } = {}): Promise<number> {
  const o = parseCommandLine('train', help, () => parseTrainArgs(argv));
  if (typeof o === 'number') return o;
  const opts = o;
  if (opts.findBatchSize) return findBatchSize(opts);
  if (opts.printLaunch) return printLaunch(opts);
  const state = { every: 1 };
  const runsDir = opts.runsDir === undefined ? runsFolder(process.cwd()) : opts.runsDir;
  // A torchrun job's memory, watched as the GPU panel does: a warning naming the OOM hint behind it when it grows.
  const watched = await growthWatchFor(opts, lint.createLinter);
  const show = (e: JobEvent): void => {
    if (opts.json) {
      process.stdout.write(`${JSON.stringify(e)}\n`);
      return;
    }
    const line = formatEvent(e, state);
    if (line) (e.type === 'job/failed' ? process.stderr : process.stdout).write(`${line}\n`);
  };
  const handle = runJob({
    file: opts.file,
    overrides: opts.overrides,
    resume: opts.resume,
    ...(runsDir !== null ? { runsDir } : {}),
    onEvent: (e) => {
      show(e);
      const warning = watched?.watch.observe(e);
      if (warning) show(warning);
    },
  });
  const onSignal = () => handle.cancel();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const final = await handle.finished;
    return final.type === 'job/done' ? 0 : final.cancelled ? 130 : 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    watched?.dispose();
  }
}

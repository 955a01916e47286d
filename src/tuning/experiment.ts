/**
 * The experiment runner: asks the searcher for configs, runs each trial as a process (up to
 * `maxConcurrent` at once, GPUs handed out by `CUDA_VISIBLE_DEVICES`), feeds its reports to the
 * scheduler, stops the trials ASHA gives up on, journals everything, and on `resume` continues a
 * journal where it ended. No vscode here: the CLI and the VS Code layer both drive this class.
 */
import { spawn } from 'node:child_process';
import { shellWord } from '../training/launchers/multinode';
import { SlurmJob, type ProcessLike, type SlurmNote } from '../training/launchers/slurm';
import { appendFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { outOfMemoryStatus, type TrialMemory, type TrialOutOfMemory } from '../common/tuningProtocol';
import { CompanionMissingError, companionPythonPath, openCompanionChannel, type CompanionChannel } from '../training/launchers/companionChannel';
import type { CompanionMessage } from '../common/companionProtocol';
import { AshaScheduler, FifoScheduler, type Scheduler } from './asha';
import type { BestTrial, StopReason, TrialResult, TuneEvent } from './events';
import { JournalWriter, readJournal } from './journal';
import { JobTrialError, parseJobLine, prepareJobTrial } from './jobTrial';
import { killTree, signalGroup, signalSnapshot, snapshot, snapshotAlive, type TreeSnapshot } from './processTree';
import { createSearcher } from './search';
import { toLoss, type Observation, type Searcher } from './searcher';
import type { Config, Params } from './space';
import { totalTrials, type TuneSpec } from './spec';
import { companionCommand, configBatchSize, outOfMemoryInText, TrialMemoryPeak } from './trialCompanion';

export type TrialStatus = 'pending' | 'running' | 'done' | 'stopped' | 'failed' | 'interrupted';

/** A trial as the reporters show it. */
export interface TrialView {
  readonly trialId: number;
  readonly config: Config;
  readonly params: Params;
  readonly status: TrialStatus;
  readonly reports: readonly TrialResult[];
  readonly stopReason?: StopReason;
  readonly error?: string;
  /** The last attempt's log file, relative to the experiment's folder. */
  readonly log?: string;
  /** Its peak memory, from the companion (absent when none came). */
  readonly memory?: TrialMemory;
  /** Set when it failed by running out of memory. */
  readonly outOfMemory?: TrialOutOfMemory;
}

export interface ExperimentOptions {
  readonly spec: TuneSpec;
  /** The folder that holds `.gpu-workbench/experiments/<name>/`. */
  readonly workspace: string;
  /** Overrides the spec's name. */
  readonly name?: string;
  readonly resume?: boolean;
  /** GPUs on this machine (the callers read it with the GPU engine's `sampleOnce`). */
  readonly gpuCount: number;
  /** The environment trials inherit (default process.env). */
  readonly env?: NodeJS.ProcessEnv;
  /**
   * Each trial's own output (stdout and stderr as they come), e.g. a task terminal; trial 0: the
   * experiment's own warnings. The experiment also writes each trial's output to its log file
   * (`trialLogName`, in `dir`) itself, so the log exists however the experiment is run.
   */
  readonly output?: (trialId: number, text: string) => void;
  /** Job trials: the gpu-workbench CLI script run with `train` (default: cli.js next to this code). */
  readonly trainCli?: string;
  /** Where python/gpu_workbench is (default: found above this code); null: command trials run without the companion. */
  readonly companionPath?: string | null;
}

/** The fewest milliseconds between two trial/memory events of a trial while it runs (the last one comes at its end). */
const memoryEventMs = 5000;

export class ExperimentError extends Error {}

interface Trial {
  readonly trialId: number;
  readonly params: Params;
  readonly config: Config;
  status: TrialStatus;
  reports: TrialResult[];
  attempt: number;
  stopReason?: StopReason;
  error?: string;
  proc?: ProcessLike;
  /** The slurm executor: the trial's job. */
  slurmJob?: SlurmJob;
  /** A resumed experiment's trial whose Slurm job was still known: followed again instead of started again. */
  reattach?: { readonly jobId: string; readonly output: string };
  gpus?: number[];
  /** Set once the trial was told to stop; later reports are ignored. */
  stopping?: boolean;
  killTimer?: NodeJS.Timeout;
  /** When the SIGKILL is due (Date.now() clock). */
  killAt?: number;
  /** Its descendants and their groups, seen just before the SIGTERM (an orphan cannot be found later). */
  tree?: TreeSnapshot;
  /** Set once the SIGKILL went out; then 'exit' and a moment end the wait for 'close' (see drainAfterExit). */
  killSent?: boolean;
  drainTimer?: NodeJS.Timeout;
  /** Job trials: the reason of the `job/failed` event. */
  jobFailure?: string;
  /** The running attempt's log file (absolute), from its start on. */
  logFile?: string;
  /** The last attempt's log file, relative to `dir` (from the journal for a restored trial). */
  log?: string;
  /** The attempt's peak memory from the companion's (or the job's) memory messages. */
  memoryPeak?: TrialMemoryPeak;
  /** The peak last sent as trial/memory (or restored from the journal). */
  memory?: TrialMemory;
  memoryTimer?: NodeJS.Timeout;
  memorySentAt?: number;
  /** The attempt ran out of memory (the companion's oom message). */
  outOfMemory?: TrialOutOfMemory;
  /** Its process has exited; the experiment is reading the last of its channel. */
  exited?: boolean;
}

/**
 * A trial attempt's log file name, in its experiment's folder: `trial_3.log`, and
 * `trial_3.attempt-2.log` for an interrupted trial run again (the first attempt's log is kept).
 */
export function trialLogName(trialId: number, attempt: number): string {
  return attempt > 1 ? `trial_${trialId}.attempt-${attempt}.log` : `trial_${trialId}.log`;
}

/** Journals written before `trial/started` recorded its log: every attempt appended to `trial_<id>.log`. */
export function legacyTrialLog(trialId: number): string {
  return `trial_${trialId}.log`;
}

export function experimentDir(workspace: string, name: string): string {
  return join(workspace, '.gpu-workbench', 'experiments', name);
}

/** The parts of a spec that decide which trials exist and how they are judged. */
function searchIdentity(raw: Readonly<Record<string, unknown>>): string {
  const { space, search, metric, mode, scheduler } = raw;
  return JSON.stringify({ space, search, metric, mode: mode ?? 'min', scheduler: scheduler ?? 'fifo' });
}

export class Experiment {
  readonly name: string;
  readonly dir: string;
  readonly journalPath: string;
  readonly total: number;
  readonly maxConcurrent: number;
  private readonly spec: TuneSpec;
  private readonly searcher: Searcher;
  private readonly scheduler: Scheduler;
  private readonly gpusPerTrial: number;
  private readonly gpuFree: number[];
  private readonly trials = new Map<number, Trial>();
  private readonly rerun: Trial[] = [];
  /** Trials of a resumed experiment whose Slurm jobs are followed again. */
  private readonly reattached: Trial[] = [];
  private readonly listeners = new Set<(e: TuneEvent) => void>();
  private journal: JournalWriter | null = null;
  private stopped = false;
  /** A grace period shorter than the spec's, asked for by stop() (closing VS Code cannot wait long). */
  private graceOverrideMs: number | undefined;
  private finished = false;
  private finish: (() => void) | null = null;

  constructor(private readonly opts: ExperimentOptions) {
    const { spec } = opts;
    this.spec = spec;
    this.name = opts.name ?? spec.name;
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(this.name)) throw new ExperimentError(`experiment name '${this.name}' may hold only letters, digits, '.', '_' and '-'`);
    this.dir = experimentDir(opts.workspace, this.name);
    this.journalPath = join(this.dir, 'journal.jsonl');
    this.total = totalTrials(spec);
    this.searcher = createSearcher(spec);
    this.scheduler = spec.scheduler.type === 'asha' ? new AshaScheduler(spec.scheduler, spec.metric, spec.mode, spec.search.seed) : new FifoScheduler();
    // On Slurm the cluster hands out GPUs (--gres per trial); this machine's do not count.
    const slurm = spec.executor.kind === 'slurm';
    const gpus = slurm ? 0 : Math.max(0, Math.floor(opts.gpuCount));
    this.gpusPerTrial = spec.gpusPerTrial ?? (gpus > 0 ? 1 : 0);
    if (!slurm && gpus > 0 && this.gpusPerTrial > gpus) throw new ExperimentError(`gpusPerTrial is ${this.gpusPerTrial} but this machine has ${gpus} GPU${gpus === 1 ? '' : 's'}`);
    this.gpuFree = new Array<number>(gpus).fill(1);
    const byGpus = gpus > 0 && this.gpusPerTrial > 0 ? Math.floor(gpus / this.gpusPerTrial + 1e-9) : 2;
    this.maxConcurrent = spec.maxConcurrent ?? (slurm ? this.total : byGpus);
  }

  onEvent(listener: (e: TuneEvent) => void): { dispose(): void } {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  }

  /** Every trial so far, in creation order. */
  trialViews(): TrialView[] {
    return [...this.trials.values()].map((t) => ({
      trialId: t.trialId, config: t.config, params: t.params, status: t.status, reports: t.reports, stopReason: t.stopReason, error: t.error,
      ...(t.log ? { log: t.log } : {}),
      ...(t.memory ? { memory: t.memory } : {}),
      ...(t.outOfMemory && t.status === 'failed' ? { outOfMemory: t.outOfMemory } : {}),
    }));
  }

  /** Runs until every trial has ended (or `stop()`); resolves with the best trial. */
  async run(): Promise<BestTrial | null> {
    if (this.spec.trial.kind === 'job' && !existsSync(this.spec.trial.job)) {
      throw new ExperimentError(`${this.spec.file || 'spec'}: /trial/job: ${this.spec.trial.job} does not exist`);
    }
    const exists = existsSync(this.journalPath);
    if (exists && !this.opts.resume) throw new ExperimentError(`experiment '${this.name}' already exists (${this.journalPath}); pass --resume to continue it or --name to start another`);
    if (!exists && this.opts.resume) throw new ExperimentError(`nothing to resume: ${this.journalPath} does not exist`);
    if (exists) this.restore();
    else {
      this.journal = new JournalWriter(this.journalPath);
      this.journal.append({ type: 'journal/header', version: 1, name: this.name, spec: this.spec.raw, at: Date.now() });
    }
    const done = new Promise<void>((resolve) => { this.finish = resolve; });
    this.emit({ type: 'experiment/started', name: this.name, dir: this.dir, totalTrials: this.total, maxConcurrent: this.maxConcurrent, gpus: this.gpuFree.length, resumed: exists, at: Date.now() });
    for (const t of this.reattached.splice(0)) this.start(t, []);
    this.fill();
    await done;
    return this.best();
  }

  /**
   * Ends every trial (SIGTERM, SIGKILL after the grace period) and resolves once all have exited.
   * `graceMs` shortens the spec's stopGraceSeconds, also for trials already told to stop: closing
   * VS Code gives the extension host about five seconds before it exits, and the SIGKILL must
   * come before that, or a trial that ignores SIGTERM outlives the window.
   */
  async stop(options: { readonly graceMs?: number } = {}): Promise<void> {
    if (this.finished) return;
    this.stopped = true;
    if (options.graceMs !== undefined) this.graceOverrideMs = Math.min(options.graceMs, this.graceOverrideMs ?? Infinity);
    const running = [...this.trials.values()].filter((t) => t.status === 'running');
    for (const t of running) {
      if (!t.stopping) this.stopTrial(t, 'experiment', 'the experiment was stopped');
      else this.hurryKill(t);
    }
    this.maybeFinish();
    await new Promise<void>((resolve) => {
      if (this.finished) resolve();
      else this.onEvent((e) => { if (e.type === 'experiment/done') resolve(); });
    });
  }

  /**
   * Stops one running trial (SIGTERM, then SIGKILL after the grace period), as when its task is
   * terminated in VS Code; the experiment goes on with the next. False when it is not running.
   */
  cancelTrial(trialId: number, message = 'stopped by the user'): boolean {
    const t = this.trials.get(trialId);
    if (!t || t.status !== 'running' || t.stopping || !t.proc || t.exited) return false;
    this.stopTrial(t, 'user', message);
    return true;
  }

  best(): BestTrial | null {
    let best: BestTrial | null = null;
    for (const t of this.trials.values()) {
      if (t.status !== 'done' && t.status !== 'stopped') continue;
      const last = t.reports[t.reports.length - 1]?.[this.spec.metric];
      if (typeof last !== 'number' || Number.isNaN(last)) continue;
      if (!best || toLoss(last, this.spec.mode) < toLoss(best.metric, this.spec.mode)) best = { trialId: t.trialId, config: t.config, metric: last };
    }
    return best;
  }

  private emit(e: TuneEvent): void {
    this.journal?.append(e);
    for (const l of [...this.listeners]) l(e);
  }

  private out(trialId: number, text: string): void {
    const file = this.trials.get(trialId)?.logFile;
    if (file) {
      try {
        appendFileSync(file, text);
      } catch (err) {
        this.opts.output?.(0, `gpu-workbench: cannot write ${file}: ${(err as Error).message}\n`);
      }
    }
    this.opts.output?.(trialId, text);
  }

  /** Starts the attempt's log file empty, so that every trial has one, even one that prints nothing or never starts. */
  private openLog(t: Trial): string {
    const name = trialLogName(t.trialId, t.attempt);
    t.log = name;
    t.logFile = join(this.dir, name);
    try {
      mkdirSync(this.dir, { recursive: true });
      writeFileSync(t.logFile, '');
    } catch (err) {
      this.opts.output?.(0, `gpu-workbench: cannot write ${t.logFile}: ${(err as Error).message}\n`);
      t.logFile = undefined;
    }
    return name;
  }

  /** Rebuilds trials, scheduler and the re-run queue from the journal. */
  private restore(): void {
    const { records, validBytes, dropped } = readJournal(this.journalPath);
    const header = records[0];
    if (!header || header.type !== 'journal/header') throw new ExperimentError(`${this.journalPath}: not an experiment journal (no header record)`);
    if (searchIdentity(header.spec) !== searchIdentity(this.spec.raw)) {
      throw new ExperimentError(`${this.spec.file}: the space, search, metric, mode or scheduler changed since experiment '${this.name}' started; start a new one with --name`);
    }
    for (const d of dropped) this.out(0, `gpu-workbench: ${this.journalPath}:${d.line}: dropped an unreadable record (${d.text})\n`);
    type Replayed = Extract<TuneEvent, { type: 'trial/started' | 'trial/report' }>;
    const replay: Replayed[] = [];
    const lastStart = new Map<number, number>();
    /** Each trial's Slurm job of its last attempt. */
    const slurmJobs = new Map<number, { jobId: string; output: string }>();
    for (const r of records) {
      switch (r.type) {
        case 'trial/slurm': slurmJobs.set(r.trialId, { jobId: r.jobId, output: r.output }); break;
        case 'trial/started':
          this.trials.set(r.trialId, { trialId: r.trialId, params: r.params, config: r.config, status: 'running', reports: [], attempt: r.attempt, log: r.log ?? legacyTrialLog(r.trialId) });
          slurmJobs.delete(r.trialId);
          lastStart.set(r.trialId, replay.length);
          replay.push(r);
          break;
        case 'trial/report': { const t = this.trials.get(r.trialId); if (t) { t.reports.push(r.result); replay.push(r); } break; }
        case 'trial/stopped': { const t = this.trials.get(r.trialId); if (t) { t.status = r.reason === 'experiment' ? 'interrupted' : 'stopped'; t.stopReason = r.reason; } break; }
        case 'trial/done': { const t = this.trials.get(r.trialId); if (t) t.status = 'done'; break; }
        case 'trial/failed': { const t = this.trials.get(r.trialId); if (t) { t.status = 'failed'; t.error = r.error; t.outOfMemory = r.outOfMemory; } break; }
        case 'trial/memory': { const t = this.trials.get(r.trialId); if (t) t.memory = r.memory; break; }
        case 'trial/interrupted': { const t = this.trials.get(r.trialId); if (t) t.status = 'interrupted'; break; }
        default: break;
      }
    }
    // The scheduler sees the finished trials' last attempts again, in journal order; unfinished trials start over.
    replay.forEach((r, seq) => {
      const status = this.trials.get(r.trialId)?.status;
      if ((status !== 'done' && status !== 'stopped') || seq < (lastStart.get(r.trialId) ?? 0)) return;
      if (r.type === 'trial/started') this.scheduler.onTrialAdd(r.trialId);
      else this.scheduler.onTrialResult(r.trialId, r.result);
    });
    for (const t of this.trials.values()) {
      if (t.status === 'done' || t.status === 'stopped') this.scheduler.onTrialComplete(t.trialId, t.reports[t.reports.length - 1]);
    }
    this.journal = new JournalWriter(this.journalPath, validBytes);
    for (const t of this.trials.values()) {
      const job = slurmJobs.get(t.trialId);
      if (t.status === 'running' && job && this.spec.executor.kind === 'slurm') {
        // Its Slurm job outlived the experiment: follow it again (its output from the start, its reports journaled again after a new trial/started).
        t.reattach = job;
        t.reports = [];
        this.reattached.push(t);
        continue;
      }
      if (t.status === 'running' || t.status === 'interrupted') {
        if (t.status === 'running') this.journal.append({ type: 'trial/interrupted', trialId: t.trialId, at: Date.now() });
        t.status = 'interrupted';
        t.reports = [];
        t.stopReason = undefined;
        t.memory = undefined;
        this.rerun.push(t);
      }
    }
  }

  private history(): Observation[] {
    const timeAttr = this.spec.scheduler.type === 'asha' ? this.spec.scheduler.timeAttr : 'training_iteration';
    return [...this.trials.values()].map((t) => {
      const last = t.reports[t.reports.length - 1];
      const m = last?.[this.spec.metric];
      const step = last?.[timeAttr];
      const state: Observation['state'] = t.status === 'done' || (t.status === 'stopped' && t.stopReason === 'maxT') ? 'done'
        : t.status === 'stopped' ? 'pruned' : t.status === 'failed' ? 'failed' : 'running';
      return { index: t.trialId - 1, params: t.params, state, loss: typeof m === 'number' ? toLoss(m, this.spec.mode) : null, step: typeof step === 'number' ? step : t.reports.length };
    });
  }

  private running(): number {
    let n = 0;
    for (const t of this.trials.values()) if (t.status === 'running') n++;
    return n;
  }

  /** GPUs for one more trial, or null when they are all taken. */
  private allocate(): number[] | null {
    const p = this.gpusPerTrial;
    if (this.gpuFree.length === 0 || p === 0) return [];
    if (p <= 1) {
      const i = this.gpuFree.findIndex((f) => f >= p - 1e-9);
      return i === -1 ? null : [i];
    }
    const free = this.gpuFree.map((f, i) => (f >= 1 - 1e-9 ? i : -1)).filter((i) => i >= 0);
    return free.length >= p ? free.slice(0, p) : null;
  }

  private release(t: Trial): void {
    for (const g of t.gpus ?? []) this.gpuFree[g] = Math.min(1, this.gpuFree[g] + Math.min(1, this.gpusPerTrial));
    t.gpus = [];
  }

  /** Starts trials while there are free slots and trials left. */
  private fill(): void {
    while (!this.stopped && this.running() < this.maxConcurrent) {
      const fresh = this.rerun.length === 0;
      if (fresh && this.trials.size >= this.total) break;
      const gpus = this.allocate();
      if (!gpus) break;
      let t: Trial;
      if (!fresh) {
        t = this.rerun.shift() as Trial;
        t.attempt += 1;
      } else {
        const index = this.trials.size;
        const params = this.searcher.suggest(index, this.history());
        t = { trialId: index + 1, params, config: this.spec.space.build(params), status: 'pending', reports: [], attempt: 1 };
        this.trials.set(t.trialId, t);
      }
      for (const g of gpus) this.gpuFree[g] -= Math.min(1, this.gpusPerTrial);
      this.start(t, gpus);
    }
    this.maybeFinish();
  }

  private maybeFinish(): void {
    if (this.finished || this.running() > 0) return;
    const more = !this.stopped && (this.rerun.length > 0 || this.trials.size < this.total);
    if (more) return;
    this.finished = true;
    this.emit({ type: 'experiment/done', best: this.best(), stopped: this.stopped, at: Date.now() });
    this.journal?.close();
    this.journal = null;
    this.finish?.();
  }

  private start(t: Trial, gpus: number[]): void {
    const trial = this.spec.trial;
    const isJob = trial.kind === 'job';
    const env = trial.kind === 'command' ? trial.env : {};
    t.status = 'running';
    t.gpus = gpus;
    t.reports = [];
    t.stopping = false;
    t.stopReason = undefined;
    t.exited = false;
    t.memory = undefined;
    t.memoryPeak = new TrialMemoryPeak();
    t.memorySentAt = undefined;
    t.outOfMemory = undefined;
    const cuda = this.gpuFree.length > 0 ? gpus.join(',') : null;
    const childEnv: NodeJS.ProcessEnv = {
      ...(this.opts.env ?? process.env), ...env,
      GPU_WORKBENCH_CONFIG: JSON.stringify(t.config), GPU_WORKBENCH_TRIAL_ID: String(t.trialId), GPU_WORKBENCH_EXPERIMENT: this.name,
      PYTHONUNBUFFERED: '1',
    };
    if (cuda !== null) childEnv.CUDA_VISIBLE_DEVICES = cuda;
    this.scheduler.onTrialAdd(t.trialId);
    const log = this.openLog(t);
    this.emit({ type: 'trial/started', trialId: t.trialId, config: t.config, params: t.params, cudaVisibleDevices: cuda, attempt: t.attempt, log, at: Date.now() });
    t.jobFailure = undefined;
    let args: string[];
    let cwd: string;
    let channel: CompanionChannel | undefined;
    if (trial.kind === 'command') {
      args = trial.command.map((a) => substitute(a, t.config));
      cwd = trial.cwd;
      // A Slurm trial runs on a node that cannot reach this machine's channel: the companion on its
      // PYTHONPATH only, so that report() prints the ::report:: lines its output file carries back.
      channel = this.withCompanion(t, args, childEnv, { channel: this.spec.executor.kind !== 'slurm' });
      if (channel) args = [...companionCommand(args).args];
    } else {
      try {
        const prepared = prepareJobTrial({ job: trial.job, config: t.config, trialDir: join(this.dir, `trial_${t.trialId}`), cli: this.opts.trainCli });
        args = [...prepared.command];
        cwd = prepared.cwd;
        this.out(t.trialId, `gpu-workbench: training ${prepared.jobFile}\n`);
      } catch (err) {
        if (!(err instanceof JobTrialError)) throw err;
        this.fail(t, err.message);
        return;
      }
    }

    let proc: ProcessLike;
    const executor = this.spec.executor;
    if (executor.kind === 'slurm') {
      delete childEnv.CUDA_VISIBLE_DEVICES; // Slurm sets it from the job's --gres
      const reattach = t.reattach;
      t.reattach = undefined;
      const job = reattach
        ? SlurmJob.attach(reattach.jobId, reattach.output, { env: childEnv, ...(executor.options.pollMs ? { pollMs: executor.options.pollMs } : {}) })
        : SlurmJob.submit({
          dir: join(this.dir, 'slurm'), name: `${this.name}-trial_${t.trialId}${t.attempt > 1 ? `.attempt-${t.attempt}` : ''}`,
          body: [`cd ${shellWord(cwd)}`, `exec ${args.map(shellWord).join(' ')}`].join('\n'),
          sbatch: ['--nodes=1', '--ntasks=1'], options: { ...executor.options, gpusPerNode: Math.ceil(this.gpusPerTrial) }, env: childEnv,
        });
      if (reattach) this.out(t.trialId, `gpu-workbench: following Slurm job ${reattach.jobId} again (the trial was running when the experiment ended)\n`);
      else job.on('submitted', (jobId: string, output: string) => this.emit({ type: 'trial/slurm', trialId: t.trialId, jobId, output, at: Date.now() }));
      job.on('note', (n: SlurmNote) => this.out(t.trialId, `${n.message}\n`));
      t.slurmJob = job;
      proc = job;
    } else {
      try {
        // Its own process group, so that stopping it also ends whatever it started (data loaders, torchrun workers).
        proc = spawn(args[0], args.slice(1), { cwd, env: childEnv, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
      } catch (err) {
        void channel?.close(0);
        this.fail(t, `cannot start ${args[0]}: ${(err as Error).message}`);
        return;
      }
    }
    t.proc = proc;
    // A listener of trial/started may have stopped the experiment already.
    if (this.stopped) this.stopTrial(t, 'experiment', 'the experiment was stopped');
    const stderrTail: string[] = [];
    let buffered = '';
    proc.stdout?.setEncoding('utf8');
    proc.stderr?.setEncoding('utf8');
    proc.stdout?.on('data', (chunk: string) => {
      if (!isJob) this.out(t.trialId, chunk); // a job trial's JSON events are shown as lines by onLine
      buffered += chunk;
      let nl: number;
      while ((nl = buffered.indexOf('\n')) !== -1) {
        const line = buffered.slice(0, nl).replace(/\r$/, '');
        buffered = buffered.slice(nl + 1);
        this.onLine(t, line);
      }
    });
    proc.stderr?.on('data', (chunk: string) => {
      this.out(t.trialId, chunk);
      stderrTail.push(...chunk.split('\n').filter((l) => l.trim()));
      stderrTail.splice(0, Math.max(0, stderrTail.length - 5));
    });
    let spawnError: Error | null = null;
    proc.on('error', (err) => { spawnError = err; });
    proc.on('exit', () => { if (t.killSent) this.drainAfterExit(t, proc); });
    proc.on('close', (code, signal) => {
      t.exited = true;
      clearTimeout(t.drainTimer);
      t.drainTimer = undefined;
      t.killSent = false;
      // A child that made its own group may still be ending on the SIGTERM: its SIGKILL stays due.
      if (!(t.stopping && t.tree && snapshotAlive(t.tree))) clearTimeout(t.killTimer);
      t.tree = undefined;
      if (proc.pid !== undefined) signalGroup(proc.pid, 'SIGKILL'); // anything the trial left behind in its group
      const slurmJob = t.slurmJob;
      t.slurmJob = undefined;
      const finish = (): void => this.closed(t, code, signal, { buffered, stderrTail, spawnError, args, cwd, slurmJob });
      // The companion's last messages (an out-of-memory error, the last step's memory) may still be on their way.
      if (channel) void channel.close(1000).then(finish);
      else finish();
    });
  }

  private closed(t: Trial, code: number | null, signal: NodeJS.Signals | null, s: { buffered: string; stderrTail: string[]; spawnError: Error | null; args: string[]; cwd: string; slurmJob: SlurmJob | undefined }): void {
    const { stderrTail, spawnError, args, cwd, slurmJob } = s;
    if (s.buffered) this.onLine(t, s.buffered);
    this.release(t);
    t.proc = undefined;
    this.flushMemory(t);
    if (spawnError && slurmJob) {
      this.fail(t, spawnError.message); // Slurm's own words (sbatch: error: ..., a tool not installed)
      return;
    } else if (spawnError) {
      const e = spawnError as NodeJS.ErrnoException;
      this.fail(t, e.code === 'ENOENT' ? `command not found: ${args[0]} (cwd ${cwd})` : `cannot start ${args[0]}: ${e.message}`);
    } else if (t.stopping) {
      t.status = t.stopReason === 'experiment' ? 'interrupted' : 'stopped';
      if (t.status === 'stopped') this.scheduler.onTrialComplete(t.trialId, t.reports[t.reports.length - 1]);
      else this.scheduler.onTrialRemove(t.trialId);
    } else if (t.jobFailure !== undefined) {
      const oom = t.outOfMemory ?? this.outOfMemoryFromText(t, [t.jobFailure]);
      this.fail(t, oom ? `${outOfMemoryStatus(oom)}: ${t.jobFailure}` : t.jobFailure, oom);
      return;
    } else if (code === 0) {
      t.status = 'done';
      this.scheduler.onTrialComplete(t.trialId, t.reports[t.reports.length - 1]);
      this.emit({ type: 'trial/done', trialId: t.trialId, at: Date.now() });
    } else {
      const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
      const oom = t.outOfMemory ?? this.outOfMemoryFromText(t, stderrTail);
      const info = slurmJob?.info;
      const what = slurmJob ? `Slurm job ${slurmJob.jobId} (${args[0]}) ended ${info?.state ?? '?'}${info?.reason ? ` (${info.reason})` : ''} and` : args[0];
      this.fail(t, oom ? `${outOfMemoryStatus(oom)}: ${oom.message}` : `${what} ${how}${stderrTail.length ? `: ${stderrTail.join(' | ')}` : ''}`, oom);
      return;
    }
    this.fill();
  }

  private fail(t: Trial, error: string, outOfMemory?: TrialOutOfMemory): void {
    t.status = 'failed';
    t.error = error;
    t.outOfMemory = outOfMemory;
    this.release(t);
    this.scheduler.onTrialRemove(t.trialId);
    this.emit({ type: 'trial/failed', trialId: t.trialId, error, ...(outOfMemory ? { outOfMemory } : {}), at: Date.now() });
    this.fill();
  }

  /** torch's out-of-memory words in the trial's failure (a script the companion did not run). */
  private outOfMemoryFromText(t: Trial, lines: readonly string[]): TrialOutOfMemory | undefined {
    const found = outOfMemoryInText(lines);
    if (!found) return undefined;
    const batchSize = configBatchSize(t.config);
    return { device: found.device, ...(batchSize !== undefined ? { batchSize } : {}), message: found.message };
  }

  /**
   * A command trial that runs a Python script (`python script.py`, `torchrun script.py`) gets the
   * companion: python/gpu_workbench first on PYTHONPATH, a channel of its own, and its batch size in
   * GPU_WORKBENCH_BATCH_SIZE; returns the channel (the caller puts `-m gpu_workbench.run` in the
   * command). Any other command gets the companion on PYTHONPATH only, so that a script it runs may
   * still `import gpu_workbench` and report (its ::report:: lines on stdout).
   */
  private withCompanion(t: Trial, args: readonly string[], env: NodeJS.ProcessEnv, o: { channel: boolean }): CompanionChannel | undefined {
    let path = this.opts.companionPath;
    if (path === undefined) {
      try {
        path = companionPythonPath();
      } catch (err) {
        if (!(err instanceof CompanionMissingError)) throw err;
        this.out(t.trialId, `gpu-workbench: ${err.message}; the trial runs without it (no memory or out of memory per trial)\n`);
        path = null;
      }
    }
    if (path === null) return undefined;
    env.PYTHONPATH = env.PYTHONPATH ? `${path}${delimiter}${env.PYTHONPATH}` : path;
    const batchSize = configBatchSize(t.config);
    if (batchSize !== undefined && env.GPU_WORKBENCH_BATCH_SIZE === undefined) env.GPU_WORKBENCH_BATCH_SIZE = String(batchSize);
    if (!o.channel) return undefined;
    const command = companionCommand(args);
    if (!command.wrapped) {
      if (command.note) this.out(t.trialId, `gpu-workbench: ${command.note}, so the trial runs without the companion's hooks (no memory or out of memory per trial)\n`);
      return undefined;
    }
    if (process.platform === 'win32') return undefined; // no Unix sockets for CPython there: the companion stays off
    let badLines = 0;
    const channel = openCompanionChannel({
      onMessage: (m) => this.onCompanion(t, m),
      onBadLine: (error, line) => {
        if (++badLines <= 5) this.out(t.trialId, `gpu-workbench: skipped a line of the companion's channel (${error})${line ? `: ${line}` : ''}\n`);
      },
    });
    Object.assign(env, channel.env);
    return channel;
  }

  private onCompanion(t: Trial, m: CompanionMessage): void {
    switch (m.type) {
      case 'report':
        // Every rank of a torchrun trial may report; rank 0's are the trial's (as for a torchrun job).
        if (m.rank !== 0 || t.stopping || t.status !== 'running') break;
        this.out(t.trialId, `gpu_workbench.report: ${JSON.stringify(m.metrics)}\n`);
        this.report(t, { ...m.metrics }, `gpu_workbench.report(${JSON.stringify(m.metrics)})`);
        break;
      case 'memory':
        this.memoryMessage(t, m);
        break;
      case 'oom': {
        const batchSize = m.batchSize ?? configBatchSize(t.config);
        t.outOfMemory ??= { device: m.device, ...(batchSize !== undefined ? { batchSize } : {}), message: `${m.error}: ${m.message}` };
        for (const record of m.memory ?? []) this.memoryMessage(t, { rank: m.rank, localRank: m.localRank, worldSize: m.worldSize, ...record });
        this.out(t.trialId, `gpu-workbench: ${m.worldSize > 1 ? `rank ${m.rank} ` : ''}ran out of ${m.device === 'cuda' ? 'GPU' : 'CPU'} memory${batchSize !== undefined ? ` at batch size ${batchSize}` : ''}\n`);
        break;
      }
      case 'dropped':
        this.out(t.trialId, `gpu-workbench: rank ${m.rank} dropped ${m.count} companion messages that were not read in time\n`);
        break;
      default:
        break;
    }
  }

  /** A memory record of the trial (the companion's, or a torchrun job trial's job/rankMemory): its peak, sent at most every few seconds. */
  private memoryMessage(t: Trial, m: Parameters<TrialMemoryPeak['add']>[0]): void {
    if (!t.memoryPeak?.add(m) || t.memoryTimer) return;
    const wait = t.memorySentAt === undefined ? 0 : t.memorySentAt + memoryEventMs - Date.now();
    if (wait <= 0) this.sendMemory(t);
    else t.memoryTimer = setTimeout(() => this.sendMemory(t), wait);
  }

  private sendMemory(t: Trial): void {
    clearTimeout(t.memoryTimer);
    t.memoryTimer = undefined;
    const memory = t.memoryPeak?.value();
    if (!memory || JSON.stringify(memory) === JSON.stringify(t.memory)) return;
    t.memory = memory;
    t.memorySentAt = Date.now();
    this.emit({ type: 'trial/memory', trialId: t.trialId, memory, at: Date.now() });
  }

  /** At the trial's end: the peak not yet sent goes out before the trial's last event. */
  private flushMemory(t: Trial): void {
    this.sendMemory(t);
  }

  private onLine(t: Trial, line: string): void {
    if (this.spec.trial.kind === 'job') {
      const parsed = parseJobLine(line);
      if (parsed === null) { this.out(t.trialId, `${line}\n`); return; }
      // A trial we stopped ends with job/failed "cancelled": the stop reason says it better.
      if (parsed.text && !(parsed.kind === 'failed' && t.stopping)) this.out(t.trialId, parsed.text);
      if (parsed.kind === 'failed' && !t.stopping) t.jobFailure = parsed.reason;
      if (parsed.kind === 'report' && !t.stopping) this.report(t, parsed.result, line);
      if (parsed.kind === 'memory') this.memoryMessage(t, parsed.memory);
      return;
    }
    const at = line.indexOf('::report::');
    if (at === -1 || line.slice(0, at).trim() !== '' || t.stopping) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(line.slice(at + '::report::'.length));
    } catch {
      this.out(t.trialId, `gpu-workbench: ignored a report that is not JSON: ${line.slice(0, 120)}\n`);
      return;
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      this.out(t.trialId, `gpu-workbench: ignored a report that is not a JSON object: ${line.slice(0, 120)}\n`);
      return;
    }
    this.report(t, { ...(parsed as Record<string, unknown>) }, line);
  }

  private report(t: Trial, result: Record<string, unknown>, line: string): void {
    if (typeof result.training_iteration !== 'number') result.training_iteration = t.reports.length + 1;
    if (typeof result[this.spec.metric] !== 'number' && t.reports.every((r) => typeof r[this.spec.metric] !== 'number')) {
      this.out(t.trialId, `gpu-workbench: this report has no number '${this.spec.metric}' (the spec's metric): ${line.slice(0, 120)}\n`);
    }
    t.reports.push(result);
    this.emit({ type: 'trial/report', trialId: t.trialId, result, at: Date.now() });
    const d = this.scheduler.onTrialResult(t.trialId, result);
    if (d.action === 'stop') this.stopTrial(t, d.reason, d.message);
  }

  private stopTrial(t: Trial, reason: StopReason, message: string): void {
    if (t.stopping || !t.proc || t.exited) return;
    t.stopping = true;
    t.stopReason = reason;
    this.emit({ type: 'trial/stopped', trialId: t.trialId, reason, message, at: Date.now() });
    if (t.slurmJob) {
      t.slurmJob.cancel(); // scancel: Slurm ends the job's processes on its node (SIGTERM, SIGKILL after its KillWait)
      return;
    }
    if (t.proc.pid !== undefined) {
      // Seen before the SIGTERM: a trial that exits at once orphans its children in other groups.
      t.tree = snapshot(t.proc.pid);
      signalGroup(t.proc.pid, 'SIGTERM');
      signalSnapshot(t.tree, 'SIGTERM');
    }
    this.scheduleKill(t, this.graceMs());
  }

  private graceMs(): number {
    return Math.min(this.spec.stopGraceMs, this.graceOverrideMs ?? Infinity);
  }

  /** SIGKILL for the trial's process tree after `ms`, unless it has exited by then. */
  private scheduleKill(t: Trial, ms: number): void {
    const pid = t.proc?.pid;
    if (pid === undefined) return;
    clearTimeout(t.killTimer);
    t.killAt = Date.now() + ms;
    const proc = t.proc as ProcessLike;
    const tree = t.tree;
    t.killTimer = setTimeout(() => {
      killTree(pid, tree);
      if (t.proc !== proc || t.exited) return; // it closed already: only its leftovers were due
      t.killSent = true;
      if (proc.exitCode !== null || proc.signalCode !== null) this.drainAfterExit(t, proc);
    }, ms);
  }

  /**
   * After the SIGKILL, the trial's exit is its end: a process that escaped the kill (one the
   * trial started in a session of its own after we looked) may still hold its stdout, and 'close'
   * would never come, nor stop(). So shortly after 'exit' the pipes are closed from our side.
   */
  private drainAfterExit(t: Trial, proc: ProcessLike): void {
    if (t.drainTimer !== undefined) return;
    t.drainTimer = setTimeout(() => {
      if (t.proc !== proc) return; // 'close' came
      this.out(t.trialId, 'gpu-workbench: the trial was killed but a process it started still holds its output; output after its exit was dropped\n');
      proc.stdout?.destroy();
      proc.stderr?.destroy();
    }, 500);
  }

  /** A trial already stopping gets its SIGKILL by the (shorter) grace period stop() asked for. */
  private hurryKill(t: Trial): void {
    const due = Date.now() + this.graceMs();
    if (t.killAt === undefined || due < t.killAt) this.scheduleKill(t, this.graceMs());
  }
}

/** `${config.lr}` → the value (strings as is, others as JSON); an inactive conditional parameter → ''. */
export function substitute(arg: string, config: Config): string {
  return arg.replace(/\$\{config\.([^}]+)\}/g, (_, path: string) => {
    let v: unknown = config;
    for (const k of path.split('.')) v = typeof v === 'object' && v !== null ? (v as Record<string, unknown>)[k] : undefined;
    if (v === undefined) return '';
    return typeof v === 'string' ? v : JSON.stringify(v);
  });
}

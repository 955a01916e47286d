/**
 * The coordinator of one job: validates the job file, forks one worker process per device
 * (rank 0..W-1, `CUDA_VISIBLE_DEVICES` set to exactly that device), waits until every worker
 * has loaded its backend, model and data, then lets them train and turns their messages into
 * `JobEvent`s. It never touches gradients: those go around the workers' ring.
 *
 * Faults: a worker that dies (SIGKILL, OOM, a crash) ends the job with the rank that died;
 * the others are killed and waited for, so no process of the job outlives it. The
 * training host and `gpu-workbench train` both run jobs through `runJob`.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JobEvent, JobMetrics, WorkerInfo, WorkerMessage } from '../job/events';
import { applyCheckpointPlan, CheckpointInUseError, checkpointFolderPlan, ensureCheckpointFolder, lockCheckpointFolder, type CheckpointLock, type CheckpointPlan } from '../job/checkpoint';
import { JobFileError, loadJobFile, type JobOverrides, type JobSpec } from '../job/spec';
import { isTorchrunJob, loadTorchrunJob, runTorchrun } from './torchrun';
import { dawnNoisePattern } from '../backends/webgpu';
import { recordRun } from '../job/runRecorder';

export interface RunJobOptions {
  readonly file: string;
  readonly overrides?: JobOverrides;
  readonly resume?: boolean;
  readonly onEvent: (event: JobEvent) => void;
  /** The script forked for workers (default: the training host bundle next to this module). */
  readonly workerScript?: string;
  /** How long workers get to start (load backend, data, model) before the job fails. */
  readonly startTimeoutMs?: number;
  /** Where the run's record and log go (`runsFolder(workspace)`, see runRecord.ts); not recorded without it (a batch-size trial, a check). */
  readonly runsDir?: string;
}

export interface JobHandle {
  /** Resolves with the last event, `job/done` or `job/failed`, after every worker has exited. */
  readonly finished: Promise<Extract<JobEvent, { type: 'job/done' | 'job/failed' }>>;
  /** The worker pids, once started. */
  readonly pids: () => number[];
  /** Stops the job: workers are killed, then `job/failed` with `cancelled: true`. */
  cancel(): void;
}

/** The environment variable that makes the training host bundle run as a worker. */
export const workerRoleEnv = 'GPU_WORKBENCH_TRAINING_ROLE';

/** dist/trainingHost.js next to the bundle, or out/src/training/launchers/host.js next to this module when run from tsc output. */
export function defaultWorkerScript(): string {
  for (const candidate of [join(__dirname, 'trainingHost.js'), join(__dirname, 'host.js'), join(__dirname, '..', 'training', 'host.js')]) {
    if (existsSync(candidate)) return candidate;
  }
  throw new Error(`the training host script (trainingHost.js) is not next to ${__dirname}: build it with npm run build`);
}

interface WorkerSlot {
  readonly rank: number;
  readonly device: number;
  readonly child: ChildProcess;
  ready?: Extract<WorkerMessage, { type: 'worker/ready' }>;
  done?: JobMetrics;
  failed?: Extract<WorkerMessage, { type: 'worker/failed' }>;
  exited: boolean;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  output: string;
}

export function runJob(options: RunJobOptions): JobHandle {
  if (isTorchrunJob(options.file)) return startTorchrun(options);
  let spec: JobSpec;
  try {
    spec = loadJobFile(options.file, options.overrides);
  } catch (err) {
    const event: JobEvent = { type: 'job/failed', reason: err instanceof Error ? err.message : String(err), ...(err instanceof JobFileError ? { hint: 'Fix the job file; its schema is schemas/job.schema.json.' } : {}) };
    options.onEvent(event);
    return { finished: Promise.resolve(event), pids: () => [], cancel: () => undefined };
  }
  const recorder = options.runsDir === undefined ? undefined : recordRun({
    dir: options.runsDir, kind: 'training', file: spec.file, name: spec.name, ...(options.overrides ? { overrides: options.overrides } : {}), resume: options.resume === true,
    ...(spec.checkpointDir ? { checkpointDir: spec.checkpointDir } : {}),
  }, (message) => options.onEvent({ type: 'job/log', level: 'warning', message }));
  const o: RunJobOptions = recorder ? { ...options, onEvent: (e) => { recorder.event(e); options.onEvent(e); } } : options;
  // One run per checkpoint folder, one job at a time in it: the folder is checked and locked
  // before any worker starts; what has to move aside moves only once every worker is ready to
  // train (a job that fails to start leaves the folder as it was).
  let lock: CheckpointLock | undefined;
  let plan: CheckpointPlan | undefined;
  if (spec.checkpointDir) {
    try {
      ensureCheckpointFolder(spec.checkpointDir);
      lock = lockCheckpointFolder(spec.checkpointDir, { name: spec.name, file: spec.file });
      plan = checkpointFolderPlan(spec.checkpointDir, o.resume === true, { name: spec.name, file: spec.file, model: spec.model });
    } catch (err) {
      lock?.release();
      const hint = err instanceof CheckpointInUseError
        ? 'Wait for that job to end (or stop it), or give this job another checkpointDir.'
        : 'Fix or change the job\'s checkpointDir.';
      const event: JobEvent = { type: 'job/failed', reason: err instanceof Error ? err.message : String(err), hint };
      o.onEvent(event);
      return { finished: Promise.resolve(event), pids: () => [], cancel: () => undefined };
    }
  }
  return new Coordinator(spec, o, plan, lock).start();
}

/** `"kind": "torchrun"`: the user's PyTorch script under torchrun (see torchrun.ts). */
function startTorchrun(o: RunJobOptions): JobHandle {
  try {
    return runTorchrun(loadTorchrunJob(o.file, o.overrides, o.overrides?.python), o.onEvent, { ...(o.runsDir ? { runsDir: o.runsDir } : {}), ...(o.overrides ? { overrides: o.overrides } : {}) });
  } catch (err) {
    const event: JobEvent = { type: 'job/failed', reason: err instanceof Error ? err.message : String(err), ...(err instanceof JobFileError ? { hint: 'Fix the job file; its schema is schemas/job.schema.json.' } : {}) };
    o.onEvent(event);
    return { finished: Promise.resolve(event), pids: () => [], cancel: () => undefined };
  }
}

class Coordinator {
  private readonly slots: WorkerSlot[] = [];
  readonly early: JobEvent[] = [];
  private readonly ringDir = mkdtempSync(join(tmpdir(), 'gw-job-'));
  private state: 'starting' | 'running' | 'ending' | 'ended' = 'starting';
  private failure: { reason: string; rank?: number; hint?: string; cancelled?: boolean } | undefined;
  private failureDied = false;
  private settleTimer: NodeJS.Timeout | undefined;
  private startTimer: NodeJS.Timeout | undefined;
  private resolveFinished!: (e: Extract<JobEvent, { type: 'job/done' | 'job/failed' }>) => void;
  private readonly killOnExit = () => { for (const s of this.slots) if (!s.exited) s.child.kill('SIGKILL'); };

  constructor(private readonly spec: JobSpec, private readonly o: RunJobOptions, private readonly plan?: CheckpointPlan, private readonly lock?: CheckpointLock) {}

  start(): JobHandle {
    const finished = new Promise<Extract<JobEvent, { type: 'job/done' | 'job/failed' }>>((resolve) => { this.resolveFinished = resolve; });
    process.on('exit', this.killOnExit);
    const script = this.o.workerScript ?? defaultWorkerScript();
    const worldSize = this.spec.devices.length;
    this.spec.devices.forEach((device, rank) => {
      const child = fork(script, [], {
        env: { ...process.env, [workerRoleEnv]: 'worker', CUDA_VISIBLE_DEVICES: String(device), GPU_WORKBENCH_RANK: String(rank) },
        stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      });
      const slot: WorkerSlot = { rank, device, child, exited: false, exitCode: null, signal: null, output: '' };
      this.slots.push(slot);
      // Dawn's notice that it capped two limits (on lavapipe, at every adapter request) is not what a failure's last lines should show.
      const keep = (d: Buffer) => { slot.output = (slot.output + d.toString().split('\n').filter((l) => !dawnNoisePattern.test(l)).join('\n')).slice(-4000); };
      child.stdout?.on('data', keep);
      child.stderr?.on('data', keep);
      child.on('message', (m: WorkerMessage) => this.onMessage(slot, m));
      child.on('error', (err) => this.fail({ reason: `worker ${rank} could not be started: ${err.message}`, rank }));
      child.on('exit', (code, signal) => this.onExit(slot, code, signal));
      child.send({ type: 'worker/init', rank, worldSize, ringDir: this.ringDir, spec: this.spec, resume: this.o.resume === true });
    });
    this.startTimer = setTimeout(() => {
      const late = this.slots.filter((s) => !s.ready).map((s) => s.rank);
      this.fail({ reason: `worker${late.length > 1 ? 's' : ''} ${late.join(', ')} did not start within ${(this.o.startTimeoutMs ?? 120_000) / 1000} s`, rank: late[0] });
    }, this.o.startTimeoutMs ?? 120_000);
    return {
      finished,
      pids: () => this.slots.map((s) => s.child.pid ?? -1).filter((p) => p > 0),
      cancel: () => this.fail({ reason: 'cancelled', cancelled: true }, 0),
    };
  }

  private onMessage(slot: WorkerSlot, m: WorkerMessage): void {
    switch (m.type) {
      case 'worker/ready':
        slot.ready = m;
        if (this.state === 'starting' && this.slots.every((s) => s.ready)) this.begin();
        break;
      case 'worker/event':
        // What a worker says while loading (that it resumed, say) comes right after job/started.
        if (this.state === 'starting') this.early.push(m.event);
        else if (this.state === 'running') this.o.onEvent(m.event);
        break;
      case 'worker/done':
        slot.done = m.metrics;
        break;
      case 'worker/failed':
        slot.failed = m;
        // A lost peer is a symptom: wait a little for the rank that actually died to be reported.
        this.fail({ reason: m.reason, rank: m.rank, ...(m.hint ? { hint: m.hint } : {}) }, m.peerLost ? 1000 : 0);
        break;
      default: {
        const never: never = m;
        void never;
      }
    }
  }

  private begin(): void {
    clearTimeout(this.startTimer);
    // Every worker is ready to train: only now does an earlier run move aside.
    let readied: string | undefined;
    try {
      readied = this.plan ? applyCheckpointPlan(this.plan) : undefined;
    } catch (err) {
      this.fail({ reason: `the checkpoint folder ${this.plan?.root} holds an earlier run that could not be moved aside: ${err instanceof Error ? err.message : String(err)}`, hint: 'Move or delete it yourself, or continue it with --resume (Resume in the editor).' });
      return;
    }
    this.state = 'running';
    const ready = this.slots.map((s) => s.ready!);
    const workers: WorkerInfo[] = ready.map((r) => ({ rank: r.rank, pid: r.pid, device: r.device, backend: r.backend, ...(r.adapter ? { adapter: r.adapter } : {}) }));
    const backends = [...new Set(ready.map((r) => r.backend))].join('/');
    const gpu = ready.some((r) => r.device.startsWith('gpu'));
    const note = ready[0].backendNote;
    const description = `backend ${backends} (${gpu ? 'GPU' : 'CPU'}), ${ready.length} worker${ready.length > 1 ? 's' : ''}${note ? `, ${note}` : ''}`;
    this.o.onEvent({
      type: 'job/started',
      job: this.spec.name,
      file: this.spec.file,
      strategy: this.spec.strategy,
      backend: backends,
      description,
      workers,
      epochs: this.spec.epochs,
      stepsPerEpoch: ready[0].stepsPerEpoch,
      globalBatch: this.spec.batchSize,
      trainSamples: ready[0].trainSamples,
      testSamples: ready[0].testSamples,
      startEpoch: ready[0].startEpoch,
    });
    if (readied) this.o.onEvent({ type: 'job/log', level: 'warning', message: readied });
    for (const e of this.early.splice(0)) this.o.onEvent(e);
    for (const s of this.slots) s.child.send({ type: 'worker/go' });
  }

  private onExit(slot: WorkerSlot, code: number | null, signal: NodeJS.Signals | null): void {
    slot.exited = true;
    slot.exitCode = code;
    slot.signal = signal;
    if (this.state === 'ending') {
      if (this.slots.every((s) => s.exited)) this.finish();
      return;
    }
    if (code === 0 && slot.done) {
      if (this.slots.every((s) => s.exited && s.done)) this.finish();
      return;
    }
    if (slot.failed) return; // its message already started the failure
    const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
    const last = slot.output.trim().split('\n').slice(-3).join(' | ');
    const hint = signal === 'SIGKILL' ? 'SIGKILL usually means the kernel\'s out-of-memory killer or a user: try a smaller batchSize or fewer devices; the last checkpoint is still loadable (--resume).' : undefined;
    this.fail({ reason: `worker ${slot.rank} (pid ${slot.child.pid}) ${how}${last ? `: ${last}` : ''}`, rank: slot.rank, ...(hint ? { hint } : {}) }, 0, true);
  }

  /**
   * Records a failure and ends the job after `settleMs`. A worker that died (a signal, an exit
   * without a word) outranks one that only lost its ring peer, so the message names the rank
   * that really died.
   */
  private fail(f: NonNullable<Coordinator['failure']>, settleMs = 0, died = false): void {
    if (this.state === 'ending' || this.state === 'ended') return;
    if (f.cancelled || !this.failure || (died && !this.failureDied)) {
      this.failure = f;
      this.failureDied = died;
    }
    if (died || settleMs === 0) {
      this.end();
      return;
    }
    this.settleTimer ??= setTimeout(() => this.end(), settleMs);
  }

  /** Kills every worker still running (SIGTERM, then SIGKILL) and waits for all to exit. */
  private end(): void {
    if (this.state === 'ending' || this.state === 'ended') return;
    this.state = 'ending';
    clearTimeout(this.startTimer);
    clearTimeout(this.settleTimer);
    for (const s of this.slots) if (!s.exited) s.child.kill('SIGTERM');
    setTimeout(() => { for (const s of this.slots) if (!s.exited) s.child.kill('SIGKILL'); }, 2000).unref();
    if (this.slots.every((s) => s.exited)) this.finish();
  }

  private finish(): void {
    if (this.state === 'ended') return;
    this.state = 'ended';
    clearTimeout(this.startTimer);
    clearTimeout(this.settleTimer);
    process.off('exit', this.killOnExit);
    this.lock?.release();
    rmSync(this.ringDir, { recursive: true, force: true });
    let event: Extract<JobEvent, { type: 'job/done' | 'job/failed' }>;
    const metrics = this.slots[0]?.done;
    if (!this.failure && metrics) event = { type: 'job/done', metrics };
    else {
      const f = this.failure ?? { reason: 'the workers ended without a result' };
      event = { type: 'job/failed', reason: f.reason, ...(f.rank !== undefined ? { rank: f.rank } : {}), ...(f.hint ? { hint: f.hint } : {}), ...(f.cancelled ? { cancelled: true } : {}) };
    }
    this.o.onEvent(event);
    this.resolveFinished(event);
  }
}

/**
 * Slurm as the engine of a job (the torchrun `"launcher": "slurm"`) or of a tuning trial (the
 * `"executor": {"slurm": ...}` of a tune spec): one `sbatch` of a batch script written beside its
 * output file, followed with `squeue` until it ends, its output file streamed as it grows, and
 * `scancel` when it is stopped (or when this process exits).
 *
 * Every failure of the Slurm tools reaches the user in Slurm's own words: a tool that is not
 * installed, `sbatch: error: ...`, a job that waits (PENDING with its reason), a job that ends
 * FAILED/TIMEOUT/NODE_FAIL. `squeue --json` changes its schema between releases (22.05's
 * openapi/v0.0.38 has `job_state: "RUNNING"` and `exit_code` a wait status; from 23.02
 * `job_state: ["RUNNING"]` and `exit_code: {return_code: {number}}`): it is read defensively, and
 * when it cannot be read (an old squeue without --json, a shape not known) the plain
 * `squeue -h -o` format is used instead, and `scontrol show job -o` for a job squeue no longer lists.
 */
import { execFile, spawnSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { closeSync, mkdirSync, openSync, readSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough, type Readable } from 'node:stream';
import type { SlurmRequest } from '../job/torchrunNodes';

/** What a job asks of Slurm (the job file's `slurm`, the tune spec's executor, the settings `gpuWorkbench.slurm.*`). */
export interface SlurmOptions extends SlurmRequest {
  /** How often squeue is asked and the output file read (ms). */
  readonly pollMs?: number;
}

/** A job as squeue (or scontrol) tells it. */
export interface SlurmJobInfo {
  readonly id: string;
  /** PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, ... */
  readonly state: string;
  /** Why it waits or ended (`Resources`, `Priority`, `ReqNodeNotAvail, ...`); absent for None. */
  readonly reason?: string;
  /** The nodes it runs on, as Slurm writes them (`n[1-2]`). */
  readonly nodes?: string;
  readonly nodeCount?: number;
  /** The batch script's exit code, when it ended with one. */
  readonly exitCode?: number;
  /** The signal that ended it, when one did. */
  readonly signal?: number;
}

const ended = new Set(['COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL', 'PREEMPTED', 'OUT_OF_MEMORY', 'BOOT_FAIL', 'DEADLINE', 'SPECIAL_EXIT', 'REVOKED']);

/** Whether a state is the end of a job (COMPLETING is not: its processes are still being ended). */
export function isEndState(state: string): boolean {
  return ended.has(state.replace(/\+$/, '').split(/[ ,+]/)[0]);
}

const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : typeof v === 'number' && Number.isFinite(v) ? String(v) : undefined);

/** A number that Slurm writes plain (22.05) or wrapped as {set, infinite, number} (23.02 on). */
function slurmNumber(v: unknown): number | undefined {
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  if (v && typeof v === 'object') {
    const o = v as { set?: unknown; number?: unknown; infinite?: unknown };
    if (o.set === false || o.infinite === true) return undefined;
    if (typeof o.number === 'number') return o.number;
  }
  return undefined;
}

/** The exit of a job: 22.05 gives the wait status as a number; 23.02 on `{status: [...], return_code, signal: {id}}`. */
function exitOf(v: unknown): { exitCode?: number; signal?: number } {
  if (typeof v === 'number' && Number.isFinite(v)) {
    const signal = v & 0x7f;
    return signal ? { signal } : { exitCode: (v >> 8) & 0xff };
  }
  if (v && typeof v === 'object') {
    const o = v as { return_code?: unknown; signal?: { id?: unknown; signal_id?: unknown } };
    const code = slurmNumber(o.return_code);
    const signal = slurmNumber(o.signal?.id ?? o.signal?.signal_id);
    return { ...(code !== undefined ? { exitCode: code } : {}), ...(signal ? { signal } : {}) };
  }
  return {};
}

/**
 * Jobs from `squeue --json`, whichever release wrote it; undefined when the text is not a squeue
 * document this understands (then use the `-o` format).
 */
export function parseSqueueJson(raw: string): SlurmJobInfo[] | undefined {
  let doc: unknown;
  try {
    doc = JSON.parse(raw);
  } catch {
    return undefined;
  }
  const jobs = (doc as { jobs?: unknown })?.jobs;
  if (!Array.isArray(jobs)) return undefined;
  const out: SlurmJobInfo[] = [];
  for (const j of jobs as Record<string, unknown>[]) {
    if (!j || typeof j !== 'object') return undefined;
    const id = text(slurmNumber(j.job_id) ?? j.job_id);
    const stateRaw = j.job_state ?? j.state;
    const state = Array.isArray(stateRaw) ? stateRaw.filter((s) => typeof s === 'string').join('+') : text(stateRaw) ?? text((stateRaw as { current?: unknown })?.current);
    if (!id || !state) return undefined;
    const reason = text(j.state_reason);
    const nodes = text(j.nodes);
    const nodeCount = slurmNumber(j.node_count);
    out.push({ id, state: state.split('+')[0], ...(reason && reason !== 'None' ? { reason } : {}), ...(nodes ? { nodes } : {}), ...(nodeCount !== undefined ? { nodeCount } : {}), ...exitOf(j.exit_code) });
  }
  return out;
}

/** The `squeue -h -o` format this reads: id, state, reason, node count, nodes. */
export const squeueFormat = '%i|%T|%r|%D|%N';

/** Jobs from `squeue -h -o '%i|%T|%r|%D|%N'`. */
export function parseSqueueFormat(raw: string): SlurmJobInfo[] {
  const out: SlurmJobInfo[] = [];
  for (const line of raw.split('\n')) {
    const [id, state, reason, count, nodes] = line.trim().split('|');
    if (!id || !state) continue;
    const nodeCount = Number(count);
    out.push({ id, state, ...(reason && reason !== 'None' ? { reason } : {}), ...(nodes ? { nodes } : {}), ...(Number.isFinite(nodeCount) && count ? { nodeCount } : {}) });
  }
  return out;
}

/** A job from `scontrol show job -o ID` (one line of KEY=VALUE); `ExitCode=3:0` is exit code 3, `0:15` signal 15. */
export function parseScontrolJob(raw: string): SlurmJobInfo | undefined {
  const field = (k: string) => new RegExp(`(?:^|\\s)${k}=(\\S*)`).exec(raw)?.[1];
  const id = field('JobId');
  const state = field('JobState');
  if (!id || !state) return undefined;
  const reason = field('Reason');
  const nodes = field('NodeList');
  const exit = /^(\d+):(\d+)$/.exec(field('ExitCode') ?? '');
  const signal = exit ? Number(exit[2]) : 0;
  return { id, state, ...(reason && reason !== 'None' ? { reason } : {}), ...(nodes && nodes !== '(null)' ? { nodes } : {}), ...(exit ? (signal ? { signal } : { exitCode: Number(exit[1]) }) : {}) };
}

/** A Slurm tool that failed: its own words (stderr), or that it is not there. */
export class SlurmToolError extends Error {}

function missingTool(tool: string): string {
  return `${tool} is not installed or not on PATH: Slurm jobs need Slurm's client tools (sbatch, squeue, scancel, scontrol) where GPU Workbench runs, e.g. on the cluster's login node (Debian/Ubuntu: apt install slurm-client)`;
}

/** Runs a Slurm tool; its stdout, or a SlurmToolError in Slurm's words. */
export function slurmTool(tool: string, args: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(tool, [...args], { env, encoding: 'utf8', timeout: 60_000, maxBuffer: 32 << 20 }, (err, stdout, stderr) => {
      if (!err) return resolve(stdout);
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return reject(new SlurmToolError(missingTool(tool)));
      const said = stderr.trim() || stdout.trim() || err.message;
      reject(new SlurmToolError(said));
    });
  });
}

/** Where a job is now: squeue --json, else squeue's `-o` format, else scontrol (a job squeue no longer lists). Undefined: Slurm knows no such job. */
export async function querySlurmJob(id: string, env: NodeJS.ProcessEnv = process.env): Promise<SlurmJobInfo | undefined> {
  let found: SlurmJobInfo | undefined;
  let listed = false;
  try {
    const jobs = parseSqueueJson(await slurmTool('squeue', ['--json', '--states=all', '-j', id], env));
    if (jobs) {
      listed = true;
      found = jobs.find((j) => j.id === id);
    }
  } catch (err) {
    if (err instanceof SlurmToolError && /not installed/.test(err.message)) throw err;
    // an squeue without --json, or one that refuses the job id: the format below
  }
  if (!listed) {
    try {
      found = parseSqueueFormat(await slurmTool('squeue', ['-h', '--states=all', '-j', id, '-o', squeueFormat], env)).find((j) => j.id === id);
    } catch (err) {
      if (!/Invalid job id/i.test(String((err as Error).message))) throw err;
    }
  }
  // squeue's JSON has the exit code; the format has none: scontrol has both, while Slurm keeps the job's record.
  if (found && !(isEndState(found.state) && (found.exitCode === undefined && found.signal === undefined))) return found;
  try {
    return parseScontrolJob(await slurmTool('scontrol', ['show', 'job', '-o', id], env)) ?? found;
  } catch (err) {
    if (/Invalid job id/i.test(String((err as Error).message))) return found;
    throw err;
  }
}

/** `sbatch --parsable SCRIPT`: the job id (`12` or `12;cluster`). */
export async function sbatch(script: string, args: readonly string[] = [], env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const out = await slurmTool('sbatch', ['--parsable', ...args, script], env);
  const id = /^(\d+)/.exec(out.trim().split('\n').pop() ?? '')?.[1];
  if (!id) throw new SlurmToolError(`sbatch printed no job id: ${out.trim() || '(nothing)'}`);
  return id;
}

/** #SBATCH lines of the options (partition, time, account, qos, gres, the user's own). */
export function sbatchOptionLines(o: SlurmOptions): string[] {
  const lines: string[] = [];
  if (o.partition) lines.push(`--partition=${o.partition}`);
  if (o.time) lines.push(`--time=${o.time}`);
  if (o.account) lines.push(`--account=${o.account}`);
  if (o.qos) lines.push(`--qos=${o.qos}`);
  if (o.gpusPerNode) lines.push(`--gres=gpu:${o.gpusPerNode}`);
  lines.push(...(o.sbatchArgs ?? []));
  return lines.map((l) => `#SBATCH ${l}`);
}

export interface SlurmBatch {
  /** The folder the script and its output file go to: one every node can write (a shared filesystem on a cluster). */
  readonly dir: string;
  /** The job's name in squeue. */
  readonly name: string;
  /** The batch script's body (bash), after the #SBATCH lines. */
  readonly body: string;
  /** #SBATCH options beyond partition/time/account/gres (`--nodes=2`). */
  readonly sbatch: readonly string[];
  readonly options: SlurmOptions;
  /** The environment of the Slurm tools (sbatch passes it on to the job). */
  readonly env?: NodeJS.ProcessEnv;
}

/** The batch script's path, its output file's pattern (`%j`: the job id) and its text. */
export function batchScript(b: SlurmBatch): { script: string; output: string; text: string } {
  const safe = b.name.replace(/[^\w.-]+/g, '_').slice(0, 60) || 'job';
  const script = join(b.dir, `${safe}.sbatch`);
  const output = join(b.dir, `${safe}-%j.out`);
  const text = ['#!/bin/bash', `#SBATCH --job-name=${safe}`, `#SBATCH --output=${output}`, ...b.sbatch.map((s) => `#SBATCH ${s}`), ...sbatchOptionLines(b.options), b.body, ''].join('\n');
  return { script, output, text };
}

/** Writes the batch script; its path and the output file's pattern. */
export function writeBatchScript(b: SlurmBatch): { script: string; output: string } {
  mkdirSync(b.dir, { recursive: true });
  const { script, output, text } = batchScript(b);
  writeFileSync(script, text, { mode: 0o755 });
  return { script, output };
}

/** What a followed job tells on its way: it waits (and why), it runs (where), it ended. */
export interface SlurmNote { readonly level: 'info' | 'warning'; readonly message: string }

/**
 * A Slurm job followed like a child process: `stdout` is its output file as it grows, `exit`
 * and `close` come when squeue says it ended (code: the batch script's exit code; signal: the one
 * that ended it, e.g. SIGTERM for a cancelled job), `error` when a Slurm tool failed (its words),
 * `note` for what Slurm says meanwhile (PENDING with its reason, RUNNING on which nodes), `info` with
 * each squeue reading (the GPU panel probes the nodes while it says RUNNING).
 */
export class SlurmJob extends EventEmitter {
  readonly stdout: Readable = new PassThrough();
  readonly stderr: Readable = new PassThrough();
  readonly pid = undefined;
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  /** Slurm's job id, once sbatch gave it. */
  jobId?: string;
  /** The last thing squeue said. */
  info?: SlurmJobInfo;
  private outputFile?: string;
  private offset = 0;
  private timer?: NodeJS.Timeout;
  private done = false;
  private cancelAsked = false;
  private readonly onProcessExit = () => this.cancelSync();
  private lastSaid = '';
  private lastError = '';

  private constructor(private readonly env: NodeJS.ProcessEnv, private readonly pollMs: number) {
    super();
    process.on('exit', this.onProcessExit);
  }

  /** Submits the batch; `error` (sbatch's words) or the job follows. */
  static submit(batch: SlurmBatch): SlurmJob {
    const job = new SlurmJob(batch.env ?? process.env, batch.options.pollMs ?? 1000);
    let files: { script: string; output: string };
    try {
      files = writeBatchScript(batch);
    } catch (err) {
      queueMicrotask(() => job.fail(new SlurmToolError(`cannot write the batch script in ${batch.dir}: ${(err as Error).message}`)));
      return job;
    }
    sbatch(files.script, [], job.env).then((id) => {
      job.jobId = id;
      job.outputFile = files.output.replace(/%j/g, id);
      job.emit('submitted', id, job.outputFile);
      job.note('info', `Slurm: submitted batch job ${id} (${files.script}); output in ${job.outputFile}`);
      if (job.cancelAsked) job.cancel();
      job.poll();
    }, (err: Error) => job.fail(err));
    return job;
  }

  /** Follows a job submitted earlier (a resumed experiment's trial), reading its output from `offset`. */
  static attach(jobId: string, outputFile: string, options: { env?: NodeJS.ProcessEnv; pollMs?: number; offset?: number } = {}): SlurmJob {
    const job = new SlurmJob(options.env ?? process.env, options.pollMs ?? 1000);
    job.jobId = jobId;
    job.outputFile = outputFile;
    job.offset = options.offset ?? 0;
    queueMicrotask(() => job.poll());
    return job;
  }

  /** How far the output file has been read (a resumed follower starts there). */
  get outputOffset(): number {
    return this.offset;
  }

  get output(): string | undefined {
    return this.outputFile;
  }

  /** scancel; the job then ends as CANCELLED (exit with SIGTERM). */
  cancel(): void {
    this.cancelAsked = true;
    if (!this.jobId || this.done) return;
    slurmTool('scancel', [this.jobId], this.env).catch((err: Error) => this.note('warning', `Slurm: scancel ${this.jobId} failed: ${err.message}`));
  }

  private cancelSync(): void {
    if (this.jobId && !this.done) spawnSync('scancel', [this.jobId], { env: this.env, stdio: 'ignore', timeout: 10_000 });
  }

  private note(level: SlurmNote['level'], message: string): void {
    this.emit('note', { level, message } satisfies SlurmNote);
  }

  private fail(err: Error): void {
    if (this.done) return;
    this.done = true;
    process.off('exit', this.onProcessExit);
    this.emit('error', err);
    this.exitCode = 1;
    this.emitEnd(1, null);
  }

  private finishStreams(): void {
    for (const s of [this.stdout, this.stderr]) {
      (s as PassThrough).end();
      if (!s.listenerCount('data')) s.resume(); // nobody reads it: let it end all the same
    }
  }

  /** exit now; close once both streams have given out what they hold (as a child process's close). */
  private emitEnd(code: number | null, signal: NodeJS.Signals | null): void {
    this.finishStreams();
    this.emit('exit', code, signal);
    let open = 2;
    const closed = () => {
      if (--open === 0) this.emit('close', code, signal);
    };
    for (const s of [this.stdout, this.stderr]) {
      if (s.readableEnded) closed();
      else s.once('end', closed);
    }
  }

  private readOutput(): void {
    if (!this.outputFile) return;
    let fd: number;
    try {
      if (statSync(this.outputFile).size <= this.offset) return;
      fd = openSync(this.outputFile, 'r');
    } catch {
      return; // not there yet (a pending job)
    }
    try {
      const buf = Buffer.alloc(64 * 1024);
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, this.offset);
        if (n <= 0) break;
        this.offset += n;
        (this.stdout as PassThrough).write(Buffer.from(buf.subarray(0, n)));
      }
    } finally {
      closeSync(fd);
    }
  }

  private poll(): void {
    if (this.done || !this.jobId) return;
    const id = this.jobId;
    querySlurmJob(id, this.env).then((info) => {
      if (this.done) return;
      this.readOutput();
      if (!info) {
        // Slurm forgot the job (its record is kept MinJobAge seconds after the end): it ended, how is unknown.
        return this.end({ id, state: 'UNKNOWN' });
      }
      this.info = info;
      if (!isEndState(info.state)) this.emit('info', info); // an end is told by end(), once
      const said = `${info.state}${info.reason ? ` (${info.reason})` : ''}`;
      if (said !== this.lastSaid && !isEndState(info.state)) {
        this.lastSaid = said;
        if (info.state === 'PENDING') this.note('warning', `Slurm: job ${id} is PENDING (${info.reason ?? 'no reason given'})`);
        else if (info.state === 'RUNNING') this.note('info', `Slurm: job ${id} is RUNNING on ${info.nodes ?? '?'}`);
        else this.note('info', `Slurm: job ${id} is ${said}`);
      }
      if (isEndState(info.state)) return this.end(info);
      this.timer = setTimeout(() => this.poll(), this.pollMs);
    }, (err: Error) => {
      if (this.done) return;
      // squeue can fail for a moment (slurmctld busy): tell it and try again; a tool that is not there ends the follow.
      if (/not installed/.test(err.message)) return this.fail(err);
      if (err.message !== this.lastError) this.note('warning', `Slurm: ${err.message}`); // told once, not every poll
      this.lastError = err.message;
      this.timer = setTimeout(() => this.poll(), this.pollMs * 2);
    });
  }

  private end(info: SlurmJobInfo): void {
    this.done = true;
    clearTimeout(this.timer);
    process.off('exit', this.onProcessExit);
    this.info = info;
    this.emit('info', info);
    this.readOutput();
    if (info.state !== 'COMPLETED') this.note(info.state === 'CANCELLED' ? 'info' : 'warning', `Slurm: job ${info.id} ended ${info.state}${info.reason ? ` (${info.reason})` : ''}${info.exitCode !== undefined ? `, exit code ${info.exitCode}` : ''}${info.signal ? `, signal ${info.signal}` : ''}`);
    const signal = info.signal ? signalName(info.signal) : null;
    this.exitCode = signal ? null : info.exitCode ?? (info.state === 'COMPLETED' ? 0 : 1);
    this.signalCode = signal;
    this.emitEnd(this.exitCode, this.signalCode);
  }
}

function signalName(n: number): NodeJS.Signals {
  const names: Record<number, NodeJS.Signals> = { 1: 'SIGHUP', 2: 'SIGINT', 6: 'SIGABRT', 9: 'SIGKILL', 11: 'SIGSEGV', 15: 'SIGTERM' };
  return names[n] ?? 'SIGTERM';
}

/** What a runner reads of a local child process or of a SlurmJob alike. */
export interface ProcessLike {
  readonly pid?: number | undefined;
  readonly stdout: Readable;
  readonly stderr: Readable;
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  on(event: 'error', listener: (err: NodeJS.ErrnoException) => void): this;
  on(event: 'exit', listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  on(event: 'close', listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
}

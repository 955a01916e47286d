/**
 * `"kind": "torchrun"` jobs: the user's own PyTorch script, launched as
 *   <python> -m torch.distributed.run --standalone --nproc_per_node N --redirects 2 --tee 2 script.py args...
 * (`--nproc_per_node` is the spelling every torchrun accepts; 2.x also takes `--nproc-per-node`,
 * 1.13 — Debian's python3-torch — only the underscore form). Every output line becomes a
 * `job/log` event; CUDA error lines become `job/problem` events with an explanation and the
 * script's file:line (see `cudaErrors.ts`); the job ends with `job/done` (exit code 0) or
 * `job/failed` naming the first problem, else torchrun's root-cause rank and last lines.
 *
 * The interpreter: the job's `python`, overridden by `--python`, default `python3`. torchrun
 * and its workers run in their own process group, so cancel (and the end of this process)
 * takes all of them down; after torchrun exits the group is killed too, so no worker outlives
 * the job.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { basename, dirname, isAbsolute, resolve } from 'node:path';
import { CudaErrorParser, rankPrefix, rootCauseRank, type CudaProblem } from './cudaErrors';
import type { JobEvent } from '../job/events';
import { JobFileError, jobProblems, type JobOverrides } from '../job/spec';

export interface TorchrunSpec {
  readonly file: string;
  readonly name: string;
  /** Absolute path of the user's script. */
  readonly script: string;
  readonly args: readonly string[];
  readonly nprocPerNode: number;
  /** CUDA_VISIBLE_DEVICES for the job, when the job or --devices named devices. */
  readonly devices?: readonly number[];
  readonly python: string;
  readonly cwd: string;
  readonly env: Readonly<Record<string, string>>;
}

interface RawTorchrun {
  kind: 'torchrun';
  name?: string;
  script: string;
  args?: string[];
  nprocPerNode?: number;
  devices?: number | number[];
  python?: string;
  cwd?: string;
  env?: Record<string, string>;
}

/** Whether a job file asks for torchrun; false for anything unreadable (the TF.js path reports that). */
export function isTorchrunJob(file: string): boolean {
  try {
    const raw = JSON.parse(readFileSync(resolve(file), 'utf8')) as { kind?: unknown };
    return raw?.kind === 'torchrun';
  } catch {
    return false;
  }
}

/** Reads and validates a torchrun job file; the interpreter is `python` (the CLI's --python), else the job's, else python3. */
export function loadTorchrunJob(file: string, overrides: JobOverrides = {}, python?: string): TorchrunSpec {
  const path = resolve(file);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new JobFileError(path, [err instanceof SyntaxError ? `is not valid JSON: ${err.message}` : `cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`]);
  }
  const problems = jobProblems(raw);
  if (problems.length) throw new JobFileError(path, problems);
  const j = raw as RawTorchrun;
  const base = dirname(path);
  const abs = (p: string) => (isAbsolute(p) ? p : resolve(base, p));
  const devicesRaw = overrides.devices ?? j.devices;
  const devices = devicesRaw === undefined ? undefined : typeof devicesRaw === 'number' ? undefined : [...devicesRaw];
  const nproc = typeof devicesRaw === 'number' ? devicesRaw : devices ? devices.length : j.nprocPerNode ?? 1;
  // Devices given as an override (--devices, the editor's pick) replace the job's count; the job's own list must agree with it.
  if (devices && overrides.devices === undefined && j.nprocPerNode !== undefined && j.nprocPerNode !== devices.length) throw new JobFileError(path, [`/nprocPerNode (${j.nprocPerNode}) must equal the number of devices listed (${devices.length})`]);
  return {
    file: path,
    name: j.name ?? basename(path).replace(/\.job\.json$|\.json$/, ''),
    script: abs(j.script),
    args: j.args ?? [],
    nprocPerNode: nproc,
    ...(devices ? { devices } : {}),
    python: python ?? overrides.python ?? j.python ?? 'python3',
    cwd: j.cwd ? abs(j.cwd) : base,
    env: j.env ?? {},
  };
}

export function torchrunCommand(spec: TorchrunSpec): string[] {
  // --redirects 2 --tee 2: each worker's stderr (tracebacks) comes back prefixed "[default<rank>]:", so a problem
  // names its rank. Also the workaround that makes torchrun 1.13 run on Python 3.11 at all: its default "0"
  // (Std.NONE) is not found by iterating the Std flag enum there, and the launcher dies in to_map().
  return [spec.python, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', String(spec.nprocPerNode), '--redirects', '2', '--tee', '2', spec.script, ...spec.args];
}

type Final = Extract<JobEvent, { type: 'job/done' | 'job/failed' }>;

export interface TorchrunHandle {
  readonly finished: Promise<Final>;
  readonly pids: () => number[];
  cancel(): void;
}

function summary(p: CudaProblem): string {
  const where = p.file ? ` at ${p.file}${p.line !== undefined ? `:${p.line}` : ''}` : '';
  return `${p.message}${where}`;
}

/** Runs a torchrun job and turns its output into events. */
export function runTorchrun(spec: TorchrunSpec, onEvent: (e: JobEvent) => void): TorchrunHandle {
  const argv = torchrunCommand(spec);
  const started = Date.now();
  const child = spawn(argv[0], argv.slice(1), {
    cwd: spec.cwd,
    env: { ...process.env, ...spec.env, ...(spec.devices ? { CUDA_VISIBLE_DEVICES: spec.devices.join(',') } : {}), PYTHONUNBUFFERED: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true, // its own process group: torchrun and every worker it starts
  });
  const killGroup = (signal: NodeJS.Signals) => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, signal);
    } catch {
      // the group is gone already
    }
  };
  const onProcessExit = () => killGroup('SIGKILL');
  process.on('exit', onProcessExit);
  const parser = new CudaErrorParser();
  let tail: string[] = [];
  let all = '';
  let cancelled = false;
  let spawnError: NodeJS.ErrnoException | undefined;
  onEvent({ type: 'job/log', level: 'info', message: `torchrun: ${argv.join(' ')}` });

  const lineReader = () => {
    let partial = '';
    const flush = (line: string) => {
      all = (all + line + '\n').slice(-20_000);
      tail.push(line);
      if (tail.length > 8) tail = tail.slice(-8);
      const rank = rankPrefix.exec(line);
      onEvent({ type: 'job/log', level: 'info', ...(rank ? { rank: Number(rank[1]) } : {}), message: line });
      for (const problem of parser.push(line)) onEvent({ type: 'job/log', level: 'warning', ...(problem.rank !== undefined ? { rank: problem.rank } : {}), message: `${summary(problem)}: ${problem.explanation}`, problem });
    };
    return {
      data: (d: Buffer) => {
        const lines = (partial + d.toString('utf8')).split('\n');
        partial = lines.pop() ?? '';
        for (const l of lines) flush(l.replace(/\r$/, ''));
      },
      end: () => {
        if (partial) flush(partial);
        partial = '';
      },
    };
  };
  const out = lineReader();
  const err = lineReader();
  child.stdout.on('data', out.data);
  child.stderr.on('data', err.data);
  child.on('error', (e: NodeJS.ErrnoException) => { spawnError = e; });
  // Workers still holding the pipes would keep 'close' away: the group goes when torchrun does.
  // One that escaped the group (a session of its own) still could: shortly after the exit, the
  // pipes are closed from our side, so the job ends.
  let closed = false;
  let drain: NodeJS.Timeout | undefined;
  child.on('exit', () => {
    killGroup('SIGKILL');
    drain = setTimeout(() => {
      if (closed) return;
      onEvent({ type: 'job/log', level: 'warning', message: 'torchrun exited but a process it started still holds its output; output after its exit was dropped' });
      child.stdout.destroy();
      child.stderr.destroy();
    }, 500);
  });

  const finished = new Promise<Final>((resolveFinished) => {
    child.on('close', (code, signal) => {
      closed = true;
      clearTimeout(drain);
      out.end();
      err.end();
      killGroup('SIGKILL'); // nothing the script started outlives the job
      process.off('exit', onProcessExit);
      let event: Final;
      const problems = parser.problems();
      if (spawnError) {
        event = { type: 'job/failed', reason: `cannot run ${spec.python}: ${spawnError.code === 'ENOENT' ? 'no such program' : spawnError.message}`, hint: 'Set the interpreter that has PyTorch: the job\'s "python" field or --python (e.g. /usr/bin/python3 for Debian\'s python3-torch).' };
      } else if (cancelled) {
        event = { type: 'job/failed', reason: 'cancelled', cancelled: true };
      } else if (code === 0) {
        const durationMs = Date.now() - started;
        event = { type: 'job/done', metrics: { testAccuracy: NaN, testLoss: NaN, trainLoss: NaN, epochs: 0, steps: 0, samplesPerSecond: NaN, durationMs, torchrun: { command: argv, exitCode: 0, problems: problems.length } } };
      } else if (/No module named '?torch(?![\w.])/.test(all)) {
        event = { type: 'job/failed', reason: `${spec.python} has no torch module (No module named torch)`, hint: 'Pick the interpreter that has PyTorch with the job\'s "python" field or --python: on Debian, python3-torch belongs to /usr/bin/python3.' };
      } else if (problems.length) {
        const first = problems[0];
        const rank = first.rank ?? rootCauseRank(all);
        event = { type: 'job/failed', reason: summary(first), ...(rank !== undefined ? { rank } : {}), hint: `${first.explanation} ${first.hints[0]}` };
      } else {
        const rank = rootCauseRank(all);
        const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
        const last = tail.filter((l) => l.trim() && !/^[=-]{10,}$/.test(l.trim())).slice(-3).join(' | ');
        event = { type: 'job/failed', reason: `torchrun ${how}${last ? `: ${last}` : ''}`, ...(rank !== undefined ? { rank } : {}) };
      }
      onEvent(event);
      resolveFinished(event);
    });
  });
  return {
    finished,
    pids: () => (child.pid !== undefined ? [child.pid] : []),
    cancel: () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      cancelled = true;
      killGroup('SIGTERM');
      setTimeout(() => killGroup('SIGKILL'), 3000).unref();
    },
  };
}

/**
 * `"kind": "torchrun"` jobs: the user's own PyTorch script, launched as
 *   <python> -m torch.distributed.run --nnodes 1 --rdzv_backend c10d --rdzv_endpoint localhost:0 --nproc_per_node N --redirects 2 --tee 2 script.py args...
 * (`--nproc_per_node` is the spelling every torchrun accepts; 2.x also takes `--nproc-per-node`,
 * 1.13 — Debian's python3-torch — only the underscore form). Every output line becomes a
 * `job/log` event; CUDA error lines become problems with an explanation and the script's
 * file:line (see `cudaErrors.ts`), and every other exception of the script a problem at the
 * user's innermost frame (see `pythonErrors.ts`); the job ends with `job/done` (exit code 0) or
 * `job/failed` naming the first failing rank's exception (type: message at file:line, and the
 * rank), else what torchrun's summary says of the root cause (a signal, an exit code).
 *
 * Each rank runs the script under the Python companion (`-m gpu_workbench.run script.py args`,
 * python/gpu_workbench put first on PYTHONPATH), which runs it unchanged as `__main__` and sends,
 * over its own channel (a Unix socket, see src/common/companionProtocol.ts), the rank's memory
 * after every optimizer step: `job/rankMemory` events.
 *
 * The interpreter: the job's `python`, overridden by `--python`, default `python3`. torchrun
 * and its workers run in their own process group, so cancel (and the end of this process)
 * takes all of them down; after torchrun exits the group is killed too, so no worker outlives
 * the job.
 */
import { spawn } from 'node:child_process';
import { basename, delimiter, dirname, isAbsolute, join, resolve } from 'node:path';
import { rankMemoryOf, type CompanionMessage } from '../../common/companionProtocol';
import { readJsonFile } from '../../common/jsonFile';
import { CompanionMissingError, companionPythonPath, openCompanionChannel, type CompanionChannel } from './companionChannel';
import { CudaErrorParser, cudaKind, rootCauseRank } from './cudaErrors';
import type { JobEvent } from '../job/events';
import { JobFileError, jobProblems, type JobOverrides } from '../job/spec';
import { outputLine } from './outputLines';
import { parseMetricLine, reportMetrics } from './scriptMetrics';
import { recordRun } from '../job/runRecorder';
import { slurmFirstNode, torchrunNodes, type RawTorchrunNodes, type TorchrunNodes } from '../job/torchrunNodes';
import { AgentLog, flag, flagSpelling, nodeFailure, nodeFlags, shellWord, torchVersion, type NodeJob } from './multinode';
import { batchScript, SlurmJob, type ProcessLike, type SlurmJobInfo, type SlurmOptions } from './slurm';
import { moduleShapeProblem, moduleShapeText, oomMemoryProblem, summaryLayers, summaryText } from './modelSummary';
import { exceptionProblem, exceptionText, isScriptError, shortLibraryPath, summaryFailures, type RankFailure, type ScriptException, type ScriptProblem } from './pythonErrors';
import { batchSizeSetting, type TorchrunBatchSize } from './torchrunBatchArg';

export interface TorchrunSpec extends NodeJob {
  readonly file: string;
  readonly name: string;
  /** How the script takes its batch size (Find Max Batch Size), when the job says. */
  readonly batchSize?: TorchrunBatchSize;
}

interface RawTorchrun extends RawTorchrunNodes {
  kind: 'torchrun';
  name?: string;
  script: string;
  args?: string[];
  nprocPerNode?: number;
  devices?: number | number[];
  python?: string;
  cwd?: string;
  env?: Record<string, string>;
  batchSize?: { arg?: string; env?: string };
}

/** Whether a job file asks for torchrun; false for anything unreadable (the TF.js path reports that). */
export function isTorchrunJob(file: string): boolean {
  try {
    const raw = readJsonFile(resolve(file)) as { kind?: unknown };
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
    raw = readJsonFile(path);
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
  const batch = batchSizeSetting(j);
  if (batch.problems.length) throw new JobFileError(path, batch.problems);
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
    ...(batch.setting ? { batchSize: batch.setting } : {}),
    ...nodesOf(j),
  };
}

/** The job's nodes (the schema and jobProblems checked the fields); a fresh c10d rendezvous id per load, that is per run. */
function nodesOf(j: RawTorchrun): { nodes?: TorchrunNodes } {
  const { nodes } = torchrunNodes(j);
  return nodes ? { nodes } : {};
}

/** One node, its own rendezvous store on a free port (the underscore spellings: torch 1.13 knows no others). */
const singleNodeRendezvous = ['--nnodes', '1', '--rdzv_backend', 'c10d', '--rdzv_endpoint', 'localhost:0'];

/** The companion's runner, between torchrun's options and the script: torchrun's own -m runs it as `python -u -m gpu_workbench.run script args`. */
export const companionModule = ['-m', 'gpu_workbench.run'];

/**
 * The command line; `companion: false` runs the script itself (the companion is not where it should be).
 * `torch`: the interpreter's torch version, for the spelling of the flags (see multinode.ts).
 */
export function torchrunCommand(spec: TorchrunSpec, companion = true, torch?: string): string[] {
  const spelling = flagSpelling(torch);
  const launch = spec.nodes ? nodeFlags({ ...spec, nodes: spec.nodes }, spelling) : [...singleNodeRendezvous.map((w) => (w.startsWith('--') && w !== '--nnodes' ? flag(w.slice(2), spelling) : w)), flag('nproc_per_node', spelling), String(spec.nprocPerNode)];
  // --redirects 2 --tee 2: each worker's stderr (tracebacks) comes back prefixed "[default<rank>]:", so a problem
  // names its rank. Also the workaround that makes torchrun 1.13 run on Python 3.11 at all: its default "0"
  // (Std.NONE) is not found by iterating the Std flag enum there, and the launcher dies in to_map().
  // Not --standalone: torch 1.13 pins its rendezvous store to port 29400 there, so a second job on the host
  // (two torchrun trials of an experiment, or the user's own torchrun in a terminal) joins the first one's store
  // (seen here: "RuntimeError: Broken pipe" in the exit barrier when both ended together). A c10d store on port 0
  // takes a free port per job, as --standalone itself does from torch 2.
  return [spec.python, '-m', 'torch.distributed.run', ...launch, '--redirects', '2', '--tee', '2', ...(companion ? companionModule : []), spec.script, ...spec.args];
}

/**
 * The sbatch job of a `"launcher": "slurm"` torchrun job: `--nodes` from nnodes, one task per node,
 * `--gres=gpu:N`, then `srun` of torchrun on every node, the c10d store on the allocation's first
 * node (its NodeAddr as `scontrol show node` has it) on a port of the job's (29500 + the job id
 * modulo 1000 unless the job gives one), the rendezvous id the Slurm job's. `defaults`: the
 * settings gpuWorkbench.slurm.*, under the job's own `slurm` field.
 */
export function slurmTorchrunBatch(spec: TorchrunSpec, torch: string | undefined, defaults: SlurmOptions = {}): { dir: string; name: string; body: string; sbatch: string[]; options: SlurmOptions; argv: string[] } {
  const n = spec.nodes;
  if (!n || n.launcher !== 'slurm') throw new Error('not a slurm job');
  const fields = n.slurm ?? {};
  const { port, outputDir, ...asked } = fields;
  const options: SlurmOptions = { ...defaults, ...asked, gpusPerNode: asked.gpusPerNode ?? defaults.gpusPerNode ?? spec.nprocPerNode };
  const argv = torchrunCommand(spec, false, torch);
  // The words Slurm fills in: the endpoint and the id expand in the batch script; everything else is quoted as it is.
  const word = (w: string) => (w === slurmFirstNode ? `"$GW_RDZV_ENDPOINT"` : w === 'gw-$SLURM_JOB_ID' ? `"gw-$SLURM_JOB_ID"` : shellWord(w));
  const env = { PYTHON_COLORS: '0', LOGLEVEL: 'INFO', ...spec.env, PYTHONUNBUFFERED: '1' };
  const body = [
    'set -u',
    '# The c10d store on the first node of the allocation (its address as Slurm knows it).',
    'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
    'addr=$(scontrol show node -o "$first" | grep -o "NodeAddr=[^ ]*" | cut -d= -f2)',
    `GW_RDZV_ENDPOINT="\${addr:-$first}:${port ?? '$((29500 + SLURM_JOB_ID % 1000))'}"`,
    'echo "gpu_workbench: Slurm job $SLURM_JOB_ID on $SLURM_JOB_NUM_NODES node(s) $SLURM_JOB_NODELIST, rendezvous store on $first ($GW_RDZV_ENDPOINT)"',
    `cd ${shellWord(spec.cwd)}`,
    ...Object.entries(env).map(([k, v]) => `export ${k}=${shellWord(v)}`),
    // One agent per node; a node whose agent fails ends the others (no 300 s wait in torch's exit barrier).
    `srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 ${argv.map(word).join(' ')}`,
  ].join('\n');
  const nodes = n.minNodes === n.maxNodes ? String(n.minNodes) : `${n.minNodes}-${n.maxNodes}`;
  return { dir: outputDir ? resolve(dirname(spec.file), outputDir) : join(dirname(spec.file), '.gpu-workbench', 'slurm'), name: `gw-${spec.name}`, body, sbatch: [`--nodes=${nodes}`, '--ntasks-per-node=1'], options, argv };
}

/** What Copy Launch Commands and `--print-launch` give for a slurm job: the batch script GPU Workbench submits (`sbatch FILE`). */
export function slurmBatchText(spec: TorchrunSpec, torch: string | undefined, defaults: SlurmOptions = {}): string {
  return `# flags spelt for torch ${torch ?? '(version unknown: the underscore spelling every torchrun takes)'}; submit with: sbatch FILE\n${batchScript(slurmTorchrunBatch(spec, torch, defaults)).text}`;
}

type Final = Extract<JobEvent, { type: 'job/done' | 'job/failed' }>;

/** Ends of a Slurm job that are Slurm's doing, not the script's, with what to do about each. */
const slurmEnds: Record<string, string> = {
  TIMEOUT: 'The job reached its time limit: give a longer "time" in the job\'s "slurm" field (or gpuWorkbench.slurm.time), within the partition\'s MaxTime.',
  NODE_FAIL: 'A node of the job failed: sinfo -N shows which are down or drained; run again (with "maxRestarts", torchrun restarts on the nodes left).',
  OUT_OF_MEMORY: 'A node ran out of host memory for the job: ask for more with "sbatchArgs": ["--mem=..."], or use fewer data-loader workers.',
  PREEMPTED: 'A job of higher priority took the nodes: run again, or use a partition or QOS that is not preempted.',
  BOOT_FAIL: 'Slurm could not boot the job\'s nodes: ask the cluster\'s admins, or exclude the nodes with "sbatchArgs": ["--exclude=..."].',
  DEADLINE: 'The job could not end before its deadline.',
};

export interface TorchrunHandle {
  readonly finished: Promise<Final>;
  readonly pids: () => number[];
  /** `"launcher": "slurm"`: the Slurm job id, once submitted. */
  readonly slurmJobId?: () => string | undefined;
  cancel(): void;
}

function summary(p: ScriptProblem): string {
  const where = p.file ? ` at ${p.file}${p.line !== undefined ? `:${p.line}` : ''}` : '';
  return `${p.kind === 'exception' ? exceptionText({ type: p.exceptionType, message: p.message.slice(p.exceptionType.length).replace(/^: /, '') }) : p.message}${where}`;
}

type Failure = Omit<Extract<JobEvent, { type: 'job/failed' }>, 'type'>;

/** Exceptions that end a rank without being an error of its script: its fatal one all the same. */
const interrupt = /(?:^|\.)(?:KeyboardInterrupt|SystemExit)$/;

/** The most distinct exceptions a run keeps (and makes problems of); any more are counted. */
export const maxExceptions = 100;

const signalHints: Record<string, string> = {
  SIGKILL: 'A SIGKILL that the script did not ask for is most often the kernel\'s out-of-memory killer (host memory, not the GPU\'s): see `dmesg` or `journalctl -k`; use fewer data-loader workers or a smaller batch.',
  SIGSEGV: 'A segmentation fault is a crash in native code (PyTorch, CUDA, a C extension): run with one process and `python -X faulthandler` to see where.',
};

/**
 * Why a torchrun job failed, from its output: the first failing rank's exception (a CUDA error
 * with its explanation), else torchrun's own error, a signal it got, or its summary's root cause.
 * Undefined: the output says nothing more than the exit code.
 */
export function failureFromOutput(exceptions: readonly ScriptException[], cudaProblems: readonly ScriptProblem[], all: string, lastLines: ReadonlyMap<number, readonly string[]>): Failure | undefined {
  const ordered = [...exceptions].sort((a, b) => a.seq - b.seq);
  const ranks = summaryFailures(all);
  // Each rank's fatal exception is the last one it printed: an earlier one was caught and printed
  // (traceback.print_exc()) and the script went on. Tracebacks printed and survived ("Exception
  // ignored in", a thread's) and torchrun's own (no frame of the user's) do not count.
  const fatal = new Map<number, ScriptException>();
  for (const e of ordered) if (!e.ignored && (e.userFrame || interrupt.test(e.type))) fatal.set(e.rank ?? -1, e);
  // The earliest of the ranks' fatal exceptions. A rank that lost its peer failed because of another:
  // that one's exception is the cause, wherever it was printed.
  const failing = [...fatal.values()].filter(isScriptError).sort((a, b) => a.seq - b.seq);
  const first = failing.find((e) => !exceptionProblem(e).peerLost) ?? failing[0];
  // Only lost peers: a rank killed by a signal (no exception of its own) is the cause.
  const killed = ranks.find((r) => r.exitCode < 0 && !failing.some((e) => e.rank === r.rank));
  if (first && exceptionProblem(first).peerLost && killed && !cudaProblems.length) {
    const f = rankEnded(killed, lastLines);
    return { ...f, reason: `${f.reason}; rank ${first.rank ?? '?'} then lost its connection to it (${exceptionText(first, 200)})` };
  }
  if (first && !cudaKind(exceptionText(first))) {
    const p = exceptionProblem(first);
    const rank = first.rank ?? rootCauseRank(all);
    return { reason: summary(p), ...(rank !== undefined ? { rank } : {}), ...(p.hints.length ? { hint: p.hints[0] } : {}), problem: p };
  }
  if (cudaProblems.length) {
    const p = (first && cudaProblems.find((c) => c.rank === first.rank)) || cudaProblems[0];
    const rank = p.rank ?? rootCauseRank(all);
    return { reason: summary(p), ...(rank !== undefined ? { rank } : {}), hint: `${p.explanation} ${p.hints[0]}`, problem: p };
  }
  // Nothing of the script's: torchrun's own error (no frame of the user's), a signal it passed on, or its summary.
  // Only output without a rank prefix is torchrun's own: a rank's library-only traceback is not.
  const launcher = ordered.find((e) => e.rank === undefined && !e.ignored && !e.userFrame && !/(?:^|\.)(?:ChildFailedError|SignalException|KeyboardInterrupt|SystemExit)$/.test(e.type));
  if (launcher) {
    const where = launcher.raisedIn ? ` (in ${shortLibraryPath(launcher.raisedIn.file)}:${launcher.raisedIn.line})` : '';
    return { reason: `torchrun itself failed: ${exceptionText(launcher)}${where}` };
  }
  const signalled = ordered.find((e) => /(?:^|\.)SignalException$/.test(e.type));
  const sig = signalled && /got signal: (\d+)/.exec(signalled.message);
  if (sig) {
    const name = signalName(Number(sig[1]));
    return { reason: `torchrun was stopped by ${name ? `${name} (signal ${sig[1]})` : `signal ${sig[1]}`} and ended its workers; the script reported no error` };
  }
  // A rank killed by a signal before torchrun's "root cause" (its guess, by when it noticed), else that one.
  const ended = killed ?? ranks.find((r) => r.rootCause) ?? ranks[0];
  return ended ? rankEnded(ended, lastLines) : undefined;
}

/** A rank that ended without a Python exception: the signal that killed it or its exit code, and its last output. */
function rankEnded(r: RankFailure, lastLines: ReadonlyMap<number, readonly string[]>): Failure {
  const last = (lastLines.get(r.rank) ?? []).join(' | ');
  const output = last ? `; its last output: ${last}` : '';
  if (r.exitCode < 0) {
    const name = r.signal ?? signalName(-r.exitCode);
    const hint = name ? signalHints[name] : undefined;
    return { reason: `rank ${r.rank} was killed by ${name ? `${name} (signal ${-r.exitCode})` : `signal ${-r.exitCode}`} without a Python exception${output}`, rank: r.rank, ...(hint ? { hint } : {}) };
  }
  return { reason: `rank ${r.rank} exited with code ${r.exitCode} without a Python exception${output}`, rank: r.rank };
}

function signalName(n: number): string | undefined {
  const names: Record<number, string> = { 1: 'SIGHUP', 2: 'SIGINT', 6: 'SIGABRT', 9: 'SIGKILL', 11: 'SIGSEGV', 15: 'SIGTERM' };
  return names[n];
}

/** Runs a torchrun job and turns its output into events. */
/** The most lines of the channel that are no message, each told; any more are counted. */
const maxBadLinesTold = 5;

export interface RunTorchrunOptions {
  /** Where the run's record and log go (see runRecord.ts); not recorded without it. */
  readonly runsDir?: string;
  /** What the run was started with (`--devices`, the editor's pick), for its record. */
  readonly overrides?: JobOverrides;
  /** Every message of the companion's channel, as it comes (Find Max Batch Size reads its `stopped` and `oom`). */
  readonly onMessage?: (m: CompanionMessage) => void;
  /** `"launcher": "slurm"` jobs: the settings gpuWorkbench.slurm.* (the job's `slurm` field wins). */
  readonly slurm?: SlurmOptions;
  /** `"launcher": "slurm"` jobs: the Slurm job id, once sbatch gave it. */
  readonly onSlurmJob?: (id: string, outputFile: string) => void;
  /** `"launcher": "slurm"` jobs: each squeue reading of the job (state, nodes), to follow its nodes. */
  readonly onSlurmInfo?: (info: SlurmJobInfo) => void;
}

export function runTorchrun(spec: TorchrunSpec, onJobEvent: (e: JobEvent) => void, options: RunTorchrunOptions = {}): TorchrunHandle {
  const recorder = options.runsDir === undefined ? undefined : recordRun({
    dir: options.runsDir, kind: 'torchrun', file: spec.file, name: spec.name, strategy: 'torchrun', backend: 'PyTorch',
    devices: spec.devices ? spec.devices.map((d) => `gpu:${d}`) : [`${spec.nprocPerNode} process${spec.nprocPerNode === 1 ? '' : 'es'}`],
    ...(options.overrides && Object.keys(options.overrides).length ? { overrides: options.overrides } : {}),
  }, (message) => onJobEvent({ type: 'job/log', level: 'warning', message }));
  const onEvent = recorder ? (e: JobEvent) => { recorder.event(e); onJobEvent(e); } : onJobEvent;
  /** The last value of each metric the script reported or printed (rank 0's, or a line without a rank). */
  const lastMetrics: Record<string, number> = {};
  const onReport = (source: 'report' | 'output', rank: number | undefined, found: { metrics: Readonly<Record<string, number>>; epoch?: number; step?: number }) => {
    Object.assign(lastMetrics, found.metrics);
    onEvent({ type: 'job/report', source, ...(rank !== undefined ? { rank } : {}), metrics: found.metrics, ...(found.epoch !== undefined ? { epoch: found.epoch } : {}), ...(found.step !== undefined ? { step: found.step } : {}) });
  };
  const slurm = spec.nodes?.launcher === 'slurm';
  let companionPath: string | undefined;
  try {
    // On Slurm the ranks run on other machines: the companion's channel (a Unix socket here) does not reach them.
    if (!slurm) companionPath = companionPythonPath();
  } catch (err) {
    if (!(err instanceof CompanionMissingError)) throw err;
    onEvent({ type: 'job/log', level: 'warning', message: `${err.message}; the script runs without it (no per-rank memory)` });
  }
  // One node: the underscore spelling every torch takes, so no probe (it imports torch, seconds, synchronously;
  // and a process the interpreter leaves holding its output would keep the probe waiting).
  const torch = spec.nodes ? torchVersion(spec.python) : undefined;
  const batch = slurm ? slurmTorchrunBatch(spec, torch, options.slurm) : undefined;
  const argv = batch ? batch.argv : torchrunCommand(spec, companionPath !== undefined, torch);
  const started = Date.now();
  let badLines = 0;
  let hooksTold = false;
  let stopTold = false;
  let summaryTold = false;
  const channel: CompanionChannel | undefined = companionPath === undefined ? undefined : openCompanionChannel({
    onMessage: (m) => {
      options.onMessage?.(m);
      switch (m.type) {
        case 'memory':
          onEvent({ type: 'job/rankMemory', ...rankMemoryOf(m) });
          break;
        case 'hooks':
          if (hooksTold) break;
          hooksTold = true;
          onEvent({ type: 'job/log', level: 'info', rank: m.rank, message: `gpu_workbench: torch ${m.torch}, memory of every rank after each optimizer step (${m.stepHook === 'post-hook' ? 'optimizer step post-hook' : 'wrapped Optimizer.step'})` });
          break;
        case 'report': {
          onEvent({ type: 'job/log', level: 'info', rank: m.rank, message: `report: ${JSON.stringify(m.metrics)}` });
          const { epoch, step, ...metrics } = reportMetrics(m.metrics) ?? {};
          if (m.rank === 0 && Object.keys(metrics).length) onReport('report', m.rank, { metrics, ...(epoch !== undefined ? { epoch } : {}), ...(step !== undefined ? { step } : {}) });
          break;
        }
        case 'dropped':
          onEvent({ type: 'job/log', level: 'warning', rank: m.rank, message: `gpu_workbench: rank ${m.rank} dropped ${m.count} messages the extension did not read in time` });
          break;
        case 'stopped':
          if (stopTold) break;
          stopTold = true;
          onEvent({ type: 'job/log', level: 'info', rank: m.rank, message: `gpu_workbench: stopped at the step limit, after optimizer step ${m.step} (GPU_WORKBENCH_MAX_STEPS=${m.maxSteps})` });
          break;
        case 'oom':
          onEvent({ type: 'job/log', level: 'warning', rank: m.rank, message: `gpu_workbench: rank ${m.rank} ran out of ${m.device === 'cuda' ? 'GPU' : 'CPU'} memory${m.batchSize !== undefined ? ` at a batch of ${m.batchSize}` : ''}: ${m.error}: ${m.message}` });
          break;
        case 'modelSummary':
          // Every rank sends its own; the first is the job's (the ranks of a DDP job run the same model).
          if (summaryTold) break;
          summaryTold = true;
          onEvent({ type: 'job/summary', layers: summaryLayers(m), totalParams: m.totalParams, trainableParams: m.trainableParams, estimatedBytesPerDevice: m.memory.totalBytes, memory: m.memory, text: summaryText(m) });
          break;
        case 'moduleError': {
          const problem = moduleShapeProblem(m);
          modelProblems++;
          onEvent({ type: 'job/log', level: 'warning', rank: m.rank, message: moduleShapeText(problem), problem });
          break;
        }
        case 'oomMemory': {
          const problem = oomMemoryProblem(m);
          onEvent({ type: 'job/log', level: 'warning', rank: m.rank, message: `${problem.explanation}\n${problem.memoryLines.join('\n')}`, problem });
          break;
        }
        case 'hello':
          break;
      }
    },
    onBadLine: (error, line) => {
      if (++badLines <= maxBadLinesTold) onEvent({ type: 'job/log', level: 'warning', message: `gpu_workbench: skipped a line of the companion's channel (${error})${line ? `: ${line}` : ''}` });
    },
  });
  // The companion first on PYTHONPATH, the job's (or our environment's) own after it.
  const userPath = spec.env.PYTHONPATH ?? process.env.PYTHONPATH;
  const companionEnv: Record<string, string> = channel && companionPath ? { ...channel.env, PYTHONPATH: userPath ? `${companionPath}${delimiter}${userPath}` : companionPath } : {};
  const slurmJob = batch ? SlurmJob.submit({ ...batch }) : undefined;
  if (slurmJob) {
    slurmJob.on('note', (n: { level: 'info' | 'warning'; message: string }) => onEvent({ type: 'job/log', level: n.level, message: n.message }));
    slurmJob.on('submitted', (id: string, output: string) => options.onSlurmJob?.(id, output));
    slurmJob.on('info', (info: SlurmJobInfo) => options.onSlurmInfo?.(info));
  }
  const child: ProcessLike = slurmJob ?? spawn(argv[0], argv.slice(1), {
    cwd: spec.cwd,
    // No colour codes in tracebacks (Python ≥ 3.13 honours FORCE_COLOR even into a pipe), unless the job asks for them.
    // LOGLEVEL=INFO: a multi-node job's agent tells its node rank, restarts and failures (multinode.ts reads them).
    env: { ...process.env, PYTHON_COLORS: '0', ...(spec.nodes ? { LOGLEVEL: 'INFO' } : {}), ...spec.env, ...(spec.devices ? { CUDA_VISIBLE_DEVICES: spec.devices.join(',') } : {}), PYTHONUNBUFFERED: '1', ...companionEnv },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true, // its own process group: torchrun and every worker it starts
  });
  const killGroup = (signal: NodeJS.Signals) => {
    if (slurmJob) {
      if (signal === 'SIGTERM') slurmJob.cancel(); // scancel: Slurm ends every node's processes
      return;
    }
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
  /** The first `maxExceptions` distinct exceptions, by rank, type, message and place; the rest are counted. */
  const exceptions = new Map<string, ScriptException>();
  /** Each rank's last exception, kept or not: its fatal one is its last. */
  const lastOfRank = new Map<number, ScriptException>();
  let repeats = 0;
  let dropped = 0;
  let exceptionProblems = 0;
  /** Problems from the companion's messages (a module's shape error). */
  let modelProblems = 0;
  /** Each rank's last non-blank lines, for a rank that ended without an exception. */
  const lastLines = new Map<number, string[]>();
  const onException = (ex: ScriptException) => {
    lastOfRank.set(ex.rank ?? -1, ex);
    const key = `${ex.rank ?? ''}\0${ex.type}\0${ex.message}\0${ex.userFrame?.file ?? ''}:${ex.userFrame?.line ?? ''}\0${ex.ignored ? 1 : 0}`;
    if (exceptions.has(key)) {
      repeats++;
      return;
    }
    if (exceptions.size >= maxExceptions) {
      dropped++;
      return;
    }
    exceptions.set(key, ex);
    // A CUDA error is a problem already, with its explanation; Ctrl-C, torchrun's own errors are none of the script's.
    if (!isScriptError(ex) || cudaKind(exceptionText(ex))) return;
    const problem = exceptionProblem(ex);
    exceptionProblems++;
    onEvent({ type: 'job/log', level: 'warning', ...(ex.rank !== undefined ? { rank: ex.rank } : {}), message: summary(problem), problem });
  };
  const agent = new AgentLog();
  let endingEarly = false;
  const onAgentLine = (text: string) => {
    const note = agent.push(text);
    if (note) onEvent({ type: 'job/log', level: 'info', message: note.message, elastic: note.elastic });
    // This node's workers failed for good: its agent would wait up to 300 s in its exit barrier for nodes that may be gone.
    if (spec.nodes && spec.nodes.maxNodes > 1 && agent.failedForGood && !endingEarly) {
      endingEarly = true;
      onEvent({ type: 'job/log', level: 'warning', message: 'torchrun: this node\'s workers failed with no restart left; its agent is ended now instead of waiting up to 300 s for the other nodes' });
      killGroup('SIGTERM');
      setTimeout(() => killGroup('SIGKILL'), 3000).unref();
    }
  };
  let tail: string[] = [];
  let all = '';
  let cancelled = false;
  let spawnError: NodeJS.ErrnoException | undefined;
  onEvent({ type: 'job/log', level: 'info', message: `torchrun: ${argv.join(' ')}` });
  if (batch) onEvent({ type: 'job/log', level: 'info', message: `Slurm: sbatch of ${batch.sbatch.join(' ')}${batch.options.gpusPerNode ? ` --gres=gpu:${batch.options.gpusPerNode}` : ''}${batch.options.partition ? ` --partition=${batch.options.partition}` : ''}; srun starts torchrun on every node, the rendezvous store on the first; the ranks run without the companion (no per-rank memory)` });

  const lineReader = () => {
    let partial = '';
    const flush = (line: string) => {
      all = (all + line + '\n').slice(-20_000);
      tail.push(line);
      if (tail.length > 8) tail = tail.slice(-8);
      const { rank, text } = outputLine(line);
      if (rank !== undefined && text.trim()) lastLines.set(rank, [...(lastLines.get(rank) ?? []), text.trim()].slice(-2));
      onEvent({ type: 'job/log', level: 'info', ...(rank !== undefined ? { rank } : {}), message: line });
      // Rank 0's metrics (or those of a line without a rank: stdout, which torchrun passes through as printed).
      if (rank === undefined || rank === 0) {
        const found = parseMetricLine(text);
        if (found) onReport(found.exact ? 'report' : 'output', rank, found);
      }
      if (rank === undefined && spec.nodes) onAgentLine(text);
      const found = parser.pushLine(line);
      for (const problem of found.problems) onEvent({ type: 'job/log', level: 'warning', ...(problem.rank !== undefined ? { rank: problem.rank } : {}), message: `${summary(problem)}: ${problem.explanation}`, problem });
      for (const ex of found.exceptions) onException(ex);
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
    if (slurmJob) return; // Slurm ended every process; its output file was read to the end
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
      // Every rank's last messages are read before the job ends (their processes are gone: their connections end).
      void (channel ? channel.close() : Promise.resolve()).then(() => finish(code, signal));
    });
    const finish = (code: number | null, signal: NodeJS.Signals | null) => {
      out.end();
      err.end();
      if (badLines > maxBadLinesTold) onEvent({ type: 'job/log', level: 'warning', message: `gpu_workbench: skipped ${badLines - maxBadLinesTold} more lines of the companion's channel` });
      for (const ex of parser.tracebacks.end()) onException(ex);
      const agentEnd = agent.end();
      if (agentEnd) onEvent({ type: 'job/log', level: 'info', message: agentEnd.message, elastic: agentEnd.elastic });
      if (repeats || dropped) onEvent({ type: 'job/log', level: 'info', message: `torchrun: the output had ${repeats + dropped} more exception tracebacks: ${repeats} repeated one already listed${dropped ? `, ${dropped} came after the first ${maxExceptions} distinct ones and are not problems` : ''}` });
      killGroup('SIGKILL'); // nothing the script started outlives the job
      process.off('exit', onProcessExit);
      let event: Final;
      const problems = parser.problems();
      const kept = new Set(exceptions.values());
      const failure = failureFromOutput([...kept, ...[...lastOfRank.values()].filter((e) => !kept.has(e))], problems, all, lastLines);
      const ofNodes = spec.nodes && code !== 0 ? nodeFailure({ ...spec, nodes: spec.nodes }, agent, [...kept, ...[...lastOfRank.values()].filter((e) => !kept.has(e))]) : undefined;
      if (spawnError && slurmJob) {
        event = { type: 'job/failed', reason: spawnError.message, hint: 'Slurm said this (sbatch, squeue or scontrol): check the job\'s "slurm" field and the settings gpuWorkbench.slurm.* (partition, account, time, GPUs).' };
      } else if (spawnError) {
        event = { type: 'job/failed', reason: `cannot run ${spec.python}: ${spawnError.code === 'ENOENT' ? 'no such program' : spawnError.message}`, hint: 'Set the interpreter that has PyTorch: the job\'s "python" field or --python (e.g. /usr/bin/python3 for Debian\'s python3-torch).' };
      } else if (cancelled) {
        event = { type: 'job/failed', reason: 'cancelled', cancelled: true };
      } else if (code === 0) {
        const durationMs = Date.now() - started;
        const trainLoss = lastMetrics.loss ?? lastMetrics.train_loss ?? NaN;
        const testLoss = lastMetrics.test_loss ?? lastMetrics.val_loss ?? NaN;
        const testAccuracy = lastMetrics.test_acc ?? lastMetrics.val_acc ?? NaN;
        event = { type: 'job/done', metrics: { testAccuracy, testLoss, trainLoss, epochs: 0, steps: 0, samplesPerSecond: NaN, durationMs, torchrun: { command: argv, exitCode: 0, problems: problems.length + exceptionProblems + modelProblems }, ...(Object.keys(lastMetrics).length ? { reported: { ...lastMetrics } } : {}) } };
      } else if (/No module named '?torch(?![\w.])/.test(all)) {
        event = { type: 'job/failed', reason: `${spec.python} has no torch module (No module named torch)`, hint: 'Pick the interpreter that has PyTorch with the job\'s "python" field or --python: on Debian, python3-torch belongs to /usr/bin/python3.' };
      } else if (slurmJob?.info && slurmEnds[slurmJob.info.state]) {
        // Slurm ended it (time limit, node failure, memory, preemption): that, in Slurm's words, is the cause.
        const info = slurmJob.info;
        event = { type: 'job/failed', reason: `Slurm job ${info.id} ended ${info.state}${info.reason ? ` (${info.reason})` : ''}${info.nodes ? ` on ${info.nodes}` : ''}`, hint: slurmEnds[info.state] };
      } else if (ofNodes) {
        event = { type: 'job/failed', ...ofNodes };
      } else if (failure) {
        event = { type: 'job/failed', ...failure };
      } else {
        const rank = rootCauseRank(all);
        const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
        const last = tail.filter((l) => l.trim() && !/^[=-]{10,}$/.test(l.trim())).slice(-3).join(' | ');
        event = { type: 'job/failed', reason: `torchrun ${how}${last ? `: ${last}` : ''}`, ...(rank !== undefined ? { rank } : {}) };
      }
      onEvent(event);
      resolveFinished(event);
    };
  });
  return {
    finished,
    pids: () => (child.pid !== undefined ? [child.pid] : []),
    ...(slurmJob ? { slurmJobId: () => slurmJob.jobId } : {}),
    cancel: () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      cancelled = true;
      killGroup('SIGTERM');
      setTimeout(() => killGroup('SIGKILL'), 3000).unref();
    },
  };
}

/**
 * The words of a torchrun job run as a VS Code task, kept free of `vscode` so that they are
 * unit-tested in Node: the problems of its output (CUDA errors, any exception of the script) as
 * diagnostics (file, line, message with the explanation and what to try), the task terminal's
 * lines, and the message that ends the job.
 * `torchrunTask.ts` turns them into VS Code calls.
 */
import { basename, isAbsolute, resolve } from 'node:path';
import { stripBom } from '../../common/jsonFile';
import type { CudaProblemKind } from '../../training/launchers/cudaErrors';
import type { JobEvent } from '../../training/job/events';
import { moduleLabel } from '../../training/launchers/modelSummary';
import { chainWords, exceptionText, type ScriptProblem } from '../../training/launchers/pythonErrors';

type FinalEvent = Extract<JobEvent, { type: 'job/done' | 'job/failed' }>;

/** The diagnostics' source in the Problems panel. */
export const diagnosticSource = 'GPU Workbench';

/** A problem as the Problems panel shows it; `torchrunTask.ts` makes a `vscode.Diagnostic` of it. */
export interface ProblemDiagnostic {
  /** Absolute path of the file the traceback names (the user's own frame), else the script. */
  readonly file: string;
  /** 0-based, as VS Code counts. */
  readonly line: number;
  readonly code: ScriptProblem['kind'];
  /** First line: the error as printed and the ranks; then the explanation and what to try. */
  readonly message: string;
  /** The ranks that raised it here, ascending; empty when the output carried no rank. */
  readonly ranks: readonly number[];
  /** A warning: the rank lost its connection to another that failed first; else an error. */
  readonly severity: 'error' | 'warning';
  /** Where the exceptions it was chained to were raised (absolute file, 0-based line). */
  readonly related: readonly { readonly file: string; readonly line: number; readonly message: string }[];
}

const kindTitles: Record<CudaProblemKind, string> = {
  'cuda-oom': 'CUDA out of memory',
  'cudnn-not-initialized': 'cuDNN not initialized',
  'device-side-assert': 'device-side assert',
  nccl: 'NCCL error',
};

/** A problem's title: the CUDA error's kind, the exception's type, the module of a shape error. */
function title(p: ScriptProblem): string {
  switch (p.kind) {
    case 'exception': return p.exceptionType;
    case 'module-shape': return `Shape error in ${moduleLabel(p.module, p.className)}`;
    case 'oom-memory': return 'Out of memory';
    default: return kindTitles[p.kind];
  }
}

/** The message without the exception's type in front (the title says it). */
function problemText(p: ScriptProblem): string {
  switch (p.kind) {
    case 'exception': return p.message.slice(p.exceptionType.length).replace(/^: ?/, '');
    case 'module-shape': return `expected ${p.expected}, got ${p.got}${p.previous ? `; the module before it produced ${p.previous.outputShape ? `[${p.previous.outputShape.join(', ')}]` : 'no tensor'}` : ''}`;
    default: return errorText(p.message);
  }
}

const outOfMemory = /out of memory|DefaultCPUAllocator: can't allocate memory|not enough memory/i;

/** An out-of-memory problem of the output that the companion's memory of the same rank belongs with. */
function isOom(p: ScriptProblem): boolean {
  return p.kind === 'cuda-oom' || (p.kind === 'exception' && outOfMemory.test(p.message));
}

/** The Python exception's class in front of the message ("torch.cuda.OutOfMemoryError: …") says nothing the kind does not. */
function errorText(message: string): string {
  return message.replace(/^(?:[A-Za-z_][\w.]*(?:Error|Exception)):\s*/, '');
}

function rankWords(ranks: readonly number[]): string {
  if (ranks.length === 0) return '';
  return ranks.length === 1 ? ` (rank ${ranks[0]})` : ` (ranks ${ranks.join(', ')})`;
}

/**
 * One diagnostic per (file, line, kind) (and message, for an exception): the same error raised by
 * several ranks at the same line is one entry that names them all. A problem without a traceback
 * location goes on the first line of `script`, saying so. Relative traceback paths are read from
 * the job's `cwd`.
 */
export function problemDiagnostics(problems: readonly ScriptProblem[], script: string, cwd: string): ProblemDiagnostic[] {
  const groups = new Map<string, { first: ScriptProblem; file: string; line: number; located: boolean; ranks: Set<number> }>();
  const abs = (f: string) => (isAbsolute(f) ? f : resolve(cwd, f));
  // The companion's memory of an out-of-memory error goes with that error's problem of the same rank (either
  // may come first); on its own only when the output had none.
  const memories = problems.filter((p): p is Extract<ScriptProblem, { kind: 'oom-memory' }> => p.kind === 'oom-memory');
  const withMemory = (p: ScriptProblem) => memories.find((m) => m.rank === p.rank) ?? (memories.length === 1 ? memories[0] : undefined);
  const merged = new Set<ScriptProblem>();
  for (const p of problems) if (isOom(p)) { const m = withMemory(p); if (m) merged.add(m); }
  for (const p of problems) {
    if (merged.has(p)) continue;
    const located = p.file !== undefined && p.line !== undefined;
    const file = p.file !== undefined && located ? abs(p.file) : script;
    const line = p.line !== undefined && located ? Math.max(0, p.line - 1) : 0;
    const key = `${file}\0${line}\0${p.kind}${p.kind === 'exception' || p.kind === 'module-shape' ? `\0${p.message}` : ''}`;
    let g = groups.get(key);
    if (!g) {
      g = { first: p, file, line, located, ranks: new Set() };
      groups.set(key, g);
    }
    if (p.rank !== undefined) g.ranks.add(p.rank);
  }
  return [...groups.values()].map((g) => {
    const ranks = [...g.ranks].sort((a, b) => a - b);
    const text = problemText(g.first);
    const lines = [
      `${title(g.first)}${rankWords(ranks)}${text ? `: ${text}` : ''}`,
      ...(g.located ? [] : ['(The output had no traceback line for it: shown on the script\'s first line.)']),
      ...(g.first.explanation ? [g.first.explanation] : []),
      ...(g.first.kind === 'oom-memory' ? g.first.memoryLines : []),
      ...g.first.hints.map((h) => `• ${h}`),
    ];
    const memory = isOom(g.first) ? withMemory(g.first) : undefined;
    if (memory) lines.push(memory.explanation, ...memory.memoryLines);
    const chain = g.first.kind === 'exception' ? g.first.chain ?? [] : [];
    const related = chain.flatMap((c) => (c.file !== undefined && c.line !== undefined ? [{ file: abs(c.file), line: Math.max(0, c.line - 1), message: `${chainWords[c.relation]} ${exceptionText(c, 300)}` }] : []));
    if (g.first.kind === 'module-shape') {
      const p = g.first;
      if (p.raisedAt) related.push({ file: abs(p.raisedAt.file), line: Math.max(0, p.raisedAt.line - 1), message: `Raised here: ${exceptionText({ type: p.message.split(':')[0], message: p.message.slice(p.message.indexOf(':') + 1).trim() }, 300)}` });
      if (p.previous?.file !== undefined && p.previous.line !== undefined) related.push({ file: abs(p.previous.file), line: Math.max(0, p.previous.line - 1), message: `The module before it, ${moduleLabel(p.previous.module, p.previous.className)}, made here` });
    }
    return { file: g.file, line: g.line, code: g.first.kind, message: lines.join('\n'), ranks, severity: g.first.kind === 'exception' && g.first.peerLost ? 'warning' : 'error', related };
  });
}

/** `ESC[…m` colours for the task terminal. */
const dim = (s: string) => `\x1b[2m${s}\x1b[0m`;
const red = (s: string) => `\x1b[31m${s}\x1b[0m`;
const yellow = (s: string) => `\x1b[33m${s}\x1b[0m`;
const green = (s: string) => `\x1b[32m${s}\x1b[0m`;

const secs = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

/**
 * What the task terminal prints for an event: the script's own lines as they come, the
 * launcher's command line dimmed, a CUDA problem as one highlighted line pointing at the Problems
 * panel, and the end. Undefined: nothing to print.
 */
export function terminalText(e: JobEvent): string | undefined {
  switch (e.type) {
    case 'job/log':
      if (e.problem) {
        const p = e.problem;
        const where = p.file ? ` at ${p.file}${p.line !== undefined ? `:${p.line}` : ''}` : '';
        const more = p.kind === 'exception' ? 'it is in the Problems panel' : 'the explanation and what to try are in the Problems panel';
        return yellow(`GPU Workbench: ${title(p)}${p.rank !== undefined ? ` on rank ${p.rank}` : ''}${where}; ${more}.`);
      }
      return e.message.startsWith('torchrun: ') && e.rank === undefined && e.level === 'info' && /-m torch\.distributed\.run /.test(e.message) ? dim(e.message) : e.message;
    case 'job/summary':
      return e.text;
    case 'job/done':
      return green(`torchrun exited 0 after ${secs(e.metrics.durationMs)}.`);
    case 'job/failed':
      if (e.cancelled) return yellow('Stopped: torchrun and its workers were ended.');
      return red(`Failed${e.rank !== undefined ? ` on rank ${e.rank}` : ''}: ${e.reason}`) + (e.hint ? `\n${e.hint}` : '');
    default:
      return undefined;
  }
}

/** The exit code the task ends with: 0 done, 130 stopped, 1 failed. */
export function taskExitCode(e: FinalEvent): number {
  if (e.type === 'job/done') return 0;
  return e.cancelled ? 130 : 1;
}

/**
 * The notification at the end of a torchrun job. A failure whose cause is a problem (the engine's
 * choice, carried on `job/failed`) names it briefly (a CUDA error's kind and size, an exception's
 * type and message, file:line); the long text is in the Problems panel. Any other cause (a rank
 * killed by a signal, torchrun's own error) is the engine's reason and hint, never a problem
 * chosen again here.
 */
export function torchrunEndMessage(job: string, e: FinalEvent, problems: readonly ScriptProblem[]): string {
  // The companion's memory of an out-of-memory error is shown with that error: no problem of its own.
  const n = problems.filter((p) => p.kind !== 'oom-memory').length;
  const inPanel = n ? ` ${n} problem${n === 1 ? '' : 's'} in the Problems panel.` : '';
  if (e.type === 'job/done') return `Training ${job} (torchrun) finished after ${secs(e.metrics.durationMs)}.${inPanel}`;
  if (e.cancelled) return `Training ${job} (torchrun) was stopped.`;
  const onRank = e.rank !== undefined ? ` on rank ${e.rank}` : '';
  const p = e.problem;
  if (p) {
    const where = p.file ? ` at ${basename(p.file)}${p.line !== undefined ? `:${p.line}` : ''}` : '';
    if (p.kind === 'exception') {
      const text = exceptionText({ type: p.exceptionType, message: problemText(p) }, 300);
      return `Training ${job} (torchrun) failed${onRank}: ${text}${where}.${inPanel}`;
    }
    const size = p.kind === 'cuda-oom' && p.tryingToAllocate ? ` (tried to allocate ${p.tryingToAllocate})` : '';
    return `Training ${job} (torchrun) failed${onRank}: ${title(p)}${size}${where}.${inPanel}`;
  }
  const reason = errorText(e.reason.trim().replace(/\s*\n\s*/g, '; '));
  const short = reason.length > 300 ? `${reason.slice(0, 297)}…` : reason;
  return `Training ${job} (torchrun) failed${onRank}: ${short}${/[.!?…]$/.test(short) ? '' : '.'}${e.hint ? ` ${e.hint}` : ''}${inPanel}`;
}

/** The task's name, as its terminal tab and the task list show it. */
export function torchrunTaskName(job: string, nproc: number): string {
  return `torchrun ${job} (${nproc} process${nproc === 1 ? '' : 'es'})`;
}

/** Where the editor's interpreter for a torchrun job came from. */
export type InterpreterSource = 'job' | 'setting' | 'python-extension' | 'default';

export interface InterpreterChoice {
  readonly python: string;
  readonly source: InterpreterSource;
}

/** The job file's own `"python"`, when it names one (undefined for an unreadable file: loading it reports that). */
export function jobPythonField(text: string): string | undefined {
  try {
    const raw = JSON.parse(stripBom(text)) as { python?: unknown } | null;
    return typeof raw?.python === 'string' && raw.python.trim() ? raw.python.trim() : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The interpreter for a torchrun job started in the editor: the job's own `"python"`, else the
 * setting `gpuWorkbench.training.python`, else the Python extension's selected interpreter (asked
 * only when needed: that may activate the extension), else `python3`.
 */
export async function chooseInterpreter(from: { job?: string; setting?: string; extension: () => Promise<string | undefined> }): Promise<InterpreterChoice> {
  const job = from.job?.trim();
  if (job) return { python: job, source: 'job' };
  const setting = from.setting?.trim();
  if (setting) return { python: setting, source: 'setting' };
  const extension = (await from.extension())?.trim();
  if (extension) return { python: extension, source: 'python-extension' };
  return { python: 'python3', source: 'default' };
}

const sourceWords: Record<InterpreterSource, string> = {
  job: 'from the job\'s "python"',
  setting: 'from the setting gpuWorkbench.training.python',
  'python-extension': 'from the Python extension\'s selected interpreter',
  default: 'the default: the job has no "python", gpuWorkbench.training.python is empty and no Python extension interpreter is selected',
};

const sourceFixes: Record<InterpreterSource, string> = {
  job: 'set "python" in the job to an interpreter that has PyTorch',
  setting: 'set "python" in the job, or change gpuWorkbench.training.python, to an interpreter that has PyTorch',
  'python-extension': 'set "python" in the job or gpuWorkbench.training.python to an interpreter that has PyTorch, or select another one (Python: Select Interpreter)',
  default: 'set "python" in the job or gpuWorkbench.training.python to an interpreter that has PyTorch',
};

/** The interpreter and where it came from, for the log: `/usr/bin/python3 (from the job's "python")`. */
export function interpreterText(choice: InterpreterChoice): string {
  return `${choice.python} (${sourceWords[choice.source]})`;
}

/**
 * A failure because the interpreter cannot run or has no torch, with a hint that names where the
 * interpreter came from and what changes it in the editor (the engine's hint speaks of the CLI's
 * --python, which the editor has not). Any other event comes back as it was.
 */
export function withInterpreterHint(e: FinalEvent, choice: InterpreterChoice): FinalEvent {
  if (e.type !== 'job/failed' || e.cancelled) return e;
  const what = e.reason.startsWith(`cannot run ${choice.python}:`) ? 'cannot be run' : e.reason.startsWith(`${choice.python} has no torch module`) ? 'has no torch' : undefined;
  if (!what) return e;
  return { ...e, hint: `The interpreter ${interpreterText(choice)} ${what}: ${sourceFixes[choice.source]} (on Debian, python3-torch belongs to /usr/bin/python3).` };
}

export const untrustedTorchrunMessage = 'GPU Workbench cannot start training in an untrusted workspace: a torchrun job runs the workspace\'s Python script. Trust the workspace first (Workspaces: Manage Workspace Trust).';

/**
 * Why a torchrun task may not start now, or undefined: an untrusted workspace, or another job
 * running (a torchrun task, or a job "Start Training…" runs in the training host: two jobs would
 * share the GPUs and the panel).
 */
export function torchrunRefusal(state: { trusted: boolean; running?: string }): string | undefined {
  if (!state.trusted) return untrustedTorchrunMessage;
  if (state.running !== undefined) return `Training ${state.running} is still running: stop it first (GPU Workbench: Stop Training), then run this task again.`;
  return undefined;
}

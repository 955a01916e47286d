/**
 * What `gpu-workbench doctor` (and "GPU Workbench: Check GPU Setup") reports: one check per thing
 * a training run depends on, each with its own evidence (the command that was run and what it
 * printed), so that a user can see why a GPU is or is not used without reading our code.
 * Plain JSON: the CLI prints it with `--json`, the extension reads it from the CLI's stdout.
 */

/**
 * `ok`: works. `warn`: works, but not as a user would want (only a software adapter, no CUDA in
 * torch). `fail`: broken where it should work (a GPU that does not train, a tool that hangs).
 * `info`: absent and not expected (no NVIDIA driver on a CPU machine). `skip`: not checked, and why.
 */
export type CheckStatus = 'ok' | 'warn' | 'fail' | 'info' | 'skip';

export interface Check {
  /** Stable id: `nvidia-smi`, `webgpu-adapters`, `backend:webgpu`, `python:/usr/bin/python3`, `train:gpu0`, `train:cpu`. */
  readonly id: string;
  readonly title: string;
  readonly status: CheckStatus;
  /** One line for people: what was found. */
  readonly summary: string;
  /** What was run and what it answered, verbatim where short. */
  readonly evidence: readonly string[];
  /** What to do about a `fail` or `warn`. */
  readonly fix?: string;
  /** Machine-readable facts of the check (GPUs, adapters, samples/s). */
  readonly data?: Readonly<Record<string, unknown>>;
}

export interface DoctorReport {
  readonly version: 1;
  readonly takenAt: string;
  readonly host: { readonly platform: string; readonly arch: string; readonly node: string; readonly cpus: number };
  readonly checks: readonly Check[];
  /** One line: how many GPUs train and on what, or why none does. */
  readonly verdict: string;
  /** 0 when every GPU found trains on a GPU backend (or no GPU is there and training on the CPU works), else 1. */
  readonly exitCode: 0 | 1;
}

/** The exit code the checks call for: any `fail` is 1. */
export function exitCodeOf(checks: readonly Check[]): 0 | 1 {
  return checks.some((c) => c.status === 'fail') ? 1 : 0;
}

const marks: Record<CheckStatus, string> = { ok: 'ok  ', warn: 'WARN', fail: 'FAIL', info: 'info', skip: 'skip' };

/** One check as text: status, title and summary, then its evidence and fix indented. */
export function renderCheck(c: Check): string {
  const lines = [`[${marks[c.status]}] ${c.title}: ${c.summary}`];
  for (const e of c.evidence) for (const l of e.split('\n')) lines.push(`         ${l}`);
  if (c.fix) lines.push(`         fix: ${c.fix}`);
  return lines.join('\n');
}

export function renderHeader(r: Pick<DoctorReport, 'host' | 'takenAt'>): string {
  return `GPU Workbench doctor — ${r.host.platform}-${r.host.arch}, Node ${r.host.node}, ${r.host.cpus} CPU cores, ${r.takenAt}`;
}

/** The report as text for a terminal or an output channel: one block per check, then the verdict. */
export function renderReport(r: DoctorReport): string {
  return [renderHeader(r), '', ...r.checks.map(renderCheck), '', r.verdict].join('\n');
}

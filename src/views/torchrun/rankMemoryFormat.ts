/**
 * Per-rank memory of a torchrun job run as a task, kept free of `vscode` so that it is unit-tested
 * in Node: the task terminal's memory line (the CLI's, throttled the same way), the job's workers
 * as the GPU panel matches them to processes, and the growth hint with the linter's finding in
 * the running script that explains it. `torchrunTask.ts` turns them into VS Code calls.
 */
import { formatEvent, unshownMemoryLine, type FormatState } from '../../cli/train';
import type { PanelFinding, PanelGrowthHint, PanelJobWorker } from '../../common/protocol';
import { growthMessage, type PanelRank, type RankMemoryTracker } from '../../common/rankMemory';
import type { JobEvent } from '../../training/job/events';

/**
 * The memory line the task terminal shows for an event, as `gpu-workbench train` prints it: for a
 * `job/rankMemory` once every rank has reported, then at most every 10 s; before the job's final
 * event the latest one, when it changed since. Undefined for every other event and while it keeps quiet.
 */
export function terminalMemoryText(e: JobEvent, state: FormatState): string | undefined {
  if (e.type === 'job/rankMemory') return formatEvent(e, state) || undefined;
  if (e.type === 'job/done' || e.type === 'job/failed') {
    const line = unshownMemoryLine(state);
    if (state.memory) state.memory.changed = false;
    return line || undefined;
  }
  return undefined;
}

/**
 * The job's workers for the GPU panel once ranks have reported: each rank with its process id
 * (how the panel finds it among nvidia-smi's processes) and its device. A CUDA rank's GPU is
 * CUDA_VISIBLE_DEVICES[N] of its `cuda:N` (N itself when unset); a CPU rank has none. Before any
 * rank reports, the workers planned from the job's devices stay as they are.
 */
export function rankWorkers(planned: readonly PanelJobWorker[], ranks: readonly PanelRank[], visible: readonly number[] | undefined): readonly PanelJobWorker[] {
  if (ranks.length === 0) return planned;
  const byRank = new Map<number, PanelJobWorker>();
  for (const r of ranks) {
    if (byRank.has(r.rank)) continue;
    const n = Number(/^cuda:(\d+)$/.exec(r.device)?.[1] ?? NaN);
    const gpuIndex = Number.isNaN(n) ? null : visible ? visible[n] ?? null : n;
    const plan = planned.find((w) => w.rank === r.rank);
    byRank.set(r.rank, {
      rank: r.rank,
      gpuIndex,
      device: gpuIndex == null ? 'cpu' : `gpu:${gpuIndex}${visible ? ` (CUDA_VISIBLE_DEVICES=${visible.join(',')})` : ''}`,
      ...(r.pid != null ? { pid: r.pid } : plan?.pid !== undefined ? { pid: plan.pid } : {}),
    });
  }
  for (const w of planned) if (!byRank.has(w.rank)) byRank.set(w.rank, w);
  return [...byRank.values()].sort((a, b) => a.rank - b.rank);
}

/** The OOM-hints rules whose finding explains memory that grows every step, most telling first. */
export const growthRules: readonly string[] = ['accumulated-loss', 'tensors-kept-for-logging', 'carried-hidden-state', 'missing-no-grad'];

/** A diagnostic as `vscode.languages.getDiagnostics` gives it, reduced to what is picked by. */
export interface DiagnosticLike {
  readonly source?: string;
  readonly code?: string | number | { readonly value: string | number };
  /** 0-based start line. */
  readonly line: number;
  readonly message: string;
}

/** The OOM-hints language server's diagnostics carry this source. */
export const lintSource = 'GPU Workbench';

/** The language server's finding in `file` that best explains growing memory, or undefined when it has none. */
export function pickGrowthFinding(file: string, diagnostics: readonly DiagnosticLike[]): PanelFinding | undefined {
  let best: PanelFinding | undefined;
  let bestRank = Infinity;
  for (const d of diagnostics) {
    if (d.source !== lintSource) continue;
    const code = String(typeof d.code === 'object' ? d.code.value : d.code ?? '');
    const rank = growthRules.indexOf(code);
    if (rank < 0 || rank > bestRank || (rank === bestRank && best && d.line >= best.line)) continue;
    best = { file, line: d.line, code, message: d.message.split('\n')[0] };
    bestRank = rank;
  }
  return best;
}

/** The growth hint for the panel (null while no rank grows), with the finding when there is one, else the script to open. */
export function growthHint(growth: ReturnType<RankMemoryTracker['growth']>, finding: PanelFinding | undefined, script: string): PanelGrowthHint | null {
  if (growth.length === 0) return null;
  const ranks = [...new Set(growth.map((g) => g.rank))];
  return { message: growthMessage(growth), ranks, ...(finding ? { finding } : { script }) };
}

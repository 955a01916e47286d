/**
 * Per-rank memory of a torchrun job run as a task, kept free of `vscode` so that it is unit-tested
 * in Node: the task terminal's memory line (the CLI's, throttled the same way), the job's workers
 * as the GPU panel matches them to processes, and the growth hint with the linter's finding in
 * the running script that explains it. `torchrunTask.ts` turns them into VS Code calls.
 */
import { formatEvent, unshownMemoryLine, type FormatState } from '../../cli/train';
import type { PanelJobWorker } from '../../common/protocol';
import type { PanelRank } from '../../common/rankMemory';
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

export { type DiagnosticLike, growthHint, growthRules, lintSource, pickGrowthFinding } from '../../common/growthHint';

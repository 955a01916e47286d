/**
 * Which OOM hint explains memory that grows every optimizer step: the growth the per-rank tracker
 * saw, and the language server's finding in the script that best accounts for it. Pure, shared by
 * the GPU panel (rankMemoryView) and the CLI's torchrun jobs (cli/growthWatch).
 */
import type { PanelFinding, PanelGrowthHint } from './protocol';
import { growthMessage, type RankMemoryTracker } from './rankMemory';

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

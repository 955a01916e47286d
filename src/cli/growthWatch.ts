/**
 * The GPU panel's growth hint for the CLI: a torchrun job's per-rank memory (the companion's
 * `job/rankMemory` events) watched as the panel watches it, and once a rank's memory grows every
 * optimizer step, one warning that says so and names the OOM hint in the script that best explains
 * it (the script linted as it is then, as the language server would have it in the editor).
 */
import { relative } from 'node:path';
import { growthHint, lintSource, pickGrowthFinding, type DiagnosticLike } from '../common/growthHint';
import { RankMemoryTracker } from '../common/rankMemory';
import type { JobEvent } from '../training/job/events';

/** Lints the script: its findings as diagnostics (0-based lines), or throws when it cannot be read. */
export type ScriptLinter = (path: string) => DiagnosticLike[];

export class GrowthWatch {
  private readonly tracker = new RankMemoryTracker();
  private told = false;

  constructor(private readonly script: string, private readonly lint: ScriptLinter, private readonly cwd = process.cwd()) {}

  /** Feeds one event; returns the warning the first time memory is seen growing, else undefined. */
  observe(e: JobEvent): Extract<JobEvent, { type: 'job/log' }> | undefined {
    if (this.told || e.type !== 'job/rankMemory') return undefined;
    this.tracker.add(e);
    const growth = this.tracker.growth();
    if (growth.length === 0) return undefined;
    this.told = true;
    let diagnostics: DiagnosticLike[] = [];
    let unread: string | undefined;
    try {
      diagnostics = this.lint(this.script);
    } catch (err) {
      unread = err instanceof Error ? err.message : String(err);
    }
    const hint = growthHint(growth, pickGrowthFinding(this.script, diagnostics), this.script);
    if (!hint) return undefined;
    const where = relative(this.cwd, this.script) || this.script;
    const cause = hint.finding
      ? `likely cause, an OOM hint in the script: ${where}:${hint.finding.line + 1}: ${hint.finding.code}: ${hint.finding.message}`
      : unread !== undefined
        ? `the script could not be linted for a cause (${unread})`
        : `the OOM hints find no cause in ${where}: look for tensors kept across steps (lists, sums, attributes of self)`;
    return { type: 'job/log', level: 'warning', message: `${hint.message}\n  ${cause}` };
  }
}

/** A ScriptLinter over a linter of the language server's rules. */
export function scriptLinter(linter: { lintFile(path: string, text: string): { ruleId: string; range: { start: { line: number } }; message: string }[] }, read: (path: string) => string): ScriptLinter {
  return (path) => linter.lintFile(path, read(path)).map((f) => ({ source: lintSource, code: { value: f.ruleId }, line: f.range.start.line, message: f.message }));
}

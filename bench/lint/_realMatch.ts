/**
 * Matching our findings on the real-code corpus (docs/lint-corpus.md) to its hand-made labels,
 * and the numbers per rule. Used by bench/lint/real.ts and its unit tests (the leading `_`
 * keeps scripts/bench.mjs from running this file as a benchmark).
 *
 * A finding matches a label of the same file and rule when the finding's start line (1-based)
 * lies in the label's line..endLine. Counted per label: a hazard label matched by at least one
 * finding is found (a true positive), one matched by none a false negative; a safe label matched
 * by a finding is a false positive. An ambiguous label (a real unguarded forward of a toy model, code
 * that only runs by accident: experts could argue either way) is neither: a finding on it counts in no
 * number but its own column, and it is listed. A finding matching no label is "unlabelled": not
 * counted in precision, but listed, since it means the file's labelling is incomplete.
 * Precision and recall count only rules at warning level and above (the default severity of
 * the rule is not 'info' or 'hint').
 */
import { join } from 'node:path';
import type { Label, Project } from '../../scripts/lint-corpus/corpus.cjs';
import type { Severity } from '../../src/lint/types';
import { repoRoot } from '../../test/paths';

/** scripts/lint-corpus/corpus.cjs, loaded by path (it is not compiled into out/). */
// eslint-disable-next-line @typescript-eslint/no-require-imports
export const corpusLib = require(join(repoRoot, 'scripts', 'lint-corpus', 'corpus.cjs')) as typeof import('../../scripts/lint-corpus/corpus.cjs');
export type { Label, Project };

/** One finding of ours, reduced to what matching needs; `line` is 1-based. */
export interface SeenFinding {
  readonly path: string;
  readonly line: number;
  readonly rule: string;
  readonly severity: Severity;
  readonly message: string;
}

export interface LabelOutcome {
  readonly project: string;
  readonly label: Label;
  /** The findings that matched it. */
  readonly findings: readonly SeenFinding[];
}

export interface RuleRow {
  readonly rule: string;
  /** Whether the rule counts in precision and recall (default severity warning or error). */
  readonly counted: boolean;
  readonly findings: number;
  /** Hazard labels found. */
  readonly tp: number;
  /** Safe labels a finding fell on. */
  readonly fp: number;
  readonly unlabelled: number;
  /** Findings on ambiguous labels: in neither TP nor FP. */
  readonly ambiguous: number;
  readonly hazards: number;
  readonly safe: number;
  /** tp / (tp + fp); undefined with neither. */
  readonly precision: number | undefined;
  /** tp / hazards; undefined with no hazard labelled. */
  readonly recall: number | undefined;
}

export interface Report {
  readonly rows: readonly RuleRow[];
  /** Every rule at warning level and above, summed. */
  readonly total: RuleRow;
  readonly falsePositives: readonly LabelOutcome[];
  readonly falseNegatives: readonly LabelOutcome[];
  /** Ambiguous labels a finding fell on. */
  readonly ambiguousHits: readonly LabelOutcome[];
  readonly unlabelled: readonly (SeenFinding & { readonly project: string })[];
}

const inLabel = (l: Label, f: SeenFinding): boolean => f.path === l.path && f.rule === l.rule && f.line >= l.line && f.line <= (l.endLine ?? l.line);

/** Matches one project's findings to its labels. */
export function matchProject(project: Pick<Project, 'id' | 'labels'>, findings: readonly SeenFinding[]): { outcomes: LabelOutcome[]; unlabelled: SeenFinding[] } {
  const outcomes = project.labels.map((label) => ({ project: project.id, label, findings: findings.filter((f) => inLabel(label, f)) }));
  const unlabelled = findings.filter((f) => !project.labels.some((l) => inLabel(l, f)));
  return { outcomes, unlabelled };
}

const ratio = (a: number, b: number): number | undefined => (b === 0 ? undefined : a / b);

/**
 * The per-rule numbers over every project. `ruleLevels` gives each rule's default severity (all
 * our rules, in order: a rule nobody labelled still gets its row).
 */
export function report(results: readonly { project: Pick<Project, 'id' | 'labels'>; findings: readonly SeenFinding[] }[], ruleLevels: readonly { id: string; severity: Severity }[]): Report {
  const outcomes: LabelOutcome[] = [];
  const unlabelled: (SeenFinding & { project: string })[] = [];
  const all: SeenFinding[] = [];
  for (const r of results) {
    const m = matchProject(r.project, r.findings);
    outcomes.push(...m.outcomes);
    unlabelled.push(...m.unlabelled.map((f) => ({ ...f, project: r.project.id })));
    all.push(...r.findings);
  }
  const counted = (s: Severity): boolean => s === 'error' || s === 'warning';
  const row = (rule: string, isCounted: boolean, mine: (rule: string) => boolean): RuleRow => {
    const of = outcomes.filter((o) => mine(o.label.rule));
    const hazards = of.filter((o) => o.label.verdict === 'hazard');
    const safe = of.filter((o) => o.label.verdict === 'safe');
    const tp = hazards.filter((o) => o.findings.length > 0).length;
    const fp = safe.filter((o) => o.findings.length > 0).length;
    return {
      rule,
      counted: isCounted,
      findings: all.filter((f) => mine(f.rule)).length,
      tp,
      fp,
      unlabelled: unlabelled.filter((f) => mine(f.rule)).length,
      ambiguous: of.filter((o) => o.label.verdict === 'ambiguous' && o.findings.length > 0).length,
      hazards: hazards.length,
      safe: safe.length,
      precision: ratio(tp, tp + fp),
      recall: ratio(tp, hazards.length),
    };
  };
  const rows = ruleLevels.map((r) => row(r.id, counted(r.severity), (id) => id === r.id));
  const countedIds = new Set(ruleLevels.filter((r) => counted(r.severity)).map((r) => r.id));
  const total = row('all (warning+)', true, (id) => countedIds.has(id));
  return {
    rows,
    total,
    falsePositives: outcomes.filter((o) => o.label.verdict === 'safe' && o.findings.length > 0),
    falseNegatives: outcomes.filter((o) => o.label.verdict === 'hazard' && o.findings.length === 0),
    ambiguousHits: outcomes.filter((o) => o.label.verdict === 'ambiguous' && o.findings.length > 0),
    unlabelled,
  };
}

const num = (x: number | undefined): string => (x === undefined ? '-' : x.toFixed(2));
/** One entry per line: a line break inside a message or reason is shown as `\\n`. */
const oneLine = (s: string): string => s.replace(/\r?\n/g, '\\n');

/** The report as text: a Markdown table per rule, then every FP, FN and unlabelled finding. */
export function formatReport(r: Report): string {
  const head = ['rule', 'level', 'findings', 'TP', 'FP', 'ambiguous', 'unlabelled', 'hazards', 'found', 'precision', 'recall'];
  const line = (row: RuleRow, level: string): string[] => [row.rule, level, String(row.findings), String(row.tp), String(row.fp), String(row.ambiguous), String(row.unlabelled), String(row.hazards), `${row.tp}/${row.hazards}`, num(row.precision), num(row.recall)];
  const table = [head, ...r.rows.map((row) => line(row, row.counted ? 'warning+' : 'info')), line(r.total, '')];
  const out = [`| ${head.join(' | ')} |`, `| ${head.map(() => '---').join(' | ')} |`, ...table.slice(1).map((c) => `| ${c.join(' | ')} |`)];
  const where = (project: string, path: string, line: number): string => `${project}/${path}:${line}`;
  out.push('', `false positives (${r.falsePositives.length}):`);
  for (const o of r.falsePositives) out.push(`  FP ${where(o.project, o.label.path, o.label.line)} ${o.label.rule}: labelled safe: ${oneLine(o.label.reason)} | ours: ${oneLine(o.findings[0].message)}`);
  out.push('', `findings on ambiguous labels (${r.ambiguousHits.length}; in neither precision nor recall):`);
  for (const o of r.ambiguousHits) out.push(`  ?  ${where(o.project, o.label.path, o.label.line)} ${o.label.rule}: ${oneLine(o.label.reason)}`);
  out.push('', `false negatives (${r.falseNegatives.length}):`);
  for (const o of r.falseNegatives) out.push(`  FN ${where(o.project, o.label.path, o.label.line)} ${o.label.rule}: ${oneLine(o.label.reason)}${o.label.fix ? ` (fix: ${o.label.fix})` : ''}`);
  out.push('', `unlabelled findings (${r.unlabelled.length}):`);
  for (const f of r.unlabelled) out.push(`  ${where(f.project, f.path, f.line)} ${f.rule} [${f.severity}] ${oneLine(f.message)}`);
  return out.join('\n');
}

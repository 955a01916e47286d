/** The lint engine's public data: findings, fixes and rule metadata. No vscode types here. */

export type Severity = 'error' | 'warning' | 'info' | 'hint';
export const severities: readonly Severity[] = ['error', 'warning', 'info', 'hint'];

/** 0-based line and UTF-16 character, as in LSP. */
export interface Position {
  readonly line: number;
  readonly character: number;
}

export interface Range {
  readonly start: Position;
  readonly end: Position;
}

export interface TextEdit {
  readonly range: Range;
  readonly newText: string;
}

export interface Fix {
  readonly title: string;
  readonly edits: readonly TextEdit[];
}

export interface Finding {
  readonly ruleId: string;
  readonly severity: Severity;
  /** One sentence: what is wrong and why, for the squiggle and the CLI. */
  readonly message: string;
  readonly range: Range;
  readonly fixes: readonly Fix[];
  readonly docsUrl: string;
  /** The memory effect in a few sentences, for hovers. Markdown. */
  readonly explanation: string;
}

/** What a rule reports before the linter adds its id, severity and docs. */
export interface RawFinding {
  readonly message: string;
  readonly range: Range;
  readonly fixes: readonly Fix[];
}

export const docsBase = 'https://github.com/gpu-workbench/gpu-workbench/blob/main/docs/rules/';
export const docsUrlFor = (id: string): string => `${docsBase}${id}.md`;

/** Per-run settings: rules switched off or given another severity. */
export interface LintOptions {
  /** `false` turns linting off entirely (no findings). */
  readonly enabled?: boolean;
  readonly rules?: Readonly<Record<string, Severity | 'off'>>;
  /** Only these rule ids run (the CLI's `--select`). */
  readonly select?: readonly string[];
}

/**
 * The lint engine's front door: `createLinter()` loads tree-sitter once; the Linter keeps
 * a workspace of parsed files (re-parsed incrementally on change) and runs the rules.
 * It never throws on what it is given: a parse error is not a finding, and a rule that
 * fails on some odd construct reports nothing for that file rather than taking the
 * server or the CLI down.
 */
import type { Tree } from 'web-tree-sitter';
import { applyEdits, combineFixes } from './fixes';
import { FileModel } from './model';
import { loadPython, PythonParser } from './parser';
import type { Rule } from './rule';
import { rule as accumulatedLoss } from './rules/accumulatedLoss';
import { rule as carriedHiddenState } from './rules/carriedHiddenState';
import { rule as dataParallel } from './rules/dataParallel';
import { rule as emptyCacheInLoop } from './rules/emptyCacheInLoop';
import { rule as missingNoGrad } from './rules/missingNoGrad';
import { rule as missingSetEpoch } from './rules/missingSetEpoch';
import { rule as modelToDeviceInLoop } from './rules/modelToDeviceInLoop';
import { rule as samplerShuffle } from './rules/samplerShuffle';
import { rule as tensorsKeptForLogging } from './rules/tensorsKeptForLogging';
import { rule as volatileVariable } from './rules/volatileVariable';
import { toSyntax } from './syntax';
import type { Finding, LintOptions, RawFinding, TextEdit } from './types';
import { Workspace } from './workspace';

/** In fix order: a missing guard is fixed before the accumulations it causes. */
export const rules: readonly Rule[] = [missingNoGrad, accumulatedLoss, carriedHiddenState, tensorsKeptForLogging, samplerShuffle, missingSetEpoch, modelToDeviceInLoop, volatileVariable, emptyCacheInLoop, dataParallel];

export interface SourceFile {
  readonly path: string;
  readonly text: string;
}

export interface LinterOptions {
  /** Keep each file's tree for incremental re-parsing (the server). The CLI parses once. */
  readonly incremental?: boolean;
  /** Told about internal errors (a rule that threw); the finding list simply lacks that rule's results. */
  readonly onError?: (path: string, error: unknown) => void;
}

const noqa = /#\s*noqa(?::\s*([\w-]+(?:\s*,\s*[\w-]+)*))?/i;

export class Linter {
  readonly rules = rules;
  private readonly workspace = new Workspace();
  private readonly trees = new Map<string, { tree: Tree; text: string }>();
  private readonly parseErrors = new Map<string, boolean>();

  constructor(
    private readonly parser: PythonParser,
    private readonly options: LinterOptions = {},
  ) {}

  /** Adds or replaces a file in the workspace index (incrementally re-parsed when known). */
  setFile(path: string, text: string): void {
    const known = this.workspace.get(path);
    if (known && known.text === text) return;
    let root;
    try {
      const previous = this.trees.get(path);
      const tree = this.parser.parse(text, previous);
      previous?.tree.delete();
      this.trees.delete(path);
      root = toSyntax(tree, text);
      this.parseErrors.set(path, tree.rootNode.hasError);
      if (this.options.incremental) this.trees.set(path, { tree, text });
      else tree.delete();
    } catch (err) {
      this.options.onError?.(path, err);
      this.trees.get(path)?.tree.delete();
      this.trees.delete(path);
      this.workspace.remove(path);
      return;
    }
    try {
      this.workspace.set(new FileModel(path, text, root, this.workspace));
    } catch (err) {
      // Pathological nesting can exhaust the stack while indexing; such a file gets no findings.
      this.options.onError?.(path, err);
      this.workspace.remove(path);
    }
  }

  removeFile(path: string): void {
    this.trees.get(path)?.tree.delete();
    this.trees.delete(path);
    this.parseErrors.delete(path);
    this.workspace.remove(path);
  }

  /** Whether the file's last parse had syntax errors (they are not findings; this is for tests and logs). */
  hasSyntaxErrors(path: string): boolean {
    return this.parseErrors.get(path) ?? false;
  }

  hasFile(path: string): boolean {
    return this.workspace.get(path) !== undefined;
  }

  /** Lints one file; with `text`, updates it first. A file never given gets no findings. */
  lintFile(path: string, text?: string, options: LintOptions = {}): Finding[] {
    if (text !== undefined) this.setFile(path, text);
    const model = this.workspace.get(path);
    if (!model || options.enabled === false || !model.usesTorch) return [];
    const findings: Finding[] = [];
    for (const rule of this.rules) {
      const configured = options.rules?.[rule.id];
      if (configured === 'off') continue;
      if (options.select && !options.select.includes(rule.id)) continue;
      let raw: RawFinding[];
      try {
        raw = rule.check(model);
      } catch (err) {
        this.options.onError?.(path, err);
        continue;
      }
      for (const r of raw) {
        if (suppressed(model.line(r.range.start.line), rule.id)) continue;
        findings.push({ ruleId: rule.id, severity: configured ?? rule.defaultSeverity, message: r.message, range: r.range, fixes: r.fixes, docsUrl: rule.docsUrl, explanation: rule.explanation });
      }
    }
    return findings.sort((a, b) => a.range.start.line - b.range.start.line || a.range.start.character - b.range.start.character || a.ruleId.localeCompare(b.ruleId));
  }

  /** Indexes every file first (so facts cross files), then lints each. */
  lintWorkspace(files: readonly SourceFile[], options: LintOptions = {}): Map<string, Finding[]> {
    for (const f of files) this.setFile(f.path, f.text);
    const out = new Map<string, Finding[]>();
    for (const f of files) out.set(f.path, this.lintFile(f.path, undefined, options));
    return out;
  }

  /**
   * Applies the first fix of every finding, re-lints, and repeats until nothing fixable is
   * left (at most `maxPasses` times). Each pass fixes one rule only, in the order of `rules`,
   * because fixing a cause (a missing `no_grad`) often removes its effects (an accumulated
   * output that no longer has a graph). Returns the new text; the file is updated in the index.
   */
  fixFile(path: string, text: string, options: LintOptions = {}, maxPasses = 10): string {
    let current = text;
    for (let pass = 0; pass < maxPasses; pass++) {
      const findings = this.lintFile(path, current, options).filter((f) => f.fixes.length > 0);
      const first = this.rules.find((r) => findings.some((f) => f.ruleId === r.id));
      const edits: TextEdit[] = combineFixes(findings.filter((f) => f.ruleId === first?.id).map((f) => f.fixes[0]));
      if (edits.length === 0) break;
      const next = applyEdits(current, edits);
      if (next === current) break;
      current = next;
    }
    this.setFile(path, current);
    return current;
  }

  dispose(): void {
    for (const { tree } of this.trees.values()) tree.delete();
    this.trees.clear();
    this.parser.delete();
  }
}

function suppressed(line: string, ruleId: string): boolean {
  const m = noqa.exec(line);
  if (!m) return false;
  if (!m[1]) return true;
  return m[1].split(',').map((s) => s.trim()).includes(ruleId);
}

/** Loads tree-sitter and the Python grammar (once per process) and returns a linter. */
export async function createLinter(options: LinterOptions = {}): Promise<Linter> {
  const language = await loadPython();
  return new Linter(new PythonParser(language), options);
}

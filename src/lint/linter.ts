/**
 * The lint engine's front door: `createLinter()` loads tree-sitter once; the Linter keeps
 * a workspace of parsed files (re-parsed incrementally on change) and runs the rules.
 * It never throws on what it is given: a parse error is not a finding, and a rule that
 * fails on some odd construct reports nothing for that file rather than taking the
 * server or the CLI down.
 */
import { autocastEdit } from './autocast';
import type { Edit, Tree } from 'web-tree-sitter';
import { recordRoot } from './deps';
import { applyEdits, combineFixes, indentUnit } from './fixes';
import { FileModel, hasAny } from './model';
import { commonEnds, loadPython, PythonParser } from './parser';
import type { Rule } from './rule';
import { rule as accumulatedLoss } from './rules/accumulatedLoss';
import { rule as carriedHiddenState } from './rules/carriedHiddenState';
import { rule as dataParallel } from './rules/dataParallel';
import { rule as emptyCacheInLoop } from './rules/emptyCacheInLoop';
import { rule as missingNoGrad } from './rules/missingNoGrad';
import { rule as missingSetEpoch } from './rules/missingSetEpoch';
import { rule as modelToDeviceInLoop } from './rules/modelToDeviceInLoop';
import { rule as samplerShuffle } from './rules/samplerShuffle';
import { showsGpu, rule as tensorsKeptForLogging } from './rules/tensorsKeptForLogging';
import { rule as volatileVariable } from './rules/volatileVariable';
import { nestingOf, toSyntax, type SyntaxNode } from './syntax';
import { lineBreakOf, pythonNewlines } from './text';
import type { Finding, Fix, LintOptions, Position, Range, RawFinding, TextEdit } from './types';
import { Workspace } from './workspace';

/** In fix order: a missing guard is fixed before the accumulations it causes. */
/**
 * CPython refuses source with a NUL byte, so such a text is not Python but a binary file opened
 * as text: it gets no findings and is not parsed at all (tree-sitter's error recovery takes
 * seconds over half a megabyte of binary).
 */
export const isBinarySource = (text: string): boolean => text.includes('\0');

/**
 * How large a file the engine analyses. Its cost grows linearly with the text (bench/lint/scale.ts),
 * but a file over these limits is generated data, not a training script, and would block the
 * server for seconds: it is skipped, with a note naming its size and the limit (`oversize`).
 */
export interface SizeLimits {
  /** Characters in the whole file (UTF-16 units, as the editor counts). */
  readonly maxChars: number;
  /** Characters in its longest line. */
  readonly maxLineChars: number;
  /**
   * Levels of syntax-tree nesting. Real code stays far below (55 at most in torch's 1,141 files,
   * median 14) and CPython itself refuses more than 100 levels of indentation or 200 nested
   * brackets; past this, analyses that walk up from each node would cost depth times size.
   */
  readonly maxDepth: number;
}

export const defaultLimits: SizeLimits = { maxChars: 2 * 1024 * 1024, maxLineChars: 20_000, maxDepth: 500 };

const formatCount = (n: number): string => n.toLocaleString('en-US');

/** Why a parsed file nests too deep to lint (the line and the depth), or undefined. */
function tooDeep(root: SyntaxNode, maxDepth: number): string | undefined {
  for (const top of root.children) {
    const depth = nestingOf(top);
    if (depth > maxDepth) return `the statement on line ${top.startRow + 1} nests ${formatCount(depth)} levels deep, over the limit of ${formatCount(maxDepth)} (CPython itself refuses more than 100 levels of indentation or 200 nested brackets)`;
  }
  return undefined;
}

/** Why a text is too large to lint, naming its size and the limit; undefined when it is not. */
export function oversize(text: string, limits: SizeLimits = defaultLimits): string | undefined {
  return oversizeScan(text, limits).why;
}

/**
 * `oversize` of `text`, made by one edit from `before`, which was within the same limits and has
 * no line indented 101 columns or more (`oversizeScan`'s `deep` false): only the lines the edit
 * touched are read (the whole text was read at every keystroke). `deep` as `oversizeScan`'s.
 */
export function oversizeAfterEdit(before: string, text: string, limits: SizeLimits = defaultLimits): { why: string | undefined; deep: boolean } {
  if (text.length > limits.maxChars) return oversizeScan(text, limits);
  const { start, tail } = commonEnds(before, text);
  // Whole lines: those outside are the same as before, neither too long nor deeply indented.
  const from = text.lastIndexOf('\n', start - 1) + 1;
  let to = text.indexOf('\n', text.length - tail);
  if (to === -1) to = text.length;
  const lines = text.slice(from, to);
  if (deepIndent.test(lines)) return oversizeScan(text, limits);
  for (let at = 0; at <= lines.length; ) {
    let end = lines.indexOf('\n', at);
    if (end === -1) end = lines.length;
    if (end - at > limits.maxLineChars) return oversizeScan(text, limits);
    at = end + 1;
  }
  return { why: undefined, deep: false };
}

/** `oversize`, and whether the text has a line indented 101 columns or more (`deep`; true too when it is over the size limit). */
function oversizeScan(text: string, limits: SizeLimits): { why: string | undefined; deep: boolean } {
  if (text.length > limits.maxChars) {
    return { why: `${formatCount(text.length)} characters (${(text.length / 1024 / 1024).toFixed(1)} MB), over the limit of ${formatCount(limits.maxChars)} (${Math.round(limits.maxChars / 1024)} KB)`, deep: true };
  }
  const deep = deepIndent.test(text);
  return { why: oversizeWhy(text, limits, deep), deep };
}

function oversizeWhy(text: string, limits: SizeLimits, indentation: boolean): string | undefined {
  // Line by line with indexOf: a few milliseconds per megabyte, no array of lines. The
  // indentation levels are counted as Python's tokenizer does (a stack of widths; blank and
  // comment lines do not count); lines inside brackets or strings are counted too, which only
  // matters for text that nests absurdly anyway.
  // More than 100 levels need a line indented 101 columns or more (13 tabs): without one, only line lengths are checked.
  if (!indentation && text.length <= limits.maxLineChars) return undefined;
  const indents = [0];
  let row = 0;
  for (let start = 0; start <= text.length; row++) {
    let end = text.indexOf('\n', start);
    if (end === -1) end = text.length;
    if (end - start > limits.maxLineChars) return `line ${row + 1} has ${formatCount(end - start)} characters, over the limit of ${formatCount(limits.maxLineChars)} per line (generated data, not code to lint)`;
    if (!indentation) {
      start = end + 1;
      continue;
    }
    let i = start;
    let width = 0;
    for (; i < end; i++) {
      const c = text.charCodeAt(i);
      if (c === 32) width++;
      else if (c === 9) width = (Math.floor(width / 8) + 1) * 8;
      else if (c !== 12) break;
    }
    const c = text.charCodeAt(i);
    if (i < end && c !== 35 && c !== 13) {
      if (width > indents[indents.length - 1]) {
        indents.push(width);
        if (indents.length - 1 > maxIndentLevels) return `line ${row + 1} is indented more than ${maxIndentLevels} levels deep, which CPython refuses ("too many levels of indentation"), and which tree-sitter cannot always parse`;
      } else while (width < indents[indents.length - 1]) indents.pop();
    }
    start = end + 1;
  }
  return undefined;
}

/** CPython's tokenizer refuses deeper indentation (MAXINDENT); tree-sitter's parse of deeper text can trap (bench/lint/fuzz.ts). */
const maxIndentLevels = 100;
const deepIndent = /(?:^|\n)(?:[ \f]{101}|(?:[ \f]*\t){13})/;

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
  /** Files over these are skipped (see `skipReason`); default `defaultLimits`. */
  readonly limits?: Partial<SizeLimits>;
}

/** One top-level statement's findings, every rule, before settings and `# noqa`. */
interface ChunkResult {
  readonly findings: { readonly ruleId: string; readonly raw: RawFinding }[];
  /** The lookup keys its analysis made (deps.ts); undefined when not recorded. */
  readonly deps: Set<string> | undefined;
}

/** What the incremental linter keeps per file between edits. */
interface FileCache {
  readonly results: Map<SyntaxNode, ChunkResult>;
  /** Keys exported by the statements removed or added since the last lint. */
  readonly dirtyKeys: Set<string>;
  /** `sharedSignature` when the results were computed. */
  shared: string;
  /** `FileModel.moduleNames` then, compared name by name (`mt:<name>`). */
  modules: ReturnType<FileModel['moduleNames']>;
  /** The workspace generation then: a change to another file since starts over. */
  generation: number;
}

const noqa = /#\s*noqa(?::\s*([\w-]+(?:\s*,\s*[\w-]+)*))?/i;

export class Linter {
  readonly rules = rules;
  private readonly workspace: Workspace;
  private readonly trees = new Map<string, { tree: Tree; text: string; root: SyntaxNode }>();
  private readonly caches = new Map<string, FileCache>();
  private readonly parseErrors = new Map<string, boolean>();
  /** Files given but not analysed, each with why (`oversize`). */
  private readonly skipped = new Map<string, string>();
  /** Files whose text indexed now has no line indented 101 columns or more: an edit's size check reads only its lines. */
  private readonly shallow = new Set<string>();
  private limits: SizeLimits;

  constructor(
    private readonly parser: PythonParser,
    private readonly options: LinterOptions = {},
  ) {
    this.limits = { ...defaultLimits, ...options.limits };
    this.workspace = new Workspace(options.incremental ?? false);
  }

  /**
   * Changes the size limits. A file indexed before and now over them is skipped at once; one
   * skipped before and now within them is analysed when it is given again (the editor's next
   * pull gives it).
   */
  setLimits(limits: Partial<SizeLimits>): void {
    this.limits = { ...this.limits, ...limits };
    for (const path of this.workspace.paths()) {
      const text = this.workspace.get(path)?.text;
      if (text !== undefined) this.skipIfOversize(path, text);
    }
  }

  /**
   * Takes the file out of the index and notes why when its text is over the size limits (`oversize`); whether it did.
   * With `before`, the text indexed now (within the current limits), only the lines an edit changed are read when it
   * has no deeply indented line (`oversizeAfterEdit`).
   */
  private skipIfOversize(path: string, text: string, before?: string): boolean {
    const scan = before !== undefined && this.shallow.has(path) ? oversizeAfterEdit(before, text, this.limits) : oversizeScan(text, this.limits);
    if (scan.deep) this.shallow.delete(path);
    else this.shallow.add(path);
    if (scan.why) this.skip(path, scan.why);
    return scan.why !== undefined;
  }

  private skip(path: string, why: string): void {
    this.removeFile(path);
    this.skipped.set(path, why);
  }

  /** Why the file's last text was not analysed (too large: its size and the limit), or undefined. */
  skipReason(path: string): string | undefined {
    return this.skipped.get(path);
  }

  /**
   * Adds or replaces a file in the workspace index (incrementally re-parsed when known). The
   * engine reads lone `\r`s as `\n` (text.ts): rows then count lines as Python and the editor do.
   */
  setFile(path: string, source: string): void {
    const text = pythonNewlines(source);
    const known = this.workspace.get(path);
    if (known && known.text === text) return;
    if (this.skipIfOversize(path, text, known?.text)) return;
    this.skipped.delete(path);
    let root: SyntaxNode;
    let edit: Edit | undefined;
    try {
      const previous = this.trees.get(path);
      let tree: Tree;
      if (previous && known) {
        const r = this.parser.reparse(text, previous);
        tree = r.tree;
        edit = r.edit;
        root = toSyntax(tree, text, { root: previous.root, edit: r.edit, changed: r.changed });
      } else {
        tree = this.parser.parse(text);
      }
      previous?.tree.delete();
      this.trees.delete(path);
      if (!edit) root = toSyntax(tree, text);
      const deep = tooDeep(root!, this.limits.maxDepth);
      if (deep) {
        tree.delete();
        this.skip(path, deep);
        return;
      }
      this.parseErrors.set(path, tree.rootNode.hasError);
      if (this.options.incremental) this.trees.set(path, { tree, text, root: root! });
      else tree.delete();
    } catch (err) {
      this.options.onError?.(path, err);
      this.trees.get(path)?.tree.delete();
      this.trees.delete(path);
      this.caches.delete(path);
      this.workspace.remove(path);
      return;
    }
    try {
      const model = new FileModel(path, text, root!, this.workspace, edit ? known : undefined);
      if (edit && known) this.carryCache(path, known, model, edit);
      else this.caches.delete(path);
      this.workspace.set(model);
    } catch (err) {
      // Pathological nesting can exhaust the stack while indexing; such a file gets no findings.
      this.options.onError?.(path, err);
      this.trees.get(path)?.tree.delete();
      this.trees.delete(path);
      this.caches.delete(path);
      this.workspace.remove(path);
    }
  }

  /**
   * After an edit: drops the results of removed statements, notes what they and the added
   * ones export (their dependents are dropped at the next lint), and moves the positions of
   * the results kept through the edit.
   */
  private carryCache(path: string, before: FileModel, after: FileModel, edit: Edit): void {
    const cache = this.caches.get(path);
    if (!cache) return;
    const kept = new Set(after.root.children);
    for (const [top, result] of cache.results) {
      if (!kept.has(top)) {
        cache.results.delete(top);
        continue;
      }
      const moved = result.findings.length === 0 ? result : moveResult(result, edit);
      if (moved) cache.results.set(top, moved);
      else cache.results.delete(top);
    }
    const old = new Set(before.root.children);
    // The statements replaced, each with the number of kept statements before it.
    const changed = (tops: readonly SyntaxNode[], keep: (top: SyntaxNode) => boolean): { top: SyntaxNode; at: number }[] => {
      const out: { top: SyntaxNode; at: number }[] = [];
      let at = 0;
      for (const top of tops) {
        if (keep(top)) at++;
        else out.push({ top, at });
      }
      return out;
    };
    const removed = changed(before.root.children, (t) => kept.has(t));
    const added = changed(after.root.children, (t) => old.has(t));
    // A statement replaced by one in the same place answers a value-compared lookup only if its answer changed.
    const paired = removed.length === added.length && removed.every((r, i) => r.at === added[i].at);
    for (let i = 0; i < Math.max(removed.length, added.length); i++) {
      const r = removed[i];
      const a = added[i];
      const keys = new Set([...(r ? before.exportsOf(r.top) : []), ...(a ? after.exportsOf(a.top) : [])]);
      for (const k of keys) {
        if (paired && r && a) {
          const sig = before.signatureOf(r.top, k);
          if (sig !== undefined && sig === after.signatureOf(a.top, k)) continue;
        }
        cache.dirtyKeys.add(k);
      }
    }
  }

  /** The autocast quick fix of an out-of-memory problem in this file (autocast.ts), when its training step is unambiguous. */
  autocastFix(path: string, text: string): TextEdit | undefined {
    this.setFile(path, text);
    const model = this.workspace.get(path);
    return model ? autocastEdit(model) : undefined;
  }

  removeFile(path: string): void {
    this.skipped.delete(path);
    this.shallow.delete(path);
    this.caches.delete(path);
    this.trees.get(path)?.tree.delete();
    this.trees.delete(path);
    this.parseErrors.delete(path);
    this.workspace.remove(path);
  }

  /** Whether the file's last parse had syntax errors (they are not findings; this is for tests and logs). */
  hasSyntaxErrors(path: string): boolean {
    return this.parseErrors.get(path) ?? false;
  }

  /** How much the workspace index holds (files, and names with an entry): empty once every file is removed. */
  indexSize(): ReturnType<Workspace['size']> {
    return this.workspace.size();
  }

  hasFile(path: string): boolean {
    return this.workspace.get(path) !== undefined;
  }

  /** Lints one file; with `text`, updates it first. A file never given gets no findings. */
  lintFile(path: string, text?: string, options: LintOptions = {}): Finding[] {
    if (text !== undefined) this.setFile(path, text);
    const model = this.workspace.get(path);
    if (!model || options.enabled === false || !this.workspace.usesProjectTorch(model)) return [];
    const steps = this.results(path, model);
    let step = steps.next();
    while (!step.done) step = steps.next();
    return this.present(path, model, step.value, options);
  }

  /**
   * `lintFile` that yields to the event loop (a macrotask, `setImmediate`) whenever it has
   * analysed for `sliceMs` since the last yield, between top-level statements: a server answers
   * other requests while a large file is linted. After each yield it checks whether to go on:
   * undefined (nothing more is done) when `cancelled()` says so, or when the workspace changed
   * meanwhile (this file or another was set or removed: the findings would mix two versions).
   * The statements analysed before it stopped stay cached, as a synchronous lint leaves them.
   */
  async lintFileAsync(path: string, text: string | undefined, options: LintOptions = {}, cancelled: () => boolean = () => false, sliceMs = 20): Promise<Finding[] | undefined> {
    if (text !== undefined) this.setFile(path, text);
    const model = this.workspace.get(path);
    if (!model || options.enabled === false || !this.workspace.usesProjectTorch(model)) return [];
    const generation = this.workspace.generation;
    const steps = this.results(path, model);
    let since = performance.now();
    for (let step = steps.next(); ; step = steps.next()) {
      if (step.done) return this.present(path, model, step.value, options);
      if (performance.now() - since < sliceMs) continue;
      await new Promise((resolve) => setImmediate(resolve));
      if (cancelled() || this.workspace.generation !== generation || this.workspace.get(path) !== model) {
        steps.return([]);
        return undefined;
      }
      since = performance.now();
    }
  }

  /** Findings from the statements' results, after the settings, `# noqa`, and ranges clamped to the text. */
  private present(path: string, model: FileModel, results: readonly ChunkResult[], options: LintOptions): Finding[] {
    const findings: Finding[] = [];
    const byRule = new Map(this.rules.map((r) => [r.id, r]));
    for (const result of results) {
      for (const { ruleId, raw: r } of result.findings) {
        const rule = byRule.get(ruleId) as Rule;
        const configured = options.rules?.[rule.id];
        if (configured === 'off') continue;
        if (options.select && !options.select.includes(rule.id)) continue;
        if (suppressed(model.line(r.range.start.line), rule.id)) continue;
        const inside = insideText(model, r, (why) => this.options.onError?.(path, new Error(`${rule.id} gave a range outside the document (${why}); clamped`)));
        findings.push({ ruleId: rule.id, severity: configured ?? rule.defaultSeverity, message: inside.message, range: inside.range, fixes: inside.fixes, docsUrl: rule.docsUrl, explanation: rule.explanation });
      }
    }
    return findings.sort((a, b) => a.range.start.line - b.range.start.line || a.range.start.character - b.range.start.character || a.ruleId.localeCompare(b.ruleId));
  }

  /**
   * Every top-level statement's findings, in document order, pausing (a `yield`) after each
   * statement it analyses, where an asynchronous lint may give way. The rules look at one statement
   * at a time. Incrementally, a statement's findings are reused unless it changed, a lookup
   * its analysis made is answered by a statement that changed, a file-wide fact changed, or
   * another file did.
   */
  private *results(path: string, model: FileModel): Generator<void, ChunkResult[]> {
    if (!this.options.incremental) {
      const all: ChunkResult[] = [];
      for (const top of model.root.children) {
        all.push(this.analyse(model, top, path, false));
        yield;
      }
      return all;
    }
    let cache = this.caches.get(path);
    const elsewhere = !cache || this.workspace.changedElsewhere(path, cache.generation);
    model.dropStaleContributions(elsewhere || !cache ? 'all' : cache.dirtyKeys);
    const shared = sharedSignature(model);
    const modules = model.moduleNames();
    if (!cache || cache.shared !== shared || elsewhere) {
      cache = { results: new Map(), dirtyKeys: new Set(), shared, modules, generation: this.workspace.generation };
      this.caches.set(path, cache);
      // The facts kept across edits were made under the same file-wide facts as the findings.
      model.dropKeptFacts('all');
    } else {
      if (cache.modules !== modules) {
        for (const kind of ['models', 'losses', 'remotes'] as const) {
          for (const name of cache.modules[kind]) if (!modules[kind].has(name)) cache.dirtyKeys.add(`mt:${name}`);
          for (const name of modules[kind]) if (!cache.modules[kind].has(name)) cache.dirtyKeys.add(`mt:${name}`);
        }
        cache.modules = modules;
      }
    }
    if (cache.dirtyKeys.size) {
      const dirty = [...cache.dirtyKeys];
      for (const [top, result] of cache.results) if (result.deps && hasAny(result.deps, dirty)) cache.results.delete(top);
      model.dropKeptFacts(dirty);
    }
    cache.dirtyKeys.clear();
    cache.generation = this.workspace.generation;
    const out: ChunkResult[] = [];
    for (const top of model.root.children) {
      let result = cache.results.get(top);
      if (!result) {
        cache.results.set(top, (result = this.analyse(model, top, path, true)));
        yield;
      }
      out.push(result);
    }
    return out;
  }

  private analyse(model: FileModel, top: SyntaxNode, path: string, record: boolean): ChunkResult {
    const run = (): { ruleId: string; raw: RawFinding }[] => {
      const found: { ruleId: string; raw: RawFinding }[] = [];
      model.focus = top;
      try {
        for (const rule of this.rules) {
          try {
            for (const raw of rule.check(model)) found.push({ ruleId: rule.id, raw });
          } catch (err) {
            this.options.onError?.(path, err);
          }
        }
      } finally {
        model.focus = undefined;
      }
      return found;
    };
    if (!record) return { findings: run(), deps: undefined };
    const r = recordRoot(run);
    return { findings: r.value, deps: r.deps };
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
   * output that no longer has a graph). Inserted lines end like the file's first line break.
   * Returns the new text; the file is updated in the index.
   */
  fixFile(path: string, text: string, options: LintOptions = {}, maxPasses = 10): string {
    let current = text;
    for (let pass = 0; pass < maxPasses; pass++) {
      const findings = this.lintFile(path, current, options).filter((f) => f.fixes.length > 0);
      const first = this.rules.find((r) => findings.some((f) => f.ruleId === r.id));
      const eol = lineBreakOf(current);
      const edits: TextEdit[] = combineFixes(findings.filter((f) => f.ruleId === first?.id).map((f) => f.fixes[0])).map((e) => (eol === '\n' ? e : { range: e.range, newText: e.newText.replace(/\n/g, eol) }));
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

/**
 * The file-wide facts a statement's findings may depend on without a recorded lookup: the
 * model's (imports, model names, module-level grad switches), the fixes' (indentation
 * unit, where `import torch` would go), whether the text shows a GPU (tensors-kept-for-logging), and the
 * file's functions with their classes.
 */
function sharedSignature(model: FileModel): string {
  let importRow = 0;
  for (const s of model.root.children) {
    if (s.type === 'import_statement' || s.type === 'import_from_statement' || s.type === 'future_import_statement') importRow = s.endRow + 1;
  }
  // Which class each function belongs to: an edit that moves a `def` in or out of a class (an indentation
  // while typing) changes how calls resolve everywhere, not only where a recorded lookup asked.
  let owners = '';
  for (const fn of model.functions) owners += `${fn.cls?.name ?? ''}.${fn.name},`;
  return `${model.sharedFacts()}|${indentUnit(model)}|${importRow}|${showsGpu(model)}|${owners}`;
}

/** Moves a kept statement's findings through an edit; undefined when a position falls inside the edited span. */
function moveResult(result: ChunkResult, edit: Edit): ChunkResult | undefined {
  const start = edit.startPosition;
  const oldEnd = edit.oldEndPosition;
  const newEnd = edit.newEndPosition;
  const before = (p: Position, q: { row: number; column: number }): boolean => p.line < q.row || (p.line === q.row && p.character < q.column);
  const after = (p: Position, q: { row: number; column: number }): boolean => p.line > q.row || (p.line === q.row && p.character > q.column);
  if (start.row === oldEnd.row && start.column === oldEnd.column && newEnd.row === start.row && newEnd.column === start.column) return result;
  let inside = false;
  const pos = (p: Position): Position => {
    if (before(p, start)) return p;
    if (after(p, oldEnd)) return { line: p.line + newEnd.row - oldEnd.row, character: p.line === oldEnd.row ? p.character + newEnd.column - oldEnd.column : p.character };
    inside = true;
    return p;
  };
  const range = (r: Range): Range => ({ start: pos(r.start), end: pos(r.end) });
  const findings = result.findings.map(({ ruleId, raw }) => ({
    ruleId,
    raw: { message: raw.message, range: range(raw.range), fixes: raw.fixes.map((f): Fix => ({ title: f.title, edits: f.edits.map((e): TextEdit => ({ range: range(e.range), newText: e.newText })) })) },
  }));
  return inside ? undefined : { findings, deps: result.deps };
}

/**
 * The finding with every range (its own and its fixes') inside the current text: a line past the
 * last one is the last line, a character past a line's end (without its `\r`) is that end.
 * Ranges should never need it; when one does, `report` is told why, and the editor still gets a
 * range it can show instead of an error.
 */
function insideText(model: FileModel, raw: RawFinding, report: (why: string) => void): RawFinding {
  const last = model.lineCount - 1;
  const lengthOf = (line: number): number => {
    const text = model.line(line);
    return text.endsWith('\r') ? text.length - 1 : text.length;
  };
  const fits = (p: Position): boolean => p.line >= 0 && p.line <= last && p.character >= 0 && p.character <= lengthOf(p.line);
  const fitsRange = (r: Range): boolean => fits(r.start) && fits(r.end);
  if (fitsRange(raw.range) && raw.fixes.every((f) => f.edits.every((e) => fitsRange(e.range)))) return raw;
  const clamp = (p: Position): Position => {
    if (fits(p)) return p;
    report(`${p.line}:${p.character} in ${model.lineCount} lines${p.line >= 0 && p.line <= last ? `, that line has ${lengthOf(p.line)} characters` : ''}`);
    const line = Math.min(Math.max(p.line, 0), last);
    return { line, character: Math.min(Math.max(p.character, 0), lengthOf(line)) };
  };
  const range = (r: Range): Range => (fitsRange(r) ? r : { start: clamp(r.start), end: clamp(r.end) });
  return { message: raw.message, range: range(raw.range), fixes: raw.fixes.map((f) => ({ title: f.title, edits: f.edits.map((e) => ({ range: range(e.range), newText: e.newText })) })) };
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

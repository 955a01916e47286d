/**
 * "Apply Best Config": merges a trial's config into a job file's JSON text, key by key at its
 * path (`{"optimizer": {"learningRate": 3e-3}}` sets `/optimizer/learningRate` and leaves the
 * optimizer's other keys alone), with jsonc-parser so that comments, key order and the file's
 * own indentation survive. Pure text in, text (or one minimal edit) out: the VS Code layer turns
 * the edit into a WorkspaceEdit the user can undo.
 */
import { applyEdits, findNodeAtLocation, getNodeValue, modify, parseTree, printParseErrorCode, type FormattingOptions, type Node, type ParseError } from 'jsonc-parser';
import type { Config } from './space';

/** A file the config cannot go into; the message names the file and the JSON path. */
export class ApplyConfigError extends Error {
  override readonly name = 'ApplyConfigError';
}

/** One replacement in the original text, as VS Code's `TextEdit` wants it. */
export interface TextReplacement { readonly offset: number; readonly length: number; readonly content: string }

export interface AppliedConfig {
  /** The whole new text. */
  readonly text: string;
  /** The smallest single replacement that turns the old text into the new one; null when nothing changed. */
  readonly edit: TextReplacement | null;
  /** JSON pointers of the values set, in config order (`/optimizer/learningRate`). */
  readonly paths: readonly string[];
  /** Of those, the ones whose value really changed. */
  readonly changed: readonly string[];
}

/** The file's own indentation (spaces or a tab, as its first indented line has it) and line ending. */
export function detectFormatting(text: string): FormattingOptions {
  const eol = /\r\n/.test(text) ? '\r\n' : '\n';
  const indented = /^([ \t]+)\S/m.exec(text);
  if (indented && indented[1].startsWith('\t')) return { insertSpaces: false, tabSize: 4, eol };
  return { insertSpaces: true, tabSize: indented ? indented[1].length : 2, eol };
}

function pointer(path: readonly (string | number)[]): string {
  return `/${path.map((p) => String(p).replace(/~/g, '~0').replace(/\//g, '~1')).join('/')}`;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Each leaf of the config with its path; arrays are values, not paths. */
function leaves(config: Config, prefix: string[] = []): Array<{ path: string[]; value: unknown }> {
  const out: Array<{ path: string[]; value: unknown }> = [];
  for (const [k, v] of Object.entries(config)) {
    if (isPlainObject(v) && Object.keys(v).length > 0) out.push(...leaves(v, [...prefix, k]));
    else out.push({ path: [...prefix, k], value: v });
  }
  return out;
}

function nodeValueEquals(node: Node | undefined, value: unknown): boolean {
  if (!node) return false;
  const plain = (n: Node): unknown => {
    switch (n.type) {
      case 'object': return Object.fromEntries((n.children ?? []).map((p) => [p.children?.[0]?.value as string, p.children?.[1] ? plain(p.children[1]) : undefined]));
      case 'array': return (n.children ?? []).map(plain);
      default: return n.value as unknown;
    }
  };
  return JSON.stringify(plain(node)) === JSON.stringify(value);
}

/** The common prefix and suffix of two texts, so the edit touches only what changed. */
export function minimalReplacement(before: string, after: string): TextReplacement | null {
  if (before === after) return null;
  let start = 0;
  const max = Math.min(before.length, after.length);
  while (start < max && before.charCodeAt(start) === after.charCodeAt(start)) start++;
  let end = 0;
  while (end < max - start && before.charCodeAt(before.length - 1 - end) === after.charCodeAt(after.length - 1 - end)) end++;
  return { offset: start, length: before.length - start - end, content: after.slice(start, after.length - end) };
}

/**
 * Sets every key of `config` at its path in the JSON (with comments) `text` of `file`.
 * Refuses text that is not a JSON object, and a path that runs through a value that is not an
 * object (`/model/hiddenUnits` when `"model": "mlp"`), naming the file and the path.
 */
export function applyConfigToJson(text: string, config: Config, file = '<job>'): AppliedConfig {
  const errors: ParseError[] = [];
  const root = parseTree(text, errors, { allowTrailingComma: true, disallowComments: false });
  if (errors.length) {
    const e = errors[0];
    const line = text.slice(0, e.offset).split('\n').length;
    throw new ApplyConfigError(`${file}:${line}: not valid JSON (${printParseErrorCode(e.error)}); fix it before applying a config`);
  }
  if (!root || root.type !== 'object') throw new ApplyConfigError(`${file}: /: must be a JSON object to take a config, found ${root ? root.type : 'nothing'}`);
  const formattingOptions = detectFormatting(text);
  let current = text;
  const paths: string[] = [];
  const changed: string[] = [];
  for (const { path, value } of leaves(config)) {
    if (value === undefined) continue;
    const tree = parseTree(current, [], { allowTrailingComma: true }) as Node;
    // Every ancestor that exists must be an object: jsonc-parser would otherwise replace it or throw.
    for (let i = 1; i < path.length; i++) {
      const node = findNodeAtLocation(tree, path.slice(0, i));
      if (!node) break;
      if (node.type !== 'object') {
        throw new ApplyConfigError(`${file}: ${pointer(path.slice(0, i))}: is ${node.type === 'array' ? 'an array' : `a ${node.type}`}, so ${pointer(path)} cannot be set in it`);
      }
    }
    paths.push(pointer(path));
    if (nodeValueEquals(findNodeAtLocation(tree, path), value)) continue;
    changed.push(pointer(path));
    current = applyEdits(current, modify(current, path, value, { formattingOptions }));
  }
  return { text: current, edit: minimalReplacement(text, current), paths, changed };
}

/** A key the experiment held fixed whose value differs from the job file's. */
export interface FixedDifference {
  /** JSON pointer (`/data/mnist/trainSize`). */
  readonly path: string;
  /** The file's value; undefined when the file lacks the key. */
  readonly file: unknown;
  /** The experiment's value. */
  readonly experiment: unknown;
}

export interface BestConfigPlan {
  /** The keys the search varied, with the best trial's values: what Apply Best Config writes. */
  readonly tuned: Config;
  /** The keys the experiment held fixed (its budget: epochs, data size, devices…), not written unless the user asks. */
  readonly fixed: Config;
  /** Of the fixed keys, those whose value differs from the file's, for the user to choose. */
  readonly differences: readonly FixedDifference[];
}

function setAt(target: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let o = target;
  for (const k of path.slice(0, -1)) {
    if (!isPlainObject(o[k])) o[k] = {};
    o = o[k] as Record<string, unknown>;
  }
  o[path[path.length - 1]] = value;
}

/**
 * Splits the best trial's `config` into the keys the search space varies (`varied`, key paths
 * from `Space.variedPaths()`; null when the spec is unknown, so nothing counts as tuned) and the
 * keys it held fixed, and lists the fixed keys whose value differs from the job file's `text`.
 * Throws ApplyConfigError for a file that cannot take the config (as applyConfigToJson).
 */
export function planBestConfig(text: string, config: Config, varied: ReadonlyArray<readonly string[]> | null, file = '<job>'): BestConfigPlan {
  const tuned: Record<string, unknown> = {};
  const fixed: Record<string, unknown> = {};
  const isVaried = (path: readonly string[]): boolean => (varied ?? []).some((v) => v.length <= path.length && v.every((k, i) => path[i] === k));
  for (const { path, value } of leaves(config)) {
    if (value === undefined) continue;
    setAt(isVaried(path) ? tuned : fixed, path, value);
  }
  // Validates the file for both parts; what the fixed part would change is the difference.
  applyConfigToJson(text, tuned, file);
  const changed = new Set(applyConfigToJson(text, fixed, file).changed);
  const tree = parseTree(text, [], { allowTrailingComma: true }) as Node;
  const differences: FixedDifference[] = [];
  for (const { path, value } of leaves(fixed)) {
    if (!changed.has(pointer(path))) continue;
    const node = findNodeAtLocation(tree, path);
    differences.push({ path: pointer(path), file: node ? getNodeValue(node) as unknown : undefined, experiment: value });
  }
  return { tuned, fixed, differences };
}

/** `/strategy "ddp" → "single", /epochs 2 → 4` for a message; a key the file lacks reads "(not set)". */
export function describeDifferences(differences: readonly FixedDifference[]): string {
  const show = (v: unknown): string => {
    if (v === undefined) return '(not set)';
    const j = JSON.stringify(v);
    return j.length > 40 ? `${j.slice(0, 39)}…` : j;
  };
  return differences.map((d) => `${d.path} ${show(d.file)} → ${show(d.experiment)}`).join(', ');
}

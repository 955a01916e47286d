/**
 * Seeded mutations of real Python files, for the robustness checks of the lint engine
 * (test/unit/lint/fuzz.test.ts, a few hundred; bench/lint/fuzz.ts, 100,000): spans deleted,
 * inserted, duplicated and moved; brackets and strings left open; lines re-indented and
 * joined; deep nesting and long lines. Each mutation is one edit of the current text, as an
 * editor makes them, so a series of them exercises the incremental path (re-parse, reused
 * statements, moved findings). Deterministic for a seed; no randomness of its own.
 */
import type { Range } from '../../../src/lint/types';

export type Random = () => number;

export interface Mutation {
  readonly kind: string;
  readonly text: string;
}

const pick = <T>(xs: readonly T[], r: Random): T => xs[Math.floor(r() * xs.length)];
const int = (r: Random, n: number): number => Math.floor(r() * n);

/** Where each line starts (after `\n`). */
function lineStartsOf(t: string): number[] {
  const starts = [0];
  for (let i = t.indexOf('\n'); i !== -1; i = t.indexOf('\n', i + 1)) starts.push(i + 1);
  return starts;
}

/** Snippets that switch facts on and off, or break the syntax. */
const words = ['model', 'loss', 'total', 'evaluate', 'no_grad', 'torch.no_grad()', 'history', 'update', 'append', 'backward()', 'optimizer.step()', '.detach()', '.item()', 'cuda', '(', ')', '[', ']', '{', '}', ':', ',', '\n', '    ', '\t', '"', "'", '"""', '#', '\\', 'lambda', 'def ', 'class ', 'for x in loader:', 'with torch.no_grad():', 'if ', 'else:', 'yield', 'return', 'import torch', '= ', '+= ', '**', '@', 'é', '😀', '\r\n', '\r'];
const statements = ['total += loss', 'history.append(model(x))', 'loss = model(x).sum()', 'loss.backward()', 'model.eval()', 'torch.cuda.empty_cache()', 'model.to(device)', 'sampler.set_epoch(epoch)', 'outs.append(out)', 'hidden = hidden.detach()', 'with torch.no_grad():', 'for x, y in loader:', 'def evaluate(model, loader):', 'class Net(nn.Module):', 'import torch'];

type Mutator = (t: string, r: Random) => string;

const mutators: Record<string, Mutator> = {
  // type a word or a character somewhere
  insertWord: (t, r) => {
    const at = int(r, t.length + 1);
    return t.slice(0, at) + pick(words, r) + t.slice(at);
  },
  deleteSpan: (t, r) => {
    const at = int(r, t.length + 1);
    const n = r() < 0.7 ? 1 + int(r, 12) : 1 + int(r, 2000);
    return t.slice(0, at) + t.slice(at + n);
  },
  // a span of the file pasted elsewhere (a copy)
  insertSpan: (t, r) => {
    const from = int(r, t.length + 1);
    const span = t.slice(from, from + 1 + int(r, 400));
    const at = int(r, t.length + 1);
    return t.slice(0, at) + span + t.slice(at);
  },
  duplicateSpan: (t, r) => {
    const at = int(r, t.length + 1);
    const span = t.slice(at, at + 1 + int(r, 800));
    return t.slice(0, at) + span + span + t.slice(at);
  },
  moveLines: (t, r) => {
    const ls = t.split('\n');
    const i = int(r, ls.length);
    const cut = ls.splice(i, 1 + int(r, 8));
    ls.splice(int(r, ls.length + 1), 0, ...cut);
    return ls.join('\n');
  },
  reindent: (t, r) => {
    const at = pick(lineStartsOf(t), r);
    const k = r();
    if (k < 0.4) return `${t.slice(0, at)}    ${t.slice(at)}`;
    if (k < 0.5) return `${t.slice(0, at)}\t${t.slice(at)}`;
    const n = /^[ \t]*/.exec(t.slice(at, at + 200))?.[0].length ?? 0;
    return t.slice(0, at) + t.slice(at + Math.min(n, 1 + int(r, 8)));
  },
  insertStatement: (t, r) => {
    const starts = lineStartsOf(t);
    const i = int(r, starts.length);
    const indent = /^[ \t]*/.exec(t.slice(starts[i], starts[i] + 200))?.[0] ?? '';
    return `${t.slice(0, starts[i])}${indent}${pick(statements, r)}\n${t.slice(starts[i])}`;
  },
  // an opening bracket or string that is never closed (or a closing one never opened)
  unbalance: (t, r) => {
    const at = int(r, t.length + 1);
    return t.slice(0, at) + pick(['(', '[', '{', ')', ']', '}', '"', "'", '"""', "'''", 'f"{', '(\n'], r) + t.slice(at);
  },
  // lines joined into one (a long line), or one line split
  joinLines: (t, r) => {
    const starts = lineStartsOf(t);
    const i = int(r, starts.length);
    const n = 1 + int(r, r() < 0.9 ? 20 : 2000);
    const end = i + n < starts.length ? starts[i + n] - 1 : t.length;
    const sep = pick([' ', '; ', ''], r);
    return t.slice(0, starts[i]) + t.slice(starts[i], end).replace(/\n[ \t]*/g, sep) + t.slice(end);
  },
  // one long line: an expression or statement repeated
  longLine: (t, r) => {
    const at = pick(lineStartsOf(t), r);
    const n = r() < 0.9 ? 1 + int(r, 200) : 1 + int(r, 20_000);
    const body = pick(['total += loss; ', 'x = model(x); ', 'a + ', '[1, 2], ', 'f(', '(', 'self.', 'loss.'], r).repeat(n);
    return `${t.slice(0, at)}${body}\n${t.slice(at)}`;
  },
  // deep nesting: a line wrapped in nested blocks or brackets
  deepNest: (t, r) => {
    const starts = lineStartsOf(t);
    const i = int(r, starts.length);
    const n = r() < 0.9 ? 1 + int(r, 30) : 1 + int(r, 1000);
    const header = pick(['for x in loader:', 'with torch.no_grad():', 'if x:', 'while True:', 'def f(model, x):', 'try:', 'class C:'], r);
    let block = '';
    for (let k = 0; k < n; k++) block += `${' '.repeat(k)}${header}\n`;
    const line = t.slice(starts[i], i + 1 < starts.length ? starts[i + 1] : t.length).trim();
    if (r() < 0.5) return `${t.slice(0, starts[i])}${block}${' '.repeat(n)}${line || 'pass'}\n${t.slice(starts[i])}`;
    const open = pick(['(', '[', 'f(', '{'], r);
    const close = { '(': ')', '[': ']', 'f(': ')', '{': '}' }[open] as string;
    return `${t.slice(0, starts[i])}x = ${open.repeat(n)}loss${close.repeat(n)}\n${t.slice(starts[i])}`;
  },
  // every occurrence of a name renamed
  rename: (t, r) => {
    const from = pick(['model', 'evaluate', 'loss', 'total', 'loader', 'train', 'history', 'update', 'torch'], r);
    return t.split(from).join(pick(['model', 'evaluate', 'loss', 'total', 'loader', 'net', 'xs', 'cuda'], r));
  },
};

export const mutationKinds: readonly string[] = Object.keys(mutators);

/** One seeded mutation of `text`. */
export function mutate(text: string, r: Random): Mutation {
  const kind = pick(mutationKinds, r);
  return { kind, text: mutators[kind](text, r) };
}

/**
 * Why `range` does not lie inside `text`, or undefined when it does: its lines must exist and
 * its characters lie within them (LSP's units: UTF-16, a line without its line break).
 * Lines end at `\n`, `\r\n` and a lone `\r`, as the editor counts them.
 */
export function rangeProblem(text: string, range: Range, lengths: readonly number[] = lineLengths(text)): string | undefined {
  const { start, end } = range;
  for (const p of [start, end]) {
    if (!Number.isInteger(p.line) || !Number.isInteger(p.character) || p.line < 0 || p.character < 0) return `bad position ${JSON.stringify(p)}`;
    if (p.line >= lengths.length) return `line ${p.line} past the last line (${lengths.length - 1})`;
    if (p.character > lengths[p.line]) return `character ${p.character} past the end of line ${p.line} (length ${lengths[p.line]})`;
  }
  if (start.line > end.line || (start.line === end.line && start.character > end.character)) return 'start after end';
  return undefined;
}

/** Each line's length without its line break (`\r\n`, `\n` or a lone `\r`). */
export function lineLengths(text: string): number[] {
  return text.split(/\r\n|\r|\n/).map((l) => l.length);
}

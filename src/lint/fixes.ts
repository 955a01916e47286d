/** Text edits the rules offer as fixes, and applying them to a text. */
import type { FileModel, FunctionInfo } from './model';
import { descendants, type SyntaxNode } from './syntax';
import { lineStarts } from './text';
import type { Fix, Position, Range, TextEdit } from './types';

export function rangeOf(node: SyntaxNode): Range {
  return { start: { line: node.startRow, character: node.startCol }, end: { line: node.endRow, character: node.endCol } };
}

const primaryTypes = new Set(['identifier', 'attribute', 'call', 'subscript', 'parenthesized_expression']);

/** `loss` -> `loss.item()`; `loss * n` -> `(loss * n).item()`. */
export function appendToExpression(model: FileModel, expr: SyntaxNode, suffix: string): TextEdit {
  if (primaryTypes.has(expr.type)) {
    const at = { line: expr.endRow, character: expr.endCol };
    return { range: { start: at, end: at }, newText: suffix };
  }
  return { range: rangeOf(expr), newText: `(${model.src(expr)})${suffix}` };
}

/** `indentUnit` per file version: asked per fix, a walk of the file each time grew with fixes × file size. */
const indentUnits = new WeakMap<FileModel, string>();

/** The file's indentation unit, from its first indented block; four spaces when there is none. */
export function indentUnit(model: FileModel): string {
  let unit = indentUnits.get(model);
  if (unit === undefined) {
    unit = firstIndent(model);
    indentUnits.set(model, unit);
  }
  return unit;
}

function firstIndent(model: FileModel): string {
  // Statement by statement, in document order: the first indented block is near the top, and
  // listing the whole file's nodes first was a fifth of a re-lint (sharedSignature asks per version).
  for (const top of model.root.children) {
    for (const n of [top, ...descendants(top)]) {
      if (n.type !== 'block' || !n.parent) continue;
      const first = n.children.find((c) => c.named && c.type !== 'comment');
      if (!first || first.startRow === n.parent.startRow) continue;
      const outer = leadingWhitespace(model.line(n.parent.startRow));
      const inner = leadingWhitespace(model.line(first.startRow));
      if (inner.startsWith(outer) && inner.length > outer.length) return inner.slice(outer.length);
    }
  }
  return '    ';
}

export function leadingWhitespace(line: string): string {
  return /^[ \t]*/.exec(line)?.[0] ?? '';
}

/**
 * Wraps whole lines of `stmt` in `header` (e.g. `with torch.no_grad():`), indenting each
 * line one unit, except blank lines and lines inside a multi-line string, whose content
 * would change.
 */
export function wrapStatement(model: FileModel, stmt: SyntaxNode, header: string): TextEdit {
  const unit = indentUnit(model);
  const indent = leadingWhitespace(model.line(stmt.startRow));
  const insideString = new Set<number>();
  for (const d of [stmt, ...descendants(stmt)]) {
    if (d.type === 'string' && d.endRow > d.startRow) for (let r = d.startRow + 1; r <= d.endRow; r++) insideString.add(r);
  }
  const lines: string[] = [];
  for (let r = stmt.startRow; r <= stmt.endRow; r++) {
    const line = model.line(r).replace(/\r$/, '');
    lines.push(line.trim() === '' || insideString.has(r) ? line : unit + line);
  }
  const lastLine = model.line(stmt.endRow).replace(/\r$/, '');
  return {
    range: { start: { line: stmt.startRow, character: 0 }, end: { line: stmt.endRow, character: lastLine.length } },
    newText: `${indent}${header}\n${lines.join('\n')}`,
  };
}

/** Inserts `@decorator` on its own line right above the `def` (inside any other decorators). */
export function addDecorator(model: FileModel, fn: FunctionInfo, decorator: string): TextEdit {
  const row = fn.node.startRow;
  const at = { line: row, character: 0 };
  return { range: { start: at, end: at }, newText: `${leadingWhitespace(model.line(row))}@${decorator}\n` };
}

/** How to spell `torch.<name>` in this file, with the import to add when torch itself is not imported. */
export function torchSpelling(model: FileModel, name: string): { text: string; edits: TextEdit[] } {
  for (const [local, q] of model.aliases) if (q === `torch.${name}`) return { text: local, edits: [] };
  for (const [local, q] of model.aliases) if (q === 'torch') return { text: `${local}.${name}`, edits: [] };
  // Insert `import torch` after the last top-level import (or at the top).
  let row = 0;
  for (const s of model.root.children) {
    if (s.type === 'import_statement' || s.type === 'import_from_statement' || s.type === 'future_import_statement') row = s.endRow + 1;
  }
  const at = { line: row, character: 0 };
  return { text: `torch.${name}`, edits: [{ range: { start: at, end: at }, newText: 'import torch\n' }] };
}

/**
 * Applies non-overlapping edits to `text`, whose lines end at `\r\n`, `\n` or a lone `\r` as in
 * the editor. Overlapping edits after the first are skipped.
 */
export function applyEdits(text: string, edits: readonly TextEdit[]): string {
  const starts = lineStarts(text);
  const offset = (p: Position): number => {
    const base = starts[Math.min(p.line, starts.length - 1)] ?? text.length;
    // A column past the end of its line stops before the line break (both characters of `\r\n`).
    const next = starts[p.line + 1];
    const lineEnd = next === undefined ? text.length : next - (next >= 2 && text[next - 2] === '\r' && text[next - 1] === '\n' ? 2 : 1);
    return p.line >= starts.length ? text.length : Math.min(base + p.character, lineEnd);
  };
  const resolved = edits.map((e, i) => ({ start: offset(e.range.start), end: offset(e.range.end), text: e.newText, i }));
  resolved.sort((a, b) => a.start - b.start || a.end - b.end || a.i - b.i);
  const kept: typeof resolved = [];
  for (const e of resolved) {
    const prev = kept[kept.length - 1];
    if (prev && (e.start < prev.end || (e.start === prev.start && e.end === prev.end && e.text === prev.text))) continue;
    kept.push(e);
  }
  let out = text;
  for (let i = kept.length - 1; i >= 0; i--) out = out.slice(0, kept[i].start) + kept[i].text + out.slice(kept[i].end);
  return out;
}

const before = (a: Position, b: Position): boolean => a.line < b.line || (a.line === b.line && a.character < b.character);
const same = (a: TextEdit, b: TextEdit): boolean =>
  a.newText === b.newText && a.range.start.line === b.range.start.line && a.range.start.character === b.range.start.character && a.range.end.line === b.range.end.line && a.range.end.character === b.range.end.character;
/** Two edits conflict when their ranges overlap (touching is fine) and they are not the same edit. */
function conflicts(a: TextEdit, b: TextEdit): boolean {
  if (same(a, b)) return false;
  return before(a.range.start, b.range.end) && before(b.range.start, a.range.end);
}

/**
 * The edits of as many fixes as can be applied together: a fix is taken whole or not at
 * all, and one that conflicts with an earlier taken fix waits for the next pass.
 */
export function combineFixes(fixes: readonly Fix[]): TextEdit[] {
  const taken: TextEdit[] = [];
  for (const fix of fixes) {
    if (fix.edits.some((e) => taken.some((t) => conflicts(e, t)))) continue;
    for (const e of fix.edits) if (!taken.some((t) => same(t, e))) taken.push(e);
  }
  return taken;
}

/** Deletes a keyword argument (`shuffle=True`) with the comma that separates it. */
export function removeArgument(model: FileModel, arg: SyntaxNode): TextEdit {
  const list = arg.parent;
  const siblings = list ? list.children : [];
  const i = siblings.indexOf(arg);
  let start: SyntaxNode = arg;
  let end: SyntaxNode = arg;
  const prev = siblings[i - 1];
  const next = siblings[i + 1];
  if (prev?.type === ',') start = prev;
  else if (next?.type === ',') end = siblings[i + 2] && siblings[i + 2].type !== ')' ? siblings[i + 2] : next;
  const endPos = end === arg || end.type === ',' ? { line: end.endRow, character: end.endCol } : { line: end.startRow, character: end.startCol };
  void model;
  return { range: { start: { line: start.startRow, character: start.startCol }, end: endPos }, newText: '' };
}

/** Deletes a statement's lines, or replaces it with `pass` when it is alone in its block. */
export function removeStatement(model: FileModel, stmt: SyntaxNode): TextEdit {
  const block = stmt.parent;
  const alone = block?.type === 'block' && block.children.filter((c) => c.named && c.type !== 'comment').length === 1;
  if (alone) return { range: rangeOf(stmt), newText: 'pass' };
  const lastLine = model.line(stmt.endRow);
  if (stmt.endRow + 1 < model.lineCount) return { range: { start: { line: stmt.startRow, character: 0 }, end: { line: stmt.endRow + 1, character: 0 } }, newText: '' };
  return { range: { start: { line: stmt.startRow, character: 0 }, end: { line: stmt.endRow, character: lastLine.length } }, newText: '' };
}

/**
 * Inserts `lines` (without indentation) as the first statements of a compound statement's
 * body, indented like that body. Undefined when the body sits on the header's line
 * (`for e in r: step()`), where a new line would change the meaning.
 */
export function insertAtBodyTop(model: FileModel, compound: SyntaxNode, lines: readonly string[]): TextEdit | undefined {
  const body = compound.children.find((c) => c.field === 'body');
  const first = body?.children.find((c) => c.named && c.type !== 'comment');
  if (!body || !first || first.startRow === compound.startRow) return undefined;
  // Above a leading comment that belongs to the first statement would split them; go above the comment.
  let row = first.startRow;
  for (const c of body.children) if (c.type === 'comment' && c.startRow < row && c.startRow > compound.startRow) row = Math.min(row, c.startRow);
  const indent = leadingWhitespace(model.line(first.startRow));
  const at = { line: row, character: 0 };
  return { range: { start: at, end: at }, newText: lines.map((l) => (l ? `${indent}${l}` : l)).join('\n') + '\n' };
}

/** Where a loop's header ends (its `:`), for a squiggle that does not cover the whole body. */
export function headerRange(compound: SyntaxNode): Range {
  const colon = compound.children.find((c) => c.type === ':');
  const end = colon ?? compound;
  return { start: { line: compound.startRow, character: compound.startCol }, end: { line: end.endRow, character: end.endCol } };
}

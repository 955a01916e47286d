/**
 * Loads tree-sitter (wasm) and the Python grammar once per process.
 *
 * Two layouts must work: the compiled sources under out/ (tests, the CLI run from out/),
 * where the wasm files are in node_modules, and the packaged extension, where webpack's
 * CopyPlugin puts them next to the bundle in dist/ and there is no node_modules.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Edit, Language, Parser, type Tree } from 'web-tree-sitter';

const runtimeWasm = 'web-tree-sitter.wasm';
const pythonWasm = 'tree-sitter-python.wasm';

/** Finds a wasm file next to this module (dist/) or in a node_modules package above it. */
export function locateWasm(file: string, pkg: string, from: string = __dirname): string {
  const tried: string[] = [];
  const beside = join(from, file);
  tried.push(beside);
  if (existsSync(beside)) return beside;
  for (let dir = from; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', pkg, file);
    tried.push(candidate);
    if (existsSync(candidate)) return candidate;
    if (dirname(dir) === dir) break;
  }
  throw new Error(`cannot find ${file}; looked in:\n  ${tried.join('\n  ')}`);
}

let loading: Promise<Language> | undefined;

/** The Python grammar, loaded once. */
export function loadPython(): Promise<Language> {
  loading ??= (async () => {
    const runtime = locateWasm(runtimeWasm, 'web-tree-sitter');
    await Parser.init({ locateFile: () => runtime });
    return Language.load(locateWasm(pythonWasm, 'tree-sitter-python'));
  })();
  return loading;
}

/** A parser that re-parses a document incrementally from its previous tree. */
export class PythonParser {
  private readonly parser: Parser;

  constructor(language: Language) {
    this.parser = new Parser();
    this.parser.setLanguage(language);
  }

  /**
   * Parses `text`. With the previous tree and text, the one changed span is found by
   * comparing prefixes and suffixes, applied with `tree.edit`, and tree-sitter reuses the
   * unchanged subtrees. The previous tree is edited in place and must not be used again.
   */
  parse(text: string, previous?: { tree: Tree; text: string }): Tree {
    let old: Tree | null = null;
    if (previous) {
      previous.tree.edit(diffEdit(previous.text, text));
      old = previous.tree;
    }
    const tree = this.parser.parse(reader(text), old);
    if (!tree) throw new Error('tree-sitter returned no tree');
    return tree;
  }

  /**
   * Like `parse` with a previous tree, and also returns the edit applied and tree-sitter's
   * changed ranges (new-text indexes), for `toSyntax` to reuse unchanged statements. The
   * previous tree is edited in place and must not be used again except to delete it.
   */
  reparse(text: string, previous: { tree: Tree; text: string }): { tree: Tree; edit: Edit; changed: { startIndex: number; endIndex: number }[] } {
    const edit = diffEdit(previous.text, text);
    previous.tree.edit(edit);
    const tree = this.parser.parse(reader(text), previous.tree);
    if (!tree) throw new Error('tree-sitter returned no tree');
    const changed = previous.tree.getChangedRanges(tree).map((r) => ({ startIndex: r.startIndex, endIndex: r.endIndex }));
    return { tree, edit, changed };
  }

  delete(): void {
    this.parser.delete();
  }
}

/**
 * The text for tree-sitter in pieces of `readChunk` characters. Given a string, web-tree-sitter
 * copies up to 5,119 characters into wasm memory at every read, one DataView store per character,
 * wherever tree-sitter asks: an incremental re-parse asks at some 40 places of a 5,000-line file
 * and needs a few characters at most of them (185,000 characters copied for one edit; a whole
 * parse copied each character about twice). Shorter pieces cut the re-parse by about a tenth.
 */
export const readChunk = 1024;

function reader(text: string): (index: number) => string {
  return (index) => text.slice(index, index + readChunk);
}

/** The smallest single edit that turns `before` into `after`. */
export function diffEdit(before: string, after: string): Edit {
  const { start, tail } = commonEnds(before, after);
  const oldEnd = before.length - tail;
  const newEnd = after.length - tail;
  const startPosition = pointAt(before, 0, { row: 0, column: 0 }, start);
  return new Edit({
    startIndex: start,
    oldEndIndex: oldEnd,
    newEndIndex: newEnd,
    startPosition,
    oldEndPosition: pointAt(before, start, startPosition, oldEnd),
    newEndPosition: pointAt(after, start, startPosition, newEnd),
  });
}

/** The lengths of the longest common prefix (`start`) and, in what is left, suffix (`tail`) of two texts. */
export function commonEnds(before: string, after: string): { start: number; tail: number } {
  const max = Math.min(before.length, after.length);
  // Whole blocks first: comparing two slices is one memory compare, not a loop of char reads.
  const block = 512;
  let start = 0;
  while (start + block <= max && before.slice(start, start + block) === after.slice(start, start + block)) start += block;
  while (start < max && before.charCodeAt(start) === after.charCodeAt(start)) start++;
  let tail = 0;
  while (tail + block <= max - start && before.slice(before.length - tail - block, before.length - tail) === after.slice(after.length - tail - block, after.length - tail)) tail += block;
  while (tail < max - start && before.charCodeAt(before.length - 1 - tail) === after.charCodeAt(after.length - 1 - tail)) tail++;
  return { start, tail };
}

/** The row and column of `index`, counting on from `from`, whose position is `at`. */
function pointAt(text: string, from: number, at: { row: number; column: number }, index: number): { row: number; column: number } {
  let row = at.row;
  let lineStart = from - at.column;
  for (let i = text.indexOf('\n', from); i !== -1 && i < index; i = text.indexOf('\n', i + 1)) {
    row++;
    lineStart = i + 1;
  }
  return { row, column: index - lineStart };
}

/**
 * A plain-JS copy of a tree-sitter tree. The rules walk it many times (guards, provenance,
 * call sites); crossing into wasm for every `node.parent` would cost more than the copy,
 * which is one cursor walk per parse. Positions are 0-based rows and UTF-16 columns, the
 * same units as LSP.
 */
import { Parser, type Language, type Tree } from 'web-tree-sitter';
import { openCursor } from './wasmCursor';

export interface SyntaxNode {
  readonly type: string;
  /** The grammar field this node fills in its parent (`left`, `body`, `function`…). */
  readonly field: string | null;
  readonly named: boolean;
  readonly start: number;
  readonly end: number;
  readonly startRow: number;
  readonly startCol: number;
  readonly endRow: number;
  readonly endCol: number;
  readonly children: SyntaxNode[];
  parent: SyntaxNode | null;
  /** Document order of the node's start, for "before / after" questions. */
  readonly order: number;
  /** The function (or the module) whose scope the node is in; set by the file model's index. */
  scope?: SyntaxNode;
}

const typeTables = new WeakMap<Language, { types: string[]; named: boolean[]; fields: (string | null)[] }>();

/** Symbol names and namedness by id, read once per grammar: each cursor getter is a wasm call. */
function tablesFor(language: Language): { types: string[]; named: boolean[]; fields: (string | null)[] } {
  let t = typeTables.get(language);
  if (!t) {
    const types: string[] = [];
    const named: boolean[] = [];
    for (let id = 0; id < language.nodeTypeCount; id++) {
      types.push(language.nodeTypeForId(id) ?? 'ERROR');
      named.push(language.nodeTypeIsNamed(id));
    }
    t = { types, named, fields: language.fields };
    typeTables.set(language, t);
  }
  return t;
}

/** What `toSyntax` may reuse from the previous conversion after an incremental re-parse. */
export interface SyntaxReuse {
  /** The previous conversion's root; its reused statements are moved into the new tree. */
  readonly root: SyntaxNode;
  /** The one edit between the previous text and this one (byte offsets are UTF-16 indexes here). */
  readonly edit: { readonly startIndex: number; readonly oldEndIndex: number; readonly newEndIndex: number };
  /** tree-sitter's changed ranges between the edited previous tree and the new one, in new indexes. */
  readonly changed: readonly { readonly startIndex: number; readonly endIndex: number }[];
}

/**
 * Converts a tree-sitter tree into SyntaxNodes with one cursor walk. Only four cursor
 * getters per node cross into wasm (type id, field id, start and end index); rows and
 * columns come from a line table in JS. The cursor is wasmCursor.ts's direct one once
 * `directChecked` has found it converts a sample as web-tree-sitter's own does (`cursorKind`
 * picks one for tests).
 *
 * With `reuse`, a top-level statement that lies wholly before the edit, or wholly on lines
 * after it, and in no changed range, is the previous conversion's subtree, moved in place
 * (offsets, rows and document order shifted) instead of being walked through wasm again.
 * Those nodes are then no longer valid in the previous tree.
 */
export function toSyntax(tree: Tree, text: string, reuse?: SyntaxReuse, cursorKind: 'direct' | 'public' = directChecked(tree.language) ? 'direct' : 'public'): SyntaxNode {
  const { types, named, fields } = tablesFor(tree.language);
  const lineStarts = [0];
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) lineStarts.push(i + 1);
  // Rows are asked only to tell where a reused statement lies against the edit: a binary search each.
  const rowOf = (index: number): number => rowIn(lineStarts, index);
  // Nothing below calls into tree-sitter except through the cursor, as a direct one requires.
  const cursor = openCursor(tree, cursorKind === 'direct');
  let order = 0;
  const make = (parent: Node | null): Node => {
    const typeId = cursor.nodeTypeId;
    const fieldId = parent ? cursor.currentFieldId : 0;
    // Each top-level statement gets its own shift, shared by all its nodes.
    const shift = parent && parent.parent ? parent.shift : { by: 0, orders: 0, size: 0, depth: 0, lines: lineStarts };
    shift.size++;
    return new Node(typeId === 65535 ? 'ERROR' : (types[typeId] ?? 'ERROR'), fieldId ? (fields[fieldId] ?? null) : null, typeId === 65535 ? true : (named[typeId] ?? true), parent, order++, shift);
  };
  const place = (n: Node, start: number, end: number): void => {
    n.s = start;
    n.e = end;
  };
  const oldByStart = new Map<number, Node>();
  if (reuse) for (const c of reuse.root.children) oldByStart.set(c.start, c as Node);
  const delta = reuse ? reuse.edit.newEndIndex - reuse.edit.oldEndIndex : 0;
  const editEndRow = reuse ? rowOf(reuse.edit.newEndIndex) : 0;
  /** The previous subtree for the top-level node the cursor is on, if it can be reused. */
  const reusable = (start: number, end: number, typeId: number): Node | undefined => {
    if (!reuse) return undefined;
    const { edit, changed } = reuse;
    let old: Node | undefined;
    if (end <= edit.startIndex) old = oldByStart.get(start);
    else if (start >= edit.newEndIndex && rowOf(start) > editEndRow) old = oldByStart.get(start - delta);
    if (!old || old.end !== (end <= edit.startIndex ? end : end - delta) || old.type !== (typeId === 65535 ? 'ERROR' : (types[typeId] ?? 'ERROR'))) return undefined;
    for (const r of changed) if (r.startIndex <= end && r.endIndex >= start) return undefined;
    return old;
  };
  /** Moves a reused statement in place: one update of the shift its nodes share. */
  const move = (old: Node, parent: Node): void => {
    const by = old.start <= (reuse as SyntaxReuse).edit.startIndex && old.end <= (reuse as SyntaxReuse).edit.startIndex ? 0 : delta;
    const shift = old.shift;
    shift.lines = lineStarts;
    shift.orders += order - old.order;
    shift.by += by;
    order += shift.size;
    old.parent = parent;
  };
  // A parent starts where its first child does, so its start need not be read from wasm, except a
  // string's content, whose text before its first escape sequence is no child ('D acc: %.4f\t G acc').
  // Its end must be: some nodes end past their last child (a format specifier's text).
  // Children of the open nodes below the module wait on one scratch array (`marks`: where each open node's begin) and are
  // copied out at its close into an array of their exact length: an array grown by push keeps room for 16 or more, which
  // for a tree of half a million nodes was a fifth of its memory, all of it copied by the young-generation GC.
  // (`used` is its length in use: shortening the array itself made V8 trim and then grow it again, statement after statement.)
  const pending: Node[] = [];
  let used = 0;
  const marks: number[] = [];
  const close = (n: Node): void => {
    const mark = marks.pop() as number;
    n.children = pending.slice(mark, used);
    used = mark;
    place(n, n.type === 'string_content' ? n.s : n.children[0].start, n.e);
  };
  const root = make(null);
  root.children = [];
  const rootStart = cursor.startIndex;
  const rootEnd = cursor.endIndex;
  const stack: Node[] = [root];
  const olds = reuse ? (reuse.root.children as Node[]) : [];
  // The previous statements that lie wholly before the edit and before every changed range: the
  // new tree has the same statements there (tree-sitter's changed ranges cover every difference
  // of structure), so the cursor jumps to the last of them (`gotoDescendant`) instead of stepping
  // over each one (four calls into wasm per statement). Checked on that statement; if it differs,
  // the walk starts from the first statement as without the jump.
  let before = 0;
  if (reuse) {
    let firstChange = reuse.edit.startIndex;
    for (const r of reuse.changed) firstChange = Math.min(firstChange, r.startIndex);
    while (before < olds.length && olds[before].end < firstChange) before++;
  }
  let started = false;
  if (before >= 2) {
    // Its place in the walk: the nodes of the statements before it (a statement's shift counts its nodes), and the root.
    let index = 1;
    for (let i = 0; i < before - 1; i++) index += olds[i].shift.size;
    const last = olds[before - 1];
    cursor.gotoDescendant(index);
    if (cursor.currentDepth === 1 && cursor.startIndex === last.start && cursor.endIndex === last.end && reusable(last.start, last.end, cursor.nodeTypeId) === last) {
      for (let i = 0; i < before; i++) {
        move(olds[i], root);
        root.children.push(olds[i]);
      }
      started = cursor.gotoNextSibling();
    } else {
      cursor.gotoDescendant(0);
      before = 0;
    }
  }
  if (before < 2) started = cursor.gotoFirstChild();
  // From this index on, every previous statement lies after the edit's last row and after every
  // changed range: once the walk has reused one of them, the new tree's statements after it are
  // the rest of them (as before the edit), moved in without being visited.
  let after = olds.length;
  if (reuse) {
    const { edit, changed } = reuse;
    while (after > 0) {
      const o = olds[after - 1];
      const start = o.start + delta;
      if (o.start < edit.oldEndIndex || start < edit.newEndIndex || rowOf(start) <= editEndRow || changed.some((r) => r.startIndex <= o.end + delta && r.endIndex >= start)) break;
      after--;
    }
  }
  // Iterative pre-order walk: deep expressions must not overflow the JS stack.
  if (started) {
    for (;;) {
      const parent = stack[stack.length - 1];
      if (stack.length === 1 && reuse) {
        const old = reusable(cursor.startIndex, cursor.endIndex, cursor.nodeTypeId);
        if (old) {
          // One of the statements after which every one is reusable (compared before it moves: `olds` are in order).
          let at = after < olds.length && old.start >= olds[after].start ? after : -1;
          while (at !== -1 && at < olds.length && olds[at] !== old) at++;
          move(old, parent);
          parent.children.push(old);
          if (at !== -1 && at < olds.length) {
            for (let i = at + 1; i < olds.length; i++) {
              move(olds[i], parent);
              parent.children.push(olds[i]);
            }
            break;
          }
          if (cursor.gotoNextSibling()) continue;
          break;
        }
      }
      const node = make(parent);
      if (parent === root) root.children.push(node);
      else pending[used++] = node;
      // The nesting of each top-level statement: the depth of its deepest node (nestingOf).
      const top = stack.length === 1 ? node : stack[1];
      if (stack.length > top.shift.depth) top.shift.depth = stack.length;
      const end = cursor.endIndex;
      if (node.type === 'string_content') node.s = cursor.startIndex;
      if (cursor.gotoFirstChild()) {
        node.e = end;
        stack.push(node);
        marks.push(used);
        continue;
      }
      place(node, cursor.startIndex, end);
      let done = false;
      while (!cursor.gotoNextSibling()) {
        if (!cursor.gotoParent() || stack.length === 1) {
          done = true;
          break;
        }
        close(stack.pop() as Node);
      }
      if (done) break;
    }
  }
  cursor.delete();
  place(root, rootStart, rootEnd);
  return root;
}

/** Text whose conversion the direct cursor must get right before it is used: fields, errors, a missing node, a format specifier, non-ASCII. */
const sample = 'import a.b as c\n@d(e=1)\nclass F(G, metaclass=H):\n    def f(self, x: int = 2, *a, **k) -> None:\n        for i, j in zip(x, y):\n            s = f"{i!r:>{j}} h\u00e9\u{1F600}"\n            y[i:j] += lambda q: (q if q else -q)\ndef g(:\n  x = (\nwith open(p) as f, g() as h: pass\nprint(1 +\n';

let checked: boolean | undefined;

/**
 * Whether the direct wasm cursor (wasmCursor.ts) converts a sample exactly as web-tree-sitter's
 * public cursor does; checked once per process. When it does not, every conversion uses the public one.
 */
export function directChecked(language: Language): boolean {
  if (checked !== undefined) return checked;
  checked = false;
  const parser = new Parser();
  try {
    parser.setLanguage(language);
    const tree = parser.parse(sample);
    if (!tree) return checked;
    try {
      const shape = (root: SyntaxNode): string => [root, ...descendants(root)].map((n) => `${n.type} ${n.field} ${n.named} ${n.start}-${n.end} ${n.startRow}:${n.startCol}-${n.endRow}:${n.endCol} ${n.order} ${n.parent?.order}`).join('\n');
      const want = shape(toSyntax(tree, sample, undefined, 'public'));
      checked = want === shape(toSyntax(tree, sample, undefined, 'direct'));
    } finally {
      tree.delete();
    }
  } catch {
    checked = false;
  } finally {
    parser.delete();
  }
  return checked;
}

const noChildren: Node[] = Object.freeze([]) as unknown as Node[];

/**
 * How far a reused statement has moved since its nodes were made, and how many nodes it has; the line starts of the
 * text it is now in, from which its nodes' rows and columns are read; and how deep it nests (`nestingOf`).
 */
interface Shift {
  by: number;
  orders: number;
  size: number;
  depth: number;
  lines: readonly number[];
}

/** The row of a text index, in the text's line starts (binary search). */
function rowIn(lines: readonly number[], index: number): number {
  let lo = 0;
  let hi = lines.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (lines[mid] <= index) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/**
 * A node's offsets are stored as made and read through its statement's shift, so a statement
 * reused after an edit moves in O(1) instead of rewriting every node; its rows and columns are
 * looked up in the line starts of the text it is now in (the shift's), as asked: the rules ask for
 * a few thousand of them in a whole-file lint, and four more fields on each of half a million nodes
 * were a fifth of the tree's memory, all of it copied by the young-generation GC.
 */
class Node implements SyntaxNode {
  s = 0;
  e = 0;
  /** A leaf's is the shared empty array (`noChildren`, frozen): most nodes are leaves, and every node is kept as long as its file version. */
  children: Node[] = noChildren;
  scope: SyntaxNode | undefined = undefined;

  constructor(
    readonly type: string,
    readonly field: string | null,
    readonly named: boolean,
    public parent: Node | null,
    private readonly o: number,
    readonly shift: Shift,
  ) {}

  get start(): number {
    return this.s + this.shift.by;
  }

  get end(): number {
    return this.e + this.shift.by;
  }

  get startRow(): number {
    return rowIn(this.shift.lines, this.start);
  }

  get endRow(): number {
    return rowIn(this.shift.lines, this.end);
  }

  get startCol(): number {
    const start = this.start;
    return start - this.shift.lines[rowIn(this.shift.lines, start)];
  }

  get endCol(): number {
    const end = this.end;
    return end - this.shift.lines[rowIn(this.shift.lines, end)];
  }

  get order(): number {
    return this.o + this.shift.orders;
  }
}

/** How deep a top-level statement's tree goes below the module (1 for a leaf); 0 for other nodes. */
export function nestingOf(top: SyntaxNode): number {
  return top instanceof Node && top.parent !== null && top.parent.parent === null ? top.shift.depth : 0;
}

export function child(node: SyntaxNode, field: string): SyntaxNode | undefined {
  return node.children.find((c) => c.field === field);
}

export function childrenOf(node: SyntaxNode, field: string): SyntaxNode[] {
  return node.children.filter((c) => c.field === field);
}

export function namedChildren(node: SyntaxNode): SyntaxNode[] {
  return node.children.filter((c) => c.named && c.type !== 'comment' && c.type !== 'line_continuation');
}

/**
 * Every descendant (not the node itself) in document order, iteratively, appended to `out`
 * (a new array by default); a node for which `skip` is true is listed but not entered. An array, not a generator: resuming a generator
 * per node cost more than the walk itself (3.5% of a whole-file lint was its own time), and
 * most callers read the whole subtree or spread it into an array anyway.
 */
export function descendants(node: SyntaxNode, skip?: (n: SyntaxNode) => boolean, out: SyntaxNode[] = []): SyntaxNode[] {
  const stack: SyntaxNode[] = [];
  for (let i = node.children.length - 1; i >= 0; i--) stack.push(node.children[i]);
  while (stack.length > 0) {
    const n = stack.pop() as SyntaxNode;
    out.push(n);
    if (skip?.(n)) continue;
    const children = n.children;
    for (let i = children.length - 1; i >= 0; i--) stack.push(children[i]);
  }
  return out;
}

/**
 * The node's ancestors, innermost first. An array, not a generator: asked for most calls and
 * statements, a generator's object and one result object per step were a tenth of what a
 * whole-file lint allocated through `ancestors`, and resuming it cost more than the walk.
 */
export function ancestors(node: SyntaxNode): SyntaxNode[] {
  const out: SyntaxNode[] = [];
  for (let p = node.parent; p; p = p.parent) out.push(p);
  return out;
}

export function contains(outer: SyntaxNode, inner: SyntaxNode): boolean {
  return inner.start >= outer.start && inner.end <= outer.end && (inner !== outer);
}

export const isScopeNode = (n: SyntaxNode): boolean => n.type === 'function_definition' || n.type === 'class_definition' || n.type === 'lambda';

/** Strips parentheses: `((x))` -> `x`. */
export function unparen(node: SyntaxNode): SyntaxNode {
  let n = node;
  while (n.type === 'parenthesized_expression') {
    const inner = namedChildren(n)[0];
    if (!inner) break;
    n = inner;
  }
  return n;
}

/** The statement a node belongs to: the ancestor-or-self whose parent is a block or the module. */
export function statementOf(node: SyntaxNode): SyntaxNode | undefined {
  for (let n: SyntaxNode | null = node; n; n = n.parent) {
    if (n.parent && (n.parent.type === 'block' || n.parent.type === 'module')) return n;
  }
  return undefined;
}

export const loopTypes = new Set(['for_statement', 'while_statement']);

/** The container a subscripted target writes into: `d[k]` -> `d`; `self.hist[-1]` -> `self.hist`. */
export function baseOf(target: SyntaxNode): SyntaxNode {
  let n = unparen(target);
  while (n.type === 'subscript') {
    const v = child(n, 'value');
    if (!v) break;
    n = unparen(v);
  }
  return n;
}

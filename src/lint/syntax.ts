/**
 * A plain-JS copy of a tree-sitter tree. The rules walk it many times (guards, provenance,
 * call sites); crossing into wasm for every `node.parent` would cost more than the copy,
 * which is one cursor walk per parse. Positions are 0-based rows and UTF-16 columns, the
 * same units as LSP.
 */
import type { Tree } from 'web-tree-sitter';

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
}

/** Converts a tree-sitter tree into SyntaxNodes with one cursor walk. */
export function toSyntax(tree: Tree): SyntaxNode {
  const cursor = tree.walk();
  let order = 0;
  const make = (parent: SyntaxNode | null): SyntaxNode => {
    const sp = cursor.startPosition;
    const ep = cursor.endPosition;
    return {
      type: cursor.nodeType,
      field: cursor.currentFieldName,
      named: cursor.nodeIsNamed,
      start: cursor.startIndex,
      end: cursor.endIndex,
      startRow: sp.row,
      startCol: sp.column,
      endRow: ep.row,
      endCol: ep.column,
      children: [],
      parent,
      order: order++,
    };
  };
  const root = make(null);
  const stack: SyntaxNode[] = [root];
  // Iterative pre-order walk: deep expressions must not overflow the JS stack.
  if (cursor.gotoFirstChild()) {
    for (;;) {
      const parent = stack[stack.length - 1];
      const node = make(parent);
      parent.children.push(node);
      if (cursor.gotoFirstChild()) {
        stack.push(node);
        continue;
      }
      while (!cursor.gotoNextSibling()) {
        if (!cursor.gotoParent() || stack.length === 1) {
          cursor.delete();
          return root;
        }
        stack.pop();
      }
    }
  }
  cursor.delete();
  return root;
}

export function child(node: SyntaxNode, field: string): SyntaxNode | undefined {
  return node.children.find((c) => c.field === field);
}

export function childrenOf(node: SyntaxNode, field: string): SyntaxNode[] {
  return node.children.filter((c) => c.field === field);
}

export function namedChildren(node: SyntaxNode): SyntaxNode[] {
  return node.children.filter((c) => c.named && c.type !== 'comment');
}

/** Every descendant (not the node itself) in document order, iteratively. */
export function* descendants(node: SyntaxNode, skip?: (n: SyntaxNode) => boolean): Generator<SyntaxNode> {
  const stack: SyntaxNode[] = [...node.children].reverse();
  while (stack.length) {
    const n = stack.pop() as SyntaxNode;
    yield n;
    if (skip?.(n)) continue;
    for (let i = n.children.length - 1; i >= 0; i--) stack.push(n.children[i]);
  }
}

export function* ancestors(node: SyntaxNode): Generator<SyntaxNode> {
  for (let p = node.parent; p; p = p.parent) yield p;
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

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { TreeCursor, type Node } from 'web-tree-sitter';
import { loadPython, PythonParser } from '../../../src/lint/parser';
import { descendants, directChecked, toSyntax, type SyntaxNode } from '../../../src/lint/syntax';
import { WasmCursor } from '../../../src/lint/wasmCursor';
import { lintFixtures, readFixtures } from './corpus';
import { mulberry32 } from '../../../src/common/random';

describe('toSyntax', () => {
  it('copies every node with the type, field and position tree-sitter gives it', async () => {
    const parser = new PythonParser(await loadPython());
    const texts = [...readFixtures(join(lintFixtures, 'good')), ...readFixtures(join(lintFixtures, 'bad'))].map((f) => f.text);
    // A string's content starts before its first escape sequence, which is its first child.
    texts.push('print("D acc: %.4f\\t G acc: %.4f" % (d, g))\n', 's = "h\u00e9llo\u{1F600}"; x = 1\n', 'def f(:\n  x = (\nfor\n y += loss\n', '', '\n\n# only a comment\n', 'x = (1 +\n');
    for (const text of texts) {
      const tree = parser.parse(text);
      const ours: SyntaxNode[] = [];
      const root = toSyntax(tree, text);
      ours.push(root, ...descendants(root));
      const theirs: { node: Node; field: string | null }[] = [];
      const visit = (n: Node, field: string | null) => {
        theirs.push({ node: n, field });
        n.children.forEach((c, i) => visit(c, n.fieldNameForChild(i)));
      };
      visit(tree.rootNode, null);
      assert.equal(ours.length, theirs.length);
      ours.forEach((o, i) => {
        const t = theirs[i].node;
        const want = { type: t.type, field: theirs[i].field, start: t.startIndex, end: t.endIndex, startRow: t.startPosition.row, startCol: t.startPosition.column, endRow: t.endPosition.row, endCol: t.endPosition.column };
        const got = { type: o.type, field: o.field, start: o.start, end: o.end, startRow: o.startRow, startCol: o.startCol, endRow: o.endRow, endCol: o.endCol };
        assert.deepEqual(got, want, `node ${i} of ${JSON.stringify(text.slice(0, 40))}`);
      });
      tree.delete();
    }
    parser.delete();
  });

  /** Every node's type, field, positions and document order, in walk order. */
  const shape = (root: SyntaxNode): string[] => [root, ...descendants(root)].map((n) => `${n.type} ${n.field} ${n.start}-${n.end} ${n.startRow}:${n.startCol}-${n.endRow}:${n.endCol} #${n.order}`);

  it('after seeded random edits, a conversion that reuses the previous one equals a fresh one', async () => {
    const parser = new PythonParser(await loadPython());
    const texts = readFixtures(join(lintFixtures, 'bad')).map((f) => f.text);
    const r = mulberry32(7);
    const snippets = ['x', '\n', '    ', '(', ')', '"""', '#', 'def g():\n    pass\n', 'class C:\n', '\n\n', ':', 'if x:\n'];
    let text = texts.slice(0, 12).join('\n');
    let tree = parser.parse(text);
    let root = toSyntax(tree, text);
    try {
      for (let i = 0; i < 150; i++) {
        const at = Math.floor(r() * text.length);
        const k = r();
        const next = k < 0.5 ? text.slice(0, at) + snippets[Math.floor(r() * snippets.length)] + text.slice(at) : k < 0.8 ? text.slice(0, at) + text.slice(at + 1 + Math.floor(r() * 40)) : text.slice(0, at) + text.slice(at).replace(/\n/, '\n\n');
        const re = parser.reparse(next, { tree, text });
        tree.delete();
        tree = re.tree;
        root = toSyntax(tree, next, { root, edit: re.edit, changed: re.changed });
        const fresh = parser.parse(next);
        assert.deepEqual(shape(root), shape(toSyntax(fresh, next)), `edit ${i + 1}`);
        fresh.delete();
        text = next;
      }
    } finally {
      tree.delete();
      parser.delete();
    }
  });

  it('does not step through the statements before and after an edit in the new tree (they are the previous ones, moved)', async () => {
    const parser = new PythonParser(await loadPython());
    const text = Array.from({ length: 300 }, (_, i) => `def f${i}(x):\n    return x + ${i}\n`).join('\n');
    const tree = parser.parse(text);
    const root = toSyntax(tree, text);
    const at = text.indexOf('x + 150');
    const next = `${text.slice(0, at)}y${text.slice(at)}`;
    const re = parser.reparse(next, { tree, text });
    let steps = 0;
    // Whichever cursor toSyntax uses (wasmCursor.ts's direct one, or web-tree-sitter's own).
    // eslint-disable-next-line @typescript-eslint/unbound-method -- saved to be put back, and called with its `this`
    const step = TreeCursor.prototype.gotoNextSibling;
    // eslint-disable-next-line @typescript-eslint/unbound-method -- saved to be put back, and called with its `this`
    const directStep = WasmCursor.prototype.gotoNextSibling;
    TreeCursor.prototype.gotoNextSibling = function (this: TreeCursor): boolean {
      steps++;
      return step.call(this);
    };
    WasmCursor.prototype.gotoNextSibling = function (this: WasmCursor): boolean {
      steps++;
      return directStep.call(this);
    };
    let reused: SyntaxNode;
    try {
      reused = toSyntax(re.tree, next, { root, edit: re.edit, changed: re.changed });
    } finally {
      TreeCursor.prototype.gotoNextSibling = step;
      WasmCursor.prototype.gotoNextSibling = directStep;
    }
    const fresh = parser.parse(next);
    assert.deepEqual(shape(reused), shape(toSyntax(fresh, next)));
    // The edited statement's own nodes, and the step from one statement to the next around it: not one per statement.
    assert.ok(steps < 40, `${steps} steps`);
    for (const t of [tree, re.tree, fresh]) t.delete();
    parser.delete();
  });

  it('walks the tree with the direct wasm cursor, not web-tree-sitter\'s TreeCursor (which copies the cursor into wasm memory and back at every call)', async () => {
    const language = await loadPython();
    assert.equal(directChecked(language), true, 'the direct cursor converts the sample as the public one does (web-tree-sitter 0.27)');
    const parser = new PythonParser(language);
    const text = readFixtures(join(lintFixtures, 'bad')).map((f) => f.text).join('\n');
    const tree = parser.parse(text);
    const counted = ['gotoFirstChild', 'gotoNextSibling', 'gotoParent'] as const;
    // eslint-disable-next-line @typescript-eslint/unbound-method -- saved to be put back, and called with their `this`
    const saved = counted.map((m) => TreeCursor.prototype[m]);
    let publicCalls = 0;
    counted.forEach((m, i) => {
      TreeCursor.prototype[m] = function (this: TreeCursor): boolean {
        publicCalls++;
        return saved[i].call(this);
      };
    });
    let root: SyntaxNode;
    try {
      root = toSyntax(tree, text);
    } finally {
      counted.forEach((m, i) => (TreeCursor.prototype[m] = saved[i]));
    }
    assert.equal(publicCalls, 0);
    assert.deepEqual(shape(root), shape(toSyntax(tree, text, undefined, 'public')));
    tree.delete();
    parser.delete();
  });

  it('converts every fixture, malformed text and a chain of edits the same with the direct and the public cursor', async () => {
    const parser = new PythonParser(await loadPython());
    // `bad` has the malformed files too (malformed_*.py).
    const texts = [...readFixtures(join(lintFixtures, 'good')), ...readFixtures(join(lintFixtures, 'bad'))].map((f) => f.text);
    texts.push('', '\n', 'x = (1 +\n', 'def f(:\n  x = (\nfor\n y += loss\n', `${'('.repeat(300)}1${')'.repeat(300)}\n`, 'f"{a!r:{b}>{c}}" + "\u00e9\u{1F600}"\n');
    for (const text of texts) {
      const tree = parser.parse(text);
      assert.deepEqual(shape(toSyntax(tree, text, undefined, 'direct')), shape(toSyntax(tree, text, undefined, 'public')), JSON.stringify(text.slice(0, 40)));
      tree.delete();
    }
    // Reusing the previous conversion (the jump with gotoDescendant, currentDepth) after seeded edits.
    const r = mulberry32(11);
    let text = texts.slice(0, 8).join('\n');
    let tree = parser.parse(text);
    const roots = { direct: toSyntax(tree, text, undefined, 'direct'), public: toSyntax(tree, text, undefined, 'public') };
    try {
      for (let i = 0; i < 60; i++) {
        const at = Math.floor(r() * text.length);
        const next = r() < 0.6 ? `${text.slice(0, at)}${['x', '\n', '(', 'def g():\n    pass\n'][Math.floor(r() * 4)]}${text.slice(at)}` : text.slice(0, at) + text.slice(at + 1 + Math.floor(r() * 30));
        const re = parser.reparse(next, { tree, text });
        tree.delete();
        tree = re.tree;
        roots.direct = toSyntax(tree, next, { root: roots.direct, edit: re.edit, changed: re.changed }, 'direct');
        roots.public = toSyntax(tree, next, { root: roots.public, edit: re.edit, changed: re.changed }, 'public');
        assert.deepEqual(shape(roots.direct), shape(roots.public), `edit ${i + 1}`);
        text = next;
      }
    } finally {
      tree.delete();
      parser.delete();
    }
  });
});

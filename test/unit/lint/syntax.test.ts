import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { Node } from 'web-tree-sitter';
import { loadPython, PythonParser } from '../../../src/lint/parser';
import { descendants, toSyntax, type SyntaxNode } from '../../../src/lint/syntax';
import { lintFixtures, readFixtures } from './corpus';

describe('toSyntax', () => {
  it('copies every node with the type, field and position tree-sitter gives it', async () => {
    const parser = new PythonParser(await loadPython());
    const texts = [...readFixtures(join(lintFixtures, 'good')), ...readFixtures(join(lintFixtures, 'bad'))].map((f) => f.text);
    texts.push('s = "h\u00e9llo\u{1F600}"; x = 1\n', 'def f(:\n  x = (\nfor\n y += loss\n', '', '\n\n# only a comment\n', 'x = (1 +\n');
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
});

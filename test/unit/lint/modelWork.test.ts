/**
 * Work and allocation the model's machinery does per question (issue #13: whole-file lint
 * speed). Not timed: each test counts what is made or read, and checks that the answers are
 * those of the plain computation.
 */
import assert from 'node:assert/strict';
import { recorded, recordingNow, recordRoot, replay, track, unrecorded } from '../../../src/lint/deps';
import { FileModel } from '../../../src/lint/model';
import { loadPython, PythonParser } from '../../../src/lint/parser';
import { descendants, toSyntax, type SyntaxNode } from '../../../src/lint/syntax';
import { Workspace } from '../../../src/lint/workspace';

/** A file's model, parsed from `text` the way the linter builds it. */
function modelOf(parser: PythonParser, path: string, text: string): { model: FileModel; root: SyntaxNode } {
  const tree = parser.parse(text);
  const root = toSyntax(tree, text);
  tree.delete();
  return { model: new FileModel(path, text, root, new Workspace()), root };
}

/** Runs `body` with every text the models read (`FileModel.src`) listed in `read`, in order. */
function readingSrc<T>(body: (read: string[]) => T): T {
  // eslint-disable-next-line @typescript-eslint/unbound-method -- saved to be put back, and called with its `this`
  const src = FileModel.prototype.src;
  const read: string[] = [];
  FileModel.prototype.src = function (this: FileModel, node: SyntaxNode) {
    const s = src.call(this, node);
    read.push(s);
    return s;
  };
  try {
    return body(read);
  } finally {
    FileModel.prototype.src = src;
  }
}

describe('lint deps: key sets made only for recordings that record a key (issue #13)', () => {
  it('gives every recording that looks nothing up one shared empty key set, which refuses keys', () => {
    const sets: (Set<string> | undefined)[] = [];
    recordRoot(() => {
      for (let i = 0; i < 3; i++) sets.push(recorded(() => i).deps);
    });
    const root = recordRoot(() => 0).deps;
    assert.equal(sets[0]?.size, 0);
    assert.ok(sets.every((s) => s === root), 'a new set per empty recording');
    assert.throws(() => root.add('fn:f'), /cannot take 'fn:f'/);
  });

  it('still adds a nested recording’s keys, and replayed ones, to every enclosing recording', () => {
    let inner: Set<string> | undefined;
    let middle: Set<string> | undefined;
    const root = recordRoot(() => {
      middle = recorded(() => {
        inner = recorded(() => track('fn:a')).deps;
        replay(new Set(['cls:B']));
        // A fact computed outside any recording records nothing, inside or after it.
        unrecorded(() => {
          assert.equal(recordingNow(), false);
          track('fn:hidden');
          recorded(() => track('fn:hidden2'));
        });
        assert.equal(recordingNow(), true);
      }).deps;
      track('root:x');
    }).deps;
    assert.deepEqual([...(inner ?? [])], ['fn:a']);
    assert.deepEqual([...(middle ?? [])].sort(), ['cls:B', 'fn:a']);
    assert.deepEqual([...root].sort(), ['cls:B', 'fn:a', 'root:x']);
    assert.equal(recordingNow(), false);
    assert.equal(recorded(() => track('fn:z')).deps, undefined);
  });

  it('restores the enclosing recording when a computation throws', () => {
    const root = recordRoot(() => {
      track('fn:before');
      assert.throws(() =>
        recorded(() => {
          track('fn:inside');
          throw new Error('boom');
        }),
      );
      track('fn:after');
    }).deps;
    assert.deepEqual([...root].sort(), ['fn:after', 'fn:before', 'fn:inside']);
  });
});

describe('lint model: an attribute qualified once per file version (issue #13)', () => {
  let parser: PythonParser;
  before(async () => {
    parser = new PythonParser(await loadPython());
  });
  after(() => parser.delete());

  it('reads an attribute callee’s text once however often it is qualified, with the same answer', () => {
    const text = 'import torch.nn as nn\nfrom torch import optim as o\n\nlayer = nn.modules.Linear(4, 4)\nopt = o.SGD(layer.parameters())\nx = (nn).ReLU()\n';
    const { model, root } = modelOf(parser, '/ws/q.py', text);
    const callees = descendants(root)
      .filter((n) => n.type === 'call')
      .map((c) => model.callee(c) as SyntaxNode);
    readingSrc((read) => {
      const first = callees.map((c) => model.qualify(c));
      const readsFirst = read.length;
      const again = callees.map((c) => model.qualify(c));
      assert.deepEqual(first, ['torch.nn.modules.Linear', 'torch.optim.SGD', 'layer.parameters', 'torch.nn.ReLU']);
      assert.deepEqual(again, first);
      assert.ok(readsFirst > 0);
      assert.equal(read.length, readsFirst, 'the attributes were read again');
    });
  });
});

describe('lint model: one-token statements under the module (error debris) indexed without lists of their own (issue #13)', () => {
  let parser: PythonParser;
  before(async () => {
    parser = new PythonParser(await loadPython());
  });
  after(() => parser.delete());

  /** `x = evaluate(evaluate(evaluate(…` never closed: tree-sitter puts each name and bracket straight under the module, one statement each. */
  function debris(n: number): string {
    return `import torch\n\n\ndef evaluate(model, x):\n    return model(x)\n\n\nx = ${'evaluate('.repeat(n)}\n`;
  }

  function index(text: string): { model: FileModel; scopesMade: number; workspace: Workspace } {
    const tree = parser.parse(text);
    const root = toSyntax(tree, text);
    tree.delete();
    const newScope = (FileModel.prototype as unknown as { newScope: () => unknown }).newScope;
    let scopesMade = 0;
    (FileModel.prototype as unknown as { newScope: () => unknown }).newScope = function (this: FileModel) {
      scopesMade++;
      return newScope.call(this);
    };
    try {
      const workspace = new Workspace();
      const model = new FileModel('/ws/debris.py', text, root, workspace);
      workspace.set(model);
      return { model, scopesMade, workspace };
    } finally {
      (FileModel.prototype as unknown as { newScope: () => unknown }).newScope = newScope;
    }
  }

  it('makes no scope per one-token statement, and still counts a bare name as a reference', () => {
    const small = index(debris(10));
    const large = index(debris(1000));
    assert.ok(large.model.root.children.length > 2000, `only ${large.model.root.children.length} statements: the debris is not under the module`);
    // The same scopes for 100× the debris: the module's, the function's, and the `print(` statement's.
    assert.equal(large.scopesMade, small.scopesMade);
    // Each bare `evaluate` is a use of the function as a value (it may be called from anywhere), as before.
    assert.equal(large.workspace.valueReferences('evaluate').length, 1000);
    assert.equal(small.workspace.valueReferences('evaluate').length, 10);
  });
});

describe('lint model: accumulation reads a target’s text only where it compares it (issue #13)', () => {
  let parser: PythonParser;
  before(async () => {
    parser = new PythonParser(await loadPython());
  });
  after(() => parser.delete());

  it('copies no text for an assignment that is no accumulation, and still finds `total = total + loss` and `+=`', () => {
    const text = 'import torch\n\ndef step(model, x, total, loss):\n    out1 = model(x)\n    out2 = x.sum()\n    out3 = [x, x]\n    total = total + loss\n    total += loss\n    parts = torch.cat([parts, x])\n';
    const { model, root } = modelOf(parser, '/ws/acc.py', text);
    const statements = descendants(root).filter((n) => n.type === 'expression_statement');
    readingSrc((read) => {
      const found = statements.map((s) => model.accumulation(s));
      assert.deepEqual(
        found.map((a) => (a ? `${a.kind} ${model.text.slice(a.target.start, a.target.end)} ${model.text.slice(a.value.start, a.value.end)}` : '-')),
        ['-', '-', '-', 'add total loss', 'add total loss', 'cat parts x'],
      );
      // The three plain assignments' targets are not read.
      assert.ok(!read.some((r) => /^out/.test(r)), `read ${JSON.stringify(read)}`);
    });
  });
});

describe('lint model: an evaluation loop recognised once per loop (issue #13)', () => {
  let parser: PythonParser;
  before(async () => {
    parser = new PythonParser(await loadPython());
  });
  after(() => parser.delete());

  it('reads a `for` loop’s iterable once however many nodes inside it ask, with the same answers', () => {
    const text = 'def evaluate(model, val_loader, train_loader):\n    for x in val_loader:\n        y = model(x)\n        z = y.sum()\n    for x in train_loader:\n        y = model(x)\n';
    const { model, root } = modelOf(parser, '/ws/loop.py', text);
    const inside = descendants(root).filter((n) => n.type === 'identifier' && n.startRow >= 2);
    readingSrc((read) => {
      const rows = inside.map((n) => model.evalLoaderLoopOf(n)?.startRow ?? -1);
      assert.deepEqual(rows, inside.map((n) => (n.startRow <= 3 ? 1 : -1)));
      assert.equal(read.filter((r) => r === 'val_loader').length, 1);
      assert.equal(read.filter((r) => r === 'train_loader').length, 1);
    });
  });
});

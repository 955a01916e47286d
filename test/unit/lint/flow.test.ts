import assert from 'node:assert/strict';
import { FileModel } from '../../../src/lint/model';
import { loadPython, PythonParser } from '../../../src/lint/parser';
import { descendants, toSyntax, type SyntaxNode } from '../../../src/lint/syntax';
import { Workspace } from '../../../src/lint/workspace';

/**
 * Reaching definitions (src/lint/model/flow.ts): each case marks a use with `# use` and the
 * definitions that must reach it with `# def`; every other definition of the name must not.
 */
describe('reaching definitions', () => {
  let parser: PythonParser;
  before(async () => {
    parser = new PythonParser(await loadPython());
  });
  after(() => parser.delete());

  /** The rows (1-based) of the definitions of `name` that reach the last `# use` line's occurrence of it. */
  function reaching(text: string, name: string): { rows: number[]; entry: boolean } {
    const tree = parser.parse(text);
    const root = toSyntax(tree, text);
    tree.delete();
    const model = new FileModel('/ws/flow.py', text, root, new Workspace());
    const lines = text.split('\n');
    const row = lines.map((l, i) => (/#.*\buse\b/.test(l) ? i : -1)).filter((i) => i >= 0).pop() as number;
    const use = [...descendants(root)].find((n: SyntaxNode) => n.type === 'identifier' && n.startRow === row && model.src(n) === name);
    assert.ok(use, `no use of ${name} on a # use line`);
    const r = model.reachingDefs(name, use);
    assert.ok(r, `no definitions of ${name} in the scope`);
    return { rows: r.defs.map((d) => d.target.startRow + 1).sort((a, b) => a - b), entry: r.entry };
  }

  const marked = (text: string): number[] => text.split('\n').flatMap((l, i) => (/#\s*def\b/.test(l) ? [i + 1] : []));

  const cases: Record<string, string> = {
    'a later definition in straight code kills an earlier one': `
def f(model, x):
    loss = model(x)
    loss = loss.item()  # def
    print(loss)  # use
`,
    'both branches of an if/else reach, the one before does not': `
def f(a):
    x = 0
    if a:
        x = 1  # def
    elif a > 1:
        x = 2  # def
    else:
        x = 3  # def
    print(x)  # use
`,
    'an if without else lets the definition before it through': `
def f(a):
    x = 0  # def
    if a:
        x = 1  # def
    print(x)  # use
`,
    'a loop reaches its head through the back edge': `
def f(loader):
    total = 0  # def
    for x in loader:
        print(total)  # use
        total = x  # def
`,
    'a reset at the top of the loop body is the only definition inside it': `
def f(loader):
    acc = 0
    for x in loader:
        acc = 0  # def
        print(acc)  # use
        acc = x
`,
    'break leaves the loop with its state, while True exits only through break': `
def f(it):
    y = 0
    while True:
        y = next(it)  # def
        if y:
            break
        y = 1
    print(y)  # use
`,
    'continue goes back to the head, return ends the path': `
def f(xs):
    z = 0  # def
    for x in xs:
        if x:
            z = 1  # def
            continue
        if not x:
            z = 2
            return z
    print(z)  # use
`,
    'an except handler sees the state before and inside the try body': `
def f():
    r = 0  # def
    try:
        r = 1  # def
        r = 2  # def
    except ValueError:
        print(r)  # use
`,
    'after try/except/finally: the end of the body or of a handler': `
def f():
    r = 0
    try:
        r = 1  # def
    except ValueError:
        r = 2  # def
    finally:
        pass
    print(r)  # use
`,
    'a for loop with else: the else runs on exhaustion, break skips it': `
def f(xs):
    found = None
    for x in xs:
        if x:
            found = x  # def
            break
    else:
        found = -1  # def
    print(found)  # use
`,
    "a comprehension's target is its own, not the function's": `
def f(xs, out):
    out = [out for out in xs]  # def
    print(out)  # use
`,
    'inside the comprehension, its own target is what is read': `
def f(xs):
    y = 0
    return [y * 2 for y in xs]  # def use
`,
    'with ... as binds, and match cases join': `
def f(cm, s):
    with cm as v:  # def
        pass
    match s:
        case 1:
            v = 1  # def
        case _:
            pass
    print(v)  # use
`,
    'module level, across a training loop and a validation loop': `
import torch
for x in loader:
    out = model(x)
with torch.no_grad():
    for x in val_loader:
        out = model(x)  # def
        hist.append(out)  # use
`,
  };

  for (const [title, text] of Object.entries(cases)) {
    it(title, () => {
      const name = /^\s*(?:print\(|return \[|hist\.append\()(\w+)/m.exec(text.split('\n').filter((l) => /#\s*(def )?use\b/.test(l)).pop() ?? '')?.[1] as string;
      assert.ok(name, 'case has no use');
      assert.deepEqual(reaching(text, name).rows, marked(text));
    });
  }

  it('says a parameter reassigned on one path may still hold the caller value (entry)', () => {
    const r = reaching(`
def f(h):
    if h is None:
        h = 0
    print(h)  # use
`, 'h');
    assert.deepEqual(r, { rows: [4], entry: true });
  });

  it('ends attribute keys when their object is rebound', () => {
    const text = `
def f(model, x):
    out = model(x)
    out.logits = 1
    out = model(x)
    print(out.logits)  # use
`;
    const tree = parser.parse(text);
    const root = toSyntax(tree, text);
    tree.delete();
    const model = new FileModel('/ws/a.py', text, root, new Workspace());
    const use = [...descendants(root)].find((n) => n.type === 'attribute' && n.startRow === 5);
    assert.ok(use);
    assert.deepEqual(model.reachingDefs('out.logits', use), { defs: [], entry: true });
  });
});

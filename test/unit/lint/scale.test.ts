/**
 * The whole-file analysis grows with the file, not with its square (issue #13: a 50,000-line
 * file must lint in seconds). Not timed: the work is counted. Each input is linted at two sizes
 * 4x apart, and the test counts the reads of syntax-node positions (every scan over calls,
 * bindings, events or statements reads them) and the elements read of each file's class list
 * and of the workspace's `forward` methods: a linear analysis reads about 4x as many at 4x the
 * size; a helper that scans the file (or the scope) once per finding or per call reads ~16x.
 */
import assert from 'node:assert/strict';
import { Linter } from '../../../src/lint/linter';
import type { FileModel } from '../../../src/lint/model';
import { loadPython, PythonParser } from '../../../src/lint/parser';
import { toSyntax } from '../../../src/lint/syntax';
import { Workspace } from '../../../src/lint/workspace';
import { fixtureCorpus } from './corpus';


/** A script of `n` blocks at module level: one scope with many calls, bindings, mode switches, isinstance tests and findings. */
function moduleScript(n: number): string {
  let s = 'import torch\nimport torch.nn as nn\nmodel = nn.Linear(4, 4)\ntotal = 0\n';
  for (let i = 0; i < n; i++) {
    // The names bound in a loop are the block's own: a name bound in every loop would reach every later use (the loop may not run), a set that grows with the file.
    s += `model.eval()\nfor x${i} in val_loader:\n    out${i} = model(x${i})\nmodel.train()\nfor x${i}, y${i} in loader:\n    loss${i} = crit(model(x${i}), y${i})\n    if isinstance(loss${i}, tuple):\n        loss${i} = sum(loss${i})\n    loss${i}.backward()\n    opt.step()\n    total += loss${i}\n    kept.append(loss${i})\n`;
  }
  return s;
}

/**
 * A straight-line script of `n` steps at module level that uses the same few names at every
 * step (`model`, `total`, `opt`): each use asks what reaches it, and a walk back from each
 * step to the first one grew with steps × steps.
 */
function straightScript(n: number): string {
  let s = 'import torch\nimport torch.nn as nn\nmodel = nn.Linear(4, 4)\ntotal = 0\n';
  for (let i = 0; i < n; i++) s += `out${i} = model(batch${i})\nloss${i} = crit(out${i}, target)\nloss${i}.backward()\nopt.step()\ntotal += loss${i}\n`;
  return s;
}

/** `n` recurrent modules, each run on its own state in a training loop (carried-hidden-state asks about each `forward`). */
function recurrentModules(n: number): string {
  let s = 'import torch\nimport torch.nn as nn\n';
  for (let i = 0; i < n; i++) {
    s += `class Net${i}(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.rnn = nn.LSTM(4, 4)\n\n    def forward(self, x, h):\n        return self.rnn(x, h)\n\n`;
    s += `def train_${i}(loader, opt):\n    net = Net${i}()\n    h = None\n    for x, y in loader:\n        out, h = net(x, h)\n        loss = (out - y).pow(2).mean()\n        loss.backward()\n        opt.step()\n\n`;
  }
  return s;
}

/**
 * `k` lines of 100 statements `x = model(x);` at module level after a broken `def evaluate`
 * (the shape of the fuzz bench's slowest mutations of a fixture): every forward's output is
 * rebound by the next statement, and finding which reads each binding reaches asked every
 * rebinding for every read: 0.8 s at 2 lines, 14 s at 8.
 */
function rebindingChain(k: number): string {
  return `import torch.nn as nn\n\n\ndef evaluate(model, loader):\n"""doc"""\n${`${'x = model(x); '.repeat(100)}\nnet = nn.Linear(4, 2)\n`.repeat(k)}`;
}

interface Reads {
  positions: number;
  /** `Set.prototype.has` calls: a walk over a scope's flow graph checks each node it passes. */
  sets: number;
  classes: number;
  forwards: number;
}

/**
 * Lints `text` once (whole file, as the CLI, and as the language server's first pull) and
 * counts the reads. Findings are returned too, so that the test sees the analysis ran.
 */
async function countReads(text: string, incremental: boolean): Promise<{ reads: Reads; findings: number }> {
  const language = await loadPython();
  const parser = new PythonParser(language);
  const reads: Reads = { positions: 0, sets: 0, classes: 0, forwards: 0 };
  // Every node is an instance of syntax.ts's one class: its position getters are on its prototype.
  const tree = parser.parse('x = 1');
  const proto = Object.getPrototypeOf(toSyntax(tree, 'x = 1').children[0]) as object;
  tree.delete();
  const saved = new Map<string, PropertyDescriptor>();
  for (const key of ['start', 'end', 'order', 'startRow', 'endRow']) {
    const d = Object.getOwnPropertyDescriptor(proto, key);
    // eslint-disable-next-line @typescript-eslint/unbound-method -- a getter, called below with its node as `this`
    const get = d?.get as ((this: unknown) => unknown) | undefined;
    assert.ok(d && get, `syntax nodes have a ${key} getter`);
    saved.set(key, d);
    Object.defineProperty(proto, key, { ...d, get(this: unknown) { reads.positions++; return get.call(this); } });
  }
  // A file's classes, and the workspace's `forward`s, as arrays that count the elements read.
  const counting = <T extends object>(list: T, field: 'classes' | 'forwards'): T =>
    new Proxy(list, { get(target, p, receiver) { if (typeof p === 'string' && /^\d+$/.test(p)) reads[field]++; return Reflect.get(target, p, receiver) as unknown; } });
  // eslint-disable-next-line @typescript-eslint/unbound-method -- saved to be put back, and called with its `this`
  const set = Workspace.prototype.set;
  // eslint-disable-next-line @typescript-eslint/unbound-method -- saved to be put back, and called with its `this`
  const functionsNamed = Workspace.prototype.functionsNamed;
  const proxies = new WeakMap<object, object>();
  Workspace.prototype.set = function (this: Workspace, model: FileModel) {
    Object.defineProperty(model, 'classes', { value: counting(model.classes, 'classes') });
    set.call(this, model);
  };
  Workspace.prototype.functionsNamed = function (this: Workspace, name: string) {
    const list = functionsNamed.call(this, name);
    if (name !== 'forward') return list;
    let p = proxies.get(list);
    if (!p) proxies.set(list, (p = counting(list, 'forwards')));
    return p as typeof list;
  };
  const linter = new Linter(new PythonParser(language), { incremental });
  // eslint-disable-next-line @typescript-eslint/unbound-method -- saved to be put back, and called with its `this`
  const has = Set.prototype.has;
  Set.prototype.has = function (this: Set<unknown>, value: unknown): boolean {
    reads.sets++;
    return has.call(this, value);
  };
  let findings: number;
  try {
    findings = linter.lintFile('/ws/big.py', text).length;
  } finally {
    Set.prototype.has = has;
    for (const [key, d] of saved) Object.defineProperty(proto, key, d);
    Workspace.prototype.set = set;
    Workspace.prototype.functionsNamed = functionsNamed;
    linter.dispose();
    parser.delete();
  }
  return { reads, findings };
}

describe('lint work grows with the file (issue #13: 50,000 lines in seconds)', function () {
  this.timeout(240_000);

  // Name, input of k blocks, k, whether it has findings.
  const inputs: [string, (k: number) => string, number, boolean][] = [
    ['the lint fixtures concatenated', (k) => fixtureCorpus(k * 500), 2, true],
    ['one module-level script (one scope, many findings)', moduleScript, 60, true],
    ['recurrent modules, each trained in its own loop', recurrentModules, 40, true],
    ['a straight-line module-level script using the same names at every step', straightScript, 150, false],
    ['lines of statements rebinding one name to a forward of it', rebindingChain, 2, false],
  ];
  for (const [name, make, k, finds] of inputs) {
    for (const incremental of [false, true]) {
      it(`${name}, ${incremental ? 'the language server' : 'the CLI'}: 4x the text, at most ~5x the reads`, async () => {
        const small = await countReads(make(k), incremental);
        const large = await countReads(make(4 * k), incremental);
        if (finds) {
          assert.ok(small.findings > 0, 'the analysis ran and found something');
          assert.ok(large.findings >= 2 * small.findings, `findings grow with the file (${small.findings} -> ${large.findings})`);
        }
        for (const what of ['positions', 'sets', 'classes', 'forwards'] as const) {
          // Linear is 4x; a few reads per file (the header, the first lines) do not make up 1x more.
          const ratio = large.reads[what] / Math.max(small.reads[what], 1);
          assert.ok(large.reads[what] <= 5 * Math.max(small.reads[what], 50), `${what} read ${small.reads[what]} times at ${k} blocks, ${large.reads[what]} at ${4 * k} (${ratio.toFixed(1)}x)`);
        }
      });
    }
  }
});

/**
 * Questions a rule cannot need are not asked (issue #13: whole-file lint speed, session 11).
 * Not timed: each test lints an input at two sizes with one model question counted, and checks
 * the findings a user sees at both sizes, in the CLI and in the language server.
 */
import assert from 'node:assert/strict';
import { Linter, type SourceFile } from '../../../src/lint/linter';
import { FileModel } from '../../../src/lint/model';
import { loadPython, PythonParser } from '../../../src/lint/parser';
import type { Rule } from '../../../src/lint/rule';
import { descendants, toSyntax } from '../../../src/lint/syntax';
import { Workspace } from '../../../src/lint/workspace';

interface Counting {
  /** The FileModel method counted. */
  readonly method: string;
  /** Which of its calls count, by their arguments. */
  readonly which: (args: readonly unknown[]) => boolean;
  /** Only these rules run (all when absent): the question counted is then asked by them alone. */
  readonly rules?: readonly string[];
}

/** Lints `files` with `counting.method` of every FileModel counted. */
async function lintCounting(counting: Counting, files: readonly SourceFile[], incremental: boolean): Promise<{ asked: number; findings: string[] }> {
  const language = await loadPython();
  const linter = new Linter(new PythonParser(language), { incremental });
  if (counting.rules) {
    const picked = linter.rules.filter((r) => counting.rules?.includes(r.id));
    assert.equal(picked.length, counting.rules.length, `rules ${counting.rules.join(', ')}`);
    (linter as unknown as { rules: readonly Rule[] }).rules = picked;
  }
  const proto = FileModel.prototype as unknown as Record<string, (...args: unknown[]) => unknown>;
  const had = Object.prototype.hasOwnProperty.call(proto, counting.method);
  const original = proto[counting.method];
  assert.equal(typeof original, 'function', `FileModel.${counting.method}`);
  let asked = 0;
  proto[counting.method] = function (this: FileModel, ...args: unknown[]) {
    if (counting.which(args)) asked++;
    return original.apply(this, args);
  };
  try {
    const results = incremental ? files.map((f) => linter.lintFile(f.path, f.text)) : [...linter.lintWorkspace(files).values()];
    return { asked, findings: results.flat().map((f) => `${f.ruleId}:${f.range.start.line}`) };
  } finally {
    if (had) proto[counting.method] = original;
    else delete proto[counting.method];
    linter.dispose();
  }
}

const only = (rule: string, findings: string[]): string[] => findings.filter((f) => f.startsWith(`${rule}:`)).map((f) => f.slice(rule.length + 1));

/**
 * An epoch loop over a DistributedSampler's loader whose steps call `n` project helpers (none of
 * which sets the epoch, at any depth), then `level1(loader, epoch)`: a chain of `levels`
 * functions whose last calls `loader.sampler.set_epoch(epoch)`. The rule follows calls three levels
 * down, so the loop sets the epoch for `levels` up to 3, and is reported from 4 on.
 */
function epochLoop(n: number, levels: number): SourceFile[] {
  let s = 'import torch\nfrom torch.utils.data import DataLoader, DistributedSampler\n\n\n';
  for (let i = 0; i < n; i++) s += `def helper${i}(model, x):\n    return model(x).sum() + torch.ones(1).mean()\n\n\n`;
  for (let l = 1; l < levels; l++) s += `def level${l}(loader, epoch):\n    level${l + 1}(loader, epoch)\n\n\n`;
  s += `def level${levels}(loader, epoch):\n    loader.sampler.set_epoch(epoch)\n\n\n`;
  s += 'def main(ds, model, opt):\n    sampler = DistributedSampler(ds, shuffle=True)\n    loader = DataLoader(ds, sampler=sampler)\n    for epoch in range(10):\n        for x in loader:\n';
  for (let i = 0; i < n; i++) s += `            helper${i}(model, x).backward()\n`;
  // After the steps: every helper call is looked at before the call that sets the epoch.
  s += '            opt.step()\n        level1(loader, epoch)\n';
  return [{ path: '/ws/train.py', text: s }];
}

/** The line of `for epoch in range(10):` in `epochLoop(n, levels)` (0-based). */
const epochLine = (n: number, levels: number): string => `${4 + 4 * n + 4 * levels + 3}`;

/**
 * `n` assignments from project helpers (`y3 = helper3(x)`) that build no loader, and a helper that
 * builds one over a shuffling DistributedSampler (`loader, sampler = build_loader(ds)`), iterated
 * every epoch without `set_epoch`: reported at the epoch loop.
 */
function assignedCalls(n: number): SourceFile[] {
  let s = 'import torch\nfrom torch.utils.data import DataLoader, DistributedSampler\n\n\ndef build_loader(ds):\n    sampler = DistributedSampler(ds, shuffle=True)\n    loader = DataLoader(ds, sampler=sampler)\n    return loader, sampler\n\n\n';
  for (let i = 0; i < n; i++) s += `def helper${i}(x):\n    return x + ${i}\n\n\n`;
  s += 'def prepare(x):\n';
  for (let i = 0; i < n; i++) s += `    y${i} = helper${i}(x)\n`;
  s += '    return x\n\n\ndef main(ds, model):\n    loader, sampler = build_loader(ds)\n    for epoch in range(10):\n        for x in loader:\n            model(x).sum().backward()\n';
  return [{ path: '/ws/train.py', text: s }];
}

/** The line of `for epoch in range(10):` in `assignedCalls(n)` (0-based). */
const assignedEpochLine = (n: number): string => `${10 + 4 * n + 1 + n + 3 + 2}`;

/**
 * A class that keeps a loader given to its constructor (`self.loader = loader`) and iterates it
 * every epoch, built at `n` places with what project helpers return (`Trainer(model,
 * make3(ds)).fit()`), none of which builds a loader over a DistributedSampler: nothing to report.
 */
function trainerSites(n: number): SourceFile[] {
  let s = 'import torch\n\n\nclass Trainer:\n    def __init__(self, model, loader):\n        self.model = model\n        self.loader = loader\n\n    def fit(self):\n        for epoch in range(3):\n            for x in self.loader:\n                self.model(x).sum().backward()\n\n\n';
  for (let i = 0; i < n; i++) s += `def make${i}(ds):\n    return list(ds)\n\n\n`;
  s += 'def main(model, ds):\n';
  for (let i = 0; i < n; i++) s += `    Trainer(model, make${i}(ds)).fit()\n`;
  return [{ path: '/ws/trainer.py', text: s }];
}

/**
 * A training step that calls `n` project helpers, each running the model, whose outputs make the
 * loss; an evaluation loop calls the first helper without a guard. Each helper's forward is on a
 * training path, so its guard belongs to the evaluation's call of it: the one finding.
 */
function trainingStepHelpers(n: number): SourceFile[] {
  let s = 'import torch\nimport torch.nn as nn\n\nmodel = nn.Linear(4, 4)\n\n\n';
  for (let i = 0; i < n; i++) s += `def helper${i}(model, x):\n    return model(x)\n\n\n`;
  s += 'def train(loader, opt):\n    for x, y in loader:\n        loss = 0\n';
  for (let i = 0; i < n; i++) s += `        loss = loss + (helper${i}(model, x) - y).pow(2).mean()\n`;
  s += '        loss.backward()\n        opt.step()\n\n\ndef evaluate(loader):\n    for x, y in loader:\n        print(helper0(model, x).argmax())\n';
  return [{ path: '/ws/train.py', text: s }];
}

/** The line of the evaluation's `print(helper0(model, x).argmax())` in `trainingStepHelpers(n)` (0-based). */
const evaluationLine = (n: number): string => `${6 + 4 * n + 3 + n + 2 + 2 + 2}`;

describe('lint rules: questions a rule cannot need are not asked (issue #13, session 11)', function () {
  this.timeout(60_000);

  for (const incremental of [false, true]) {
    const mode = incremental ? 'language server' : 'CLI';

    it(`missing-set-epoch resolves no call of an epoch loop whose name no function reaching set_epoch has (${mode})`, async () => {
      const resolves: Counting = { method: 'callFact', which: (a) => a[1] === 'resolve', rules: ['missing-set-epoch'] };
      // Set three levels down: no finding, however many helpers the step calls.
      const few = await lintCounting(resolves, epochLoop(4, 3), incremental);
      const many = await lintCounting(resolves, epochLoop(40, 3), incremental);
      assert.deepEqual(only('missing-set-epoch', few.findings), []);
      assert.deepEqual(only('missing-set-epoch', many.findings), []);
      // Four levels down is beyond what the rule follows: the loop is reported.
      const deep = await lintCounting(resolves, epochLoop(40, 4), incremental);
      assert.deepEqual(only('missing-set-epoch', deep.findings), [epochLine(40, 4)]);
      // The chain's calls are resolved (level1 .. level3, the loader's construction); the helpers' calls are not.
      assert.ok(few.asked > 0, 'the calls that may set the epoch were resolved');
      assert.ok(many.asked <= few.asked, `resolveCall asked ${few.asked} times with 4 helpers, ${many.asked} with 40`);
      assert.ok(deep.asked <= few.asked + 2, `resolveCall asked ${deep.asked} times with 40 helpers and 4 levels`);
    });

    it(`missing-set-epoch resolves an assigned call only where a function of its name may return a loader (${mode})`, async () => {
      const resolves: Counting = { method: 'callFact', which: (a) => a[1] === 'resolve', rules: ['missing-set-epoch'] };
      const few = await lintCounting(resolves, assignedCalls(4), incremental);
      const many = await lintCounting(resolves, assignedCalls(40), incremental);
      assert.deepEqual(only('missing-set-epoch', few.findings), [assignedEpochLine(4)]);
      assert.deepEqual(only('missing-set-epoch', many.findings), [assignedEpochLine(40)]);
      assert.ok(few.asked > 0, 'build_loader(ds) was resolved');
      assert.equal(many.asked, few.asked, `resolveCall asked ${few.asked} times with 4 assigned helper calls, ${many.asked} with 40`);
    });

    it(`missing-set-epoch resolves what a class is built with only where a function of its name may return a loader (${mode})`, async () => {
      const resolves: Counting = { method: 'callFact', which: (a) => a[1] === 'resolve', rules: ['missing-set-epoch'] };
      const few = await lintCounting(resolves, trainerSites(4), incremental);
      const many = await lintCounting(resolves, trainerSites(40), incremental);
      assert.deepEqual(only('missing-set-epoch', few.findings), []);
      assert.deepEqual(only('missing-set-epoch', many.findings), []);
      assert.equal(many.asked, few.asked, `resolveCall asked ${few.asked} times with 4 constructions, ${many.asked} with 40`);
    });

    it(`missing-no-grad asks whether a helper runs an unreported forward only for calls with an evaluation context (${mode})`, async () => {
      const unreported: Counting = { method: 'cyclicFact', which: (a) => a[1] === 'unreportedForward', rules: ['missing-no-grad'] };
      const few = await lintCounting(unreported, trainingStepHelpers(4), incremental);
      const many = await lintCounting(unreported, trainingStepHelpers(40), incremental);
      // The evaluation's call of helper0 is reported, at either size; the training step's calls are not.
      assert.deepEqual(only('missing-no-grad', few.findings), [evaluationLine(4)]);
      assert.deepEqual(only('missing-no-grad', many.findings), [evaluationLine(40)]);
      assert.ok(few.asked > 0, 'the evaluation\'s helper was asked about');
      assert.equal(many.asked, few.asked, `unreportedForward asked ${few.asked} times with 4 training-step helpers, ${many.asked} with 40`);
    });
  }
});

/**
 * A forward three blocks deep, after `n` compound statements that call a bare name (`if x > 3:
 * print(3)`) in each of those blocks, and a grad switch `switch(False)` in an `if` first: through
 * `from torch import set_grad_enabled as switch` (`aliased`) it turns grad mode off, else (a local
 * `switch`) it is no grad switch.
 */
function nestedForward(n: number, aliased: boolean): string {
  let s = aliased ? 'import torch\nfrom torch import set_grad_enabled as switch\n\n\n' : 'import torch\n\n\ndef switch(on):\n    pass\n\n\n';
  const prints = (indent: string): string => Array.from({ length: n }, (_, i) => `${indent}if x > ${i}:\n${indent}    print(${i})\n`).join('');
  s += 'def run(model, xs, flag):\n    if flag:\n        switch(False)\n' + prints('    ') + '    for x in xs:\n' + prints('        ') + '        with open("log") as fh:\n' + prints('            ') + '            y = model(x)\n';
  return s;
}

describe('grad guards: a bare name\'s call is a grad switch only through an alias (issue #13, session 11)', () => {
  let parser: PythonParser;
  before(async () => {
    parser = new PythonParser(await loadPython());
  });
  after(() => parser.delete());

  /** The grad state at `model(x)`, and how many names were qualified to find it. */
  function gradStateCounting(text: string): { state: string; qualified: number } {
    const tree = parser.parse(text);
    const root = toSyntax(tree, text);
    tree.delete();
    const model = new FileModel('/ws/nested.py', text, root, new Workspace());
    const forward = descendants(root).find((d) => d.type === 'call' && model.src(d) === 'model(x)');
    assert.ok(forward, 'model(x) is in the text');
    const proto = FileModel.prototype as unknown as Record<string, (...args: unknown[]) => unknown>;
    const had = Object.prototype.hasOwnProperty.call(proto, 'qualify');
    const original = proto.qualify;
    let qualified = 0;
    proto.qualify = function (this: FileModel, ...args: unknown[]) {
      qualified++;
      return original.apply(this, args);
    };
    try {
      return { state: model.gradState(forward), qualified };
    } finally {
      if (had) proto.qualify = original;
      else delete proto.qualify;
    }
  }

  it('the forward under an aliased set_grad_enabled(False) is off, and under a local function of that name not', () => {
    assert.equal(gradStateCounting(nestedForward(3, true)).state, 'off');
    assert.equal(gradStateCounting(nestedForward(3, false)).state, 'default');
  });

  it('a call in a later item of one `with` runs under the guards of the earlier items, which Python enters first, and not under later ones', () => {
    assert.equal(gradStateCounting('import torch\n\n\ndef f(model, x, record):\n    with torch.no_grad(), record(model(x)):\n        pass\n').state, 'off');
    assert.equal(gradStateCounting('import torch\n\n\ndef f(model, x, record):\n    with record(model(x)), torch.no_grad():\n        pass\n').state, 'default');
    assert.equal(gradStateCounting('import torch\n\n\ndef f(model, x, record):\n    with torch.enable_grad(), record(model(x)) as r:\n        pass\n').state, 'on');
  });

  it('without such an alias, the calls of bare names around a forward are not qualified one by one', () => {
    const few = gradStateCounting(nestedForward(3, false));
    const many = gradStateCounting(nestedForward(30, false));
    assert.equal(many.state, 'default');
    assert.equal(many.qualified, few.qualified, `qualify asked ${few.qualified} times with 3 compound statements per block, ${many.qualified} with 30`);
  });
});

/**
 * The rules' work per file does not grow with what they cannot report (issue #13: whole-file
 * lint speed). Not timed: each test counts the model questions a rule asks while a file is
 * linted at two sizes, and checks that the findings are what a user sees either way.
 */
import assert from 'node:assert/strict';
import { Linter, type SourceFile } from '../../../src/lint/linter';
import { FileModel } from '../../../src/lint/model';
import { loadPython, PythonParser } from '../../../src/lint/parser';

type Counted = 'callReachesBackward' | 'cyclicFact' | 'hasTrainingSignal' | 'functionFact' | 'fact';

/** Lints `files` with one method of every FileModel counted (`which` picks the calls counted by their first argument). */
async function counting(method: Counted, which: (arg: unknown) => boolean, files: readonly SourceFile[], incremental: boolean): Promise<{ asked: number; findings: string[] }> {
  const language = await loadPython();
  const linter = new Linter(new PythonParser(language), { incremental });
  const proto = FileModel.prototype as unknown as Record<string, (...args: unknown[]) => unknown>;
  const had = Object.prototype.hasOwnProperty.call(proto, method);
  const original = proto[method];
  let asked = 0;
  proto[method] = function (this: FileModel, ...args: unknown[]) {
    if (which(args[0]) || which(args[1])) asked++;
    return original.apply(this, args);
  };
  try {
    const results = incremental ? files.map((f) => linter.lintFile(f.path, f.text)) : [...linter.lintWorkspace(files).values()];
    return { asked, findings: results.flat().map((f) => `${f.ruleId}:${f.range.start.line}`) };
  } finally {
    if (had) proto[method] = original;
    else delete proto[method];
    linter.dispose();
  }
}

const all = (): boolean => true;
const only = (rule: string, findings: string[]): string[] => findings.filter((f) => f.startsWith(`${rule}:`)).map((f) => f.slice(rule.length + 1));

/** A training loop with `n` forward passes (no evaluation context) and one unguarded evaluation. */
function trainingForwards(n: number): string {
  let s = 'import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\nmodel = nn.Linear(4, 4)\n\n\ndef train(loader, opt):\n    for x, y in loader:\n        loss = 0\n';
  for (let i = 0; i < n; i++) s += `        out${i} = model(x)\n        loss = loss + F.mse_loss(out${i}, y)\n`;
  s += '        loss.backward()\n        opt.step()\n\n\ndef evaluate(loader):\n    for x in loader:\n        print(model(x).argmax())\n';
  return s;
}

/** `n` project helpers that call each other and run no model: library code, no forward pass anywhere. */
function helpersWithoutForwards(n: number): string {
  let s = 'import torch\n\n\n';
  for (let i = 0; i < n; i++) s += `def helper${i}(x):\n    return helper${i + 1}(x) + 1 if x else torch.zeros(1)\n\n\n`;
  s += `def helper${n}(x):\n    return x\n\n\nprint(helper0(3))\n`;
  return s;
}

/** A REINFORCE-like class whose training step keeps `n` attributes of losses that nothing backpropagates. */
function attributeAccumulators(n: number): string {
  let s = 'import torch\nimport torch.nn as nn\n\n\nclass Trainer:\n    def __init__(self):\n        self.model = nn.Linear(4, 1)\n';
  for (let i = 0; i < n; i++) s += `        self.total${i} = 0\n`;
  s += '\n    def step(self, x, opt):\n        loss = self.model(x).sum()\n        loss.backward()\n        opt.step()\n';
  for (let i = 0; i < n; i++) s += `        self.total${i} += loss\n`;
  for (let j = 0; j < 4; j++) s += `\n    def other${j}(self, x, opt):\n        out = self.model(x)\n        out.sum().backward()\n        opt.step()\n        return self.total0\n`;
  return s;
}

/** An epoch loop over a DistributedSampler's loader, without `set_epoch`, that calls `meter.update` `n` times; three classes define `update`. */
function epochLoopWithUpdates(n: number): SourceFile[] {
  let s = 'import torch\nfrom torch.utils.data import DataLoader, DistributedSampler\nfrom meters import Meter\n\n\ndef main(ds, model, opt):\n    sampler = DistributedSampler(ds, shuffle=True)\n    loader = DataLoader(ds, sampler=sampler)\n    meter = get_meter()\n    for epoch in range(10):\n        for x in loader:\n            loss = model(x).sum()\n            loss.backward()\n            opt.step()\n';
  for (let i = 0; i < n; i++) s += `            meter.update(${i})\n`;
  let meters = 'import torch\n\n';
  for (const name of ['Meter', 'Average', 'Counter']) meters += `\nclass ${name}:\n    def update(self, v):\n        self.sum = v\n        self.flush()\n\n    def flush(self):\n        print(self.sum)\n\n`;
  // The helpers' file first: the language server lints the files one by one, in this order.
  return [
    { path: '/ws/meters.py', text: meters },
    { path: '/ws/train.py', text: s },
  ];
}

describe('lint rules: work that does not grow with what cannot be reported (issue #13)', function () {
  this.timeout(60_000);

  for (const incremental of [false, true]) {
    const mode = incremental ? 'language server' : 'CLI';

    it(`missing-no-grad asks whether a forward reaches backward only for forwards in an evaluation context (${mode})`, async () => {
      const files = (n: number): SourceFile[] => [{ path: '/ws/train.py', text: trainingForwards(n) }];
      const few = await counting('callReachesBackward', all, files(5), incremental);
      const many = await counting('callReachesBackward', all, files(40), incremental);
      // The evaluation's forward is reported, at either size; the training step's are not.
      assert.deepEqual(only('missing-no-grad', few.findings), [`${16 + 2 * 5}`]);
      assert.deepEqual(only('missing-no-grad', many.findings), [`${16 + 2 * 40}`]);
      assert.ok(few.asked > 0, 'the evaluation forward was asked about');
      assert.equal(many.asked, few.asked, `callReachesBackward asked ${few.asked} times with 5 training forwards, ${many.asked} with 40`);
    });

    it(`missing-no-grad does not ask whether project functions that run no forward pass train (${mode})`, async () => {
      const files = (n: number): SourceFile[] => [{ path: '/ws/lib.py', text: helpersWithoutForwards(n) }];
      const few = await counting('cyclicFact', (a) => a === 'trains', files(5), incremental);
      const many = await counting('cyclicFact', (a) => a === 'trains', files(40), incremental);
      assert.deepEqual(few.findings, []);
      assert.deepEqual(many.findings, []);
      assert.ok(many.asked <= few.asked, `trains() asked ${few.asked} times with 5 helpers, ${many.asked} with 40`);
    });

    it(`accumulated-loss looks through the training functions once, not once per accumulated attribute (${mode})`, async () => {
      const files = (n: number): SourceFile[] => [{ path: '/ws/rl.py', text: attributeAccumulators(n) }];
      const few = await counting('hasTrainingSignal', all, files(5), incremental);
      const many = await counting('hasTrainingSignal', all, files(40), incremental);
      // Every attribute but total0 (which other0..3 return, to a caller that may backpropagate it) is reported.
      assert.equal(only('accumulated-loss', few.findings).length, 5);
      assert.equal(only('accumulated-loss', many.findings).length, 40);
      assert.ok(many.asked <= few.asked + 2, `hasTrainingSignal asked ${few.asked} times with 5 attributes, ${many.asked} with 40`);
    });

    it(`missing-set-epoch asks about the functions a method name matches once per name, not once per call (${mode})`, async () => {
      const setsEpoch = (a: unknown): boolean => typeof a === 'string' && a.startsWith('setsEpoch');
      const few = await counting('functionFact', setsEpoch, epochLoopWithUpdates(5), incremental);
      const many = await counting('functionFact', setsEpoch, epochLoopWithUpdates(40), incremental);
      assert.deepEqual(only('missing-set-epoch', few.findings), ['9']);
      assert.deepEqual(only('missing-set-epoch', many.findings), ['9']);
      // The loop's `update` calls are followed by name (none of those methods can reach `set_epoch`, so no function's own fact is needed).
      const named = await counting('fact', (a) => a === 'mayEpoch:1:update', epochLoopWithUpdates(5), incremental);
      assert.ok(named.asked > 0, 'the loop\'s calls were followed');
      assert.ok(many.asked <= few.asked + 2, `setsEpoch facts asked ${few.asked} times with 5 update calls, ${many.asked} with 40`);
    });
  }
});

/**
 * Whether a function runs on a training path is asked per function of a name, over every call
 * site of that name (trainingPath.ts `functionStatus`); what a site itself shows (its grad
 * mode, whether its value feeds a backward pass) is worked out once per site, not once per
 * function that asks (issue #13: whole-file lint speed, where a long file repeats names). Not
 * timed: the test counts the grad-mode questions asked about the call sites.
 */
import assert from 'node:assert/strict';
import { Linter } from '../../../src/lint/linter';
import { FileModel } from '../../../src/lint/model';
import { loadPython, PythonParser } from '../../../src/lint/parser';
import type { SyntaxNode } from '../../../src/lint/syntax';

/** `n` copies of an evaluation helper named `evaluate` (each running a forward pass without a guard), each called from its own `main`. */
function repeatedHelpers(n: number): string {
  let s = 'import torch\nimport torch.nn as nn\n\nmodel = nn.Linear(4, 4)\n';
  for (let i = 0; i < n; i++) {
    s += `\n\ndef evaluate(model, loader):\n    total = 0\n    for x in loader:\n        total += model(x).sum().item()\n    return total\n`;
    s += `\n\ndef main${i}(loader):\n    print(evaluate(model, loader))\n`;
  }
  return s;
}

async function siteQuestions(text: string, incremental: boolean): Promise<{ asked: number; findings: number }> {
  const language = await loadPython();
  const linter = new Linter(new PythonParser(language), { incremental });
  // eslint-disable-next-line @typescript-eslint/unbound-method -- saved to be put back, and called with its `this`
  const gradState = FileModel.prototype.gradState;
  let asked = 0;
  FileModel.prototype.gradState = function (this: FileModel, node: SyntaxNode) {
    if (node.type === 'call' && this.src(this.callee(node) ?? node) === 'evaluate') asked++;
    return gradState.call(this, node);
  };
  try {
    const findings = linter.lintFile('/ws/eval.py', text).filter((f) => f.ruleId === 'missing-no-grad').length;
    return { asked, findings };
  } finally {
    FileModel.prototype.gradState = gradState;
    linter.dispose();
  }
}

describe('training path: work per call site, not per function × site (issue #13)', function () {
  this.timeout(60_000);

  for (const incremental of [false, true]) {
    it(`asks each call site's grad mode a fixed number of times, however many functions share its name (${incremental ? 'language server' : 'CLI'})`, async () => {
      const few = await siteQuestions(repeatedHelpers(4), incremental);
      const many = await siteQuestions(repeatedHelpers(24), incremental);
      // Every copy's unguarded forward is reported, at either size: only evaluation calls it.
      assert.equal(few.findings, 4);
      assert.equal(many.findings, 24);
      assert.ok(few.asked > 0, "the sites' grad mode was asked");
      // Linear: 6 times the sites, at most 6 times the questions (it was 36 times: each of 24 functions asked all 24 sites).
      assert.ok(many.asked <= 6 * few.asked, `grad mode of evaluate() sites asked ${few.asked} times with 4 copies, ${many.asked} with 24`);
    });
  }
});

/**
 * missing-no-grad asks once per function, not once per forward pass in it, whether every
 * caller of the function is guarded (issue #13: whole-file lint speed). Not timed: the test
 * counts the workspace's call-site lookups while a helper with many forward passes is linted.
 */
import assert from 'node:assert/strict';
import { Linter } from '../../../src/lint/linter';
import { loadPython, PythonParser } from '../../../src/lint/parser';
import { Workspace } from '../../../src/lint/workspace';

/** A helper with `n` forward passes, called only under `torch.no_grad()`: none of them is a finding. */
function helperWithForwards(n: number): string {
  let s = 'import torch\nimport torch.nn as nn\n\nmodel = nn.Linear(4, 4)\n\n\ndef embed(model, xs):\n    outs = []\n';
  for (let i = 0; i < n; i++) s += `    outs.append(model(xs[${i}]))\n`;
  s += '    return outs\n\n\ndef evaluate(loader):\n    with torch.no_grad():\n        for xs in loader:\n            print(embed(model, xs))\n';
  return s;
}

async function lookups(text: string, incremental: boolean): Promise<{ sites: number; findings: string[] }> {
  const language = await loadPython();
  const linter = new Linter(new PythonParser(language), { incremental });
  // eslint-disable-next-line @typescript-eslint/unbound-method -- saved to be put back, and called with its `this`
  const callSites = Workspace.prototype.callSites;
  let sites = 0;
  Workspace.prototype.callSites = function (this: Workspace, name: string) {
    if (name === 'embed') sites++;
    return callSites.call(this, name);
  };
  try {
    const findings = linter.lintFile('/ws/eval.py', text).map((f) => f.ruleId);
    return { sites, findings };
  } finally {
    Workspace.prototype.callSites = callSites;
    linter.dispose();
  }
}

describe('missing-no-grad: work per function, not per forward (issue #13)', function () {
  this.timeout(60_000);

  for (const incremental of [false, true]) {
    it(`asks for a helper's callers a fixed number of times, whatever its forward count (${incremental ? 'language server' : 'CLI'})`, async () => {
      const few = await lookups(helperWithForwards(5), incremental);
      const many = await lookups(helperWithForwards(40), incremental);
      // Guarded by its only caller: no forward in the helper is reported, at either size.
      assert.deepEqual(few.findings.filter((id) => id === 'missing-no-grad'), []);
      assert.deepEqual(many.findings.filter((id) => id === 'missing-no-grad'), []);
      assert.ok(few.sites > 0, 'the callers of embed() were looked up');
      assert.ok(many.sites <= few.sites + 2, `embed()'s call sites looked up ${few.sites} times with 5 forwards, ${many.sites} with 40`);
    });
  }
});

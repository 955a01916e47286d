import assert from 'node:assert/strict';
import { createLinter, type Linter } from '../../../src/lint/linter';

/**
 * A model wrapped in DistributedDataParallel / DataParallel is often run through the wrapper's
 * `.module` (the model it holds), for evaluation in particular: `model.module(x)` is that
 * model's forward, as `model(x)` is (issue #13, recall on real code).
 */
describe('missing-no-grad: forwards through a wrapper\'s .module', () => {
  let linter: Linter;
  before(async () => {
    linter = await createLinter({ onError: (path, err) => { throw new Error(`internal error on ${path}: ${String(err)}`); } });
  });
  after(() => linter.dispose());

  const lines = (text: string): number[] => linter.lintFile('/ws/ddp_eval.py', text).filter((f) => f.ruleId === 'missing-no-grad').map((f) => f.range.start.line + 1);

  const evaluate = (forward: string, guard = false): string => `import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()


def evaluate(model, loader):
    model.eval()
    correct = 0
${guard ? '    with torch.no_grad():\n' : ''}${guard ? '    ' : ''}    for x, y in loader:
${guard ? '    ' : ''}        out = ${forward}
${guard ? '    ' : ''}        correct += (out.argmax(1) == y).sum().item()
    return correct
`;

  it('reports the unguarded evaluation forward `model.module(x)` as it reports `model(x)`', () => {
    assert.deepEqual(lines(evaluate('model(x)')), [16]);
    assert.deepEqual(lines(evaluate('model.module(x)')), [16]);
  });

  it('stays silent on `model.module(x)` under torch.no_grad(), and on `.module` of what is not a model', () => {
    assert.deepEqual(lines(evaluate('model.module(x)', true)), []);
    assert.deepEqual(lines(evaluate('loader.module(x)')), []);
  });
});

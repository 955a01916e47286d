import assert from 'node:assert/strict';
import { autocastHeader } from '../../../src/lint/autocast';
import { applyEdits } from '../../../src/lint/fixes';
import { createLinter, type Linter } from '../../../src/lint/linter';

const step = (body: string) => `import torch
from torch import nn

model = nn.Linear(4, 2)
criterion = nn.CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in [(torch.randn(8, 4), torch.randint(0, 2, (8,)))]:
    opt.zero_grad()
${body}
    opt.step()
`;

describe('the autocast quick fix of an out-of-memory problem (src/lint/autocast.ts)', () => {
  let linter: Linter;
  before(async () => {
    linter = await createLinter({ incremental: true });
  });
  const fixed = (text: string) => {
    const edit = linter.autocastFix('/project/train.py', text);
    return edit && applyEdits(text, [edit]);
  };

  it('wraps the forward pass and the loss of the one training step, and leaves the backward outside', () => {
    const text = step('    output = model(x)\n    loss = criterion(output, y)\n    loss.backward()');
    assert.equal(fixed(text), step(`    ${autocastHeader}\n        output = model(x)\n        loss = criterion(output, y)\n    loss.backward()`));
    const one = step('    loss = criterion(model(x), y)\n    loss.backward()');
    assert.equal(fixed(one), step(`    ${autocastHeader}\n        loss = criterion(model(x), y)\n    loss.backward()`));
    // A statement before the forward that the loss does not use stays outside.
    const unrelated = step('    n = 3\n    loss = criterion(model(x), y)\n    loss.backward()');
    assert.equal(fixed(unrelated), step(`    n = 3\n    ${autocastHeader}\n        loss = criterion(model(x), y)\n    loss.backward()`));
  });

  it('offers nothing where the training step is ambiguous or autocast is there already', () => {
    assert.equal(fixed(step('    loss = criterion(model(x), y)\n    loss.backward()\n    loss2 = criterion(model(x), y)\n    loss2.backward()')), undefined, 'two backward calls');
    assert.equal(fixed(step('    criterion(model(x), y).backward()')), undefined, 'no name to follow');
    assert.equal(fixed(step('    loss = criterion(model(x), y)\n    print(loss)\n    loss.backward()')), undefined, 'the loss is not computed right before its backward');
    assert.equal(fixed(step(`    ${autocastHeader}\n        loss = criterion(model(x), y)\n    loss.backward()`)), undefined, 'already under autocast');
    assert.equal(fixed(step('    loss = criterion(model(x), y)\n    loss.backward()').replace('import torch\n', 'import torch as T\n')), undefined, 'torch under another name');
  });
});

/**
 * The autocast quick fix over real JSON-RPC: the extension passes a torchrun job's out-of-memory
 * diagnostic (source "GPU Workbench", code cuda-oom) in the code-action context; the server answers
 * with the training step under torch.autocast, as a change that needs confirmation (VS Code's preview).
 */
import assert from 'node:assert/strict';
import type { AnnotatedTextEdit, Diagnostic, TextDocumentEdit } from 'vscode-languageserver-protocol/node';
import { applyEdits } from '../../../src/lint/fixes';
import { Client, pullCapabilities } from './client';

const text = `import torch
from torch import nn

model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
for step in range(3):
    opt.zero_grad()
    output = model(x)
    loss = nn.functional.cross_entropy(output, y)
    loss.backward()
    opt.step()
`;

describe('the language server\'s autocast quick fix for an out-of-memory problem', function () {
  this.timeout(30_000);
  let client: Client | undefined;
  after(async () => client?.stop());

  it('answers a torchrun out-of-memory diagnostic with the forward and loss under torch.autocast, to be previewed', async () => {
    client = await Client.start(pullCapabilities);
    const uri = 'file:///project/train.py';
    await client.open(uri, text);
    const oom: Diagnostic = { range: { start: { line: 8, character: 4 }, end: { line: 8, character: 21 } }, message: 'CUDA out of memory (rank 0): Tried to allocate 20.00 MiB', source: 'GPU Workbench', code: 'cuda-oom', severity: 1 };
    const actions = await client.actions(uri, [oom]);
    const fix = actions.find((a) => /torch\.autocast/.test(a.title));
    assert.ok(fix, JSON.stringify(actions));
    assert.equal(fix.kind, 'quickfix');
    const change = fix.edit?.documentChanges?.[0] as TextDocumentEdit;
    const edits = change.edits as AnnotatedTextEdit[];
    assert.equal(fix.edit?.changeAnnotations?.[edits[0].annotationId].needsConfirmation, true, 'shown as a preview first');
    assert.equal(applyEdits(text, edits), text.replace('    output = model(x)\n    loss = nn.functional.cross_entropy(output, y)\n', '    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):\n        output = model(x)\n        loss = nn.functional.cross_entropy(output, y)\n'));
    // Any other diagnostic of ours gets no autocast fix.
    const other = await client.actions(uri, [{ ...oom, code: 'exception', message: 'ValueError: x' }]);
    assert.ok(!other.some((a) => /torch\.autocast/.test(a.title)));
  });
});

import assert from 'node:assert/strict';
import { createLinter, type Linter } from '../../../src/lint/linter';

/**
 * missing-no-grad says where the activations are kept: on the GPU where the file shows it runs
 * on one, in memory otherwise (a CPU-only face detector of the held-out corpus was told "on the
 * GPU"). Whether the finding is made does not depend on it.
 */
describe('missing-no-grad: where the message says the activations are kept', () => {
  let linter: Linter;
  before(async () => {
    linter = await createLinter({ onError: (path, err) => { throw new Error(`internal error on ${path}: ${String(err)}`); } });
  });
  after(() => linter.dispose());

  const script = (device: string): string => `import torch
from nets import PNet

net = PNet().to(${device})
net.eval()
for image in images:
    boxes = net(image.to(${device}))
    print(boxes.detach().cpu().numpy())
`;
  const messages = (text: string): string[] => linter.lintFile('/ws/detect.py', text).filter((f) => f.ruleId === 'missing-no-grad').map((f) => f.message);

  it('says "on the GPU" for code that moves the model to CUDA', () => {
    const [m, ...rest] = messages(script('"cuda"'));
    assert.deepEqual(rest, []);
    assert.match(m, /autograd keeps every activation of this forward pass on the GPU\.$/);
  });

  it('says "in memory" where CUDA is named only in a comment or by its seed call (a CPU lesson of PyTorch_Practice)', () => {
    const text = script('"cpu"').replace('net = PNet()', '# device = torch.device("cuda")  # the GPU run\ntorch.cuda.manual_seed(1)\nnet = PNet()');
    const [m, ...rest] = messages(text);
    assert.deepEqual(rest, []);
    assert.match(m, /autograd keeps every activation of this forward pass in memory\.$/);
    // A string with a hash before the mention is no comment.
    assert.match(messages(text.replace('torch.cuda.manual_seed(1)', 'tag = "#1"; net0 = PNet().cuda()'))[0], /on the GPU\.$/);
  });

  it('says "in memory" for code that never names a GPU, and still reports the forward', () => {
    const [m, ...rest] = messages(script('"cpu"'));
    assert.deepEqual(rest, []);
    assert.match(m, /autograd keeps every activation of this forward pass in memory\.$/);
  });
});

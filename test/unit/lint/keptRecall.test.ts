import assert from 'node:assert/strict';
import { createLinter, type Linter } from '../../../src/lint/linter';

/**
 * tensors-kept-for-logging and carried-hidden-state on the shapes of real code they missed
 * (issue #13): outputs reached through every definition of a name, a row of a tensor, arithmetic,
 * a project helper's return value or an abstract `forward`'s overrides, a batch loop over a
 * `range` whose helper moves the batch; a recurrent state fed back through a copy into a policy's
 * own method, in a rollout loop that calls the project's training step. Each with its safe twin.
 */
describe('tensors-kept-for-logging and carried-hidden-state: outputs and states through definitions, helpers and copies', () => {
  let linter: Linter;
  before(async () => {
    linter = await createLinter({ onError: (path, err) => { throw new Error(`internal error on ${path}: ${String(err)}`); } });
  });
  after(() => linter.dispose());

  const lines = (rule: string, text: string, path = '/ws/encode.py') =>
    linter.lintFile(path, text).filter((f) => f.ruleId === rule).map((f) => f.range.start.line + 1);
  const kept = (text: string) => lines('tensors-kept-for-logging', text);
  const carried = (text: string) => lines('carried-hidden-state', text, '/ws/ppo.py');

  // A sentence encoder (an nn.Sequential subclass) keeping every embedding row on the GPU.
  const encoder = `import torch
from torch import nn


class Encoder(nn.Sequential):
    def encode(self, loader, device="cuda", token_level=False):
        self.eval()
        all_embeddings = []
        for features in loader:
            features = {k: v.to(device) for k, v in features.items()}
            with torch.no_grad():
                out = self.forward(features)
                embeddings = out["sentence_embedding"]
                if token_level:
                    embeddings = embeddings * features["attention_mask"].unsqueeze(-1)
                for emb in embeddings:
                    all_embeddings.append(emb.detach())
        return all_embeddings
`;

  it('reports the rows of an output kept across the batch loop, whichever definition of the name reaches them', () => {
    assert.deepEqual(kept(encoder), [17]);
    const [f] = linter.lintFile('/ws/encode.py', encoder).filter((x) => x.ruleId === 'tensors-kept-for-logging');
    assert.match(f.message, /`emb\.detach\(\)` is kept in `all_embeddings` on the GPU/);
  });

  it('is silent when the rows go to the CPU, or when one definition reaching them is a reduction', () => {
    assert.deepEqual(kept(encoder.replace('all_embeddings.append(emb.detach())', 'all_embeddings.append(emb.cpu())')), []);
    // On one path the name holds one number per sentence: not an output kept whole on every path.
    assert.deepEqual(kept(encoder.replace('embeddings * features["attention_mask"].unsqueeze(-1)', 'embeddings.norm(dim=-1)')), []);
  });

  // Inception features computed in a helper, collected over `range(num_batches)`.
  const features = `import torch
from einops import rearrange
from torch.nn.functional import adaptive_avg_pool2d


class FID:
    def __init__(self, dl, inception, device="cuda"):
        self.dl = dl
        self.inception = inception.to(device)
        self.device = device

    def features_of(self, samples):
        self.inception.eval()
        features = self.inception(samples)[0]
        if features.size(2) != 1:
            features = adaptive_avg_pool2d(features, output_size=(1, 1))
        features = rearrange(features, "... 1 1 -> ...")
        return features

    @torch.inference_mode()
    def real_stats(self, num_batches):
        stacked = []
        for _ in range(num_batches):
            samples = next(self.dl).to(self.device)
            stacked.append(self.features_of(samples))
        return torch.cat(stacked).cpu().numpy()
`;

  it('reports what a project helper returns from a model, kept over a range loop that moves each batch to the GPU', () => {
    assert.deepEqual(kept(features), [25]);
  });

  it('is silent when the helper hands back CPU values, or the loop moves nothing to a device', () => {
    assert.deepEqual(kept(features.replace('        return features\n', '        return features.cpu()\n')), []);
    assert.deepEqual(kept(features.replace('next(self.dl).to(self.device)', 'next(self.dl)')), []);
  });

  // An abstract `forward` whose subclass runs the classifier; the batch comes to the GPU in a helper.
  const process = `import torch
import tqdm


class BaseProcess(object):
    def __init__(self, device="cuda"):
        self.device = device

    def _get_batch(self, iterator):
        return [x.to(self.device) for x in next(iterator)]

    def forward(self, *inputs):
        """The outputs of the trainable module."""
        raise NotImplementedError

    def predict(self, loader):
        it = iter(loader)
        outputs = list()
        with torch.no_grad():
            for _ in tqdm.trange(len(loader)):
                batch = self._get_batch(it)
                outputs.append(self.forward(*batch))
        return torch.cat(outputs)


class Classification(BaseProcess):
    def __init__(self, classifier):
        super().__init__()
        self.classifier = classifier

    def forward(self, *inputs):
        prediction = self.classifier(inputs[0])
        return prediction
`;

  it("reports an abstract forward's output (what every override returns) kept over a loop whose helper loads the batch", () => {
    assert.deepEqual(kept(process), [22]);
  });

  it('is silent when an override returns a reduction', () => {
    assert.deepEqual(kept(process.replace('        return prediction\n', '        return prediction.argmax(-1)\n')), []);
  });

  it("follows the overrides into another file, and re-answers when that file's override changes", async () => {
    // A workspace of its own: the other tests leave their snippets (with their overrides) in the shared one.
    const own = await createLinter({ onError: (path, err) => { throw new Error(`internal error on ${path}: ${String(err)}`); } });
    const cut = process.indexOf('class Classification(BaseProcess):');
    const base = process.slice(0, cut);
    const sub = `from base import BaseProcess\n\n\n${process.slice(cut)}`;
    const ws = (subText: string) => {
      own.setFile('/ws/classify.py', subText);
      return own.lintFile('/ws/base.py', base).filter((f) => f.ruleId === 'tensors-kept-for-logging').map((f) => f.range.start.line + 1);
    };
    try {
      assert.deepEqual(ws(sub), [22]);
      assert.deepEqual(ws(sub.replace('        return prediction\n', '        return prediction.argmax(-1)\n')), []);
      assert.deepEqual(ws(sub), [22]);
    } finally {
      own.dispose();
    }
  });

  it('is silent on a forward that keeps one feature map per block (a loop over layers, nothing moved)', () => {
    const pyramid = `import torch
from torch import nn


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Conv2d(3, 3, 3) for _ in range(4)])

    def forward(self, x):
        feats = []
        for blk in self.blocks:
            x = blk(x)
            feats.append(x)
        return feats


def run(model, loader):
    for batch in loader:
        model(batch.cuda())
`;
    assert.deepEqual(kept(pyramid), []);
  });

  // minimalRL's ppo-lstm: the rollout feeds h_out back as h_in through the policy's own method.
  const ppo = `import torch
import torch.nn as nn
import torch.nn.functional as F


class PPO(nn.Module):
    def __init__(self):
        super().__init__()
        self.data = []
        self.fc1 = nn.Linear(4, 64)
        self.lstm = nn.LSTM(64, 32)
        self.fc_pi = nn.Linear(32, 2)
        self.optimizer = torch.optim.Adam(self.parameters())

    def pi(self, x, hidden):
        x = F.relu(self.fc1(x)).view(-1, 1, 64)
        x, lstm_hidden = self.lstm(x, hidden)
        return F.softmax(self.fc_pi(x), dim=2), lstm_hidden

    def put_data(self, transition):
        self.data.append(transition)

    def train_net(self):
        loss = sum(t[0].sum() for t in self.data)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.data = []


def main(env, model):
    for n_epi in range(1000):
        h_out = (torch.zeros([1, 1, 32]), torch.zeros([1, 1, 32]))
        s = env.reset()
        done = False
        while not done:
            for t in range(20):
                h_in = h_out
                prob, h_out = model.pi(torch.from_numpy(s).float(), h_in)
                s, r, done = env.step(prob.argmax().item())
                model.put_data((prob, h_in, h_out))
                if done:
                    break
            model.train_net()
`;

  it('reports a state fed back through a copy into a method that runs the LSTM, in a rollout loop that calls the training step', () => {
    assert.deepEqual(carried(ppo), [39]);
    const [f] = linter.lintFile('/ws/ppo.py', ppo).filter((x) => x.ruleId === 'carried-hidden-state');
    assert.match(f.message, /`h_out` \(passed as `h_in`\) is fed back into `model\.pi`/);
    assert.equal(f.fixes.length, 1);
    assert.match(f.fixes[0].edits[0].newText, /h_out = h_out\.detach\(\) if isinstance\(h_out, torch\.Tensor\) else tuple\(h\.detach\(\) for h in h_out\)/);
  });

  it('is silent when the copy is detached, the rollout runs under no_grad, or the stored state is detached by the callee', () => {
    assert.deepEqual(carried(ppo.replace('h_in = h_out\n', 'h_in = (h_out[0].detach(), h_out[1].detach())\n')), []);
    assert.deepEqual(carried(ppo.replace('                prob, h_out = model.pi(', '                with torch.no_grad():\n                    prob, h_out = model.pi(').replace('                s, r, done = env.step(', '                    s, r, done = env.step(')), []);
    assert.deepEqual(carried(ppo.replace('        self.data.append(transition)', '        for h in transition[2]:\n            h.detach_()\n        self.data.append(transition)')), []);
  });

  it('is silent when the loop never trains', () => {
    assert.deepEqual(carried(ppo.replace('            model.train_net()\n', '')), []);
  });
});

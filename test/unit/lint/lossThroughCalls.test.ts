import assert from 'node:assert/strict';
import { createLinter, type Linter } from '../../../src/lint/linter';

/**
 * accumulated-loss where the kept value comes from a method the linter cannot see into (the
 * model's own loss method, defined in another package) but is the only source of the value
 * the step backpropagates, and what the message says is held in each case (issue #13).
 */
describe('accumulated-loss: losses made by unseen methods, and what is held', () => {
  let linter: Linter;
  before(async () => {
    linter = await createLinter({ onError: (path, err) => { throw new Error(`internal error on ${path}: ${String(err)}`); } });
  });
  after(() => linter.dispose());

  const lint = (text: string) => linter.lintFile('/ws/trainer.py', text).filter((f) => f.ruleId === 'accumulated-loss');
  const lines = (text: string) => lint(text).map((f) => f.range.start.line + 1);

  // The loss (or tuple of loss terms) comes from `self.net.compute_losses`, which is not in the workspace.
  const keptTerms = `import torch


class Runner:
    def __init__(self, net, opt):
        self.net = net
        self.opt = opt

    def run_epoch(self, batches):
        kept = []
        for batch in batches:
            self.opt.zero_grad()
            terms = self.net.compute_losses(batch)
            total = sum(terms) if isinstance(terms, tuple) else terms
            total.backward()
            self.opt.step()
            kept.append(terms)
        return sum(kept).item()
`;

  it('reports a value kept for the epoch whose only use in the step is to be backpropagated', () => {
    assert.deepEqual(lines(keptTerms), [17]);
  });

  it('says that backward() freed the activations but the tensors and their autograd nodes stay referenced', () => {
    const [f] = lint(keptTerms);
    assert.match(f.message, /`terms` is stored in `kept`/);
    assert.match(f.message, /backward\(\) has freed each step's saved activations/);
    assert.match(f.message, /tensor and its chain of autograd nodes stay referenced/);
    assert.doesNotMatch(f.message, /activations stay on the GPU/);
    // `terms` may be a tuple (the isinstance test): neither `.item()` nor `.detach()` would work on every path.
    assert.deepEqual(f.fixes, []);
  });

  it('a scalar loss from an unseen method, kept after a cast and a scale, gets .item()', () => {
    const text = `import torch


def fit(agent, batches, opt, scale):
    history = []
    for batch in batches:
        opt.zero_grad()
        raw = agent.policy_loss(batch)
        loss = raw.float() * 0.5
        loss.backward()
        opt.step()
        history.append(raw)
    return history
`;
    const found = lint(text);
    assert.deepEqual(found.map((f) => f.range.start.line + 1), [12]);
    assert.equal(found[0].fixes[0].title, 'Store `raw.item()` instead');
  });

  it('infers nothing when the backpropagated value has two sources (either may hold the graph)', () => {
    const text = `import torch


def fit(agent, batches, opt):
    history = []
    for batch in batches:
        opt.zero_grad()
        a = agent.policy_loss(batch)
        b = agent.entropy_bonus(batch)
        loss = a - b
        loss.backward()
        opt.step()
        history.append(b)
    return history
`;
    assert.deepEqual(lines(text), []);
  });

  it('infers nothing for a value rebound to a number before it is kept', () => {
    const text = `import torch


def fit(agent, batches, opt):
    history = []
    for batch in batches:
        opt.zero_grad()
        raw = agent.policy_loss(batch)
        raw.backward()
        opt.step()
        raw = raw.item()
        history.append(raw)
    return history
`;
    assert.deepEqual(lines(text), []);
  });

  it('says the activations stay on the GPU where nothing backpropagates the kept value', () => {
    const text = `import torch


def evaluate(model, loader, criterion):
    model.eval()
    total = 0
    for x, y in loader:
        total += criterion(model(x), y)
    return total / len(loader)
`;
    const [f] = lint(text);
    assert.equal(f.range.start.line + 1, 8);
    assert.match(f.message, /every step's activations stay on the GPU/);
  });

  it('keeps the activations in the message when backward retains the graph', () => {
    const text = `import torch


def train(model, loader, criterion, opt):
    total = 0
    for x, y in loader:
        opt.zero_grad()
        loss = criterion(model(x), y)
        loss.backward(retain_graph=True)
        opt.step()
        total += loss
    return total
`;
    const [f] = lint(text);
    assert.equal(f.range.start.line + 1, 11);
    assert.match(f.message, /every step's activations stay on the GPU/);
  });

  // A loss object that sums what it is given, held by an evaluator that got it as a default argument.
  const lossObject = (iterable: string) => `import torch
import torchtext


class SummedNLL(object):
    def __init__(self):
        self.criterion = torch.nn.NLLLoss()
        self.total = 0

    def add_batch(self, scores, gold):
        self.total += self.criterion(scores, gold)


class DevScorer(object):
    def __init__(self, metric=SummedNLL(), batch_size=32):
        self.metric = metric
        self.batch_size = batch_size

    def score(self, seq_model, corpus):
        metric = self.metric
        ${iterable}
        for batch in batches:
            step_scores, _ = seq_model(batch.src)
            for t, scores in enumerate(step_scores):
                metric.add_batch(scores.view(-1, scores.size(-1)), batch.tgt[:, t])
        return metric.total.item()
`;

  it('reports a step output passed to a loss object that accumulates it, reached through an attribute set from a default argument', () => {
    const text = lossObject('batches = torchtext.data.BucketIterator(dataset=corpus, batch_size=self.batch_size)');
    const found = lint(text);
    assert.deepEqual(found.map((f) => f.range.start.line + 1), [25]);
    assert.match(found[0].message, /`SummedNLL\.add_batch` accumulates it into the SummedNLL/);
    assert.match(found[0].message, /every step's activations stay on the GPU/);
  });

  it('does not take a loop over something that is not a loader for the batch loop', () => {
    // A list of batches built by hand may be one batch; nothing says each iteration is a step.
    assert.deepEqual(lines(lossObject('batches = list(corpus)')), []);
  });

  it('reads element 0 of a project function that returns (numbers, outputs-with-graph) as the numbers', () => {
    // `outputs` holds the graph (its loss is backpropagated); the gradients go back as numpy arrays.
    const text = `import torch


class Explainer:
    def input_gradients(self, batch):
        outputs = self.net.decode(self.net.forward(**batch))
        loss = outputs["loss"]
        loss.backward()
        grads = {"g": self.captured.grad.detach().cpu().numpy()}
        return grads, outputs

    def smooth(self, batch, samples):
        total = {}
        for _ in range(samples):
            grads = self.input_gradients(batch)[0]
            for key in grads.keys():
                total[key] += grads[key]
        outs = []
        for _ in range(samples):
            outs.append(self.input_gradients(batch)[1])
        return total, outs
`;
    // Element 1 is the outputs, kept with their (backpropagated) graph: still reported.
    const found = lint(text);
    assert.deepEqual(found.map((f) => f.range.start.line + 1), [20]);
  });

  it("treats what a Lightning training_step returns as backpropagated by the trainer", () => {
    const text = `import torch
import pytorch_lightning as pl


class Model(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.outputs.append(loss)
        return loss
`;
    const [f] = lint(text);
    assert.equal(f?.range.start.line + 1, 9);
    assert.match(f.message, /backward\(\) has freed/);
  });
});

import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { createLinter, type SourceFile } from '../../../src/lint/linter';
import { repoRoot } from '../../paths';
import { lintFixtures, readFixtures } from './corpus';
import { FixSafetyChecker, type Violation } from './fixSafety';

/** Every `.py` under `dir` (the fixtures' `.fixed.py` expectations are results, not inputs). */
function pythonFiles(dir: string): SourceFile[] {
  const out: SourceFile[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d).sort()) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (name.endsWith('.py') && !name.endsWith('.fixed.py')) out.push({ path: p, text: readFileSync(p, 'utf8') });
    }
  };
  walk(dir);
  return out;
}

const show = (vs: readonly Violation[]): string[] => vs.map((v) => `${relative(repoRoot, v.path)}: ${v.fix}: ${v.problem}`);

describe('lint fixes never change what training computes', () => {
  let checker: FixSafetyChecker;
  before(async () => {
    checker = await FixSafetyChecker.create();
  });
  after(() => checker.dispose());

  /** Each fixture file is a workspace of its own (two scripts may both define `evaluate`); each workspace folder one workspace. */
  const workspaces = (): { name: string; files: SourceFile[] }[] => [
    ...readFixtures(join(lintFixtures, 'bad'), (n) => !n.endsWith('.fixed.py')).map((f) => ({ name: `bad/${f.name}`, files: [f] })),
    ...readFixtures(join(lintFixtures, 'good')).map((f) => ({ name: `good/${f.name}`, files: [f] })),
    ...readdirSync(join(lintFixtures, 'workspace')).sort().map((d) => ({ name: `workspace/${d}`, files: pythonFiles(join(lintFixtures, 'workspace', d)) })),
    { name: 'examples/pytorch', files: pythonFiles(join(repoRoot, 'examples', 'pytorch')).map((f) => ({ path: f.path, text: f.text })) },
  ];

  it('applies every fix on every fixture (one at a time, all together, fix-all): parses, no guard on a training path, no .item()/.detach() on what is backpropagated', async () => {
    let checked = 0;
    const violations: Violation[] = [];
    for (const w of workspaces()) {
      const linter = await createLinter({ onError: (path, err) => { throw new Error(`internal error on ${path}: ${String(err)}`); } });
      try {
        const r = checker.check(linter, w.files);
        checked += r.fixesChecked;
        violations.push(...r.violations);
      } finally {
        linter.dispose();
      }
    }
    assert.deepEqual(show(violations), []);
    assert.ok(checked >= 60, `only ${checked} fixes were checked`);
  });

  describe('the checker catches fixes that break training', () => {
    const shared = readFixtures(join(lintFixtures, 'bad')).find((f) => f.name === 'shared_predict_helper.py') as SourceFile;
    const lineOf = (text: string, needle: string): number => text.split('\n').findIndex((l) => l.includes(needle));
    const at = (line: number, character = 0) => ({ start: { line, character }, end: { line, character } });

    it('a no_grad decorator on a helper the training step backpropagates through', () => {
      const paths = checker.analyse([shared]);
      const line = lineOf(shared.text, 'def predict(');
      const vs = checker.checkFix(paths, shared, [{ range: at(line), newText: '@torch.no_grad()\n' }], 'decorate predict');
      assert.deepEqual(vs.map((v) => v.problem), [
        '`predict` is on a training path (a training step calls it) and got a grad guard',
        '`model(images)` is on a training path and now runs under a grad guard',
        '`logits.float()` is on a training path and now runs under a grad guard',
      ]);
    });

    it('a with no_grad() around the training step\'s forward', () => {
      const paths = checker.analyse([shared]);
      const line = lineOf(shared.text, 'logits = predict(model, images)');
      const old = shared.text.split('\n')[line];
      const vs = checker.checkFix(paths, shared, [{ range: { start: { line, character: 0 }, end: { line, character: old.length } }, newText: `    with torch.no_grad():\n    ${old}` }], 'wrap');
      assert.deepEqual(vs.map((v) => v.problem), ['`predict(model, images)` is on a training path and now runs under a grad guard']);
    });

    it('a set_grad_enabled(<cond>) around a training forward where the backward does not run only under <cond>', () => {
      const text = [
        'import torch',
        '',
        'def step(train, model, x, y, criterion, optimizer, warmup):',
        '    if train:',
        '        model.train()',
        '    else:',
        '        model.eval()',
        '    out = model(x)',
        '    loss = criterion(out, y)',
        '    if train:',
        '        loss.backward()',
        '    if train or warmup:',
        '        optimizer.step()',
        '',
      ].join('\n');
      const file = { path: join(lintFixtures, 'synthetic_phase.py'), text };
      const paths = checker.analyse([file]);
      const line = lineOf(text, 'out = model(x)');
      const wrap = (cond: string) => [{ range: { start: { line, character: 0 }, end: { line, character: text.split('\n')[line].length } }, newText: `    with torch.set_grad_enabled(${cond}):\n        out = model(x)` }];
      assert.deepEqual(checker.checkFix(paths, file, wrap('train'), 'wrap').map((v) => v.problem), ['`model(x)` is on a training path and now runs under `set_grad_enabled(train)`, but `optimizer.step()` does not run only `if train`']);
      const only = { path: file.path, text: text.replace('    if train or warmup:\n        optimizer.step()\n', '') };
      const onlyPaths = checker.analyse([only]);
      assert.deepEqual(checker.checkFix(onlyPaths, only, wrap('train'), 'wrap'), []);
      assert.deepEqual(checker.checkFix(onlyPaths, only, wrap('not train').map((e) => e), 'wrap').map((v) => v.problem), ['`model(x)` is on a training path and now runs under `set_grad_enabled(not train)`, but `loss.backward()` does not run only `if not train`']);
    });

    it('.item() and .detach() on a value that reaches backward(), .item() on one used as a tensor later', () => {
      const text = [
        'import torch',
        '',
        'def train(model, loader, optimizer, criterion):',
        '    total = 0',
        '    for x, y in loader:',
        '        loss = criterion(model(x), y)',
        '        total += loss',
        '    total.backward()',
        '    optimizer.step()',
        '',
        'def run(model, loader, criterion):',
        '    seen = 0',
        '    for x, y in loader:',
        '        seen += criterion(model(x), y)',
        '    print(seen.item())',
        '',
      ].join('\n');
      const file = { path: join(lintFixtures, 'synthetic_item.py'), text };
      const paths = checker.analyse([file]);
      const end = (needle: string) => {
        const line = lineOf(text, needle);
        return at(line, text.split('\n')[line].length);
      };
      assert.deepEqual(checker.checkFix(paths, file, [{ range: end('total += loss'), newText: '.item()' }], 'item').map((v) => v.problem), [
        '`loss` gets `.item()` but `total` reaches backward()',
        '`loss` gets `.item()`, making `total` a Python number, but `total` is used as a tensor later',
      ]);
      assert.deepEqual(checker.checkFix(paths, file, [{ range: end('total += loss'), newText: '.detach()' }], 'detach').map((v) => v.problem), ['`loss` gets `.detach()` but `total` reaches backward()']);
      assert.deepEqual(checker.checkFix(paths, file, [{ range: end('seen += criterion'), newText: '.item()' }], 'item').map((v) => v.problem), ['`criterion(model(x), y)` gets `.item()`, making `seen` a Python number, but `seen` is used as a tensor later']);
      assert.deepEqual(checker.checkFix(paths, file, [{ range: end('seen += criterion'), newText: '.detach()' }], 'detach'), []);
    });

    it('a guard around what carries none of the graph backpropagated: `.data` of a forward, the indices of max(), a shared loop called with its training flag False, its optimizer None, or its string switch another phase', () => {
      const text = [
        'import torch',
        '',
        'def critic_step(netG, netD, z, optimizer):',
        '    fake = torch.autograd.Variable(netG(z).data)',
        '    loss = netD(fake).mean()',
        '    loss.backward()',
        '    optimizer.step()',
        '',
        'def dqn_step(q, target, s, y, optimizer, criterion):',
        '    _, actions = q(s).max(1, keepdim=True)',
        '    v = target(s).gather(1, actions)',
        '    loss = criterion(v, y)',
        '    loss.backward()',
        '    optimizer.step()',
        '',
        'class Trainer:',
        '    def iteration(self, loader, train=True):',
        '        for x, y in loader:',
        '            loss = self.criterion(self.model(x), y)',
        '            if train:',
        '                loss.backward()',
        '                self.optimizer.step()',
        '',
        '    def fit(self, loader, test_loader):',
        '        self.iteration(loader)',
        '        self.iteration(test_loader, train=False)',
        '',
        'def run_epoch(model, loader, optimizer=None):',
        '    for x, y in loader:',
        '        loss = model(x).sum()',
        '        if optimizer is not None:',
        '            loss.backward()',
        '            optimizer.step()',
        '',
        'def main(model, loader, optimizer):',
        '    run_epoch(model, loader, optimizer)',
        '    run_epoch(model, loader, None)',
        '    run_epoch(model, loader)',
        '    run_epoch(model, loader, optimizer=opt)',
        '',
        'def model_loop(loop_type, loader, model, opt):',
        "    is_train = (loop_type == 'train')",
        '    for x, y in loader:',
        '        loss = model(x).sum()',
        '        if is_train:',
        '            loss.backward()',
        '            opt.step()',
        '',
        'def phases(model, loader, opt):',
        "    model_loop('train', loader, model, opt)",
        "    model_loop('val', loader, model, None)",
        '',
        'def one_epoch(model, loader, opt, cross_valid=False):',
        '    for x, y in loader:',
        '        loss = model(x).sum()',
        '        if not cross_valid:',
        '            loss.backward()',
        '            opt.step()',
        '',
        'def pass_over(model, loader, opt, validating=False):',
        '    for x, y in loader:',
        '        loss = model(x).sum()',
        '        if validating:',
        '            pass',
        '        else:',
        '            loss.backward()',
        '            opt.step()',
        '',
        'def main_loop(phase, model, loader, opt):',
        '    for x, y in loader:',
        '        loss = model(x).sum()',
        '        if phase == Phase.TRAIN:',
        '            loss.backward()',
        '            opt.step()',
        '',
        'def solver(model, loader, opt):',
        '    one_epoch(model, loader, opt)',
        '    one_epoch(model, loader, opt, cross_valid=True)',
        '    pass_over(model, loader, opt, validating=True)',
        '    pass_over(model, loader, opt, False)',
        '    main_loop(Phase.TEST, model, loader, opt)',
        '    main_loop(Phase.TRAIN, model, loader, opt)',
        '    main_loop(Other.TEST, model, loader, opt)',
        '',
      ].join('\n');
      const file = { path: join(lintFixtures, 'synthetic_cut.py'), text };
      const paths = checker.analyse([file]);
      const wrap = (needle: string) => {
        const line = lineOf(text, needle);
        const old = text.split('\n')[line];
        const indent = /^ */.exec(old)?.[0] ?? '';
        return checker.checkFix(paths, file, [{ range: { start: { line, character: 0 }, end: { line, character: old.length } }, newText: `${indent}with torch.no_grad():\n    ${old}` }], 'wrap').map((v) => v.problem);
      };
      assert.deepEqual(wrap('fake = torch.autograd.Variable(netG(z).data)'), []);
      assert.deepEqual(wrap('_, actions = q(s).max(1, keepdim=True)'), []);
      assert.deepEqual(wrap('self.iteration(test_loader, train=False)'), []);
      assert.deepEqual(wrap('run_epoch(model, loader, None)'), []);
      assert.deepEqual(wrap('run_epoch(model, loader)'), []);
      assert.deepEqual(wrap('    run_epoch(model, loader, optimizer)'), ['`run_epoch(model, loader, optimizer)` is on a training path and now runs under a grad guard']);
      assert.deepEqual(wrap('run_epoch(model, loader, optimizer=opt)'), ['`run_epoch(model, loader, optimizer=opt)` is on a training path and now runs under a grad guard']);
      // A loop switched by a string (robustness's `_model_loop`): another literal turns its step off, 'train' does not.
      assert.deepEqual(wrap("model_loop('val', loader, model, None)"), []);
      assert.deepEqual(wrap("model_loop('train', loader, model, opt)"), ["`model_loop('train', loader, model, opt)` is on a training path and now runs under a grad guard"]);
      // Trained while a flag is false (`if not cross_valid:`, the `else:` of `if validating:`): True turns the step off.
      assert.deepEqual(wrap('one_epoch(model, loader, opt, cross_valid=True)'), []);
      assert.deepEqual(wrap('    one_epoch(model, loader, opt)'), ['`one_epoch(model, loader, opt)` is on a training path and now runs under a grad guard']);
      assert.deepEqual(wrap('pass_over(model, loader, opt, validating=True)'), []);
      assert.deepEqual(wrap('pass_over(model, loader, opt, False)'), ['`pass_over(model, loader, opt, False)` is on a training path and now runs under a grad guard']);
      // Switched by an enum member: another member of the same enum turns it off; the training member, or another enum's, does not.
      assert.deepEqual(wrap('main_loop(Phase.TEST, model, loader, opt)'), []);
      assert.deepEqual(wrap('main_loop(Phase.TRAIN, model, loader, opt)'), ['`main_loop(Phase.TRAIN, model, loader, opt)` is on a training path and now runs under a grad guard']);
      assert.deepEqual(wrap('main_loop(Other.TEST, model, loader, opt)'), ['`main_loop(Other.TEST, model, loader, opt)` is on a training path and now runs under a grad guard']);
      // The same places where the graph is needed are still caught.
      assert.deepEqual(wrap('loss = netD(fake).mean()'), ['`netD(fake).mean()` is on a training path and now runs under a grad guard', '`netD(fake)` is on a training path and now runs under a grad guard']);
      assert.deepEqual(wrap('v = target(s).gather(1, actions)'), ['`target(s).gather(1, actions)` is on a training path and now runs under a grad guard', '`target(s)` is on a training path and now runs under a grad guard']);
      assert.deepEqual(wrap('        self.iteration(loader)'), ['`self.iteration(loader)` is on a training path and now runs under a grad guard']);
    });

    it('a sampling block at the end of the step loop that rebinds the batch names: safe to guard where the step rebinds them on every path first (try/except around the iterator), not where it may not', () => {
      const step = (top: string[]) => [
        'import torch',
        '',
        'def train(gen, loader, test_loader, optimizer, steps):',
        '    it = iter(loader)',
        '    test_it = iter(test_loader)',
        '    for step in range(steps):',
        ...top,
        '        x = x.cuda()',
        '        loss = gen(x).mean()',
        '        optimizer.zero_grad()',
        '        loss.backward()',
        '        optimizer.step()',
        '        if step % 100 == 0:',
        '            x, _ = next(test_it)',
        '            x = x.cuda()',
        '            fake = gen(x)',
        '            print(fake.mean().item())',
        '',
      ].join('\n');
      // UGATIT's step: `try: real_A, _ = trainA_iter.next()` / `except: trainA_iter = iter(...); real_A, _ = trainA_iter.next()`.
      const guardSample = (text: string) => {
        const file = { path: join(lintFixtures, 'synthetic_sample.py'), text };
        const paths = checker.analyse([file]);
        const from = lineOf(text, 'x, _ = next(test_it)');
        const to = lineOf(text, 'print(fake.mean().item())');
        const lines = text.split('\n').slice(from, to + 1);
        const newText = ['            with torch.no_grad():', ...lines.map((l) => `    ${l}`)].join('\n');
        return checker.checkFix(paths, file, [{ range: { start: { line: from, character: 0 }, end: { line: to, character: lines[lines.length - 1].length } }, newText }], 'wrap sample').map((v) => v.problem);
      };
      const rebinds = ['        try:', '            x, _ = next(it)', '        except StopIteration:', '            it = iter(loader)', '            x, _ = next(it)'];
      assert.deepEqual(guardSample(step(rebinds)), []);
      // Without the except's rebinding, the sample's `x` may reach the next step's forward: the check must still object.
      const mayKeep = ['        try:', '            x, _ = next(it)', '        except StopIteration:', '            it = iter(loader)'];
      assert.notDeepEqual(guardSample(step(mayKeep)), []);
    });

    it('a fix that breaks the syntax', () => {
      const paths = checker.analyse([shared]);
      const vs = checker.checkFix(paths, shared, [{ range: at(lineOf(shared.text, 'def evaluate(')), newText: '    @torch.no_grad(\n' }], 'broken');
      assert.ok(vs.some((v) => v.problem === 'the fixed file does not parse'), JSON.stringify(vs));
    });
  });

  describe('where no fix is certain, the linter offers none (or guards the evaluation caller)', () => {
    const lintText = async (text: string) => {
      const linter = await createLinter();
      try {
        return linter.lintFile(join(lintFixtures, 'inline.py'), text).map((f) => ({ line: f.range.start.line + 1, rule: f.ruleId, fixes: f.fixes.map((x) => x.title) }));
      } finally {
        linter.dispose();
      }
    };

    it('a meter call whose result feeds the loss keeps its argument as it is', async () => {
      const text = [
        'import torch',
        '',
        'class AdaptiveAugment:',
        '    def __init__(self):',
        '        self.signs = 0',
        '',
        '    def tune(self, real_pred):',
        '        self.signs += real_pred.clamp(-1, 1).sum()',
        '        return self.signs.item() * 1e-3',
        '',
        'def train(discriminator, loader, d_optim, augment):',
        '    ada = AdaptiveAugment()',
        '    p = 0.0',
        '    for real in loader:',
        '        real_pred = discriminator(augment(real, p))',
        '        d_loss = torch.nn.functional.softplus(-real_pred).mean()',
        '        d_optim.zero_grad()',
        '        d_loss.backward()',
        '        d_optim.step()',
        '        p = ada.tune(real_pred)',
        '',
      ].join('\n');
      assert.deepEqual(await lintText(text), [{ line: 20, rule: 'accumulated-loss', fixes: [] }]);
    });

    it('an evaluation function handed to a trainer as a callback (its callers are unknown) gets no decorator', async () => {
      const text = [
        'import torch',
        'from trainer import Trainer',
        '',
        'def evaluate(model, loader):',
        '    correct = 0',
        '    for x, y in loader:',
        '        correct += (model(x).argmax(1) == y).sum().item()',
        '    return correct',
        '',
        'def build(model, optimizer, loader):',
        '    return Trainer(model, optimizer, loader, eval_fn=evaluate)',
        '',
      ].join('\n');
      assert.deepEqual(await lintText(text), [{ line: 7, rule: 'missing-no-grad', fixes: [] }]);
    });

    it('a helper passed on in a lambda is guarded at its evaluation caller', async () => {
      const text = [
        'import torch',
        'from trainer import Trainer',
        '',
        'def predict(model, x):',
        '    return model(x)',
        '',
        'def build(model, optimizer):',
        '    return Trainer(model, optimizer, forward=lambda batch: predict(model, batch))',
        '',
        'def evaluate(model, loader):',
        '    correct = 0',
        '    for x, y in loader:',
        '        correct += (predict(model, x).argmax(1) == y).sum().item()',
        '    return correct',
        '',
      ].join('\n');
      assert.deepEqual(await lintText(text), [{ line: 13, rule: 'missing-no-grad', fixes: ['Decorate `evaluate` with `@torch.no_grad()`'] }]);
    });

    // evaluate -> tune -> evaluate is a cycle, and tune also steps the optimizer: evaluate trains.
    // Asked about tune first (warmup's call is analysed first), the cycle once cut evaluate's
    // answer off at "no training" and kept it: the decorator was offered, and training broke.
    it('a function that trains only through a cycle gets no decorator, whichever function of the cycle is looked at first', async () => {
      const cycle = [
        'def evaluate(model, loader, opt, depth=0):',
        '    model.eval()',
        '    for x in loader:',
        '        out = model(x)',
        '        print(out.argmax())',
        '    if depth:',
        '        tune(model, loader, opt, depth)',
        '',
        'def tune(model, loader, opt, depth):',
        '    evaluate(model, loader, opt, depth - 1)',
        '    step(opt)',
        '',
        'def step(opt):',
        '    opt.step()',
        '',
        'def main(model, loader, opt):',
        '    evaluate(model, loader, opt)',
        '',
      ];
      const warmup = ['def warmup(model, loader, opt):', '    tune(model, loader, opt, 1)', ''];
      const plain = await lintText(['import torch', '', ...cycle].join('\n'));
      const tuneFirst = await lintText(['import torch', '', ...warmup, ...cycle].join('\n'));
      assert.deepEqual(plain, [{ line: 6, rule: 'missing-no-grad', fixes: ['Wrap in `with torch.no_grad():`'] }]);
      assert.deepEqual(tuneFirst, [{ line: 6 + warmup.length, rule: 'missing-no-grad', fixes: ['Wrap in `with torch.no_grad():`'] }]);
    });
  });

  const corpus = process.env.LINT_CORPUS_DIR ?? join(repoRoot, '.lint-corpus');
  // The corpus's projects (test/fixtures/lint/real/*.json) that the cache holds; not a project held back in real-pending.
  const inCorpus = new Set(readdirSync(join(lintFixtures, 'real')).filter((f) => f.endsWith('.json')).map((f) => f.slice(0, -'.json'.length)));
  const projects = existsSync(corpus) ? readdirSync(corpus).filter((d) => inCorpus.has(d) && statSync(join(corpus, d)).isDirectory()).sort() : [];
  it(`applies every fix on the real-code corpus (${projects.length} projects)`, async function () {
    if (projects.length === 0) {
      this.skip(); // no real-code cache at LINT_CORPUS_DIR or .lint-corpus: `node scripts/lint-corpus.mjs fetch` (see notes on the corpus)
    }
    this.timeout(600_000);
    const violations: Violation[] = [];
    let checked = 0;
    for (const id of projects) {
      const linter = await createLinter();
      try {
        const r = checker.check(linter, pythonFiles(join(corpus, id)));
        checked += r.fixesChecked;
        violations.push(...r.violations);
      } finally {
        linter.dispose();
      }
    }
    assert.deepEqual(violations.map((v) => `${relative(corpus, v.path)}: ${v.fix}: ${v.problem}`), []);
    assert.ok(checked > 0, 'the corpus offered no fix at all');
  });
});

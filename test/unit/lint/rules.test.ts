import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { applyEdits } from '../../../src/lint/fixes';
import { createLinter, rules, type Linter } from '../../../src/lint/linter';
import { repoRoot } from '../../paths';
import { expectations, keyOf, lintFixtures, readFixtures } from './corpus';

/** Rules that explain but have no mechanical fix. */
const adviceOnly = new Set(['data-parallel']);
/**
 * Rules whose fix needs something the code may not have (an epoch variable, a name bound
 * before the loop, sibling lists already on the CPU, callers known to evaluate, a kept value
 * that is a tensor and not a dict of them): a finding may come without one.
 */
const fixDependsOnContext = new Set(['missing-set-epoch', 'model-to-device-in-loop', 'tensors-kept-for-logging', 'carried-hidden-state', 'missing-no-grad', 'accumulated-loss']);

describe('lint rules over the fixture corpus', () => {
  let linter: Linter;
  before(async () => {
    linter = await createLinter({ onError: (path, err) => { throw new Error(`internal error on ${path}: ${String(err)}`); } });
  });
  after(() => linter.dispose());

  const good = readFixtures(join(lintFixtures, 'good'));
  const bad = readFixtures(join(lintFixtures, 'bad'), (n) => !n.endsWith('.fixed.py'));

  it('registers every rule with a docs page and at least one hazard fixture', () => {
    const ids = rules.map((r) => r.id);
    assert.equal(new Set(ids).size, ids.length, 'rule ids are unique');
    const marked = new Set(bad.flatMap((f) => expectations(f.text).map((e) => e.slice(e.indexOf(':') + 1))));
    for (const r of rules) {
      const page = join(repoRoot, 'docs', 'rules', `${r.id}.md`);
      assert.ok(existsSync(page), `${page} is missing`);
      const text = readFileSync(page, 'utf8');
      for (const section of ['## The hazard', '## Bad', '## Good', '## The memory effect']) assert.ok(text.includes(section), `${r.id}.md lacks "${section}"`);
      assert.ok(marked.has(r.id), `no bad fixture expects ${r.id}`);
      assert.equal(r.docsUrl.endsWith(`/docs/rules/${r.id}.md`), true);
    }
  });

  it('has a corpus worth the name', () => {
    assert.ok(good.length >= 20, `${good.length} correct files`);
    assert.ok(bad.length >= 15, `${bad.length} hazard files`);
  });

  describe('correct code stays silent', () => {
    for (const f of good) {
      it(f.name, () => {
        const findings = linter.lintFile(f.path, f.text);
        assert.deepEqual(findings.map((x) => `${keyOf(x)} ${x.message}`), []);
      });
    }
  });

  describe('each hazard is reported exactly, on its line', () => {
    for (const f of bad) {
      it(f.name, () => {
        const expected = expectations(f.text);
        assert.ok(expected.length > 0, 'fixture has no # expect: marker');
        assert.deepEqual(linter.lintFile(f.path, f.text).map(keyOf).sort(), expected);
      });
    }
  });

  describe('fix-all produces the reviewed text, which lints clean', () => {
    for (const f of bad) {
      it(f.name, () => {
        const fixedPath = f.path.replace(/\.py$/, '.fixed.py');
        const expected = readFileSync(fixedPath, 'utf8');
        const fixed = linter.fixFile(f.path, f.text);
        assert.equal(fixed, expected);
        // What is left has no fix to offer (an advice such as data-parallel).
        assert.deepEqual(linter.lintFile(fixedPath, fixed).filter((x) => x.fixes.length > 0).map(keyOf), []);
        assert.equal(linter.hasSyntaxErrors(fixedPath), linter.hasSyntaxErrors(f.path) && f.name.startsWith('malformed'));
      });
    }
  });

  describe('each single fix removes its finding and breaks nothing', () => {
    for (const f of bad) {
      it(f.name, () => {
        const findings = linter.lintFile(f.path, f.text);
        findings.forEach((finding, i) => {
          if (adviceOnly.has(finding.ruleId) || (fixDependsOnContext.has(finding.ruleId) && finding.fixes.length === 0)) return;
          assert.ok(finding.fixes.length > 0, `${keyOf(finding)} has no fix`);
          const text = applyEdits(f.text, finding.fixes[0].edits);
          const probe = `${f.path}#fix${i}`;
          const after = linter.lintFile(probe, text);
          const sameRule = (xs: typeof findings) => xs.filter((x) => x.ruleId === finding.ruleId).length;
          assert.ok(sameRule(after) < sameRule(findings), `fix "${finding.fixes[0].title}" left ${keyOf(finding)} in place`);
          assert.equal(linter.hasSyntaxErrors(probe), linter.hasSyntaxErrors(f.path), `fix "${finding.fixes[0].title}" broke the syntax`);
          linter.removeFile(probe);
        });
      });
    }
  });

  describe('facts cross files', () => {
    const lint = (dir: string) => {
      const files = readFixtures(join(lintFixtures, 'workspace', dir));
      const results = linter.lintWorkspace(files);
      return files.map((f) => ({ name: f.name, expected: expectations(f.text), got: (results.get(f.path) ?? []).map(keyOf).sort() }));
    };
    it('stays silent when every caller (in other files) guards the evaluation', () => {
      for (const r of lint('guarded')) assert.deepEqual(r.got, [], r.name);
    });
    it('reports an evaluation one caller leaves unguarded, and a meter passed in from another file', () => {
      for (const r of lint('unguarded')) assert.deepEqual(r.got, r.expected, r.name);
    });
    it('follows values through the project\'s own functions and containers, and lints a script that uses its torch code without importing torch', () => {
      const results = lint('project');
      // Every file's findings are exactly its markers: the script without `import torch` included,
      // and report.py (plain Python that imports only the torch-free meters) silent.
      for (const r of results) assert.deepEqual(r.got, r.expected, r.name);
      const marked = results.flatMap((r) => r.expected.map((e) => `${r.name}:${e}`)).sort();
      assert.deepEqual(marked, [
        'train.py:12:missing-no-grad',
        'train.py:22:missing-set-epoch',
        'trainer.py:28:empty-cache-in-loop',
        'trainer.py:39:accumulated-loss',
        'trainer.py:40:accumulated-loss',
        'trainer.py:41:accumulated-loss',
      ]);
    });
    it('sees a grad guard through a decorator factory of the project (`@smart_inference_mode()`, guard picked by a condition), and not through one that only wraps', () => {
      const results = lint('decorators');
      for (const r of results) assert.deepEqual(r.got, r.expected, r.name);
      assert.deepEqual(results.flatMap((r) => r.expected.map((e) => `${r.name}:${e}`)), ['val.py:19:missing-no-grad']);
    });
    it('follows DistributedSampler loaders that helpers build into callers and into trainers that keep them in attributes', () => {
      const results = lint('ddp_helpers');
      for (const r of results) assert.deepEqual(r.got, r.expected, r.name);
      assert.equal(results.flatMap((r) => r.expected).filter((e) => e.endsWith('missing-set-epoch')).length, 3);
      // The trainer's shared epoch loop, called with train=False for its test loader (missing-no-grad's flag-off call).
      assert.deepEqual(results.flatMap((r) => r.expected.filter((e) => e.endsWith('missing-no-grad')).map((e) => `${r.name}:${e}`)), ['trainer.py:51:missing-no-grad']);
    });
    it('`dist.sample()` on what a model returned is the distribution\'s method, not a replay buffer\'s `sample()` of the same name; a helper\'s forward reported inside it is not reported again at its evaluation caller (held-out round 6)', () => {
      const results = lint('agent_buffer');
      for (const r of results) assert.deepEqual(r.got, r.expected, r.name);
      assert.deepEqual(results.flatMap((r) => r.expected.map((e) => `${r.name}:${e}`)), ['agent.py:33:missing-no-grad']);
    });
    it('a trainer module that backpropagates each chunk of its batch inside forward: the chunk loop is inside one step (held-out round 8; a workspace of its own, since its training forward() would be every fixture\'s `.forward` by name)', () => {
      const results = lint('chunked_trainer');
      assert.deepEqual(results.map((r) => [r.name, r.got]), [['trainer.py', []]]);
    });
    it('a trainer module whose forward returns a Python float on the path a call takes is no graph to keep; with its flag set (by keyword or a dict of keywords) it returns tensors, and a float start plus loss tensors is a tensor (held-out round 8, DALLE2)', () => {
      const results = lint('scalar_result_trainer');
      for (const r of results) assert.deepEqual(r.got, r.expected, r.name);
      assert.deepEqual(results.flatMap((r) => r.expected.map((e) => `${r.name}:${e}`)), ['train.py:23:accumulated-loss', 'train.py:27:accumulated-loss', 'train.py:31:accumulated-loss']);
    });
    it('a SAC agent\'s learn() runs the target critics and detaches their values into the loss it steps: part of that training step (held-out round 11; a workspace of its own, since its `evaluate()` method would be every fixture\'s `.evaluate` by name)', () => {
      const results = lint('sac_agent');
      assert.deepEqual(results.map((r) => [r.name, r.got]), [['sac.py', []]]);
    });
    it('a rollout kept with its graphs across a loop that trains nothing, read after it only detached, is reported; an A2C rollout it backpropagates, one under no_grad and one detached as kept are not (held-out round 13, Super-mario PPO, whose workers step the environments through pipes: an `envs.step()` would reach other fixtures\' training `step` methods by name)', () => {
      const results = lint('rollout');
      for (const r of results) assert.deepEqual(r.got, r.expected, r.name);
      assert.deepEqual(results.flatMap((r) => r.expected.map((e) => `${r.name}:${e}`)), ['ppo.py:16:accumulated-loss', 'ppo.py:19:accumulated-loss']);
    });
    it('a trainer whose update methods step `self.dis_opt` / `self.gen_opt` after a forward that backpropagates inside itself trains: its calls at module level are no inference (held-out round 16, FUNIT; a workspace of its own, since its training forward() would be every fixture\'s `.forward` by name)', () => {
      const results = lint('named_opt_trainer');
      assert.deepEqual(results.map((r) => [r.name, r.got]), [['train.py', []]]);
    });
    it('the same trainer with optimizers named `self.d` / `self.g`: what a method zeroes and steps is an optimizer, so its update methods train', () => {
      const results = lint('zeroed_step_trainer');
      assert.deepEqual(results.map((r) => [r.name, r.got]), [['train.py', []]]);
    });
    it('a loop that runs a submodule through `.forward(...)` trains nothing because some workspace module\'s own forward takes gradients (an attack): its read-only forward is reported', () => {
      const results = lint('attacker_forward');
      for (const r of results) assert.deepEqual(r.got, r.expected, r.name);
      assert.deepEqual(results.flatMap((r) => r.expected.map((e) => `${r.name}:${e}`)), ['features.py:10:missing-no-grad']);
    });
    it('a callback handed to a trainer method that calls it only under no_grad is guarded; one it calls unguarded is reported (held-out round 20, pytorchic-bert)', () => {
      const results = lint('callback_trainer');
      for (const r of results) assert.deepEqual(r.got, r.expected, r.name);
      assert.deepEqual(results.flatMap((r) => r.expected.map((e) => `${r.name}:${e}`)), ['classify.py:24:missing-no-grad']);
    });
    it('a module class named in lower case, built through its module (`G = network.generator(64)`), is a model: its forward over the test set is reported (held-out round 17\'s miss, pytorch-pix2pix)', () => {
      const results = lint('lowercase_class');
      for (const r of results) assert.deepEqual(r.got, r.expected, r.name);
      assert.deepEqual(results.flatMap((r) => r.expected.map((e) => `${r.name}:${e}`)), ['test.py:12:missing-no-grad']);
    });
    it('a factory that calls the class it looked up builds a model, and `d.infer_labels()` on an object is no call of a module\'s infer_labels() (held-out round 5)', () => {
      const results = lint('model_builders');
      assert.equal(results.length, 5);
      for (const r of results) assert.deepEqual(r.got, [], r.name);
    });
    it('follows a DistributedSampler loader into a helper in another file, and sees set_epoch there; the helper\'s `model.train()` is no call of another script\'s `train()` that reshuffles', () => {
      const missing = lint('distributed');
      assert.ok(missing.some((r) => r.expected.length > 0));
      for (const r of missing) assert.deepEqual(r.got, r.expected, r.name);
      for (const r of lint('distributed_ok')) assert.deepEqual(r.got, [], r.name);
    });
  });
});

describe('the PyTorch examples', () => {
  let linter: Linter;
  before(async () => {
    linter = await createLinter();
  });
  after(() => linter.dispose());
  const examples = join(lintFixtures, '..', '..', '..', 'examples', 'pytorch');

  it('train_with_hazards.py shows one hazard of each kind it was written with', () => {
    const path = join(examples, 'train_with_hazards.py');
    const ids = linter.lintFile(path, readFileSync(path, 'utf8')).map((f) => f.ruleId).sort();
    assert.deepEqual(ids, ['accumulated-loss', 'empty-cache-in-loop', 'missing-no-grad', 'sampler-shuffle']);
  });

  it('ddp_lstm_with_hazards.py shows the DDP and RNN hazards, and ddp_lstm_clean.py none', () => {
    const lintExample = (name: string) => {
      const path = join(examples, name);
      return linter.lintFile(path, readFileSync(path, 'utf8')).map((f) => f.ruleId).sort();
    };
    assert.deepEqual(lintExample('ddp_lstm_with_hazards.py'), ['carried-hidden-state', 'missing-set-epoch', 'model-to-device-in-loop', 'tensors-kept-for-logging']);
    assert.deepEqual(lintExample('ddp_lstm_clean.py'), []);
  });

  it('train_clean.py is clean', () => {
    const path = join(examples, 'train_clean.py');
    assert.deepEqual(linter.lintFile(path, readFileSync(path, 'utf8')), []);
  });
});

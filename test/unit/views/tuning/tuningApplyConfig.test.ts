import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'jsonc-parser';
import { applyConfigToJson, ApplyConfigError, describeDifferences, detectFormatting, minimalReplacement, planBestConfig } from '../../../../src/tuning/applyConfig';
import { Rng } from '../../../../src/tuning/rng';
import { Space } from '../../../../src/tuning/space';
import { loadSpec } from '../../../../src/tuning/spec';
import { repoRoot } from '../../../paths';

const job = `{
  // The MNIST digits, small.
  "$schema": "../../schemas/job.schema.json",
  "model": { "preset": "mlp", "hiddenUnits": [128] },
  "data": { "mnist": { "trainSize": 2000 } },
  "batchSize": 32, // tuned below
  "epochs": 3,
  "optimizer": {
    "name": "adam",
    /* found by hand */
    "learningRate": 0.001
  }
}
`;

function applyEdit(text: string, edit: { offset: number; length: number; content: string } | null): string {
  return edit ? text.slice(0, edit.offset) + edit.content + text.slice(edit.offset + edit.length) : text;
}

describe('Apply Best Config: merging a config into a job file (applyConfigToJson)', () => {
  it('sets each key at its path, keeps the other keys, the comments and the layout', () => {
    const r = applyConfigToJson(job, { batchSize: 64, optimizer: { learningRate: 0.0032 } }, 'mnist.job.json');
    assert.deepEqual(r.paths, ['/batchSize', '/optimizer/learningRate']);
    assert.deepEqual(r.changed, ['/batchSize', '/optimizer/learningRate']);
    const parsed = parse(r.text) as Record<string, unknown>;
    assert.equal(parsed.batchSize, 64);
    assert.deepEqual(parsed.optimizer, { name: 'adam', learningRate: 0.0032 });
    assert.deepEqual(parsed.model, { preset: 'mlp', hiddenUnits: [128] });
    for (const comment of ['// The MNIST digits, small.', '// tuned below', '/* found by hand */']) assert.ok(r.text.includes(comment), `keeps ${comment}`);
    // Only the two values changed, line for line.
    const before = job.split('\n');
    const after = r.text.split('\n');
    assert.equal(after.length, before.length);
    const differing = before.map((l, i) => [l, after[i]]).filter(([a, b]) => a !== b);
    assert.deepEqual(differing, [
      ['  "batchSize": 32, // tuned below', '  "batchSize": 64, // tuned below'],
      ['    "learningRate": 0.001', '    "learningRate": 0.0032'],
    ]);
  });

  it('adds keys the file lacks, creating their objects, in the file\'s own indentation', () => {
    const tabbed = '{\n\t"epochs": 3\n}\n';
    const r = applyConfigToJson(tabbed, { optimizer: { learningRate: 0.01 }, seed: 7 });
    assert.deepEqual(parse(r.text), { epochs: 3, optimizer: { learningRate: 0.01 }, seed: 7 });
    assert.match(r.text, /\n\t"optimizer": \{\n\t\t"learningRate": 0\.01\n\t\}/);
    const fourSpaces = applyConfigToJson('{\n    "epochs": 3\n}', { seed: 1 }).text;
    assert.match(fourSpaces, /\n {4}"seed": 1/);
  });

  it('replaces arrays and values of another type whole (an array is a value, not a path)', () => {
    const r = applyConfigToJson(job, { model: { hiddenUnits: [256, 64] }, epochs: 'auto' });
    const parsed = parse(r.text) as { model: unknown; epochs: unknown };
    assert.deepEqual(parsed.model, { preset: 'mlp', hiddenUnits: [256, 64] });
    assert.equal(parsed.epochs, 'auto');
  });

  it('reports values that are already right as applied but unchanged, and then edits nothing', () => {
    const r = applyConfigToJson(job, { batchSize: 32, model: { hiddenUnits: [128] } });
    assert.deepEqual(r.paths, ['/batchSize', '/model/hiddenUnits']);
    assert.deepEqual(r.changed, []);
    assert.equal(r.edit, null);
    assert.equal(r.text, job);
  });

  it('gives one minimal replacement that turns the old text into the new', () => {
    const r = applyConfigToJson(job, { batchSize: 64, optimizer: { learningRate: 0.0032 } });
    assert.ok(r.edit);
    assert.equal(applyEdit(job, r.edit), r.text);
    // It spans from the first change to the last, not the whole file.
    assert.ok(r.edit.offset > job.indexOf('"batchSize"'));
    assert.ok(r.edit.offset + r.edit.length < job.indexOf('}\n}'));
    assert.deepEqual(minimalReplacement('abcXdef', 'abcYYdef'), { offset: 3, length: 1, content: 'YY' });
    assert.deepEqual(minimalReplacement('aaa', 'aaaa'), { offset: 3, length: 0, content: 'a' });
  });

  it('keeps CRLF line endings', () => {
    const crlf = '{\r\n  "epochs": 3\r\n}\r\n';
    assert.equal(detectFormatting(crlf).eol, '\r\n');
    const r = applyConfigToJson(crlf, { seed: 5 });
    assert.doesNotMatch(r.text.replace(/\r\n/g, ''), /\n/);
  });

  it('refuses a path through a value that is not an object, naming the file and the path', () => {
    const text = '{ "model": "mlp", "layers": [1, 2] }';
    assert.throws(() => applyConfigToJson(text, { model: { hiddenUnits: [64] } }, 'a.job.json'),
      (e: unknown) => e instanceof ApplyConfigError && e.message === 'a.job.json: /model: is a string, so /model/hiddenUnits cannot be set in it');
    assert.throws(() => applyConfigToJson(text, { layers: { n: 1 } }, 'a.job.json'), /a\.job\.json: \/layers: is an array/);
  });

  it('refuses a file that is not a JSON object, naming the file and line', () => {
    assert.throws(() => applyConfigToJson('{\n  "a": 1,,\n}', { a: 2 }, 'bad.job.json'), /^ApplyConfigError: bad\.job\.json:2: not valid JSON \(PropertyNameExpected\); fix it before applying a config$/);
    assert.throws(() => applyConfigToJson('[1, 2]', { a: 2 }, 'list.json'), /list\.json: \/: must be a JSON object to take a config, found array/);
  });
});

describe('Apply Best Config: only the keys the search varied (planBestConfig)', () => {
  const mnistSpec = loadSpec(join(repoRoot, 'examples', 'tuning', 'mnist.tune.json'));
  const jobText = readFileSync(join(repoRoot, 'examples', 'mnist', 'mnist-ddp.job.json'), 'utf8');

  it('on the MNIST example writes the learning rate, hidden units and batch size, not the experiment\'s budget', () => {
    const varied = mnistSpec.space.variedPaths();
    assert.deepEqual(varied, [['optimizer', 'learningRate'], ['model', 'hiddenUnits'], ['batchSize']]);
    const config = mnistSpec.space.build(mnistSpec.space.sample(new Rng(5)));
    // The best trial's config holds the fixed keys too: single device, 4 epochs, 2000 samples.
    assert.equal(config.strategy, 'single');
    const plan = planBestConfig(jobText, config, varied, 'mnist-ddp.job.json');
    const applied = applyConfigToJson(jobText, plan.tuned, 'mnist-ddp.job.json');
    const after = parse(applied.text) as Record<string, unknown>;
    const before = parse(jobText) as Record<string, unknown>;
    assert.equal(after.strategy, 'ddp');
    assert.equal(after.devices, 2);
    assert.equal(after.epochs, 2);
    assert.deepEqual(after.data, before.data, 'the data size is the file\'s');
    assert.deepEqual(after.optimizer, { name: 'adam', learningRate: (config.optimizer as { learningRate: number }).learningRate });
    assert.deepEqual((after.model as { hiddenUnits: unknown }).hiddenUnits, (config.model as { hiddenUnits: unknown }).hiddenUnits);
    assert.equal(after.batchSize, config.batchSize);
    assert.deepEqual({ ...after, optimizer: null, model: null, batchSize: null }, { ...before, optimizer: null, model: null, batchSize: null }, 'no other key changed');
    // The fixed keys that differ are listed for the user to choose, with both values.
    assert.deepEqual(plan.differences, [
      { path: '/strategy', file: 'ddp', experiment: 'single' },
      { path: '/devices', file: 2, experiment: 1 },
      { path: '/epochs', file: 2, experiment: 4 },
      { path: '/data/mnist/trainSize', file: 8000, experiment: 2000 },
      { path: '/data/mnist/testSize', file: 2000, experiment: 1000 },
    ]);
    assert.equal(describeDifferences(plan.differences), '/strategy "ddp" → "single", /devices 2 → 1, /epochs 2 → 4, /data/mnist/trainSize 8000 → 2000, /data/mnist/testSize 2000 → 1000');
    // Chosen explicitly, the fixed part writes exactly those keys.
    const all = applyConfigToJson(applied.text, plan.fixed, 'mnist-ddp.job.json');
    assert.deepEqual(all.changed, plan.differences.map((d) => d.path));
  });

  it('lists no difference where the file has the fixed values already, and a key the file lacks as "(not set)"', () => {
    const space = Space.parse({ lr: { loguniform: [1e-4, 1e-1] }, epochs: 3, seed: 7 });
    const plan = planBestConfig('{ "lr": 0.1, "epochs": 3 }', { lr: 0.01, epochs: 3, seed: 7 }, space.variedPaths());
    assert.deepEqual(plan.tuned, { lr: 0.01 });
    assert.deepEqual(plan.fixed, { epochs: 3, seed: 7 });
    assert.deepEqual(plan.differences, [{ path: '/seed', file: undefined, experiment: 7 }]);
    assert.equal(describeDifferences(plan.differences), '/seed (not set) → 7');
  });

  it('counts a choice of objects as one varied key, with whatever its options hold; a one-value grid or choice is fixed', () => {
    const space = Space.parse({
      optimizer: { choice: [{ name: 'sgd', momentum: { uniform: [0.5, 0.99] } }, { name: 'adam' }] },
      model: { preset: 'mlp', hiddenUnits: { grid: [[64]] }, dropout: { choice: [0.1] } },
      batchSize: { grid: [32, 64] },
    });
    assert.deepEqual(space.variedPaths(), [['optimizer'], ['batchSize']]);
    const plan = planBestConfig('{ "optimizer": { "name": "adam", "learningRate": 0.001 }, "model": { "preset": "cnn" } }',
      { optimizer: { name: 'sgd', momentum: 0.9 }, model: { preset: 'mlp', hiddenUnits: [64], dropout: 0.1 }, batchSize: 64 }, space.variedPaths());
    assert.deepEqual(plan.tuned, { optimizer: { name: 'sgd', momentum: 0.9 }, batchSize: 64 });
    assert.deepEqual(plan.differences.map((d) => d.path), ['/model/preset', '/model/hiddenUnits', '/model/dropout']);
  });

  it('refuses a job file that cannot take the config, as applyConfigToJson does', () => {
    assert.throws(() => planBestConfig('{ "optimizer": "adam" }', { optimizer: { learningRate: 0.1 } }, [['optimizer', 'learningRate']], 'a.job.json'),
      /a\.job\.json: \/optimizer: is a string, so \/optimizer\/learningRate cannot be set in it/);
  });
});

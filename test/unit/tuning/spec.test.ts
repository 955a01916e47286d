import * as assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadSpec, parseSpec, SpecError, totalTrials } from '../../../src/tuning/spec';

const base = {
  space: { lr: { loguniform: [1e-4, 1e-1] }, batch: { grid: [32, 64] } },
  metric: 'loss',
  trial: { command: ['python3', 'train.py', '--lr', '${config.lr}'] },
};

function write(spec: unknown, name = 'x.tune.json'): string {
  const dir = mkdtempSync(join(tmpdir(), 'tune-spec-'));
  const file = join(dir, name);
  writeFileSync(file, typeof spec === 'string' ? spec : JSON.stringify(spec));
  return file;
}

function rejects(spec: unknown, path: string, re: RegExp): void {
  const file = write(spec);
  assert.throws(() => loadSpec(file), (e: unknown) => {
    assert.ok(e instanceof SpecError, String(e));
    assert.equal(e.path, path, e.message);
    assert.match(e.message, re);
    assert.ok(e.message.startsWith(file), 'the message names the file');
    return true;
  });
}

describe('tune spec: parsing and validation', () => {
  it('reads a spec with Ray-like defaults and names the experiment after the file', () => {
    const spec = loadSpec(write(base, 'mnist.tune.json'));
    assert.equal(spec.name, 'mnist');
    assert.equal(spec.mode, 'min');
    assert.equal(spec.search.algorithm, 'random');
    assert.equal(spec.numSamples, 1);
    assert.deepEqual(spec.scheduler, { type: 'fifo' });
    assert.equal(totalTrials(spec), 2, 'random repeats the grid numSamples times');
    const asha = parseSpec({ ...base, scheduler: { type: 'asha' } });
    assert.deepEqual(asha.scheduler, { type: 'asha', timeAttr: 'training_iteration', maxT: 100, gracePeriod: 1, reductionFactor: 4, brackets: 1 });
  });

  it('reads a spec saved with a UTF-8 byte order mark (Notepad)', () => {
    const file = write(`\uFEFF${JSON.stringify(base)}`, 'bom.tune.json');
    const spec = loadSpec(file);
    assert.equal(spec.name, 'bom');
    assert.deepEqual(spec.trial, parseSpec(base, file).trial);
  });

  it('names the file, the field path and what was expected', () => {
    rejects({ ...base, mode: 'minimize' }, '/mode', /must be one of "min", "max"/);
    rejects({ ...base, metric: undefined }, '/metric', /is required/);
    rejects({ ...base, numSampels: 3 }, '/numSampels', /not a known field/);
    rejects({ ...base, space: { lr: { uniform: [1] } } }, '/space/lr/uniform', /fewer than 2 items/);
    rejects({ ...base, space: { lr: { uniform: [0, 1], q: 2 } } }, '/space/lr', /exactly one key/);
    rejects({ ...base, space: { lr: { uniform: [1, 0] } } }, '/space/lr/uniform', /below the upper bound/);
    rejects({ ...base, scheduler: { type: 'asha', reductionFactor: 1 } }, '/scheduler/reductionFactor', /must be > 1/);
    rejects({ ...base, scheduler: { type: 'asha', maxT: 5, gracePeriod: 10 } }, '/scheduler/gracePeriod', /at most maxT/);
    rejects({ ...base, trial: { command: ['x', '${config.momentum}'] } }, '/trial/command/1', /names no parameter/);
    rejects({ ...base, trial: {} }, '/trial', /either "command"/);
    rejects({ ...base, search: { algorithm: 'tpe' } }, '/space/batch', /grid cannot be combined/);
    rejects({ ...base, gpusPerTrial: 1.5 }, '/gpusPerTrial', /whole number/);
    rejects('{"space": ', '', /not valid JSON/);
  });

  it('accepts a job trial (run by the training host) and resolves it next to the spec', () => {
    const file = write({ ...base, trial: { job: 'mnist.job.json' } });
    const spec = loadSpec(file);
    assert.equal(spec.trial.kind, 'job');
    assert.equal(spec.trial.kind === 'job' && spec.trial.job, join(file, '..', 'mnist.job.json'));
  });
});

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isTorchrunJob, loadTorchrunJob } from '../../../../src/training/launchers/torchrun';
import { JobFileError, loadJobFile, parseJob } from '../../../../src/training/job/spec';
import { fixtures, repoRoot } from '../../../paths';

const jobs = join(fixtures, 'jobs');

function problems(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof JobFileError, `expected a JobFileError, got ${String(err)}`);
    return err.message;
  }
  assert.fail('expected the job to be rejected');
}

describe('job file', () => {
  it('loads the bundled MNIST example with defaults filled in and paths made absolute', () => {
    const spec = loadJobFile(join(repoRoot, 'examples', 'mnist', 'mnist-ddp.job.json'));
    assert.equal(spec.name, 'mnist-ddp');
    assert.equal(spec.strategy, 'ddp');
    assert.deepEqual(spec.devices, [0, 1]);
    assert.deepEqual(spec.model, { kind: 'preset', preset: 'mlp', hiddenUnits: [128] });
    assert.deepEqual(spec.data, { kind: 'mnist', trainSize: 8000, testSize: 2000 });
    assert.equal(spec.optimizer.name, 'adam');
    assert.equal(spec.backend, 'auto');
    assert.equal(spec.checkpointDir, join(repoRoot, 'examples', 'mnist', 'checkpoints'));
  });

  it('loads the bundled MNIST CNN example (the preset whose conv gradients run our webgpu kernel)', () => {
    const spec = loadJobFile(join(repoRoot, 'examples', 'mnist', 'mnist-cnn.job.json'));
    assert.deepEqual([spec.name, spec.strategy, spec.devices], ['mnist-cnn', 'single', [0]]);
    assert.deepEqual(spec.model, { kind: 'preset', preset: 'cnn', filters: [8, 16] });
  });

  it('names the file, the field path and what was expected', () => {
    const msg = problems(() => loadJobFile(join(jobs, 'bad-learning-rate.job.json')));
    assert.equal(msg, 'bad-learning-rate.job.json: /optimizer/learningRate must be a number > 0');
  });

  it('reports every problem of a file at once, one line each', () => {
    const lines = problems(() => loadJobFile(join(jobs, 'many-problems.job.json'))).split('\n');
    assert.ok(lines.every((l) => l.startsWith('many-problems.job.json: ')), lines.join('\n'));
    const text = lines.join('\n');
    assert.match(text, /\/ is missing the required field "batchSize"/);
    assert.match(text, /\/ has an unknown field "optimiser"/);
    assert.match(text, /\/model\/preset must be one of "mlp", "cnn"/);
    assert.match(text, /\/data must be an object with exactly one of "mnist", "csv", "idx", "module"/);
    assert.match(text, /\/epochs must be an integer ≥ 1/);
    assert.match(text, /\/devices must not list a device twice/);
  });

  it('rejects a batch that does not split evenly over the ddp devices, and an oversized MNIST split', () => {
    const msg = problems(() => loadJobFile(join(jobs, 'odd-batch.job.json')));
    assert.match(msg, /odd-batch\.job\.json: \/batchSize must be divisible by the number of devices \(2\) for strategy "ddp", got 33/);
    assert.match(msg, /\/data\/mnist: trainSize \+ testSize must be ≤ 10000/);
  });

  it('loads a job file saved with a UTF-8 byte order mark (Notepad) as the same job without one, TF.js and torchrun', () => {
    const dir = mkdtempSync(join(tmpdir(), 'gpu-workbench-bom-'));
    const text = readFileSync(join(repoRoot, 'examples', 'mnist', 'mnist-ddp.job.json'), 'utf8');
    writeFileSync(join(dir, 'plain.job.json'), text);
    writeFileSync(join(dir, 'bom.job.json'), `\uFEFF${text}`);
    const bom = loadJobFile(join(dir, 'bom.job.json'));
    assert.deepEqual({ ...bom, file: '', name: '' }, { ...loadJobFile(join(dir, 'plain.job.json')), file: '', name: '' });
    assert.equal(bom.strategy, 'ddp');

    const torchrun = JSON.parse(readFileSync(join(repoRoot, 'examples', 'torchrun', 'ddp.job.json'), 'utf8')) as { script: string };
    const file = join(dir, 'torchrun.job.json');
    writeFileSync(file, `\uFEFF${JSON.stringify({ ...torchrun, script: join(repoRoot, 'examples', 'torchrun', torchrun.script) })}`);
    assert.equal(isTorchrunJob(file), true);
    assert.equal(loadTorchrunJob(file).nprocPerNode, 2);
  });

  it('says when the file is not JSON or missing', () => {
    assert.match(problems(() => loadJobFile(join(jobs, 'not-json.job.json'))), /^not-json\.job\.json: is not valid JSON/);
    assert.match(problems(() => loadJobFile(join(jobs, 'nope.job.json'))), /^nope\.job\.json: cannot be read \(ENOENT\)/);
  });

  it('resolves data paths against the job file and checks that they exist', () => {
    const spec = loadJobFile(join(jobs, 'tiny-csv.job.json'));
    assert.equal(spec.data.kind, 'csv');
    assert.equal(spec.data.kind === 'csv' && spec.data.path, join(jobs, 'tiny.csv'));
    const msg = problems(() => parseJob({ model: './net/model.json', data: { module: 'missing-data.js' }, batchSize: 1, epochs: 1 }, join(jobs, 'x.job.json')));
    assert.match(msg, /x\.job\.json: \/model: .*net\/model\.json does not exist/);
    assert.match(msg, /\/data: .*missing-data\.js does not exist/);
  });

  it('lets the command line override strategy, devices and epochs, and checks the result', () => {
    const file = join(repoRoot, 'examples', 'mnist', 'mnist-ddp.job.json');
    const spec = loadJobFile(file, { strategy: 'single', devices: 1, epochs: 5 });
    assert.equal(spec.strategy, 'single');
    assert.deepEqual(spec.devices, [0]);
    assert.equal(spec.epochs, 5);
    assert.deepEqual(loadJobFile(file, { devices: [1, 3] }).devices, [1, 3]);
    assert.match(problems(() => loadJobFile(file, { strategy: 'single' })), /\/devices: strategy "single" runs on one device, got 2/);
  });
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatEvent, parseTrainArgs } from '../../../src/cli/train';
import type { JobEvent } from '../../../src/training/job/events';
import { fixtures, repoRoot } from '../../paths';

const cli = join(repoRoot, 'out', 'src', 'cli.js');
const tinyJob = join(fixtures, 'jobs', 'tiny-mnist.job.json');

function train(...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [cli, 'train', ...args], { encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('gpu-workbench train', function () {
  this.timeout(60_000);

  it('parses strategy, devices (count or list), epochs, backend, --json and --resume', () => {
    assert.deepEqual(parseTrainArgs(['job.json', '--strategy', 'ddp', '--devices', '0,2', '--epochs=3', '--json', '--resume', '--backend', 'cpu']), {
      file: 'job.json', json: true, resume: true, overrides: { strategy: 'ddp', devices: [0, 2], epochs: 3, backend: 'cpu' },
    });
    assert.deepEqual(parseTrainArgs(['--devices', '4', 'job.json']), { file: 'job.json', json: false, resume: false, overrides: { devices: 4 } });
    assert.throws(() => parseTrainArgs(['job.json', '--strategy', 'fsdp']), /--strategy expects one of single, dp, ddp, pipeline, got 'fsdp'/);
    assert.throws(() => parseTrainArgs(['job.json', '--devices', 'two']), /--devices expects a count \(2\) or a list of device indices \(0,1\), got 'two'/);
    assert.throws(() => parseTrainArgs(['job.json', '--epochs', '0']), /--epochs expects a whole number of at least 1/);
    assert.throws(() => parseTrainArgs([]), /which job\?/);
  });

  it('prints epoch, step, loss and samples/s for people', () => {
    const state = { every: 1 };
    const started: JobEvent = { type: 'job/started', job: 'mnist', file: 'x', strategy: 'ddp', backend: 'wasm', description: 'backend wasm (CPU), 2 workers, no GPU: @tensorflow/tfjs-node-gpu is not installed', workers: [{ rank: 0, pid: 11, device: 'cpu', backend: 'wasm' }], epochs: 2, stepsPerEpoch: 50, globalBatch: 128, trainSamples: 6400, testSamples: 100, startEpoch: 0 };
    assert.match(formatEvent(started, state), /^mnist: ddp, backend wasm \(CPU\), 2 workers, no GPU: @tensorflow\/tfjs-node-gpu is not installed\n {2}rank 0 {2}pid 11 {2}cpu {2}wasm/);
    assert.equal(state.every, 10, 'about five progress lines per epoch');
    assert.equal(formatEvent({ type: 'job/step', epoch: 1, step: 20, stepsPerEpoch: 50, globalStep: 20, loss: 0.53219, samplesPerSecond: 5412.7 }, state), 'epoch 1  step 20/50  loss 0.5322  5,413 samples/s');
    assert.equal(formatEvent({ type: 'job/step', epoch: 1, step: 21, stepsPerEpoch: 50, globalStep: 21, loss: 0.5, samplesPerSecond: 1 }, state), '');
    assert.equal(formatEvent({ type: 'job/failed', reason: 'worker 1 (pid 9) was killed by SIGKILL', rank: 1, hint: 'try a smaller batchSize' }, state), 'training failed (rank 1): worker 1 (pid 9) was killed by SIGKILL\nhint: try a smaller batchSize');
  });

  it('with --json prints one event per line and ends with job/done', () => {
    const r = train(tinyJob, '--json', '--strategy', 'ddp', '--devices', '2');
    assert.equal(r.code, 0, r.stderr);
    const events = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as JobEvent);
    assert.equal(events[0].type, 'job/started');
    const last = events[events.length - 1];
    assert.equal(last.type, 'job/done');
    assert.ok(last.type === 'job/done' && last.metrics.testAccuracy > 0);
  });

  it('exits 1 with job/failed naming the file and field for a bad job, and 2 for bad options', () => {
    const r = train(join(fixtures, 'jobs', 'bad-learning-rate.job.json'), '--json');
    assert.equal(r.code, 1);
    assert.deepEqual(JSON.parse(r.stdout.trim()), { type: 'job/failed', reason: 'bad-learning-rate.job.json: /optimizer/learningRate must be a number > 0', hint: 'Fix the job file; its schema is schemas/job.schema.json.' });
    const human = train(join(fixtures, 'jobs', 'bad-learning-rate.job.json'));
    assert.equal(human.code, 1);
    assert.match(human.stderr, /^training failed: bad-learning-rate\.job\.json: \/optimizer\/learningRate must be a number > 0/);
    assert.equal(train(tinyJob, '--frobnicate').code, 2);
  });

  it('never mixes two runs in one checkpoint folder: without --resume the earlier run moves into previous-<time>/, with --resume it goes on', () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cli-rerun-'));
    try {
      const job = join(dir, 'rerun.job.json');
      writeFileSync(job, JSON.stringify({ ...JSON.parse(readFileSync(tinyJob, 'utf8')) as object, name: 'rerun', maxStepsPerEpoch: 1, checkpointDir: 'ck' }));
      const ck = join(dir, 'ck');
      const latest = (root: string) => JSON.parse(readFileSync(join(root, 'latest.json'), 'utf8')) as { dir: string; epoch: number };
      const savedAt = (root: string, epoch: string) => (JSON.parse(readFileSync(join(root, epoch, 'trainer.json'), 'utf8')) as { savedAt: string }).savedAt;
      const events = (r: { stdout: string }) => r.stdout.trim().split('\n').map((l) => JSON.parse(l) as JobEvent);

      const first = train(job, '--json', '--epochs', '3');
      assert.equal(first.code, 0, first.stderr);
      assert.deepEqual(latest(ck), { dir: 'epoch-3', epoch: 3 });
      const firstSaved = savedAt(ck, 'epoch-3');

      // Run again from scratch (no --resume), as Start Over does, and stop after one epoch.
      const again = train(job, '--json', '--epochs', '1');
      assert.equal(again.code, 0, again.stderr);
      const previous = readdirSync(ck).filter((n) => n.startsWith('previous-'));
      assert.equal(previous.length, 1, `one previous-<time>/ folder in ${readdirSync(ck).join(', ')}`);
      // The new run's folder holds the new run only; its latest.json names its own checkpoint.
      assert.deepEqual(readdirSync(ck).filter((n) => !n.startsWith('previous-')).sort(), ['epoch-1', 'latest.json']);
      assert.deepEqual(latest(ck), { dir: 'epoch-1', epoch: 1 });
      // The earlier run is whole where it went, its latest.json still naming its last epoch.
      const old = join(ck, previous[0]);
      assert.deepEqual(readdirSync(old).sort(), ['epoch-1', 'epoch-2', 'epoch-3', 'latest.json']);
      assert.deepEqual(latest(old), { dir: 'epoch-3', epoch: 3 });
      assert.equal(savedAt(old, 'epoch-3'), firstSaved);
      const said = events(again).find((e) => e.type === 'job/log' && /moved to/.test(e.message));
      assert.ok(said?.type === 'job/log' && said.message.includes(old) && /--resume/.test(said.message), 'the log says where the earlier run went and how to continue a run');
      // Shown to people too.
      assert.match(formatEvent(said, { every: 1 }), /^warning: .*held the earlier run of rerun \(epoch-1 … epoch-3, latest epoch-3/);

      // --resume continues the run in the folder, leaving the earlier one where it is.
      const resumed = train(job, '--json', '--epochs', '2', '--resume');
      assert.equal(resumed.code, 0, resumed.stderr);
      const started = events(resumed)[0];
      assert.ok(started.type === 'job/started' && started.startEpoch === 1);
      assert.deepEqual(latest(ck), { dir: 'epoch-2', epoch: 2 });
      assert.deepEqual(readdirSync(ck).filter((n) => n.startsWith('previous-')), previous);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
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
  describe('one checkpoint folder, one run', () => {
    let dir: string;
    let job: string;
    let ck: string;
    beforeEach(() => {
      dir = mkdtempSync(join(tmpdir(), 'gw-cli-ck-'));
      job = join(dir, 'ck.job.json');
      writeFileSync(job, JSON.stringify({ ...JSON.parse(readFileSync(tinyJob, 'utf8')) as object, name: 'ck', maxStepsPerEpoch: 1, checkpointDir: 'ck' }));
      ck = join(dir, 'ck');
    });
    afterEach(() => rmSync(dir, { recursive: true, force: true }));
    const events = (r: { stdout: string }) => r.stdout.trim().split('\n').map((l) => JSON.parse(l) as JobEvent);
    const latest = (root: string) => JSON.parse(readFileSync(join(root, 'latest.json'), 'utf8')) as { dir: string; epoch: number };

    it('a second start on a folder a running job holds is refused, naming the folder and the running process, and moves nothing', async () => {
      // Run A, stopped (SIGSTOP) once it has started, so that it is surely running when B starts.
      const a = spawn(process.execPath, [cli, 'train', job, '--json', '--epochs', '3'], { stdio: ['ignore', 'pipe', 'pipe'] });
      const aEvents: JobEvent[] = [];
      const aExit = once(a, 'exit');
      await new Promise<void>((resolve, reject) => {
        createInterface({ input: a.stdout }).on('line', (line) => {
          const e = JSON.parse(line) as JobEvent;
          aEvents.push(e);
          if (e.type === 'job/started') {
            a.kill('SIGSTOP');
            resolve();
          }
        });
        a.on('exit', () => reject(new Error(`run A ended before it started: ${JSON.stringify(aEvents)}`)));
      });
      try {
        const b = train(job, '--json', '--epochs', '1');
        assert.equal(b.code, 1, b.stderr);
        const failed = events(b);
        assert.equal(failed.length, 1, 'B fails before it starts');
        assert.ok(failed[0].type === 'job/failed');
        assert.ok(failed[0].reason.startsWith(`the checkpoint folder ${ck} is in use by another running job: pid ${a.pid}, job ck (${job}), started 20`), failed[0].reason);
        assert.match(failed[0].hint ?? '', /Wait for that job to end \(or stop it\), or give this job another checkpointDir/);
        assert.deepEqual(readdirSync(ck).filter((n) => n.startsWith('previous-')), [], 'B moved nothing aside');
        const human = train(job, '--epochs', '1');
        assert.match(human.stderr, new RegExp(`^training failed: the checkpoint folder .* is in use by another running job: pid ${a.pid}`));
      } finally {
        a.kill('SIGCONT');
      }
      const [code] = (await aExit) as [number | null, NodeJS.Signals | null];
      assert.equal(code, 0);
      assert.equal(aEvents[aEvents.length - 1]?.type, 'job/done');
      // Only A's run in the folder, its latest.json naming its last epoch; its lock is gone.
      assert.deepEqual(readdirSync(ck).sort(), ['epoch-1', 'epoch-2', 'epoch-3', 'latest.json']);
      assert.deepEqual(latest(ck), { dir: 'epoch-3', epoch: 3 });
    });

    it('a job that fails before it starts (backend not available) leaves the earlier run where it was', () => {
      assert.equal(train(job, '--json', '--epochs', '2').code, 0);
      const failed = train(job, '--json', '--backend', 'tensorflow-gpu');
      assert.equal(failed.code, 1);
      const last = events(failed).pop();
      assert.ok(last?.type === 'job/failed' && /backend "tensorflow-gpu" is not available/.test(last.reason), failed.stdout);
      assert.deepEqual(readdirSync(ck).sort(), ['epoch-1', 'epoch-2', 'latest.json'], 'nothing moved, no lock left');
      // Started for real, it says what it moved where.
      const again = train(job, '--epochs', '1');
      assert.equal(again.code, 0, again.stderr);
      const previous = readdirSync(ck).filter((n) => n.startsWith('previous-'));
      assert.equal(previous.length, 1);
      assert.ok(again.stdout.includes(`warning: ${ck} held the earlier run of ck (epoch-1 … epoch-2, latest epoch-2`) && again.stdout.includes(`moved to ${join(ck, previous[0])}`), again.stdout);
    });

    it('a checkpointDir that is a file fails up front, naming it, before any training', () => {
      writeFileSync(ck, 'not a folder');
      const r = train(job, '--json');
      assert.equal(r.code, 1);
      assert.deepEqual(events(r), [{ type: 'job/failed', reason: `checkpointDir ${ck} is not a folder: it is a file (EEXIST: file already exists, mkdir '${ck}')`, hint: 'Fix or change the job\'s checkpointDir.' }]);
    });

    it('--resume with an empty latest.json resumes from the newest whole epoch folder and says so', () => {
      assert.equal(train(job, '--json', '--epochs', '3').code, 0);
      writeFileSync(join(ck, 'latest.json'), '');
      const r = train(job, '--json', '--epochs', '4', '--resume');
      assert.equal(r.code, 0, r.stderr);
      const all = events(r);
      assert.ok(all[0].type === 'job/started' && all[0].startEpoch === 3, JSON.stringify(all[0]));
      assert.ok(all.some((e) => e.type === 'job/log' && e.message.startsWith(`latest.json is empty: resuming from the newest whole checkpoint in ${ck}, epoch-3 (3 epochs done), and latest.json now names it`)), r.stdout);
      assert.deepEqual(readdirSync(ck).sort(), ['epoch-1', 'epoch-2', 'epoch-3', 'epoch-4', 'latest.json']);
      assert.deepEqual(latest(ck), { dir: 'epoch-4', epoch: 4 });
    });

    it('--resume of another job\'s run is refused, saying whose it is', () => {
      assert.equal(train(job, '--json').code, 0);
      const other = join(dir, 'other.job.json');
      writeFileSync(other, JSON.stringify({ ...JSON.parse(readFileSync(job, 'utf8')) as object, name: 'other', model: { preset: 'mlp', hiddenUnits: [8] } }));
      const r = train(other, '--json', '--resume');
      assert.equal(r.code, 1);
      const [failed] = events(r);
      assert.ok(failed.type === 'job/failed' && failed.reason.includes(`holds a run that is not this job's: it was written by another job file, ${job} (job ck)`), r.stdout);
      assert.deepEqual(readdirSync(ck).sort(), ['epoch-1', 'latest.json']);
    });
  });
});

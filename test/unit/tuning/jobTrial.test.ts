import * as assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TuneEvent } from '../../../src/tuning/events';
import { Experiment } from '../../../src/tuning/experiment';
import { absolutizeJobPaths, JobTrialError, mergeConfig, parseJobLine, prepareJobTrial } from '../../../src/tuning/jobTrial';
import { parseSpec } from '../../../src/tuning/spec';
import { fixtures } from '../../paths';

const jobDir = join(fixtures, 'tuning', 'job-mnist');
const tinyJob = join(jobDir, 'tiny.job.json');

const of = <T extends TuneEvent['type']>(events: TuneEvent[], type: T): Array<Extract<TuneEvent, { type: T }>> =>
  events.filter((e): e is Extract<TuneEvent, { type: T }> => e.type === type);

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function until(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function experiment(spec: Record<string, unknown>, gpuCount = 0): { exp: Experiment; events: TuneEvent[]; output: Map<number, string>; workspace: string } {
  const workspace = mkdtempSync(join(tmpdir(), 'tune-job-'));
  const parsed = parseSpec({ metric: 'accuracy', mode: 'max', trial: { job: tinyJob }, ...spec }, join(workspace, 'job.tune.json'));
  const events: TuneEvent[] = [];
  const output = new Map<number, string>();
  const exp = new Experiment({ spec: parsed, workspace, gpuCount, output: (id, text) => output.set(id, (output.get(id) ?? '') + text) });
  exp.onEvent((e) => events.push(e));
  return { exp, events, output, workspace };
}

describe('tuning: job trials', function () {
  this.timeout(120_000);

  describe('the merged job', () => {
    it('lays the config over the job: nested groups and dotted keys at their paths, arrays replaced, a string preset opened up', () => {
      const job = { model: 'mlp', optimizer: { name: 'adam', learningRate: 0.001 }, batchSize: 64, data: { mnist: { trainSize: 500 } } };
      const merged = mergeConfig(job, { optimizer: { learningRate: 0.02 }, 'data.mnist.testSize': 100, batchSize: 32, model: { hiddenUnits: [8, 8] } });
      assert.deepEqual(merged, { model: { preset: 'mlp', hiddenUnits: [8, 8] }, optimizer: { name: 'adam', learningRate: 0.02 }, batchSize: 32, data: { mnist: { trainSize: 500, testSize: 100 } } });
      assert.equal(job.optimizer.learningRate, 0.001, 'the original is left alone');
    });

    it('resolves relative paths against the original job folder', () => {
      const out = absolutizeJobPaths({ model: 'net/model.json', data: { csv: { path: 'd.csv', testPath: '/abs/t.csv' } }, checkpointDir: 'ck' }, '/jobs');
      assert.deepEqual(out, { model: '/jobs/net/model.json', data: { csv: { path: '/jobs/d.csv', testPath: '/abs/t.csv' } }, checkpointDir: 'ck' });
      const torch = absolutizeJobPaths({ kind: 'torchrun', script: 'train.py', python: '.venv/bin/python' }, '/jobs');
      assert.deepEqual(torch, { kind: 'torchrun', script: '/jobs/train.py', python: '/jobs/.venv/bin/python', cwd: '/jobs' });
    });

    it('writes the copy into the trial folder, with checkpoints there too, and refuses a config that breaks the job', () => {
      const trialDir = join(mkdtempSync(join(tmpdir(), 'tune-job-')), 'trial_1');
      const p = prepareJobTrial({ job: tinyJob, config: { optimizer: { learningRate: 0.05 }, checkpointDir: 'ck' }, trialDir, cli: '/x/cli.js' });
      assert.equal(p.jobFile, join(trialDir, 'trial.job.json'));
      assert.deepEqual(p.command, [process.execPath, '/x/cli.js', 'train', p.jobFile, '--json', '--no-record']);
      const copy = JSON.parse(readFileSync(p.jobFile, 'utf8')) as { optimizer: { learningRate: number }; checkpointDir: string };
      assert.equal(copy.optimizer.learningRate, 0.05);
      assert.equal(copy.checkpointDir, join(trialDir, 'checkpoints'));
      assert.throws(() => prepareJobTrial({ job: tinyJob, config: { batchSize: -3, lr: 1 }, trialDir }), (e: unknown) => e instanceof JobTrialError && /\/batchSize must be/.test(e.message) && /unknown field "lr"/.test(e.message));
    });

    it('copies a job saved with a UTF-8 byte order mark (Notepad) as it would one without', () => {
      const dir = mkdtempSync(join(tmpdir(), 'tune-job-bom-'));
      const bom = join(dir, 'bom.job.json');
      writeFileSync(bom, `\uFEFF${readFileSync(tinyJob, 'utf8')}`);
      const p = prepareJobTrial({ job: bom, config: { epochs: 1 }, trialDir: join(dir, 'trial_1') });
      const copy = JSON.parse(readFileSync(p.jobFile, 'utf8')) as { epochs: number };
      assert.equal(copy.epochs, 1);
    });

    it('turns job/epoch into a report under the documented names and job/failed into its reason', () => {
      const r = parseJobLine(JSON.stringify({ type: 'job/epoch', epoch: 2, epochs: 3, trainLoss: 0.5, testLoss: 0.6, testAccuracy: 0.8, samplesPerSecond: 1000, durationMs: 1500 }));
      assert.deepEqual(r?.kind === 'report' && r.result, { training_iteration: 2, loss: 0.5, test_loss: 0.6, accuracy: 0.8, samples_per_second: 1000, time_this_iter_s: 1.5 });
      const f = parseJobLine(JSON.stringify({ type: 'job/failed', reason: 'out of memory', rank: 1, hint: 'smaller batch' }));
      assert.equal(f?.kind === 'failed' && f.reason, 'training failed (rank 1): out of memory (hint: smaller batch)');
      assert.equal(parseJobLine('plain text'), null);
    });
  });

  describe('end to end with the training CLI on a tiny MNIST job', () => {
    it('a random search with ASHA: every trial ends, reports carry accuracy per epoch, the best config is the best trial', async () => {
      const { exp, events, output } = experiment({
        space: { optimizer: { learningRate: { loguniform: [1e-4, 3e-2] } }, model: { hiddenUnits: { choice: [[8], [32]] } } },
        search: { algorithm: 'random', seed: 3 },
        numSamples: 4, maxConcurrent: 2,
        scheduler: { type: 'asha', maxT: 3, gracePeriod: 1, reductionFactor: 2 },
      }, 2);
      const best = await exp.run();
      const views = exp.trialViews();
      assert.equal(views.length, 4);
      for (const v of views) {
        assert.ok(v.status === 'done' || v.status === 'stopped', `trial ${v.trialId} ended ${v.status}: ${v.error ?? ''}\n${output.get(v.trialId) ?? ''}`);
        assert.ok(v.reports.length >= 1);
        v.reports.forEach((r, i) => {
          assert.equal(r.training_iteration, i + 1);
          assert.ok(typeof r.accuracy === 'number' && r.accuracy >= 0 && r.accuracy <= 1, JSON.stringify(r));
          assert.equal(typeof r.loss, 'number');
          assert.equal(typeof r.test_loss, 'number');
        });
        assert.match(output.get(v.trialId) ?? '', /epoch 1\/3: loss [\d.]+, test loss [\d.]+, accuracy [\d.]+%/);
      }
      // Each trial had its own GPU (CUDA_VISIBLE_DEVICES) out of two.
      for (const s of of(events, 'trial/started')) assert.match(s.cudaVisibleDevices ?? '', /^[01]$/);
      const finals = views.map((v) => ({ config: v.config, acc: v.reports[v.reports.length - 1].accuracy as number }));
      const top = Math.max(...finals.map((f) => f.acc));
      assert.ok(best, 'a best trial');
      assert.equal(best.metric, top);
      assert.deepEqual(best.config, finals.find((f) => f.acc === top)?.config);
      const done = of(events, 'experiment/done')[0];
      assert.deepEqual(done.best, best);
    });

    it('ASHA stopping a job trial ends the training CLI and its worker: none survives', async () => {
      const { exp, events, output } = experiment({
        space: { optimizer: { learningRate: { grid: [0.01, 1e-7] } }, epochs: 40 },
        search: { algorithm: 'grid' }, maxConcurrent: 1,
        scheduler: { type: 'asha', maxT: 2, gracePeriod: 1, reductionFactor: 2 },
        stopGraceSeconds: 5,
      });
      await exp.run();
      const stopped = of(events, 'trial/stopped');
      assert.deepEqual(stopped.map((s) => [s.trialId, s.reason]), [[1, 'maxT'], [2, 'asha']]);
      const views = exp.trialViews();
      assert.deepEqual(views.map((v) => v.reports.length), [2, 1], 'trial 1 stopped at maxT, trial 2 at the first rung, long before its 40 epochs');
      const pids = [1, 2].flatMap((id) => [...(output.get(id) ?? '').matchAll(/rank \d+ {2}pid (\d+)/g)].map((m) => Number(m[1])));
      assert.equal(pids.length, 2, `a worker pid per trial in the output:\n${[...output.values()].join('\n')}`);
      await until(() => pids.every((pid) => !alive(pid)), `workers ${pids.join(', ')} to exit`);
    });

    it('a job that fails in training is a failed trial with the training reason; the experiment goes on', async () => {
      const { exp, events } = experiment({
        space: { data: { mnist: { path: { grid: ['.', 'no-such-dir'] } } } },
        search: { algorithm: 'grid' }, maxConcurrent: 1,
      });
      const best = await exp.run();
      assert.equal(best, null);
      const failed = of(events, 'trial/failed');
      assert.equal(failed.length, 2);
      // '.' is the original job's folder (resolved there, not in the trial folder): it exists, but holds no digits.
      assert.match(failed[0].error, new RegExp(`^training failed.*${jobDir.replace(/[/\\]/g, '.')} is not the mnist package`));
      assert.match(failed[1].error, /the config makes .*tiny\.job\.json invalid:\n\/data: .*no-such-dir does not exist/);
    });

    it('a torchrun job trial that fails carries the script\'s exception (rank, type: message, user\'s file:line), as the job does', async () => {
      // The interpreter replays torchrun's recorded output of a shape error on rank 1 (python3-torch 1.13, gloo) and exits 1.
      const jobs = mkdtempSync(join(tmpdir(), 'tune-torchrun-fail-'));
      const python = join(jobs, 'python');
      writeFileSync(python, `#!/bin/sh\ncat '${join(fixtures, 'torchrun', 'exc-shape-rank1-then-peer.txt')}' >&2\nexit 1\n`);
      chmodSync(python, 0o755);
      const job = join(jobs, 'shape.job.json');
      writeFileSync(job, JSON.stringify({ kind: 'torchrun', script: 'shape_rank1.py', nprocPerNode: 2, python: './python' }));
      const workspace = mkdtempSync(join(tmpdir(), 'tune-job-'));
      const spec = parseSpec({ metric: 'loss', numSamples: 1, space: { args: ['--epochs', '1'] }, trial: { job } }, join(workspace, 't.tune.json'));
      const events: TuneEvent[] = [];
      const exp = new Experiment({ spec, workspace, gpuCount: 0, output: () => undefined });
      exp.onEvent((e) => events.push(e));
      await exp.run();
      const failed = of(events, 'trial/failed');
      assert.equal(failed.length, 1);
      assert.equal(failed[0].error.split(' (hint: ')[0], 'training failed (rank 1): RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x1568 and 392x10) at /tmp/proj/shape_rank1.py:11');
      assert.match(failed[0].error, /\(hint: A Linear layer with in_features=392 .*\)$/);
    });
  });
});

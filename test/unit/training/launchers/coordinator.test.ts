import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JobEvent } from '../../../../src/training/job/events';
import { runJob } from '../../../../src/training/launchers/coordinator';
import { fixtures, repoRoot } from '../../../paths';
import { alive, checkpointWeights, run, tinyJob, until } from '../helpers';

describe('training jobs (worker processes)', function () {
  this.timeout(60_000);
  let dir: string;
  beforeEach(() => { dir = mkdtempSync(join(tmpdir(), 'gw-train-')); });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('reports the backend and devices it really got, trains and evaluates', async () => {
    const { events, final } = await run({ file: tinyJob, overrides: { strategy: 'ddp', devices: 2 } });
    assert.equal(final.type, 'job/done', JSON.stringify(final));
    const started = events.find((e) => e.type === 'job/started');
    assert.ok(started && started.type === 'job/started');
    assert.deepEqual(started.workers.map((w) => w.rank), [0, 1]);
    assert.equal(new Set(started.workers.map((w) => w.pid)).size, 2, 'one process per rank');
    assert.ok(started.workers.every((w) => w.device === 'cpu' && w.backend === 'wasm'), JSON.stringify(started.workers));
    // Between them, why not webgpu: lavapipe is software (auto leaves it to wasm), or Dawn finds no adapter at all.
    assert.match(started.description, /^backend wasm \(CPU\), 2 workers, no GPU: @tensorflow\/tfjs-node-gpu is not installed; (webgpu: the only adapter is software, .+?: auto leaves it to wasm, which is faster on a CPU \(ask for "backend": "webgpu" to use it\)|Dawn found no [^;]+); @tensorflow\/tfjs-node is not installed$/);
    assert.ok(events.findIndex((e) => e.type === 'job/summary') < events.findIndex((e) => e.type === 'job/step'), 'the summary comes before the first step');
    assert.deepEqual(events.filter((e) => e.type === 'job/step').map((e) => e.type === 'job/step' && e.globalStep), [1, 2, 3, 4]);
    assert.ok(events.some((e) => e.type === 'job/memory' && e.rank === 1), 'every worker reports its memory');
    if (final.type === 'job/done') {
      assert.equal(final.metrics.steps, 4);
      assert.ok(final.metrics.testAccuracy > 0 && final.metrics.testAccuracy <= 1);
    }
  });

  it('ddp on 2 workers ends with the same weights as single with the same seed, data and global batch', async () => {
    const single = join(dir, 'single');
    const ddp = join(dir, 'ddp');
    const [a, b] = await Promise.all([
      run({ file: tinyJob, overrides: { strategy: 'single', devices: 1, checkpointDir: single } }),
      run({ file: tinyJob, overrides: { strategy: 'ddp', devices: 2, checkpointDir: ddp } }),
    ]);
    assert.equal(a.final.type, 'job/done', JSON.stringify(a.final));
    assert.equal(b.final.type, 'job/done', JSON.stringify(b.final));
    const ws = checkpointWeights(single);
    const wd = checkpointWeights(ddp);
    assert.equal(ws.length, wd.length);
    let maxDiff = 0;
    let moved = 0;
    for (let i = 0; i < ws.length; i++) maxDiff = Math.max(maxDiff, Math.abs(ws[i] - wd[i]));
    assert.ok(maxDiff < 1e-5, `max |single - ddp| = ${maxDiff}`);
    // And the comparison means something: 4 steps of adam at 0.01 moved the weights.
    const initial = await run({ file: tinyJob, overrides: { maxStepsPerEpoch: 1, checkpointDir: join(dir, 'one') } });
    const w1 = checkpointWeights(join(dir, 'one'));
    assert.equal(initial.final.type, 'job/done');
    for (let i = 0; i < ws.length; i++) moved = Math.max(moved, Math.abs(ws[i] - w1[i]));
    assert.ok(moved > 1e-3, `steps 2-4 moved the weights by ${moved}`);
  });

  it('dp on 3 replicas ends with the same weights as single, also when the last batch splits unevenly', async () => {
    // 256 samples in batches of 48: the sixth batch holds 16, scattered as 5 + 5 + 6.
    const overrides = { batchSize: 48, maxStepsPerEpoch: 6 };
    const [a, b] = await Promise.all([
      run({ file: tinyJob, overrides: { ...overrides, strategy: 'single', devices: 1, checkpointDir: join(dir, 'single') } }),
      run({ file: tinyJob, overrides: { ...overrides, strategy: 'dp', devices: 3, checkpointDir: join(dir, 'dp') } }),
    ]);
    assert.equal(a.final.type, 'job/done', JSON.stringify(a.final));
    assert.equal(b.final.type, 'job/done', JSON.stringify(b.final));
    assert.deepEqual(b.events.filter((e) => e.type === 'job/step').map((e) => e.type === 'job/step' && e.globalStep), [1, 2, 3, 4, 5, 6]);
    const ws = checkpointWeights(join(dir, 'single'));
    const wd = checkpointWeights(join(dir, 'dp'));
    let maxDiff = 0;
    for (let i = 0; i < ws.length; i++) maxDiff = Math.max(maxDiff, Math.abs(ws[i] - wd[i]));
    assert.ok(maxDiff < 1e-5, `max |single - dp| = ${maxDiff}`);
  });

  it('ends within 10 s naming the rank that a SIGKILL took, and leaves no worker behind', async () => {
    let victim = 0;
    let killedAt = 0;
    const { final, pids } = await run({ file: tinyJob, overrides: { strategy: 'ddp', devices: 2, epochs: 100, maxStepsPerEpoch: 1000 } }, (e) => {
      if (e.type === 'job/started') victim = e.workers[1].pid;
      if (e.type === 'job/step' && e.globalStep === 2) {
        killedAt = Date.now();
        process.kill(victim, 'SIGKILL');
      }
    });
    assert.ok(killedAt > 0, 'the job reached step 2');
    assert.ok(Date.now() - killedAt < 10_000);
    assert.equal(final.type, 'job/failed');
    if (final.type === 'job/failed') {
      assert.equal(final.rank, 1, final.reason);
      assert.match(final.reason, /worker 1 \(pid \d+\) was killed by SIGKILL/);
    }
    assert.equal(pids.length, 2);
    await until('every worker to be gone', () => pids.every((p) => !alive(p)), 2000);
  });

  it('names rank 0 when rank 0 is the one killed', async () => {
    const { final } = await run({ file: tinyJob, overrides: { strategy: 'ddp', devices: 2, epochs: 100, maxStepsPerEpoch: 1000 } }, (e) => {
      if (e.type === 'job/started') process.kill(e.workers[0].pid, 'SIGKILL');
    });
    assert.equal(final.type === 'job/failed' && final.rank, 0, JSON.stringify(final));
  });

  it('ends a dp job naming the replica that a SIGKILL took', async () => {
    let replica = 0;
    const { final, pids } = await run({ file: tinyJob, overrides: { strategy: 'dp', devices: 2, epochs: 100, maxStepsPerEpoch: 1000 } }, (e) => {
      if (e.type === 'job/started') replica = e.workers[1].pid;
      if (e.type === 'job/step' && e.globalStep === 2) process.kill(replica, 'SIGKILL');
    });
    assert.equal(final.type === 'job/failed' && final.rank, 1, JSON.stringify(final));
    await until('every worker to be gone', () => pids.every((p) => !alive(p)), 2000);
  });

  it('stops on cancel with job/failed marked cancelled, and no worker left', async () => {
    const events: JobEvent[] = [];
    const handle = runJob({ file: tinyJob, overrides: { strategy: 'ddp', devices: 2, epochs: 100, maxStepsPerEpoch: 1000 }, onEvent: (e) => { events.push(e); if (e.type === 'job/step' && e.globalStep === 1) handle.cancel(); } });
    const final = await handle.finished;
    assert.deepEqual(final, { type: 'job/failed', reason: 'cancelled', cancelled: true });
    assert.equal(events.filter((e) => e.type === 'job/failed').length, 1, 'one final event');
    await until('every worker to be gone', () => handle.pids().every((p) => !alive(p)), 2000);
  });

  it('checkpoints every epoch and resumes from the last one', async () => {
    const ckpt = join(dir, 'ckpt');
    const first = await run({ file: tinyJob, overrides: { epochs: 1, maxStepsPerEpoch: 2, checkpointDir: ckpt } });
    assert.equal(first.final.type, 'job/done');
    assert.ok(first.events.some((e) => e.type === 'job/checkpoint' && e.epoch === 1));
    const second = await run({ file: tinyJob, overrides: { epochs: 2, maxStepsPerEpoch: 2, checkpointDir: ckpt }, resume: true });
    assert.equal(second.final.type, 'job/done', JSON.stringify(second.final));
    const started = second.events.find((e) => e.type === 'job/started');
    assert.equal(started?.type === 'job/started' && started.startEpoch, 1);
    assert.ok(second.events.some((e) => e.type === 'job/log' && e.message === `resumed from ${join(ckpt, 'epoch-1')} (1 epochs done)`), 'the job says what it resumed from');
    assert.deepEqual(second.events.filter((e) => e.type === 'job/epoch').map((e) => e.type === 'job/epoch' && e.epoch), [2], 'only the missing epoch runs');
    assert.deepEqual(second.events.filter((e) => e.type === 'job/step').map((e) => e.type === 'job/step' && e.globalStep), [3, 4], 'the step count carries on');
  });

  it('trains from a CSV file, and from user modules (createModel, loadData) on a forced backend', async () => {
    const csv = await run({ file: join(fixtures, 'jobs', 'tiny-csv.job.json') });
    assert.equal(csv.final.type, 'job/done', JSON.stringify(csv.final));
    const mod = await run({ file: join(fixtures, 'jobs', 'module-model.job.json') });
    assert.equal(mod.final.type, 'job/done', JSON.stringify(mod.final));
    const started = mod.events.find((e) => e.type === 'job/started');
    assert.equal(started?.type === 'job/started' && started.description, 'backend cpu (CPU), 1 worker, no GPU');
    // Two well-separated blobs: three epochs of SGD find the boundary.
    assert.ok(mod.final.type === 'job/done' && mod.final.metrics.testAccuracy >= 0.9, JSON.stringify(mod.final));
  });

  it('fails at once with the job file error, without starting workers', async () => {
    const { final, pids } = await run({ file: join(fixtures, 'jobs', 'bad-learning-rate.job.json') });
    assert.equal(final.type, 'job/failed');
    assert.equal(final.type === 'job/failed' && final.reason, 'bad-learning-rate.job.json: /optimizer/learningRate must be a number > 0');
    assert.deepEqual(pids, []);
  });

  it('runs in the forked training host and streams typed events over IPC', async () => {
    const host = fork(join(repoRoot, 'out', 'src', 'training', 'launchers', 'host.js'), [], { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
    const events: JobEvent[] = [];
    try {
      const done = new Promise<void>((resolve) => host.on('message', (m: JobEvent) => { events.push(m); if (m.type === 'job/done' || m.type === 'job/failed') resolve(); }));
      host.send({ type: 'host/start', file: tinyJob, overrides: { maxStepsPerEpoch: 2 } });
      await done;
      assert.deepEqual(events.map((e) => e.type).filter((t) => t !== 'job/memory'), ['job/started', 'job/summary', 'job/step', 'job/step', 'job/epoch', 'job/done']);
    } finally {
      host.kill();
    }
  });
});

describe('training host process', function () {
  this.timeout(60_000);
  it('takes its workers down with it when it is killed', async () => {
    const host = fork(join(repoRoot, 'out', 'src', 'training', 'launchers', 'host.js'), [], { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
    const pids = await new Promise<number[]>((resolve) => {
      host.on('message', (m: JobEvent) => { if (m.type === 'job/step') resolve(started); });
      let started: number[] = [];
      host.on('message', (m: JobEvent) => { if (m.type === 'job/started') started = m.workers.map((w) => w.pid); });
      host.send({ type: 'host/start', file: tinyJob, overrides: { strategy: 'ddp', devices: 2, epochs: 100, maxStepsPerEpoch: 1000 } });
    });
    assert.equal(pids.length, 2);
    host.kill('SIGKILL');
    await until('the workers of the killed host to exit', () => pids.every((p) => !alive(p)), 10_000);
  });
});

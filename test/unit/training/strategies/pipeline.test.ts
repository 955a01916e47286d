import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { JobFileError, parseJob } from '../../../../src/training/job/spec';
import { balanceStages, bubbleFraction, idealBubble, microBatchBounds, slowestStage, stageSchedule, type PipelineOp } from '../../../../src/training/strategies/pipelineSchedule';
import { alive, checkpointWeights, run, tinyJob, until } from '../helpers';

const show = (ops: PipelineOp[]) => ops.map((o) => `${o.kind}${o.micro}`).join(' ');

describe('pipeline: balancing and schedules', () => {
  it('splits layers into contiguous stages that minimise the slowest stage', () => {
    assert.deepEqual(balanceStages([1, 1, 1, 1], 2), [0, 2, 4]);
    // A heavy first layer gets a stage of its own.
    assert.deepEqual(balanceStages([8, 1, 1, 1, 1], 2), [0, 1, 5]);
    assert.deepEqual(balanceStages([1, 2, 3, 4, 5, 6, 7, 8, 9], 3), [0, 5, 7, 9]);
    assert.equal(slowestStage([1, 2, 3, 4, 5, 6, 7, 8, 9], [0, 5, 7, 9]), 17);
    // Exhaustive check against every split on a small case.
    const costs = [3, 9, 1, 4, 7, 2];
    let best = Infinity;
    for (let a = 1; a < 5; a++) for (let b = a + 1; b < 6; b++) best = Math.min(best, slowestStage(costs, [0, a, b, 6]));
    assert.equal(slowestStage(costs, balanceStages(costs, 3)), best);
    assert.throws(() => balanceStages([1], 2), /1 layer with work to do, too few for 2 pipeline stages/);
  });

  it('orders GPipe as all forwards then all backwards, and 1F1B with stages-stage-1 warm-up forwards', () => {
    assert.equal(show(stageSchedule('gpipe', 0, 2, 4)), 'F0 F1 F2 F3 B0 B1 B2 B3');
    assert.equal(show(stageSchedule('1f1b', 0, 2, 4)), 'F0 F1 B0 F2 B1 F3 B2 B3');
    assert.equal(show(stageSchedule('1f1b', 1, 2, 4)), 'F0 B0 F1 B1 F2 B2 F3 B3');
    assert.equal(show(stageSchedule('1f1b', 0, 4, 2)), 'F0 F1 B0 B1', 'warm-up capped by the micro-batches');
    for (const kind of ['gpipe', '1f1b'] as const) {
      for (let s = 0; s < 3; s++) {
        const ops = stageSchedule(kind, s, 3, 5);
        for (let k = 0; k < 5; k++) assert.ok(ops.findIndex((o) => o.kind === 'F' && o.micro === k) < ops.findIndex((o) => o.kind === 'B' && o.micro === k), `${kind} stage ${s}: F${k} before B${k}`);
        assert.equal(ops.length, 10);
      }
    }
    assert.deepEqual(microBatchBounds(10, 4), [0, 2, 5, 7, 10]);
  });

  it('computes the bubble as idle over busy + idle, beside the ideal (p-1)/(m+p-1)', () => {
    assert.equal(bubbleFraction([{ busyMs: 30, idleMs: 10 }, { busyMs: 20, idleMs: 40 }]), 0.5);
    assert.equal(bubbleFraction([]), 0);
    assert.equal(idealBubble(2, 4), 0.2);
  });

  it('rejects a pipeline job whose stages do not match its devices, or whose batch does not cut into micro-batches', () => {
    const raw = JSON.parse(readFileSync(tinyJob, 'utf8')) as object;
    assert.throws(() => parseJob(raw, tinyJob, { strategy: 'pipeline', devices: 3, pipeline: { stages: 2 } }), (e: unknown) => e instanceof JobFileError && /\/pipeline\/stages must equal the number of devices \(one stage per device\): 2 stages on 3 devices/.test(e.message));
    assert.throws(() => parseJob(raw, tinyJob, { strategy: 'pipeline', pipeline: { microBatches: 5 } }), /\/batchSize must be divisible by \/pipeline\/microBatches \(5\), got 32/);
    const spec = parseJob(raw, tinyJob, { strategy: 'pipeline', pipeline: { stages: 2, microBatches: 2, schedule: '1f1b' } });
    assert.deepEqual([spec.devices, spec.pipeline], [[0, 1], { stages: 2, microBatches: 2, schedule: '1f1b' }]);
  });
});

describe('pipeline strategy (worker processes)', function () {
  this.timeout(120_000);
  let dir: string;
  before(() => { dir = mkdtempSync(join(tmpdir(), 'gw-pipe-')); });
  after(() => rmSync(dir, { recursive: true, force: true }));

  let single: Float32Array;
  before(async function () {
    this.timeout(60_000);
    const s = await run({ file: tinyJob, overrides: { strategy: 'single', devices: 1, checkpointDir: join(dir, 'single') } });
    assert.equal(s.final.type, 'job/done', JSON.stringify(s.final));
    single = checkpointWeights(join(dir, 'single'));
  });

  for (const schedule of ['gpipe', '1f1b'] as const) {
    it(`${schedule} on 2 stages with 2 and 4 micro-batches ends with the same weights as single, and reports its bubble`, async () => {
      const runs = await Promise.all([2, 4].map((microBatches) => run({ file: tinyJob, overrides: { strategy: 'pipeline', devices: 2, pipeline: { stages: 2, microBatches, schedule }, checkpointDir: join(dir, `${schedule}-${microBatches}`) } })));
      for (const [i, microBatches] of [2, 4].entries()) {
        const { final, events } = runs[i];
        assert.equal(final.type, 'job/done', JSON.stringify(final));
        assert.deepEqual(events.filter((e) => e.type === 'job/step').map((e) => e.type === 'job/step' && e.globalStep), [1, 2, 3, 4]);
        const w = checkpointWeights(join(dir, `${schedule}-${microBatches}`));
        assert.equal(w.length, single.length);
        let maxDiff = 0;
        for (let k = 0; k < w.length; k++) maxDiff = Math.max(maxDiff, Math.abs(w[k] - single[k]));
        assert.ok(maxDiff < 1e-5, `${schedule}, ${microBatches} micro-batches: max |single - pipeline| = ${maxDiff}`);
        if (final.type !== 'job/done') continue;
        const p = final.metrics.pipeline;
        assert.ok(p, 'job/done carries the pipeline metrics');
        assert.equal(p.schedule, schedule);
        assert.equal(p.microBatches, microBatches);
        // mnist's mlp is flatten, dense, dense: two non-empty contiguous stages covering all three.
        assert.deepEqual(p.stages.map((s) => s.rank), [0, 1]);
        assert.equal(p.stages[0].layers[0], 0);
        assert.equal(p.stages[0].layers[1], p.stages[1].layers[0]);
        assert.ok(p.stages[0].layers[1] >= 1 && p.stages[1].layers[1] === 3, JSON.stringify(p.stages));
        assert.ok(p.stages.every((s) => s.busyMs > 0 && s.idleMs >= 0), JSON.stringify(p.stages));
        assert.equal(p.bubbleFraction, bubbleFraction(p.stages));
        assert.equal(p.idealBubbleFraction, 1 / (microBatches + 1));
        assert.equal(p.layerCostsMs.length, 3);
        assert.ok(final.metrics.testAccuracy > 0 && final.metrics.testAccuracy <= 1);
      }
    });
  }

  it('resumes every stage\'s weights and optimizer state: 2 steps, checkpoint, resume, 2 more end where 4 uninterrupted steps do', async () => {
    const overrides = { strategy: 'pipeline' as const, devices: 2, pipeline: { stages: 2, microBatches: 2 }, maxStepsPerEpoch: 2 };
    const [whole, first] = await Promise.all([
      run({ file: tinyJob, overrides: { ...overrides, epochs: 2, checkpointDir: join(dir, 'whole') } }),
      run({ file: tinyJob, overrides: { ...overrides, epochs: 1, checkpointDir: join(dir, 'resumed') } }),
    ]);
    assert.equal(whole.final.type, 'job/done', JSON.stringify(whole.final));
    assert.equal(first.final.type, 'job/done', JSON.stringify(first.final));
    const second = await run({ file: tinyJob, overrides: { ...overrides, epochs: 2, checkpointDir: join(dir, 'resumed') }, resume: true });
    assert.equal(second.final.type, 'job/done', JSON.stringify(second.final));
    assert.deepEqual(second.events.filter((e) => e.type === 'job/step').map((e) => e.type === 'job/step' && e.globalStep), [3, 4], 'the resumed job runs steps 3 and 4');
    assert.ok(!second.events.some((e) => e.type === 'job/log' && /fresh optimizer state/.test(e.message)), 'no stage starts with a fresh optimizer');
    const a = checkpointWeights(join(dir, 'whole'));
    const b = checkpointWeights(join(dir, 'resumed'));
    assert.equal(a.length, b.length);
    let maxDiff = 0;
    for (let k = 0; k < a.length; k++) maxDiff = Math.max(maxDiff, Math.abs(a[k] - b[k]));
    assert.ok(maxDiff < 1e-5, `max |uninterrupted - resumed| = ${maxDiff}`);
    // The checkpoint holds Adam's state for every weight of both stages: the step count, then m and v of each of the 4 weights.
    const opt = JSON.parse(readFileSync(join(dir, 'resumed', 'epoch-2', 'optimizer.json'), 'utf8')) as { specs: { name: string }[] };
    assert.equal(opt.specs.length, 1 + 2 * 4, opt.specs.map((s) => s.name).join(', '));
  });

  it('ends naming the stage that a SIGKILL took, and leaves no worker behind', async () => {
    let victim = 0;
    const { final, pids } = await run({ file: tinyJob, overrides: { strategy: 'pipeline', devices: 2, epochs: 100, maxStepsPerEpoch: 1000 } }, (e) => {
      if (e.type === 'job/started') victim = e.workers[1].pid;
      if (e.type === 'job/step' && e.globalStep === 2) process.kill(victim, 'SIGKILL');
    });
    assert.equal(final.type, 'job/failed');
    assert.equal(final.type === 'job/failed' && final.rank, 1, JSON.stringify(final));
    assert.match(final.type === 'job/failed' ? final.reason : '', /worker 1 \(pid \d+\) was killed by SIGKILL/);
    assert.equal(pids.length, 2);
    await until('every worker to be gone', () => pids.every((p) => !alive(p)), 2000);
  });

  it('names stage 0 when stage 0 is the one killed', async () => {
    let first = 0;
    const { final, pids } = await run({ file: tinyJob, overrides: { strategy: 'pipeline', devices: 2, epochs: 100, maxStepsPerEpoch: 1000 } }, (e) => {
      if (e.type === 'job/started') first = e.workers[0].pid;
      if (e.type === 'job/step' && e.globalStep === 1) process.kill(first, 'SIGKILL');
    });
    assert.equal(final.type === 'job/failed' && final.rank, 0, JSON.stringify(final));
    await until('every worker to be gone', () => pids.every((p) => !alive(p)), 2000);
  });
});

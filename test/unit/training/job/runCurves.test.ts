import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CurveBuilder, maxCurvePoints, maxCurves, RunCurves, thinPoints, type CurvePoint } from '../../../../src/training/job/runCurves';
import { readRunRecords, recordFile, writeRunRecord, type RunRecord } from '../../../../src/training/job/runRecord';
import { recordRun } from '../../../../src/training/job/runRecorder';

const xs = (points: readonly CurvePoint[]): number[] => points.map(([x]) => x);

describe('run curves (the metrics a run record keeps point by point)', () => {
  it('a long curve stays within its cap, evenly spread, from the first point to the latest', () => {
    const c = new CurveBuilder('step', 300);
    for (let i = 0; i < 10_000; i++) c.add(i, 1 / (i + 1));
    const { points, seen, axis } = c.curve();
    assert.equal(axis, 'step');
    assert.equal(seen, 10_000);
    assert.ok(points.length <= 300 && points.length >= 150, `${points.length} points`);
    assert.deepEqual(points[0], [0, 1]);
    assert.deepEqual(points[points.length - 1], [9999, 0.0001], 'the curve ends where the run is');
    // Every kept point but the latest is the same number of steps from the one before.
    const gaps = new Set(xs(points).slice(0, -1).map((x, i, a) => (i ? x - a[i - 1] : undefined)).filter((g) => g !== undefined));
    assert.deepEqual([...gaps], [64], 'one stride between kept points');
    // Strictly increasing x: no point kept twice, none out of order.
    assert.ok(xs(points).every((x, i, a) => i === 0 || x > a[i - 1]));
  });

  it('a short curve keeps every point, rounded to six significant digits, and skips NaN and infinities', () => {
    const c = new CurveBuilder('epoch');
    c.add(1, 0.123456789);
    c.add(2, Number.NaN);
    c.add(3, Number.POSITIVE_INFINITY);
    c.add(4, 2);
    assert.deepEqual(c.curve(), { axis: 'epoch', points: [[1, 0.123457], [4, 2]], seen: 2 });
  });

  it('thinPoints keeps at most max points, the first and the last among them', () => {
    const pts: CurvePoint[] = Array.from({ length: 1001 }, (_, i) => [i, i * 2]);
    const thin = thinPoints(pts, 11);
    assert.deepEqual(xs(thin), [0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]);
    assert.deepEqual(thinPoints(pts.slice(0, 5), 11), pts.slice(0, 5));
  });

  it('a script\'s reports: by the reported step, else by the count of that metric\'s reports; a metric stays on its first axis', () => {
    const r = new RunCurves();
    r.report({ loss: 2.3 }, undefined);
    r.report({ loss: 1.1 }, undefined);
    r.report({ test_loss: 0.9, test_acc: 0.71 }, undefined);
    r.report({ val_loss: 0.8 }, 100);
    r.report({ val_loss: 0.7 }, undefined); // no step: not placed on a step axis
    r.report({ val_loss: 0.6 }, 300);
    r.report({ loss: 0.9 }, 50); // loss is on the report axis: its 3rd report
    assert.deepEqual(r.toRecord(), {
      loss: { axis: 'report', points: [[1, 2.3], [2, 1.1], [3, 0.9]], seen: 3 },
      test_loss: { axis: 'report', points: [[1, 0.9]], seen: 1 },
      test_acc: { axis: 'report', points: [[1, 0.71]], seen: 1 },
      val_loss: { axis: 'step', points: [[100, 0.8], [300, 0.6]], seen: 2 },
    });
  });

  it(`keeps at most ${maxCurves} curves per run (a script printing ever new names cannot grow the record)`, () => {
    const r = new RunCurves();
    for (let i = 0; i < maxCurves + 10; i++) r.report({ [`loss_${i}`]: i }, 1);
    assert.equal(Object.keys(r.toRecord()).length, maxCurves);
  });

  describe('in the record', () => {
    let dir: string;
    beforeEach(() => { dir = mkdtempSync(join(tmpdir(), 'gw-curves-')); });
    afterEach(() => rmSync(dir, { recursive: true, force: true }));

    it('a training job of 20 000 steps leaves a record of bounded size with its loss by step and its epoch metrics by epoch', () => {
      const rec = recordRun({ dir, kind: 'training', file: '/w/m.job.json', name: 'm' }, assert.fail)!;
      const steps = 2000;
      for (let epoch = 1; epoch <= 10; epoch++) {
        for (let step = 1; step <= steps; step++) {
          const g = (epoch - 1) * steps + step;
          rec.event({ type: 'job/step', epoch, step, stepsPerEpoch: steps, globalStep: g, loss: 2 / Math.sqrt(g), samplesPerSecond: 1000 });
        }
        rec.event({ type: 'job/epoch', epoch, epochs: 10, trainLoss: 1 / epoch, testLoss: 1.1 / epoch, testAccuracy: 0.5 + epoch / 25, samplesPerSecond: 1000 + epoch, durationMs: 10 });
      }
      rec.event({ type: 'job/done', metrics: { trainLoss: 0.1, testLoss: 0.11, testAccuracy: 0.9, epochs: 10, steps: 20_000, samplesPerSecond: 1010, durationMs: 100 } });
      const [r] = readRunRecords(dir).records;
      const curves = r.curves!;
      assert.deepEqual(Object.keys(curves).sort(), ['loss', 'samplesPerSecond', 'testAccuracy', 'testLoss', 'trainLoss']);
      assert.equal(curves.loss.axis, 'step');
      assert.equal(curves.loss.seen, 20_000);
      assert.ok(curves.loss.points.length <= maxCurvePoints);
      assert.deepEqual(curves.loss.points[curves.loss.points.length - 1], [20_000, Number((2 / Math.sqrt(20_000)).toPrecision(6))]);
      assert.deepEqual(curves.testAccuracy, { axis: 'epoch', points: Array.from({ length: 10 }, (_, i) => [i + 1, Number((0.5 + (i + 1) / 25).toPrecision(6))]), seen: 10 });
      // A point per line ([x,y]), not three: the whole record stays small.
      const size = statSync(recordFile(dir, rec.id)).size;
      assert.ok(size < 16_000, `the record is ${size} bytes`);
      assert.match(readFileSync(recordFile(dir, rec.id), 'utf8'), /\n {8}\[20000,0\.0141421\]\n/);
    });

    it('a record whose curves are damaged is skipped with the reason; one without curves (an older record) reads as before', () => {
      const base: RunRecord = { version: 1, id: 'old', kind: 'training', name: 'm', file: '/w/m.job.json', status: 'done', startedAt: '2026-11-26T08:00:00.000Z', pid: 1, host: 'h', metrics: {} };
      writeRunRecord(dir, base);
      writeFileSync(join(dir, 'bad.json'), JSON.stringify({ ...base, id: 'bad', curves: { loss: { axis: 'step', seen: 2, points: [[1, 'x']] } } }));
      writeFileSync(join(dir, 'axis.json'), JSON.stringify({ ...base, id: 'axis', curves: { loss: { axis: 'minute', seen: 1, points: [[1, 2]] } } }));
      writeRunRecord(dir, { ...base, id: 'torn', curves: { loss: { axis: 'step', seen: 1, points: [[1, 2]] } } });
      writeFileSync(recordFile(dir, 'torn'), readFileSync(recordFile(dir, 'torn'), 'utf8').slice(0, 300));
      const read = readRunRecords(dir);
      assert.deepEqual(read.records.map((r) => [r.id, r.curves]), [['old', undefined]]);
      assert.deepEqual(Object.fromEntries(read.skipped.map((s) => [s.file.slice(dir.length + 1), s.reason])), {
        'axis.json': 'its curves is missing or of the wrong type',
        'bad.json': 'its curves is missing or of the wrong type',
        'torn.json': 'it is not JSON (a write cut off?)',
      });
    });
  });
});

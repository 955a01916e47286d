import assert from 'node:assert/strict';
import type { RunRecord } from '../../../../src/training/job/runRecord';
import { curvesView } from '../../../../src/views/runs/curvesModel';

const rec = (id: string, name: string, change: Partial<RunRecord> = {}): RunRecord => ({
  version: 1, id, kind: 'training', name, file: `/w/${name}.job.json`, status: 'done', startedAt: `2026-11-26T08:0${id.length}:00.000Z`, pid: 1, host: 'h', metrics: {}, ...change,
});
const time = (iso: string): string => iso.slice(11, 19);

describe('Curves page data (curvesView)', () => {
  it('one chart per metric any run recorded, known ones first, a line per run that has it, in the runs\' order and colours', () => {
    const a = rec('a', 'mnist', { curves: {
      loss: { axis: 'step', points: [[10, 2], [20, 1]], seen: 2 },
      testAccuracy: { axis: 'epoch', points: [[1, 0.8], [2, 0.9]], seen: 2 },
      trainLoss: { axis: 'epoch', points: [[1, 1.5], [2, 1]], seen: 2 },
    } });
    const b = rec('bb', 'resnet', { kind: 'torchrun', status: 'running', curves: {
      test_acc: { axis: 'report', points: [[1, 0.5]], seen: 1 },
      loss: { axis: 'step', points: [[5, 3]], seen: 1 },
      bleu: { axis: 'report', points: [[1, 12.5]], seen: 1 },
    } });
    const v = curvesView([a, b], () => true, time);
    assert.deepEqual(v.runs, [
      { id: 'a', label: 'mnist', status: 'done', colour: 0 },
      { id: 'bb', label: 'resnet', status: 'running', colour: 1 },
    ]);
    assert.equal(v.live, true);
    assert.deepEqual(v.metrics.map((m) => [m.key, m.title, m.axis, m.percent, m.series.map((s) => s.runId)]), [
      ['loss', 'Training loss by step', 'step', false, ['a', 'bb']],
      ['trainLoss', 'Train loss by epoch', 'epoch', false, ['a']],
      ['testAccuracy', 'Test accuracy by epoch', 'epoch', true, ['a']],
      ['bleu', 'bleu by report', 'report', false, ['bb']],
      ['test_acc', 'test_acc by report', 'report', true, ['bb']],
    ]);
    assert.deepEqual(v.metrics[0].series[0].points, [[10, 2], [20, 1]]);
  });

  it('two runs of one job are told apart by their start time; a record without curves or points says so; a dead running run is interrupted', () => {
    const v = curvesView([
      rec('a', 'mnist', { curves: { loss: { axis: 'step', points: [[1, 1]], seen: 1 } } }),
      rec('bb', 'mnist', { status: 'running', curves: {} }),
      rec('ccc', 'old'),
    ], () => false, time);
    assert.deepEqual(v.runs, [
      { id: 'a', label: 'mnist · 08:01:00', status: 'done', colour: 0 },
      { id: 'bb', label: 'mnist · 08:02:00', status: 'interrupted', colour: 1, note: 'no metrics reported yet' },
      { id: 'ccc', label: 'old', status: 'done', colour: 2, note: 'no curves in its record (recorded before curves were kept)' },
    ]);
    assert.equal(v.live, false);
    assert.deepEqual(v.metrics.map((m) => m.key), ['loss']);
  });

  it('a record holding more points than ours would (another tool\'s) is thinned for the chart; an accuracy beyond 0..1 is no percentage', () => {
    const points = Array.from({ length: 5000 }, (_, i) => [i, i % 100] as [number, number]);
    const v = curvesView([rec('a', 'x', { curves: { acc: { axis: 'step', points, seen: 5000 } } })]);
    assert.equal(v.metrics[0].series[0].points.length, 300);
    assert.deepEqual(v.metrics[0].series[0].points[299], [4999, 99]);
    assert.equal(v.metrics[0].percent, false);
    // In percent: its chart's y axis stays within 0..100.
    assert.deepEqual(v.metrics[0].bounds, [0, 100]);
  });

  it('bounds an accuracy\'s axis by its unit (0..1 as a fraction, 0..100 in percent) and nothing else', () => {
    const v = curvesView([rec('a', 'x', { curves: {
      testAccuracy: { axis: 'epoch', points: [[1, 0.95]], seen: 1 },
      val_acc: { axis: 'report', points: [[1, 97.5]], seen: 1 },
      top5_acc_delta: { axis: 'report', points: [[1, -3]], seen: 1 },
      loss: { axis: 'step', points: [[1, 0.5]], seen: 1 },
    } })]);
    assert.deepEqual(v.metrics.map((m) => [m.key, m.percent, m.bounds]), [
      ['loss', false, undefined],
      ['testAccuracy', true, [0, 1]],
      ['top5_acc_delta', false, undefined],
      ['val_acc', false, [0, 100]],
    ]);
  });

  it('one metric on different axes in two runs: the axis most runs used wins, the other run is left out of that chart', () => {
    const v = curvesView([
      rec('a', 'x', { curves: { loss: { axis: 'step', points: [[1, 1]], seen: 1 } } }),
      rec('bb', 'y', { curves: { loss: { axis: 'report', points: [[1, 1]], seen: 1 } } }),
      rec('ccc', 'z', { curves: { loss: { axis: 'report', points: [[1, 2]], seen: 1 } } }),
    ]);
    assert.deepEqual(v.metrics.map((m) => [m.axis, m.series.map((s) => s.runId)]), [['report', ['bb', 'ccc']]]);
  });
});

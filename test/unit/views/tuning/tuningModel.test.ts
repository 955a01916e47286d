import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TuneEvent } from '../../../../src/tuning/events';
import { Experiment } from '../../../../src/tuning/experiment';
import { readJournal } from '../../../../src/tuning/journal';
import { parseSpec } from '../../../../src/tuning/spec';
import { compactNumber } from '../../../../src/common/tuningProtocol';
import { ResultsModel, setupFromSpec, trialLogPath, trialTaskName } from '../../../../src/views/tuning/tuningModel';
import { fixtures } from '../../../paths';

describe('tuning: trial task names', () => {
  it('formats numbers compactly', () => {
    assert.deepEqual([0.0032, 0.00032, 3.2e-3, 0.032, 0.5, 1, 64, 128, 1e-4, 150000.5, 2.5e6, -0.004, 0, 1234567].map(compactNumber),
      ['3.2e-3', '3.2e-4', '3.2e-3', '0.032', '0.5', '1', '64', '128', '1e-4', '1.5e5', '2.5e6', '-4e-3', '0', '1.2e6']);
  });

  it('names a trial by its number and searched values: "Trial 7 · lr=3.2e-3 batch=64"', () => {
    assert.equal(trialTaskName(7, { lr: 0.0032, batch: 64 }), 'Trial 7 · lr=3.2e-3 batch=64');
    assert.equal(trialTaskName(3, { 'optimizer.lr': 0.01, optimizer: 'sgd', layers: [64, 32] }), 'Trial 3 · lr=0.01 optimizer=sgd layers=[64,32]');
    assert.equal(trialTaskName(12, {}), 'Trial 12');
  });

  it('keeps the whole path where two parameters end alike, and cuts long names with …', () => {
    assert.equal(trialTaskName(1, { 'encoder.dropout': 0.1, 'decoder.dropout': 0.25 }), 'Trial 1 · encoder.dropout=0.1 decoder.dropout=0.25');
    const long = trialTaskName(2, Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`param${i}`, i + 0.5])), 60);
    assert.equal(long.length, 60);
    assert.ok(long.startsWith('Trial 2 · param0=0.5 param1=1.5'));
    assert.ok(long.endsWith('…'));
  });
});

const trialScript = join(fixtures, 'tuning', 'trial.js');

describe('tuning: results model', function () {
  this.timeout(30_000);

  function spec(workspace: string, extra: Record<string, unknown> = {}): ReturnType<typeof parseSpec> {
    return parseSpec({
      metric: 'loss',
      space: { x: { grid: [0.3, 0.9, 0.0, 1.5] }, lr: { loguniform: [1e-4, 1e-1] }, opt: { choice: ['sgd', 'adam'] }, iters: 8 },
      search: { algorithm: 'grid', seed: 3 },
      maxConcurrent: 1,
      scheduler: { type: 'asha', maxT: 100, gracePeriod: 1, reductionFactor: 2 },
      trial: { command: [process.execPath, trialScript] },
      ...extra,
    }, join(workspace, 'model.tune.json'));
  }

  it('folds a real experiment\'s events into rows: curves, stopped trials, best; the journal gives the same rows', async () => {
    const workspace = mkdtempSync(join(tmpdir(), 'tune-model-'));
    const s = spec(workspace);
    const exp = new Experiment({ spec: s, workspace, gpuCount: 0 });
    const model = new ResultsModel(setupFromSpec(s, exp.name, exp.total, { kind: 'command' }));
    const changed: number[] = [];
    exp.onEvent((e: TuneEvent) => {
      const row = model.apply(e);
      if (row) changed.push(row.trialId);
    });
    const best = await exp.run();
    assert.ok(best);

    const rows = model.rows();
    assert.deepEqual(rows.map((r) => r.trialId), [1, 2, 3, 4]);
    // x = 0.3 is the best ((x - 0.3)^2 + 1/n); grid order follows the spec.
    assert.deepEqual(rows.map((r) => r.values.x), [0.3, 0.9, 0, 1.5]);
    assert.deepEqual(Object.keys(rows[0].values), ['x', 'lr', 'opt'], 'searched values only, in the space\'s order');
    assert.equal(rows[0].status, 'done');
    assert.equal(rows[0].iterations, 8);
    assert.deepEqual(rows[0].curve.map(([i]) => i), [1, 2, 3, 4, 5, 6, 7, 8]);
    assert.ok(Math.abs(rows[0].curve[7][1] - 1 / 8) < 1e-12);
    const stopped = rows.filter((r) => r.status === 'stopped');
    assert.ok(stopped.length >= 1, 'ASHA stopped a worse trial');
    for (const r of stopped) {
      assert.equal(r.stopReason, 'asha');
      assert.match(r.stopMessage ?? '', /loss/);
      assert.ok(r.iterations < 8);
      assert.equal(r.curve.length, r.iterations);
    }
    const ex = model.experiment();
    assert.equal(ex.state, 'done');
    assert.deepEqual(ex.best, { trialId: best.trialId, metric: best.metric });
    assert.equal(ex.best?.trialId, 1);
    assert.deepEqual(ex.params, [{ name: 'x', scale: 'category' }, { name: 'lr', scale: 'log' }, { name: 'opt', scale: 'category' }]);
    assert.deepEqual(model.bestConfig()?.config, rows[0].config);
    assert.ok(changed.filter((id) => id === 1).length >= 9, 'a change per start and per report');

    // Reopened from the journal after the run: the same table.
    const again = new ResultsModel(setupFromSpec(s, exp.name, exp.total, { kind: 'command' }), 'journal');
    for (const r of readJournal(exp.journalPath).records) again.apply(r);
    assert.deepEqual(again.rows(), rows);
    assert.deepEqual(again.experiment(), ex);
  });

  it('marks the trials a stopped experiment interrupted, and a journal cut short as read back', () => {
    const workspace = mkdtempSync(join(tmpdir(), 'tune-model-'));
    const s = spec(workspace, { search: { algorithm: 'random', seed: 1 }, space: { lr: { loguniform: [1e-4, 1e-1] } }, numSamples: 3, scheduler: 'fifo' });
    const model = new ResultsModel(setupFromSpec(s, 'm', 3, { kind: 'job', file: '/w/a.job.json', varied: s.space.variedPaths() }), 'journal');
    model.apply({ type: 'journal/header', version: 1, name: 'm', spec: s.raw, at: 0 });
    model.apply({ type: 'experiment/started', name: 'm', dir: '/w', totalTrials: 3, maxConcurrent: 2, gpus: 0, resumed: false, at: 0 });
    model.apply({ type: 'trial/started', trialId: 1, config: { lr: 0.01 }, params: { lr: 0.01 }, cudaVisibleDevices: null, attempt: 1, at: 0 });
    model.apply({ type: 'trial/started', trialId: 2, config: { lr: 0.001 }, params: { lr: 0.001 }, cudaVisibleDevices: null, attempt: 1, at: 0 });
    model.apply({ type: 'trial/report', trialId: 1, result: { loss: 0.5, training_iteration: 1 }, at: 0 });
    model.apply({ type: 'trial/report', trialId: 2, result: { loss: 0.7, training_iteration: 1 }, at: 0 });
    model.apply({ type: 'trial/done', trialId: 1, at: 0 });
    const row = model.apply({ type: 'trial/stopped', trialId: 2, reason: 'experiment', message: 'the experiment was stopped', at: 0 });
    assert.equal(row?.status, 'interrupted');
    assert.equal(model.apply({ type: 'trial/report', trialId: 99, result: { loss: 1 }, at: 0 }), null, 'a trial never started is ignored');
    model.markEnded();
    const ex = model.experiment();
    assert.equal(ex.state, 'journal');
    assert.deepEqual(ex.best, { trialId: 1, metric: 0.5 });
    assert.deepEqual(ex.apply, { kind: 'job', file: '/w/a.job.json', varied: [['lr']] });
    assert.deepEqual(ex.params, [{ name: 'lr', scale: 'log' }]);

    // A re-run (attempt 2) starts its curve over.
    model.apply({ type: 'trial/started', trialId: 2, config: { lr: 0.001 }, params: { lr: 0.001 }, cudaVisibleDevices: null, attempt: 2, at: 0 });
    const rerun = model.row(2);
    assert.equal(rerun?.status, 'running');
    assert.equal(rerun?.attempt, 2);
    assert.deepEqual(rerun?.curve, []);
    model.apply({ type: 'trial/failed', trialId: 2, error: 'python3 exited with code 1: boom', at: 0 });
    assert.equal(model.row(2)?.error, 'python3 exited with code 1: boom');
  });
  it('links each row to its log from the journal (a re-run to its own), survives a reload, and an old journal falls back to trial_<id>.log', () => {
    const workspace = mkdtempSync(join(tmpdir(), 'tune-model-'));
    const s = spec(workspace, { search: { algorithm: 'random', seed: 1 }, space: { lr: { loguniform: [1e-4, 1e-1] } }, numSamples: 3, scheduler: 'fifo' });
    const records: TuneEvent[] = [
      { type: 'trial/started', trialId: 1, config: { lr: 0.01 }, params: { lr: 0.01 }, cudaVisibleDevices: null, attempt: 1, log: 'trial_1.log', at: 0 },
      { type: 'trial/started', trialId: 2, config: { lr: 0.001 }, params: { lr: 0.001 }, cudaVisibleDevices: null, attempt: 2, log: 'trial_2.attempt-2.log', at: 0 },
      // Written before trial/started named its log.
      { type: 'trial/started', trialId: 3, config: { lr: 0.02 }, params: { lr: 0.02 }, cudaVisibleDevices: null, attempt: 1, at: 0 },
    ];
    const model = new ResultsModel(setupFromSpec(s, 'm', 3, { kind: 'command' }), 'journal');
    for (const r of records) model.apply(r);
    assert.deepEqual(model.rows().map((r) => r.log), ['trial_1.log', 'trial_2.attempt-2.log', 'trial_3.log']);
    const dir = join(workspace, '.gpu-workbench', 'experiments', 'm');
    assert.equal(trialLogPath(dir, 2, model.row(2)?.log), join(dir, 'trial_2.attempt-2.log'));
    // A hand-edited journal cannot make the link open a file outside the experiment's folder.
    assert.equal(trialLogPath(dir, 4, '../../../../etc/passwd'), join(dir, 'trial_4.log'));
    assert.equal(trialLogPath(dir, 4, '..'), join(dir, 'trial_4.log'));
  });
});

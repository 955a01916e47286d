import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RunRecord } from '../../../../src/training/job/runRecord';
import { JournalWriter } from '../../../../src/tuning/journal';
import { comparePickItem, durationText, isTrainCommandLine, readExperiments, recordRow, runRows } from '../../../../src/views/runs/runsModel';

const base: RunRecord = {
  version: 1, id: 'r1', kind: 'training', name: 'mnist', file: '/w/mnist.job.json', status: 'done', startedAt: '2026-11-26T08:00:00.000Z', endedAt: '2026-11-26T08:03:20.000Z',
  pid: 1, host: 'h', strategy: 'ddp', backend: 'wasm', devices: ['cpu', 'cpu'], epochs: 2, epochsDone: 2, metrics: { trainLoss: 0.3, testLoss: 0.35, testAccuracy: 0.9137, samplesPerSecond: 900 },
};
const now = Date.parse('2026-11-26T09:00:00Z');
const alive = () => false;
const gone = () => true;

describe('Runs view rows', () => {
  it('a finished training job: status, duration, final metrics, where it ran, and its actions', () => {
    const row = recordRow({ ...base, checkpointDir: '/w/ck', checkpointEpoch: 2 }, now, alive);
    assert.equal(row.label, 'mnist');
    assert.equal(row.description, 'done · 3 min 20 s · test_acc 91.37% · test_loss 0.35 · loss 0.3');
    assert.equal(row.icon, 'pass');
    assert.equal(row.details[1], 'ran on: ddp · wasm · cpu ×2');
    assert.ok(row.details.includes('checkpoints: /w/ck (last after epoch 2)'));
    assert.equal(row.contextValue, 'run.can-log.can-rerun.can-checkpoint.can-delete', 'a finished run is not resumed');
  });

  it('Compare Curves…\'s pick names the run once, and tells runs of one job apart by status, start and metrics', () => {
    const item = comparePickItem(base);
    assert.equal(item.label, 'mnist');
    assert.equal(item.description, `done · ${new Date(base.startedAt).toLocaleString()} · test_acc 91.37% · test_loss 0.35 · loss 0.3`);
    assert.ok(!item.description.includes('mnist'), 'the name is not repeated');
    assert.equal(comparePickItem({ ...base, startedAt: 'garbled', metrics: {} }).description, 'done');
  });

  it('a running job offers stop and no delete; one whose process is gone reads as interrupted and offers resume', () => {
    const running: RunRecord = { ...base, status: 'running', endedAt: undefined, epochsDone: 1, checkpointDir: '/w/ck', checkpointEpoch: 1 };
    const row = recordRow(running, Date.parse('2026-11-26T08:00:12.500Z'), alive);
    assert.equal(row.description, 'running · epoch 1/2 · 12.5 s · test_acc 91.37% · test_loss 0.35 · loss 0.3');
    assert.equal(row.icon, 'sync~spin');
    assert.equal(row.contextValue, 'run.can-log.can-rerun.can-stop.can-checkpoint');
    const cut = recordRow(running, now, gone);
    assert.equal(cut.status, 'interrupted');
    assert.equal(cut.contextValue, 'run.can-log.can-rerun.can-checkpoint.can-resume.can-delete');
    assert.ok(cut.details.some((d) => /pid 1\) is gone/.test(d)));
  });

  it('a failed torchrun job: the reason, the script\'s metrics under its own names', () => {
    const row = recordRow({ ...base, kind: 'torchrun', status: 'failed', strategy: 'torchrun', backend: 'PyTorch', devices: ['gpu:0', 'gpu:1'], reason: 'rank 1: CUDA out of memory', metrics: { loss: 0.41, val_acc: 0.8 } }, now, alive);
    assert.equal(row.description, 'failed · 3 min 20 s · loss 0.41 · val_acc 80.00%');
    assert.equal(row.details[0], 'torchrun job mnist: failed');
    assert.equal(row.details[1], 'ran on: torchrun · PyTorch · gpu:0, gpu:1');
    assert.ok(row.details.includes('failed: rank 1: CUDA out of memory'));
    assert.equal(row.contextValue, 'run.can-log.can-rerun.can-delete', 'no checkpoints to resume from');
  });

  it('experiments from their journals, and every row newest first', () => {
    const root = mkdtempSync(join(tmpdir(), 'gw-exp-'));
    try {
      const w = new JournalWriter(join(root, 'lr-search', 'journal.jsonl'));
      const at = Date.parse('2026-11-26T08:30:00Z');
      w.append({ type: 'journal/header', version: 1, name: 'lr-search', spec: { metric: 'loss' }, at });
      w.append({ type: 'experiment/started', name: 'lr-search', dir: join(root, 'lr-search'), totalTrials: 4, maxConcurrent: 2, gpus: 0, resumed: false, at });
      for (const id of [1, 2, 3]) w.append({ type: 'trial/started', trialId: id, config: {}, params: {}, cudaVisibleDevices: null, attempt: 1, at });
      w.append({ type: 'trial/failed', trialId: 3, error: 'x', at });
      w.append({ type: 'experiment/done', best: { trialId: 2, config: {}, metric: 0.125 }, stopped: false, at: at + 65_000 });
      w.close();
      mkdirSync(join(root, 'other'));
      writeFileSync(join(root, 'other', 'journal.jsonl'), '{"type": "trial/done", "trialId": 1, "at": 1}\n');
      const { experiments, skipped } = readExperiments(root);
      assert.deepEqual(skipped, [{ file: join(root, 'other', 'journal.jsonl'), reason: 'it does not start with a journal header' }]);
      const rows = runRows([base, { ...base, id: 'r2', startedAt: '2026-11-26T08:45:00.000Z' }], experiments, now, alive);
      assert.deepEqual(rows.map((r) => r.key), ['r2', join(root, 'lr-search'), 'r1']);
      assert.equal(rows[1].description, 'done · 3/4 trials (1 failed) · best loss 0.125 (trial 2)');
      assert.equal(rows[1].contextValue, 'experiment.can-results.can-delete');
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it('Stop signals only a gpu-workbench train process, never an editor\'s extension host or training host', () => {
    assert.equal(isTrainCommandLine(['node', '/w/node_modules/.bin/gpu-workbench', 'train', 'mnist.job.json', '']), true);
    assert.equal(isTrainCommandLine(['/usr/bin/node', '/ext/dist/cli.js', 'train', 'x.job.json', '--json']), true);
    assert.equal(isTrainCommandLine(['/usr/bin/node', '/ext/dist/cli.js', 'tune', 'x.tune.json']), false);
    assert.equal(isTrainCommandLine(['/usr/lib/code-server/lib/node', '/usr/lib/code-server/out/bootstrap-fork', '--type=extensionHost']), false);
    assert.equal(isTrainCommandLine(['/usr/bin/node', '/ext/dist/trainingHost.js']), false);
    assert.equal(isTrainCommandLine(['python3', 'train.py', 'train']), false);
  });

  it('durations for people', () => {
    assert.equal(durationText(2500), '2.5 s');
    assert.equal(durationText(200_000), '3 min 20 s');
    assert.equal(durationText(3_900_000), '1 h 05 min');
  });
});

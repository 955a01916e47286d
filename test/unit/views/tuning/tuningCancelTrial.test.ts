// The engine hook the VS Code layer uses when a trial's task is terminated: Experiment.cancelTrial.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TuneEvent } from '../../../../src/tuning/events';
import { Experiment } from '../../../../src/tuning/experiment';
import { parseSpec } from '../../../../src/tuning/spec';
import { fixtures } from '../../../paths';

async function until(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('Experiment.cancelTrial (a trial task terminated in VS Code)', function () {
  this.timeout(30_000);

  it('stops that one trial with reason "user" and goes on with the others; a resume keeps it', async () => {
    const workspace = mkdtempSync(join(tmpdir(), 'tune-cancel-'));
    const spec = parseSpec({
      metric: 'loss',
      space: { x: 0.1, iters: 2, hold: { grid: [true, false, false] } },
      search: { algorithm: 'grid' },
      maxConcurrent: 1,
      trial: { command: [process.execPath, join(fixtures, 'tuning', 'trial.js')] },
    }, join(workspace, 'c.tune.json'));
    const events: TuneEvent[] = [];
    const exp = new Experiment({ spec, workspace, gpuCount: 0 });
    exp.onEvent((e) => events.push(e));
    const run = exp.run();
    // Trial 1 holds after its two reports; trial 2 cannot start until it ends (one at a time).
    await until(() => events.filter((e) => e.type === 'trial/report' && e.trialId === 1).length === 2, 'trial 1 reports');
    assert.equal(exp.cancelTrial(99), false, 'no such trial');
    assert.equal(exp.cancelTrial(1, 'its task was terminated'), true);
    assert.equal(exp.cancelTrial(1), false, 'already stopping');
    await run;
    const stopped = events.find((e) => e.type === 'trial/stopped');
    assert.deepEqual(stopped && { ...stopped, at: 0 }, { type: 'trial/stopped', trialId: 1, reason: 'user', message: 'its task was terminated', at: 0 });
    assert.deepEqual(exp.trialViews().map((t) => [t.trialId, t.status]), [[1, 'stopped'], [2, 'done'], [3, 'done']]);

    // Resuming keeps it as stopped: nothing is re-run.
    const again = new Experiment({ spec, workspace, gpuCount: 0, resume: true });
    await again.run();
    assert.deepEqual(again.trialViews().map((t) => [t.trialId, t.status, t.stopReason]), [[1, 'stopped', 'user'], [2, 'done', undefined], [3, 'done', undefined]]);
  });
});

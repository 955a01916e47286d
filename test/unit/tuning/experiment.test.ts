import * as assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, truncateSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TuneEvent } from '../../../src/tuning/events';
import { Experiment, ExperimentError, substitute, trialLogName } from '../../../src/tuning/experiment';
import { readJournal } from '../../../src/tuning/journal';
import { parseSpec } from '../../../src/tuning/spec';
import { fixtures } from '../../paths';

const trialScript = join(fixtures, 'tuning', 'trial.js');

function setup(spec: Record<string, unknown>): { workspace: string; events: TuneEvent[]; output: Map<number, string>; make: (o?: { resume?: boolean; gpuCount?: number }) => Experiment } {
  const workspace = mkdtempSync(join(tmpdir(), 'tune-exp-'));
  const parsed = parseSpec({
    metric: 'loss',
    trial: { command: [process.execPath, trialScript, '--x', '${config.x}'] },
    ...spec,
  }, join(workspace, 'test.tune.json'));
  const events: TuneEvent[] = [];
  /** What the `output` option got, per trial (as a terminal shows it). */
  const output = new Map<number, string>();
  return {
    workspace, events, output,
    make: (o = {}) => {
      const e = new Experiment({ spec: parsed, workspace, gpuCount: o.gpuCount ?? 0, resume: o.resume, output: (id, text) => output.set(id, (output.get(id) ?? '') + text) });
      e.onEvent((ev) => events.push(ev));
      return e;
    },
  };
}

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
    await new Promise((r) => setTimeout(r, 10));
  }
}

const of = <T extends TuneEvent['type']>(events: TuneEvent[], type: T): Array<Extract<TuneEvent, { type: T }>> =>
  events.filter((e): e is Extract<TuneEvent, { type: T }> => e.type === type);

describe('tuning experiment runner', function () {
  this.timeout(30_000);

  it('runs every trial, passes the config, reports the best and journals it all', async () => {
    const { make, events } = setup({ space: { x: { grid: [0, 0.3, 0.9] }, iters: 3 }, search: { algorithm: 'grid' } });
    const exp = make();
    const best = await exp.run();
    assert.deepEqual(of(events, 'trial/started').map((e) => e.config.x).sort(), [0, 0.3, 0.9]);
    assert.equal(of(events, 'trial/done').length, 3);
    assert.equal(of(events, 'trial/report').length, 9);
    assert.deepEqual(of(events, 'trial/report').filter((e) => e.trialId === 1).map((e) => e.result.training_iteration), [1, 2, 3], 'training_iteration counts reports');
    assert.ok(best && best.config.x === 0.3, JSON.stringify(best));
    assert.ok(Math.abs(best.metric - 1 / 3) < 1e-9);
    const done = events[events.length - 1];
    assert.equal(done.type, 'experiment/done');
    assert.deepEqual(done.type === 'experiment/done' && done.best, best);
    const journal = readJournal(exp.journalPath);
    assert.equal(journal.dropped.length, 0);
    assert.equal(journal.records[0].type, 'journal/header');
    assert.deepEqual(journal.records.slice(1).map((r) => r.type), events.map((e) => e.type), 'every event is in the journal, in order');
  });

  it('packs trials onto GPUs by gpusPerTrial and sets CUDA_VISIBLE_DEVICES per trial', async () => {
    // Each trial reports once, then waits for the gate: the first four run at once whatever the machine's load.
    const gate = mkdtempSync(join(tmpdir(), 'tune-gate-'));
    const { make, events } = setup({ space: { x: { uniform: [0, 1] }, iters: 4, sleepMs: 5, gate }, numSamples: 8, gpusPerTrial: 0.5 });
    const exp = make({ gpuCount: 2 });
    assert.equal(exp.maxConcurrent, 4);
    let running = 0, peak = 0;
    const perGpu = new Map<string, number>();
    let overPacked = false;
    const reported = new Set<number>();
    exp.onEvent((e) => {
      if (e.type === 'trial/report' && reported.add(e.trialId).size === 4) writeFileSync(join(gate, 'go'), '');
      if (e.type === 'trial/started') {
        running++; peak = Math.max(peak, running);
        perGpu.set(e.cudaVisibleDevices ?? '?', (perGpu.get(e.cudaVisibleDevices ?? '?') ?? 0) + 1);
        if ([...perGpu.values()].some((n) => n > 2)) overPacked = true;
      }
      if (e.type === 'trial/done' || e.type === 'trial/failed') {
        running--;
        const t = exp.trialViews().find((v) => v.trialId === e.trialId)!;
        const cuda = t.reports[0]?.cuda as string;
        perGpu.set(cuda, (perGpu.get(cuda) ?? 0) - 1);
      }
    });
    await exp.run();
    assert.equal(peak, 4);
    assert.ok(!overPacked, 'never more than two half-GPU trials on one GPU');
    for (const s of of(events, 'trial/started')) assert.match(s.cudaVisibleDevices ?? '', /^[01]$/);
    for (const r of of(events, 'trial/report')) {
      const started = of(events, 'trial/started').find((s) => s.trialId === r.trialId)!;
      assert.equal(r.result.cuda, started.cudaVisibleDevices, 'the trial saw the GPU it was given');
    }
  });

  it('stops trials ASHA gives up on, and no stopped trial process survives', async () => {
    const { make, events, workspace } = setup({
      space: { x: { grid: [0.3, 0.35, 2, 3, 4, 5] }, iters: 8, sleepMs: 20, hold: true, pidFile: join(tmpdir(), `pids-${process.pid}-${Date.now()}`) },
      search: { algorithm: 'grid' }, maxConcurrent: 1,
      scheduler: { type: 'asha', maxT: 8, gracePeriod: 1, reductionFactor: 2 },
    });
    void workspace;
    const exp = make();
    await exp.run();
    const stopped = of(events, 'trial/stopped');
    assert.ok(stopped.some((s) => s.reason === 'asha'), JSON.stringify(stopped));
    // `hold` keeps a trial alive after its last report: ending at maxT is the scheduler stopping it.
    assert.ok(stopped.some((s) => s.reason === 'maxT'));
    assert.equal(stopped.length, 6, 'every trial was stopped by ASHA or at maxT');
    for (const s of stopped.filter((x) => x.reason === 'asha')) {
      assert.match(s.message, /loss .* is worse than the cutoff .* at training_iteration \d/);
      const reports = of(events, 'trial/report').filter((r) => r.trialId === s.trialId);
      assert.ok(reports.length < 8, 'stopped early');
    }
    const pidFile = (of(events, 'trial/started')[0].config.pidFile as string);
    const pids = readFileSync(pidFile, 'utf8').trim().split('\n').map(Number);
    await until(() => pids.every((p) => !alive(p)), 'every trial process to end');
  });

  it('stop() ends every trial, also one that ignores SIGTERM and its grandchild', async () => {
    const pidFile = join(tmpdir(), `pids-stop-${process.pid}-${Date.now()}`);
    const { make, events } = setup({
      space: { x: { uniform: [0, 1] }, iters: 1, hold: true, ignoreTerm: true, grandchild: true, pidFile },
      numSamples: 4, maxConcurrent: 2, stopGraceSeconds: 0.3,
    });
    const exp = make();
    const ran = exp.run();
    await until(() => existsSync(pidFile) && readFileSync(pidFile, 'utf8').trim().split('\n').length === 4, 'two trials and their grandchildren');
    await exp.stop();
    const best = await ran;
    assert.ok(best !== undefined);
    const pids = readFileSync(pidFile, 'utf8').trim().split('\n').map(Number);
    await until(() => pids.every((p) => !alive(p)), 'no trial process to survive', 5000);
    assert.deepEqual(of(events, 'trial/stopped').map((s) => s.reason), ['experiment', 'experiment']);
    const done = of(events, 'experiment/done');
    assert.equal(done.length, 1);
    assert.equal(done[0].stopped, true);
    assert.equal(of(events, 'trial/started').length, 2, 'no new trial after stop');
  });

  it('reports a failing trial with its exit code and stderr, and a missing command', async () => {
    const { make, events } = setup({ space: { x: { uniform: [0, 1] }, iters: 1, exitCode: 3 }, numSamples: 1 });
    await make().run();
    const failed = of(events, 'trial/failed');
    assert.equal(failed.length, 1);
    assert.match(failed[0].error, /exited with code 3: boom: exiting with 3/);

    const missing = setup({ space: { x: { uniform: [0, 1] } }, trial: { command: ['no-such-trainer-xyz', '--x'] } });
    await missing.make().run();
    assert.match(of(missing.events, 'trial/failed')[0].error, /command not found: no-such-trainer-xyz/);
  });

  it('refuses a job trial whose job file does not exist, and an existing experiment without resume', async () => {
    const job = setup({ space: { x: { uniform: [0, 1] } }, trial: { job: 'no-such.job.json' } });
    await assert.rejects(job.make().run(), (e: unknown) => e instanceof ExperimentError && /\/trial\/job: .*no-such\.job\.json does not exist/.test(e.message));
    const again = setup({ space: { x: { uniform: [0, 1] }, iters: 1 } });
    await again.make().run();
    await assert.rejects(again.make().run(), /already exists .* --resume/);
  });

  it('resumes after a crash with a torn last line: finished trials kept, running ones re-run, search continued identically', async () => {
    // Trials wait after their first report until the test lets them go: trial 5 is still running
    // when the experiment is stopped, however slow the machine (a fixed gate is not a searched value).
    const spec = (gate: string): Record<string, unknown> => ({ space: { x: { uniform: [0, 1] }, iters: 2, gate }, search: { algorithm: 'tpe', seed: 5, nStartupTrials: 3 }, numSamples: 7, maxConcurrent: 1 });
    const open = mkdtempSync(join(tmpdir(), 'tune-gate-'));
    writeFileSync(join(open, 'go'), '');
    const straight = setup(spec(open));
    await straight.make().run();
    const expected = of(straight.events, 'trial/started').map((e) => e.config.x);

    const gate = mkdtempSync(join(tmpdir(), 'tune-gate-'));
    const crashed = setup(spec(gate));
    const first = crashed.make();
    first.onEvent((e) => {
      if (e.type !== 'trial/report' || e.result.training_iteration !== 1) return;
      if (e.trialId === 5) void first.stop();
      else writeFileSync(join(gate, `go-${e.trialId}`), '');
    });
    await first.run();
    writeFileSync(join(gate, 'go'), '');
    // Make it look like a crash while trial 5 ran: tear the stop record in half, drop what follows.
    const path = first.journalPath;
    const text = readFileSync(path, 'utf8');
    const cut = text.lastIndexOf('"type":"trial/stopped"');
    truncateSync(path, cut + 5);
    assert.ok(statSync(path).size < text.length);
    const { dropped } = readJournal(path);
    assert.equal(dropped.length, 1, `the torn line is the only loss: ${JSON.stringify(dropped)} ${text.slice(cut - 200, cut + 50)}`);

    crashed.events.length = 0;
    const resumed = crashed.make({ resume: true });
    await resumed.run();
    const views = resumed.trialViews();
    assert.equal(views.length, 7);
    assert.ok(views.every((v) => v.status === 'done'));
    assert.deepEqual(views.map((v) => v.config.x), expected, 'the same configs as the run that never crashed');
    const restarted = of(crashed.events, 'trial/started');
    assert.equal(restarted[0].trialId, 5);
    assert.equal(restarted[0].attempt, 2, 'the interrupted trial is re-run');
    assert.deepEqual(restarted.map((e) => e.trialId), [5, 6, 7], 'finished trials are not re-run');
    const journal = readJournal(path);
    assert.equal(journal.dropped.length, 0, 'the torn tail was cut before appending');
    assert.ok(journal.records.some((r) => r.type === 'trial/interrupted' && r.trialId === 5));
  });

  it('writes each trial\'s whole output (stdout and stderr) to its log file, named in trial/started and so in the journal', async () => {
    const { make, events, output } = setup({ space: { x: { grid: [0.1, 0.5] }, iters: 3, exitCode: { grid: [0, 2] } }, search: { algorithm: 'grid' } });
    const exp = make();
    await exp.run();
    const started = of(events, 'trial/started');
    assert.equal(started.length, 4);
    assert.equal(of(events, 'trial/failed').length, 2, 'two trials fail (exit code 2): their logs hold the failure');
    for (const e of started) {
      assert.equal(e.log, trialLogName(e.trialId, 1));
      assert.equal(e.log, `trial_${e.trialId}.log`);
      const text = readFileSync(join(exp.dir, e.log), 'utf8');
      assert.equal(text, output.get(e.trialId), `trial ${e.trialId}'s log is what its terminal got`);
      assert.match(text, new RegExp(`^trial ${e.trialId} args --x `));
      assert.equal((text.match(/::report::/g) ?? []).length, 3);
      if (e.config.exitCode === 2) assert.match(text, /boom: exiting with 2\n$/, 'stderr is in the log');
    }
    const journaled = readJournal(exp.journalPath).records.filter((r) => r.type === 'trial/started');
    assert.deepEqual(journaled.map((r) => r.type === 'trial/started' && r.log), started.map((e) => e.log));
  });

  it('gives every trial a log file, also one whose command cannot start (empty) and a re-run attempt (its own, the first one kept)', async () => {
    const missing = setup({ space: { x: { uniform: [0, 1] } }, trial: { command: ['no-such-trainer-xyz'] } });
    const exp = missing.make();
    await exp.run();
    const failed = of(missing.events, 'trial/started')[0];
    assert.equal(readFileSync(join(exp.dir, failed.log!), 'utf8'), '');

    const gate = mkdtempSync(join(tmpdir(), 'tune-gate-'));
    const rerun = setup({ space: { x: { uniform: [0, 1] }, iters: 2, gate }, numSamples: 1 });
    const first = rerun.make();
    first.onEvent((e) => { if (e.type === 'trial/report') void first.stop(); });
    await first.run();
    writeFileSync(join(gate, 'go'), '');
    const before = readFileSync(join(first.dir, 'trial_1.log'), 'utf8');
    assert.match(before, /::report::/);
    rerun.events.length = 0;
    rerun.output.clear();
    const again = rerun.make({ resume: true });
    await again.run();
    const restarted = of(rerun.events, 'trial/started');
    assert.deepEqual(restarted.map((e) => [e.attempt, e.log]), [[2, 'trial_1.attempt-2.log']]);
    assert.equal(readFileSync(join(again.dir, 'trial_1.attempt-2.log'), 'utf8'), rerun.output.get(1));
    assert.equal(readFileSync(join(again.dir, 'trial_1.log'), 'utf8'), before, 'the first attempt\'s log is kept as it was');
    assert.equal(again.trialViews()[0].log, 'trial_1.attempt-2.log');
  });

  it('substitutes ${config.<name>} placeholders', () => {
    assert.equal(substitute('--lr=${config.lr}', { lr: 0.001 }), '--lr=0.001');
    assert.equal(substitute('${config.opt.name}/${config.layers}', { opt: { name: 'sgd' }, layers: [1, 2] }), 'sgd/[1,2]');
    assert.equal(substitute('${config.missing}', {}), '');
  });
});

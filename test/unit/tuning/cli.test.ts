import * as assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import type { TuneEvent } from '../../../src/tuning/events';
import { readJournal } from '../../../src/tuning/journal';
import { fixtures, repoRoot } from '../../paths';

const cli = join(repoRoot, 'out', 'src', 'cli.js');
const example = join(repoRoot, 'examples', 'tuning');

/** The example spec with a small budget, in a fresh workspace; `sleepMs` slows each epoch. */
function workspace(numSamples: number, sleepMs: number, extra: Record<string, unknown> = {}): { dir: string; spec: string; name: string } {
  const dir = mkdtempSync(join(tmpdir(), 'tune-cli-'));
  const spec = JSON.parse(readFileSync(join(example, 'quadratic.tune.json'), 'utf8')) as Record<string, unknown> & { trial: { command: string[]; cwd?: string } };
  const name = `quadratic-${process.pid}-${Date.now()}`;
  spec.name = name;
  spec.numSamples = numSamples;
  spec.search = { algorithm: 'tpe', seed: 3, nStartupTrials: 4 };
  spec.trial.command = [...spec.trial.command, '--sleep-ms', String(sleepMs)];
  spec.trial.cwd = example;
  Object.assign(spec, extra);
  const file = join(dir, 'quadratic.tune.json');
  writeFileSync(file, JSON.stringify(spec));
  return { dir, spec: file, name };
}

/**
 * A spec whose trials (test/fixtures/tuning/trial.js) report once and then wait for the test's
 * signal: the file go-<trial id> (or go, for all) in `gate`. Two at a time, FIFO, TPE search.
 */
function gatedWorkspace(numSamples: number): { dir: string; spec: string; name: string; gate: string; release: (trialId?: number) => void } {
  const dir = mkdtempSync(join(tmpdir(), 'tune-cli-gated-'));
  const gate = join(dir, 'gate');
  mkdirSync(gate);
  const name = `gated-${process.pid}-${Date.now()}`;
  const spec = {
    name, numSamples, maxConcurrent: 2, metric: 'loss', mode: 'min',
    space: { x: { uniform: [0, 1] }, iters: 3, sleepMs: 1, gate },
    search: { algorithm: 'tpe', seed: 3, nStartupTrials: 4 },
    trial: { command: [process.execPath, join(fixtures, 'tuning', 'trial.js')] },
  };
  const file = join(dir, 'gated.tune.json');
  writeFileSync(file, JSON.stringify(spec));
  return { dir, spec: file, name, gate, release: (trialId) => writeFileSync(join(gate, trialId === undefined ? 'go' : `go-${trialId}`), '') };
}

/** CLIs started in the background by a test, stopped after it whatever happened. */
const started: Array<{ child: ReturnType<typeof spawn>; gate?: string }> = [];

/**
 * A CLI run in the background, its stdout collected; `events()` parses the complete JSON lines
 * so far (the test asserts on the others).
 */
function startCli(args: string[], cwd: string, gate?: string): { out: () => string; events: () => TuneEvent[]; exited: Promise<number | null>; child: ReturnType<typeof spawn> } {
  const child = spawn(process.execPath, [cli, 'tune', ...args], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => { out += d; });
  child.stderr.setEncoding('utf8').on('data', (d: string) => { err += d; });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => { if (code !== 0 && code !== 130) process.stderr.write(err); resolve(code); }));
  started.push({ child, gate });
  const events = (): TuneEvent[] => out.slice(0, out.lastIndexOf('\n') + 1).split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as TuneEvent);
  return { child, exited, out: () => out, events };
}

const parse = (stdout: string): TuneEvent[] => stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as TuneEvent);
const of = <T extends TuneEvent['type']>(events: TuneEvent[], type: T): Array<Extract<TuneEvent, { type: T }>> =>
  events.filter((e): e is Extract<TuneEvent, { type: T }> => e.type === type);

/** Processes whose environment names this experiment: its trials. */
function trialProcesses(name: string): number[] {
  const pids: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      if (readFileSync(`/proc/${p}/environ`, 'latin1').split('\0').includes(`GPU_WORKBENCH_EXPERIMENT=${name}`)) pids.push(Number(p));
    } catch {
      // gone, or not ours to read
    }
  }
  return pids;
}

async function until(cond: () => boolean, what: string, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('gpu-workbench tune (the example, end to end through the CLI)', function () {
  this.timeout(60_000);

  afterEach(() => {
    // A failed test must not leave CLIs and trials waiting for a signal that will not come.
    for (const { child, gate } of started.splice(0)) {
      if (gate) writeFileSync(join(gate, 'go'), '');
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    }
  });

  it('runs the example with ASHA: trials stopped early, every trial ended, best reported, journal complete', () => {
    const w = workspace(10, 2, { maxConcurrent: 1 }); // one at a time: what ASHA and TPE see does not depend on timing
    const r = spawnSync(process.execPath, [cli, 'tune', w.spec, '--json', '--gpus', '0'], { cwd: w.dir, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const events = parse(r.stdout);
    const started = of(events, 'trial/started');
    assert.equal(started.length, 10);
    assert.ok(of(events, 'trial/stopped').some((s) => s.reason === 'asha'), 'ASHA stopped at least one trial');
    const ended = new Set([...of(events, 'trial/done'), ...of(events, 'trial/stopped')].map((e) => e.trialId));
    assert.equal(of(events, 'trial/failed').length, 0, JSON.stringify(of(events, 'trial/failed')));
    for (const s of started) assert.ok(ended.has(s.trialId), `trial ${s.trialId} ended`);
    const last = events[events.length - 1];
    assert.equal(last.type, 'experiment/done');
    const best = last.type === 'experiment/done' ? last.best : null;
    assert.ok(best && typeof best.metric === 'number' && typeof best.config.lr === 'number' && typeof best.trialId === 'number');
    const allLast = started.map((s) => of(events, 'trial/report').filter((x) => x.trialId === s.trialId).pop()?.result.loss as number);
    assert.equal(best.metric, Math.min(...allLast), 'the best is the lowest last loss');
    const journal = readJournal(join(w.dir, '.gpu-workbench', 'experiments', w.name, 'journal.jsonl'));
    assert.equal(journal.dropped.length, 0);
    assert.deepEqual(journal.records.slice(1), events, 'the journal holds every event printed');
    // Every trial's output is in the log file its trial/started names: each report line the trial printed, as printed.
    for (const s of started) {
      assert.equal(s.log, `trial_${s.trialId}.log`);
      const text = readFileSync(join(w.dir, '.gpu-workbench', 'experiments', w.name, s.log), 'utf8');
      const reported = text.split('\n').filter((l) => l.startsWith('::report::')).map((l) => JSON.parse(l.slice('::report::'.length)) as Record<string, unknown>);
      const events = of(parse(r.stdout), 'trial/report').filter((x) => x.trialId === s.trialId);
      assert.deepEqual(reported.slice(0, events.length).map((x) => x.loss), events.map((x) => x.result.loss), `trial ${s.trialId}'s log holds its reports`);
    }
  });

  it('prints a Ray-like table and the best trial without --json', () => {
    const w = workspace(4, 1);
    const r = spawnSync(process.execPath, [cli, 'tune', w.spec, '--gpus', '0'], { cwd: w.dir, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /\| Trial name +\| status +\| +lr \| batch_size \| optimizer \| iter \| +loss \|/);
    assert.match(r.stdout, /\| trial_00004 \| (TERMINATED|STOPPED) /);
    assert.match(r.stdout, /Best trial: trial_\d{5} with loss=[\d.]+\nBest config: \{"lr":/);
  });

  it('with --json and no terminal, stdout is JSON lines only, also when the experiment outlasts several table intervals', async () => {
    // The same gated experiment twice at once, one with --json: while their trials wait, the run
    // without --json shows the table every 0.05 s, so the test knows that intervals went by.
    const j = gatedWorkspace(3);
    const t = gatedWorkspace(3);
    const json = startCli([j.spec, '--json', '--gpus', '0', '--interval', '0.05'], j.dir, j.gate);
    const table = startCli([t.spec, '--gpus', '0', '--interval', '0.05'], t.dir, t.gate);
    await until(() => of(json.events(), 'trial/report').length === 2, 'the --json run\'s two trials to report, then wait');
    const tables = (): number => table.out().split('== Status ==').length - 1;
    const before = tables();
    await until(() => tables() >= before + 3, 'the other run to print its table three more times while the trials wait');
    j.release();
    t.release();
    assert.equal(await json.exited, 0);
    assert.equal(await table.exited, 0);
    const lines = json.out().split('\n');
    assert.equal(lines.pop(), '', 'ends with a newline');
    for (const l of lines) assert.doesNotThrow(() => JSON.parse(l), `not JSON: ${JSON.stringify(l)}`);
    const events = parse(json.out());
    assert.equal(of(events, 'trial/done').length, 3);
    assert.equal(events[events.length - 1].type, 'experiment/done');
    assert.match(table.out(), /Best trial: trial_\d{5} with loss=/, 'without --json the table and the best trial are still printed');
  });

  it('continues with --resume after the CLI is killed mid-run, and leaves no trial behind', async () => {
    // Trials wait for the test's signal, so the kill always finds trials running: trial 1 is let
    // finish, two others are running (reported, waiting) when the CLI is killed.
    const w = gatedWorkspace(8);
    const run = startCli([w.spec, '--json', '--gpus', '0'], w.dir, w.gate);
    await until(() => of(run.events(), 'trial/report').length === 2, 'two trials to report');
    const firstId = of(run.events(), 'trial/started')[0].trialId;
    w.release(firstId);
    await until(() => of(run.events(), 'trial/done').length === 1 && of(run.events(), 'trial/report').filter((r) => r.trialId !== firstId).length >= 2,
      'the released trial to finish and the next to report');
    run.child.kill('SIGTERM');
    assert.equal(await run.exited, 130);
    await until(() => trialProcesses(w.name).length === 0, 'no trial process to outlive the CLI', 10_000);
    const first = parse(run.out());
    const finishedBefore = new Set([...of(first, 'trial/done'), ...of(first, 'trial/stopped').filter((s) => s.reason !== 'experiment')].map((e) => e.trialId));
    assert.deepEqual([...finishedBefore], [firstId], 'only the released trial finished');
    const interrupted = of(first, 'trial/stopped').filter((s) => s.reason === 'experiment').map((s) => s.trialId);
    assert.equal(interrupted.length, 2, 'two trials were running when it was killed');
    w.release();

    const r = spawnSync(process.execPath, [cli, 'tune', w.spec, '--json', '--gpus', '0', '--resume'], { cwd: w.dir, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const second = parse(r.stdout);
    assert.equal(of(second, 'experiment/started')[0].resumed, true);
    const rerun = of(second, 'trial/started');
    for (const id of interrupted) assert.ok(rerun.some((s) => s.trialId === id && s.attempt === 2), `trial ${id} re-run`);
    for (const s of rerun) assert.ok(!finishedBefore.has(s.trialId), `finished trial ${s.trialId} not re-run`);
    const all = new Set([...finishedBefore, ...rerun.map((s) => s.trialId)]);
    assert.deepEqual([...all].sort((a, b) => a - b), [1, 2, 3, 4, 5, 6, 7, 8]);
    const last = second[second.length - 1];
    assert.ok(last.type === 'experiment/done' && last.best !== null && !last.stopped);
  });

  it('shares GPUs found by the GPU engine (fake nvidia-smi, two GPUs)', () => {
    const w = workspace(2, 1, { maxConcurrent: undefined });
    const env = { ...process.env, PATH: `${join(fixtures, 'bin')}${delimiter}${process.env.PATH ?? ''}`, FAKE_NVIDIA_SMI_SCENARIO: 'two-gpus' };
    const r = spawnSync(process.execPath, [cli, 'tune', w.spec, '--json'], { cwd: w.dir, encoding: 'utf8', env });
    assert.equal(r.status, 0, r.stderr);
    const events = parse(r.stdout);
    const started = of(events, 'experiment/started')[0];
    assert.equal(started.gpus, 2);
    assert.equal(started.maxConcurrent, 2, 'one trial per GPU by default');
    assert.deepEqual(of(events, 'trial/started').map((s) => s.cudaVisibleDevices).sort(), ['0', '1']);
  });

  it('names the file and field of a bad spec and exits 2', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tune-cli-bad-'));
    const file = join(dir, 'bad.tune.json');
    writeFileSync(file, JSON.stringify({ space: { lr: { loguniform: [0, 1] } }, metric: 'loss', trial: { command: ['x'] } }));
    const r = spawnSync(process.execPath, [cli, 'tune', file], { cwd: dir, encoding: 'utf8' });
    assert.equal(r.status, 2);
    assert.match(r.stderr, new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: /space/lr/loguniform: the lower bound of a log distribution must be greater than 0`));
  });

  it('says which option is wrong, with the usage, and exits 2 (--gpus=x, --gpus with no value, two specs)', () => {
    const cases: [string[], RegExp][] = [
      [['a.tune.json', '--gpus=x'], /--gpus expects a whole number, got 'x'/],
      [['a.tune.json', '--gpus'], /--gpus needs a value/],
      [['a.tune.json', 'b.tune.json'], /one spec at a time \(got 'a.tune.json' and 'b.tune.json'\)/],
      [['--json'], /missing SPEC.json/],
    ];
    for (const [args, message] of cases) {
      const r = spawnSync(process.execPath, [cli, 'tune', ...args], { cwd: tmpdir(), encoding: 'utf8' });
      assert.equal(r.status, 2, args.join(' '));
      assert.match(r.stderr, message);
      assert.match(r.stderr, /usage: gpu-workbench tune SPEC.json/);
    }
  });
});

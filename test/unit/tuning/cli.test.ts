import * as assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
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

  it('runs the example with ASHA: trials stopped early, every trial ended, best reported, journal complete', () => {
    const w = workspace(10, 2);
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
    assert.match(readFileSync(join(w.dir, '.gpu-workbench', 'experiments', w.name, 'trial_1.log'), 'utf8'), /::report::\{"loss"/);
  });

  it('prints a Ray-like table and the best trial without --json', () => {
    const w = workspace(4, 1);
    const r = spawnSync(process.execPath, [cli, 'tune', w.spec, '--gpus', '0'], { cwd: w.dir, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /\| Trial name +\| status +\| +lr \| batch_size \| optimizer \| iter \| +loss \|/);
    assert.match(r.stdout, /\| trial_00004 \| (TERMINATED|STOPPED) /);
    assert.match(r.stdout, /Best trial: trial_\d{5} with loss=[\d.]+\nBest config: \{"lr":/);
  });

  it('continues with --resume after the CLI is killed mid-run, and leaves no trial behind', async () => {
    const w = workspace(8, 40);
    const child = spawn(process.execPath, [cli, 'tune', w.spec, '--json', '--gpus', '0'], { cwd: w.dir, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => { out += d; });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    await until(() => { const ev = parse(out.slice(0, out.lastIndexOf('\n') + 1)); return of(ev, 'trial/done').length + of(ev, 'trial/stopped').length >= 3 && of(ev, 'trial/report').length > 0; }, 'three trials to end');
    child.kill('SIGTERM');
    assert.equal(await exited, 130);
    await until(() => trialProcesses(w.name).length === 0, 'no trial process to outlive the CLI', 10_000);
    const first = parse(out);
    const finishedBefore = new Set([...of(first, 'trial/done'), ...of(first, 'trial/stopped').filter((s) => s.reason !== 'experiment')].map((e) => e.trialId));
    const interrupted = of(first, 'trial/stopped').filter((s) => s.reason === 'experiment').map((s) => s.trialId);
    assert.ok(interrupted.length > 0, 'something was running when it was killed');

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
});

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TuneEvent } from '../../../src/tuning/events';
import { Experiment, experimentDir } from '../../../src/tuning/experiment';
import { readJournal } from '../../../src/tuning/journal';
import { parseSpec, SpecError } from '../../../src/tuning/spec';
import { querySlurmJob } from '../../../src/training/launchers/slurm';
import { repoRoot } from '../../paths';
import { useSlurmCluster } from '../../support/slurmCluster';

/** A trial: reports loss = x at every step, `steps` steps, a second apart (ASHA's stops must come while it runs). */
const trialScript = [
  'import json, os, sys, time',
  'cfg = json.loads(os.environ["GPU_WORKBENCH_CONFIG"])',
  'print("trial on", os.environ.get("SLURMD_NODENAME"), "job", os.environ.get("SLURM_JOB_ID"), "gpus", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)',
  'for i in range(int(cfg["steps"])):',
  '    print("::report::" + json.dumps({"loss": cfg["x"]}), flush=True)',
  '    if i + 1 < int(cfg["steps"]): time.sleep(1)',
].join('\n');

describe('tuning: the spec\'s slurm executor', () => {
  it('reads "executor": {"slurm": {...}} and refuses options GPU Workbench sets, naming the field', () => {
    const base = { space: { x: { grid: [1] } }, metric: 'loss', trial: { command: ['true'] } };
    const spec = parseSpec({ ...base, executor: { slurm: { partition: 'gpu', time: '00:10:00', pollSeconds: 0.5 } } });
    assert.deepEqual(spec.executor, { kind: 'slurm', options: { partition: 'gpu', time: '00:10:00', pollMs: 500 } });
    assert.deepEqual(parseSpec(base).executor, { kind: 'local' });
    assert.throws(() => parseSpec({ ...base, executor: { slurm: { sbatchArgs: ['--gres=gpu:2'] } } }), (e: unknown) => e instanceof SpecError && /\/executor\/slurm\/sbatchArgs\/0: "--gres=gpu:2" is set by GPU Workbench/.test(e.message));
    assert.throws(() => parseSpec({ ...base, executor: { ray: {} } }), (e: unknown) => e instanceof SpecError && /\/executor\/ray: is not a known field/.test(e.message));
  });
});

describe('tuning: trials as Slurm jobs on a real two-node cluster', function () {
  this.timeout(240_000);
  const cluster = useSlurmCluster();
  let tmp: string;
  beforeEach(() => {
    tmp = mkdtempSync(join(tmpdir(), 'gw-slurm-tune-'));
    writeFileSync(join(tmp, 'trial.py'), trialScript);
  });
  afterEach(() => rmSync(tmp, { recursive: true, force: true }));

  const active = () => cluster().tool('squeue', ['-h', '-o', '%i %T']).split('\n').filter((l) => / (?:RUNNING|PENDING|COMPLETING|CONFIGURING)$/.test(l));
  const spec = (fields: Record<string, unknown>) => parseSpec({
    name: 'slurmexp', metric: 'loss', mode: 'min', search: { algorithm: 'grid' }, maxConcurrent: 2, gpusPerTrial: 1,
    trial: { command: ['python3', 'trial.py'] }, executor: { slurm: { pollSeconds: 0.2 } }, ...fields,
  }, join(tmp, 'exp.tune.json'));

  it('runs each trial as an sbatch job with its GPU, at most maxConcurrent at once; ASHA stops the worse ones with scancel', async () => {
    const exp = new Experiment({ spec: spec({ space: { x: { grid: [1, 2, 3, 4] }, steps: 6 }, scheduler: { type: 'asha', timeAttr: 'training_iteration', maxT: 6, gracePeriod: 1, reductionFactor: 2 } }), workspace: tmp, gpuCount: 0 });
    const events: TuneEvent[] = [];
    const output = new Map<number, string>();
    let live = 0;
    let most = 0;
    exp.onEvent((e) => {
      events.push(e);
      if (e.type === 'trial/started') most = Math.max(most, ++live);
      if (e.type === 'trial/done' || e.type === 'trial/failed' || (e.type === 'trial/stopped')) live--;
    });
    const expOut = new Experiment({ spec: spec({ space: { x: { grid: [1] }, steps: 1 }, name: 'probe' }), workspace: tmp, gpuCount: 0, output: (id, text) => output.set(id, (output.get(id) ?? '') + text) });
    await expOut.run();
    assert.match(output.get(1) ?? '', /^trial on n[12] job \d+ gpus 0$/m, 'the trial ran in a Slurm job on a node, with one GPU of its own');
    await exp.run();
    const jobs = events.flatMap((e) => (e.type === 'trial/slurm' ? [e] : []));
    assert.equal(jobs.length, 4, 'one Slurm job per trial, in the journal');
    assert.ok(most <= 2, `at most maxConcurrent (2) trials at once, saw ${most}`);
    const stopped = events.flatMap((e) => (e.type === 'trial/stopped' ? [e] : []));
    assert.ok(stopped.some((e) => e.reason === 'asha'), JSON.stringify(events.filter((e) => e.type !== 'trial/report')));
    for (const s of stopped.filter((e) => e.reason === 'asha')) {
      const job = jobs.find((j) => j.trialId === s.trialId)!;
      assert.equal((await querySlurmJob(job.jobId))?.state, 'CANCELLED', `trial ${s.trialId}'s job ${job.jobId} was scancelled`);
    }
    // The best trial ran to ASHA's maxT (6 reports), not stopped early.
    assert.equal(exp.trialViews()[0].reports.length, 6);
    assert.ok(!stopped.some((e) => e.trialId === 1 && e.reason === 'asha'));
    const journal = readJournal(join(experimentDir(tmp, 'slurmexp'), 'journal.jsonl')).records;
    assert.deepEqual(journal.flatMap((r) => (r.type === 'trial/slurm' ? [r.jobId] : [])), jobs.map((j) => j.jobId));
    assert.deepEqual(active(), []);
    assert.deepEqual(cluster().jobProcesses(), []);
  });

  it('gpu_workbench.report() works in a Slurm trial: its ::report:: lines come back in the job\'s output (no channel reaches the node)', async () => {
    writeFileSync(join(tmp, 'reporting.py'), [
      'import json, os, gpu_workbench',
      'cfg = json.loads(os.environ["GPU_WORKBENCH_CONFIG"])',
      'for i in range(3):',
      '    gpu_workbench.report(loss=cfg["x"] * (3 - i))',
      '',
    ].join('\n'));
    const exp = new Experiment({ spec: spec({ space: { x: { grid: [2] } }, trial: { command: ['python3', 'reporting.py'] } }), workspace: tmp, gpuCount: 0 });
    await exp.run();
    const [trial] = exp.trialViews();
    assert.equal(trial.status, 'done', trial.error);
    assert.deepEqual(trial.reports.map((r) => r.loss), [6, 4, 2]);
  });

  it('stopping the experiment cancels every job: nothing left in squeue', async () => {
    const exp = new Experiment({ spec: spec({ space: { x: { grid: [1, 2, 3] }, steps: 600 } }), workspace: tmp, gpuCount: 0 });
    let started = 0;
    const twoRunning = new Promise<void>((resolve) => exp.onEvent((e) => { if (e.type === 'trial/report' && ++started === 2) resolve(); }));
    const done = exp.run();
    await twoRunning;
    assert.equal(active().length, 2, 'maxConcurrent: 2 jobs in squeue, the third not submitted');
    await exp.stop();
    await done;
    assert.deepEqual(active(), []);
    assert.deepEqual(cluster().jobProcesses(), []);
  });

  it('a resumed experiment re-attaches to the trial\'s job still running in Slurm instead of starting it again', async () => {
    writeFileSync(join(tmp, 'exp.tune.json'), JSON.stringify({
      name: 'resumed', metric: 'loss', search: { algorithm: 'grid' }, space: { x: { grid: [5] }, steps: 6 },
      trial: { command: ['python3', 'trial.py'] }, executor: { slurm: { pollSeconds: 0.2 } },
    }));
    // The first run: the CLI, killed with SIGKILL (no chance to scancel) once its trial reported.
    const cli = spawn(process.execPath, [join(repoRoot, 'out', 'src', 'cli.js'), 'tune', 'exp.tune.json', '--json', '--gpus', '0'], { cwd: tmp, env: { ...process.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let jobId = '';
    await new Promise<void>((resolve, reject) => {
      let buf = '';
      cli.stdout.on('data', (d: Buffer) => {
        buf += d.toString();
        for (const line of buf.split('\n')) {
          if (/"type":"trial\/slurm"/.test(line)) jobId = (JSON.parse(line) as { jobId: string }).jobId;
          if (jobId && /"type":"trial\/report"/.test(line)) resolve();
        }
      });
      cli.on('exit', (code) => reject(new Error(`the CLI ended (${code}) before its trial reported: ${buf}`)));
    });
    cli.kill('SIGKILL');
    await new Promise((r) => cli.once('close', r));
    assert.equal((await querySlurmJob(jobId))?.state, 'RUNNING', 'the job outlived the CLI');

    const events: TuneEvent[] = [];
    const exp = new Experiment({ spec: parseSpec(JSON.parse(readFileSync(join(tmp, 'exp.tune.json'), 'utf8')), join(tmp, 'exp.tune.json')), workspace: tmp, gpuCount: 0, resume: true });
    exp.onEvent((e) => events.push(e));
    await exp.run();
    assert.deepEqual(events.filter((e) => e.type === 'trial/slurm'), [], 'no new sbatch');
    assert.ok(events.some((e) => e.type === 'trial/done' && e.trialId === 1), JSON.stringify(events));
    assert.ok(!events.some((e) => e.type === 'trial/interrupted'));
    const view = exp.trialViews()[0];
    assert.equal(view.reports.length, 6, 'every report of the job, once each');
    assert.equal((await querySlurmJob(jobId))?.state, 'COMPLETED');
    const journal = readJournal(join(experimentDir(tmp, 'resumed'), 'journal.jsonl')).records;
    assert.deepEqual(journal.flatMap((r) => (r.type === 'trial/slurm' ? [r.jobId] : [])), [jobId]);
  });
});

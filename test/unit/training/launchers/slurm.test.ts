import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SlurmNodesPoller } from '../../../../src/gpu/slurmNodesPoller';
import type { JobEvent } from '../../../../src/training/job/events';
import { jobProblems, JobFileError } from '../../../../src/training/job/spec';
import { isEndState, parseScontrolJob, parseSqueueFormat, parseSqueueJson, querySlurmJob } from '../../../../src/training/launchers/slurm';
import { loadTorchrunJob, runTorchrun, slurmBatchText, type TorchrunHandle } from '../../../../src/training/launchers/torchrun';
import { fixtures, repoRoot } from '../../../paths';
import { useSlurmCluster } from '../../../support/slurmCluster';

const recorded = join(fixtures, 'slurm');
const read = (name: string) => readFileSync(join(recorded, name), 'utf8');
const torchPython = '/usr/bin/python3';
const example = join(repoRoot, 'examples', 'torchrun', 'ddp_mnist_like.py');

let tmp: string;
beforeEach(() => { tmp = mkdtempSync(join(tmpdir(), 'gw-slurm-job-')); });
afterEach(() => rmSync(tmp, { recursive: true, force: true }));

function job(fields: Record<string, unknown>): string {
  const file = join(tmp, 'slurm.job.json');
  writeFileSync(file, JSON.stringify({ kind: 'torchrun', script: example, args: ['--epochs', '1'], nprocPerNode: 1, python: torchPython, nnodes: 2, launcher: 'slurm', ...fields }));
  return file;
}

describe('slurm: reading squeue and scontrol', () => {
  it('reads squeue --json of Slurm 22.05 (recorded here): states, reasons, nodes, exit codes from the wait status', () => {
    const jobs = parseSqueueJson(read('squeue-22.05-running-pending.json'));
    assert.deepEqual(jobs?.map((j) => [j.id, j.state, j.reason, j.nodes, j.nodeCount]), [
      ['1', 'COMPLETED', undefined, 'n1', 1], ['2', 'RUNNING', undefined, 'n[1-2]', 2], ['3', 'PENDING', 'Resources', undefined, 1],
    ]);
    const ended = parseSqueueJson(read('squeue-22.05-ended.json')) ?? [];
    const byId = new Map(ended.map((j) => [j.id, j]));
    assert.deepEqual([byId.get('5')?.state, byId.get('5')?.exitCode, byId.get('5')?.reason], ['FAILED', 3, 'NonZeroExitCode'], 'exit 3 is the wait status 768');
    assert.deepEqual([byId.get('2')?.state, byId.get('2')?.signal, byId.get('2')?.exitCode], ['CANCELLED', 15, undefined]);
    assert.equal(byId.get('1')?.exitCode, 0);
  });

  it('reads the newer shape (job_state a list, numbers and exit_code as objects, as from 23.02)', () => {
    const jobs = parseSqueueJson(read('squeue-24.05-shape.json')) ?? [];
    assert.deepEqual(jobs.map((j) => [j.id, j.state, j.reason ?? '', j.nodeCount, j.exitCode, j.signal]), [
      ['812', 'RUNNING', '', 2, undefined, undefined], ['813', 'PENDING', 'QOSMaxGRESPerUser', 1, undefined, undefined],
      ['790', 'FAILED', 'NonZeroExitCode', 1, 3, undefined], ['791', 'CANCELLED', '', 1, 0, 15],
    ]);
  });

  it('says it cannot read a document of another shape (the caller falls back to squeue -o), and reads that format', () => {
    assert.equal(parseSqueueJson('squeue: unrecognized option \'--json\''), undefined);
    assert.equal(parseSqueueJson('{"jobs": [{"id": {"job": 4}}]}'), undefined);
    assert.equal(parseSqueueJson('{"errors": []}'), undefined);
    assert.deepEqual(parseSqueueFormat(read('squeue-22.05-format.txt')).map((j) => [j.id, j.state, j.reason, j.nodeCount, j.nodes]), [
      ['1', 'COMPLETED', undefined, 1, 'n1'], ['3', 'PENDING', 'Resources', 1, undefined], ['2', 'RUNNING', undefined, 2, 'n[1-2]'],
    ]);
  });

  it('reads scontrol show job -o (ExitCode=CODE:SIGNAL), and knows which states are an end', () => {
    assert.deepEqual(parseScontrolJob(read('scontrol-22.05-completed.txt')), { id: '1', state: 'COMPLETED', nodes: 'n1', exitCode: 0 });
    assert.deepEqual(parseScontrolJob('JobId=7 JobName=x JobState=CANCELLED Reason=None ExitCode=0:15 NodeList=n2'), { id: '7', state: 'CANCELLED', nodes: 'n2', signal: 15 });
    assert.equal(parseScontrolJob('slurm_load_jobs error: Invalid job id specified'), undefined);
    assert.deepEqual(['PENDING', 'RUNNING', 'COMPLETING', 'COMPLETED', 'TIMEOUT', 'CANCELLED+', 'NODE_FAIL'].map(isEndState), [false, false, false, true, true, true, true]);
  });
});

describe('slurm: the job file and the batch script', () => {
  it('takes "launcher": "slurm" with its slurm field, and refuses what Slurm decides itself, naming the field', () => {
    assert.deepEqual(jobProblems({ kind: 'torchrun', script: 's.py', nnodes: 2, launcher: 'slurm', slurm: { partition: 'gpu', time: '01:00:00', gpusPerNode: 4 } }), []);
    const problems = (fields: Record<string, unknown>) => {
      try {
        loadTorchrunJob(job(fields));
      } catch (err) {
        assert.ok(err instanceof JobFileError, String(err));
        return err.message;
      }
      return '';
    };
    assert.match(problems({ rendezvous: { endpoint: 'n1:29400' } }), /\/rendezvous\/endpoint: with "launcher": "slurm" the store is on the job's first node/);
    assert.match(problems({ rendezvous: { masterAddr: 'n1', masterPort: 1 } }), /\/rendezvous: with "launcher": "slurm" the rendezvous is c10d/);
    assert.match(problems({ slurm: { sbatchArgs: ['--nodes=3'] } }), /\/slurm\/sbatchArgs: "--nodes=3" is set by GPU Workbench/);
    assert.match(problems({ slurm: { gpus: 2 } }), /\/slurm has an unknown field "gpus"/);
    assert.match(problems({ launcher: 'local', rendezvous: { endpoint: 'n1:1' }, slurm: {} }), /\/slurm is read only with "launcher": "slurm"/);
  });

  it('writes one sbatch: nodes, GPUs, partition/time/account (job over settings), srun of torchrun spelt for torch 1.13, the store on the first node', () => {
    const spec = loadTorchrunJob(job({ slurm: { partition: 'gpu', gpusPerNode: 2, sbatchArgs: ['--constraint=a100'] } }));
    const text = slurmBatchText(spec, '1.13.1', { partition: 'other', time: '00:30:00', account: 'proj' });
    assert.match(text, /^#SBATCH --nodes=2$/m);
    assert.match(text, /^#SBATCH --ntasks-per-node=1$/m);
    assert.match(text, /^#SBATCH --partition=gpu$/m, 'the job\'s partition over the setting');
    assert.match(text, /^#SBATCH --time=00:30:00$/m);
    assert.match(text, /^#SBATCH --account=proj$/m);
    assert.match(text, /^#SBATCH --gres=gpu:2$/m);
    assert.match(text, /^#SBATCH --constraint=a100$/m);
    assert.match(text, /^first=\$\(scontrol show hostnames "\$SLURM_JOB_NODELIST" \| head -n 1\)$/m);
    assert.match(text, new RegExp(`^srun --nodes="\\$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 /usr/bin/python3 -m torch\\.distributed\\.run --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint "\\$GW_RDZV_ENDPOINT" --rdzv_id "gw-\\$SLURM_JOB_ID" --redirects 2 --tee 2 ${example.replace(/[.]/g, '\\.')} --epochs 1$`, 'm'));
    const torch2 = slurmBatchText(spec, '2.5.1', {});
    assert.match(torch2, /--nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "\$GW_RDZV_ENDPOINT"/);
    const range = slurmBatchText(loadTorchrunJob(job({ nnodes: '1:2', slurm: { gpusPerNode: 0, port: 29999 } })), '1.13.1');
    assert.match(range, /^#SBATCH --nodes=1-2$/m);
    assert.doesNotMatch(range, /--gres/);
    assert.match(range, /GW_RDZV_ENDPOINT="\$\{addr:-\$first\}:29999"/);
  });

  it('prints the batch script from the CLI with --print-launch', () => {
    const out = spawnSync(process.execPath, [join(repoRoot, 'out', 'src', 'cli.js'), 'train', job({ slurm: { partition: 'gpu' } }), '--print-launch'], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(out.status, 0, out.stderr);
    assert.match(out.stdout, /^#SBATCH --partition=gpu$/m);
    assert.match(out.stdout, /^srun .* -m torch\.distributed\.run --nnodes 2 /m);
  });
});

describe('slurm: a job Slurm ends itself (Slurm tools faked on PATH)', () => {
  it('fails with Slurm\'s state and reason (TIMEOUT), read from squeue -o where squeue has no --json; the node probes follow its RUNNING and stop at its end', async () => {
    const bin = join(tmp, 'bin');
    const out = join(tmp, 'out');
    mkdirSync(bin);
    mkdirSync(out);
    const tool = (name: string, body: string) => writeFileSync(join(bin, name), `#!/bin/sh\n${body}\n`, { mode: 0o755 });
    // An old squeue: no --json. The job runs once, then has timed out; its output file has a line.
    tool('sbatch', `echo "gpu_workbench: Slurm job 77 on 2 node(s)" > ${out}/gw-slurm-77.out; echo 77`);
    tool('squeue', `case "$*" in *--json*) echo "squeue: unrecognized option '--json'" >&2; exit 1;; esac
if [ -e ${tmp}/polled ]; then echo "77|TIMEOUT|TimeLimit|2|n[1-2]"; else touch ${tmp}/polled; echo "77|RUNNING|None|2|n[1-2]"; fi`);
    tool('scontrol', `echo "JobId=77 JobName=gw-slurm JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 NodeList=n[1-2]"`);
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path ?? ''}`;
    try {
      // The GPU panel's node probes follow squeue's readings: started on RUNNING, stopped at the end.
      const infos: string[] = [];
      const probes: string[] = [];
      const sent: string[] = [];
      const poller = new SlurmNodesPoller((id, list, count) => {
        probes.push(`${id} ${list} ${count}`);
        return Promise.resolve({ jobId: id, nodes: [], unavailable: [] });
      }, (n) => sent.push(n ? `job ${n.jobId}` : 'gone'));
      const run = start(job({ slurm: { outputDir: out, gpusPerNode: 0 } }), { onSlurmInfo: (i) => { infos.push(`${i.state} ${i.nodes}`); poller.update(i); } });
      const end = await run.handle.finished;
      assert.deepEqual(infos, ['RUNNING n[1-2]', 'TIMEOUT n[1-2]']);
      assert.deepEqual(probes, ['77 n[1-2] 2']);
      assert.equal(sent[sent.length - 1], 'gone');
      assert.equal(poller.active, false);
      assert.equal(end.type, 'job/failed');
      assert.equal(end.type === 'job/failed' ? end.reason : '', 'Slurm job 77 ended TIMEOUT (TimeLimit) on n[1-2]');
      assert.match(end.type === 'job/failed' ? end.hint ?? '' : '', /time limit: give a longer "time"/);
      assert.ok(logs(run.events).includes('gpu_workbench: Slurm job 77 on 2 node(s)'), 'its output file was streamed');
    } finally {
      process.env.PATH = path;
    }
  });
});

/** Runs a job through runTorchrun, collecting its events. */
function start(file: string, extra: Parameters<typeof runTorchrun>[2] = {}): { handle: TorchrunHandle; events: JobEvent[]; waitFor: (ok: (e: JobEvent) => boolean) => Promise<JobEvent> } {
  const events: JobEvent[] = [];
  const waiters: Array<{ ok: (e: JobEvent) => boolean; resolve: (e: JobEvent) => void }> = [];
  const handle = runTorchrun(loadTorchrunJob(file), (e) => {
    events.push(e);
    for (const w of [...waiters]) if (w.ok(e)) { waiters.splice(waiters.indexOf(w), 1); w.resolve(e); }
  }, extra);
  return {
    handle, events,
    waitFor: (ok) => new Promise((resolve) => {
      const seen = events.find(ok);
      if (seen) resolve(seen);
      else waiters.push({ ok, resolve });
    }),
  };
}

const logs = (events: JobEvent[]) => events.flatMap((e) => (e.type === 'job/log' ? [e.message] : []));

describe('slurm: torchrun jobs on a real two-node cluster', function () {
  this.timeout(240_000);
  const cluster = useSlurmCluster(() => {
    const torch = spawnSync(torchPython, ['-c', 'import torch.distributed as d; print(d.is_gloo_available())'], { encoding: 'utf8', timeout: 60_000 });
    return torch.status !== 0 || !torch.stdout.includes('True') ? `${torchPython} has no torch with gloo (python3-torch)` : undefined;
  });

  const squeue = () => cluster().tool('squeue', ['-h', '-o', '%i %T']).trim();

  it('runs the example script on 2 nodes to the end: one world of 2 ranks, its output streamed, the job gone from squeue', async () => {
    const run = start(job({ slurm: { gpusPerNode: 1, outputDir: join(tmp, 'out') } }));
    const end = await run.handle.finished;
    const said = logs(run.events);
    assert.equal(end.type, 'job/done', `${JSON.stringify(end)}\n${said.join('\n')}`);
    assert.ok(said.some((l) => /^Slurm: submitted batch job \d+ /.test(l)), said.join('\n'));
    assert.ok(said.some((l) => /^Slurm: job \d+ is RUNNING on n\[1-2\]$/.test(l)), said.join('\n'));
    assert.ok(said.some((l) => /gpu_workbench: Slurm job \d+ on 2 node\(s\) n\[1-2\], rendezvous store on n1 \(127\.0\.0\.1:\d+\)/.test(l)), said.join('\n'));
    assert.ok(said.some((l) => /^epoch 1: loss \d/.test(l)), said.join('\n'));
    // Both agents joined one rendezvous of 2 nodes (torch's own log, LOGLEVEL=INFO).
    assert.ok(said.filter((l) => /group_world_size=2/.test(l)).length >= 2, said.filter((l) => /group_/.test(l)).join('\n'));
    assert.equal(squeue().split('\n').filter((l) => / (?:RUNNING|PENDING|COMPLETING)$/.test(l)).length, 0, squeue());
    assert.deepEqual(cluster().jobProcesses(), []);
  });

  it('Stop cancels the job with scancel: nothing left in squeue, no process of it left', async () => {
    const file = join(tmp, 'sleep.py');
    writeFileSync(file, 'import time, os\nprint("sleeping on", os.environ.get("SLURM_NODEID"), flush=True)\ntime.sleep(600)\n');
    const run = start(job({ script: file, args: [], slurm: { gpusPerNode: 1, outputDir: join(tmp, 'out') } }));
    // Both nodes' scripts run (each prints its SLURM_NODEID).
    await run.waitFor(() => run.events.filter((x) => x.type === 'job/log' && /sleeping on \d/.test(x.message)).length >= 2);
    const id = run.handle.slurmJobId?.();
    assert.ok(id);
    run.handle.cancel();
    const end = await run.handle.finished;
    assert.deepEqual([end.type, end.type === 'job/failed' && end.cancelled], ['job/failed', true]);
    assert.equal((await querySlurmJob(id))?.state, 'CANCELLED');
    assert.doesNotMatch(squeue(), / (?:RUNNING|PENDING|COMPLETING)$/m);
    assert.deepEqual(cluster().jobProcesses(), []);
  });

  it('cancels its jobs when the process that follows them exits (the window closes)', async () => {
    // A process that submits a job, then exits as the extension host does when the window closes.
    const child = spawnSync(process.execPath, ['-e', `
      const { SlurmJob } = require(${JSON.stringify(join(repoRoot, 'out', 'src', 'training', 'launchers', 'slurm.js'))});
      const job = SlurmJob.submit({ dir: ${JSON.stringify(join(tmp, 'out'))}, name: 'held', body: 'sleep 600', sbatch: ['--nodes=1'], options: { pollMs: 100 } });
      job.on('note', (n) => { if (/RUNNING/.test(n.message)) { console.log(job.jobId); process.exit(0); } });
    `], { encoding: 'utf8', env: process.env, timeout: 60_000 });
    const id = child.stdout.trim();
    assert.match(id, /^\d+$/, child.stderr);
    // scancel went out before the exit; Slurm then ends the job (COMPLETING for a moment).
    let info = await querySlurmJob(id);
    while (info && !isEndState(info.state)) {
      await new Promise((r) => setTimeout(r, 100));
      info = await querySlurmJob(id);
    }
    assert.equal(info?.state, 'CANCELLED');
  });

  it('tells sbatch\'s error in its own words, and a job that waits with its reason', async () => {
    const bad = start(job({ slurm: { partition: 'nope' } }));
    const end = await bad.handle.finished;
    assert.equal(end.type, 'job/failed');
    assert.match(end.type === 'job/failed' ? end.reason : '', /sbatch: error: .*Invalid partition name specified/);
    const waiting = start(job({ slurm: { gpusPerNode: 1, sbatchArgs: ['--begin=now+3600'], outputDir: join(tmp, 'out') } }));
    const pending = await waiting.waitFor((e) => e.type === 'job/log' && /PENDING/.test(e.message));
    assert.match(pending.type === 'job/log' ? pending.message : '', /^Slurm: job \d+ is PENDING \(BeginTime\)$/);
    waiting.handle.cancel();
    await waiting.handle.finished;
    assert.doesNotMatch(squeue(), / PENDING$/m);
  });

  it('says when the Slurm tools are not installed', async () => {
    const path = process.env.PATH;
    process.env.PATH = tmp;
    try {
      const end = await start(job({})).handle.finished;
      assert.match(end.type === 'job/failed' ? end.reason : '', /^sbatch is not installed or not on PATH: Slurm jobs need Slurm's client tools/);
    } finally {
      process.env.PATH = path;
    }
  });
});

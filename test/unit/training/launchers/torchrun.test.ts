import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseCudaErrors, rootCauseRank } from '../../../../src/training/launchers/cudaErrors';
import type { JobEvent } from '../../../../src/training/job/events';
import { runJob } from '../../../../src/training/launchers/coordinator';
import { loadTorchrunJob, torchrunCommand } from '../../../../src/training/launchers/torchrun';
import { fixtures } from '../../../paths';

const dir = join(fixtures, 'torchrun');
const text = (name: string) => readFileSync(join(dir, name), 'utf8');

/** Debian's python3-torch belongs to /usr/bin/python3; the launch tests need it. */
const torchPython = '/usr/bin/python3';
const probe = spawnSync(torchPython, ['-c', 'import torch, torch.distributed; print(torch.__version__, torch.distributed.is_gloo_available())'], { encoding: 'utf8', timeout: 60_000 });
const torchMissing = probe.error ? `${torchPython} cannot be run (${(probe.error as NodeJS.ErrnoException).code})` : probe.status !== 0 ? `${torchPython} has no torch (${probe.stderr.trim().split('\n').pop()}): apt-get install -y python3-torch` : !probe.stdout.includes('True') ? `torch ${probe.stdout.trim()} has no gloo backend` : undefined;

describe('CUDA errors in PyTorch output', () => {
  it('explains CUDA out of memory with the size it tried to allocate, the user\'s line and the hints', () => {
    const [p, ...rest] = parseCudaErrors(text('oom-torch1.13.txt'));
    assert.equal(rest.length, 0, 'one problem for one error');
    assert.equal(p.kind, 'cuda-oom');
    assert.equal(p.tryingToAllocate, '20.00 MiB');
    assert.deepEqual([p.file, p.line], ['/home/user/project/train.py', 71], 'the innermost frame of the script, not torch\'s');
    assert.match(p.explanation, /while trying to allocate 20\.00 MiB/);
    const hints = p.hints.join('\n');
    assert.match(hints, /smaller batch size/);
    assert.match(hints, /more micro-batches/);
    assert.match(hints, /DistributedDataParallel \(ddp\) instead of DataParallel \(dp\)/);
    assert.match(hints, /empty_cache\(\) only returns cached, unused blocks/);
    assert.equal(rootCauseRank(text('oom-torch1.13.txt')), 1);
  });

  it('reads the rank from the [rankN]: prefix of recent PyTorch and the new OutOfMemoryError wording', () => {
    const [p] = parseCudaErrors(text('oom-torch2.5-ranked.txt'));
    assert.deepEqual([p.kind, p.rank, p.tryingToAllocate, p.file, p.line], ['cuda-oom', 0, '4.22 GiB', '/work/ddp_lm.py', 140]);
    assert.ok(p.message.startsWith('torch.OutOfMemoryError: CUDA out of memory.'));
  });

  it('explains CUDNN_STATUS_NOT_INITIALIZED as a version mismatch or memory at init', () => {
    const [p] = parseCudaErrors(text('cudnn-not-initialized.txt'));
    assert.equal(p.kind, 'cudnn-not-initialized');
    assert.equal(p.message, 'RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED');
    assert.match(p.explanation, /driver, CUDA and cuDNN versions do not match/);
    assert.match(p.explanation, /out of memory/);
    assert.deepEqual([p.file, p.line], ['/home/u/proj/engine/runner.py', 60]);
  });

  it('explains a device-side assert as an index out of range, with the kernel\'s assertion and CUDA_LAUNCH_BLOCKING', () => {
    const problems = parseCudaErrors(text('device-side-assert.txt'));
    assert.equal(problems.length, 1, 'the repeated assertion lines and the debugging advice are one problem');
    const [p] = problems;
    assert.equal(p.kind, 'device-side-assert');
    assert.equal(p.assertion, 't >= 0 && t < n_classes');
    assert.match(p.explanation, /label ≥ num_classes/);
    assert.ok(p.hints.some((h) => h.includes('CUDA_LAUNCH_BLOCKING=1')));
    assert.deepEqual([p.file, p.line], ['train.py', 379]);
  });

  it('explains an NCCL error', () => {
    const [p] = parseCudaErrors(text('nccl-error.txt'));
    assert.equal(p.kind, 'nccl');
    assert.match(p.message, /^torch\.distributed\.DistBackendError: NCCL error in: .*ProcessGroupNCCL\.cpp:1691/);
    assert.ok(p.hints.some((h) => h.includes('NCCL_DEBUG=INFO')));
    assert.deepEqual([p.file, p.line], ['/srv/run.py', 22]);
  });

  it('finds nothing in a clean run', () => {
    assert.deepEqual(parseCudaErrors('epoch 1 loss 0.3\nTraceback (most recent call last):\n  File "a.py", line 3, in <module>\nValueError: bad\n'), []);
  });
});

describe('torchrun jobs', function () {
  this.timeout(90_000);

  it('builds the torchrun command line from the job, with --python over the job\'s interpreter', () => {
    const spec = loadTorchrunJob(join(dir, 'allreduce.job.json'), { python: '/opt/py/bin/python' });
    assert.deepEqual(torchrunCommand(spec), ['/opt/py/bin/python', '-m', 'torch.distributed.run', '--nnodes', '1', '--rdzv_backend', 'c10d', '--rdzv_endpoint', 'localhost:0', '--nproc_per_node', '2', '--redirects', '2', '--tee', '2', '-m', 'gpu_workbench.run', join(dir, 'allreduce_gloo.py')]);
    assert.equal(loadTorchrunJob(join(dir, 'allreduce.job.json')).python, '/usr/bin/python3');
    assert.equal(loadTorchrunJob(join(dir, 'allreduce.job.json'), { devices: [0, 3] }).nprocPerNode, 2);
  });

  it('lets the devices picked in the editor (or --devices) replace the job\'s process count, and rejects a job whose own lists disagree', () => {
    const one = loadTorchrunJob(join(dir, 'allreduce.job.json'), { devices: [1] });
    assert.deepEqual([one.nprocPerNode, one.devices], [1, [1]], 'one GPU picked: one process, CUDA_VISIBLE_DEVICES=1');
    assert.equal(loadTorchrunJob(join(dir, 'allreduce.job.json'), { devices: 4 }).nprocPerNode, 4, 'a count of CPU processes');
    const tmp = mkdtempSync(join(tmpdir(), 'gw-torchrun-job-'));
    try {
      const bad = join(tmp, 'bad.job.json');
      writeFileSync(bad, JSON.stringify({ kind: 'torchrun', script: join(dir, 'allreduce_gloo.py'), nprocPerNode: 2, devices: [0, 1, 2] }));
      assert.throws(() => loadTorchrunJob(bad), /nprocPerNode \(2\) must equal the number of devices listed \(3\)/);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it('fails with a clear reason when the interpreter does not exist', async () => {
    const events: JobEvent[] = [];
    const final = await runJob({ file: join(dir, 'allreduce.job.json'), overrides: { python: '/nonexistent/python3' }, onEvent: (e) => events.push(e) }).finished;
    assert.equal(final.type, 'job/failed');
    assert.equal(final.type === 'job/failed' && final.reason, 'cannot run /nonexistent/python3: no such program');
  });

  it('runs a 2-process gloo script under torchrun with /usr/bin/python3 and streams its output', async function () {
    if (torchMissing) this.skip();
    const events: JobEvent[] = [];
    const final = await runJob({ file: join(dir, 'allreduce.job.json'), onEvent: (e) => events.push(e) }).finished;
    const logs = events.flatMap((e) => (e.type === 'job/log' ? [e.message] : []));
    assert.equal(final.type, 'job/done', `${JSON.stringify(final)}\n${logs.join('\n')}`);
    assert.ok(logs.some((l) => /rank 0 of 2 \(LOCAL_RANK=0\): sum 3/.test(l)), logs.join('\n'));
    assert.ok(logs.some((l) => /rank 1 of 2 \(LOCAL_RANK=1\): sum 3/.test(l)), logs.join('\n'));
    assert.equal(final.type === 'job/done' && final.metrics.torchrun?.exitCode, 0);
  });

  it('runs two jobs at the same time on one host, one ending while the other runs, both clean', async function () {
    if (torchMissing) this.skip();
    const tmp = mkdtempSync(join(tmpdir(), 'gw-torchrun-two-'));
    interface Started { readonly name: string; readonly gate: string; readonly logs: string[]; readonly problems: string[]; readonly finished: Promise<JobEvent> }
    const started: Started[] = [];
    const start = (name: string, onReady: () => void, onFailed: (e: Error) => void): Started => {
      const gate = join(tmp, `${name}.gate`);
      const jobFile = join(tmp, `${name}.job.json`);
      writeFileSync(jobFile, JSON.stringify({ kind: 'torchrun', script: join(dir, 'gated_allreduce.py'), nprocPerNode: 2, python: torchPython, env: { GATE: gate } }));
      const logs: string[] = [], problems: string[] = [];
      let ready = 0;
      const finished = runJob({ file: jobFile, onEvent: (e) => {
        if (e.type !== 'job/log') return;
        logs.push(e.message);
        if (e.problem) problems.push(e.message);
        // Two ranks' stdout can arrive as one line ("rank 1 ready: sum 3rank 0 ready: sum 3"): count matches.
        const before = ready;
        ready += e.message.match(/rank \d ready: sum 3/g)?.length ?? 0;
        if (before < 2 && ready >= 2) onReady();
      } }).finished;
      void finished.then((f) => { if (f.type === 'job/failed') onFailed(new Error(`job ${name}: ${f.reason}\n${logs.join('\n')}`)); });
      const job = { name, gate, logs, problems, finished };
      started.push(job);
      return job;
    };
    try {
      // Job a's ranks are ready (its agent's rendezvous store is up) before job b starts; a ends while b still
      // runs, and b ends after; neither may print an error. Ordered by events, whatever the machine's load.
      await new Promise<void>((bothReady, failed) => {
        start('a', () => start('b', bothReady, failed), failed);
      });
      const [a, b] = started;
      writeFileSync(a.gate, '');
      const finalA = await a.finished;
      writeFileSync(b.gate, '');
      const finalB = await b.finished;
      for (const [job, final] of [[a, finalA], [b, finalB]] as const) {
        assert.equal(final.type, 'job/done', `job ${job.name}: ${JSON.stringify(final)}\n${job.logs.join('\n')}`);
        for (const rank of [0, 1]) assert.ok(job.logs.some((l) => l.includes(`rank ${rank} done`)), `job ${job.name}, rank ${rank}:\n${job.logs.join('\n')}`);
        assert.deepEqual(job.problems, [], `job ${job.name}:\n${job.logs.join('\n')}`);
      }
    } finally {
      // Whatever happened, the jobs that started see their gates and end before their folder goes.
      for (const job of started) writeFileSync(job.gate, '');
      await Promise.allSettled(started.map((j) => j.finished));
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it('turns a CUDA error raised by a worker into a problem naming the rank and the script line', async function () {
    if (torchMissing) this.skip();
    const events: JobEvent[] = [];
    const final = await runJob({ file: join(dir, 'oom.job.json'), onEvent: (e) => events.push(e) }).finished;
    assert.equal(final.type, 'job/failed');
    const problems = events.flatMap((e) => (e.type === 'job/log' && e.problem?.kind === 'cuda-oom' ? [e.problem] : []));
    assert.equal(problems.length, 1, JSON.stringify(problems));
    assert.deepEqual([problems[0].kind, problems[0].rank, problems[0].line, problems[0].tryingToAllocate], ['cuda-oom', 1, 11, '20.00 MiB']);
    assert.equal(problems[0].file, join(dir, 'raise_recorded_oom.py'));
    if (final.type === 'job/failed') {
      assert.equal(final.rank, 1);
      assert.match(final.reason, /^RuntimeError: CUDA out of memory\. Tried to allocate 20\.00 MiB .* at .*raise_recorded_oom\.py:11$/);
      assert.match(final.hint ?? '', /smaller batch size/);
    }
  });

  it('fails a shape error with rank 1\'s exception at the user\'s line, not torchrun\'s summary, and makes each exception a problem', async function () {
    if (torchMissing) this.skip();
    const events: JobEvent[] = [];
    const job = join(dir, 'exceptions', 'shape-rank1.job.json');
    const script = join(dir, 'exceptions', 'shape_rank1.py');
    const final = await runJob({ file: job, onEvent: (e) => events.push(e) }).finished;
    const log = events.flatMap((e) => (e.type === 'job/log' ? [e.message] : [])).join('\n');
    assert.equal(final.type, 'job/failed', log);
    if (final.type !== 'job/failed') return;
    assert.equal(final.reason, `RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x1568 and 392x10) at ${script}:11`, log);
    assert.equal(final.rank, 1);
    assert.match(final.hint ?? '', /set in_features=1568/);
    const problems = events.flatMap((e) => (e.type === 'job/log' && e.problem ? [e.problem] : []));
    const shape = problems.filter((p) => p.kind === 'exception' && !p.peerLost);
    assert.deepEqual(shape.map((p) => [p.rank, p.file, p.line]), [[1, script, 11]], JSON.stringify(problems));
    // Rank 0 waits in dist.barrier() (line 16) and loses its peer: a problem of its own, marked as such.
    for (const p of problems.filter((q) => q.kind === 'exception' && q.peerLost)) assert.deepEqual([p.rank, p.line], [0, 16]);
  });

  before(function () {
    if (torchMissing) console.warn(`torchrun launch tests skipped: ${torchMissing}`);
  });
});

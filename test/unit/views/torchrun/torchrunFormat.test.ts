import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CudaErrorParser, parseCudaErrors } from '../../../../src/training/launchers/cudaErrors';
import type { JobEvent } from '../../../../src/training/job/events';
import { runJob } from '../../../../src/training/launchers/coordinator';
import { problemDiagnostics, taskExitCode, terminalText, torchrunEndMessage } from '../../../../src/views/torchrun/torchrunFormat';
import { fixtures, repoRoot } from '../../../paths';

const recorded = (name: string) => readFileSync(join(fixtures, 'torchrun', name), 'utf8');
const script = '/home/user/project/train.py';
const cwd = '/home/user/project';
/** Strips the terminal's colours. */
const plain = (s: string | undefined) => (s ?? '').split('\u001b').map((part, i) => (i === 0 ? part : part.replace(/^\[[\d;]*m/, ''))).join('');

describe('torchrun CUDA problems as diagnostics', () => {
  it('puts a recorded CUDA OOM at the user\'s own line (0-based) with the explanation and what to try', () => {
    const [d, ...rest] = problemDiagnostics(parseCudaErrors(recorded('oom-torch1.13.txt')), script, cwd);
    assert.equal(rest.length, 0);
    assert.equal(d.file, '/home/user/project/train.py');
    assert.equal(d.line, 70, 'traceback line 71 of train.py, not a torch frame');
    assert.equal(d.code, 'cuda-oom');
    const [first, ...more] = d.message.split('\n');
    assert.equal(first.startsWith('CUDA out of memory: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity;'), true, first);
    assert.doesNotMatch(first, /OutOfMemoryError/, 'the exception class is not repeated');
    const body = more.join('\n');
    assert.match(body, /while trying to allocate 20\.00 MiB/);
    assert.match(body, /^• Use a smaller batch size/m);
    assert.match(body, /empty_cache\(\) only returns cached, unused blocks/);
  });

  it('reads a relative traceback path from the job\'s folder and keeps the kernel assertion and CUDA_LAUNCH_BLOCKING=1', () => {
    const [d] = problemDiagnostics(parseCudaErrors(recorded('device-side-assert.txt')), script, '/srv/job');
    assert.deepEqual([d.file, d.line, d.code], ['/srv/job/train.py', 378, 'device-side-assert']);
    assert.match(d.message, /t >= 0 && t < n_classes/);
    assert.match(d.message, /CUDA_LAUNCH_BLOCKING=1/);
  });

  it('explains CUDNN_STATUS_NOT_INITIALIZED and NCCL errors at their script lines', () => {
    const [cudnn] = problemDiagnostics(parseCudaErrors(recorded('cudnn-not-initialized.txt')), script, cwd);
    assert.equal(cudnn.code, 'cudnn-not-initialized');
    assert.match(cudnn.message, /^cuDNN not initialized: /);
    assert.match(cudnn.message, /driver, CUDA and cuDNN versions/);
    const [nccl] = problemDiagnostics(parseCudaErrors(recorded('nccl-error.txt')), script, cwd);
    assert.deepEqual([nccl.code, nccl.file, nccl.line], ['nccl', '/srv/run.py', 21]);
    assert.match(nccl.message, /NCCL_DEBUG=INFO/);
  });

  it('makes one diagnostic of the same error raised by two ranks at the same line, naming both ranks', () => {
    const parser = new CudaErrorParser();
    const ranked = recorded('oom-torch2.5-ranked.txt').split('\n').filter((l) => l.startsWith('[rank0]:'));
    assert.ok(ranked.length > 3, 'the recorded text has rank 0 lines');
    // Both ranks' tracebacks, interleaved line by line as torchrun's --tee prints them.
    for (const line of ranked) {
      parser.push(line);
      parser.push(line.replace('[rank0]:', '[rank1]:'));
    }
    assert.equal(parser.problems().length, 2, 'the parser keeps one problem per rank');
    const diagnostics = problemDiagnostics(parser.problems(), script, cwd);
    assert.equal(diagnostics.length, 1);
    assert.deepEqual([diagnostics[0].file, diagnostics[0].line, diagnostics[0].ranks], ['/work/ddp_lm.py', 139, [0, 1]]);
    assert.match(diagnostics[0].message, /^CUDA out of memory \(ranks 0, 1\): CUDA out of memory\. Tried to allocate 4\.22 GiB/);
  });

  it('puts a problem without a traceback on the script\'s first line and says so', () => {
    const [d] = problemDiagnostics(parseCudaErrors('RuntimeError: CUDA error: device-side assert triggered\n'), script, cwd);
    assert.deepEqual([d.file, d.line], [script, 0]);
    assert.match(d.message, /no traceback line/);
  });

  it('has no diagnostic for a clean run', () => {
    assert.deepEqual(problemDiagnostics(parseCudaErrors('epoch 1: loss 0.3\nepoch 2: loss 0.2\n'), script, cwd), []);
  });
});

describe('torchrun task terminal and end message', () => {
  const [oom] = parseCudaErrors(recorded('oom-torch1.13.txt'));

  it('prints the script\'s lines as they are and a problem as a pointer to the Problems panel', () => {
    assert.equal(terminalText({ type: 'job/log', level: 'info', rank: 1, message: '[default1]:step 3: loss 1.2' }), '[default1]:step 3: loss 1.2');
    const line = plain(terminalText({ type: 'job/log', level: 'warning', message: 'x', problem: { ...oom, rank: 1 } }));
    assert.equal(line, 'GPU Workbench: CUDA out of memory on rank 1 at /home/user/project/train.py:71; the explanation and what to try are in the Problems panel.');
  });

  it('ends with the outcome: exit 0, stopped, or the failure with its hint', () => {
    const done: JobEvent = { type: 'job/done', metrics: { testAccuracy: NaN, testLoss: NaN, trainLoss: NaN, epochs: 0, steps: 0, samplesPerSecond: NaN, durationMs: 12_340 } };
    assert.equal(plain(terminalText(done)), 'torchrun exited 0 after 12.3 s.');
    assert.equal(plain(terminalText({ type: 'job/failed', reason: 'cancelled', cancelled: true })), 'Stopped: torchrun and its workers were ended.');
    assert.equal(plain(terminalText({ type: 'job/failed', reason: 'torchrun exited with code 1', rank: 0, hint: 'Look above.' })), 'Failed on rank 0: torchrun exited with code 1\nLook above.');
    assert.equal(taskExitCode({ type: 'job/failed', reason: 'cancelled', cancelled: true }), 130);
    assert.equal(taskExitCode({ type: 'job/failed', reason: 'x' }), 1);
    assert.equal(taskExitCode(done), 0);
  });

  it('names the first CUDA problem briefly in the end message and points at the Problems panel', () => {
    const failed = { type: 'job/failed' as const, reason: 'torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; …) at /home/user/project/train.py:71', rank: 1 };
    assert.equal(torchrunEndMessage('ddp', failed, [{ ...oom, rank: 1 }]), 'Training ddp (torchrun) failed on rank 1: CUDA out of memory (tried to allocate 20.00 MiB) at train.py:71. 1 CUDA problem in the Problems panel.');
    assert.equal(torchrunEndMessage('ddp', { type: 'job/failed', reason: 'cannot run /nope/python: no such program', hint: 'Set the interpreter.' }, []), 'Training ddp (torchrun) failed: cannot run /nope/python: no such program. Set the interpreter.');
    assert.equal(torchrunEndMessage('ddp', { type: 'job/failed', reason: 'cancelled', cancelled: true }, []), 'Training ddp (torchrun) was stopped.');
  });
});

/** Debian's python3-torch belongs to /usr/bin/python3 (the python3 first on PATH may lack torch). */
const torchPython = '/usr/bin/python3';
const probe = spawnSync(torchPython, ['-c', 'import torch, torch.distributed; print(torch.distributed.is_gloo_available())'], { encoding: 'utf8', timeout: 60_000 });
const torchMissing = probe.error ? `${torchPython} cannot be run (${(probe.error as NodeJS.ErrnoException).code})` : probe.status !== 0 ? `${torchPython} has no torch: apt-get install -y python3-torch` : !probe.stdout.includes('True') ? 'torch has no gloo backend' : undefined;

describe('torchrun example with a recorded CUDA OOM, run for real (python3-torch, gloo, 2 processes)', function () {
  this.timeout(120_000);
  before(function () {
    if (torchMissing) {
      console.warn(`      skipped: ${torchMissing}`);
      this.skip();
    }
  });

  it('examples/torchrun/recorded-cuda-oom.job.json shows one problem at the raising line of the script, on rank 1', async () => {
    const dir = join(repoRoot, 'examples', 'torchrun');
    const source = join(dir, 'recorded_cuda_error.py');
    const raiseLine = readFileSync(source, 'utf8').split('\n').findIndex((l) => l.trim() === 'raise error(message)');
    assert.ok(raiseLine > 0, 'the example raises the recorded error on one line');
    const events: JobEvent[] = [];
    const final = await runJob({ file: join(dir, 'recorded-cuda-oom.job.json'), onEvent: (e) => events.push(e) }).finished;
    const log = events.flatMap((e) => (e.type === 'job/log' ? [e.message] : [])).join('\n');
    assert.equal(final.type, 'job/failed', log);
    assert.ok(events.some((e) => e.type === 'job/log' && /step 2: loss/.test(e.message)), `the script trained before failing:\n${log}`);
    const problems = events.flatMap((e) => (e.type === 'job/log' && e.problem ? [e.problem] : []));
    const diagnostics = problemDiagnostics(problems, source, dir);
    assert.equal(diagnostics.length, 1, JSON.stringify(diagnostics));
    assert.deepEqual([diagnostics[0].file, diagnostics[0].line, diagnostics[0].code, diagnostics[0].ranks], [source, raiseLine, 'cuda-oom', [1]]);
    assert.match(diagnostics[0].message, /Tried to allocate 20\.00 MiB/);
  });
});

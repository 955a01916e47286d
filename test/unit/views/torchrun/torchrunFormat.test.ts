import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CudaErrorParser, parseCudaErrors } from '../../../../src/training/launchers/cudaErrors';
import { exceptionProblem, isScriptError, parsePythonExceptions } from '../../../../src/training/launchers/pythonErrors';
import type { JobEvent } from '../../../../src/training/job/events';
import { runJob } from '../../../../src/training/launchers/coordinator';
import { failureFromOutput } from '../../../../src/training/launchers/torchrun';
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

describe('exceptions of the script as diagnostics', () => {
  /** The problems of every script error in a recorded output. */
  const exceptionsOf = (name: string) => parsePythonExceptions(recorded(name)).filter(isScriptError).map(exceptionProblem);

  it('puts the shape error of both ranks at the user\'s forward() line (0-based), one entry naming both ranks, with where torch raised it and what to change', () => {
    const [d, ...rest] = problemDiagnostics(exceptionsOf('exc-shape-both-ranks.txt'), script, cwd);
    assert.equal(rest.length, 0, 'the same error at the same line: one entry');
    assert.deepEqual([d.file, d.line, d.code, d.ranks, d.severity], ['/tmp/proj/shape_both.py', 13, 'exception', [0, 1], 'error']);
    const [first, ...more] = d.message.split('\n');
    assert.equal(first, 'RuntimeError (ranks 0, 1): mat1 and mat2 shapes cannot be multiplied (32x1568 and 392x10)');
    assert.equal(more[0], 'Raised in torch/nn/modules/linear.py:114 (forward), called from this line.');
    assert.match(more[1], /^• A Linear layer with in_features=392 \(weight 10x392\) got inputs of 1568 features: set in_features=1568/);
  });

  it('marks the rank that only lost its peer as a warning at its own line, the failing rank\'s error at its line', () => {
    const diagnostics = problemDiagnostics(exceptionsOf('exc-shape-rank1-then-peer.txt'), script, cwd);
    assert.deepEqual(diagnostics.map((d) => [d.line, d.ranks, d.severity]), [[10, [1], 'error'], [15, [0], 'warning']]);
    assert.match(diagnostics[1].message, /^RuntimeError \(rank 0\): \[\.\/gloo\/transport\/tcp\/pair\.cc:598\] Connection closed by peer/);
  });

  it('links a chained exception to where its cause was raised', () => {
    const [r1, r0] = problemDiagnostics(exceptionsOf('exc-chained.txt'), script, cwd);
    assert.deepEqual([r0.line, r0.related], [10, [{ file: '/tmp/proj/chained.py', line: 7, message: 'Caused by FileNotFoundError: [Errno 2] No such file or directory: \'/nonexistent/data.csv\'' }]]);
    assert.deepEqual([r1.line, r1.related.map((r) => [r.line, r.message])], [17, [[15, 'While handling ValueError: invalid literal for int() with base 10: \'x\'']]]);
  });

  it('puts a DataLoader worker\'s error at the data set\'s line, with the loop\'s line as related information (recorded)', () => {
    const [d] = problemDiagnostics(exceptionsOf('exc-dataloader-worker.txt'), script, cwd);
    assert.deepEqual([d.file, d.line, d.ranks], ['/tmp/proj/loader_dataset.py', 12, [0, 1]]);
    assert.match(d.message, /^ValueError \(ranks 0, 1\): bad label 11 in row 40\n/);
    assert.deepEqual(d.related, [{ file: '/tmp/proj/loader_worker.py', line: 8, message: 'Raised in a DataLoader worker process, re-raised in the main process as ValueError: Caught ValueError in DataLoader worker process 0.' }]);
  });

  it('shows a SyntaxError at the line Python could not read, and every line of a multi-line message', () => {
    const [syntax] = problemDiagnostics(exceptionsOf('exc-syntax-script.txt'), script, cwd);
    assert.deepEqual([syntax.file, syntax.line, syntax.ranks], ['/tmp/proj/syntax.py', 3, [0, 1]]);
    assert.match(syntax.message, /^SyntaxError \(ranks 0, 1\): '\(' was never closed\nPython could not read this file/);
    const [multi] = problemDiagnostics(exceptionsOf('exc-multiline.txt'), script, cwd);
    assert.equal(multi.message.split('\n').slice(0, 3).join('\n'), 'ValueError (rank 0): the batch does not match the model:\n  expected (N, 784)\n  got (32, 1, 28, 28)');
  });

  it('names the failing rank\'s exception in the end message and in the terminal', () => {
    const problems = exceptionsOf('exc-shape-rank1-then-peer.txt');
    const text = recorded('exc-shape-rank1-then-peer.txt');
    const failed = { type: 'job/failed' as const, ...failureFromOutput(parsePythonExceptions(text), [], text, new Map()) } as Extract<JobEvent, { type: 'job/failed' }>;
    // The lost peer's problem may arrive first: the message still names rank 1's, the one the engine chose.
    assert.equal(torchrunEndMessage('mnist', failed, [problems[1], problems[0]]), 'Training mnist (torchrun) failed on rank 1: RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x1568 and 392x10) at shape_rank1.py:11. 2 problems in the Problems panel.');
    assert.equal(plain(terminalText({ type: 'job/log', level: 'warning', message: 'x', problem: problems[0] })), 'GPU Workbench: RuntimeError on rank 1 at /tmp/proj/shape_rank1.py:11; it is in the Problems panel.');
  });

  it('says a rank was killed by SIGKILL, with the OOM-killer hint, and does not blame the rank that then lost its peer (whose warning is the only problem)', () => {
    const text = recorded('exc-sigkill-then-peer.txt');
    const problems = exceptionsOf('exc-sigkill-then-peer.txt');
    assert.deepEqual(problems.map((p) => [p.rank, p.kind === 'exception' && p.peerLost]), [[0, true]], 'rank 0\'s lost peer is the only problem');
    const failed = { type: 'job/failed' as const, ...failureFromOutput(parsePythonExceptions(text), [], text, new Map()) } as Extract<JobEvent, { type: 'job/failed' }>;
    const message = torchrunEndMessage('mnist', failed, problems);
    assert.match(message, /^Training mnist \(torchrun\) failed on rank 1: rank 1 was killed by SIGKILL \(signal 9\) without a Python exception; rank 0 then lost its connection to it \(RuntimeError: .*Connection reset by peer\)\. A SIGKILL .* out-of-memory killer .* 1 problem in the Problems panel\.$/);
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
    const failed = { type: 'job/failed' as const, reason: 'torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; …) at /home/user/project/train.py:71', rank: 1, problem: { ...oom, rank: 1 } };
    assert.equal(torchrunEndMessage('ddp', failed, [{ ...oom, rank: 1 }]), 'Training ddp (torchrun) failed on rank 1: CUDA out of memory (tried to allocate 20.00 MiB) at train.py:71. 1 problem in the Problems panel.');
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

  it('examples/torchrun/recorded-cuda-oom.job.json shows the OOM at the raising line of the script, on rank 1 (rank 0 lost its peer: a warning)', async () => {
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
    const errors = diagnostics.filter((d) => d.severity === 'error');
    assert.equal(errors.length, 1, JSON.stringify(diagnostics));
    assert.deepEqual([errors[0].file, errors[0].line, errors[0].code, errors[0].ranks], [source, raiseLine, 'cuda-oom', [1]]);
    assert.match(errors[0].message, /Tried to allocate 20\.00 MiB/);
    // Rank 0, waiting for rank 1 in a collective, lost its connection: at most that, as a warning.
    for (const w of diagnostics.filter((d) => d.severity === 'warning')) assert.deepEqual([w.code, w.ranks], ['exception', [0]], w.message);
    assert.ok(diagnostics.length <= 2, JSON.stringify(diagnostics));
  });
});

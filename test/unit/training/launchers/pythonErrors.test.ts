// Python exceptions of a torchrun job's output, on real torchrun output (test/fixtures/torchrun/exc-*.txt,
// recorded with python3-torch 1.13 and gloo: see exceptions/README.md), and the reason a failed job gives.
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseCudaErrors } from '../../../../src/training/launchers/cudaErrors';
import type { JobEvent } from '../../../../src/training/job/events';
import { exceptionProblem, isScriptError, parsePythonExceptions, PythonTracebackParser, type ScriptException } from '../../../../src/training/launchers/pythonErrors';
import { failureFromOutput, runTorchrun } from '../../../../src/training/launchers/torchrun';
import { fixtures } from '../../../paths';

const dir = join(fixtures, 'torchrun');
const recorded = (name: string) => readFileSync(join(dir, name), 'utf8');
const scriptErrors = (text: string) => parsePythonExceptions(text).filter(isScriptError);
const at = (e: ScriptException) => `${e.userFrame?.file}:${e.userFrame?.line}`;
/** The reason a job with this output gives. */
const failure = (text: string) => failureFromOutput(parsePythonExceptions(text), parseCudaErrors(text), text, new Map());

describe('Python exceptions in torchrun output', () => {
  it('reads a shape error of both ranks with the user\'s innermost frame, not torch\'s, and skips torchrun\'s own ChildFailedError', () => {
    const all = parsePythonExceptions(recorded('exc-shape-both-ranks.txt'));
    assert.deepEqual(all.map((e) => [e.type, e.rank, isScriptError(e)]), [['RuntimeError', 0, true], ['RuntimeError', 1, true], ['torch.distributed.elastic.multiprocessing.errors.ChildFailedError', undefined, false]]);
    const [r0] = all;
    assert.equal(r0.message, 'mat1 and mat2 shapes cannot be multiplied (32x1568 and 392x10)');
    assert.equal(at(r0), '/tmp/proj/shape_both.py:14', 'the forward() line of the script, below it two frames of torch');
    assert.deepEqual([r0.raisedIn?.file, r0.raisedIn?.line], ['/usr/lib/python3/dist-packages/torch/nn/modules/linear.py', 114]);
    assert.equal(r0.frames.length, 6);
  });

  it('gives the first failing rank\'s exception as the reason, with its rank and the user\'s file:line, not torchrun\'s boilerplate', () => {
    const f = failure(recorded('exc-shape-both-ranks.txt'));
    assert.deepEqual(f && [f.reason, f.rank], ['RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x1568 and 392x10) at /tmp/proj/shape_both.py:14', 0]);
    assert.match(f?.hint ?? '', /in_features=392 .* got inputs of 1568 features: set in_features=1568/);
  });

  it('names rank 1, which failed first, although torchrun\'s summary calls rank 0 (which lost its peer) the root cause', () => {
    const text = recorded('exc-shape-rank1-then-peer.txt');
    assert.match(text, /Root Cause \(first observed failure\):\n\[0\]:\n.*\n.*\n\s+rank\s+: 0/, 'the recorded summary blames rank 0');
    const [first, peer] = scriptErrors(text);
    assert.deepEqual([first.rank, at(first), peer.rank, at(peer)], [1, '/tmp/proj/shape_rank1.py:11', 0, '/tmp/proj/shape_rank1.py:16']);
    assert.equal(exceptionProblem(peer).peerLost, true);
    assert.match(exceptionProblem(peer).explanation, /lost its connection to another rank/);
    const f = failure(text);
    assert.deepEqual(f && [f.reason, f.rank], ['RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x1568 and 392x10) at /tmp/proj/shape_rank1.py:11', 1]);
  });

  it('keeps the chain of "raise … from" and "During handling…", each link with its own line', () => {
    const [r1, r0] = scriptErrors(recorded('exc-chained.txt'));
    assert.deepEqual([r0.rank, r0.type, r0.message, at(r0)], [0, 'RuntimeError', 'cannot load the data set from /nonexistent/data.csv', '/tmp/proj/chained.py:11']);
    assert.deepEqual(r0.chain, [{ relation: 'cause', type: 'FileNotFoundError', message: '[Errno 2] No such file or directory: \'/nonexistent/data.csv\'', file: '/tmp/proj/chained.py', line: 8 }]);
    assert.deepEqual([r1.rank, r1.type, r1.message, at(r1)], [1, 'KeyError', '\'fallback\'', '/tmp/proj/chained.py:18']);
    assert.deepEqual(r1.chain.map((c) => [c.relation, c.type, c.line]), [['context', 'ValueError', 16]]);
    assert.match(exceptionProblem(r0).explanation, /^Caused by FileNotFoundError: \[Errno 2\] No such file or directory: '\/nonexistent\/data\.csv' \(\/tmp\/proj\/chained\.py:8\)\.$/);
    // The rank whose exception was printed first (rank 1 here) is the reason.
    assert.match(failure(recorded('exc-chained.txt'))?.reason ?? '', /^KeyError: 'fallback' at \/tmp\/proj\/chained\.py:18$/);
  });

  it('places a SyntaxError of the script at its `File "…", line N` line (no "Traceback" header) and one of an imported module in that module', () => {
    const script = scriptErrors(recorded('exc-syntax-script.txt'));
    assert.deepEqual(script.map((e) => [e.rank, e.type, e.message, at(e)]), [[0, 'SyntaxError', '\'(\' was never closed', '/tmp/proj/syntax.py:4'], [1, 'SyntaxError', '\'(\' was never closed', '/tmp/proj/syntax.py:4']]);
    assert.match(exceptionProblem(script[0]).explanation, /could not read this file/);
    const imported = scriptErrors(recorded('exc-syntax-import.txt'));
    assert.deepEqual(imported.map((e) => [e.type, at(e)]), [['SyntaxError', '/tmp/proj/helper_bad.py:1'], ['SyntaxError', '/tmp/proj/helper_bad.py:1']]);
    assert.equal(failure(recorded('exc-syntax-script.txt'))?.reason, 'SyntaxError: \'(\' was never closed at /tmp/proj/syntax.py:4');
  });

  it('keeps every line of a multi-line message in the problem and joins them in the one-line reason', () => {
    const [e] = scriptErrors(recorded('exc-multiline.txt'));
    assert.equal(e.message, 'the batch does not match the model:\n  expected (N, 784)\n  got (32, 1, 28, 28)');
    assert.equal(exceptionProblem(e).message, `ValueError: ${e.message}`);
    assert.equal(failure(recorded('exc-multiline.txt'))?.reason, 'ValueError: the batch does not match the model: expected (N, 784) got (32, 1, 28, 28) at /tmp/proj/multiline.py:8');
  });

  it('follows each rank\'s traceback when torchrun prints the two interleaved', () => {
    const text = recorded('exc-interleaved.txt');
    const starts = [...text.matchAll(/^\[default(\d)\]:Traceback/gm)].map((m) => m.index ?? 0);
    const ends = [...text.matchAll(/^\[default(\d)\]:RuntimeError/gm)].map((m) => m.index ?? 0);
    assert.ok(starts[1] < ends[0], 'the recorded output has rank 1\'s traceback begin before rank 0\'s ends');
    const all = scriptErrors(text);
    assert.deepEqual(all.map((e) => [e.rank, e.frames.length, at(e)]), [[0, 122, '/tmp/proj/deep.py:10'], [1, 122, '/tmp/proj/deep.py:10']]);
  });

  it('takes Ctrl-C and SIGTERM as no error of the script: no problem, the reason names the signal', () => {
    const sigint = recorded('exc-sigint.txt');
    assert.deepEqual(parsePythonExceptions(sigint).map((e) => e.type.split('.').pop()), ['KeyboardInterrupt', 'KeyboardInterrupt', 'SignalException']);
    assert.deepEqual(scriptErrors(sigint), []);
    assert.equal(failure(sigint)?.reason, 'torchrun was stopped by SIGINT (signal 2) and ended its workers; the script reported no error');
    assert.equal(failure(recorded('exc-sigterm.txt'))?.reason, 'torchrun was stopped by SIGTERM (signal 15) and ended its workers; the script reported no error');
  });

  it('says which rank a signal killed, from torchrun\'s summary, when no exception was printed', () => {
    const f = failureFromOutput(parsePythonExceptions(recorded('exc-sigkill-rank1.txt')), [], recorded('exc-sigkill-rank1.txt'), new Map([[1, ['step 3']]]));
    assert.deepEqual(f && [f.reason, f.rank], ['rank 1 was killed by SIGKILL (signal 9) without a Python exception; its last output: step 3', 1]);
    assert.match(f?.hint ?? '', /out-of-memory killer/);
  });

  it('blames a rank killed by a signal, not the rank that then lost its connection to it (torchrun\'s "root cause")', () => {
    const text = recorded('exc-sigkill-then-peer.txt');
    assert.match(text, /Root Cause \(first observed failure\):\n\[0\]:\n.*\n.*\n\s+rank\s+: 0/, 'the recorded summary blames rank 0');
    const f = failure(text);
    assert.deepEqual(f && [f.reason, f.rank], ['rank 1 was killed by SIGKILL (signal 9) without a Python exception; rank 0 then lost its connection to it (RuntimeError: [./gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:10899: Connection reset by peer)', 1]);
    assert.match(f?.hint ?? '', /out-of-memory killer/);
  });

  it('tells torchrun\'s own failure (no frame of the user\'s) from the script\'s', () => {
    const text = recorded('exc-launcher-tee3.txt');
    assert.deepEqual(scriptErrors(text), []);
    assert.equal(failure(text)?.reason, 'torchrun itself failed: AttributeError: \'NoneType\' object has no attribute \'get\' (in torch/distributed/elastic/multiprocessing/api.py:162)');
  });

  it('reads the [rankN]: prefix of PyTorch 2.x and a bare [N]: prefix', () => {
    const [oom] = parsePythonExceptions(recorded('oom-torch2.5-ranked.txt'));
    assert.deepEqual([oom.rank, oom.type, at(oom)], [0, 'torch.OutOfMemoryError', '/work/ddp_lm.py:140']);
    const bare = recorded('exc-shape-both-ranks.txt').replace(/^\[default(\d)\]:/gm, '[$1]:');
    assert.deepEqual(scriptErrors(bare).map((e) => [e.rank, at(e)]), [[0, '/tmp/proj/shape_both.py:14'], [1, '/tmp/proj/shape_both.py:14']]);
  });

  it('keeps CUDA errors with their explanation: the reason is the CUDA problem\'s, not a second exception', () => {
    const text = recorded('oom-torch1.13.txt');
    const f = failure(text);
    assert.match(f?.reason ?? '', /CUDA out of memory\. Tried to allocate 20\.00 MiB .* at \/home\/user\/project\/train\.py:71$/);
    assert.match(f?.hint ?? '', /ran out of memory/);
  });

  it('ends an exception whose rank printed nothing more at the end of the output', () => {
    const p = new PythonTracebackParser();
    for (const line of ['[default1]:Traceback (most recent call last):', '[default1]:  File "/w/t.py", line 3, in <module>', '[default1]:    f()', '[default1]:ValueError: bad']) assert.deepEqual(p.push(line), []);
    assert.deepEqual(p.end().map((e) => [e.type, e.message, e.rank, at(e)]), [['ValueError', 'bad', 1, '/w/t.py:3']]);
  });
});

describe('a failed torchrun job reports the script\'s exception (replayed torchrun output)', function () {
  this.timeout(30_000);

  /** A stand-in interpreter that prints a recorded torchrun output and exits as torchrun did. */
  function replay(fixture: string, code = 1): { python: string; dir: string } {
    const tmp = mkdtempSync(join(tmpdir(), 'torchrun-replay-'));
    const python = join(tmp, 'python');
    writeFileSync(python, `#!/bin/sh\ncat '${join(dir, fixture)}' >&2\nexit ${code}\n`);
    chmodSync(python, 0o755);
    return { python, dir: tmp };
  }

  it('job/failed names rank 1\'s shape error at the user\'s line, and each exception of the script is a problem event', async () => {
    const { python, dir: tmp } = replay('exc-shape-rank1-then-peer.txt');
    const events: JobEvent[] = [];
    const final = await runTorchrun({ file: join(tmp, 'x.job.json'), name: 'x', script: '/tmp/proj/shape_rank1.py', args: [], nprocPerNode: 2, python, cwd: tmp, env: {} }, (e) => events.push(e)).finished;
    assert.equal(final.type, 'job/failed');
    if (final.type !== 'job/failed') return;
    assert.equal(final.reason, 'RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x1568 and 392x10) at /tmp/proj/shape_rank1.py:11');
    assert.equal(final.rank, 1);
    assert.doesNotMatch(final.reason, /exitcode|error_file|To enable traceback/);
    const problems = events.flatMap((e) => (e.type === 'job/log' && e.problem ? [e.problem] : []));
    assert.deepEqual(problems.map((p) => [p.kind, p.rank, p.file, p.line]), [['exception', 1, '/tmp/proj/shape_rank1.py', 11], ['exception', 0, '/tmp/proj/shape_rank1.py', 16]]);
  });

  it('a Ctrl-C is no problem of the script', async () => {
    const { python, dir: tmp } = replay('exc-sigint.txt');
    const events: JobEvent[] = [];
    const final = await runTorchrun({ file: join(tmp, 'x.job.json'), name: 'x', script: '/tmp/proj/sleepy.py', args: [], nprocPerNode: 2, python, cwd: tmp, env: {} }, (e) => events.push(e)).finished;
    assert.equal(final.type === 'job/failed' && final.reason, 'torchrun was stopped by SIGINT (signal 2) and ended its workers; the script reported no error');
    assert.deepEqual(events.filter((e) => e.type === 'job/log' && e.problem), []);
  });
});

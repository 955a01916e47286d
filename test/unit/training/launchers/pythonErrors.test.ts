// Python exceptions of a torchrun job's output, on real torchrun output (test/fixtures/torchrun/exc-*.txt,
// recorded with python3-torch 1.13 and gloo: see exceptions/README.md), and the reason a failed job gives.
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CudaErrorParser, parseCudaErrors } from '../../../../src/training/launchers/cudaErrors';
import type { JobEvent } from '../../../../src/training/job/events';
import { exceptionProblem, isScriptError, parsePythonExceptions, PythonTracebackParser, type ScriptException } from '../../../../src/training/launchers/pythonErrors';
import { failureFromOutput, maxExceptions, runTorchrun } from '../../../../src/training/launchers/torchrun';
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

  it('finds rank 1\'s traceback behind a progress bar (recorded: the header follows the bar on its line), not rank 0\'s lost peer', () => {
    const text = recorded('exc-progress-bar.txt');
    assert.match(text, /^\[default1\]: 50%\|#### {4}\| 4\/8 \[00:04<00:04, 1\.0it\/s\]Traceback \(most recent call last\):$/m, 'the recorded header follows the bar');
    assert.deepEqual(scriptErrors(text).map((e) => [e.rank, e.type, at(e)]), [[1, 'RuntimeError', '/tmp/proj/progress_rank1.py:16'], [0, 'RuntimeError', '/tmp/proj/progress_rank1.py:17']]);
    const f = failure(text);
    assert.deepEqual(f && [f.reason, f.rank], ['RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x1568 and 392x10) at /tmp/proj/progress_rank1.py:16', 1]);
  });

  it('finds the header after the last \\r of a redrawn bar and after a rank prefix in the middle of the line, and under a doubled prefix', () => {
    const text = recorded('exc-shape-rank1-then-peer.txt');
    const header = '[default1]:Traceback (most recent call last):\n';
    assert.ok(text.includes(header));
    for (const bar of [
      '[default1]:\r  3%|▎ | 4/125 [00:01<00:30, 3.9it/s]\r  4%|▍ | 5/125 [00:01<00:30, 3.9it/s]Traceback (most recent call last):\n',
      '  0%|          | 0/1400 [00:00<?, ?it/s][default1]:Traceback (most recent call last):\n',
      '[rank1]: [rank1]: Traceback (most recent call last):\n',
    ]) {
      const f = failure(text.replace(header, bar));
      assert.deepEqual(f && [f.reason, f.rank], ['RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x1568 and 392x10) at /tmp/proj/shape_rank1.py:11', 1], JSON.stringify(bar));
    }
  });

  it('does not take a caught, printed exception for the failure: a rank\'s fatal exception is its last (recorded traceback.print_exc())', () => {
    const text = recorded('exc-handled-then-fail.txt');
    const [handled] = scriptErrors(text);
    assert.deepEqual([handled.rank, handled.type, handled.message], [0, 'ModuleNotFoundError', 'No module named \'apex\'']);
    const f = failure(text);
    assert.deepEqual(f && [f.reason, f.rank], ['RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x1568 and 392x10) at /tmp/proj/handled_then_fail.py:21', 1]);
  });

  it('ends a message at the first line that is not indented: the output after a caught exception is not its message, and it is complete at once', () => {
    const p = new PythonTracebackParser();
    for (const line of ['[default0]:Traceback (most recent call last):', '[default0]:  File "/w/t.py", line 3, in <module>', '[default0]:    import apex', '[default0]:ModuleNotFoundError: No module named \'apex\'']) assert.deepEqual(p.push(line), []);
    assert.deepEqual(p.push('[default0]:apex not found, using native AMP').map((e) => [e.type, e.message]), [['ModuleNotFoundError', 'No module named \'apex\'']]);
    assert.deepEqual([...p.push('[default0]:step 1 loss 2.30'), ...p.end()], []);
  });

  it('names a DataLoader worker\'s real exception at the data set\'s line, the loop\'s line as where it was re-raised (recorded)', () => {
    const text = recorded('exc-dataloader-worker.txt');
    const [first] = scriptErrors(text);
    assert.deepEqual([first.rank, first.type, first.message, at(first)], [1, 'ValueError', 'bad label 11 in row 40', '/tmp/proj/loader_dataset.py:13']);
    assert.deepEqual(first.chain, [{ relation: 'reraised', type: 'ValueError', message: 'Caught ValueError in DataLoader worker process 0.', file: '/tmp/proj/loader_worker.py', line: 9 }]);
    assert.equal(failure(text)?.reason, 'ValueError: bad label 11 in row 40 at /tmp/proj/loader_dataset.py:13');
    assert.match(exceptionProblem(first).explanation, /re-raised in the main process as ValueError: Caught ValueError in DataLoader worker process 0\. \(\/tmp\/proj\/loader_worker\.py:9\)/);
  });

  it('does not take a rank\'s library-only or ignored traceback for torchrun\'s own failure or the script\'s: the rank killed by SIGKILL stays the cause', () => {
    const text = recorded('exc-sigkill-rank1.txt');
    const at6 = text.indexOf('ERROR:torch.distributed');
    const ignored = [
      '[default0]:Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3c2c1b0e00>',
      '[default0]:Traceback (most recent call last):',
      '[default0]:  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1442, in __del__',
      '[default0]:    self._shutdown_workers()',
      '[default0]:AttributeError: \'_MultiProcessingDataLoaderIter\' object has no attribute \'_workers_status\'',
      '[default0]:Exception ignored in: <function Logger.__del__ at 0x7f3c2c1b0f00>',
      '[default0]:Traceback (most recent call last):',
      '[default0]:  File "/tmp/proj/killed.py", line 5, in __del__',
      '[default0]:OSError: [Errno 9] Bad file descriptor',
      '[default0]:Traceback (most recent call last):',
      '[default0]:  File "/usr/lib/python3/dist-packages/torch/utils/data/_utils/pin_memory.py", line 28, in _pin_memory_loop',
      '[default0]:RuntimeError: Pin memory thread exited unexpectedly',
      '',
    ].join('\n');
    const mixed = text.slice(0, at6) + ignored + text.slice(at6);
    assert.deepEqual(parsePythonExceptions(mixed).filter((e) => e.rank === 0).map((e) => [e.type, e.ignored ?? false]), [['AttributeError', true], ['OSError', true], ['RuntimeError', false]]);
    assert.deepEqual(scriptErrors(mixed), []);
    const f = failureFromOutput(parsePythonExceptions(mixed), [], mixed, new Map());
    assert.deepEqual(f && [f.reason, f.rank], ['rank 1 was killed by SIGKILL (signal 9) without a Python exception', 1]);
  });

  it('reads coloured tracebacks (Python 3.13, PYTHON_COLORS=1)', () => {
    const color = (t: string) => t.replace(/^(\[default\d\]: {2}File )"([^"]+)", line (\d+), in (.+)$/gm, '$1\x1b[35m"$2"\x1b[0m, line \x1b[35m$3\x1b[0m, in \x1b[35m$4\x1b[0m')
      .replace(/^(\[default\d\]:)RuntimeError: (.*)$/gm, '$1\x1b[1;35mRuntimeError\x1b[0m: \x1b[35m$2\x1b[0m');
    const text = color(recorded('exc-shape-rank1-then-peer.txt'));
    assert.ok(text.includes('\x1b[1;35mRuntimeError\x1b[0m: \x1b[35mmat1 and mat2'));
    assert.deepEqual(failure(text)?.reason, 'RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x1568 and 392x10) at /tmp/proj/shape_rank1.py:11');
  });

  it('reads the top level of an ExceptionGroup (Python 3.11\'s "  + Exception Group Traceback", recorded)', () => {
    const text = recorded('exc-group.txt');
    assert.deepEqual(scriptErrors(text).map((e) => [e.rank, e.type, e.message, at(e)]), [[1, 'ExceptionGroup', 'batch 3 failed 2 checks (2 sub-exceptions)', '/tmp/proj/group.py:8'], [0, 'ExceptionGroup', 'batch 3 failed 2 checks (2 sub-exceptions)', '/tmp/proj/group.py:8']]);
    assert.deepEqual(failure(text)?.reason, 'ExceptionGroup: batch 3 failed 2 checks (2 sub-exceptions) at /tmp/proj/group.py:8');
  });

  it('places a CUDA error where its exception is: the same frames, also for a coloured traceback behind a progress bar', () => {
    const plainText = recorded('oom-torch1.13.txt');
    const odd = plainText.replace(/^/gm, '[rank1]: ').replace('[rank1]: Traceback (most recent call last):', '[rank1]: \r 12%|#  | 3/25\r 16%|## | 4/25 [00:04<00:22]Traceback (most recent call last):')
      .replace(/^(\[rank1\]: {3}File )"([^"]+)", line (\d+)/gm, '$1\x1b[35m"$2"\x1b[0m, line \x1b[35m$3\x1b[0m');
    assert.ok(odd.includes('[rank1]:   File \x1b[35m"/home/user/project/train.py"\x1b[0m, line \x1b[35m71'));
    for (const text of [plainText, odd]) {
      const parser = new CudaErrorParser();
      const exceptions = text.split('\n').flatMap((l) => parser.pushLine(l).exceptions);
      const [oom] = parser.problems();
      const [ex] = [...exceptions, ...parser.tracebacks.end()].filter((e) => /OutOfMemoryError/.test(e.type));
      assert.deepEqual([oom.file, oom.line], ['/home/user/project/train.py', 71]);
      assert.deepEqual([ex.userFrame?.file, ex.userFrame?.line], [oom.file, oom.line]);
    }
  });

  it('ends an exception whose rank printed nothing more at the end of the output', () => {
    const p = new PythonTracebackParser();
    for (const line of ['[default1]:Traceback (most recent call last):', '[default1]:  File "/w/t.py", line 3, in <module>', '[default1]:    f()', '[default1]:ValueError: bad']) assert.deepEqual(p.push(line), []);
    assert.deepEqual(p.end().map((e) => [e.type, e.message, e.rank, at(e)]), [['ValueError', 'bad', 1, '/w/t.py:3']]);
  });
});

describe('a failed torchrun job reports the script\'s exception (replayed torchrun output)', function () {
  this.timeout(30_000);

  const made: string[] = [];
  after(() => made.forEach((d) => rmSync(d, { recursive: true, force: true })));

  /** A stand-in interpreter that prints a recorded torchrun output (or `text`) and exits as torchrun did. */
  function replay(fixture: string, code = 1, text?: string): { python: string; dir: string } {
    const tmp = mkdtempSync(join(tmpdir(), 'torchrun-replay-'));
    made.push(tmp);
    const python = join(tmp, 'python');
    const source = text === undefined ? join(dir, fixture) : join(tmp, 'output.txt');
    if (text !== undefined) writeFileSync(source, text);
    writeFileSync(python, `#!/bin/sh\ncat '${source}' >&2\nexit ${code}\n`);
    chmodSync(python, 0o755);
    return { python, dir: tmp };
  }

  it('keeps the first distinct exceptions as problems and counts the rest, and still fails with the rank\'s last (fatal) one', async () => {
    const caught = (i: number) => ['Traceback (most recent call last):', '  File "/w/t.py", line 7, in <module>', '    load(i)', `KeyError: 'feature_${i}'`, `step ${i}`];
    const lines = [...Array.from({ length: maxExceptions + 50 }, (_, i) => caught(i)).flat(), ...Array.from({ length: 30 }, () => caught(0)).flat(),
      'Traceback (most recent call last):', '  File "/w/t.py", line 12, in <module>', '    train()', 'ValueError: loss is nan'];
    const text = `${lines.map((l) => `[default0]:${l}`).join('\n')}\n`;
    const { python, dir: tmp } = replay('', 1, text);
    const events: JobEvent[] = [];
    const final = await runTorchrun({ file: join(tmp, 'x.job.json'), name: 'x', script: '/w/t.py', args: [], nprocPerNode: 1, python, cwd: tmp, env: {} }, (e) => events.push(e)).finished;
    assert.deepEqual(final.type === 'job/failed' && [final.reason, final.rank], ['ValueError: loss is nan at /w/t.py:12', 0]);
    assert.equal(events.filter((e) => e.type === 'job/log' && e.problem).length, maxExceptions);
    assert.ok(events.some((e) => e.type === 'job/log' && e.message === `torchrun: the output had 81 more exception tracebacks: 30 repeated one already listed, 51 came after the first ${maxExceptions} distinct ones and are not problems`));
  });

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

  it('runs torchrun with PYTHON_COLORS=0, so that Python 3.13 prints no colour codes into the tracebacks', async () => {
    const { python, dir: tmp } = replay('', 0, '');
    writeFileSync(python, '#!/bin/sh\necho "[default0]:PYTHON_COLORS=$PYTHON_COLORS"\n');
    const events: JobEvent[] = [];
    const before = process.env.PYTHON_COLORS;
    process.env.PYTHON_COLORS = '1';
    try {
      await runTorchrun({ file: join(tmp, 'x.job.json'), name: 'x', script: '/w/t.py', args: [], nprocPerNode: 1, python, cwd: tmp, env: {} }, (e) => events.push(e)).finished;
    } finally {
      if (before === undefined) delete process.env.PYTHON_COLORS;
      else process.env.PYTHON_COLORS = before;
    }
    assert.ok(events.some((e) => e.type === 'job/log' && e.message === '[default0]:PYTHON_COLORS=0'));
  });

  it('a Ctrl-C is no problem of the script', async () => {
    const { python, dir: tmp } = replay('exc-sigint.txt');
    const events: JobEvent[] = [];
    const final = await runTorchrun({ file: join(tmp, 'x.job.json'), name: 'x', script: '/tmp/proj/sleepy.py', args: [], nprocPerNode: 2, python, cwd: tmp, env: {} }, (e) => events.push(e)).finished;
    assert.equal(final.type === 'job/failed' && final.reason, 'torchrun was stopped by SIGINT (signal 2) and ended its workers; the script reported no error');
    assert.deepEqual(events.filter((e) => e.type === 'job/log' && e.problem), []);
  });
});

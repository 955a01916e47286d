import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JobEvent } from '../../../../src/training/job/events';
import { loadTorchrunJob, runTorchrun } from '../../../../src/training/launchers/torchrun';
import { chooseInterpreter, jobPythonField, terminalText, torchrunEndMessage, torchrunRefusal, untrustedTorchrunMessage, withInterpreterHint, type InterpreterChoice } from '../../../../src/views/torchrun/torchrunFormat';

type Final = Extract<JobEvent, { type: 'job/done' | 'job/failed' }>;

/** What the extension answers, and whether it was asked (asking may activate the Python extension). */
function extension(answer: string | undefined) {
  const asked = { count: 0 };
  return { asked, ask: () => { asked.count++; return Promise.resolve(answer); } };
}

describe('the interpreter of a torchrun job in the editor', () => {
  it('is the job\'s own "python" first, over the setting and the Python extension\'s selection (not asked)', async () => {
    const ext = extension('/home/u/.venv/bin/python');
    assert.deepEqual(await chooseInterpreter({ job: '/usr/bin/python3', setting: '/opt/py/bin/python', extension: ext.ask }), { python: '/usr/bin/python3', source: 'job' });
    assert.equal(ext.asked.count, 0);
  });

  it('is the setting gpuWorkbench.training.python when the job names none, then the Python extension\'s, then python3', async () => {
    const ext = extension('/home/u/.venv/bin/python');
    assert.deepEqual(await chooseInterpreter({ setting: ' /opt/py/bin/python ', extension: ext.ask }), { python: '/opt/py/bin/python', source: 'setting' });
    assert.equal(ext.asked.count, 0);
    assert.deepEqual(await chooseInterpreter({ setting: '', extension: ext.ask }), { python: '/home/u/.venv/bin/python', source: 'python-extension' });
    assert.deepEqual(await chooseInterpreter({ job: '  ', setting: '  ', extension: extension(undefined).ask }), { python: 'python3', source: 'default' });
  });

  it('reads the job file\'s "python" only when it is a non-empty string', () => {
    assert.equal(jobPythonField('{"kind": "torchrun", "script": "t.py", "python": "/usr/bin/python3"}'), '/usr/bin/python3');
    assert.equal(jobPythonField('{"kind": "torchrun", "script": "t.py"}'), undefined);
    assert.equal(jobPythonField('\uFEFF{"kind": "torchrun", "script": "t.py", "python": "/opt/py"}'), '/opt/py', 'a file saved with a byte order mark');
    assert.equal(jobPythonField('{"python": ""}'), undefined);
    assert.equal(jobPythonField('{"python": 3}'), undefined);
    assert.equal(jobPythonField('{not json'), undefined);
    assert.equal(jobPythonField('null'), undefined);
  });

  describe('when it cannot run or has no torch', () => {
    let dir: string;
    before(() => {
      dir = mkdtempSync(join(tmpdir(), 'gw-interp-'));
      writeFileSync(join(dir, 'train.py'), 'print("hello")\n');
      writeFileSync(join(dir, 'train.job.json'), JSON.stringify({ kind: 'torchrun', script: 'train.py' }));
      // An interpreter without torch, as Python 3.11 answers `-m torch.distributed.run` (recorded).
      writeFileSync(join(dir, 'python3'), `#!/bin/sh\necho "$0: Error while finding module specification for 'torch.distributed.run' (ModuleNotFoundError: No module named 'torch')" >&2\nexit 1\n`);
      chmodSync(join(dir, 'python3'), 0o755);
    });
    after(() => rmSync(dir, { recursive: true, force: true }));

    const run = (python: string) => runTorchrun(loadTorchrunJob(join(dir, 'train.job.json'), {}, python), () => undefined).finished;

    it('says the interpreter has no torch, where it came from, and what to set in the editor (not --python)', async () => {
      const python = join(dir, 'python3');
      const final = await run(python);
      assert.equal(final.type === 'job/failed' && final.reason, `${python} has no torch module (No module named torch)`);
      const choice: InterpreterChoice = { python, source: 'python-extension' };
      const shown = withInterpreterHint(final, choice);
      assert.equal(shown.type === 'job/failed' && shown.hint, `The interpreter ${python} (from the Python extension's selected interpreter) has no torch: set "python" in the job or gpuWorkbench.training.python to an interpreter that has PyTorch, or select another one (Python: Select Interpreter) (on Debian, python3-torch belongs to /usr/bin/python3).`);
      const message = torchrunEndMessage('train', shown, []);
      assert.match(message, /from the Python extension's selected interpreter\) has no torch: set "python" in the job/);
      assert.doesNotMatch(message, /--python/);
      assert.match(terminalText(shown) ?? '', /has no torch: set "python" in the job/);
    });

    it('says a program that cannot run came from the setting, and that the job\'s "python" or the setting changes it', async () => {
      const final = await run('/nonexistent/python3');
      const shown = withInterpreterHint(final, { python: '/nonexistent/python3', source: 'setting' });
      assert.equal(shown.type === 'job/failed' && shown.reason, 'cannot run /nonexistent/python3: no such program');
      assert.match(shown.type === 'job/failed' ? shown.hint ?? '' : '', /^The interpreter \/nonexistent\/python3 \(from the setting gpuWorkbench\.training\.python\) cannot be run: set "python" in the job, or change gpuWorkbench\.training\.python/);
      const fromJob = withInterpreterHint(final, { python: '/nonexistent/python3', source: 'job' });
      assert.match(fromJob.type === 'job/failed' ? fromJob.hint ?? '' : '', /\(from the job's "python"\) cannot be run: set "python" in the job to an interpreter that has PyTorch/);
    });

    it('leaves other endings as the engine made them', () => {
      const choice: InterpreterChoice = { python: '/usr/bin/python3', source: 'default' };
      const oom: Final = { type: 'job/failed', reason: 'CUDA out of memory', hint: 'smaller batch' };
      const stopped: Final = { type: 'job/failed', reason: 'cancelled', cancelled: true };
      assert.equal(withInterpreterHint(oom, choice), oom);
      assert.equal(withInterpreterHint(stopped, choice), stopped);
    });
  });
});

describe('starting a torchrun task', () => {
  it('refuses while another job runs, naming it: a job in the training host or another torchrun task', () => {
    assert.equal(torchrunRefusal({ trusted: true, running: 'mnist-ddp' }), 'Training mnist-ddp is still running: stop it first (GPU Workbench: Stop Training), then run this task again.');
  });

  it('refuses in an untrusted workspace, and starts when trusted and nothing runs', () => {
    assert.equal(torchrunRefusal({ trusted: false }), untrustedTorchrunMessage);
    assert.equal(torchrunRefusal({ trusted: true }), undefined);
  });
});

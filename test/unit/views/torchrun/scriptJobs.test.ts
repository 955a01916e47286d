// "Run with torchrun…" and "Create Tune Spec for Script…" on a PyTorch script (issue 17 item 4):
// the job file and the tune spec they write, and the interpreter pick.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Check } from '../../../../src/doctor/report';
import type { JobEvent } from '../../../../src/training/job/events';
import { runJob } from '../../../../src/training/launchers/coordinator';
import { loadTorchrunJob, torchrunCommand } from '../../../../src/training/launchers/torchrun';
import { substitute } from '../../../../src/tuning/experiment';
import { parseSpec } from '../../../../src/tuning/spec';
import { interpreterItems, torchrunJobPath, torchrunJobText, tuneSpecPath, tuneSpecText } from '../../../../src/views/torchrun/scriptJobs';
import { fixtures } from '../../../paths';

const torchPython = '/usr/bin/python3';
const probe = spawnSync(torchPython, ['-c', 'import torch, torch.distributed; print(torch.distributed.is_gloo_available())'], { encoding: 'utf8', timeout: 60_000 });
const torchMissing = probe.status !== 0 || !probe.stdout.includes('True') ? `${torchPython} has no torch with gloo: apt-get install -y python3-torch` : undefined;

/** A folder with the script, as the user has it. */
function project(script = 'train.py'): { dir: string; script: string } {
  const dir = mkdtempSync(join(tmpdir(), 'gw-script-job-'));
  copyFileSync(join(fixtures, 'torchrun', 'allreduce_gloo.py'), join(dir, script));
  return { dir, script: join(dir, script) };
}

describe('Run with torchrun…: the job file written next to the script', function () {
  this.timeout(120_000);

  it('goes next to the script, named after it (train.py → train.job.json); the tune spec too', () => {
    assert.equal(torchrunJobPath('/w/src/train.py'), '/w/src/train.job.json');
    assert.equal(torchrunJobPath('/w/My Model.PY'), '/w/My Model.job.json');
    assert.equal(tuneSpecPath('/w/src/train.py'), '/w/src/train.tune.json');
  });

  it('runs the script on N CPU processes with the picked interpreter: nprocPerNode, python, script and args as torchrun gets them', () => {
    const { dir, script } = project();
    const file = torchrunJobPath(script);
    writeFileSync(file, torchrunJobText({ script, processes: 2, python: '/opt/torch/bin/python', args: ['--epochs', '1'] }));
    const spec = loadTorchrunJob(file);
    assert.equal(spec.name, 'train');
    assert.equal(spec.nprocPerNode, 2);
    assert.equal(spec.devices, undefined, 'CPU processes set no CUDA_VISIBLE_DEVICES');
    assert.equal(spec.python, '/opt/torch/bin/python');
    assert.equal(spec.script, script);
    assert.deepEqual(spec.args, ['--epochs', '1']);
    assert.equal(spec.cwd, dir);
    const command = torchrunCommand(spec);
    assert.equal(command[0], '/opt/torch/bin/python');
    assert.deepEqual(command.slice(command.indexOf('--nproc_per_node'), command.indexOf('--nproc_per_node') + 2), ['--nproc_per_node', '2']);
    assert.deepEqual(command.slice(-3), [script, '--epochs', '1']);
  });

  it('runs one process per picked GPU: devices [0, 2] give nproc 2 and those devices', () => {
    const { script } = project();
    const file = torchrunJobPath(script);
    writeFileSync(file, torchrunJobText({ script, processes: [0, 2], python: '/usr/bin/python3' }));
    const spec = loadTorchrunJob(file);
    assert.equal(spec.nprocPerNode, 2);
    assert.deepEqual(spec.devices, [0, 2]);
    assert.deepEqual(JSON.parse(torchrunJobText({ script, processes: [1], python: 'python3' })), { name: 'train', kind: 'torchrun', script: 'train.py', args: [], devices: [1], python: 'python3' });
  });

  it('refuses no processes with a clear error', () => {
    assert.throws(() => torchrunJobText({ script: '/w/t.py', processes: 0, python: 'python3' }), /processes must be a whole number of at least 1, got 0/);
    assert.throws(() => torchrunJobText({ script: '/w/t.py', processes: [], python: 'python3' }), /no GPU given/);
  });

  it('is a working job: torchrun runs the script on 2 CPU processes with /usr/bin/python3', async function () {
    if (torchMissing) this.skip();
    const { script } = project();
    const file = torchrunJobPath(script);
    writeFileSync(file, torchrunJobText({ script, processes: 2, python: torchPython }));
    const events: JobEvent[] = [];
    const final = await runJob({ file, onEvent: (e) => events.push(e) }).finished;
    const logs = events.flatMap((e) => (e.type === 'job/log' ? [e.message] : []));
    assert.equal(final.type, 'job/done', `${JSON.stringify(final)}\n${logs.join('\n')}`);
    assert.ok(logs.some((l) => /rank 1 of 2 \(LOCAL_RANK=1\): sum 3/.test(l)), logs.join('\n'));
  });
});

describe('Create Tune Spec for Script…: the spec written next to the script', () => {
  it('is a valid spec whose trials run the script with the config as --lr and --batch-size, in its folder', () => {
    const { dir, script } = project('model.py');
    const file = tuneSpecPath(script);
    const spec = parseSpec(JSON.parse(tuneSpecText(script, '/usr/bin/python3')) as unknown, file);
    assert.equal(spec.name, 'model');
    assert.equal(spec.metric, 'loss');
    assert.equal(spec.trial.kind, 'command');
    if (spec.trial.kind !== 'command') return;
    assert.equal(spec.trial.cwd, dir);
    assert.deepEqual(spec.trial.command.map((a) => substitute(a, { lr: 0.003, batch_size: 64 })), ['/usr/bin/python3', 'model.py', '--lr', '0.003', '--batch-size', '64']);
    assert.deepEqual(spec.space.variedPaths(), [['lr'], ['batch_size']]);
  });
});

describe('Run with torchrun…: the interpreter pick', () => {
  const check = (python: string, status: Check['status'], summary: string): Check => ({ id: `python:${python}`, title: `Python ${python}`, status, summary, evidence: [] });

  it('lists the Pythons with torch first, says what each torch is, and where the chosen one came from', () => {
    const items = interpreterItems({ python: 'python3', source: 'default' }, ['python3', '/usr/bin/python3', '/usr/bin/python'], [
      check('python3', 'info', 'Python 3.13.1, no torch (ModuleNotFoundError: No module named \'torch\')'),
      check('/usr/bin/python3', 'ok', 'Python 3.11.2, torch 1.13.1, CPU only (no GPU here)'),
      // /usr/bin/python is the same interpreter as /usr/bin/python3: the doctor reports it once.
    ]);
    assert.deepEqual(items.map((i) => [i.label, i.hasTorch]), [['/usr/bin/python3', true], ['python3', false]]);
    assert.equal(items[0].description, 'Python 3.11.2, torch 1.13.1, CPU only (no GPU here)');
    assert.match(items[1].description, /no torch .*: cannot run torchrun$/);
    assert.match(items[1].detail ?? '', /^python3 \(the default: /);
    assert.equal(items[0].detail, undefined);
  });

  it('keeps the chosen interpreter first among those with torch (the setting\'s over PATH\'s)', () => {
    const items = interpreterItems({ python: '/opt/venv/bin/python', source: 'setting' }, ['/usr/bin/python3'], [
      check('/usr/bin/python3', 'ok', 'torch 1.13.1'),
      check('/opt/venv/bin/python', 'warn', 'torch 2.5.1, torch.cuda.is_available() False'),
    ]);
    assert.deepEqual(items.map((i) => i.python), ['/opt/venv/bin/python', '/usr/bin/python3']);
    assert.match(items[0].detail ?? '', /from the setting gpuWorkbench\.training\.python/);
  });
});

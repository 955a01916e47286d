import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatBatchEvent, parseTrainArgs } from '../../../../src/cli/train';
import { parseCompanionLine } from '../../../../src/common/companionProtocol';
import { JobFileError } from '../../../../src/training/job/spec';
import { NotSearchableError, type FindBatchSizeEvent, type FindBatchSizeResult } from '../../../../src/training/launchers/findBatchSize';
import { findJobBatchSize } from '../../../../src/training/launchers/torchrunBatchSize';
import { loadTorchrunJob } from '../../../../src/training/launchers/torchrun';
import { batchSizeEdit, BatchSizeEditError, withBatchSize } from '../../../../src/training/launchers/torchrunBatchArg';
import { searchMessage } from '../../../../src/views/batchSize/batchSizeSearch';
import { fixtures, repoRoot } from '../../../paths';

/** Debian's python3-torch belongs to /usr/bin/python3 (the same probe as torchrun.test.ts). */
const torchPython = '/usr/bin/python3';
const probe = spawnSync(torchPython, ['-c', 'import torch, torch.distributed; print(torch.__version__, torch.distributed.is_gloo_available())'], { encoding: 'utf8', timeout: 60_000 });
const torchMissing = probe.error ? `${torchPython} cannot be run (${(probe.error as NodeJS.ErrnoException).code})` : probe.status !== 0 ? `${torchPython} has no torch: apt-get install -y python3-torch` : !probe.stdout.includes('True') ? `torch ${probe.stdout.trim()} has no gloo backend` : undefined;

const cli = join(repoRoot, 'out', 'src', 'cli.js');
const MiB = 2 ** 20;

function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'gw-torchrun-batch-'));
}

function jobIn(dir: string, job: object, name = 'job.job.json'): string {
  const file = join(dir, name);
  writeFileSync(file, JSON.stringify(job, null, 2));
  return file;
}

function loadError(job: object): string {
  const dir = tempDir();
  try {
    loadTorchrunJob(jobIn(dir, job));
  } catch (err) {
    assert.ok(err instanceof JobFileError, String(err));
    return err.message;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  assert.fail('the job loaded');
}

describe('torchrun jobs: how the script takes its batch size ("batchSize")', () => {
  const base = { kind: 'torchrun', script: 'train.py' };

  it('reads the current value from args (--bs N and --bs=N) or env, and none where the job sets none', () => {
    const dir = tempDir();
    try {
      const load = (job: object) => loadTorchrunJob(jobIn(dir, { ...base, ...job })).batchSize;
      assert.deepEqual(load({ args: ['--epochs', '2', '--batch-size', '64'], batchSize: { arg: '--batch-size' } }), { arg: '--batch-size', current: 64 });
      assert.deepEqual(load({ args: ['--batch-size=48'], batchSize: { arg: '--batch-size' } }), { arg: '--batch-size', current: 48 });
      assert.deepEqual(load({ args: ['--batch-sizes', '3'], batchSize: { arg: '--batch-size' } }), { arg: '--batch-size' });
      assert.deepEqual(load({ env: { BATCH_SIZE: '32' }, batchSize: { env: 'BATCH_SIZE' } }), { env: 'BATCH_SIZE', current: 32 });
      assert.deepEqual(load({ batchSize: { env: 'BATCH_SIZE' } }), { env: 'BATCH_SIZE' });
      assert.equal(load({}), undefined);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('names the field of a bad setting or a bad current value', () => {
    assert.match(loadError({ ...base, args: ['--batch-size', 'big'], batchSize: { arg: '--batch-size' } }), /job\.job\.json: \/args\/1 must be a whole number of at least 1, the batch size for --batch-size \(the job's "batchSize": \{"arg": "--batch-size"\}\), got "big"/);
    assert.match(loadError({ ...base, args: ['--batch-size=0'], batchSize: { arg: '--batch-size' } }), /\/args\/0 must be a whole number of at least 1, .* got "--batch-size=0"/);
    assert.match(loadError({ ...base, args: ['--lr', '0.1', '--batch-size'], batchSize: { arg: '--batch-size' } }), /\/args ends with --batch-size without a value after it/);
    assert.match(loadError({ ...base, args: ['--batch-size', '8', '--batch-size', '16'], batchSize: { arg: '--batch-size' } }), /\/args sets --batch-size 2 times \(at 1, 3\)/);
    assert.match(loadError({ ...base, env: { BATCH_SIZE: '-4' }, batchSize: { env: 'BATCH_SIZE' } }), /\/env\/BATCH_SIZE must be a whole number of at least 1, the batch size \(the job's "batchSize": \{"env": "BATCH_SIZE"\}\), got "-4"/);
    assert.match(loadError({ ...base, batchSize: { arg: 'batch-size' } }), /\/batchSize\/arg must be an option of the script starting with "-"/);
    assert.match(loadError({ ...base, batchSize: { env: 'BATCH SIZE' } }), /\/batchSize\/env must be an environment variable name/);
    assert.match(loadError({ ...base, batchSize: { arg: '--bs', env: 'BS' } }), /\/batchSize must be an object with exactly one of "arg", "env"/);
    assert.match(loadError({ ...base, batchSize: 64 }), /\/batchSize must be an object/);
    assert.match(loadError({ ...base, batchSize: { flag: '--bs' } }), /\/batchSize has an unknown field "flag" \(expected one of "arg", "env"\)/);
  });

  it('the companion\'s stopped and oom messages are validated, naming what is wrong', () => {
    const id = { v: 1, rank: 1, localRank: 1, worldSize: 2 };
    assert.deepEqual(parseCompanionLine(JSON.stringify({ ...id, type: 'stopped', step: 2, maxSteps: 2 })), { ok: true, message: { type: 'stopped', rank: 1, localRank: 1, worldSize: 2, step: 2, maxSteps: 2 } });
    assert.deepEqual(parseCompanionLine(JSON.stringify({ ...id, type: 'oom', device: 'cpu', error: 'RuntimeError', message: 'DefaultCPUAllocator: can\'t allocate memory', batchSize: 64 })), { ok: true, message: { type: 'oom', rank: 1, localRank: 1, worldSize: 2, device: 'cpu', error: 'RuntimeError', message: 'DefaultCPUAllocator: can\'t allocate memory', batchSize: 64 } });
    assert.deepEqual(parseCompanionLine(JSON.stringify({ ...id, type: 'oom', device: 'tpu', error: 'E', message: '' })), { ok: false, error: 'oom message: device must be cuda or cpu, got "tpu"' });
    assert.deepEqual(parseCompanionLine(JSON.stringify({ ...id, type: 'oom', device: 'cuda', error: 'E', message: 'm', batchSize: 0 })), { ok: false, error: 'oom message: batchSize must be a whole number of at least 1' });
    assert.deepEqual(parseCompanionLine(JSON.stringify({ ...id, type: 'stopped', step: 2 })), { ok: false, error: 'stopped message: step and maxSteps must be whole numbers (maxSteps at least 1)' });
  });

  it('the CLI takes --memory-limit MiB with --find-batch-size only', () => {
    const o = parseTrainArgs(['j.job.json', '--find-batch-size', '--memory-limit', '512']);
    assert.ok(o !== 'help');
    assert.deepEqual(o.findBatchSize, { memoryLimitMiB: 512 });
    assert.throws(() => parseTrainArgs(['j.job.json', '--memory-limit', '512']), /--memory-limit only applies with --find-batch-size/);
    assert.throws(() => parseTrainArgs(['j.job.json', '--find-batch-size', '--memory-limit', '1g']), /--memory-limit expects a whole number of MiB \(0 for no limit\), got '1g'/);
  });

  it('sets a trial\'s value where the job sets it, else adds it', () => {
    assert.deepEqual(withBatchSize({ arg: '--bs' }, ['--bs', '8', '--lr', '1'], {}, 32).args, ['--bs', '32', '--lr', '1']);
    assert.deepEqual(withBatchSize({ arg: '--bs' }, ['--bs=8'], {}, 32).args, ['--bs=32']);
    assert.deepEqual(withBatchSize({ arg: '--bs' }, ['--lr', '1'], {}, 32).args, ['--lr', '1', '--bs', '32']);
    assert.deepEqual(withBatchSize({ env: 'BS' }, ['--lr', '1'], { A: 'b', BS: '4' }, 32), { args: ['--lr', '1'], env: { A: 'b', BS: '32' } });
  });

  it('writes the result into the job file\'s text where the setting says, keeping its comments and layout', () => {
    const text = '{\n  // my job\n  "kind": "torchrun",\n  "script": "t.py",\n  "args": ["--bs", "8", "--lr", "0.1"],\n  "batchSize": { "arg": "--bs" }\n}\n';
    const edited = batchSizeEdit(text, 24);
    assert.equal(edited.text, text.replace('"--bs", "8"', '"--bs", "24"'));
    assert.equal(edited.setting, '--bs 24');
    assert.deepEqual(edited.edit, { offset: text.indexOf('"8"') + 1, length: 1, content: '24' });
    assert.equal(batchSizeEdit(text, 8).edit, null, 'the file has that value already');
    const joined = batchSizeEdit('{"kind": "torchrun", "script": "t.py", "args": ["--bs=8"], "batchSize": {"arg": "--bs"}}', 24).text;
    assert.deepEqual((JSON.parse(joined) as { args: string[] }).args, ['--bs=24']);
    const appended = JSON.parse(batchSizeEdit('{"kind": "torchrun", "script": "t.py", "args": ["--lr", "1"], "batchSize": {"arg": "--bs"}}', 24).text) as { args: string[] };
    assert.deepEqual(appended.args, ['--lr', '1', '--bs', '24']);
    const noArgs = JSON.parse(batchSizeEdit('{"kind": "torchrun", "script": "t.py", "batchSize": {"arg": "--bs"}}', 24).text) as { args: string[] };
    assert.deepEqual(noArgs.args, ['--bs', '24']);
    const env = JSON.parse(batchSizeEdit('{"kind": "torchrun", "script": "t.py", "env": {"A": "1"}, "batchSize": {"env": "BS"}}', 24).text) as { env: Record<string, string> };
    assert.deepEqual(env.env, { A: '1', BS: '24' });
    assert.throws(() => batchSizeEdit('{"kind": "torchrun", "script": "t.py"}', 24, 'x.job.json'), (e: unknown) => e instanceof BatchSizeEditError && /x\.job\.json: has no "batchSize" setting/.test(e.message));
  });
});

describe('Find Max Batch Size for a torchrun job (real torchrun, /usr/bin/python3, CPU)', function () {
  this.timeout(600_000);
  before(function () {
    if (torchMissing) {
      console.warn(`  skipped: ${torchMissing}`);
      this.skip();
    }
  });

  it('a job without a batch size setting gets a clear message, and no trial runs', () => {
    const dir = tempDir();
    try {
      const file = jobIn(dir, { kind: 'torchrun', script: 'nowhere.py', args: ['--batch-size', '8'], python: torchPython }, 'plain.job.json');
      assert.throws(() => findJobBatchSize({ file }), (e: unknown) => e instanceof NotSearchableError && e.message === 'plain.job.json does not say how its script takes its batch size, so Find Max Batch Size cannot try one: add "batchSize": {"arg": "--batch-size"} (the script\'s option, its value in "args") or "batchSize": {"env": "BATCH_SIZE"} (an environment variable, its value in "env") to the job.');
      const r = spawnSync(process.execPath, [cli, 'train', file, '--find-batch-size', '--json'], { encoding: 'utf8', timeout: 60_000 });
      assert.equal(r.status, 1, r.stderr);
      const failed = JSON.parse(r.stdout) as { type: string; reason: string };
      assert.deepEqual(Object.keys(failed), ['type', 'reason'], 'a correct file: no hint to fix the schema');
      assert.match(failed.reason, /^plain\.job\.json does not say how its script takes its batch size/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  async function searchErrors(script: string): Promise<{ result: FindBatchSizeResult; trials: FindBatchSizeEvent[] }> {
    const dir = tempDir();
    try {
      writeFileSync(join(dir, 'train.py'), script);
      const file = jobIn(dir, { kind: 'torchrun', script: 'train.py', args: ['--batch-size', '8'], python: torchPython, batchSize: { arg: '--batch-size' } });
      const trials: FindBatchSizeEvent[] = [];
      const result = await findJobBatchSize({ file, memoryLimitMiB: 0, onEvent: (e) => { if (e.type === 'batch/trial') trials.push(e); } }).finished;
      return { result, trials };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  it('a script with a syntax error stops the search at its first trial, and the message shows that error', async () => {
    const { result, trials } = await searchErrors('import sys\nprint("hello"\nx = 1\n');
    assert.equal(trials.length, 1);
    const d = result.devices[0];
    assert.equal(d.limit, 'error');
    assert.match(d.error!.reason, /SyntaxError/);
    assert.equal(result.suggestedBatchSize, undefined);
    const m = searchMessage({ result, code: 1, signal: null, stderr: '' });
    assert.equal(m.error, true);
    assert.match(m.text, /^Find Max Batch Size for job stopped: a trial failed for another reason than memory: .*SyntaxError/);
    assert.equal(m.offer, undefined);
  });

  it('another exception stops the search and is shown as it is, at the script\'s line', async () => {
    const script = 'import torch\nw = torch.zeros(3, 2, requires_grad=True)\nopt = torch.optim.SGD([w], lr=0.1)\nx = torch.ones(8, 4)\n(x @ w).sum().backward()\n';
    const { result, trials } = await searchErrors(script);
    assert.equal(trials.length, 1);
    const d = result.devices[0];
    assert.equal(d.limit, 'error');
    assert.match(d.error!.reason, /^RuntimeError: mat1 and mat2 shapes cannot be multiplied \(8x4 and 3x2\) at .*train\.py:5/);
    assert.match(formatBatchEvent({ type: 'batch/done', result }), /^the search stopped on .*: RuntimeError: mat1 and mat2 shapes cannot be multiplied/);
  });

  it('searches the largest batch that fits under a memory limit, each trial a 2-process torchrun run of 2 steps, and the result goes into the job\'s args', async () => {
    const dir = tempDir();
    try {
      for (const f of ['grow.py', 'grow.job.json']) copyFileSync(join(fixtures, 'torchrun', 'batchsize', f), join(dir, f));
      const file = join(dir, 'grow.job.json');
      const limitMiB = 700;
      const out = await new Promise<{ code: number | null; stdout: string; stderr: string }>((done) => {
        const child = spawn(process.execPath, [cli, 'train', file, '--find-batch-size', '--memory-limit', String(limitMiB), '--json'], { stdio: ['ignore', 'pipe', 'pipe'] });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
        child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
        child.on('close', (code) => done({ code, stdout, stderr }));
      });
      assert.equal(out.code, 0, out.stdout + out.stderr);
      const events = out.stdout.trim().split('\n').map((l) => JSON.parse(l) as FindBatchSizeEvent);
      const done = events.at(-1)!;
      if (done.type !== 'batch/done') assert.fail(`the search ended with ${JSON.stringify(done)}`);
      const r = done.result;
      const d = r.devices[0];
      const found = r.perDevice;
      // By hand: each example takes 16 MiB (one float32 tensor of 4 Mi values per example) on top of
      // what torch, gloo and the script hold before it, between 250 and 500 MiB of data per process
      // (282 MB measured after import torch): under 700 MiB, from (700-500)/16 = 12 to (700-250)/16 = 28.
      assert.ok(found >= 12 && found <= 28, `found ${found}`);
      assert.equal(d.limit, 'memory');
      // The largest that fits: it fit, and one more ran out of memory (the trials prove both).
      const trials = events.filter((e): e is Extract<FindBatchSizeEvent, { type: 'batch/trial' }> => e.type === 'batch/trial');
      assert.deepEqual(trials.find((t) => t.batchSize === found)?.outcome, { kind: 'fits' });
      assert.equal(trials.find((t) => t.batchSize === found + 1)?.outcome.kind, 'oom');
      // Doubling from the job's 16 while it fits, then bisecting.
      assert.deepEqual(trials.slice(0, 2).map((t) => [t.batchSize, t.outcome.kind]), [[16, 'fits'], [32, 'oom']]);
      for (const t of trials.filter((x) => x.outcome.kind === 'oom')) assert.match((t.outcome as { reason: string }).reason, /DefaultCPUAllocator: can't allocate memory/);
      assert.equal(d.deviceLabel, 'cpu');
      assert.match(d.backend ?? '', /^torch 1\./);
      assert.deepEqual(r.torchrun, { arg: '--batch-size', processes: 2, memoryLimitBytes: limitMiB * MiB });
      assert.equal(r.suggestedBatchSize, found);
      assert.match(formatBatchEvent(done), new RegExp(`set --batch-size ${found} in the "args" of grow\\.job\\.json \\(the script's batch per process, measured with all 2 processes running; each process limited to 700\\.0 MiB`));
      // What the editor offers, and the edit it makes to the job file.
      const m = searchMessage({ result: r, code: 0, signal: null, stderr: '' });
      assert.equal(m.text, `Largest batch that fits for grow: ${found} (--batch-size ${found}, each of 2 processes), measured on CPU (${d.backend}) (each process limited to 700 MiB).`);
      assert.deepEqual([m.offer, m.offerLabel], [found, `Set --batch-size ${found}`]);
      const before = readFileSync(file, 'utf8');
      writeFileSync(file, batchSizeEdit(before, found, 'grow.job.json').text);
      assert.equal(readFileSync(file, 'utf8'), before.replace('"--batch-size", "16"', `"--batch-size", "${found}"`));
      assert.equal(loadTorchrunJob(file).batchSize?.current, found);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

import assert from 'node:assert/strict';
import { fork, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatBatchEvent, parseTrainArgs } from '../../../../src/cli/train';
import { runTrial, searchBatchSize, suggestBatchSize, trialSlot, type TrialRun, type FindBatchSizeEvent, type FindBatchSizeResult, type TrialReport } from '../../../../src/training/launchers/findBatchSize';
import { parseJob } from '../../../../src/training/job/spec';
import type { Tf } from '../../../../src/training/backends/types';
import { classifyWasmTrap, guardWasmHeap, isOutOfMemory, OutOfMemoryError, wasmCrashAsOutOfMemory, wasmHeapMaxBytes } from '../../../../src/training/backends/oom';
import { hintFor } from '../../../../src/training/strategies/worker';
import { fixtures, repoRoot } from '../../../paths';
import { alive, tinyJob, until } from '../helpers';

/** The pids of every live process below `pid`, from /proc. */
function descendants(pid: number): number[] {
  const parent = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ')'.
      parent.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch { /* gone meanwhile */ }
  }
  const out: number[] = [];
  const walk = (p: number) => { for (const [c, pp] of parent) if (pp === p) { out.push(c); walk(c); } };
  walk(pid);
  return out;
}

/** A device that holds `capacity` examples: larger batches run out of memory. */
function device(capacity: number, extra: (batch: number) => TrialReport | undefined = () => undefined) {
  const tried: number[] = [];
  const trial = (batch: number): Promise<TrialReport> => {
    tried.push(batch);
    return Promise.resolve(extra(batch) ?? { outcome: batch <= capacity ? { kind: 'fits' } : { kind: 'oom', reason: `OOM when allocating tensor with shape[${batch},4096]` } });
  };
  return { tried, trial };
}

describe('find max batch size: the search', () => {
  it('doubles while the batch fits, then binary-searches to the exact largest batch that fits', async () => {
    const d = device(100);
    const r = await searchBatchSize({ start: 32, max: 10_000, trial: d.trial });
    assert.deepEqual(d.tried, [32, 64, 128, 96, 112, 104, 100, 102, 101]);
    assert.deepEqual([r.batchSize, r.limit], [100, 'memory']);
    assert.deepEqual(r.trials.map((t) => t.outcome.kind), ['fits', 'fits', 'oom', 'fits', 'oom', 'oom', 'fits', 'oom', 'oom']);
  });

  it('halves a start that does not fit until one does, then searches up', async () => {
    const d = device(20);
    const r = await searchBatchSize({ start: 256, max: 10_000, trial: d.trial });
    assert.deepEqual(d.tried, [256, 128, 64, 32, 16, 24, 20, 22, 21]);
    assert.equal(r.batchSize, 20);
  });

  it('says 0 when not even one example fits', async () => {
    const d = device(0);
    const r = await searchBatchSize({ start: 4, max: 100, trial: d.trial });
    assert.deepEqual(d.tried, [4, 2, 1]);
    assert.deepEqual([r.batchSize, r.limit], [0, 'memory']);
  });

  it('stops at the upper bound, and lowers it to the training set a trial reports', async () => {
    const bounded = device(1000);
    const r = await searchBatchSize({ start: 32, max: 50, trial: bounded.trial });
    assert.deepEqual(bounded.tried, [32, 50]);
    assert.deepEqual([r.batchSize, r.limit, r.max], [50, 'max', 50]);
    // The first trial says the training set holds 40 examples: a batch of 64 would train on 40.
    const small = device(1000, () => ({ outcome: { kind: 'fits' }, trainSamples: 40 }));
    const s = await searchBatchSize({ start: 64, max: Number.MAX_SAFE_INTEGER, trial: small.trial });
    assert.deepEqual(small.tried, [64]);
    assert.deepEqual([s.batchSize, s.limit, s.max, s.trials[0].batchSize], [40, 'max', 40, 64]);
  });

  it('a first trial above a bound it only learns then, out of memory there, is recorded at the batch tried and says nothing about the bound', async () => {
    // The set holds 40 per device; 64 runs out, 40 fits.
    const d = device(50, (b) => ({ outcome: b <= 50 ? { kind: 'fits' } : { kind: 'oom', reason: 'OOM' }, trainSamples: 40 }));
    const r = await searchBatchSize({ start: 64, max: Number.MAX_SAFE_INTEGER, trial: d.trial });
    assert.deepEqual(d.tried, [64, 40]);
    assert.deepEqual(r.trials.map((t) => `${t.batchSize} ${t.outcome.kind}`), ['64 oom', '40 fits']);
    assert.deepEqual([r.batchSize, r.limit], [40, 'max'], 'the bound fits: memory is not the limit');
  });

  it('stops at a real error and reports it, without calling it out of memory', async () => {
    const d = device(1000, (b) => (b === 64 ? { outcome: { kind: 'error', reason: "Kernel 'Conv2DBackpropFilter' not registered for backend 'wasm'", hint: 'set "backend": "cpu"' } } : undefined));
    const r = await searchBatchSize({ start: 16, max: 1000, trial: d.trial });
    assert.deepEqual(d.tried, [16, 32, 64]);
    assert.deepEqual([r.batchSize, r.limit], [32, 'error']);
    assert.deepEqual(r.error, { reason: "Kernel 'Conv2DBackpropFilter' not registered for backend 'wasm'", hint: 'set "backend": "cpu"' });
  });

  it('a cancel stops the trial under way, and no trial starts after it (both searches, TF.js and torchrun, cancel this way)', async () => {
    const slot = trialSlot();
    const stopped: number[] = [];
    let started = 0;
    const trial = (n: number): TrialRun => {
      started++;
      let end!: (r: Awaited<TrialRun['report']>) => void;
      const report = new Promise<Awaited<TrialRun['report']>>((resolve) => { end = resolve; });
      return { report, cancel: () => { stopped.push(n); end({ outcome: { kind: 'cancelled' } }); } };
    };
    const first = slot.run(() => trial(1));
    slot.cancel();
    assert.deepEqual(await first, { outcome: { kind: 'cancelled' } }, 'the trial under way ends as cancelled');
    assert.deepEqual(stopped, [1]);
    assert.equal(await slot.run(() => trial(2)), undefined, 'after the cancel: no report');
    assert.equal(started, 1, 'and no second trial started');
    const r = await searchBatchSize({ start: 16, max: 1000, trial: async () => (await slot.run(() => trial(3))) ?? { outcome: { kind: 'cancelled' } } });
    assert.deepEqual([r.batchSize, r.limit, started], [0, 'cancelled', 1]);
  });

  it('turns the largest batch per device into the job\'s batchSize for its strategy', () => {
    const pipeline = { stages: 2, microBatches: 4, schedule: 'gpipe' } as const;
    assert.equal(suggestBatchSize({ strategy: 'single', devices: [0], pipeline }, 100), 100);
    assert.equal(suggestBatchSize({ strategy: 'ddp', devices: [0, 1], pipeline }, 100), 200, 'the job\'s batch is global');
    assert.equal(suggestBatchSize({ strategy: 'dp', devices: [0, 1, 2], pipeline }, 7), 21);
    assert.equal(suggestBatchSize({ strategy: 'pipeline', devices: [0, 1], pipeline }, 102), 100, 'whole micro-batches');
    assert.equal(suggestBatchSize({ strategy: 'pipeline', devices: [0, 1], pipeline }, 3), undefined);
    assert.equal(suggestBatchSize({ strategy: 'single', devices: [0], pipeline }, 0), undefined);
  });

  it('warns that a dp batchSize is an upper bound (rank 0 holds the whole batch and every gradient), and says nothing of the kind for ddp', () => {
    const r = (strategy: FindBatchSizeResult['strategy']): FindBatchSizeResult => ({
      job: 'mnist', file: '/w/mnist.job.json', strategy, jobDevices: 2, perDevice: 96, suggestedBatchSize: 192,
      devices: [{ device: 0, deviceLabel: 'gpu:0', backend: 'tensorflow-gpu', batchSize: 96, limit: 'memory', max: 60000, trials: [] }],
    });
    const dp = formatBatchEvent({ type: 'batch/done', result: r('dp') }).split('\n');
    assert.equal(dp[1], 'set "batchSize": 192 in mnist.job.json (96 per device x 2 devices: the job\'s batch is global)');
    assert.match(dp[2], /^warning: This is an upper bound for dp: .*rank 0, the coordinator, also holds the whole batch of 192 and every replica's gradients, so it can run out of memory there; if it does, lower batchSize/);
    assert.equal(formatBatchEvent({ type: 'batch/done', result: r('ddp') }).split('\n').length, 2, 'no warning for ddp');
  });
});

describe('find max batch size: out of memory', () => {
  it('knows out of memory as each backend words it, and nothing else', () => {
    for (const m of [
      'ResourceExhaustedError: OOM when allocating tensor with shape[4096,65536] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc',
      'Resource exhausted: failed to allocate memory',
      'RangeError: Array buffer allocation failed',
      'RangeError: Invalid typed array length: 4294967296',
      'OutOfMemoryError: out of memory: the wasm heap (3.75 GiB of its 4.00 GiB maximum) cannot hold another 0.56 GiB tensor',
      'CUDA error: out of memory',
    ]) assert.ok(isOutOfMemory(m), m);
    for (const m of ["Kernel 'Conv2DBackpropFilter' not registered for backend 'wasm'", 'no room left in the bucket', 'zoom factor must be positive', 'Error when checking input: expected dense_Dense1_input to have shape [null,784]']) assert.ok(!isOutOfMemory(m), m);
  });

  // Recorded on big-activations.job.json at batch 8 (wasm, tfjs-backend-wasm 4.22): the heap had
  // grown to 4,194,435,072 bytes when malloc(512 MiB) returned 3,825,304,008, a block ending past 2^32.
  const recordedHeap = 4_194_435_072;
  const fakeWasm = (malloc: (bytes: number) => number, heap: number) => {
    const wasm = { _malloc: malloc, HEAPU8: { length: heap }, asm: { malloc } };
    const tf = { getBackend: () => 'wasm', backend: () => ({ wasm }) } as unknown as Tf;
    return { wasm, tf };
  };

  it('the wasm heap guard refuses a block past the end of the heap (a wrapped break pointer) and a null one, and hands out one that fits', () => {
    const mib = 2 ** 20;
    // asm.malloc returns a signed 32-bit address: 3,825,304,008 reads as a negative number.
    const wrapped = fakeWasm(() => 3_825_304_008 | 0, recordedHeap);
    guardWasmHeap(wrapped.tf);
    assert.throws(() => wrapped.wasm._malloc(512 * mib), (e: Error) => e instanceof OutOfMemoryError && /^out of memory: the wasm heap \(3\.91 GiB of its 4\.00 GiB maximum\) cannot hold another 0\.50 GiB tensor$/.test(e.message));
    const full = fakeWasm(() => 0, wasmHeapMaxBytes);
    guardWasmHeap(full.tf);
    assert.throws(() => full.wasm._malloc(64 * mib), OutOfMemoryError);
    const roomy = fakeWasm(() => 3_000_000_000 | 0, recordedHeap);
    guardWasmHeap(roomy.tf);
    assert.equal(roomy.wasm._malloc(512 * mib), 3_000_000_000, 'a block inside the heap, as the unsigned address the backend expects');
  });

  it('a wasm trap with the heap within one allocation of its maximum is out of memory, with the heap in the message; anywhere else a real error', () => {
    const oob = 'RuntimeError: memory access out of bounds';
    const full = classifyWasmTrap(oob, recordedHeap);
    assert.equal(full, 'out of memory: the wasm heap is full (3.91 GiB of its 4.00 GiB maximum) and the backend crashed allocating inside a kernel (RuntimeError: memory access out of bounds)');
    assert.ok(isOutOfMemory(full));
    assert.match(hintFor(full) ?? '', /ran out of memory: try a smaller batchSize/);
    assert.ok(classifyWasmTrap('RuntimeError: unreachable', wasmHeapMaxBytes));
    assert.equal(classifyWasmTrap(oob, 2 ** 30), undefined, 'a 1 GiB heap is not full: a kernel bug');
    assert.equal(classifyWasmTrap(oob, undefined), undefined, 'not on wasm');
    assert.equal(classifyWasmTrap("Kernel 'Foo' not registered for backend 'wasm'", recordedHeap), undefined, 'not a trap');
    // 3.5 GiB is too far from the top for a 256 MiB allocation to have failed, close enough for a 768 MiB one.
    assert.equal(classifyWasmTrap(oob, 3.5 * 2 ** 30), undefined);
    assert.ok(classifyWasmTrap(oob, 3.5 * 2 ** 30, 768 * 2 ** 20));
    // What the worker reports: the trap error becomes an OutOfMemoryError on a full heap, other errors pass through.
    const trap = Object.assign(new Error('memory access out of bounds'), { name: 'RuntimeError' });
    assert.ok(wasmCrashAsOutOfMemory(fakeWasm(() => 0, recordedHeap).tf, trap) instanceof OutOfMemoryError);
    assert.equal(wasmCrashAsOutOfMemory(fakeWasm(() => 0, 2 ** 30).tf, trap), trap);
    const other = new Error('no room left in the bucket');
    assert.equal(wasmCrashAsOutOfMemory(fakeWasm(() => 0, recordedHeap).tf, other), other);
  });

  it('a batch just below where the first step runs out (batch 8 of big-activations, 2 steps) is out of memory, not a real error', async function () {
    this.timeout(120_000);
    const job = join(fixtures, 'jobs', 'big-activations.job.json');
    const r = await runTrial(job, {}, 0, 8, 2).report;
    assert.equal(r.outcome.kind, 'oom', JSON.stringify(r));
    assert.match(r.outcome.kind === 'oom' ? r.outcome.reason : '', /^OutOfMemoryError: out of memory: the wasm heap (is full )?\([\d.]+ GiB of its 4\.00 GiB maximum\)/);
  });

  it('a trial over the wasm heap really runs out of memory (in its own worker), a small one fits', async function () {
    this.timeout(120_000);
    const job = join(fixtures, 'jobs', 'big-activations.job.json');
    const [big, small] = await Promise.all([runTrial(job, {}, 0, 16, 1).report, runTrial(job, {}, 0, 2, 1).report]);
    assert.equal(big.outcome.kind, 'oom', JSON.stringify(big));
    assert.match(big.outcome.kind === 'oom' ? big.outcome.reason : '', /^OutOfMemoryError: out of memory: the wasm heap \([\d.]+ GiB of its 4\.00 GiB maximum\) cannot hold another [\d.]+ GiB tensor$/);
    assert.equal(small.outcome.kind, 'fits', JSON.stringify(small));
    assert.deepEqual([small.backend, small.deviceLabel, small.trainSamples], ['wasm', 'cpu', 256]);
  });
});

describe('gpu-workbench train --find-batch-size', function () {
  this.timeout(120_000);

  it('parses --find-batch-size with its bound and steps, and refuses them without it', () => {
    assert.deepEqual(parseTrainArgs(['job.json', '--find-batch-size', '--max-batch-size', '512', '--trial-steps=3', '--backend', 'wasm']), {
      file: 'job.json', json: false, resume: false, overrides: { backend: 'wasm' }, findBatchSize: { maxBatchSize: 512, steps: 3 },
    });
    assert.throws(() => parseTrainArgs(['job.json', '--max-batch-size', '512']), /--max-batch-size only applies with --find-batch-size/);
    assert.throws(() => parseTrainArgs(['job.json', '--find-batch-size', '--resume']), /drop --resume/);
    assert.throws(() => parseTrainArgs(['job.json', '--find-batch-size', '--trial-steps', '0']), /--trial-steps expects a whole number of at least 1, got '0'/);
  });

  it('a trial job runs its steps only: one epoch, no evaluation, no checkpoint', () => {
    const spec = parseJob({ model: 'mlp', data: { mnist: {} }, batchSize: 64, epochs: 5, checkpointDir: 'ckpt' }, join(fixtures, 'jobs', 'x.job.json'), { trialSteps: 2 });
    assert.deepEqual([spec.epochs, spec.maxStepsPerEpoch, spec.checkpointDir, spec.trialSteps], [1, 2, undefined, 2]);
  });

  it('searches up to --max-batch-size and prints batch/trial events, then batch/done, suggesting that bound (larger batches were not tried)', () => {
    const r = spawnSync(process.execPath, [join(repoRoot, 'out', 'src', 'cli.js'), 'train', tinyJob, '--find-batch-size', '--max-batch-size', '64', '--trial-steps', '1', '--json'], { encoding: 'utf8', timeout: 110_000 });
    assert.equal(r.status, 0, r.stderr);
    const events = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as FindBatchSizeEvent);
    assert.deepEqual(events.map((e) => (e.type === 'batch/trial' ? `${e.batchSize} ${e.outcome.kind} ${e.deviceLabel}` : e.type)), ['32 fits cpu', '64 fits cpu', 'batch/done']);
    const done = events[2];
    assert.ok(done.type === 'batch/done');
    // Every trial fit up to --max-batch-size: memory may allow more, so the bound is what to set.
    assert.deepEqual([done.result.perDevice, done.result.suggestedBatchSize, done.result.devices[0].limit, done.result.devices[0].backend, done.result.maxBatchSize], [64, 64, 'max', 'wasm', 64]);
  });

  it('caps a ddp search at a device\'s share of the training set and never suggests a batch larger than the data', () => {
    // tiny-mnist: 256 training samples; ddp on 2 devices gives each at most 128 per step.
    const r = spawnSync(process.execPath, [join(repoRoot, 'out', 'src', 'cli.js'), 'train', tinyJob, '--find-batch-size', '--strategy', 'ddp', '--devices', '2', '--trial-steps', '1', '--json'], { encoding: 'utf8', timeout: 110_000 });
    assert.equal(r.status, 0, r.stderr);
    const events = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as FindBatchSizeEvent);
    assert.deepEqual(events.map((e) => (e.type === 'batch/trial' ? `${e.batchSize} ${e.outcome.kind}` : e.type)), ['16 fits', '32 fits', '64 fits', '128 fits', 'batch/done']);
    const done = events[events.length - 1];
    assert.ok(done.type === 'batch/done');
    assert.deepEqual([done.result.perDevice, done.result.devices[0].max, done.result.trainSamples, done.result.suggestedBatchSize], [128, 128, 256, undefined]);
    const human = spawnSync(process.execPath, [join(repoRoot, 'out', 'src', 'cli.js'), 'train', tinyJob, '--find-batch-size', '--strategy', 'ddp', '--devices', '2', '--trial-steps', '1', '--max-batch-size', '32'], { encoding: 'utf8', timeout: 110_000 });
    assert.equal(human.status, 0, human.stderr);
    // Stopped by --max-batch-size, not by the data: memory may well allow more, so it is no "memory is not the limit".
    assert.doesNotMatch(human.stdout, /memory is not the limit/);
    assert.match(human.stdout, /a batch of 32 fits on CPU \(wasm\): reached --max-batch-size 32; larger batches were not tried \(2 trials\)\nset "batchSize": 64 in tiny-mnist\.job\.json \(32 per device x 2 devices/);
    // Without it, the data stops the search, and says so.
    const data = spawnSync(process.execPath, [join(repoRoot, 'out', 'src', 'cli.js'), 'train', tinyJob, '--find-batch-size', '--strategy', 'ddp', '--devices', '2', '--trial-steps', '1'], { encoding: 'utf8', timeout: 110_000 });
    assert.match(data.stdout, /a batch of 128 fits on CPU \(wasm\): the largest size tried, 128, fit: the data holds only 128 per device \(a device's share of the 256-sample training set for ddp on 2 devices\) \(4 trials\)\nmemory is not the limit here/);
  });

  it('a job batchSize above what a device gets starts at that share, so an out of memory is recorded at the batch really tried (ddp on 8 devices over 16 samples: 2 each)', function () {
    this.timeout(240_000);
    const dir = mkdtempSync(join(tmpdir(), 'gw-fbs-share-'));
    try {
      writeFileSync(join(dir, 'sixteen.data.js'), `exports.loadData = async () => {
        const make = (n) => ({ xs: Array.from({ length: n }, (_, i) => i / n - 0.5), labels: Array.from({ length: n }, (_, i) => i % 4) });
        return { inputShape: [1], numClasses: 4, train: make(16), test: make(4) };
      };`);
      const job = join(dir, 'share.job.json');
      // big-activations runs out of the wasm heap at a batch of 8 or more; 16 per device is what batchSize 128 on 8 devices would start at.
      writeFileSync(job, JSON.stringify({ ...JSON.parse(readFileSync(join(fixtures, 'jobs', 'big-activations.job.json'), 'utf8')) as object, model: join(fixtures, 'jobs', 'big-activations.model.js'), data: { module: 'sixteen.data.js' }, batchSize: 128, strategy: 'ddp', devices: 8 }));
      const r = spawnSync(process.execPath, [join(repoRoot, 'out', 'src', 'cli.js'), 'train', job, '--find-batch-size', '--trial-steps', '1', '--json'], { encoding: 'utf8', timeout: 230_000 });
      assert.equal(r.status, 0, r.stderr + r.stdout);
      const events = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as FindBatchSizeEvent);
      assert.deepEqual(events.map((e) => (e.type === 'batch/trial' ? `${e.batchSize} ${e.outcome.kind}` : e.type)), ['2 fits', 'batch/done']);
      const done = events[events.length - 1];
      assert.ok(done.type === 'batch/done');
      assert.deepEqual([done.result.perDevice, done.result.devices[0].limit, done.result.trainSamples, done.result.suggestedBatchSize], [2, 'max', 16, undefined]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('forked with IPC, cancels the search when its parent disconnects: the CLI and its trial workers end (exit 130)', async () => {
    const cli = fork(join(repoRoot, 'out', 'src', 'cli.js'), ['train', join(fixtures, 'jobs', 'big-activations.job.json'), '--find-batch-size', '--json'], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
    try {
      const pid = cli.pid;
      assert.ok(pid !== undefined);
      const exited = new Promise<number | null>((resolve) => cli.on('exit', (code) => resolve(code)));
      let workers: number[] = [];
      await until('a trial worker under the CLI', () => (workers = descendants(pid)).length > 0, 60_000);
      cli.disconnect(); // as when the extension host goes away: the channel closes
      await until('the CLI and its trial workers to be gone', () => !alive(pid) && workers.every((w) => !alive(w)), 20_000);
      assert.equal(await exited, 130);
    } finally {
      if (cli.exitCode === null && cli.signalCode === null) cli.kill('SIGKILL');
    }
  });

  it('names the file and the field of a bad job, and refuses a torchrun job that names no batch size setting without blaming the file', () => {
    const cli = join(repoRoot, 'out', 'src', 'cli.js');
    const bad = spawnSync(process.execPath, [cli, 'train', join(fixtures, 'jobs', 'bad-learning-rate.job.json'), '--find-batch-size'], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /^find batch size failed: bad-learning-rate\.job\.json: \/optimizer\/learningRate must be a number > 0/);
    const dir = mkdtempSync(join(tmpdir(), 'gw-fbs-torchrun-'));
    try {
      const job = join(dir, 'ddp.job.json');
      writeFileSync(job, JSON.stringify({ kind: 'torchrun', script: 'ddp.py', nprocPerNode: 2 }));
      const torchrun = spawnSync(process.execPath, [cli, 'train', job, '--find-batch-size', '--json'], { encoding: 'utf8', timeout: 30_000 });
      assert.equal(torchrun.status, 1);
      const refusal = JSON.parse(torchrun.stdout) as { type: string; reason: string; hint?: string };
      assert.deepEqual(refusal, { type: 'batch/failed', reason: 'ddp.job.json does not say how its script takes its batch size, so Find Max Batch Size cannot try one: add "batchSize": {"arg": "--batch-size"} (the script\'s option, its value in "args") or "batchSize": {"env": "BATCH_SIZE"} (an environment variable, its value in "env") to the job.' });
      const human = spawnSync(process.execPath, [cli, 'train', job, '--find-batch-size'], { encoding: 'utf8', timeout: 30_000 });
      assert.equal(human.status, 1);
      assert.doesNotMatch(human.stderr, /fix the job file/i);
      assert.match(human.stderr, /^find batch size refused: ddp\.job\.json does not say how its script takes its batch size/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

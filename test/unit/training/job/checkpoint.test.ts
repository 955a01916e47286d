import assert from 'node:assert/strict';
import type { Tensor } from '@tensorflow/tfjs-core';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { CheckpointError, CheckpointInUseError, ensureCheckpointFolder, existingRun, latestCheckpoint, lockCheckpointFolder, lockFileName, mergeOptimizerStates, moveRunAside, prepareCheckpointFolder, processStartTime, sliceOptimizerState, type LockOwner, type OptimizerState } from '../../../../src/training/job/checkpoint';

/** An Adam-like state: the iteration count, then the m slot of each weight, then the v slot. */
const state = (...names: string[]): OptimizerState => ({
  className: 'Adam',
  weights: [{ name: 'iter', tensor: {} as Tensor }, ...['m', 'v'].flatMap((slot) => names.map((n) => ({ name: `${n}/${slot}`, tensor: {} as Tensor })))],
});
const names = (s: OptimizerState) => s.weights.map((w) => w.name);

describe('checkpoint: one optimizer state over the stages of a pipeline', () => {
  it('merges the stages\' states into the state of one optimizer over the whole model, and slices each stage\'s part back', () => {
    // Stage 0 holds only a Flatten (no weights), stage 1 one dense layer, stage 2 another.
    const parts = [{ state: { className: 'Adam', weights: [{ name: 'iter', tensor: {} as Tensor }] }, vars: 0 }, { state: state('d1/kernel', 'd1/bias'), vars: 2 }, { state: state('d2/kernel', 'd2/bias'), vars: 2 }];
    const whole = mergeOptimizerStates(parts);
    assert.deepEqual(names(whole), names(state('d1/kernel', 'd1/bias', 'd2/kernel', 'd2/bias')));
    assert.deepEqual(names(sliceOptimizerState(whole, 2, 4, 4)), names(state('d2/kernel', 'd2/bias')));
    assert.deepEqual(names(sliceOptimizerState(whole, 0, 0, 4)), ['iter']);
    // The same tensors travel: nothing is copied or lost.
    assert.equal(sliceOptimizerState(whole, 0, 2, 4).weights[3].tensor, parts[1].state.weights[3].tensor);
  });

  it('keeps SGD\'s state (the iteration count alone) as it is', () => {
    const sgd = { className: 'SGD', weights: [{ name: 'iter', tensor: {} as Tensor }] };
    assert.deepEqual(names(mergeOptimizerStates([{ state: sgd, vars: 2 }, { state: sgd, vars: 1 }])), ['iter']);
    assert.deepEqual(names(sliceOptimizerState(sgd, 1, 3, 3)), ['iter']);
  });

  it('refuses a state that does not fit the model', () => {
    assert.throws(() => sliceOptimizerState(state('a', 'b', 'c'), 0, 1, 4), (e: unknown) => e instanceof CheckpointError && /6 optimizer slots do not divide among 4 weights: was it written for another model\?/.test(e.message));
    assert.throws(() => mergeOptimizerStates([{ state: state('a'), vars: 1 }, { state: { className: 'Adam', weights: [{ name: 'iter', tensor: {} as Tensor }, { name: 'b/m', tensor: {} as Tensor }] }, vars: 1 }]), /pipeline stage 1 has 1 optimizer slot groups, another stage 2/);
  });
});

describe('checkpoint: one run per folder', () => {
  let root: string;
  beforeEach(() => { root = mkdtempSync(join(tmpdir(), 'gw-ckpt-')); });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  /** A folder as a run leaves it: whole epoch-N folders (trainer.json, model and optimizer files), latest.json naming `latest`. */
  function runOf(epochs: number[], latest?: number, trainer: object = {}): void {
    for (const e of epochs) {
      const dir = join(root, `epoch-${e}`);
      mkdirSync(dir);
      writeFileSync(join(dir, 'trainer.json'), JSON.stringify({ epochsDone: e, globalStep: 4 * e, job: 'mnist', savedAt: `2026-11-2${e}T10:00:00.000Z`, ...trainer }));
      writeFileSync(join(dir, 'model.json'), JSON.stringify({ modelTopology: {}, weightsManifest: [{ paths: ['weights.bin'], weights: [{ name: 'dense/kernel', shape: [3, 2], dtype: 'float32' }] }] }));
      writeFileSync(join(dir, 'weights.bin'), Buffer.alloc(24));
      writeFileSync(join(dir, 'optimizer.json'), JSON.stringify({ className: 'Adam', specs: [{ name: 'iter', shape: [], dtype: 'float32' }] }));
      writeFileSync(join(dir, 'optimizer.bin'), Buffer.alloc(4));
    }
    if (latest !== undefined) writeFileSync(join(root, 'latest.json'), JSON.stringify({ dir: `epoch-${latest}`, epoch: latest }));
  }
  const at = new Date(Date.UTC(2026, 10, 25, 23, 41, 7, 250));
  const previous = 'previous-2026-11-25T23-41-07Z';

  it('finds the run a folder holds, trusting latest.json only when its checkpoint is there', () => {
    assert.equal(existingRun(join(root, 'none')), undefined);
    assert.equal(existingRun(root), undefined);
    writeFileSync(join(root, 'notes.txt'), 'mine');
    mkdirSync(join(root, '.epoch-1.tmp-123'));
    assert.equal(existingRun(root), undefined, 'a write cut off before any checkpoint is no run');
    runOf([1, 2], 2);
    assert.deepEqual(existingRun(root), { root, epochs: [1, 2], entries: ['.epoch-1.tmp-123', 'epoch-1', 'epoch-2', 'latest.json'], latest: { dir: 'epoch-2', epoch: 2 }, job: 'mnist', savedAt: '2026-11-22T10:00:00.000Z' });
    writeFileSync(join(root, 'latest.json'), JSON.stringify({ dir: 'epoch-7', epoch: 7 }));
    assert.deepEqual(existingRun(root)?.latest, { dir: 'epoch-2', epoch: 2, repaired: 'latest.json names epoch-7, which is not there' }, 'latest.json naming a folder that is not there: the newest whole one');
  });

  it('starting over moves the whole earlier run into previous-<time>/ and leaves the rest of the folder alone', () => {
    runOf([1, 2, 3], 3);
    mkdirSync(join(root, '.epoch-4.tmp-99'));
    writeFileSync(join(root, 'notes.txt'), 'mine');
    const said = prepareCheckpointFolder(root, false, at);
    assert.deepEqual(readdirSync(root).sort(), ['notes.txt', previous]);
    assert.deepEqual(readdirSync(join(root, previous)).sort(), ['.epoch-4.tmp-99', 'epoch-1', 'epoch-2', 'epoch-3', 'latest.json']);
    assert.deepEqual(JSON.parse(readFileSync(join(root, previous, 'latest.json'), 'utf8')), { dir: 'epoch-3', epoch: 3 });
    assert.equal(said, `${root} held the earlier run of mnist (epoch-1 … epoch-3, latest epoch-3 saved 2026-11-23T10:00:00.000Z): moved to ${join(root, previous)}; this run starts at epoch 1 (--resume continues the earlier run instead)`);
    // A second start over in the same second gets its own folder.
    runOf([1], 1);
    prepareCheckpointFolder(root, false, at);
    assert.deepEqual(readdirSync(root).sort(), ['notes.txt', previous, `${previous}-2`]);
    assert.equal(prepareCheckpointFolder(root, false, at), undefined, 'nothing to move');
  });

  it('resuming keeps the run, but moves aside epochs past latest.json (another run\'s)', () => {
    runOf([1, 2], 2);
    assert.equal(prepareCheckpointFolder(root, true, at), undefined);
    assert.deepEqual(readdirSync(root).sort(), ['epoch-1', 'epoch-2', 'latest.json']);
    // What the bug left: a new run's latest.json at epoch-1 among the old run's epoch-2, epoch-3.
    runOf([3]);
    writeFileSync(join(root, 'latest.json'), JSON.stringify({ dir: 'epoch-1', epoch: 1 }));
    assert.match(prepareCheckpointFolder(root, true, at) ?? '', /^epoch-2 … epoch-3 in .* came after the checkpoint resumed from \(epoch-1\), so they are another run's or cut short: moved to /);
    assert.deepEqual(readdirSync(root).sort(), ['epoch-1', 'latest.json', previous]);
    assert.deepEqual(readdirSync(join(root, previous)).sort(), ['epoch-2', 'epoch-3']);
  });

  it('--resume with an empty latest.json resumes from the newest whole epoch folder (and rewrites latest.json), never starts over unasked', () => {
    runOf([1, 2, 3]);
    writeFileSync(join(root, 'latest.json'), '');
    // epoch-3 was cut short: its weights are missing half their bytes.
    writeFileSync(join(root, 'epoch-3', 'weights.bin'), Buffer.alloc(12));
    assert.equal(latestCheckpoint(root), join(root, 'epoch-2'), 'what the workers resume from');
    const said = prepareCheckpointFolder(root, true, at) ?? '';
    assert.match(said, /^latest\.json is empty: resuming from the newest whole checkpoint in .*, epoch-2 \(2 epochs done\), and latest\.json now names it; epoch-3 in .* came after the checkpoint resumed from \(epoch-2\), so they are another run's or cut short: moved to /);
    assert.deepEqual(JSON.parse(readFileSync(join(root, 'latest.json'), 'utf8')), { dir: 'epoch-2', epoch: 2 });
    assert.deepEqual(readdirSync(root).sort(), ['epoch-1', 'epoch-2', 'latest.json', previous]);
    // Nothing whole at all: refused, nothing moved.
    rmSync(join(root, previous), { recursive: true });
    for (const e of ['epoch-1', 'epoch-2']) rmSync(join(root, e, 'trainer.json'));
    writeFileSync(join(root, 'latest.json'), '{"dir": "epoch-');
    assert.throws(() => prepareCheckpointFolder(root, true, at), (err: Error) => err instanceof CheckpointError
      && err.message === `nothing whole to resume in ${root} (latest.json is not JSON; newest epoch folder epoch-2 is not whole); start without --resume (Start Over) to move these files into previous-<time>/ and train from epoch 1`);
    assert.deepEqual(readdirSync(root).sort(), ['epoch-1', 'epoch-2', 'latest.json']);
    // An empty folder: nothing to resume, said so.
    rmSync(root, { recursive: true });
    mkdirSync(root);
    assert.equal(prepareCheckpointFolder(root, true, at), `--resume: ${root} holds no checkpoint to resume from, so this run starts at epoch 1`);
  });

  it('a move aside that fails half-way puts back what it moved, and says so', () => {
    runOf([1, 2], 2);
    const run = existingRun(root)!;
    // epoch-2 goes away between the listing and the move (what another process could do).
    rmSync(join(root, 'epoch-2'), { recursive: true });
    assert.throws(() => moveRunAside(run, at), (err: Error) => err instanceof CheckpointError
      && new RegExp(`^could not move epoch-2 into ${join(root, previous)} \\(ENOENT[^)]*\\); epoch-1, already moved, went back, so ${root} is as it was$`).test(err.message));
    assert.deepEqual(readdirSync(root).sort(), ['epoch-1', 'latest.json'], 'epoch-1 back in place, no previous-<time>/ left');
  });

  it('refuses to resume another job\'s run (another job file, or another model), and says whose it is', () => {
    runOf([1], 1, { job: 'cifar', file: '/w/cifar.job.json', model: { preset: 'cnn' } });
    assert.throws(() => prepareCheckpointFolder(root, true, at, { name: 'mnist', file: '/w/mnist.job.json', model: { preset: 'mlp' } }),
      /holds a run that is not this job's: it was written by another job file, \/w\/cifar\.job\.json \(job cifar\); resuming it would load another model's weights/);
    assert.throws(() => prepareCheckpointFolder(root, true, at, { name: 'cifar', file: '/w/cifar.job.json', model: { preset: 'mlp', hiddenUnits: [16] } }),
      /its model \(\{"preset":"cnn"\}\) is not this job's \(\{"preset":"mlp","hiddenUnits":\[16\]\}\)/);
    assert.deepEqual(readdirSync(root).sort(), ['epoch-1', 'latest.json'], 'nothing moved');
    assert.equal(prepareCheckpointFolder(root, true, at, { name: 'cifar', file: '/w/cifar.job.json', model: { preset: 'cnn' } }), undefined, 'its own run resumes');
  });
});

describe('checkpoint: a checkpoint folder is held by one job at a time', () => {
  let root: string;
  beforeEach(() => { root = mkdtempSync(join(tmpdir(), 'gw-lock-')); });
  afterEach(() => rmSync(root, { recursive: true, force: true }));
  const lockFile = () => JSON.parse(readFileSync(join(root, lockFileName), 'utf8')) as LockOwner;

  it('a second lock of a held folder is refused naming the folder and the process holding it; released, it can be taken', () => {
    const lock = lockCheckpointFolder(root, { name: 'mnist', file: '/w/mnist.job.json' });
    assert.equal(lockFile().pid, process.pid);
    assert.throws(() => lockCheckpointFolder(root, { name: 'other' }), (err: Error) => err instanceof CheckpointInUseError
      && err.message.startsWith(`the checkpoint folder ${root} is in use by another running job: pid ${process.pid}, job mnist (/w/mnist.job.json), started `));
    lock.release();
    assert.deepEqual(readdirSync(root), []);
    lockCheckpointFolder(root).release();
  });

  it('takes over a lock whose process is gone: its pid dead, or reused by a process started at another time', async () => {
    const child = spawn(process.execPath, ['-e', '']);
    const pid = child.pid!;
    await once(child, 'exit');
    writeFileSync(join(root, lockFileName), JSON.stringify({ pid, host: hostname(), startedAt: '2026-11-25T10:00:00.000Z' }));
    const lock = lockCheckpointFolder(root, { name: 'mnist' });
    assert.equal(lockFile().pid, process.pid);
    lock.release();
    // This very pid, but written by a process that started at another time: the pid was reused.
    const start = processStartTime(process.pid);
    if (start !== undefined) {
      writeFileSync(join(root, lockFileName), JSON.stringify({ pid: process.pid, host: hostname(), startedAt: '2026-11-25T10:00:00.000Z', processStart: String(Number(start) + 1) }));
      lockCheckpointFolder(root).release();
      assert.deepEqual(readdirSync(root), []);
    }
  });

  it('a lock file that is not written yet is another job taking the folder right now; left so for long, it is taken over', () => {
    writeFileSync(join(root, lockFileName), '');
    assert.throws(() => lockCheckpointFolder(root), /^CheckpointError: the checkpoint folder .* is being taken by another job right now \(its lock file .* is not written yet\); try again in a moment$/);
    const old = new Date(Date.now() - 60_000);
    utimesSync(join(root, lockFileName), old, old);
    lockCheckpointFolder(root).release();
    assert.deepEqual(readdirSync(root), []);
  });

  it('a checkpointDir that is a file fails up front, naming it', () => {
    const file = join(root, 'ck');
    writeFileSync(file, '');
    assert.throws(() => ensureCheckpointFolder(file), (err: Error) => err instanceof CheckpointError && err.message.startsWith(`checkpointDir ${file} is not a folder: it is a file`));
    assert.throws(() => ensureCheckpointFolder(join(file, 'sub')), (err: Error) => err instanceof CheckpointError && err.message.startsWith(`checkpointDir ${join(file, 'sub')} is not a folder: a part of its path is a file`));
    ensureCheckpointFolder(join(root, 'new', 'ck'));
    assert.ok(existsSync(join(root, 'new', 'ck')));
  });
});

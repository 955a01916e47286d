import assert from 'node:assert/strict';
import type { Tensor } from '@tensorflow/tfjs-core';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CheckpointError, existingRun, mergeOptimizerStates, prepareCheckpointFolder, sliceOptimizerState, type OptimizerState } from '../../../../src/training/job/checkpoint';

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

  /** A folder as a run leaves it: epoch-N folders with trainer.json, latest.json naming `latest`. */
  function runOf(epochs: number[], latest?: number): void {
    for (const e of epochs) {
      mkdirSync(join(root, `epoch-${e}`));
      writeFileSync(join(root, `epoch-${e}`, 'trainer.json'), JSON.stringify({ epochsDone: e, globalStep: 4 * e, job: 'mnist', savedAt: `2026-11-2${e}T10:00:00.000Z` }));
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
    assert.equal(existingRun(root)?.latest, undefined, 'latest.json naming a folder that is not there');
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

  it('resuming keeps the run, but moves aside epochs past latest.json (another run\'s), and a run with nothing whole to resume', () => {
    runOf([1, 2], 2);
    assert.equal(prepareCheckpointFolder(root, true, at), undefined);
    assert.deepEqual(readdirSync(root).sort(), ['epoch-1', 'epoch-2', 'latest.json']);
    // What the bug left: a new run's latest.json at epoch-1 among the old run's epoch-2, epoch-3.
    runOf([3]);
    writeFileSync(join(root, 'latest.json'), JSON.stringify({ dir: 'epoch-1', epoch: 1 }));
    assert.match(prepareCheckpointFolder(root, true, at) ?? '', /^epoch-2 … epoch-3 in .* came after the checkpoint latest\.json names \(epoch-1\), so they are another run's: moved to /);
    assert.deepEqual(readdirSync(root).sort(), ['epoch-1', 'latest.json', previous]);
    assert.deepEqual(readdirSync(join(root, previous)).sort(), ['epoch-2', 'epoch-3']);
    rmSync(join(root, 'latest.json'));
    assert.match(prepareCheckpointFolder(root, true, new Date(at.getTime() + 1000)) ?? '', /no latest\.json naming a whole one\): moved to .*; there is no whole checkpoint to resume from, so this run starts at epoch 1$/);
    assert.deepEqual(readdirSync(root).sort(), [previous, 'previous-2026-11-25T23-41-08Z']);
  });
});

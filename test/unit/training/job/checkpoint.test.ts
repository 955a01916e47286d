import assert from 'node:assert/strict';
import type { Tensor } from '@tensorflow/tfjs-core';
import { CheckpointError, mergeOptimizerStates, sliceOptimizerState, type OptimizerState } from '../../../../src/training/job/checkpoint';

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

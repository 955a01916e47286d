import assert from 'node:assert/strict';
import { NumericParzen } from '../../../src/tuning/tpe';

const unit = { low: 0, high: 1, step: 0, to: (v: number): number => v, from: (x: number): number => x };
const close = (actual: readonly number[], expected: readonly number[]): void => {
  assert.equal(actual.length, expected.length);
  actual.forEach((a, i) => assert.ok(Math.abs(a - expected[i]) < 1e-9, `sigma ${i}: ${a} vs ${expected[i]} in [${actual.join(', ')}]`));
};

describe('TPE Parzen estimator bandwidths (Optuna 3.x/4.x)', () => {
  it('measures neighbour distances with the prior centre among the points, so kernels next to it are narrower', () => {
    // Points 0.2, 0.3, (prior 0.5), 0.9 on [0, 1]: distances 0.1, 0.2, 0.4; magic clip at 1/min(100, 3 + 2).
    close(new NumericParzen(unit, [0.2, 0.3, 0.9], [1, 1, 1], 1).sigmas, [0.2, 0.2, 0.4, 1]);
    // One observation: its only neighbour is the prior centre, not the far endpoint.
    close(new NumericParzen(unit, [0.1], [1], 1).sigmas, [0.4, 1]);
  });

  it('keeps the observations in their order, the prior last as a domain-wide kernel at the centre', () => {
    const p = new NumericParzen(unit, [0.9, 0.2, 0.3], [1, 1, 1], 1);
    assert.deepEqual(p.mus, [0.9, 0.2, 0.3, 0.5]);
    close(p.sigmas, [0.4, 0.2, 0.2, 1]);
    close(p.weights, [0.25, 0.25, 0.25, 0.25]);
  });
});

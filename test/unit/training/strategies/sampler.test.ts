import assert from 'node:assert/strict';
import { batchRows, epochOrder, permutation, shardIndices, stepsPerEpoch } from '../../../../src/training/strategies/sampler';

const shards = (datasetSize: number, worldSize: number, epoch: number, seed = 42): Int32Array[] =>
  Array.from({ length: worldSize }, (_, rank) => shardIndices({ datasetSize, worldSize, rank, seed, epoch }));

describe('distributed sampler', () => {
  it('gives each rank a disjoint shard, and together they cover the dataset exactly once per epoch', () => {
    for (const worldSize of [1, 2, 3, 4]) {
      for (const epoch of [0, 1, 2]) {
        const all = shards(120, worldSize, epoch).flatMap((s) => [...s]);
        assert.equal(all.length, 120);
        assert.deepEqual([...all].sort((a, b) => a - b), Array.from({ length: 120 }, (_, i) => i), `world ${worldSize}, epoch ${epoch}`);
      }
    }
  });

  it('pads the shards to equal length by repeating the first shuffled indices, like DistributedSampler', () => {
    const s = shards(10, 4, 0);
    assert.deepEqual(s.map((x) => x.length), [3, 3, 3, 3]);
    const all = s.flatMap((x) => [...x]);
    assert.equal(new Set(all).size, 10, 'every sample is still read');
    const order = permutation(10, 42);
    // Positions 10 and 11 of the padded order are the first two shuffled indices again.
    assert.deepEqual([s[2][2], s[3][2]], [order[0], order[1]]);
  });

  it('reshuffles every epoch from seed + epoch, identically on every rank', () => {
    const e0 = shards(100, 2, 0);
    const e1 = shards(100, 2, 1);
    assert.notDeepEqual([...e0[0]], [...e1[0]]);
    assert.deepEqual([...shards(100, 2, 1)[0]], [...e1[0]], 'the same seed and epoch give the same shard');
    assert.notDeepEqual([...shards(100, 2, 0, 7)[0]], [...e0[0]], 'another seed gives another order');
  });

  it('makes global step k of W workers read the same samples as step k of one worker with the global batch', () => {
    const n = 96, global = 16, world = 4, local = global / world;
    const single = shards(n, 1, 3)[0];
    const ranks = shards(n, world, 3);
    for (let k = 0; k < n / global; k++) {
      const fromSingle = [...single.subarray(k * global, (k + 1) * global)].sort((a, b) => a - b);
      const fromRanks = ranks.flatMap((s) => [...s.subarray(k * local, (k + 1) * local)]).sort((a, b) => a - b);
      assert.deepEqual(fromRanks, fromSingle, `step ${k}`);
    }
  });

  it('counts steps with a short last batch and honours a step limit', () => {
    assert.equal(stepsPerEpoch(100, 32), 4);
    assert.equal(stepsPerEpoch(100, 32, 2), 2);
    assert.throws(() => shardIndices({ datasetSize: 10, worldSize: 2, rank: 2, seed: 0, epoch: 0 }), /rank 2 is outside a world of 2/);
  });

  it('the global batches of an epoch (dp coordinator, pipeline first stage) cover every row once, the last one short, reshuffled next epoch', () => {
    const order = epochOrder(103, 7, 0);
    const rows: number[] = [];
    for (let step = 0; step * 25 < order.length; step++) {
      const batch = batchRows(order, step, 25);
      assert.equal(batch.length, step === 4 ? 3 : 25, `batch ${step}`);
      rows.push(...batch);
    }
    assert.deepEqual([...rows].sort((a, b) => a - b), Array.from({ length: 103 }, (_, i) => i));
    assert.deepEqual(rows, [...order]);
    assert.notDeepEqual([...epochOrder(103, 7, 1)], rows, 'epoch 1 reads another order');
    assert.equal(batchRows(order, 5, 25).length, 0, 'past the end: no rows');
  });
});

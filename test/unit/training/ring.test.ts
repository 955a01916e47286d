import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BucketedAllReduce, Ring, RingError } from '../../../src/training/ring';
import { seededRandom } from '../../../src/training/sampler';

async function ringOf(worldSize: number, dir: string): Promise<Ring[]> {
  return Promise.all(Array.from({ length: worldSize }, (_, rank) => Ring.join({ rank, worldSize, dir, connectTimeoutMs: 5000 })));
}

function randomArray(n: number, seed: number): Float32Array {
  const r = seededRandom(seed);
  return Float32Array.from({ length: n }, () => r() * 2 - 1);
}

describe('ring all-reduce over Unix domain sockets', () => {
  let dir: string;
  let rings: Ring[] = [];
  beforeEach(() => { dir = mkdtempSync(join(tmpdir(), 'gw-ring-')); });
  afterEach(() => {
    for (const r of rings) r.close();
    rings = [];
    rmSync(dir, { recursive: true, force: true });
  });

  for (const worldSize of [2, 3, 4]) {
    it(`sums buffers of ${worldSize} ranks, also lengths that do not split evenly or are shorter than the ring`, async () => {
      rings = await ringOf(worldSize, dir);
      for (const n of [1000, 7, 1, 2, 100_003]) {
        const inputs = rings.map((_, rank) => randomArray(n, n * 10 + rank));
        const expected = new Float64Array(n);
        for (const a of inputs) for (let i = 0; i < n; i++) expected[i] += a[i];
        const outputs = inputs.map((a) => a.slice());
        await Promise.all(rings.map((r, rank) => r.allReduceSum(outputs[rank])));
        for (const out of outputs) {
          for (let i = 0; i < n; i++) assert.ok(Math.abs(out[i] - expected[i]) < 1e-5, `n=${n} i=${i}: ${out[i]} vs ${expected[i]}`);
        }
        assert.deepEqual(outputs[0], outputs[worldSize - 1], 'every rank ends with the same bits');
      }
    });
  }

  it('averages gradients in buckets, last layer first, with the loss riding along', async () => {
    rings = await ringOf(2, dir);
    const grads = [0, 1].map((rank) => [randomArray(300, rank), randomArray(50, rank + 10), randomArray(7, rank + 20)]);
    const loss = [new Float32Array([1]), new Float32Array([3])];
    const expected = grads[0].map((g, i) => g.map((v, j) => (v + grads[1][i][j]) / 2));
    // 64-byte buckets: 16 floats each, so many buckets and one that straddles two tensors.
    await Promise.all(rings.map((r, rank) => new BucketedAllReduce(r, 64).mean(grads[rank], loss[rank])));
    for (const rank of [0, 1]) {
      grads[rank].forEach((g, i) => g.forEach((v, j) => assert.ok(Math.abs(v - expected[i][j]) < 1e-6)));
      assert.equal(loss[rank][0], 2);
    }
  });

  it('broadcasts rank 0 to all ranks', async () => {
    rings = await ringOf(3, dir);
    const bufs = rings.map((_, rank) => new Float32Array([rank + 1, 10 * (rank + 1)]));
    await Promise.all(rings.map((r, rank) => r.broadcast(bufs[rank])));
    for (const b of bufs) assert.deepEqual([...b], [1, 10]);
  });

  it('fails the other ranks with the lost peer when one rank goes away mid-ring', async () => {
    rings = await ringOf(3, dir);
    rings[1].close();
    const results = await Promise.allSettled([rings[0].allReduceSum(new Float32Array(10)), rings[2].allReduceSum(new Float32Array(10))]);
    for (const r of results) {
      assert.equal(r.status, 'rejected');
      assert.ok(r.reason instanceof RingError && r.reason.peerLost, String(r.status === 'rejected' ? r.reason : ''));
    }
    assert.match(String((results[1] as PromiseRejectedResult).reason), /rank 1/);
  });

  it('gives up with a clear error when a neighbour never shows up', async () => {
    await assert.rejects(Ring.join({ rank: 0, worldSize: 2, dir, connectTimeoutMs: 200 }), /cannot connect to rank 1|rank 1 did not connect/);
  });
});

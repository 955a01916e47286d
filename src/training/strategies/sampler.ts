/**
 * Which samples each worker reads, with torch.utils.data.DistributedSampler's semantics:
 * every epoch the indices are shuffled from `seed + epoch` (the same permutation on every
 * rank, so no coordination is needed), padded by repeating the first indices to a multiple
 * of the world size, and rank r takes every world-size-th index starting at r. The shards
 * are disjoint, equally long, and cover the dataset exactly once (plus the padding).
 *
 * With a local batch of B/W, global step k of W workers reads exactly the indices that step
 * k of a single worker with batch B reads, which is what makes ddp equal to single.
 */
import { mulberry32 } from '../../common/random';

/** The sampler's stream: mulberry32 from the seed mixed with the golden-ratio constant. */
export function seededRandom(seed: number): () => number {
  return mulberry32(seed ^ 0x9e3779b9);
}

/** A permutation of 0..n-1 (Fisher–Yates) from the seed. */
export function permutation(n: number, seed: number): Int32Array {
  const out = new Int32Array(n);
  for (let i = 0; i < n; i++) out[i] = i;
  const rand = seededRandom(seed);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    const t = out[i];
    out[i] = out[j];
    out[j] = t;
  }
  return out;
}

export interface ShardOptions {
  readonly datasetSize: number;
  readonly worldSize: number;
  readonly rank: number;
  readonly seed: number;
  readonly epoch: number;
  readonly shuffle?: boolean;
}

/**
 * The order of the whole dataset in `epoch` as one process that reads every global batch sees it
 * (dp's coordinator, a pipeline's first stage): the shard of a world of one.
 */
export function epochOrder(datasetSize: number, seed: number, epoch: number): Int32Array {
  return shardIndices({ datasetSize, worldSize: 1, rank: 0, seed, epoch });
}

/** The rows of global batch `step` in an epoch's order; the last batch of an epoch may be short. */
export function batchRows(order: Int32Array, step: number, batchSize: number): Int32Array {
  return order.subarray(step * batchSize, Math.min(order.length, (step + 1) * batchSize));
}

/** The indices rank `rank` reads in `epoch`, in order. Length: ceil(n / worldSize) on every rank. */
export function shardIndices(o: ShardOptions): Int32Array {
  if (o.datasetSize < 1) throw new Error('the dataset is empty');
  if (o.rank < 0 || o.rank >= o.worldSize) throw new Error(`rank ${o.rank} is outside a world of ${o.worldSize}`);
  const order = o.shuffle === false ? permutation(o.datasetSize, 0).map((_, i) => i) : permutation(o.datasetSize, o.seed + o.epoch);
  const perRank = Math.ceil(o.datasetSize / o.worldSize);
  const out = new Int32Array(perRank);
  for (let i = 0; i < perRank; i++) out[i] = order[(o.rank + i * o.worldSize) % o.datasetSize];
  return out;
}

/** Steps in an epoch for a shard of `shardSize` read `localBatch` at a time (the last batch may be short). */
export function stepsPerEpoch(shardSize: number, localBatch: number, maxSteps?: number): number {
  const steps = Math.ceil(shardSize / localBatch);
  return maxSteps === undefined ? steps : Math.min(steps, maxSteps);
}

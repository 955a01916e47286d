/**
 * The pure parts of the `pipeline` strategy, kept free of TF.js so they can be tested alone:
 * how layers are balanced over stages, the order each stage runs its micro-batches in
 * (GPipe fill-drain or 1F1B), how a batch is cut into micro-batches, and the bubble.
 *
 * Balancing. Rank 0 times one forward+backward of every layer on one real micro-batch (after
 * one untimed warm-up pass, so that kernel setup and first-call compilation are not counted),
 * then splits the layers into `stages` contiguous, non-empty groups so that the slowest group
 * is as fast as possible: the classic linear-partition problem, solved exactly by dynamic
 * programming over (layers so far, stages so far) in O(stages · layers²). Ties go to the split
 * that puts boundaries earliest, so every run over the same costs gives the same split.
 */

export type PipelineSchedule = 'gpipe' | '1f1b';

/** One unit of work on one stage: the forward or the backward pass of micro-batch `micro`. */
export interface PipelineOp {
  readonly kind: 'F' | 'B';
  readonly micro: number;
}

/**
 * Splits `costs` (one per layer, in order) into `stages` contiguous non-empty groups minimising
 * the largest group sum. Returns the `stages + 1` boundaries: stage s runs layers
 * [bounds[s], bounds[s+1]).
 */
export function balanceStages(costs: readonly number[], stages: number): number[] {
  const n = costs.length;
  if (!Number.isInteger(stages) || stages < 1) throw new Error(`stages must be a whole number ≥ 1, got ${stages}`);
  if (n < stages) throw new Error(`the model has ${n} layer${n === 1 ? '' : 's'} with work to do, too few for ${stages} pipeline stages`);
  if (costs.some((c) => !(c >= 0) || !Number.isFinite(c))) throw new Error(`layer costs must be finite and ≥ 0, got [${costs.join(', ')}]`);
  const prefix = [0];
  for (const c of costs) prefix.push(prefix[prefix.length - 1] + c);
  // best[s][i]: the smallest possible max-stage cost of the first i layers over s stages.
  const best: number[][] = Array.from({ length: stages + 1 }, () => new Array<number>(n + 1).fill(Infinity));
  const cut: number[][] = Array.from({ length: stages + 1 }, () => new Array<number>(n + 1).fill(0));
  best[0][0] = 0;
  for (let s = 1; s <= stages; s++) {
    for (let i = s; i <= n - (stages - s); i++) {
      for (let j = s - 1; j < i; j++) {
        const v = Math.max(best[s - 1][j], prefix[i] - prefix[j]);
        if (v < best[s][i]) {
          best[s][i] = v;
          cut[s][i] = j;
        }
      }
    }
  }
  const bounds = new Array<number>(stages + 1);
  bounds[stages] = n;
  for (let s = stages, i = n; s > 0; s--) {
    i = cut[s][i];
    bounds[s - 1] = i;
  }
  return bounds;
}

/** The largest stage cost of a split (what limits the pipeline's throughput). */
export function slowestStage(costs: readonly number[], bounds: readonly number[]): number {
  let worst = 0;
  for (let s = 0; s + 1 < bounds.length; s++) {
    let sum = 0;
    for (let i = bounds[s]; i < bounds[s + 1]; i++) sum += costs[i];
    worst = Math.max(worst, sum);
  }
  return worst;
}

/**
 * The order stage `stage` of `stages` runs the `micro` micro-batches of one batch in.
 * - gpipe (fill-drain): every forward, then every backward (in the same micro-batch order on
 *   every stage, so each link carries its frames in the order they are awaited).
 * - 1f1b (PipeDream-Flush): `stages - stage - 1` warm-up forwards, then one forward and one
 *   backward in turn, then the remaining backwards. The same bubble as GPipe, but a stage holds
 *   at most `stages - stage` micro-batches of activations instead of all of them.
 */
export function stageSchedule(kind: PipelineSchedule, stage: number, stages: number, micro: number): PipelineOp[] {
  const ops: PipelineOp[] = [];
  if (kind === 'gpipe') {
    for (let k = 0; k < micro; k++) ops.push({ kind: 'F', micro: k });
    for (let k = 0; k < micro; k++) ops.push({ kind: 'B', micro: k });
    return ops;
  }
  const warmup = Math.min(stages - stage - 1, micro);
  let f = 0;
  let b = 0;
  for (; f < warmup; f++) ops.push({ kind: 'F', micro: f });
  while (f < micro) {
    ops.push({ kind: 'F', micro: f++ });
    ops.push({ kind: 'B', micro: b++ });
  }
  while (b < micro) ops.push({ kind: 'B', micro: b++ });
  return ops;
}

/** Cuts `n` rows into `micro` near-equal consecutive parts; returns `micro + 1` offsets. Parts may be empty when n < micro. */
export function microBatchBounds(n: number, micro: number): number[] {
  return Array.from({ length: micro + 1 }, (_, k) => Math.floor((k * n) / micro));
}

export interface StageTime {
  readonly rank: number;
  /** Layers [from, to) of the model. */
  readonly layers: readonly [number, number];
  /** Time spent computing forward and backward passes of micro-batches (and the step). */
  readonly busyMs: number;
  /** Time within the training steps spent waiting for a neighbour (the bubble, and transfers). */
  readonly idleMs: number;
}

/** Idle over busy + idle, summed over stages: the measured bubble, to set against (p-1)/(m+p-1). */
export function bubbleFraction(stages: readonly Pick<StageTime, 'busyMs' | 'idleMs'>[]): number {
  const busy = stages.reduce((s, t) => s + t.busyMs, 0);
  const idle = stages.reduce((s, t) => s + t.idleMs, 0);
  return busy + idle > 0 ? idle / (busy + idle) : 0;
}

/** GPipe's ideal bubble, (p-1)/(m+p-1), for p stages of equal cost and m micro-batches. */
export function idealBubble(stages: number, micro: number): number {
  return (stages - 1) / (micro + stages - 1);
}

/** What a pipeline job adds to `job/done` metrics. */
export interface PipelineMetrics {
  readonly schedule: PipelineSchedule;
  readonly stages: readonly StageTime[];
  readonly microBatches: number;
  /** The forward+backward time of every layer on one micro-batch, as measured for the split (ms). */
  readonly layerCostsMs: readonly number[];
  /** Measured: idle / (busy + idle) over all stages and steps. */
  readonly bubbleFraction: number;
  /** (p-1)/(m+p-1), the bubble of a perfectly balanced pipeline with free transfers. */
  readonly idealBubbleFraction: number;
}

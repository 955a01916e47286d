/**
 * Trial schedulers: FIFO (every trial runs to its end) and ASHA, with the semantics of Ray Tune's
 * `AsyncHyperBandScheduler` (python/ray/tune/schedulers/async_hyperband.py):
 *
 * - bracket s has rungs at gracePeriod · rf^(k+s) for k < int(log(maxT/gracePeriod)/log(rf) − s + 1);
 * - a new trial joins a bracket drawn with probability softmax(number of rungs);
 * - a result at or past maxT stops the trial (it is recorded when the trial completes);
 * - otherwise, at the highest milestone the result has reached and the trial has not yet recorded,
 *   its metric (negated for mode min) is compared with the (1 − 1/rf) percentile (linear
 *   interpolation, NaN ignored) of the values already recorded there, then recorded; below the
 *   cutoff stops it. An empty rung lets it go on. Only that one milestone is judged per result.
 * - a result without the time attribute or the metric is ignored.
 */
import { Rng, streams } from './rng';
import type { AshaOptions, Mode } from './spec';

export type Result = Readonly<Record<string, unknown>>;

export type Decision =
  | { readonly action: 'continue' }
  | { readonly action: 'stop'; readonly reason: 'asha' | 'maxT'; readonly message: string };

export interface Scheduler {
  onTrialAdd(trialId: number): void;
  onTrialResult(trialId: number, result: Result): Decision;
  /** The trial ended (itself, or stopped by a decision); `last` is its final result. */
  onTrialComplete(trialId: number, last: Result | undefined): void;
  /** The trial failed or was interrupted: forget it without recording anything. */
  onTrialRemove(trialId: number): void;
}

const go: Decision = { action: 'continue' };

export class FifoScheduler implements Scheduler {
  onTrialAdd(): void { /* every trial runs to its end */ }
  onTrialResult(): Decision { return go; }
  onTrialComplete(): void { /* nothing recorded */ }
  onTrialRemove(): void { /* nothing recorded */ }
}

/** Ray's `np.nanpercentile(values, p)` with the default linear interpolation. */
export function percentile(values: readonly number[], p: number): number | null {
  const xs = values.filter((v) => !Number.isNaN(v)).sort((a, b) => a - b);
  if (!xs.length) return null;
  const pos = (p / 100) * (xs.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.min(xs.length - 1, lo + 1);
  return xs[lo] + (pos - lo) * (xs[hi] - xs[lo]);
}

export interface Rung { readonly milestone: number; readonly recorded: Map<number, number> }

export class Bracket {
  /** Highest milestone first, as Ray keeps them. */
  readonly rungs: Rung[];

  constructor(minT: number, maxT: number, readonly rf: number, s: number) {
    const n = Math.trunc(Math.log(maxT / minT) / Math.log(rf) - s + 1);
    this.rungs = [];
    for (let k = n - 1; k >= 0; k--) this.rungs.push({ milestone: minT * rf ** (k + s), recorded: new Map() });
  }

  cutoff(recorded: ReadonlyMap<number, number>): number | null {
    return recorded.size ? percentile([...recorded.values()], (1 - 1 / this.rf) * 100) : null;
  }

  /** `reward` is the metric signed so that larger is better. */
  onResult(trialId: number, t: number, reward: number): { stop: boolean; milestone?: number; cutoff?: number | null } {
    for (const rung of this.rungs) {
      if (t < rung.milestone || rung.recorded.has(trialId)) continue;
      const cutoff = this.cutoff(rung.recorded);
      const stop = cutoff !== null && reward < cutoff;
      rung.recorded.set(trialId, reward);
      return { stop, milestone: rung.milestone, cutoff };
    }
    return { stop: false };
  }
}

export class AshaScheduler implements Scheduler {
  readonly brackets: Bracket[];
  private readonly trialBracket = new Map<number, Bracket>();
  private readonly sign: number;

  constructor(private readonly opts: AshaOptions, private readonly metric: string, mode: Mode, private readonly seed = 0) {
    if (!(opts.maxT > 0) || !(opts.gracePeriod > 0) || opts.gracePeriod > opts.maxT || !(opts.reductionFactor > 1) || !(opts.brackets > 0)) {
      throw new Error(`invalid ASHA options ${JSON.stringify(opts)}`);
    }
    this.sign = mode === 'max' ? 1 : -1;
    this.brackets = Array.from({ length: opts.brackets }, (_, s) => new Bracket(opts.gracePeriod, opts.maxT, opts.reductionFactor, s));
  }

  /** Ray draws the bracket with numpy's global RNG; ours is keyed by seed and trial so a resumed run draws the same. */
  onTrialAdd(trialId: number): void {
    const sizes = this.brackets.map((b) => b.rungs.length);
    const max = Math.max(...sizes);
    const idx = new Rng(this.seed, streams.asha, trialId).weighted(sizes.map((n) => Math.exp(n - max)));
    this.trialBracket.set(trialId, this.brackets[idx]);
  }

  bracketOf(trialId: number): number {
    const b = this.trialBracket.get(trialId);
    return b ? this.brackets.indexOf(b) : -1;
  }

  private values(result: Result): { t: number; reward: number } | null {
    const t = result[this.opts.timeAttr];
    const m = result[this.metric];
    if (typeof t !== 'number' || typeof m !== 'number') return null;
    return { t, reward: this.sign * m };
  }

  onTrialResult(trialId: number, result: Result): Decision {
    const v = this.values(result);
    if (!v) return go;
    if (v.t >= this.opts.maxT) return { action: 'stop', reason: 'maxT', message: `reached ${this.opts.timeAttr} ${v.t} (maxT ${this.opts.maxT})` };
    const bracket = this.trialBracket.get(trialId);
    if (!bracket) throw new Error(`ASHA: result for trial ${trialId}, which was never added`);
    const r = bracket.onResult(trialId, v.t, v.reward);
    if (!r.stop) return go;
    const shown = (x: number): string => String(Number((this.sign * x).toPrecision(4)));
    return {
      action: 'stop', reason: 'asha',
      message: `${this.metric} ${shown(v.reward)} is worse than the cutoff ${shown(r.cutoff as number)} at ${this.opts.timeAttr} ${r.milestone}`,
    };
  }

  onTrialComplete(trialId: number, last: Result | undefined): void {
    const bracket = this.trialBracket.get(trialId);
    const v = last ? this.values(last) : null;
    if (bracket && v) bracket.onResult(trialId, v.t, v.reward);
    this.trialBracket.delete(trialId);
  }

  onTrialRemove(trialId: number): void {
    this.trialBracket.delete(trialId);
  }
}

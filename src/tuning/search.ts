/**
 * Searchers: what the next trial's parameters are. A suggestion is a pure function of the seed, the
 * trial's index and the history (every trial so far with its parameters, state and metric), so
 * there is no searcher state to save: a resumed experiment rebuilds it by passing the journal's
 * history, and continues as the uninterrupted run would have.
 */
import { GpSearcher } from './gp';
import { Rng, streams } from './rng';
import type { Params, Space } from './space';
import { totalTrials, type Mode, type TuneSpec } from './spec';
import { TpeSearcher } from './tpe';

/** One trial as a searcher sees it. */
export interface Observation {
  readonly index: number;
  readonly params: Params;
  /** done: ran to its end (or maxT); pruned: stopped early by the scheduler; running: no result yet to trust. */
  readonly state: 'running' | 'done' | 'pruned' | 'failed';
  /** The last reported metric as a loss (negated for mode max); null without a report. */
  readonly loss: number | null;
  /** The time attribute reached (for ranking pruned trials, as Optuna does). */
  readonly step: number;
}

export interface Searcher {
  /** How many trials the experiment creates. */
  readonly total: number;
  suggest(index: number, history: readonly Observation[]): Params;
}

/** The metric as a quantity to minimise. */
export function toLoss(metric: number, mode: Mode): number {
  return mode === 'max' ? -metric : metric;
}

/**
 * Ray's BasicVariantGenerator: trial i takes grid point i mod gridSize (so numSamples repeats the
 * grid) and samples every other parameter from its prior. `grid` and `random` are the same
 * generator; `grid` only insists the space has a grid.
 */
export class VariantSearcher implements Searcher {
  readonly total: number;
  constructor(private readonly space: Space, private readonly seed: number, numSamples: number) {
    this.total = numSamples * space.gridSize;
  }

  suggest(index: number): Params {
    return this.space.sample(new Rng(this.seed, streams.sample, index), this.space.gridPoint(index));
  }
}

export function createSearcher(spec: TuneSpec): Searcher {
  const { space, search } = spec;
  const total = totalTrials(spec);
  switch (search.algorithm) {
    case 'grid': case 'random': return new VariantSearcher(space, search.seed, spec.numSamples);
    case 'tpe': return new TpeSearcher(space, { seed: search.seed, total, nStartupTrials: search.nStartupTrials });
    case 'gp': return new GpSearcher(space, { seed: search.seed, total, nStartupTrials: search.nStartupTrials });
  }
}

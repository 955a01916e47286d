/**
 * What a searcher is (search.ts picks one per experiment; gp.ts, tpe.ts and variant.ts are the
 * searchers): the interface and the history it sees, in a module of their own so that the
 * searchers and the registry that imports them do not import each other.
 */
import type { Params } from './space';
import type { Mode } from './spec';

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

/**
 * The searcher registry: a spec's `search.algorithm` to the searcher (variant.ts, tpe.ts, gp.ts)
 * that says what the next trial's parameters are. A suggestion is a pure function of the seed, the
 * trial's index and the history (every trial so far with its parameters, state and metric), so
 * there is no searcher state to save: a resumed experiment rebuilds it by passing the journal's
 * history, and continues as the uninterrupted run would have.
 */
import { GpSearcher } from './gp';
import type { Searcher } from './searcher';
import { totalTrials, type TuneSpec } from './spec';
import { TpeSearcher } from './tpe';
import { VariantSearcher } from './variant';

/** The searcher of a spec's `search.algorithm`. */
export function createSearcher(spec: TuneSpec): Searcher {
  const { space, search } = spec;
  const total = totalTrials(spec);
  switch (search.algorithm) {
    case 'grid': case 'random': return new VariantSearcher(space, search.seed, spec.numSamples);
    case 'tpe': return new TpeSearcher(space, { seed: search.seed, total, nStartupTrials: search.nStartupTrials });
    case 'gp': return new GpSearcher(space, { seed: search.seed, total, nStartupTrials: search.nStartupTrials });
  }
}

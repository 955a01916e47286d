/** The grid and random searchers (search.ts picks them for `grid` and `random`). */
import { Rng, streams } from './rng';
import type { Params, Space } from './space';
import type { Searcher } from './searcher';

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

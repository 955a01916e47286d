import * as assert from 'node:assert/strict';
import { fitHyper, GpModel, GpSearcher, logMarginalLikelihood } from '../../../src/tuning/gp';
import { Rng } from '../../../src/tuning/rng';
import type { Observation, Searcher } from '../../../src/tuning/searcher';
import { VariantSearcher } from '../../../src/tuning/variant';
import { Space, type Params } from '../../../src/tuning/space';
import { defaultWeights, gamma, splitTrials, TpeSearcher } from '../../../src/tuning/tpe';

/** Runs a searcher sequentially on `f` and returns the history. */
function optimise(s: Searcher, f: (p: Params) => number, n: number): Observation[] {
  const history: Observation[] = [];
  for (let i = 0; i < n; i++) {
    const params = s.suggest(i, history);
    history.push({ index: i, params, state: 'done', loss: f(params), step: 1 });
  }
  return history;
}
const bestOf = (h: Observation[]): number => Math.min(...h.map((o) => o.loss as number));
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

describe('searchers: grid and random (Ray BasicVariantGenerator)', () => {
  it('repeats the whole grid numSamples times, sampling the rest per point', () => {
    const space = Space.parse({ a: { grid: [1, 2, 3] }, lr: { uniform: [0, 1] } });
    const s = new VariantSearcher(space, 0, 2);
    assert.equal(s.total, 6);
    const configs = Array.from({ length: 6 }, (_, i) => space.build(s.suggest(i)));
    assert.deepEqual(configs.map((c) => c.a), [1, 2, 3, 1, 2, 3]);
    assert.equal(new Set(configs.map((c) => c.lr)).size, 6, 'lr sampled afresh for every trial');
    assert.deepEqual(s.suggest(4), new VariantSearcher(space, 0, 2).suggest(4), 'same seed and index, same trial');
  });
});

describe('searchers: TPE (Optuna defaults)', () => {
  it('has Optuna\'s gamma and default weights', () => {
    assert.deepEqual([1, 10, 11, 100, 250, 1000].map(gamma), [1, 1, 2, 10, 25, 25]);
    assert.deepEqual(defaultWeights(3), [1, 1, 1]);
    const w = defaultWeights(30);
    assert.equal(w.length, 30);
    assert.ok(Math.abs(w[0] - 1 / 30) < 1e-12 && Math.abs(w[4] - 1) < 1e-12, 'linspace(1/n, 1, n-25) then 25 ones');
    assert.ok(w.slice(0, 5).every((x, i, a) => i === 0 || x > a[i - 1]));
    assert.deepEqual(w.slice(5), new Array(25).fill(1));
  });

  it('ranks pruned trials after finished ones, by step reached', () => {
    const o = (index: number, state: Observation['state'], loss: number, step: number): Observation => ({ index, params: {}, state, loss, step });
    const trials = [o(0, 'pruned', 0.01, 1), o(1, 'done', 5, 10), o(2, 'pruned', 3, 4), ...Array.from({ length: 8 }, (_, i) => o(3 + i, 'done', 6 + i, 10))];
    const { below, above } = splitTrials(trials);
    assert.equal(gamma(11), 2);
    assert.deepEqual(below.map((t) => t.index), [1, 3], 'the best finished trials, even though a pruned one had a lower loss');
    assert.ok(above.some((t) => t.index === 0) && above.some((t) => t.index === 2));
  });

  it('samples at random for the 10 startup trials, then concentrates near the optimum', () => {
    const space = Space.parse({ x: { uniform: [-5, 5] }, y: { uniform: [-5, 5] } });
    const f = (p: Params): number => (p.x - 1.5) ** 2 + (p.y + 2) ** 2;
    const tpeBest: number[] = [], randBest: number[] = [];
    for (let seed = 0; seed < 7; seed++) {
      const tpe = new TpeSearcher(space, { seed, total: 60 });
      const random = new VariantSearcher(space, seed, 60);
      const h = optimise(tpe, f, 60);
      // The startup trials are exactly the random searcher's draws for the same seed.
      for (let i = 0; i < 10; i++) assert.deepEqual(h[i].params, random.suggest(i));
      tpeBest.push(bestOf(h));
      randBest.push(bestOf(optimise(random, f, 60)));
    }
    assert.ok(median(tpeBest) < median(randBest) / 2, `tpe ${median(tpeBest)} vs random ${median(randBest)}`);
  });

  it('learns which choice is best and handles conditional, integer and log parameters', () => {
    const space = Space.parse({
      opt: { choice: [{ name: 'sgd', momentum: { uniform: [0, 1] } }, { name: 'adam' }, { name: 'bad' }] },
      lr: { loguniform: [1e-5, 1] }, layers: { randint: [1, 9] },
    });
    const f = (p: Params): number => [0, 0.5, 3][p.opt] + (p.opt === 0 ? (p['opt[0].momentum'] - 0.9) ** 2 : 0) + Math.abs(Math.log10(p.lr) + 3) + Math.abs(p.layers - 4) / 4;
    const h = optimise(new TpeSearcher(space, { seed: 3, total: 80 }), f, 80);
    const late = h.slice(40).map((o) => o.params.opt);
    assert.ok(late.filter((c) => c === 0).length > late.filter((c) => c === 2).length * 2, `late choices ${late.join('')}`);
    for (const o of h) {
      assert.ok(Number.isInteger(o.params.layers) && o.params.layers >= 1 && o.params.layers <= 8);
      assert.equal('opt[0].momentum' in o.params, o.params.opt === 0);
    }
  });

  it('gives the same suggestion for the same seed and history (a resume rebuilds it)', () => {
    const space = Space.parse({ x: { uniform: [0, 1] }, c: { choice: ['a', 'b'] } });
    const h = optimise(new TpeSearcher(space, { seed: 9, total: 30 }), (p) => p.x + p.c, 25);
    assert.deepEqual(new TpeSearcher(space, { seed: 9, total: 30 }).suggest(25, h), new TpeSearcher(space, { seed: 9, total: 30 }).suggest(25, h));
  });
});

describe('searchers: Gaussian process with expected improvement', function () {
  this.timeout(30_000); // dozens of GP fits: seconds on a loaded 2-core machine

  it('has the analytic gradient of the log marginal likelihood', () => {
    const rng = new Rng(1);
    const X = Array.from({ length: 12 }, () => Float64Array.from([rng.next(), rng.next()]));
    const y = X.map((x) => Math.sin(6 * x[0]) + x[1] * x[1]);
    const h = { logLs: Float64Array.from([Math.log(0.4), Math.log(0.7)]), logSf2: 0.2, logSn2: Math.log(0.01) };
    const f = logMarginalLikelihood(X, y, h)!;
    const e = 1e-5;
    const numeric = [0, 1, 2, 3].map((k) => {
      const bump = (s: number): number => {
        const ls = Float64Array.from(h.logLs);
        let sf2 = h.logSf2, sn2 = h.logSn2;
        if (k < 2) ls[k] += s; else if (k === 2) sf2 += s; else sn2 += s;
        return logMarginalLikelihood(X, y, { logLs: ls, logSf2: sf2, logSn2: sn2 })!.value;
      };
      return (bump(e) - bump(-e)) / (2 * e);
    });
    numeric.forEach((g, k) => assert.ok(Math.abs(g - f.grad[k]) < 1e-4 * Math.max(1, Math.abs(g)), `∂/∂θ${k}: numeric ${g}, analytic ${f.grad[k]}`));
  });

  it('fits length scales that make a smooth function predictable', () => {
    const X = Array.from({ length: 15 }, (_, i) => Float64Array.from([i / 14]));
    const y = X.map((x) => Math.sin(5 * x[0]));
    const h = fitHyper(X, y, new Rng(0));
    const m = GpModel.fit(X, y, h)!;
    const p = m.predict(Float64Array.from([0.5 / 14 + 3 / 14]));
    assert.ok(Math.abs(p.mu - Math.sin(5 * (3.5 / 14))) < 0.02, `mu ${p.mu}`);
    assert.ok(p.sd < 0.1);
  });

  it('beats random search on a smooth 2-D function', () => {
    const space = Space.parse({ x: { uniform: [-5, 5] }, y: { uniform: [-5, 5] } });
    const f = (p: Params): number => (p.x - 1.5) ** 2 + (p.y + 2) ** 2;
    const gp: number[] = [], rnd: number[] = [];
    for (let seed = 0; seed < 3; seed++) {
      gp.push(bestOf(optimise(new GpSearcher(space, { seed, total: 25 }), f, 25)));
      rnd.push(bestOf(optimise(new VariantSearcher(space, seed, 25), f, 25)));
    }
    assert.ok(median(gp) < median(rnd) / 5, `gp ${median(gp)} vs random ${median(rnd)}`);
  });

  it('sends a parallel worker elsewhere when a trial is already running at the best point', () => {
    const space = Space.parse({ x: { uniform: [0, 1] } });
    const f = (p: Params): number => Math.sin(8 * p.x) + p.x;
    const gp = new GpSearcher(space, { seed: 4, total: 30, nStartupTrials: 5 });
    const h = optimise(gp, f, 5);
    // The same index draws the same candidates, so only the running trial can change the answer.
    const first = gp.suggest(6, h);
    const second = gp.suggest(6, [...h, { index: 5, params: first, state: 'running', loss: null, step: 0 }]);
    assert.ok(Math.abs(first.x - second.x) > 0.01, `both at ${first.x} / ${second.x}`);
    assert.deepEqual(gp.suggest(6, h), first, 'deterministic for a seed and history');
  });
});

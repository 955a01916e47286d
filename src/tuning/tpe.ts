/**
 * Tree-structured Parzen Estimator with Optuna's TPESampler defaults (univariate): 10 startup
 * trials sampled at random, 24 EI candidates drawn from l(x), gamma(n) = min(ceil(0.1 n), 25),
 * `default_weights` (the oldest trials ramped down once there are more than 25), a prior component
 * of weight 1 whose centre counts among the neighbours that set the bandwidths (as Optuna 3.x
 * to 4.8), the "magic clip" of bandwidths, endpoints not considered. Trials stopped early
 * (pruned) rank after every finished trial, by step reached then value, as Optuna ranks them.
 * Parameters are sampled one at a time in define-by-run order, each from the trials that have it,
 * which is how conditional parameters are handled.
 */
import { Rng, normalCdf, normalQuantile, streams } from './rng';
import { sampleDim, type Dim, type Params, type Space } from './space';
import type { Observation, Searcher } from './searcher';

const eps = 1e-12;

export interface TpeOptions {
  readonly seed: number;
  readonly total: number;
  readonly nStartupTrials?: number;
  readonly nEiCandidates?: number;
  readonly priorWeight?: number;
}

export function gamma(n: number): number {
  return Math.min(Math.ceil(0.1 * n), 25);
}

/** Optuna's `default_weights`: flat for up to 25 trials, else a ramp from 1/n over the oldest. */
export function defaultWeights(n: number): number[] {
  if (n === 0) return [];
  if (n < 25) return new Array<number>(n).fill(1);
  const ramp = n - 25 === 1 ? [1 / n] : Array.from({ length: n - 25 }, (_, i) => 1 / n + (i * (1 - 1 / n)) / (n - 26));
  return [...ramp, ...new Array<number>(25).fill(1)];
}

/** How a dimension looks to the estimator: a value on [low, high] (log or cdf scale) with an optional step. */
interface Numeric { readonly low: number; readonly high: number; readonly step: number; to(v: number): number; from(x: number): number }

function numeric(d: Dim): Numeric | null {
  switch (d.kind) {
    case 'float': {
      const q = d.q;
      if (d.log) return { low: Math.log(d.lo), high: Math.log(d.hi), step: 0, to: Math.log, from: (x) => clampQ(Math.exp(x), d.lo, d.hi, q) };
      if (q === null) return { low: d.lo, high: d.hi, step: 0, to: (v) => v, from: (x) => Math.min(d.hi, Math.max(d.lo, x)) };
      const lo = Math.ceil(d.lo / q - 1e-9) * q, hi = Math.floor(d.hi / q + 1e-9) * q;
      return { low: lo, high: hi, step: q, to: (v) => v, from: (x) => clampQ(x, d.lo, d.hi, q) };
    }
    case 'int':
      if (d.log) return { low: Math.log(d.lo - 0.5), high: Math.log(d.hi + 0.5), step: 0, to: Math.log, from: (x) => Math.min(d.hi, Math.max(d.lo, Math.round(Math.exp(x)))) };
      return { low: d.lo, high: d.hi, step: d.q, to: (v) => v, from: (x) => Math.min(d.hi, Math.max(d.lo, d.lo + d.q * Math.round((x - d.lo) / d.q))) };
    case 'normal':
      return { low: 0, high: 1, step: 0, to: (v) => normalCdf((v - d.mean) / d.sd), from: (u) => d.mean + d.sd * normalQuantile(Math.min(1 - 1e-12, Math.max(1e-12, u))) };
    case 'categorical': case 'grid': return null;
  }
}

function clampQ(x: number, lo: number, hi: number, q: number | null): number {
  if (q === null) return Math.min(hi, Math.max(lo, x));
  const k = Math.min(Math.floor(hi / q + 1e-9), Math.max(Math.ceil(lo / q - 1e-9), Math.round(x / q)));
  const dec = (String(q).split('.')[1] ?? '').length;
  return Number((k * q).toFixed(Math.min(20, dec)));
}

function logSumExp(xs: readonly number[]): number {
  const m = Math.max(...xs);
  if (!Number.isFinite(m)) return m;
  let s = 0;
  for (const x of xs) s += Math.exp(x - m);
  return m + Math.log(s);
}

function normalized(w: number[]): number[] {
  const s = w.reduce((a, b) => a + b, 0);
  return w.map((x) => x / s);
}

/** A univariate Parzen estimator over one numeric dimension (a truncated-normal mixture). */
export class NumericParzen {
  readonly mus: number[];
  readonly sigmas: number[];
  readonly weights: number[];

  constructor(readonly dim: Numeric, observations: readonly number[], obsWeights: readonly number[], priorWeight: number) {
    const { low, high, step } = dim;
    const n = observations.length;
    const priorMu = 0.5 * (low + high);
    // As Optuna 3.x/4.x (to 4.8): the prior's centre is one of the points whose neighbour
    // distances give the bandwidths, so kernels next to the centre are narrower.
    const points = [...observations, priorMu];
    const sorted = points.map((x, i) => [x, i] as const).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    const m = points.length;
    const withEnds = [low - step / 2, ...sorted.map((s) => s[0]), high + step / 2];
    const sortedSigmas = sorted.map((_, j) => Math.max(withEnds[j + 1] - withEnds[j], withEnds[j + 2] - withEnds[j + 1]));
    if (withEnds.length >= 4) {
      sortedSigmas[0] = withEnds[2] - withEnds[1];
      sortedSigmas[m - 1] = withEnds[m] - withEnds[m - 1];
    }
    const width = high - low + step;
    const minSigma = width / Math.min(100, 1 + n + 1);
    const sigmas = new Array<number>(m);
    sorted.forEach(([, i], j) => { sigmas[i] = Math.min(width, Math.max(minSigma, sortedSigmas[j])); });
    sigmas.length = n;
    this.mus = [...observations, priorMu];
    this.sigmas = [...sigmas, width];
    this.weights = normalized([...obsWeights, priorWeight]);
  }

  sample(rng: Rng): number {
    const k = rng.weighted(this.weights);
    const { low, high, step } = this.dim;
    const mu = this.mus[k], sigma = this.sigmas[k];
    const a = normalCdf((low - step / 2 - mu) / sigma), b = normalCdf((high + step / 2 - mu) / sigma);
    const u = a + (b - a) * rng.next();
    const x = mu + sigma * normalQuantile(Math.min(1 - 1e-15, Math.max(1e-15, u)));
    const clipped = Math.min(high + step / 2, Math.max(low - step / 2, x));
    return step ? Math.min(high, Math.max(low, low + step * Math.round((clipped - low) / step))) : clipped;
  }

  logPdf(x: number): number {
    const { low, high, step } = this.dim;
    const terms = this.mus.map((mu, k) => {
      const sigma = this.sigmas[k];
      const pAccept = normalCdf((high + step / 2 - mu) / sigma) - normalCdf((low - step / 2 - mu) / sigma);
      let lp: number;
      if (step) {
        const p = normalCdf((x + step / 2 - mu) / sigma) - normalCdf((x - step / 2 - mu) / sigma);
        lp = Math.log(p + eps) - Math.log(pAccept + eps);
      } else {
        const z = (x - mu) / Math.max(sigma, eps);
        lp = -0.5 * z * z - Math.log(Math.sqrt(2 * Math.PI) * sigma) - Math.log(pAccept + eps);
      }
      return Math.log(this.weights[k]) + lp;
    });
    return logSumExp(terms);
  }
}

/** Optuna's categorical estimator: each kernel is its observation plus prior mass spread evenly. */
export class CategoricalParzen {
  private readonly probs: number[];

  constructor(size: number, observations: readonly number[], obsWeights: readonly number[], priorWeight: number) {
    const n = observations.length;
    if (n === 0) {
      this.probs = new Array<number>(size).fill(1 / size);
      return;
    }
    const kernels = n + 1;
    const mix = normalized([...obsWeights, priorWeight]);
    this.probs = new Array<number>(size).fill(0);
    for (let k = 0; k < kernels; k++) {
      const row = new Array<number>(size).fill(priorWeight / kernels);
      if (k < n) row[observations[k]] += 1;
      const rs = row.reduce((a, b) => a + b, 0);
      for (let c = 0; c < size; c++) this.probs[c] += (mix[k] * row[c]) / rs;
    }
  }

  sample(rng: Rng): number {
    return rng.weighted(this.probs);
  }

  logPdf(c: number): number {
    return Math.log(this.probs[c]);
  }
}

/** Optuna's split: finished trials by loss, then pruned ones by step reached (more is better) and loss. */
export function splitTrials(trials: readonly Observation[]): { below: Observation[]; above: Observation[] } {
  const done = trials.filter((t) => t.state === 'done').sort((a, b) => (a.loss as number) - (b.loss as number) || a.index - b.index);
  const pruned = trials.filter((t) => t.state === 'pruned').sort((a, b) => b.step - a.step || (a.loss ?? Infinity) - (b.loss ?? Infinity) || a.index - b.index);
  const ranked = [...done, ...pruned];
  const nBelow = gamma(ranked.length);
  const byIndex = (a: Observation, b: Observation): number => a.index - b.index;
  return { below: ranked.slice(0, nBelow).sort(byIndex), above: ranked.slice(nBelow).sort(byIndex) };
}

export class TpeSearcher implements Searcher {
  readonly total: number;
  private readonly nStartup: number;
  private readonly nCandidates: number;
  private readonly priorWeight: number;

  constructor(private readonly space: Space, private readonly opts: TpeOptions) {
    this.total = opts.total;
    this.nStartup = opts.nStartupTrials ?? 10;
    this.nCandidates = opts.nEiCandidates ?? 24;
    this.priorWeight = opts.priorWeight ?? 1;
  }

  suggest(index: number, history: readonly Observation[]): Params {
    const usable = history.filter((h) => (h.state === 'done' && h.loss !== null && Number.isFinite(h.loss)) || h.state === 'pruned');
    if (usable.length < this.nStartup) return this.space.sample(new Rng(this.opts.seed, streams.sample, index));
    const rng = new Rng(this.opts.seed, streams.tpe, index);
    const { below, above } = splitTrials(usable);
    const params: Params = {};
    for (const d of this.space.dims) {
      if (!this.space.isActive(d, params)) continue;
      params[d.path] = this.sampleDim(d, below, above, rng);
    }
    return params;
  }

  private sampleDim(d: Dim, below: readonly Observation[], above: readonly Observation[], rng: Rng): number {
    const bl = below.filter((t) => d.path in t.params);
    const ab = above.filter((t) => d.path in t.params);
    if (!bl.length && !ab.length) return sampleDim(d, rng);
    const num = numeric(d);
    let l: { sample(r: Rng): number; logPdf(x: number): number };
    let g: { logPdf(x: number): number };
    if (num) {
      l = new NumericParzen(num, bl.map((t) => num.to(t.params[d.path])), defaultWeights(bl.length), this.priorWeight);
      g = new NumericParzen(num, ab.map((t) => num.to(t.params[d.path])), defaultWeights(ab.length), this.priorWeight);
    } else {
      const size = (d as { size: number }).size;
      l = new CategoricalParzen(size, bl.map((t) => t.params[d.path]), defaultWeights(bl.length), this.priorWeight);
      g = new CategoricalParzen(size, ab.map((t) => t.params[d.path]), defaultWeights(ab.length), this.priorWeight);
    }
    let best = NaN, bestScore = -Infinity;
    for (let i = 0; i < this.nCandidates; i++) {
      const x = l.sample(rng);
      const score = l.logPdf(x) - g.logPdf(x);
      if (score > bestScore || Number.isNaN(best)) { best = x; bestScore = score; }
    }
    return num ? num.from(best) : best;
  }
}

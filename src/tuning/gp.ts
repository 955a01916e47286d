/**
 * Bayesian optimisation with a Gaussian-process surrogate (the course notes' recipe):
 *
 * - inputs: each parameter on the unit interval (log scale where it samples on one, the normal's
 *   cdf for randn), choices one-hot, parameters of an unchosen conditional group at the centre;
 * - outputs: the loss, standardised;
 * - kernel: Matérn 5/2 with one length scale per input (ARD), a signal and a noise variance, fitted
 *   by maximising the log marginal likelihood (analytic gradient, Adam in log space, a few restarts);
 * - acquisition: expected improvement over the best observed loss, maximised over random
 *   candidates and perturbations of the best trials, then refined locally;
 * - trials still running are "kriging believers": added to the data at the model's own mean, which
 *   removes their variance so parallel workers are not sent to the same point.
 *
 * Cholesky factorisations come from ml-matrix.
 */
import { CholeskyDecomposition, Matrix } from 'ml-matrix';
import { Rng, normalCdf, normalPdf, streams } from './rng';
import { fromUnit, toUnit, type Params, type Space } from './space';
import type { Observation, Searcher } from './searcher';

export interface GpOptions {
  readonly seed: number;
  readonly total: number;
  readonly nStartupTrials?: number;
  /** Random candidates for the acquisition (default 512). */
  readonly nCandidates?: number;
  /** Restarts of the hyperparameter fit (default 3). */
  readonly restarts?: number;
}

/** log length scales (one per input), log signal variance, log noise variance. */
export interface Hyper { readonly logLs: Float64Array; readonly logSf2: number; readonly logSn2: number }

const bounds = { logLs: [Math.log(0.01), Math.log(20)], logSf2: [Math.log(0.05), Math.log(20)], logSn2: [Math.log(1e-6), Math.log(1)] } as const;
const sqrt5 = Math.sqrt(5);

function matern52(r: number, sf2: number): number {
  return sf2 * (1 + sqrt5 * r + (5 / 3) * r * r) * Math.exp(-sqrt5 * r);
}

/** K's Cholesky factor (ml-matrix), adding jitter to the diagonal until K is positive definite. */
function cholesky(K: readonly Float64Array[]): { L: Matrix; chol: CholeskyDecomposition } | null {
  const n = K.length;
  for (let jitter = 0; jitter <= 6; jitter++) {
    const A = new Matrix(n, n);
    for (let i = 0; i < n; i++) {
      const row = K[i];
      for (let j = 0; j < n; j++) A.set(i, j, row[j]);
      if (jitter > 0) A.set(i, i, row[i] + 1e-8 * 10 ** jitter);
    }
    const chol = new CholeskyDecomposition(A);
    if (chol.isPositiveDefinite()) return { L: chol.lowerTriangularMatrix, chol };
    if (n === 0) break;
  }
  return null;
}

/** A GP conditioned on (X, y) with fixed hyperparameters. */
export class GpModel {
  private readonly ls: Float64Array;
  private readonly sf2: number;
  private readonly L: Float64Array[];
  private readonly alpha: Float64Array;

  private constructor(private readonly X: readonly Float64Array[], h: Hyper, L: Matrix, alpha: Matrix) {
    this.ls = h.logLs.map(Math.exp);
    this.sf2 = Math.exp(h.logSf2);
    this.L = L.to2DArray().map((r) => Float64Array.from(r));
    this.alpha = Float64Array.from(alpha.getColumn(0));
  }

  static fit(X: readonly Float64Array[], y: readonly number[], h: Hyper): GpModel | null {
    const c = cholesky(kernelMatrix(X, h).K);
    if (!c) return null;
    return new GpModel(X, h, c.L, c.chol.solve(Matrix.columnVector([...y])));
  }

  predict(x: Float64Array): { mu: number; sd: number } {
    const n = this.X.length;
    const k = new Float64Array(n);
    for (let i = 0; i < n; i++) k[i] = matern52(dist(x, this.X[i], this.ls), this.sf2);
    let mu = 0;
    for (let i = 0; i < n; i++) mu += k[i] * this.alpha[i];
    // v = L⁻¹ k by forward substitution; var = k(x,x) − vᵀv.
    const v = new Float64Array(n);
    let vv = 0;
    for (let i = 0; i < n; i++) {
      const Li = this.L[i];
      let s = k[i];
      for (let j = 0; j < i; j++) s -= Li[j] * v[j];
      v[i] = s / Li[i];
      vv += v[i] * v[i];
    }
    return { mu, sd: Math.sqrt(Math.max(1e-12, this.sf2 - vv)) };
  }
}

function dist(a: Float64Array, b: Float64Array, ls: Float64Array): number {
  let s = 0;
  for (let d = 0; d < a.length; d++) {
    const z = (a[d] - b[d]) / ls[d];
    s += z * z;
  }
  return Math.sqrt(s);
}

/**
 * The kernel matrix with noise (K) and, for the gradient, each pair's scaled distance r and
 * e^(−√5 r), so that the likelihood's gradient needs no second exp per pair.
 */
function kernelMatrix(X: readonly Float64Array[], h: Hyper): { K: Float64Array[]; r: Float64Array[]; e: Float64Array[] } {
  const n = X.length;
  const ls = h.logLs.map(Math.exp);
  const sf2 = Math.exp(h.logSf2), sn2 = Math.exp(h.logSn2);
  const K = Array.from({ length: n }, () => new Float64Array(n));
  const r = Array.from({ length: n }, () => new Float64Array(n));
  const e = Array.from({ length: n }, () => new Float64Array(n));
  for (let i = 0; i < n; i++) {
    K[i][i] = sf2 + sn2;
    e[i][i] = 1;
    for (let j = 0; j < i; j++) {
      const rij = dist(X[i], X[j], ls);
      const eij = Math.exp(-sqrt5 * rij);
      K[i][j] = K[j][i] = sf2 * (1 + sqrt5 * rij + (5 / 3) * rij * rij) * eij;
      r[i][j] = rij;
      e[i][j] = eij;
    }
  }
  return { K, r, e };
}

/**
 * K⁻¹ = L⁻ᵀ L⁻¹ from K's Cholesky factor (a triangular inverse: cheaper than solving against I).
 * L⁻¹ is kept transposed (row j holds column j), so that both loops walk rows.
 */
function inverseFromCholesky(Lm: Matrix): Float64Array[] {
  const n = Lm.rows;
  const L = Lm.to2DArray();
  const M = Array.from({ length: n }, () => new Float64Array(n)); // M[j][i] = (L⁻¹)[i][j]
  for (let j = 0; j < n; j++) {
    const Mj = M[j];
    Mj[j] = 1 / L[j][j];
    for (let i = j + 1; i < n; i++) {
      let s = 0;
      const Lrow = L[i];
      for (let k = j; k < i; k++) s += Lrow[k] * Mj[k];
      Mj[i] = -s / Lrow[i];
    }
  }
  const inv = Array.from({ length: n }, () => new Float64Array(n));
  for (let i = 0; i < n; i++) {
    const Mi = M[i];
    for (let j = 0; j <= i; j++) {
      const Mj = M[j];
      let s = 0;
      for (let k = i; k < n; k++) s += Mi[k] * Mj[k];
      inv[i][j] = inv[j][i] = s;
    }
  }
  return inv;
}

/** The log marginal likelihood and its gradient in (logLs…, logSf2, logSn2). */
export function logMarginalLikelihood(X: readonly Float64Array[], y: readonly number[], h: Hyper): { value: number; grad: Float64Array } | null {
  const n = X.length, D = h.logLs.length;
  const { K, r, e } = kernelMatrix(X, h);
  const c = cholesky(K);
  if (!c) return null;
  const alpha = c.chol.solve(Matrix.columnVector([...y])).getColumn(0);
  const Kinv = inverseFromCholesky(c.L);
  let logDet = 0;
  for (let i = 0; i < n; i++) logDet += Math.log(c.L.get(i, i));
  let yAlpha = 0;
  for (let i = 0; i < n; i++) yAlpha += y[i] * alpha[i];
  const value = -0.5 * yAlpha - logDet - 0.5 * n * Math.log(2 * Math.PI);
  // W = ααᵀ − K⁻¹; dL/dθ = ½ tr(W ∂K/∂θ) = ½ Σ_ij W_ij ∂K_ij/∂θ.
  const ls = h.logLs.map(Math.exp);
  const sf2 = Math.exp(h.logSf2), sn2 = Math.exp(h.logSn2);
  const inv2 = ls.map((l) => 1 / (l * l));
  const grad = new Float64Array(D + 2);
  const gLs = new Float64Array(D);
  let gSf2 = 0, gSn2 = 0;
  for (let i = 0; i < n; i++) {
    const Xi = X[i], Ki = K[i], Kinvi = Kinv[i], ri = r[i], ei = e[i], ai = alpha[i];
    const wii = 0.5 * (ai * ai - Kinvi[i]);
    gSf2 += wii * sf2;
    gSn2 += wii * sn2;
    for (let j = 0; j < i; j++) {
      const w = ai * alpha[j] - Kinvi[j]; // symmetric pairs counted twice
      gSf2 += w * Ki[j];
      const rij = ri[j];
      const wc = w * (5 / 3) * sf2 * (1 + sqrt5 * rij) * ei[j];
      const Xj = X[j];
      for (let d = 0; d < D; d++) {
        const diff = Xi[d] - Xj[d];
        gLs[d] += wc * diff * diff * inv2[d];
      }
    }
  }
  grad.set(gLs, 0);
  grad[D] = gSf2;
  grad[D + 1] = gSn2;
  return { value, grad };
}

function clampHyper(v: Float64Array, D: number): void {
  for (let d = 0; d < D; d++) v[d] = Math.min(bounds.logLs[1], Math.max(bounds.logLs[0], v[d]));
  v[D] = Math.min(bounds.logSf2[1], Math.max(bounds.logSf2[0], v[D]));
  v[D + 1] = Math.min(bounds.logSn2[1], Math.max(bounds.logSn2[0], v[D + 1]));
}

const unpack = (v: Float64Array, D: number): Hyper => ({ logLs: v.slice(0, D), logSf2: v[D], logSn2: v[D + 1] });

/** Maximises the marginal likelihood from a default start and `restarts − 1` random ones (projected Adam). */
export function fitHyper(X: readonly Float64Array[], y: readonly number[], rng: Rng, restarts = 3, iters = 60): Hyper {
  const D = X[0].length;
  let best: { h: Hyper; value: number } | null = null;
  for (let r = 0; r < restarts; r++) {
    const v = new Float64Array(D + 2);
    for (let d = 0; d < D; d++) v[d] = r === 0 ? Math.log(0.3) : rng.uniform(Math.log(0.05), Math.log(2));
    v[D] = r === 0 ? 0 : rng.uniform(-1, 1);
    v[D + 1] = r === 0 ? Math.log(1e-2) : rng.uniform(Math.log(1e-5), Math.log(0.1));
    const m = new Float64Array(D + 2), s = new Float64Array(D + 2);
    const lr = 0.08, b1 = 0.9, b2 = 0.999;
    let local: { h: Hyper; value: number } | null = null;
    for (let t = 1; t <= iters; t++) {
      const f = logMarginalLikelihood(X, y, unpack(v, D));
      if (!f || !Number.isFinite(f.value)) break;
      if (!local || f.value > local.value) local = { h: unpack(v, D), value: f.value };
      for (let k = 0; k < D + 2; k++) {
        const g = f.grad[k];
        m[k] = b1 * m[k] + (1 - b1) * g;
        s[k] = b2 * s[k] + (1 - b2) * g * g;
        v[k] += (lr * (m[k] / (1 - b1 ** t))) / (Math.sqrt(s[k] / (1 - b2 ** t)) + 1e-8);
      }
      clampHyper(v, D);
    }
    if (local && (!best || local.value > best.value)) best = local;
  }
  return best?.h ?? { logLs: new Float64Array(D).fill(Math.log(0.3)), logSf2: 0, logSn2: Math.log(1e-2) };
}

export function expectedImprovement(mu: number, sd: number, best: number): number {
  const z = (best - mu) / sd;
  return (best - mu) * normalCdf(z) + sd * normalPdf(z);
}

export class GpSearcher implements Searcher {
  readonly total: number;
  private readonly nStartup: number;

  constructor(private readonly space: Space, private readonly opts: GpOptions) {
    this.total = opts.total;
    this.nStartup = opts.nStartupTrials ?? 10;
  }

  /** The input vector of a trial: unit coordinates, one-hot choices, inactive dims at the centre. */
  encode(params: Params): Float64Array {
    const out: number[] = [];
    for (const d of this.space.dims) {
      const v = params[d.path];
      if (d.kind === 'categorical' || d.kind === 'grid') {
        for (let c = 0; c < d.size; c++) out.push(v === c ? 1 : 0);
      } else out.push(v === undefined ? 0.5 : toUnit(d, v));
    }
    return Float64Array.from(out);
  }

  suggest(index: number, history: readonly Observation[]): Params {
    const data = history.filter((h) => (h.state === 'done' || h.state === 'pruned') && h.loss !== null && Number.isFinite(h.loss));
    const prior = new Rng(this.opts.seed, streams.sample, index);
    if (data.length < this.nStartup) return this.space.sample(prior);
    const rng = new Rng(this.opts.seed, streams.gp, index);

    const X = data.map((h) => this.encode(h.params));
    const raw = data.map((h) => h.loss as number);
    const mean = raw.reduce((a, b) => a + b, 0) / raw.length;
    const sd = Math.sqrt(raw.reduce((a, b) => a + (b - mean) ** 2, 0) / raw.length) || 1;
    const y = raw.map((v) => (v - mean) / sd);
    const hyper = fitHyper(X, y, new Rng(this.opts.seed, streams.gpFit, index), this.opts.restarts ?? 3);
    let model = GpModel.fit(X, y, hyper);
    if (!model) return this.space.sample(prior);

    const pending = history.filter((h) => h.state === 'running').map((h) => this.encode(h.params));
    if (pending.length) {
      const fitted = model;
      const believed = pending.map((x) => fitted.predict(x).mu);
      model = GpModel.fit([...X, ...pending], [...y, ...believed], hyper) ?? model;
    }
    const best = Math.min(...y);
    const score = (p: Params): number => {
      const { mu, sd: s } = model.predict(this.encode(p));
      return expectedImprovement(mu, s, best);
    };

    // Candidates: prior samples plus perturbations of the best trials so far.
    const candidates: Params[] = [];
    for (let i = 0; i < (this.opts.nCandidates ?? 512); i++) candidates.push(this.space.sample(rng));
    const top = [...data].sort((a, b) => (a.loss as number) - (b.loss as number)).slice(0, 5);
    for (const t of top) for (let i = 0; i < 20; i++) candidates.push(this.perturb(t.params, 0.05, rng));
    const scored = candidates.map((p) => ({ p, s: score(p) })).sort((a, b) => b.s - a.s);

    // Local refinement of the three best: Gaussian steps in unit space, halving on failure.
    let winner = scored[0];
    for (const start of scored.slice(0, 3)) {
      let cur = start, radius = 0.05;
      for (let step = 0; step < 30 && radius > 1e-4; step++) {
        const next = this.perturb(cur.p, radius, rng);
        const s = score(next);
        if (s > cur.s) cur = { p: next, s };
        else radius *= 0.7;
      }
      if (cur.s > winner.s) winner = cur;
    }
    return winner.p;
  }

  /** Moves every numeric parameter by N(0, radius) in unit space; rarely re-draws a choice. */
  private perturb(params: Params, radius: number, rng: Rng): Params {
    const next: Params = {};
    for (const d of this.space.dims) {
      const v = params[d.path];
      if (v === undefined) continue;
      if (d.kind === 'categorical' || d.kind === 'grid') next[d.path] = rng.next() < 0.1 ? rng.int(0, d.size) : v;
      else next[d.path] = fromUnit(d, toUnit(d, v) + radius * rng.normal());
    }
    return this.space.sample(rng, next);
  }
}

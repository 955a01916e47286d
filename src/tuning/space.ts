/**
 * The search space of a tune spec: Ray Tune's primitives (`uniform`, `quniform`, `loguniform`,
 * `qloguniform`, `randint` (hi exclusive), `qrandint` (hi inclusive), `lograndint` (hi exclusive),
 * `randn`, `choice`, `grid`), nested objects as groups, and `choice` options that are objects
 * holding their own parameters (conditional groups: `momentum` exists only when `sgd` is chosen).
 *
 * Searchers never see the nested config. They work on `Params`: one number per active dimension,
 * keyed by its path (`model.layers`, `optimizer[0].momentum`), the option index for `choice` and
 * `grid`. `Space.build` turns Params into the config the trial receives.
 */
import { normalCdf, normalQuantile, type Rng } from './rng';

export type Params = Record<string, number>;
export type Config = Record<string, unknown>;

/** Where a dimension lives: it is active only when every ancestor choice picked this option. */
export interface Condition { readonly path: string; readonly option: number }

interface DimBase { readonly path: string; readonly when: readonly Condition[] }
export interface FloatDim extends DimBase { readonly kind: 'float'; readonly lo: number; readonly hi: number; readonly log: boolean; readonly q: number | null }
/** Integers lo..hi inclusive in steps of q (log: q is 1). */
export interface IntDim extends DimBase { readonly kind: 'int'; readonly lo: number; readonly hi: number; readonly log: boolean; readonly q: number }
export interface NormalDim extends DimBase { readonly kind: 'normal'; readonly mean: number; readonly sd: number }
export interface CategoricalDim extends DimBase { readonly kind: 'categorical'; readonly size: number }
export interface GridDim extends DimBase { readonly kind: 'grid'; readonly size: number }
export type Dim = FloatDim | IntDim | NormalDim | CategoricalDim | GridDim;

type Node =
  | { readonly t: 'dim'; readonly dim: Dim; readonly options?: readonly Node[] }
  | { readonly t: 'group'; readonly fields: ReadonlyArray<readonly [string, Node]> }
  | { readonly t: 'const'; readonly value: unknown };

export const primitives = ['uniform', 'quniform', 'loguniform', 'qloguniform', 'randint', 'qrandint', 'lograndint', 'randn', 'choice', 'grid'] as const;
export type Primitive = typeof primitives[number];

/** A semantic error in the space (the JSON Schema checked the shapes), with the JSON path of the field. */
export class SpaceError extends Error {
  constructor(readonly path: string, message: string) {
    super(message);
  }
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A `{"uniform":[0,1]}`-style leaf: an object with exactly one key that names a primitive. */
function primitiveOf(v: unknown): Primitive | null {
  if (!isPlainObject(v)) return null;
  const keys = Object.keys(v);
  return keys.length === 1 && (primitives as readonly string[]).includes(keys[0]) ? keys[0] as Primitive : null;
}

/** Decimal places of a step such as 0.05, so that 3 * 0.1 prints as 0.3. */
function decimals(q: number): number {
  const s = String(q);
  if (s.includes('e-')) return Number(s.split('e-')[1]) + (s.split('e-')[0].split('.')[1]?.length ?? 0);
  return s.split('.')[1]?.length ?? 0;
}

function quantize(x: number, q: number, lo: number, hi: number): number {
  const kLo = Math.ceil(lo / q - 1e-9);
  const kHi = Math.floor(hi / q + 1e-9);
  const k = Math.min(kHi, Math.max(kLo, Math.round(x / q)));
  return Number((k * q).toFixed(Math.min(20, decimals(q))));
}

export class Space {
  /** Every dimension, parents before the dimensions their options hold (define-by-run order). */
  readonly dims: readonly Dim[];
  private readonly root: Node;

  private constructor(root: Node, dims: Dim[]) {
    this.root = root;
    this.dims = dims;
  }

  /** `where` is the JSON path of the space in the spec, for messages (`/space`). */
  static parse(raw: unknown, where = '/space'): Space {
    const dims: Dim[] = [];
    if (!isPlainObject(raw)) throw new SpaceError(where, 'must be an object of parameters');
    const root = parseNode(raw, '', where, [], dims, false);
    if (root.t !== 'group') throw new SpaceError(where, 'must be an object of parameters, not a single distribution');
    return new Space(root, dims);
  }

  /** Grid parameters sorted by path, as Ray sorts its grid variables. */
  get gridDims(): readonly GridDim[] {
    const key = (d: GridDim): string[] => d.path.split('.');
    const cmp = (a: string[], b: string[]): number => {
      for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
      return a.length - b.length;
    };
    return this.dims.filter((d): d is GridDim => d.kind === 'grid').sort((a, b) => cmp(key(a), key(b)));
  }

  /** How many points the grid parameters span (1 without any). */
  get gridSize(): number {
    return this.gridDims.reduce((n, d) => n * d.size, 1);
  }

  /** The grid indices of point k, the first grid parameter (by path) varying fastest, as Ray's variant generator. */
  gridPoint(k: number): Params {
    const out: Params = {};
    let rest = k % this.gridSize;
    for (const d of this.gridDims) {
      out[d.path] = rest % d.size;
      rest = Math.floor(rest / d.size);
    }
    return out;
  }

  isActive(dim: Dim, params: Params): boolean {
    return dim.when.every((c) => params[c.path] === c.option);
  }

  /** Draws every active dimension not in `fixed` from its prior. */
  sample(rng: Rng, fixed: Params = {}): Params {
    const out: Params = {};
    for (const d of this.dims) {
      if (!this.isActive(d, out)) continue;
      out[d.path] = d.path in fixed ? fixed[d.path] : sampleDim(d, rng);
    }
    return out;
  }

  /** The nested config a trial receives. */
  build(params: Params): Config {
    return buildNode(this.root, params) as Config;
  }

  /**
   * The keys of the config that differ between trials, as key paths (`[['optimizer',
   * 'learningRate'], ['batchSize']]`): every dimension but a one-value grid or choice; a dimension
   * inside a choice option counts as its choice (the option decides the whole object). The other
   * keys are the experiment's fixed budget (`"epochs": 4`), the same in every trial.
   */
  variedPaths(): string[][] {
    const out = new Map<string, string[]>();
    for (const d of this.dims) {
      const top = d.path.split('[')[0];
      if (top === d.path && (d.kind === 'grid' || d.kind === 'categorical') && d.size <= 1) continue;
      out.set(top, top.split('.'));
    }
    return [...out.values()];
  }

  /** The config's leaves by path, for a table or a task name: `{lr: 0.01, 'optimizer': 'sgd', ...}`. */
  flatConfig(params: Params): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    const walk = (node: Node, prefix: string): void => {
      if (node.t === 'group') {
        for (const [k, child] of node.fields) walk(child, prefix ? `${prefix}.${k}` : k);
      } else if (node.t === 'dim') {
        const v = params[node.dim.path];
        if (v === undefined) return;
        if (node.options) {
          const opt = node.options[v];
          if (opt.t === 'group') {
            const name = opt.fields.find(([, n]) => n.t === 'const' && typeof n.value === 'string');
            out[prefix] = name ? (name[1] as { value: unknown }).value : `#${v}`;
            walk(opt, prefix);
          } else out[prefix] = buildNode(opt, params);
        } else out[prefix] = v;
      }
    };
    walk(this.root, '');
    return out;
  }
}

function parseNode(raw: unknown, path: string, where: string, when: Condition[], dims: Dim[], inOption: boolean): Node {
  const prim = primitiveOf(raw);
  if (prim) return parsePrimitive(prim, (raw as Record<string, unknown>)[prim], path, `${where}/${prim}`, when, dims, inOption);
  if (isPlainObject(raw)) {
    const fields: Array<readonly [string, Node]> = [];
    for (const [k, v] of Object.entries(raw)) {
      if (k.includes('.') || k.includes('[')) throw new SpaceError(`${where}/${escapePointer(k)}`, `parameter names may not contain '.' or '[' (got '${k}')`);
      fields.push([k, parseNode(v, path ? `${path}.${k}` : k, `${where}/${escapePointer(k)}`, when, dims, inOption)]);
    }
    return { t: 'group', fields };
  }
  return { t: 'const', value: raw };
}

function escapePointer(k: string): string {
  return k.replace(/~/g, '~0').replace(/\//g, '~1');
}

function numbers(args: unknown, n: number, where: string, what: string): number[] {
  if (!Array.isArray(args) || args.length !== n || !args.every((a) => typeof a === 'number' && Number.isFinite(a))) {
    throw new SpaceError(where, `expected [${what}] (${n} numbers)`);
  }
  return args as number[];
}

function parsePrimitive(prim: Primitive, args: unknown, path: string, where: string, when: Condition[], dims: Dim[], inOption: boolean): Node {
  if (!path) throw new SpaceError(where, 'the space must be an object of named parameters');
  const push = <D extends Dim>(d: D): Node => { dims.push(d); return { t: 'dim', dim: d }; };
  const range = (lo: number, hi: number, strict = true): void => {
    if (strict ? !(lo < hi) : !(lo <= hi)) throw new SpaceError(where, `lower bound ${lo} must be ${strict ? 'below' : 'at most'} the upper bound ${hi}`);
  };
  const positive = (v: number, name: string): void => {
    if (!(v > 0)) throw new SpaceError(where, `${name} must be greater than 0 (got ${v})`);
  };
  switch (prim) {
    case 'uniform': {
      const [lo, hi] = numbers(args, 2, where, 'lo, hi');
      range(lo, hi);
      return push<FloatDim>({ kind: 'float', path, when, lo, hi, log: false, q: null });
    }
    case 'quniform': {
      const [lo, hi, q] = numbers(args, 3, where, 'lo, hi, q');
      range(lo, hi); positive(q, 'q');
      if (Math.ceil(lo / q - 1e-9) > Math.floor(hi / q + 1e-9)) throw new SpaceError(where, `no multiple of ${q} lies in [${lo}, ${hi}]`);
      return push<FloatDim>({ kind: 'float', path, when, lo, hi, log: false, q });
    }
    case 'loguniform': case 'qloguniform': {
      const a = prim === 'loguniform' ? numbers(args, 2, where, 'lo, hi') : numbers(args, 3, where, 'lo, hi, q');
      const [lo, hi] = a;
      positive(lo, 'the lower bound of a log distribution'); range(lo, hi);
      const q = prim === 'qloguniform' ? a[2] : null;
      if (q !== null) {
        positive(q, 'q');
        if (Math.ceil(lo / q - 1e-9) > Math.floor(hi / q + 1e-9)) throw new SpaceError(where, `no multiple of ${q} lies in [${lo}, ${hi}]`);
      }
      return push<FloatDim>({ kind: 'float', path, when, lo, hi, log: true, q });
    }
    case 'randint': case 'lograndint': {
      const [lo, hi] = numbers(args, 2, where, 'lo, hi (exclusive)');
      if (!Number.isInteger(lo) || !Number.isInteger(hi)) throw new SpaceError(where, 'bounds must be integers');
      range(lo, hi);
      if (prim === 'lograndint') positive(lo, 'the lower bound of a log distribution');
      return push<IntDim>({ kind: 'int', path, when, lo, hi: hi - 1, log: prim === 'lograndint', q: 1 });
    }
    case 'qrandint': {
      const [lo, hi, q] = numbers(args, 3, where, 'lo, hi (inclusive), q');
      if (![lo, hi, q].every(Number.isInteger)) throw new SpaceError(where, 'bounds and q must be integers');
      range(lo, hi, false); positive(q, 'q');
      const qlo = Math.ceil(lo / q) * q;
      const qhi = Math.floor(hi / q) * q;
      if (qlo > qhi) throw new SpaceError(where, `no multiple of ${q} lies in [${lo}, ${hi}]`);
      return push<IntDim>({ kind: 'int', path, when, lo: qlo, hi: qhi, log: false, q });
    }
    case 'randn': {
      const [mean, sd] = numbers(args, 2, where, 'mean, sd');
      positive(sd, 'sd');
      return push<NormalDim>({ kind: 'normal', path, when, mean, sd });
    }
    case 'choice': {
      if (!Array.isArray(args) || args.length === 0) throw new SpaceError(where, 'expected a non-empty array of options');
      const dim: CategoricalDim = { kind: 'categorical', path, when, size: args.length };
      dims.push(dim);
      const options = (args as unknown[]).map((opt, i) => {
        if (!isPlainObject(opt) || primitiveOf(opt)) {
          if (primitiveOf(opt)) throw new SpaceError(`${where}/${i}`, 'a choice option may be a value or an object of parameters, not a bare distribution');
          return { t: 'const', value: opt } as const;
        }
        return parseNode(opt, `${path}[${i}]`, `${where}/${i}`, [...when, { path, option: i }], dims, true);
      });
      return { t: 'dim', dim, options };
    }
    case 'grid': {
      if (inOption) throw new SpaceError(where, 'grid may not sit inside a choice option (a conditional group); use choice there');
      if (!Array.isArray(args) || args.length === 0) throw new SpaceError(where, 'expected a non-empty array of values');
      const dim: GridDim = { kind: 'grid', path, when, size: args.length };
      dims.push(dim);
      return { t: 'dim', dim, options: (args as unknown[]).map((value) => ({ t: 'const', value }) as const) };
    }
  }
}

function buildNode(node: Node, params: Params): unknown {
  switch (node.t) {
    case 'const': return structuredClone(node.value);
    case 'group': {
      const out: Record<string, unknown> = {};
      for (const [k, child] of node.fields) {
        const v = buildNode(child, params);
        if (v !== undefined) out[k] = v;
      }
      return out;
    }
    case 'dim': {
      const v = params[node.dim.path];
      if (v === undefined) return undefined;
      return node.options ? buildNode(node.options[v], params) : v;
    }
  }
}

export function sampleDim(d: Dim, rng: Rng): number {
  switch (d.kind) {
    case 'float': {
      const x = d.log ? Math.exp(rng.uniform(Math.log(d.lo), Math.log(d.hi))) : rng.uniform(d.lo, d.hi);
      return d.q === null ? Math.min(d.hi, Math.max(d.lo, x)) : quantize(x, d.q, d.lo, d.hi);
    }
    case 'int':
      if (d.log) return Math.min(d.hi, Math.max(d.lo, Math.floor(Math.exp(rng.uniform(Math.log(d.lo), Math.log(d.hi + 1))))));
      return d.lo + d.q * rng.int(0, (d.hi - d.lo) / d.q + 1);
    case 'normal': return d.mean + d.sd * rng.normal();
    case 'categorical': case 'grid': return rng.int(0, d.size);
  }
}

/**
 * The unit-interval coordinate of a value, for the Bayesian searchers: linear or log scale as the
 * primitive samples it, the normal's cdf for `randn`, bins of equal width for integers and options.
 */
export function toUnit(d: Dim, v: number): number {
  switch (d.kind) {
    case 'float':
      return d.log ? (Math.log(v) - Math.log(d.lo)) / (Math.log(d.hi) - Math.log(d.lo)) : (v - d.lo) / (d.hi - d.lo);
    case 'int':
      if (d.log) return (Math.log(v + 0.5) - Math.log(d.lo)) / (Math.log(d.hi + 1) - Math.log(d.lo));
      return ((v - d.lo) / d.q + 0.5) / ((d.hi - d.lo) / d.q + 1);
    case 'normal': return normalCdf((v - d.mean) / d.sd);
    case 'categorical': case 'grid': return (v + 0.5) / d.size;
  }
}

/** The inverse of `toUnit`: any u in [0, 1] maps to a valid value (quantized, rounded, clamped). */
export function fromUnit(d: Dim, u: number): number {
  u = Math.min(1, Math.max(0, u));
  switch (d.kind) {
    case 'float': {
      const x = d.log ? Math.exp(Math.log(d.lo) + u * (Math.log(d.hi) - Math.log(d.lo))) : d.lo + u * (d.hi - d.lo);
      return d.q === null ? Math.min(d.hi, Math.max(d.lo, x)) : quantize(x, d.q, d.lo, d.hi);
    }
    case 'int': {
      if (d.log) return Math.min(d.hi, Math.max(d.lo, Math.floor(Math.exp(Math.log(d.lo) + u * (Math.log(d.hi + 1) - Math.log(d.lo))))));
      const n = (d.hi - d.lo) / d.q + 1;
      return d.lo + d.q * Math.min(n - 1, Math.floor(u * n));
    }
    case 'normal': return d.mean + d.sd * normalQuantile(Math.min(1 - 1e-12, Math.max(1e-12, u)));
    case 'categorical': case 'grid': return Math.min(d.size - 1, Math.floor(u * d.size));
  }
}

/** A short human form of a config value: 3 significant digits for floats (`3.2e-3`, `0.125`). */
export function formatValue(v: unknown): string {
  if (typeof v === 'number') {
    if (Number.isInteger(v)) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(1).replace('e+', 'e');
    return String(Number(v.toPrecision(3)));
  }
  if (typeof v === 'string') return v;
  return JSON.stringify(v);
}

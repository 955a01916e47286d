/**
 * The tune spec (`*.tune.json`): read, checked against `schemas/tune.schema.json` with Ajv, then
 * checked for what a schema cannot say (bounds in order, placeholders that name parameters, grid
 * only where grid makes sense). Every error names the file, the field's JSON path and what was
 * expected.
 */
import { existsSync, readFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { stripBom } from '../common/jsonFile';
import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv';
import { primitives, Space, SpaceError } from './space';
import type { SlurmOptions } from '../training/launchers/slurm';

export type Algorithm = 'grid' | 'random' | 'tpe' | 'gp';
export type Mode = 'min' | 'max';

export interface AshaOptions {
  readonly type: 'asha';
  readonly timeAttr: string;
  readonly maxT: number;
  readonly gracePeriod: number;
  readonly reductionFactor: number;
  readonly brackets: number;
}
export type SchedulerOptions = { readonly type: 'fifo' } | AshaOptions;

export type TrialSpec =
  | { readonly kind: 'command'; readonly command: readonly string[]; readonly cwd: string; readonly env: Readonly<Record<string, string>> }
  | { readonly kind: 'job'; readonly job: string };

/** Where trials run: processes here, or one sbatch job each (`"executor": {"slurm": {...}}`). */
export type Executor = { readonly kind: 'local' } | { readonly kind: 'slurm'; readonly options: SlurmOptions };

export interface TuneSpec {
  /** Absolute path of the spec file ('' when built in memory). */
  readonly file: string;
  /** The experiment's name: from the spec, else the file name without `.tune.json`. */
  readonly name: string;
  readonly space: Space;
  readonly search: { readonly algorithm: Algorithm; readonly seed: number; readonly nStartupTrials: number };
  readonly metric: string;
  readonly mode: Mode;
  readonly numSamples: number;
  readonly maxConcurrent: number | null;
  readonly gpusPerTrial: number | null;
  readonly scheduler: SchedulerOptions;
  readonly trial: TrialSpec;
  readonly executor: Executor;
  readonly stopGraceMs: number;
  /** The parsed JSON as written, kept in the journal to check a resumed run uses the same spec. */
  readonly raw: Record<string, unknown>;
}

/** A spec that cannot be used; `message` reads `file: /json/path: what was expected`. */
export class SpecError extends Error {
  constructor(readonly file: string, readonly path: string, readonly detail: string) {
    super(`${file || '<spec>'}: ${path || '/'}: ${detail}`);
  }
}

/** Finds `schemas/tune.schema.json` above this module: the repo (out/src/tuning) or the packaged extension (dist/). */
export function schemaPath(from: string = __dirname): string {
  let dir = from;
  for (;;) {
    const p = join(dir, 'schemas', 'tune.schema.json');
    if (existsSync(p)) return p;
    const up = dirname(dir);
    if (up === dir) throw new Error(`schemas/tune.schema.json not found above ${from}`);
    dir = up;
  }
}

let validator: ValidateFunction | null = null;
function validate(): ValidateFunction {
  if (!validator) {
    const schema = JSON.parse(readFileSync(schemaPath(), 'utf8')) as object;
    validator = new Ajv({ allErrors: true, strict: false, useDefaults: false }).compile(schema);
  }
  return validator;
}

/** The most useful Ajv error, worded for a person: the deepest one that is not an if/then or oneOf wrapper. */
function describe(errors: readonly ErrorObject[]): { path: string; detail: string } {
  const useful = errors.filter((e) => e.keyword !== 'if' && e.keyword !== 'oneOf' && e.keyword !== 'anyOf' && e.keyword !== 'allOf');
  const pool = useful.length ? useful : errors;
  // Deepest first: a wrong item inside `space` says more than "space is invalid".
  const e = [...pool].sort((a, b) => b.instancePath.split('/').length - a.instancePath.split('/').length)[0];
  const params = e.params as Record<string, unknown>;
  if (e.instancePath === '/trial' && e.keyword !== 'type') return { path: '/trial', detail: 'must have either "command": [...] or "job": "path.job.json" (not both)' };
  let detail: string;
  switch (e.keyword) {
    case 'additionalProperties': return { path: `${e.instancePath}/${String(params.additionalProperty)}`, detail: 'is not a known field' + knownFields(e) };
    case 'required': return { path: `${e.instancePath}/${String(params.missingProperty)}`, detail: 'is required' };
    case 'enum': detail = `must be one of ${(params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`; break;
    case 'const': detail = `must be ${JSON.stringify(params.allowedValue)}`; break;
    case 'type': detail = `must be of type ${String(params.type)}`; break;
    case 'maxProperties': detail = 'a distribution must be an object with exactly one key, such as {"uniform": [0, 1]}'; break;
    default: detail = e.message ?? e.keyword;
  }
  if (e.instancePath === '/scheduler' || e.instancePath.startsWith('/scheduler/type')) detail += ' (scheduler is "fifo" or {"type": "asha", ...})';
  return { path: e.instancePath, detail };
}

function knownFields(e: ErrorObject): string {
  const props = (e.parentSchema as { properties?: Record<string, unknown> } | undefined)?.properties;
  return props ? ` (expected one of: ${Object.keys(props).filter((k) => k !== '$schema').join(', ')})` : '';
}

/** Reads and checks a spec file. */
export function loadSpec(file: string): TuneSpec {
  const abs = resolve(file);
  let text: string;
  try {
    text = readFileSync(abs, 'utf8');
  } catch (err) {
    throw new SpecError(abs, '', `cannot read the spec: ${(err as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(stripBom(text));
  } catch (err) {
    throw new SpecError(abs, '', `not valid JSON: ${(err as Error).message}`);
  }
  return parseSpec(raw, abs);
}

/** Checks an already parsed spec; `file` is used for messages and to resolve relative paths. */
export function parseSpec(raw: unknown, file = ''): TuneSpec {
  const check = validate();
  if (!check(raw)) throw Object.assign(new SpecError(file, describe(check.errors ?? []).path, describe(check.errors ?? []).detail));
  const r = raw as Record<string, unknown>;
  const fail = (path: string, detail: string): never => { throw new SpecError(file, path, detail); };

  let space: Space;
  try {
    space = Space.parse(r.space);
  } catch (err) {
    if (err instanceof SpaceError) fail(err.path, err.message);
    throw err;
  }
  const search = (r.search ?? {}) as { algorithm?: Algorithm; seed?: number; nStartupTrials?: number };
  const algorithm = search.algorithm ?? 'random';
  if ((algorithm === 'tpe' || algorithm === 'gp') && space.gridDims.length) {
    fail(`/space/${space.gridDims[0].path.split('.').join('/')}`, `grid cannot be combined with search.algorithm "${algorithm}"; use choice, or algorithm "grid"`);
  }
  if (algorithm === 'grid' && !space.gridDims.length) fail('/search/algorithm', '"grid" needs at least one {"grid": [...]} parameter in the space; use "random" to sample');

  const sched = r.scheduler ?? 'fifo';
  let scheduler: SchedulerOptions = { type: 'fifo' };
  if (typeof sched === 'object' && (sched as { type: string }).type === 'asha') {
    const s = sched as Partial<AshaOptions>;
    scheduler = {
      type: 'asha', timeAttr: s.timeAttr ?? 'training_iteration', maxT: s.maxT ?? 100, gracePeriod: s.gracePeriod ?? 1,
      reductionFactor: s.reductionFactor ?? 4, brackets: s.brackets ?? 1,
    };
    if (scheduler.gracePeriod > scheduler.maxT) fail('/scheduler/gracePeriod', `must be at most maxT (${scheduler.maxT}), got ${scheduler.gracePeriod}`);
  }

  const gpusPerTrial = typeof r.gpusPerTrial === 'number' ? r.gpusPerTrial : null;
  if (gpusPerTrial !== null && gpusPerTrial > 1 && !Number.isInteger(gpusPerTrial)) fail('/gpusPerTrial', `above 1 it must be a whole number of GPUs, got ${gpusPerTrial}`);

  const t = r.trial as { command?: string[]; cwd?: string; env?: Record<string, string>; job?: string };
  const base = file ? dirname(file) : process.cwd();
  let trial: TrialSpec;
  if (t.command) {
    const names = new Set<string>();
    for (const d of space.dims) {
      if (!d.path.includes('[')) {
        const parts = d.path.split('.');
        for (let i = 1; i <= parts.length; i++) names.add(parts.slice(0, i).join('.'));
      }
    }
    collectConstPaths(r.space as Record<string, unknown>, '', names);
    t.command.forEach((arg, i) => {
      for (const m of arg.matchAll(/\$\{([^}]*)\}/g)) {
        const ref = m[1];
        if (!ref.startsWith('config.')) fail(`/trial/command/${i}`, `unknown placeholder \${${ref}}; only \${config.<name>} is replaced`);
        const name = ref.slice('config.'.length);
        if (!names.has(name)) fail(`/trial/command/${i}`, `\${${ref}} names no parameter of the space (parameters: ${[...names].join(', ')})`);
      }
    });
    trial = { kind: 'command', command: t.command, cwd: resolve(base, t.cwd ?? '.'), env: t.env ?? {} };
  } else {
    trial = { kind: 'job', job: resolve(base, t.job as string) };
  }

  const ex = (r.executor as { slurm?: { partition?: string; time?: string; account?: string; qos?: string; sbatchArgs?: string[]; pollSeconds?: number } } | undefined)?.slurm;
  if (ex?.sbatchArgs) for (const [i, a] of ex.sbatchArgs.entries()) if (/^--?(?:output|o|job-name|J|gres|array)\b/.test(a)) fail(`/executor/slurm/sbatchArgs/${i}`, `${JSON.stringify(a)} is set by GPU Workbench (the output file and name its own, GPUs from gpusPerTrial)`);
  const executor: Executor = ex ? { kind: 'slurm', options: { ...(ex.partition ? { partition: ex.partition } : {}), ...(ex.time ? { time: ex.time } : {}), ...(ex.account ? { account: ex.account } : {}), ...(ex.qos ? { qos: ex.qos } : {}), ...(ex.sbatchArgs ? { sbatchArgs: ex.sbatchArgs } : {}), pollMs: (ex.pollSeconds ?? 1) * 1000 } } : { kind: 'local' };
  const name = typeof r.name === 'string' ? r.name : file ? basename(file).replace(/\.tune\.json$|\.json$/, '') : 'experiment';
  return {
    file, name, space,
    search: { algorithm, seed: search.seed ?? 0, nStartupTrials: search.nStartupTrials ?? 10 },
    metric: r.metric as string,
    mode: (r.mode as Mode | undefined) ?? 'min',
    numSamples: (r.numSamples as number | undefined) ?? 1,
    maxConcurrent: (r.maxConcurrent as number | undefined) ?? null,
    gpusPerTrial,
    scheduler,
    trial,
    executor,
    stopGraceMs: ((r.stopGraceSeconds as number | undefined) ?? 5) * 1000,
    raw: r,
  };
}

/** Fixed values and groups are addressable by placeholders too (`${config.model.depth}`). */
function collectConstPaths(obj: Record<string, unknown>, prefix: string, into: Set<string>): void {
  for (const [k, v] of Object.entries(obj)) {
    const p = prefix ? `${prefix}.${k}` : k;
    into.add(p);
    const isPrimitive = typeof v === 'object' && v !== null && Object.keys(v).length === 1 && (primitives as readonly string[]).includes(Object.keys(v)[0]);
    if (typeof v === 'object' && v !== null && !Array.isArray(v) && !isPrimitive) collectConstPaths(v as Record<string, unknown>, p, into);
  }
}

/** The number of trials the experiment will create. */
export function totalTrials(spec: TuneSpec): number {
  return spec.search.algorithm === 'grid' || spec.search.algorithm === 'random' ? spec.numSamples * spec.space.gridSize : spec.numSamples;
}

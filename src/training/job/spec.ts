/**
 * The job file (`*.job.json`): read, validated against `schemas/job.schema.json` (the same
 * schema the extension registers for editor completion), then resolved into a `JobSpec` with
 * every default filled in and every path made absolute, so that workers never guess.
 */
import Ajv, { type ErrorObject } from 'ajv';
import { existsSync, readFileSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import { stripBom } from '../../common/jsonFile';
import { torchrunNodes, type RawTorchrunNodes } from './torchrunNodes';

export type Strategy = 'single' | 'dp' | 'ddp' | 'pipeline';
export type BackendChoice = 'auto' | 'tensorflow-gpu' | 'webgpu' | 'tensorflow' | 'wasm' | 'cpu';
export type OptimizerName = 'sgd' | 'momentum' | 'adam' | 'rmsprop' | 'adagrad';
export type LossName = 'categoricalCrossentropy' | 'softmaxCrossentropy';

export type ModelSource =
  | { readonly kind: 'preset'; readonly preset: 'mlp'; readonly hiddenUnits: readonly number[] }
  | { readonly kind: 'preset'; readonly preset: 'cnn'; readonly filters: readonly number[] }
  | { readonly kind: 'layers'; readonly path: string }
  | { readonly kind: 'module'; readonly path: string };

export type DataSource =
  | { readonly kind: 'mnist'; readonly trainSize: number; readonly testSize: number; readonly path?: string }
  | { readonly kind: 'csv'; readonly path: string; readonly testPath?: string; readonly labelColumn?: string | number; readonly header: boolean; readonly numClasses?: number; readonly testFraction: number; readonly inputShape?: readonly number[] }
  | { readonly kind: 'idx'; readonly images: string; readonly labels: string; readonly testImages?: string; readonly testLabels?: string; readonly testFraction: number; readonly scale: number }
  | { readonly kind: 'module'; readonly path: string };

/** A validated job with defaults applied; plain JSON, so it can be sent to workers as is. */
export interface JobSpec {
  readonly file: string;
  readonly name: string;
  readonly model: ModelSource;
  readonly data: DataSource;
  readonly batchSize: number;
  readonly epochs: number;
  readonly maxStepsPerEpoch?: number;
  readonly optimizer: { readonly name: OptimizerName; readonly learningRate: number; readonly momentum: number };
  readonly loss: LossName;
  readonly seed: number;
  readonly strategy: Strategy;
  /** Device indices, one worker per device. */
  readonly devices: readonly number[];
  readonly backend: BackendChoice;
  readonly pipeline: { readonly stages: number; readonly microBatches: number; readonly schedule: 'gpipe' | '1f1b' };
  readonly checkpointDir?: string;
  /** A Find Max Batch Size trial: this many steps of one epoch, then stop (no evaluation, no checkpoint). */
  readonly trialSteps?: number;
}

/** What the command line (or the quick picks) may override. */
export interface JobOverrides {
  strategy?: Strategy;
  devices?: number | number[];
  epochs?: number;
  backend?: BackendChoice;
  batchSize?: number;
  maxStepsPerEpoch?: number;
  checkpointDir?: string;
  /** pipeline: stages, micro-batches per batch, schedule. */
  pipeline?: { stages?: number; microBatches?: number; schedule?: 'gpipe' | '1f1b' };
  /** torchrun jobs: the Python interpreter (default: the job's "python", else python3). */
  python?: string;
  /** Find Max Batch Size: run only this many steps (one epoch, no evaluation, no checkpoint). */
  trialSteps?: number;
}

/** A job file that cannot run; the message names the file, the field and what was expected. */
export class JobFileError extends Error {
  constructor(readonly file: string, readonly problems: readonly string[]) {
    super(problems.map((p) => `${basename(file)}: ${p}`).join('\n'));
    this.name = 'JobFileError';
  }
}

interface SchemaNode {
  type?: string | string[];
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  minItems?: number;
  pattern?: string;
  items?: SchemaNode;
  minProperties?: number;
  maxProperties?: number;
  properties?: Record<string, SchemaNode>;
}

let validator: ((data: unknown) => boolean) & { errors?: ErrorObject[] | null } | undefined;

/** Finds `schemas/job.schema.json` above this module: the repo (out/src/training) or the extension root (dist/). */
export function jobSchemaPath(from: string = __dirname): string {
  let dir = from;
  for (;;) {
    const candidate = join(dir, 'schemas', 'job.schema.json');
    if (existsSync(candidate)) return candidate;
    const up = dirname(dir);
    if (up === dir) throw new Error(`schemas/job.schema.json not found above ${from}`);
    dir = up;
  }
}

function validate(): NonNullable<typeof validator> {
  if (!validator) {
    const schema = JSON.parse(readFileSync(jobSchemaPath(), 'utf8')) as object;
    const ajv = new Ajv({ allErrors: true, verbose: true, strict: true, allowUnionTypes: true });
    validator = ajv.compile(schema);
  }
  return validator;
}

const article = (word: string): string => (/^[aeiou]/.test(word) ? `an ${word}` : `a ${word}`);

/** "a number > 0", "an integer ≥ 1", "one of "sgd", "adam"", from the schema of the field. */
function describe(s: SchemaNode): string {
  if (s.enum) return s.enum.length === 1 ? JSON.stringify(s.enum[0]) : `one of ${s.enum.map((e) => JSON.stringify(e)).join(', ')}`;
  const types = Array.isArray(s.type) ? s.type : s.type ? [s.type] : [];
  const parts = types.map((t) => {
    const bounds: string[] = [];
    if (t === 'number' || t === 'integer') {
      if (s.exclusiveMinimum !== undefined) bounds.push(`> ${s.exclusiveMinimum}`);
      if (s.minimum !== undefined) bounds.push(`≥ ${s.minimum}`);
      if (s.exclusiveMaximum !== undefined) bounds.push(`< ${s.exclusiveMaximum}`);
      if (s.maximum !== undefined) bounds.push(`≤ ${s.maximum}`);
    }
    if (t === 'string' && s.pattern === '\\.json$') return 'a path ending in .json';
    if (t === 'string' && s.pattern === '^-') return 'an option of the script starting with "-" (e.g. "--batch-size")';
    if (t === 'string' && s.pattern?.startsWith('^[A-Za-z_]')) return 'an environment variable name (letters, digits and _, e.g. "BATCH_SIZE")';
    if (t === 'string' && s.minLength) return 'a non-empty string';
    if (t === 'array') {
      const item = s.items ? describe(s.items).replace(/^an? /, '') : 'value';
      return `a non-empty list of ${item.replace(/^(\w+)/, '$1s')}`;
    }
    if (t === 'object' && s.maxProperties === 1) return `an object with exactly one of ${Object.keys(s.properties ?? {}).map((k) => `"${k}"`).join(', ')}`;
    return [article(t), ...bounds].join(' ');
  });
  return parts.join(' or ') || 'valid';
}

function formatError(e: ErrorObject): string {
  const where = e.instancePath || '/';
  const parent = (e.parentSchema ?? {}) as SchemaNode;
  switch (e.keyword) {
    case 'required':
      return `${where} is missing the required field "${String((e.params as { missingProperty: string }).missingProperty)}"`;
    case 'additionalProperties': {
      const extra = String((e.params as { additionalProperty: string }).additionalProperty);
      const known = Object.keys(parent.properties ?? {}).filter((k) => k !== '$schema');
      return `${where} has an unknown field "${extra}" (expected one of ${known.map((k) => `"${k}"`).join(', ')})`;
    }
    case 'minProperties':
    case 'maxProperties':
      return `${where} must be ${describe(parent)}`;
    case 'uniqueItems':
      return `${where} must not list a device twice`;
    default:
      return `${where} must be ${describe(parent)}`;
  }
}

/** Schema problems of a parsed job file, one message per field (empty when valid). */
export function jobProblems(raw: unknown): string[] {
  return problemsOf(raw);
}

function problemsOf(raw: unknown): string[] {
  const check = validate();
  // A torchrun job's nodes are checked beyond the schema (a MIN:MAX range, a HOST:PORT, fields of the other rendezvous).
  if (check(raw)) return (raw as { kind?: unknown }).kind === 'torchrun' ? [...torchrunNodes(raw as RawTorchrunNodes, () => '').problems] : [];
  // One message per field: the schema may report a type and a bound for the same value.
  const seen = new Set<string>();
  const out: string[] = [];
  for (const e of check.errors ?? []) {
    if (e.keyword === 'if') continue; // the torchrun/TF.js switch: the failing branch's own errors say what is wrong
    const msg = formatError(e);
    const key = e.keyword === 'required' || e.keyword === 'additionalProperties' ? msg : e.instancePath;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(msg);
  }
  return out;
}

type RawJob = {
  name?: string;
  model: string | { preset?: 'mlp' | 'cnn'; hiddenUnits?: number[]; filters?: number[]; path?: string; module?: string };
  data: {
    mnist?: { trainSize?: number; testSize?: number; path?: string };
    csv?: { path: string; testPath?: string; labelColumn?: string | number; header?: boolean; numClasses?: number; testFraction?: number; inputShape?: number[] };
    idx?: { images: string; labels: string; testImages?: string; testLabels?: string; testFraction?: number; scale?: number };
    module?: string;
  };
  batchSize: number;
  epochs: number;
  maxStepsPerEpoch?: number;
  optimizer?: { name: OptimizerName; learningRate?: number; momentum?: number };
  loss?: LossName;
  seed?: number;
  strategy?: Strategy;
  devices?: number | number[];
  backend?: BackendChoice;
  pipeline?: { stages?: number; microBatches?: number; schedule?: 'gpipe' | '1f1b' };
  checkpointDir?: string;
};

/** Reads and validates a job file; throws JobFileError naming the file and every bad field. */
export function loadJobFile(file: string, overrides: JobOverrides = {}): JobSpec {
  const path = resolve(file);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new JobFileError(path, [`cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`]);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(stripBom(text));
  } catch (err) {
    throw new JobFileError(path, [`is not valid JSON: ${(err as Error).message}`]);
  }
  return parseJob(raw, path, overrides);
}

/** Validates a parsed job (as read from `file`, for messages and relative paths). */
export function parseJob(raw: unknown, file: string, overrides: JobOverrides = {}): JobSpec {
  const problems = problemsOf(raw);
  if (problems.length) throw new JobFileError(file, problems);
  const j = raw as RawJob;
  const base = dirname(file);
  const abs = (p: string): string => (isAbsolute(p) ? p : resolve(base, p));
  const more: string[] = [];

  let model: ModelSource;
  if (typeof j.model === 'string') {
    if (j.model === 'mlp') model = { kind: 'preset', preset: 'mlp', hiddenUnits: [128] };
    else if (j.model === 'cnn') model = { kind: 'preset', preset: 'cnn', filters: [8, 16] };
    else if (j.model.endsWith('.json')) model = { kind: 'layers', path: abs(j.model) };
    else if (/\.[cm]?js$/.test(j.model)) model = { kind: 'module', path: abs(j.model) };
    else {
      more.push(`/model must be "mlp", "cnn", a model.json path or a .js module path, got ${JSON.stringify(j.model)}`);
      model = { kind: 'preset', preset: 'mlp', hiddenUnits: [128] };
    }
  } else {
    const m = j.model;
    const given = (['preset', 'path', 'module'] as const).filter((k) => m[k] !== undefined);
    if (given.length !== 1) more.push(`/model must have exactly one of "preset", "path", "module"${given.length ? ` (has ${given.map((k) => `"${k}"`).join(' and ')})` : ''}`);
    if (m.hiddenUnits && m.preset !== 'mlp') more.push('/model/hiddenUnits only applies to the "mlp" preset');
    if (m.filters && m.preset !== 'cnn') more.push('/model/filters only applies to the "cnn" preset');
    if (m.preset === 'cnn') model = { kind: 'preset', preset: 'cnn', filters: m.filters ?? [8, 16] };
    else if (m.preset === 'mlp') model = { kind: 'preset', preset: 'mlp', hiddenUnits: m.hiddenUnits ?? [128] };
    else if (m.path !== undefined) model = { kind: 'layers', path: abs(m.path) };
    else model = { kind: 'module', path: abs(m.module ?? '') };
  }
  if ((model.kind === 'layers' || model.kind === 'module') && !existsSync(model.path)) more.push(`/model: ${model.path} does not exist`);

  let data: DataSource;
  const d = j.data;
  if (d.mnist) {
    data = { kind: 'mnist', trainSize: d.mnist.trainSize ?? 8000, testSize: d.mnist.testSize ?? 2000, ...(d.mnist.path ? { path: abs(d.mnist.path) } : {}) };
    if (data.trainSize + data.testSize > 10000) more.push(`/data/mnist: trainSize + testSize must be ≤ 10000 (the package holds 10,000 digits), got ${data.trainSize + data.testSize}`);
  } else if (d.csv) {
    const c = d.csv;
    data = { kind: 'csv', path: abs(c.path), header: c.header ?? true, testFraction: c.testFraction ?? 0.2, ...(c.testPath ? { testPath: abs(c.testPath) } : {}), ...(c.labelColumn !== undefined ? { labelColumn: c.labelColumn } : {}), ...(c.numClasses ? { numClasses: c.numClasses } : {}), ...(c.inputShape ? { inputShape: c.inputShape } : {}) };
  } else if (d.idx) {
    const x = d.idx;
    data = { kind: 'idx', images: abs(x.images), labels: abs(x.labels), testFraction: x.testFraction ?? 0.2, scale: x.scale ?? 255, ...(x.testImages ? { testImages: abs(x.testImages) } : {}), ...(x.testLabels ? { testLabels: abs(x.testLabels) } : {}) };
    if ((x.testImages === undefined) !== (x.testLabels === undefined)) more.push('/data/idx must name both testImages and testLabels, or neither');
  } else {
    data = { kind: 'module', path: abs(d.module ?? '') };
  }
  for (const p of dataPaths(data)) if (!existsSync(p)) more.push(`/data: ${p} does not exist`);

  const strategy = overrides.strategy ?? j.strategy ?? 'single';
  const stagesGiven = overrides.pipeline?.stages ?? j.pipeline?.stages;
  const devicesRaw = overrides.devices ?? j.devices ?? (strategy === 'single' ? 1 : strategy === 'pipeline' && stagesGiven ? stagesGiven : 2);
  const devices = typeof devicesRaw === 'number' ? Array.from({ length: devicesRaw }, (_, i) => i) : [...devicesRaw];
  if (strategy === 'single' && devices.length !== 1) more.push(`/devices: strategy "single" runs on one device, got ${devices.length}`);
  const optName = j.optimizer?.name ?? 'adam';
  const po = overrides.pipeline ?? {};
  const pipeline = { stages: po.stages ?? j.pipeline?.stages ?? devices.length, microBatches: po.microBatches ?? j.pipeline?.microBatches ?? 4, schedule: po.schedule ?? j.pipeline?.schedule ?? 'gpipe' } as const;
  // One stage per device, one process per device, as the other strategies.
  if (strategy === 'pipeline' && pipeline.stages !== devices.length) more.push(`/pipeline/stages must equal the number of devices (one stage per device): ${pipeline.stages} stages on ${devices.length} device${devices.length === 1 ? '' : 's'}`);
  if (strategy === 'pipeline' && pipeline.stages < 2) more.push(`/pipeline/stages must be at least 2 for strategy "pipeline", got ${pipeline.stages}`);
  const batchSize = overrides.batchSize ?? j.batchSize;
  if ((strategy === 'ddp' || strategy === 'dp') && batchSize % devices.length !== 0) more.push(`/batchSize must be divisible by the number of devices (${devices.length}) for strategy "${strategy}", got ${batchSize}`);
  if (strategy === 'pipeline' && batchSize % pipeline.microBatches !== 0) more.push(`/batchSize must be divisible by /pipeline/microBatches (${pipeline.microBatches}), got ${batchSize}`);
  if (more.length) throw new JobFileError(file, more);

  const trial = overrides.trialSteps;
  const checkpointDir = trial ? undefined : overrides.checkpointDir ?? j.checkpointDir;
  const maxSteps = trial ?? overrides.maxStepsPerEpoch ?? j.maxStepsPerEpoch;
  return {
    file,
    name: j.name ?? basename(file).replace(/\.job\.json$|\.json$/, ''),
    model,
    data,
    batchSize,
    epochs: trial ? 1 : overrides.epochs ?? j.epochs,
    ...(maxSteps !== undefined ? { maxStepsPerEpoch: maxSteps } : {}),
    optimizer: { name: optName, learningRate: j.optimizer?.learningRate ?? (optName === 'adam' || optName === 'rmsprop' ? 0.001 : 0.01), momentum: j.optimizer?.momentum ?? 0.9 },
    loss: j.loss ?? 'categoricalCrossentropy',
    seed: j.seed ?? 0,
    strategy,
    devices,
    backend: overrides.backend ?? j.backend ?? 'auto',
    pipeline,
    ...(checkpointDir ? { checkpointDir: abs(checkpointDir) } : {}),
    ...(trial ? { trialSteps: trial } : {}),
  };
}

function dataPaths(d: DataSource): string[] {
  switch (d.kind) {
    case 'mnist': return d.path ? [d.path] : [];
    case 'csv': return [d.path, ...(d.testPath ? [d.testPath] : [])];
    case 'idx': return [d.images, d.labels, ...(d.testImages ? [d.testImages] : []), ...(d.testLabels ? [d.testLabels] : [])];
    case 'module': return [d.path];
  }
}

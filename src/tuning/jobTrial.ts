/**
 * Job trials (`"trial": {"job": "x.job.json"}`): the trial's config is merged into a copy of the
 * job file in the trial's folder of the experiment, and the training CLI runs that copy with
 * `train COPY --json`. Each `job/epoch` event becomes a report, `job/failed` a failed trial.
 *
 * Reports of a job trial (the names a spec's `metric` and ASHA's `timeAttr` may use):
 *   training_iteration  the epoch (1, 2, ...)
 *   loss                the epoch's training loss
 *   test_loss           the loss on the test split after the epoch
 *   accuracy            the accuracy on the test split after the epoch (0..1)
 *   samples_per_second  training throughput of the epoch, all workers together
 *   time_this_iter_s    the epoch's wall time in seconds
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import type { RankMemory } from '../common/companionProtocol';
import { readJsonFile } from '../common/jsonFile';
import type { JobEvent } from '../training/job/events';
import { JobFileError, parseJob } from '../training/job/spec';
import type { TrialResult } from './events';
import type { Config } from './space';

export class JobTrialError extends Error {}

/**
 * The training CLI the running code belongs to: `dist/cli.js` next to the bundle, or
 * `out/src/cli.js` above `out/src/tuning`.
 */
export function resolveTrainCli(from: string = __dirname): string {
  for (const candidate of [join(from, 'cli.js'), join(from, '..', 'cli.js')]) {
    if (existsSync(candidate)) return candidate;
  }
  throw new JobTrialError(`the gpu-workbench CLI (cli.js) is not next to ${from} nor one folder up: build it with npm run build`);
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The config laid over the job: nested objects merge key by key, anything else (numbers, strings,
 * arrays such as hiddenUnits) replaces; a key with dots (`optimizer.learningRate`) is a path. A
 * preset given as a string (`"model": "mlp"`) becomes `{"preset": "mlp"}` when the config sets
 * fields inside it.
 */
export function mergeConfig(job: Json, config: Config): Json {
  const out: Json = structuredClone(job);
  const put = (target: Json, path: readonly string[], value: unknown): void => {
    const [head, ...rest] = path;
    if (rest.length === 0) {
      target[head] = isObject(value) && isObject(target[head]) ? mergeConfig(target[head], value) : structuredClone(value);
      return;
    }
    let next = target[head];
    if (typeof next === 'string' && (next === 'mlp' || next === 'cnn')) next = { preset: next };
    if (!isObject(next)) next = {};
    target[head] = next;
    put(next as Json, rest, value);
  };
  for (const [key, value] of Object.entries(config)) {
    if (isObject(value) && typeof out[key] === 'string' && (out[key] === 'mlp' || out[key] === 'cnn')) out[key] = { preset: out[key] };
    put(out, key.split('.'), value);
  }
  return out;
}

/**
 * Makes the relative paths of a job absolute against `base` (the original job's folder), so that
 * a copy elsewhere still finds its model, data and script.
 */
export function absolutizeJobPaths(job: Json, base: string): Json {
  const abs = (p: unknown): unknown => (typeof p === 'string' && !isAbsolute(p) ? resolve(base, p) : p);
  const out: Json = structuredClone(job);
  if (typeof out.model === 'string' && /\.(json|[cm]?js)$/.test(out.model)) out.model = abs(out.model);
  if (isObject(out.model)) for (const k of ['path', 'module']) if (k in out.model) out.model[k] = abs(out.model[k]);
  if (isObject(out.data)) {
    const d = out.data;
    if (typeof d.module === 'string') d.module = abs(d.module);
    for (const [kind, keys] of [['mnist', ['path']], ['csv', ['path', 'testPath']], ['idx', ['images', 'labels', 'testImages', 'testLabels']]] as const) {
      const src = d[kind];
      if (isObject(src)) for (const k of keys) if (k in src) src[k] = abs(src[k]);
    }
  }
  if (out.kind === 'torchrun') {
    if (typeof out.script === 'string') out.script = abs(out.script);
    out.cwd = abs(typeof out.cwd === 'string' ? out.cwd : '.');
    if (typeof out.python === 'string' && /[\\/]/.test(out.python)) out.python = abs(out.python);
  }
  return out;
}

export interface PreparedJobTrial {
  /** The merged copy of the job the trial runs. */
  readonly jobFile: string;
  /** `process.execPath cli.js train COPY --json`. */
  readonly command: readonly string[];
  /** The original job's folder (where the mnist package is looked up, as for the original). */
  readonly cwd: string;
}

/**
 * Writes `<trialDir>/<name>.job.json` (the job with the config merged in, paths absolute, a
 * checkpointDir moved into the trial's folder) and checks it as `train` would; a config that makes
 * the job invalid throws JobTrialError naming the fields.
 */
export function prepareJobTrial(opts: { job: string; config: Config; trialDir: string; cli?: string }): PreparedJobTrial {
  let raw: unknown;
  try {
    raw = readJsonFile(opts.job);
  } catch (err) {
    throw new JobTrialError(`${opts.job}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'does not exist' : `cannot be read: ${(err as Error).message}`}`);
  }
  if (!isObject(raw)) throw new JobTrialError(`${opts.job}: a job file holds a JSON object`);
  const base = dirname(opts.job);
  const merged = absolutizeJobPaths(mergeConfig(raw, opts.config), base);
  delete merged.$schema;
  // Trials must not share (or resume from) each other's checkpoints.
  if (typeof merged.checkpointDir === 'string') merged.checkpointDir = join(opts.trialDir, 'checkpoints');
  mkdirSync(opts.trialDir, { recursive: true });
  const jobFile = join(opts.trialDir, 'trial.job.json');
  writeFileSync(jobFile, `${JSON.stringify(merged, null, 2)}\n`);
  if (merged.kind !== 'torchrun') {
    try {
      parseJob(merged, jobFile);
    } catch (err) {
      if (err instanceof JobFileError) throw new JobTrialError(`the config makes ${opts.job} invalid:\n${err.problems.join('\n')}`);
      throw err;
    }
  }
  const cli = opts.cli ?? resolveTrainCli();
  return { jobFile, command: [process.execPath, cli, 'train', jobFile, '--json', '--no-record'], cwd: base };
}

export type JobLine =
  | { readonly kind: 'report'; readonly result: TrialResult; readonly text: string }
  | { readonly kind: 'failed'; readonly reason: string; readonly text: string }
  /** A torchrun job's rank memory after an optimizer step (the companion's): the trial's peak. */
  | { readonly kind: 'memory'; readonly memory: RankMemory; readonly text: string }
  | { readonly kind: 'other'; readonly text: string }
  | null;

/** One stdout line of `train --json`: a report, a failure, or an event to show; null when not an event. */
export function parseJobLine(line: string): JobLine {
  if (!line.startsWith('{')) return null;
  let e: JobEvent;
  try {
    e = JSON.parse(line) as JobEvent;
  } catch {
    return null;
  }
  if (!isObject(e) || typeof e.type !== 'string') return null;
  if ((e.type as string) === 'job/rankMemory') {
    const { type: _type, ...memory } = e as unknown as Extract<JobEvent, { type: 'job/rankMemory' }>;
    return { kind: 'memory', memory, text: '' };
  }
  switch (e.type) {
    case 'job/epoch':
      return {
        kind: 'report',
        result: { training_iteration: e.epoch, loss: e.trainLoss, test_loss: e.testLoss, accuracy: e.testAccuracy, samples_per_second: e.samplesPerSecond, time_this_iter_s: e.durationMs / 1000 },
        text: `epoch ${e.epoch}/${e.epochs}: loss ${e.trainLoss.toFixed(4)}, test loss ${e.testLoss.toFixed(4)}, accuracy ${(100 * e.testAccuracy).toFixed(2)}%\n`,
      };
    case 'job/failed': {
      const reason = `training failed${e.rank !== undefined ? ` (rank ${e.rank})` : ''}: ${e.reason}${e.hint ? ` (hint: ${e.hint})` : ''}`;
      return { kind: 'failed', reason, text: `${reason}\n` };
    }
    case 'job/started':
      return { kind: 'other', text: `${e.job}: ${e.strategy}, ${e.description}; ${e.trainSamples} train / ${e.testSamples} test samples, ${e.epochs} epochs\n${e.workers.map((w) => `  rank ${w.rank}  pid ${w.pid}  ${w.device}\n`).join('')}` };
    case 'job/log':
      return { kind: 'other', text: `${e.level === 'warning' ? 'warning: ' : ''}${e.message}\n` };
    case 'job/done':
      return { kind: 'other', text: `done: test accuracy ${(100 * e.metrics.testAccuracy).toFixed(2)}% after ${e.metrics.epochs} epochs\n` };
    default:
      return { kind: 'other', text: '' };
  }
}

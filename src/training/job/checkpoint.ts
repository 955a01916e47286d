/**
 * Checkpoints, one folder per epoch, written by rank 0 after the epoch:
 *   epoch-3/model.json + weights.bin   a TF.js Layers model (loadable with tf.loadLayersModel)
 *   epoch-3/optimizer.json + .bin      the optimizer's state (Adam's moments, iteration count)
 *   epoch-3/trainer.json               epochs done, global step, job name
 *   latest.json                        {"dir": "epoch-3", "epoch": 3}, replaced atomically last
 * The optimizer state is that of one optimizer over every trainable weight of the model, in the
 * model's order, whatever the strategy: a pipeline job's stages each hand their part to rank 0
 * (`saveStageOptimizer`), which merges them (`mergeOptimizerStates`), and each stage takes its
 * part back on resume (`loadOptimizerState` with a slice). So a checkpoint of any strategy
 * resumes under any other.
 * A folder is written under a temporary name, flushed to disk and renamed, and latest.json only
 * then points to it (written aside, flushed, renamed over the old one), so a worker killed or a
 * machine that loses power mid-write leaves the previous checkpoint loadable.
 *
 * One folder holds one run. A job that starts over (no --resume; "Start Over" in the editor) on
 * a folder that holds checkpoints moves the earlier run's files into `previous-<time>/` inside
 * it first (`moveRunAside`), so its epochs are never mixed with the new run's and its
 * latest.json keeps naming its own last checkpoint (resumable there: point checkpointDir at it).
 */
import type { LayersModel } from '@tensorflow/tfjs-layers';
import type { Optimizer } from '@tensorflow/tfjs-core';
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Tf } from '../backends/types';

type WeightsManifestEntry = Parameters<Tf['io']['decodeWeights']>[1][number];
type NamedTensor = Awaited<ReturnType<Optimizer['getWeights']>>[number];

export interface TrainerState {
  readonly epochsDone: number;
  readonly globalStep: number;
  readonly job: string;
  readonly savedAt: string;
}

function toArrayBuffer(data: ArrayBuffer | ArrayBuffer[] | undefined): ArrayBuffer {
  if (data === undefined) return new ArrayBuffer(0);
  if (!Array.isArray(data)) return data;
  const total = data.reduce((s, b) => s + b.byteLength, 0);
  const out = new Uint8Array(total);
  let off = 0;
  for (const b of data) {
    out.set(new Uint8Array(b), off);
    off += b.byteLength;
  }
  return out.buffer;
}

/** An optimizer's state as `getWeights()` gives it: the iteration count, then one group of slots per kind (Adam: m, then v), one slot per weight. */
export interface OptimizerState {
  readonly className: string;
  readonly weights: readonly NamedTensor[];
}

/** Writes a file and flushes it to disk, so that a rename after it never points at a file the disk does not hold yet. */
function writeDurable(path: string, data: string | Uint8Array): void {
  const fd = openSync(path, 'w');
  try {
    writeFileSync(fd, data);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Flushes a folder's entries (a rename inside it); some file systems refuse, which only loses durability. */
function syncFolder(dir: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(dir, 'r');
    fsyncSync(fd);
  } catch {
    // not supported here
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

function writeOptimizerState(tf: Tf, dir: string, state: OptimizerState): Promise<void> {
  return tf.io.encodeWeights([...state.weights]).then((encoded) => {
    writeDurable(join(dir, 'optimizer.bin'), new Uint8Array(encoded.data));
    writeDurable(join(dir, 'optimizer.json'), JSON.stringify({ className: state.className, specs: encoded.specs }));
  });
}

function readOptimizerState(tf: Tf, dir: string): OptimizerState {
  const opt = JSON.parse(readFileSync(join(dir, 'optimizer.json'), 'utf8')) as { className: string; specs: WeightsManifestEntry[] };
  const named = tf.io.decodeWeights(readBin(join(dir, 'optimizer.bin')), opt.specs);
  return { className: opt.className, weights: opt.specs.map((s) => ({ name: s.name, tensor: named[s.name] })) };
}

export async function optimizerState(optimizer: Optimizer): Promise<OptimizerState> {
  return { className: optimizer.getClassName(), weights: await optimizer.getWeights() };
}

/** How many slot groups a state of `vars` weights holds (Adam 2, momentum 1, SGD 0). */
function slotGroups(state: OptimizerState, vars: number, what: string): number {
  const slots = state.weights.length - 1;
  if (state.weights[0]?.name !== 'iter') throw new CheckpointError(`${what}: the optimizer state does not start with its iteration count`);
  if (vars === 0) {
    if (slots !== 0) throw new CheckpointError(`${what}: ${slots} optimizer slots for no weights`);
    return -1;
  }
  if (slots % vars !== 0) throw new CheckpointError(`${what}: ${slots} optimizer slots do not divide among ${vars} weights: was it written for another model?`);
  return slots / vars;
}

/**
 * The state of one optimizer over all the stages' weights, from the states of the stages in
 * order (`vars`: how many trainable weights each stage has): the iteration count, then each
 * slot group with the stages' slots one after the other.
 */
export function mergeOptimizerStates(parts: readonly { readonly state: OptimizerState; readonly vars: number }[]): OptimizerState {
  const counts = parts.map((p, i) => slotGroups(p.state, p.vars, `pipeline stage ${i}`));
  const groups = Math.max(0, ...counts);
  const bad = counts.findIndex((k) => k !== -1 && k !== groups);
  if (bad >= 0) throw new CheckpointError(`pipeline stage ${bad} has ${counts[bad]} optimizer slot groups, another stage ${groups}`);
  const weights: NamedTensor[] = [parts[0].state.weights[0]];
  for (let g = 0; g < groups; g++) for (const p of parts) weights.push(...p.state.weights.slice(1 + g * p.vars, 1 + (g + 1) * p.vars));
  return { className: parts[0].state.className, weights };
}

/** The part of a whole-model optimizer state that belongs to weights [from, to) of `total`. */
export function sliceOptimizerState(state: OptimizerState, from: number, to: number, total: number): OptimizerState {
  const groups = Math.max(0, slotGroups(state, total, 'the checkpoint'));
  const weights: NamedTensor[] = [state.weights[0]];
  for (let g = 0; g < groups; g++) weights.push(...state.weights.slice(1 + g * total + from, 1 + g * total + to));
  return { className: state.className, weights };
}

const stageFolder = (root: string, epochsDone: number, stage: number) => join(root, `.epoch-${epochsDone}.stage-${stage}.optimizer`);

/** A pipeline stage other than 0: writes its optimizer state where rank 0's `saveCheckpoint` will take it from (before telling rank 0 the epoch is over). */
export async function saveStageOptimizer(tf: Tf, root: string, epochsDone: number, stage: number, optimizer: Optimizer): Promise<void> {
  const dir = stageFolder(root, epochsDone, stage);
  mkdirSync(dir, { recursive: true });
  await writeOptimizerState(tf, dir, await optimizerState(optimizer));
}

/** Rank 0 of a pipeline: the optimizer states stages 1.. wrote for this epoch, removed from disk. */
export function takeStageOptimizers(tf: Tf, root: string, epochsDone: number, stages: number): OptimizerState[] {
  return Array.from({ length: stages - 1 }, (_, i) => {
    const dir = stageFolder(root, epochsDone, i + 1);
    if (!existsSync(join(dir, 'optimizer.json'))) throw new CheckpointError(`pipeline stage ${i + 1} wrote no optimizer state for epoch ${epochsDone} (${dir})`);
    const state = readOptimizerState(tf, dir);
    rmSync(dir, { recursive: true, force: true });
    return state;
  });
}

/** The folder of the checkpoint written after `epochsDone` epochs. */
export const checkpointFolder = (root: string, epochsDone: number): string => join(root, `epoch-${epochsDone}`);

export async function saveCheckpoint(tf: Tf, root: string, model: LayersModel, optimizer: Optimizer | OptimizerState, state: TrainerState): Promise<string> {
  const dir = checkpointFolder(root, state.epochsDone);
  const name = basename(dir);
  const tmp = join(root, `.${name}.tmp-${process.pid}`);
  mkdirSync(tmp, { recursive: true });
  await model.save(tf.io.withSaveHandler((artifacts) => {
    writeDurable(join(tmp, 'weights.bin'), new Uint8Array(toArrayBuffer(artifacts.weightData)));
    const modelJson = {
      modelTopology: artifacts.modelTopology,
      format: artifacts.format ?? 'layers-model',
      generatedBy: artifacts.generatedBy,
      convertedBy: null,
      weightsManifest: [{ paths: ['weights.bin'], weights: artifacts.weightSpecs ?? [] }],
    };
    writeDurable(join(tmp, 'model.json'), JSON.stringify(modelJson));
    return Promise.resolve({ modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: 'JSON' } });
  }));
  await writeOptimizerState(tf, tmp, 'weights' in optimizer ? optimizer : await optimizerState(optimizer));
  writeDurable(join(tmp, 'trainer.json'), JSON.stringify(state, null, 2));
  syncFolder(tmp);
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  syncFolder(root);
  // Only now, with the checkpoint whole on disk, does latest.json name it.
  const latestTmp = join(root, `.latest.json.tmp-${process.pid}`);
  writeDurable(latestTmp, JSON.stringify({ dir: name, epoch: state.epochsDone }));
  renameSync(latestTmp, join(root, 'latest.json'));
  syncFolder(root);
  return dir;
}

/** What a checkpoint folder holds of an earlier run. */
export interface ExistingRun {
  readonly root: string;
  /** What latest.json names, when it is there, readable and its folder exists. */
  readonly latest?: { readonly dir: string; readonly epoch: number };
  /** The epoch-N folders, in order of N. */
  readonly epochs: readonly number[];
  /** The job that wrote the latest checkpoint and when (its trainer.json). */
  readonly job?: string;
  readonly savedAt?: string;
  /** The names in `root` that belong to the run: latest.json, epoch-N, and the leftovers of a write cut off. */
  readonly entries: readonly string[];
}

const runEntry = /^(latest\.json|epoch-\d+|\.epoch-\d+\..*|\.latest\.json\.tmp-.*)$/;

/** The run a checkpoint folder holds (latest.json or an epoch-N folder), or undefined when it holds none (or does not exist). */
export function existingRun(root: string): ExistingRun | undefined {
  let names: string[];
  try {
    names = readdirSync(root);
  } catch {
    return undefined;
  }
  const entries = names.filter((n) => runEntry.test(n)).sort();
  const epochs = names.map((n) => /^epoch-(\d+)$/.exec(n)).filter((m) => m !== null).map((m) => Number(m[1])).sort((a, b) => a - b);
  if (epochs.length === 0 && !names.includes('latest.json')) return undefined;
  let latest: ExistingRun['latest'];
  let trainer: Partial<TrainerState> = {};
  try {
    const l = JSON.parse(readFileSync(join(root, 'latest.json'), 'utf8')) as { dir?: unknown; epoch?: unknown };
    if (typeof l.dir === 'string' && typeof l.epoch === 'number' && statSync(join(root, l.dir)).isDirectory()) latest = { dir: l.dir, epoch: l.epoch };
    if (latest) trainer = JSON.parse(readFileSync(join(root, latest.dir, 'trainer.json'), 'utf8')) as Partial<TrainerState>;
  } catch {
    // no latest.json, or one that names nothing whole
  }
  return {
    root, epochs, entries,
    ...(latest ? { latest } : {}),
    ...(typeof trainer.job === 'string' ? { job: trainer.job } : {}),
    ...(typeof trainer.savedAt === 'string' ? { savedAt: trainer.savedAt } : {}),
  };
}

/** The folder in `root` that `moveRunAside` moves a run into at `now`: previous-2026-11-25T23-41-07Z. */
export function previousRunFolder(root: string, now: Date): string {
  const stamp = now.toISOString().replace(/\.\d+Z$/, 'Z').replace(/:/g, '-');
  for (let i = 1; ; i++) {
    const dir = join(root, `previous-${stamp}${i === 1 ? '' : `-${i}`}`);
    if (!existsSync(dir)) return dir;
  }
}

/**
 * Moves `entries` (default: all of the run's) out of the way into a new `previous-<time>/`
 * folder inside `root`, each by a rename; returns that folder. The moved latest.json keeps
 * naming its own checkpoint there.
 */
export function moveRunAside(run: ExistingRun, now = new Date(), entries: readonly string[] = run.entries): string {
  const to = previousRunFolder(run.root, now);
  mkdirSync(to);
  for (const name of entries) renameSync(join(run.root, name), join(to, name));
  syncFolder(run.root);
  return to;
}

export class CheckpointError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CheckpointError';
  }
}

/** The latest checkpoint folder under `root`, or undefined when there is none. */
export function latestCheckpoint(root: string): string | undefined {
  const latest = join(root, 'latest.json');
  if (!existsSync(latest)) return undefined;
  const { dir } = JSON.parse(readFileSync(latest, 'utf8')) as { dir: string };
  return join(root, dir);
}

function readBin(path: string): ArrayBuffer {
  const b = readFileSync(path);
  return new Uint8Array(b).buffer;
}

/** Loads the weights into `model`; returns what the trainer had done. */
export function loadWeights(tf: Tf, dir: string, model: LayersModel): TrainerState {
  const modelJson = JSON.parse(readFileSync(join(dir, 'model.json'), 'utf8')) as { weightsManifest: { weights: WeightsManifestEntry[] }[] };
  const specs = modelJson.weightsManifest[0].weights;
  const named = tf.io.decodeWeights(readBin(join(dir, 'weights.bin')), specs);
  const values = specs.map((s) => named[s.name]);
  const expected = model.weights;
  if (values.length !== expected.length) throw new CheckpointError(`${dir} holds ${values.length} weights, the model has ${expected.length}: was it written by another model?`);
  values.forEach((v, i) => {
    if (v.shape.join(',') !== expected[i].shape.join(',')) throw new CheckpointError(`${dir}: weight ${specs[i].name} has shape [${v.shape.join(', ')}], the model expects [${expected[i].shape.join(', ')}]`);
  });
  model.setWeights(values);
  tf.dispose(values);
  return JSON.parse(readFileSync(join(dir, 'trainer.json'), 'utf8')) as TrainerState;
}

/**
 * Loads the optimizer state of `dir` into `optimizer`: all of it, or (a pipeline stage) the
 * slots of the trainable weights [from, to) of the model's `total`.
 */
export async function loadOptimizerState(tf: Tf, dir: string, optimizer: Optimizer, slice?: { readonly from: number; readonly to: number; readonly total: number }): Promise<void> {
  let state = readOptimizerState(tf, dir);
  if (state.className !== optimizer.getClassName()) throw new CheckpointError(`${dir} holds the state of ${state.className}, the job uses ${optimizer.getClassName()}`);
  if (slice) {
    const all = state;
    state = sliceOptimizerState(all, slice.from, slice.to, slice.total);
    const kept = new Set(state.weights);
    tf.dispose(all.weights.filter((w) => !kept.has(w)).map((w) => w.tensor));
  }
  await optimizer.setWeights([...state.weights]);
  tf.dispose(state.weights.map((w) => w.tensor));
}

/** Loads weights and optimizer state into `model` and `optimizer`; returns what the trainer had done. */
export async function loadCheckpoint(tf: Tf, dir: string, model: LayersModel, optimizer: Optimizer): Promise<TrainerState> {
  const state = loadWeights(tf, dir, model);
  await loadOptimizerState(tf, dir, optimizer);
  return state;
}

const epochList = (epochs: readonly number[]): string => epochs.length === 0 ? 'no epoch folder' : epochs.length === 1 ? `epoch-${epochs[0]}` : `epoch-${epochs[0]} … epoch-${epochs[epochs.length - 1]}`;

/**
 * Readies a job's checkpoint folder so that it only ever holds the run about to start, before
 * any worker reads or writes it. Starting over (`resume` false) on an earlier run moves that run
 * into `previous-<time>/`; resuming keeps it but moves aside epoch folders past what latest.json
 * names (another run's, which the resumed run would otherwise interleave with its own), and a
 * folder with no whole checkpoint to resume from is moved aside as for a fresh start.
 * Returns what was done, for the job's log; undefined when there was nothing to do.
 */
export function prepareCheckpointFolder(root: string, resume: boolean, now = new Date()): string | undefined {
  const run = existingRun(root);
  if (!run) return undefined;
  if (resume && run.latest) {
    const latestEpoch = run.latest.epoch;
    const stale = run.epochs.filter((e) => e > latestEpoch);
    if (stale.length === 0) return undefined;
    const to = moveRunAside(run, now, stale.map((e) => `epoch-${e}`));
    return `${epochList(stale)} in ${root} came after the checkpoint latest.json names (${run.latest.dir}), so they are another run's: moved to ${to} to keep them apart from the resumed run`;
  }
  const to = moveRunAside(run, now);
  const what = run.latest ? `the earlier run${run.job ? ` of ${run.job}` : ''} (${epochList(run.epochs)}, latest ${run.latest.dir}${run.savedAt ? ` saved ${run.savedAt}` : ''})` : `the checkpoints of an earlier run (${epochList(run.epochs)}, no latest.json naming a whole one)`;
  const why = resume ? 'there is no whole checkpoint to resume from, so this run starts at epoch 1' : 'this run starts at epoch 1 (--resume continues the earlier run instead)';
  return `${root} held ${what}: moved to ${to}; ${why}`;
}

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
 * A folder is written under a temporary name and renamed, and latest.json only then points to
 * it, so a worker killed mid-write leaves the previous checkpoint loadable.
 */
import type { LayersModel } from '@tensorflow/tfjs-layers';
import type { Optimizer } from '@tensorflow/tfjs-core';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
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

function writeOptimizerState(tf: Tf, dir: string, state: OptimizerState): Promise<void> {
  return tf.io.encodeWeights([...state.weights]).then((encoded) => {
    writeFileSync(join(dir, 'optimizer.bin'), new Uint8Array(encoded.data));
    writeFileSync(join(dir, 'optimizer.json'), JSON.stringify({ className: state.className, specs: encoded.specs }));
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
    writeFileSync(join(tmp, 'weights.bin'), new Uint8Array(toArrayBuffer(artifacts.weightData)));
    const modelJson = {
      modelTopology: artifacts.modelTopology,
      format: artifacts.format ?? 'layers-model',
      generatedBy: artifacts.generatedBy,
      convertedBy: null,
      weightsManifest: [{ paths: ['weights.bin'], weights: artifacts.weightSpecs ?? [] }],
    };
    writeFileSync(join(tmp, 'model.json'), JSON.stringify(modelJson));
    return Promise.resolve({ modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: 'JSON' } });
  }));
  await writeOptimizerState(tf, tmp, 'weights' in optimizer ? optimizer : await optimizerState(optimizer));
  writeFileSync(join(tmp, 'trainer.json'), JSON.stringify(state, null, 2));
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  const latestTmp = join(root, `.latest.json.tmp-${process.pid}`);
  writeFileSync(latestTmp, JSON.stringify({ dir: name, epoch: state.epochsDone }));
  renameSync(latestTmp, join(root, 'latest.json'));
  return dir;
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

/**
 * Checkpoints, one folder per epoch, written by rank 0 after the epoch:
 *   epoch-3/model.json + weights.bin   a TF.js Layers model (loadable with tf.loadLayersModel)
 *   epoch-3/optimizer.json + .bin      the optimizer's state (Adam's moments, iteration count)
 *   epoch-3/trainer.json               epochs done, global step, job name
 *   latest.json                        {"dir": "epoch-3", "epoch": 3}, replaced atomically last
 * A folder is written under a temporary name and renamed, and latest.json only then points to
 * it, so a worker killed mid-write leaves the previous checkpoint loadable.
 */
import type { LayersModel } from '@tensorflow/tfjs-layers';
import type { Optimizer } from '@tensorflow/tfjs-core';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Tf } from './backend';

type WeightsManifestEntry = Parameters<Tf['io']['decodeWeights']>[1][number];

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

export async function saveCheckpoint(tf: Tf, root: string, model: LayersModel, optimizer: Optimizer, state: TrainerState): Promise<string> {
  const name = `epoch-${state.epochsDone}`;
  const dir = join(root, name);
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
  const optWeights = await optimizer.getWeights();
  const encoded = await tf.io.encodeWeights(optWeights);
  writeFileSync(join(tmp, 'optimizer.bin'), new Uint8Array(encoded.data));
  writeFileSync(join(tmp, 'optimizer.json'), JSON.stringify({ className: optimizer.getClassName(), specs: encoded.specs }));
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

/** Loads weights and optimizer state into `model` and `optimizer`; returns what the trainer had done. */
export async function loadCheckpoint(tf: Tf, dir: string, model: LayersModel, optimizer: Optimizer): Promise<TrainerState> {
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
  const opt = JSON.parse(readFileSync(join(dir, 'optimizer.json'), 'utf8')) as { className: string; specs: WeightsManifestEntry[] };
  if (opt.className !== optimizer.getClassName()) throw new CheckpointError(`${dir} holds the state of ${opt.className}, the job uses ${optimizer.getClassName()}`);
  const optNamed = tf.io.decodeWeights(readBin(join(dir, 'optimizer.bin')), opt.specs);
  await optimizer.setWeights(opt.specs.map((s) => ({ name: s.name, tensor: optNamed[s.name] })));
  return JSON.parse(readFileSync(join(dir, 'trainer.json'), 'utf8')) as TrainerState;
}

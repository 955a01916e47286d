/**
 * Models, losses and optimizers for a job: the built-in presets (with seeded initial weights,
 * so that two processes build the same model), a TF.js Layers `model.json` read from disk
 * without tfjs-node, or the user's `createModel(tf, { inputShape, numClasses })`.
 */
import type { LayersModel } from '@tensorflow/tfjs-layers';
import type { Optimizer, Scalar, Tensor } from '@tensorflow/tfjs-core';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { Tf } from '../backends/types';
import type { LayerSummary } from './events';
import { createAdam, createMomentum, createSgd } from '../backends/fusedOptimizers';
import type { JobSpec, LossName, ModelSource } from './spec';

export class ModelError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ModelError';
  }
}

export async function buildModel(tf: Tf, src: ModelSource, inputShape: readonly number[], numClasses: number, seed: number): Promise<LayersModel> {
  switch (src.kind) {
    case 'preset':
      return src.preset === 'mlp' ? mlp(tf, inputShape, numClasses, src.hiddenUnits, seed) : cnn(tf, inputShape, numClasses, src.filters, seed);
    case 'layers':
      return tf.loadLayersModel(fileHandler(tf, src.path));
    case 'module': {
      const mod = createRequire(__filename)(src.path) as { createModel?: (t: Tf, info: { inputShape: number[]; numClasses: number }) => unknown };
      if (typeof mod.createModel !== 'function') throw new ModelError(`${src.path} does not export a createModel(tf, { inputShape, numClasses }) function`);
      const model = (await mod.createModel(tf, { inputShape: [...inputShape], numClasses })) as LayersModel | undefined;
      if (!model || typeof (model as { apply?: unknown }).apply !== 'function' || !Array.isArray(model.trainableWeights)) {
        throw new ModelError(`${src.path}: createModel() must return a TF.js Layers model (tf.sequential() or tf.model()), got ${typeof model}`);
      }
      return model;
    }
  }
}

function mlp(tf: Tf, inputShape: readonly number[], numClasses: number, hidden: readonly number[], seed: number): LayersModel {
  const init = (i: number) => tf.initializers.glorotUniform({ seed: seed * 100 + i });
  const model = tf.sequential({ name: 'mlp' });
  // Flatten wants rank ≥ 3 (images); feature vectors go straight into the first dense layer.
  const first = inputShape.length > 1 ? (model.add(tf.layers.flatten({ inputShape: [...inputShape] })), {}) : { inputShape: [...inputShape] };
  hidden.forEach((units, i) => model.add(tf.layers.dense({ ...(i === 0 ? first : {}), units, activation: 'relu', kernelInitializer: init(i) })));
  model.add(tf.layers.dense({ units: numClasses, activation: 'softmax', kernelInitializer: init(hidden.length) }));
  return model;
}

function cnn(tf: Tf, inputShape: readonly number[], numClasses: number, filters: readonly number[], seed: number): LayersModel {
  if (inputShape.length !== 3) throw new ModelError(`the "cnn" preset needs images (inputShape [height, width, channels]), the data has inputShape [${inputShape.join(', ')}]`);
  const init = (i: number) => tf.initializers.glorotUniform({ seed: seed * 100 + i });
  const model = tf.sequential({ name: 'cnn' });
  filters.forEach((f, i) => {
    model.add(tf.layers.conv2d({ ...(i === 0 ? { inputShape: [...inputShape] } : {}), filters: f, kernelSize: 3, padding: 'same', activation: 'relu', kernelInitializer: init(i) }));
    model.add(tf.layers.maxPooling2d({ poolSize: 2 }));
  });
  model.add(tf.layers.flatten());
  model.add(tf.layers.dense({ units: numClasses, activation: 'softmax', kernelInitializer: init(filters.length) }));
  return model;
}

/** Reads a model.json and its weight shards from disk (tf.io's file:// needs tfjs-node). */
function fileHandler(tf: Tf, path: string): Parameters<Tf['loadLayersModel']>[0] {
  return {
    load: async () => {
      let json: Parameters<Tf['io']['getModelArtifactsForJSON']>[0];
      try {
        json = JSON.parse(readFileSync(path, 'utf8')) as typeof json;
      } catch (err) {
        throw new ModelError(`${path} is not a readable model.json: ${(err as Error).message}`);
      }
      if (!json.modelTopology) throw new ModelError(`${path} has no modelTopology: is it a TF.js Layers model.json?`);
      return tf.io.getModelArtifactsForJSON(json, (manifest) => {
        const buffers: ArrayBuffer[] = [];
        for (const group of manifest) {
          for (const p of group.paths) {
            const b = readFileSync(join(dirname(path), p));
            buffers.push(new Uint8Array(b).buffer);
          }
        }
        return Promise.resolve([tf.io.getWeightSpecs(manifest), tf.io.concatenateArrayBuffers(buffers)]);
      });
    },
  };
}

export function makeOptimizer(tf: Tf, o: JobSpec['optimizer']): Optimizer {
  switch (o.name) {
    case 'sgd': return createSgd(tf, o.learningRate);
    case 'momentum': return createMomentum(tf, o.learningRate, o.momentum);
    case 'adam': return createAdam(tf, o.learningRate);
    case 'rmsprop': return tf.train.rmsprop(o.learningRate);
    case 'adagrad': return tf.train.adagrad(o.learningRate);
  }
}

/** Mean loss over the batch. `y` is one-hot. */
export function lossFn(tf: Tf, name: LossName, y: Tensor, out: Tensor): Scalar {
  if (name === 'softmaxCrossentropy') return tf.losses.softmaxCrossEntropy<Tensor, Scalar>(y, out);
  const eps = 1e-7;
  return tf.neg<Scalar>(tf.mean<Scalar>(tf.sum(tf.mul(y, tf.log(tf.clipByValue(out, eps, 1 - eps))), -1)));
}

/** Layers, output shapes and parameter counts, plus a rough per-device memory estimate. */
export function summarize(model: LayersModel, batch: number, optimizerSlots: number): { layers: LayerSummary[]; totalParams: number; trainableParams: number; estimatedBytesPerDevice: number } {
  const layers: LayerSummary[] = model.layers.map((l) => {
    let shape: string;
    try {
      shape = JSON.stringify(l.outputShape).replace(/null/g, 'None');
    } catch {
      shape = '?';
    }
    return { name: l.name, className: l.getClassName(), outputShape: shape, params: l.countParams() };
  });
  const totalParams = layers.reduce((s, l) => s + l.params, 0);
  const trainableParams = model.trainableWeights.reduce((s, w) => s + w.shape.reduce<number>((a, b) => a * (b ?? 1), 1), 0);
  // Weights + gradients + optimizer slots, and each layer's activations (kept for the backward pass) at the local batch.
  const activations = model.layers.reduce((s, l) => {
    const shape = (Array.isArray(l.outputShape[0]) ? l.outputShape[0] : l.outputShape) as (number | null)[];
    return s + shape.reduce<number>((a, b) => a * (b ?? batch), 1);
  }, 0);
  return { layers, totalParams, trainableParams, estimatedBytesPerDevice: 4 * (totalParams * (2 + optimizerSlots) + 2 * activations) };
}

export function optimizerSlots(name: JobSpec['optimizer']['name']): number {
  return name === 'adam' ? 2 : name === 'sgd' ? 0 : 1;
}

import * as tf from '@tensorflow/tfjs-core';
import * as tfl from '@tensorflow/tfjs-layers';
import { pseudoRandom } from './tfHarness';

/** Models shared by the wasm kernel tests and bench/wasm. */

/** The MLP: 784-512-512-10 (smaller hidden layers for unit tests). */
export function mlp(hidden = [512, 512]): tfl.Sequential {
  const m = tfl.sequential();
  hidden.forEach((units, i) => m.add(tfl.layers.dense({ units, activation: 'relu', ...(i === 0 ? { inputShape: [784] } : {}) })));
  m.add(tfl.layers.dense({ units: 10, activation: 'softmax' }));
  return m;
}

/** The small CNN: conv 8 3×3 → maxpool → conv 16 3×3 → maxpool → dense 10, on 28×28×1. */
export function smallCnn(): tfl.Sequential {
  const m = tfl.sequential();
  m.add(tfl.layers.conv2d({ inputShape: [28, 28, 1], filters: 8, kernelSize: 3, activation: 'relu' }));
  m.add(tfl.layers.maxPooling2d({ poolSize: 2 }));
  m.add(tfl.layers.conv2d({ filters: 16, kernelSize: 3, activation: 'relu' }));
  m.add(tfl.layers.maxPooling2d({ poolSize: 2 }));
  m.add(tfl.layers.flatten());
  m.add(tfl.layers.dense({ units: 10, activation: 'softmax' }));
  return m;
}

/** More layer kinds for gradient checks: 'same' and strided convs, batch norm, average pooling. */
export function richCnn(): tfl.Sequential {
  const m = tfl.sequential();
  // Batch norm before the ReLU, as usual: after it, ReLU's zeros would turn into ties that
  // max pooling may break differently on each backend (both right, gradients differ). No conv
  // bias: batch norm cancels it, so its gradient is float noise around 0.
  m.add(tfl.layers.conv2d({ inputShape: [12, 12, 2], filters: 4, kernelSize: 3, padding: 'same', useBias: false }));
  m.add(tfl.layers.batchNormalization());
  m.add(tfl.layers.reLU());
  m.add(tfl.layers.maxPooling2d({ poolSize: 2 }));
  m.add(tfl.layers.conv2d({ filters: 6, kernelSize: 3, strides: 2, padding: 'valid', activation: 'relu' }));
  m.add(tfl.layers.averagePooling2d({ poolSize: 2 }));
  m.add(tfl.layers.flatten());
  m.add(tfl.layers.dense({ units: 10, activation: 'softmax' }));
  return m;
}

/** Depthwise and separable convs (DepthwiseConv2dNativeBackprop{Input,Filter}). */
export function separableCnn(): tfl.Sequential {
  const m = tfl.sequential();
  m.add(tfl.layers.conv2d({ inputShape: [10, 10, 2], filters: 3, kernelSize: 3, padding: 'same' }));
  m.add(tfl.layers.depthwiseConv2d({ kernelSize: 3, depthMultiplier: 2, padding: 'same' }));
  m.add(tfl.layers.separableConv2d({ filters: 4, kernelSize: 3, activation: 'relu' }));
  m.add(tfl.layers.flatten());
  m.add(tfl.layers.dense({ units: 10, activation: 'softmax' }));
  return m;
}

/** An Embedding layer (the gradient of Gather is UnsortedSegmentSum). */
export function embeddingNet(): tfl.Sequential {
  const m = tfl.sequential();
  m.add(tfl.layers.embedding({ inputDim: 30, outputDim: 8, inputLength: 6 }));
  m.add(tfl.layers.flatten());
  m.add(tfl.layers.dense({ units: 10, activation: 'softmax' }));
  return m;
}

/** Deterministic weights, so that two copies of a model on two backends compute the same function. */
export function setDeterministicWeights(model: tfl.LayersModel, seed: number): void {
  const weights = model.weights.map((w, i) => {
    const size = w.shape.reduce((a: number, b) => a * (b ?? 1), 1);
    const r = pseudoRandom(size, seed + i);
    const fanIn = w.shape.length > 1 ? size / (w.shape[w.shape.length - 1] ?? 1) : 1;
    const positive = /gamma|moving_variance/.test(w.name);
    const values = r.map((v) => (positive ? 1 + 0.2 * v : v * Math.sqrt(3 / fanIn)));
    return tf.tensor(values, w.shape as number[]);
  });
  model.setWeights(weights);
  tf.dispose(weights);
}

/** A learnable batch: the class is which quarter of the image is brightest. */
export function quadrantBatch(n: number, size: number, seed: number): { x: tf.Tensor4D; y: tf.Tensor2D } {
  const noise = pseudoRandom(n * size * size, seed);
  const pixels = new Float32Array(n * size * size);
  const labels: number[] = [];
  const half = size / 2;
  for (let i = 0; i < n; i++) {
    const cls = i % 4;
    labels.push(cls);
    for (let r = 0; r < size; r++) {
      for (let c = 0; c < size; c++) {
        const quadrant = (r < half ? 0 : 2) + (c < half ? 0 : 1);
        const k = (i * size + r) * size + c;
        pixels[k] = 0.2 * noise[k] + (quadrant === cls ? 1 : 0);
      }
    }
  }
  return { x: tf.tensor4d(pixels, [n, size, size, 1]), y: tf.oneHot(tf.tensor1d(labels, 'int32'), 10) as tf.Tensor2D };
}

/** Random inputs and one-hot labels for a model whose input shape is `shape` (without the batch). */
export function randomBatch(n: number, shape: number[], seed: number, intMax?: number): { x: tf.Tensor; y: tf.Tensor2D } {
  const size = n * shape.reduce((a, b) => a * b, 1);
  const r = pseudoRandom(size, seed);
  const x = intMax == null ? tf.tensor(r, [n, ...shape]) : tf.tensor(r.map((v) => Math.floor((v + 1) / 2 * intMax)), [n, ...shape]);
  const labels = Array.from(pseudoRandom(n, seed + 1), (v) => Math.floor((v + 1) * 5) % 10);
  return { x, y: tf.oneHot(tf.tensor1d(labels, 'int32'), 10) as tf.Tensor2D };
}

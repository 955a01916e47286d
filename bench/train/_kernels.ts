/**
 * Where forward + backward time goes per TF.js kernel on the wasm backend (tf.profile), for the
 * bench models: npx tsc -p . && [GEMM=xnnpack] node out/bench/train/_kernels.js [mlp512|cnn] [batch]
 * (GEMM=xnnpack: the shipped matMul instead of ours, to compare)
 */
import type { Tensor, Variable } from '@tensorflow/tfjs-core';
import { loadBackend } from '../../src/training/backends/backend';
import { useOurGemm } from '../../src/training/backends/gemm';
import { loadDataset } from '../../src/training/job/data';
import { loadJobFile } from '../../src/training/job/spec';
import { buildModel, lossFn } from '../../src/training/job/model';
import { jobFileFor } from './_phases';

async function main(): Promise<void> {
  const model = process.argv[2] ?? 'mlp512';
  const spec = loadJobFile(jobFileFor(model), { strategy: 'single', devices: 1, backend: 'wasm' });
  const batch = Number(process.argv[3] ?? spec.batchSize);
  const backend = await loadBackend('wasm');
  if (process.env.GEMM === 'xnnpack') useOurGemm(false);
  const tf = backend.tf;
  const data = await loadDataset(spec.data, spec.file);
  const net = await buildModel(tf, spec.model, data.inputShape, data.numClasses, spec.seed);
  const vars = net.trainableWeights.map((w) => w.read() as Variable);
  const width = data.inputShape.reduce((a, b) => a * b, 1);
  const x = tf.tensor(new Float32Array(batch * width).map(() => Math.random()), [batch, ...data.inputShape]);
  const y = tf.oneHot(tf.tensor1d(new Int32Array(batch).map((_, i) => i % data.numClasses), 'int32'), data.numClasses);
  const step = () => tf.tidy(() => {
    const { grads } = tf.variableGrads(() => lossFn(tf, spec.loss, y, net.apply(x, { training: true }) as Tensor), vars);
    for (const g of Object.values(grads)) g.dataSync();
  });
  for (let i = 0; i < 5; i++) step();
  const n = 20;
  const byKernel = new Map<string, number>();
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const p = await tf.profile(step);
    for (const k of p.kernels) byKernel.set(k.name, (byKernel.get(k.name) ?? 0) + (k.kernelTimeMs as number));
  }
  const wallProfiled = (performance.now() - t0) / n;
  const t1 = performance.now();
  for (let i = 0; i < n; i++) step();
  const wall = (performance.now() - t1) / n;
  const rows = [...byKernel].sort((a, b) => b[1] - a[1]);
  const total = rows.reduce((s, r) => s + r[1], 0) / n;
  console.log(`${model} batch ${batch}: fwd+bwd ${wall.toFixed(1)} ms/step (profiled ${wallProfiled.toFixed(1)}), kernels ${total.toFixed(1)} ms`);
  for (const [k, ms] of rows.slice(0, 20)) console.log(`  ${k.padEnd(24)} ${(ms / n).toFixed(2)} ms`);
}
void main();

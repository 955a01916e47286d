/**
 * One worker process: one rank, one device, the whole model and optimizer (DDP), or the
 * only worker of a `single` job (a world of one). Talks to the coordinator over fork IPC
 * for control and metrics, and to its ring neighbours directly for gradients (ring.ts: shared
 * memory files with socket doorbells).
 *
 * A step: gather this rank's local batch from its shard, compute the gradients explicitly
 * (`optimizer.computeGradients`), average them (and the loss) over the ring in buckets, then
 * `applyGradients` — every rank applies the same averaged gradients to the same weights, so
 * the replicas never drift apart.
 */
import type { LayersModel } from '@tensorflow/tfjs-layers';
import type { Tensor, Variable } from '@tensorflow/tfjs-core';
import { loadBackend } from '../backends/backend';
import type { LoadedBackend, Tf } from '../backends/types';
import { saveCheckpoint } from '../job/checkpoint';
import { loadDataset, type Dataset, type Split } from '../job/data';
import type { JobMetrics } from '../job/events';
import type { JobSpec } from '../job/spec';
import { buildModel, lossFn, makeOptimizer, optimizerSlots, summarize } from '../job/model';
import { isOutOfMemory, wasmCrashAsOutOfMemory } from '../backends/oom';
import { webgpuErrorAsOutOfMemory } from '../backends/webgpu';
import { concatValues, scalarOf, valuesOf } from './reads';
import { BucketedAllReduce, Ring, RingError } from '../transport/ring';
import { applyFlat, GradientBuffer, readGradients } from './gradients';
import { Batcher, emit, nextMessage, readyMessage, send, type Init } from './rank';
import { batchRows, epochOrder, shardIndices, stepsPerEpoch } from './sampler';
import { Star, Tag } from '../transport/star';
import { trainPipeline } from './pipeline';
import { alone, deviceBytesOf, evaluate, resumeIfAsked, trainLoop } from './trainLoop';

export function hintFor(message: string): string | undefined {
  if (isOutOfMemory(message)) return 'The worker ran out of memory: try a smaller batchSize, more pipeline micro-batches, or ddp instead of dp (dp keeps every gradient on the coordinator).';
  const kernel = /Kernel '(\w+)' not registered for backend '(\w+)'/.exec(message);
  if (kernel) return `The ${kernel[2]} backend has no ${kernel[1]} kernel: set "backend": "cpu" in the job, or install @tensorflow/tfjs-node.`;
  if (/CUDA|cuDNN|CUDNN/.test(message)) return 'A CUDA error: check that CUDA 11.2 and cuDNN 8.1 are installed for @tensorflow/tfjs-node-gpu, or set "backend": "cpu".';
  return undefined;
}

/** The mean loss over (x, y) and its gradients for `vars`, as tensors; disposes x and y. */
function lossAndGradients(tf: Tf, model: LayersModel, vars: Variable[], spec: JobSpec, optimizer: ReturnType<typeof makeOptimizer>, x: Tensor, y: Tensor): ReturnType<ReturnType<typeof makeOptimizer>['computeGradients']> {
  const result = optimizer.computeGradients(() => lossFn(tf, spec.loss, y, model.apply(x, { training: true }) as Tensor), vars);
  tf.dispose([x, y]);
  return result;
}

/**
 * Gradients of the mean loss over (x, y) read out once into `buf` (the GradientBuffer's layout,
 * the loss in its last float; on webgpu one device read per bucket of `bucketFloats`); resolves
 * with the loss. Disposes x, y and every gradient tensor.
 */
async function gradientsInto(tf: Tf, model: LayersModel, vars: Variable[], spec: JobSpec, optimizer: ReturnType<typeof makeOptimizer>, x: Tensor, y: Tensor, flat: GradientBuffer, buf: Float32Array, bucketFloats: number): Promise<number> {
  const { value, grads } = lossAndGradients(tf, model, vars, spec, optimizer, x, y);
  try {
    return await readGradients(tf, flat, vars.map((v) => grads[v.name]), value, buf, bucketFloats);
  } finally {
    tf.dispose([value, ...Object.values(grads)]);
  }
}

export { GradientBuffer } from './gradients';

function assignFlat(tf: Tf, vars: Variable[], flat: Float32Array): void {
  let off = 0;
  for (const v of vars) {
    const t = tf.tensor(flat.subarray(off, off + v.size), v.shape);
    v.assign(t);
    t.dispose();
    off += v.size;
  }
  if (off !== flat.length) throw new Error(`received ${flat.length} weights, the model has ${off}`);
}

async function train(init: Init, backend: LoadedBackend, data: Dataset, model: LayersModel): Promise<JobMetrics> {
  const { spec, rank, worldSize } = init;
  const tf = backend.tf;
  const optimizer = makeOptimizer(tf, spec.optimizer);
  const vars = model.trainableWeights.map((w) => w.read() as Variable);
  const localBatch = spec.batchSize / worldSize;
  const batcher = new Batcher(tf, data, localBatch);

  const { startEpoch, globalStep, from: resumeFrom } = await resumeIfAsked(tf, spec, init.resume, model, optimizer, rank === 0, emit);

  await send(readyMessage(init, backend, data, startEpoch));
  await nextMessage('worker/go');
  const ring = await Ring.join({ rank, worldSize, dir: init.ringDir, onFallback: (message) => { emit({ type: 'job/log', level: 'warning', rank, message }).catch(() => undefined); } });
  try {
    if (!resumeFrom && worldSize > 1) {
      // As DDP does at construction: every replica starts from rank 0's weights.
      for (const v of vars) {
        const values = (await valuesOf(tf, v)).slice();
        await ring.broadcast(values, 0);
        const t = tf.tensor(values, v.shape);
        v.assign(t);
        t.dispose();
      }
    }
    if (rank === 0) {
      const s = summarize(model, localBatch, optimizerSlots(spec.optimizer.name));
      await emit({ type: 'job/summary', ...s });
    }

    const reducer = new BucketedAllReduce(ring);
    const flat = new GradientBuffer(vars.map((v) => v.size), backend.name === 'wasm');
    let shard: Int32Array = new Int32Array(0);
    return await trainLoop({
      tf, spec, rank, emit, startEpoch, globalStep,
      stepsPerEpoch: stepsPerEpoch(Math.ceil(data.train.count / worldSize), localBatch, spec.maxStepsPerEpoch),
      reportsSteps: rank === 0,
      beginEpoch: (epoch) => { shard = shardIndices({ datasetSize: data.train.count, worldSize, rank, seed: spec.seed, epoch }); },
      step: async (_epoch, step) => {
        const rows = batchRows(shard, step, localBatch);
        const { x, y } = batcher.batch(data.train, rows);
        if (worldSize === 1) {
          // Nothing to average: the gradients stay in the backend, no copy out and back.
          const { value, grads } = lossAndGradients(tf, model, vars, spec, optimizer, x, y);
          const loss = await scalarOf(tf, value);
          optimizer.applyGradients(grads);
          tf.dispose([value, ...Object.values(grads)]);
          return { samples: rows.length, loss };
        }
        // One flat buffer, last layer first, the local loss at the end: read out once, averaged
        // in place over the ring, read back in once.
        const buf = flat.next();
        await gradientsInto(tf, model, vars, spec, optimizer, x, y, flat, buf, reducer.bucketFloats);
        await reducer.meanFlat(buf);
        applyFlat(tf, optimizer, vars, flat, buf);
        return { samples: rows.length * worldSize, loss: buf[buf.length - 1] };
      },
      endEpoch: async (_epoch, lossSum) => {
        const evaluation = await evaluate(tf, model, spec, data, batcher, ring);
        return rank === 0 ? { lossSum, evaluation } : undefined;
      },
      evaluateOnly: () => evaluate(tf, model, spec, data, batcher, ring),
      checkpoint: (state) => saveCheckpoint(tf, spec.checkpointDir!, model, optimizer, state),
    });
  } finally {
    ring.close();
  }
}

/**
 * dp (torch.nn.DataParallel): rank 0 holds the optimizer, reads each global batch, scatters
 * slices to the replicas, computes its own slice, gathers their gradients, averages them
 * weighted by slice size (exactly the gradient of the global batch), steps once and sends the
 * new weights back out. Replicas only compute gradients.
 */
async function trainDp(init: Init, backend: LoadedBackend, data: Dataset, model: LayersModel): Promise<JobMetrics> {
  const { spec, rank, worldSize } = init;
  const tf = backend.tf;
  const vars = model.trainableWeights.map((w) => w.read() as Variable);
  const optimizer = makeOptimizer(tf, spec.optimizer);
  const width = data.inputShape.reduce((a, b) => a * b, 1);
  const batcher = new Batcher(tf, data, spec.batchSize);
  const { startEpoch, globalStep } = await resumeIfAsked(tf, spec, init.resume && rank === 0, model, optimizer, true, emit);
  const stepsFor = stepsPerEpoch(data.train.count, spec.batchSize, spec.maxStepsPerEpoch);
  await send({ ...readyMessage(init, backend, data, startEpoch), stepsPerEpoch: stepsFor });
  await nextMessage('worker/go');
  const star = await Star.join({ rank, worldSize, dir: init.ringDir });
  // Gradients travel and are summed in the ddp layout (GradientBuffer): read out of the backend once.
  const flat = new GradientBuffer(vars.map((v) => v.size), backend.name === 'wasm');
  // Sent whole over the star, but read off a GPU in ring-sized buckets all the same.
  const bucketFloats = BucketedAllReduce.defaultBucketFloats;
  const weightsOf = () => concatValues(tf, vars);
  try {
    if (rank !== 0) {
      // A replica: weights in, gradients out, until rank 0 says stop.
      const link = star.links[0]!;
      let steps = 0;
      for (;;) {
        const f = await link.next();
        if (f.tag === Tag.Stop) break;
        if (f.tag === Tag.Weights) {
          assignFlat(tf, vars, f.data);
          continue;
        }
        if (f.tag !== Tag.Batch) throw new RingError(`rank 0 sent frame type ${f.tag}`, false);
        const n = f.data.length / (width + 1);
        const labels = Int32Array.from(f.data.subarray(0, n));
        const split: Split = { xs: f.data.subarray(n), labels, count: n };
        const { x, y } = batcher.batch(split, Array.from({ length: n }, (_, i) => i));
        const buf = flat.next(); // reused only after send resolved: the socket has the bytes by then
        await gradientsInto(tf, model, vars, spec, optimizer, x, y, flat, buf, bucketFloats);
        await link.send(Tag.Grads, buf);
        steps++;
        if (steps === 1 || steps % 20 === 0) {
          const mem = tf.memory();
          await emit({ type: 'job/memory', rank, step: steps, numTensors: mem.numTensors, numBytes: mem.numBytes, rssBytes: process.memoryUsage().rss, ...deviceBytesOf(mem) });
        }
      }
      return { testAccuracy: NaN, testLoss: NaN, trainLoss: NaN, epochs: spec.epochs, steps, samplesPerSecond: NaN, durationMs: 0 };
    }

    const replicas = star.links.slice(1).map((l) => l!);
    const broadcastWeights = async () => {
      const w = await weightsOf();
      await Promise.all(replicas.map((l) => l.send(Tag.Weights, w)));
    };
    await broadcastWeights();
    await emit({ type: 'job/summary', ...summarize(model, spec.batchSize, optimizerSlots(spec.optimizer.name)) });
    let order: Int32Array = new Int32Array(0);
    const metrics = await trainLoop({
      tf, spec, rank, emit, startEpoch, globalStep,
      stepsPerEpoch: stepsFor,
      reportsSteps: true,
      beginEpoch: (epoch) => { order = epochOrder(data.train.count, spec.seed, epoch); },
      step: async (_epoch, step) => {
        const rows = batchRows(order, step, spec.batchSize);
        const m = rows.length;
        const bounds = Array.from({ length: worldSize + 1 }, (_, r) => Math.floor((r * m) / worldSize));
        const sizes = Array.from({ length: worldSize }, (_, r) => bounds[r + 1] - bounds[r]);
        // Scatter: each replica gets [labels..., features...] of its slice.
        const sent = replicas.map((link, i) => {
          const r = i + 1;
          if (sizes[r] === 0) return Promise.resolve();
          const slice = rows.subarray(bounds[r], bounds[r + 1]);
          const payload = new Float32Array(sizes[r] * (width + 1));
          slice.forEach((row, k) => {
            payload[k] = data.train.labels[row];
            payload.set(data.train.xs.subarray(row * width, (row + 1) * width), sizes[r] + k * width);
          });
          return link.send(Tag.Batch, payload);
        });
        // Its own slice's gradients, straight into the buffer the replicas' are added to (same layout, loss last).
        const total = flat.next();
        if (sizes[0] > 0) {
          const { x, y } = batcher.batch(data.train, rows.subarray(0, bounds[1]));
          await gradientsInto(tf, model, vars, spec, optimizer, x, y, flat, total, bucketFloats);
        } else {
          total.fill(0);
        }
        await Promise.all(sent);
        // Gather and average, weighted by slice size: the gradient of the whole batch's mean loss.
        const gathered = await Promise.all(replicas.map((link, i) => (sizes[i + 1] > 0 ? link.expect(Tag.Grads) : Promise.resolve(undefined))));
        for (let k = 0; k < total.length; k++) total[k] *= sizes[0];
        gathered.forEach((g, i) => {
          if (!g) return;
          if (g.length !== total.length) throw new RingError(`rank ${i + 1} sent ${g.length} gradient values, expected ${total.length}`, false);
          const w = sizes[i + 1];
          for (let k = 0; k < total.length; k++) total[k] += w * g[k];
        });
        for (let k = 0; k < total.length; k++) total[k] /= m;
        applyFlat(tf, optimizer, vars, flat, total);
        await broadcastWeights();
        return { samples: m, loss: total[total.length - 1] };
      },
      endEpoch: async (_epoch, lossSum) => ({ lossSum, evaluation: await evaluate(tf, model, spec, data, batcher, alone) }),
      evaluateOnly: () => evaluate(tf, model, spec, data, batcher, alone),
      checkpoint: (state) => saveCheckpoint(tf, spec.checkpointDir!, model, optimizer, state),
    });
    await Promise.all(replicas.map((l) => l.send(Tag.Stop, new Float32Array(0))));
    return metrics;
  } finally {
    star.close();
  }
}

/** The wasm backend as shipped has no Conv2DBackpropFilter: a conv net falls back to cpu rather than fail at step 1. */
async function ensureTrainable(backend: LoadedBackend, model: LayersModel): Promise<LoadedBackend> {
  if (backend.name !== 'wasm') return backend;
  const tf = backend.tf;
  const missing = ['Conv2DBackpropFilter', 'Conv2DBackpropInput'].filter((k) => model.layers.some((l) => l.getClassName() === 'Conv2D') && !tf.getKernel(k, 'wasm'));
  if (missing.length === 0) return backend;
  await tf.setBackend('cpu');
  await tf.ready();
  return { ...backend, name: 'cpu', label: 'cpu', note: `${backend.note ? `${backend.note}; ` : ''}wasm has no ${missing.join('/')} kernel for this conv net, so cpu` };
}

export async function workerMain(): Promise<void> {
  // The coordinator gone means the job is over: never outlive it.
  process.on('disconnect', () => process.exit(1));
  const init = await nextMessage('worker/init');
  let backend: LoadedBackend | undefined;
  try {
    backend = await loadBackend(init.spec.backend);
    const data = await loadDataset(init.spec.data, init.spec.file);
    const model = await buildModel(backend.tf, init.spec.model, data.inputShape, data.numClasses, init.spec.seed);
    backend = await ensureTrainable(backend, model);
    const metrics = init.spec.strategy === 'dp' ? await trainDp(init, backend, data, model) : init.spec.strategy === 'pipeline' ? await trainPipeline(init, backend, data, model) : await train(init, backend, data, model);
    await send({ type: 'worker/done', rank: init.rank, metrics });
    process.exit(0);
  } catch (err) {
    // A wasm trap with the heap at its maximum is out of memory (oom.ts); so is anything after a webgpu device ran out of memory or was lost (webgpu.ts).
    const e = webgpuErrorAsOutOfMemory(backend?.outOfMemory, wasmCrashAsOutOfMemory(backend?.tf, err)) as Error;
    const reason = e instanceof RingError ? e.message : `${e.name === 'Error' ? '' : `${e.name}: `}${e.message ?? String(err)}`;
    const hint = hintFor(reason);
    await send({ type: 'worker/failed', rank: init.rank, reason, ...(hint ? { hint } : {}), peerLost: e instanceof RingError && e.peerLost });
    process.exit(1);
  }
}

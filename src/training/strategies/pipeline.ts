/**
 * The `pipeline` strategy: the model's layers split into stages, one stage per worker process
 * (one per device, as the other strategies), balanced by measured cost (see
 * `pipelineSchedule.ts` for the method). Every batch is cut into micro-batches that flow
 * through the stages: activations forward from stage s to s+1, their gradients backward,
 * as raw Float32Array frames over the Unix-socket framing of `star.ts` (`FrameLink`). Each
 * stage accumulates its layers' gradients over the micro-batches and steps its own optimizer
 * once per batch, so K steps give the same weights as `single` with the same global batch.
 *
 * Schedules: GPipe (fill-drain: all forwards, then all backwards) or 1F1B (PipeDream-Flush).
 * TF.js keeps no autodiff tape between calls, so a stage keeps only the INPUT of each
 * micro-batch after its forward and recomputes the forward inside the backward pass — the
 * re-materialisation GPipe itself uses to save memory. The last stage's forward is folded
 * into its backward (nothing downstream waits for it).
 *
 * Besides training frames, the chain carries, in this order on every link:
 * - forward at start: the setup (start epoch, global step, split, layer costs), then the
 *   initial weights of the later stages from rank 0 (so every stage starts from rank 0's
 *   model, as DDP does, also for unseeded user models and when resuming);
 * - backward after each epoch: the stages' weights and the epoch's loss sum, so that rank 0
 *   holds the whole model to evaluate and checkpoint (with a checkpointDir, each later stage
 *   first writes its optimizer state beside it, and rank 0 merges them into one checkpoint;
 *   on resume every stage loads its own part back);
 * - backward at the end: each stage's busy and idle time; then forward a goodbye, and each
 *   rank closes only after the next one has closed (so no frame is lost to a closed socket).
 */
import type { LayersModel } from '@tensorflow/tfjs-layers';
import type { Scalar, Tensor, Variable } from '@tensorflow/tfjs-core';
import { createServer, type Server, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { LoadedBackend, Tf } from '../backends/types';
import { checkpointFolder, loadOptimizerState, mergeOptimizerStates, optimizerState, saveCheckpoint, saveStageOptimizer, takeStageOptimizers } from '../job/checkpoint';
import type { Dataset } from '../job/data';
import type { JobMetrics } from '../job/events';
import { lossFn, makeOptimizer, optimizerSlots, summarize } from '../job/model';
import { balanceStages, bubbleFraction, idealBubble, microBatchBounds, stageSchedule, type PipelineMetrics, type StageTime } from './pipelineSchedule';
import { connectWithRetry, RingError, ringSocketPath } from '../transport/ring';
import { batchRows, epochOrder, stepsPerEpoch } from './sampler';
import { FrameLink, type Tag } from '../transport/star';
import { alone, evaluate, resumeIfAsked, trainLoop } from './trainLoop';
import { Batcher, emit, flatten, nextMessage, readyMessage, send, type Init } from './rank';
import { concatValues, valuesOf } from './reads';

type Layer = LayersModel['layers'][number];

/** Frame tags of the pipeline chain (beside star.ts's 1-5, so a crossed wire is caught). */
const enum PipeTag {
  Setup = 11,
  Weights = 12,
  Activation = 13,
  Gradient = 14,
  Gather = 15,
  Stats = 16,
  Bye = 17,
}
const tag = (t: PipeTag): Tag => t as number;

/** The links of one stage: to the previous stage (s-1) and to the next (s+1), each a socket carrying frames both ways. */
export class Chain {
  private constructor(
    readonly rank: number,
    readonly worldSize: number,
    readonly prev: FrameLink | undefined,
    readonly next: FrameLink | undefined,
    private readonly nextSocket: Socket | undefined,
    private readonly sockets: Socket[],
    private readonly server: Server | undefined,
  ) {}

  static async join(o: { rank: number; worldSize: number; dir: string; connectTimeoutMs?: number }): Promise<Chain> {
    const timeoutMs = o.connectTimeoutMs ?? 30_000;
    let server: Server | undefined;
    let accepted: Promise<Socket> | undefined;
    if (o.rank > 0) {
      const srv = createServer();
      server = srv;
      await new Promise<void>((resolve, reject) => {
        srv.once('error', reject);
        srv.listen(ringSocketPath(o.dir, o.rank), () => resolve());
      });
      accepted = new Promise<Socket>((resolve, reject) => {
        const timer = setTimeout(() => reject(new RingError(`rank ${o.rank - 1} did not connect within ${timeoutMs} ms`, true)), timeoutMs);
        srv.once('connection', (socket) => {
          clearTimeout(timer);
          srv.close(); // exactly one peer: the previous stage
          resolve(socket);
        });
      });
      accepted.catch(() => undefined); // awaited below
    }
    let nextSocket: Socket | undefined;
    try {
      nextSocket = o.rank + 1 < o.worldSize ? await connectWithRetry(ringSocketPath(o.dir, o.rank + 1), o.rank + 1, Date.now() + timeoutMs) : undefined;
      const prevSocket = accepted ? await accepted : undefined;
      const sockets = [prevSocket, nextSocket].filter((s): s is Socket => s !== undefined);
      return new Chain(o.rank, o.worldSize, prevSocket && new FrameLink(prevSocket, `rank ${o.rank - 1}`), nextSocket && new FrameLink(nextSocket, `rank ${o.rank + 1}`), nextSocket, sockets, server);
    } catch (err) {
      nextSocket?.destroy();
      server?.close();
      throw err;
    }
  }

  /** Resolves when the next stage has closed its end (it has read everything it needed). */
  nextClosed(): Promise<void> {
    const s = this.nextSocket;
    if (!s || s.destroyed || s.closed) return Promise.resolve();
    return new Promise((resolve) => s.once('close', () => resolve()));
  }

  close(): void {
    for (const s of this.sockets) s.destroy();
    this.server?.close();
  }
}

async function expectFrame(link: FrameLink, t: PipeTag, floats?: number): Promise<Float32Array> {
  const data = await link.expect(tag(t));
  if (floats !== undefined && data.length !== floats) throw new RingError(`${link.peer} sent ${data.length} values in a frame of type ${t}, expected ${floats}`, false);
  return data;
}

function stageVars(layers: readonly Layer[]): Variable[] {
  return layers.flatMap((l) => l.trainableWeights.map((w) => w.read() as Variable));
}

function assign(tf: Tf, vars: readonly Variable[], flat: Float32Array): void {
  let off = 0;
  for (const v of vars) {
    const t = tf.tensor(flat.subarray(off, off + v.size), v.shape);
    v.assign(t);
    t.dispose();
    off += v.size;
  }
  if (off !== flat.length) throw new RingError(`received ${flat.length} weights, these stages have ${off}`, false);
}

/** The shape of one example at the output of `layer` (without the batch dimension). */
function exampleShape(layer: Layer): number[] {
  const shape = layer.outputShape as (number | null)[];
  if (Array.isArray(shape[0])) throw new Error(`layer ${layer.name} has several outputs; a pipeline stage boundary must carry one tensor`);
  return shape.slice(1).map((d) => d ?? 1);
}

/** The layers a pipeline splits: a Sequential model's, in order. */
export function pipelineLayers(model: LayersModel): Layer[] {
  if (model.getClassName() !== 'Sequential') {
    throw new Error(`strategy "pipeline" splits a Sequential model layer by layer; this model is a ${model.getClassName()} (functional) model, whose layers need not form a chain: build it with tf.sequential(), or use "ddp"`);
  }
  return model.layers.filter((l) => l.getClassName() !== 'InputLayer');
}

let inputCounter = 0;

/**
 * Forward + backward through `layers` with the input as a variable, so its gradient comes back
 * too (the gradient to send to the previous stage). `head` turns the stage's output into the
 * scalar to differentiate: the scaled loss on the last stage, sum(out · dy) elsewhere.
 */
async function backward(tf: Tf, layers: readonly Layer[], vars: readonly Variable[], input: Tensor, wantInputGrad: boolean, head: (out: Tensor) => Scalar): Promise<{ value: number; grads: Float32Array[]; inputGrad?: Float32Array }> {
  // A first stage of parameter-free layers only (a Flatten, say): nothing to differentiate.
  if (vars.length === 0 && !wantInputGrad) return { value: NaN, grads: [] };
  const xv = wantInputGrad ? tf.variable(input, true, `pipeline_input_${process.pid}_${inputCounter++}`) : undefined;
  try {
    const x = xv ?? input;
    const { value, grads } = tf.variableGrads(() => head(layers.reduce<Tensor>((t, l) => l.apply(t, { training: true }) as Tensor, x)), [...vars, ...(xv ? [xv] : [])]);
    // One read: the loss, each variable's gradient, then the input's (on webgpu joined on the GPU first).
    const parts = [value, ...vars.map((v) => grads[v.name]), ...(xv ? [grads[xv.name]] : [])];
    const all = await concatValues(tf, parts);
    tf.dispose([value, ...Object.values(grads)]);
    let off = 1;
    const take = (n: number) => all.subarray(off, (off += n));
    return {
      value: all[0],
      grads: vars.map((v) => take(v.size)),
      ...(xv ? { inputGrad: Float32Array.from(take(xv.size)) } : {}),
    };
  } finally {
    xv?.dispose();
  }
}

/** Rank 0: one forward+backward per layer on `x`, once untimed (warm-up) and once timed. Milliseconds per layer. */
async function measureLayerCosts(tf: Tf, layers: readonly Layer[], x: Tensor): Promise<number[]> {
  const pass = async (): Promise<number[]> => {
    const costs: number[] = [];
    let h = tf.clone(x);
    for (const layer of layers) {
      const vars = stageVars([layer]);
      const t0 = performance.now();
      await backward(tf, [layer], vars, h, true, (out) => tf.sum(out));
      const next = tf.tidy(() => layer.apply(h, { training: true }) as Tensor);
      await valuesOf(tf, next);
      costs.push(performance.now() - t0);
      h.dispose();
      h = next;
    }
    h.dispose();
    return costs;
  };
  await pass();
  return pass();
}

export async function trainPipeline(init: Init, backend: LoadedBackend, data: Dataset, model: LayersModel): Promise<JobMetrics> {
  const { spec, rank, worldSize } = init;
  const tf = backend.tf;
  const stages = worldSize;
  const micro = spec.pipeline.microBatches;
  const layers = pipelineLayers(model);
  const optimizer = makeOptimizer(tf, spec.optimizer);
  const batcher = new Batcher(tf, data, spec.batchSize);
  const stepsFor = stepsPerEpoch(data.train.count, spec.batchSize, spec.maxStepsPerEpoch);
  const last = rank === stages - 1;

  // Rank 0 loads the whole model and hands the later stages their weights below; every stage loads its own optimizer state once the split is known.
  let { startEpoch, globalStep } = await resumeIfAsked(tf, spec, init.resume && rank === 0, model, undefined, true, emit);
  await send({ ...readyMessage(init, backend, data, startEpoch), stepsPerEpoch: stepsFor });
  await nextMessage('worker/go');
  const chain = await Chain.join({ rank, worldSize, dir: init.ringDir });
  try {
    // Setup: rank 0 measures, splits, and hands every stage its weights.
    let bounds: number[];
    let layerCosts: number[];
    if (rank === 0) {
      const first = epochOrder(data.train.count, spec.seed, startEpoch);
      const probe = batcher.batch(data.train, first.subarray(0, Math.max(1, Math.floor(spec.batchSize / micro))));
      layerCosts = await measureLayerCosts(tf, layers, probe.x);
      tf.dispose([probe.x, probe.y]);
      bounds = balanceStages(layerCosts, stages);
      const setup = new Float32Array([startEpoch, globalStep, ...bounds, ...layerCosts]);
      await chain.next!.send(tag(PipeTag.Setup), setup);
      await chain.next!.send(tag(PipeTag.Weights), await concatValues(tf, stageVars(layers.slice(bounds[1]))));
      await emit({ type: 'job/summary', ...summarize(model, spec.batchSize / micro, optimizerSlots(spec.optimizer.name)) });
      const split = Array.from({ length: stages }, (_, s) => `stage ${s}: ${layers.slice(bounds[s], bounds[s + 1]).map((l) => l.name).join(', ')}`);
      await emit({ type: 'job/log', level: 'info', message: `pipeline: ${stages} stages, ${micro} micro-batches, ${spec.pipeline.schedule}; layer costs (ms, forward+backward of one micro-batch) ${layerCosts.map((c) => c.toFixed(2)).join(', ')}; ${split.join('; ')}` });
    } else {
      const setup = await expectFrame(chain.prev!, PipeTag.Setup, 2 + stages + 1 + layers.length);
      startEpoch = setup[0];
      globalStep = setup[1];
      bounds = Array.from(setup.subarray(2, 3 + stages));
      layerCosts = Array.from(setup.subarray(3 + stages));
      const weights = await expectFrame(chain.prev!, PipeTag.Weights);
      const mine = stageVars(layers.slice(bounds[rank], bounds[rank + 1]));
      const own = mine.reduce((n, v) => n + v.size, 0);
      assign(tf, mine, weights.subarray(0, own));
      if (chain.next) {
        await chain.next.send(tag(PipeTag.Setup), setup);
        await chain.next.send(tag(PipeTag.Weights), weights.slice(own));
      }
    }
    const myLayers = layers.slice(bounds[rank], bounds[rank + 1]);
    const vars = stageVars(myLayers);
    const varsBefore = stageVars(layers.slice(0, bounds[rank])).length;
    const totalVars = stageVars(layers).length;
    if (startEpoch > 0 && spec.checkpointDir) {
      await loadOptimizerState(tf, checkpointFolder(spec.checkpointDir, startEpoch), optimizer, { from: varsBefore, to: varsBefore + vars.length, total: totalVars });
    }
    const inShape = rank === 0 ? [...data.inputShape] : exampleShape(layers[bounds[rank] - 1]);
    const outShape = exampleShape(layers[bounds[rank + 1] - 1]);
    const inWidth = inShape.reduce((a, b) => a * b, 1);
    const outWidth = outShape.reduce((a, b) => a * b, 1);
    const ops = stageSchedule(spec.pipeline.schedule, rank, stages, micro);
    const acc = vars.map((v) => new Float32Array(v.size));
    let busyMs = 0;
    let idleMs = 0;
    let order: Int32Array = new Int32Array(0);
    const loopMetrics = await trainLoop({
      tf, spec, rank, emit, startEpoch, globalStep,
      stepsPerEpoch: stepsFor,
      reportsSteps: last,
      beginEpoch: (epoch) => { order = epochOrder(data.train.count, spec.seed, epoch); },
      step: async (_epoch, step) => {
        const stepStart = performance.now();
        let stepBusy = 0;
        const rows = batchRows(order, step, spec.batchSize);
        const m = rows.length;
        const mb = microBatchBounds(m, micro);
        const inputs: (Tensor | undefined)[] = new Array<Tensor | undefined>(micro).fill(undefined);
        const sends: Promise<void>[] = [];
        let stepLoss = 0;
        for (const a of acc) a.fill(0);
        for (const op of ops) {
          const k = op.micro;
          const n = mb[k + 1] - mb[k];
          if (n === 0) continue; // a short last batch: fewer micro-batches, the same on every stage
          if (op.kind === 'F') {
            let input: Tensor;
            if (rank === 0) {
              const t0 = performance.now();
              const b = batcher.batch(data.train, rows.subarray(mb[k], mb[k + 1]));
              b.y.dispose();
              input = b.x;
              stepBusy += performance.now() - t0;
            } else {
              const act = await expectFrame(chain.prev!, PipeTag.Activation, n * inWidth);
              input = tf.tensor(act, [n, ...inShape]);
            }
            inputs[k] = input;
            if (!last) {
              const t0 = performance.now();
              const out = tf.tidy(() => myLayers.reduce<Tensor>((t, l) => l.apply(t, { training: true }) as Tensor, input));
              const values = Float32Array.from(await valuesOf(tf, out));
              out.dispose();
              stepBusy += performance.now() - t0;
              sends.push(chain.next!.send(tag(PipeTag.Activation), values));
            }
          } else {
            const input = inputs[k]!;
            let head: (out: Tensor) => Scalar;
            let dy: Tensor | undefined;
            let y: Tensor | undefined;
            if (last) {
              const t0 = performance.now();
              const labels = batcher.batch(data.train, rows.subarray(mb[k], mb[k + 1]));
              labels.x.dispose();
              y = labels.y;
              stepBusy += performance.now() - t0;
              // Each micro-batch's mean loss weighted by its share of the batch: the sum is the batch mean, as in single.
              head = (out) => tf.mul(lossFn(tf, spec.loss, y!, out), n / m);
            } else {
              const g = await expectFrame(chain.next!, PipeTag.Gradient, n * outWidth);
              dy = tf.tensor(g, [n, ...outShape]);
              head = (out) => tf.sum(tf.mul(out, dy!));
            }
            const t0 = performance.now();
            const r = await backward(tf, myLayers, vars, input, rank > 0, head);
            r.grads.forEach((g, i) => {
              const a = acc[i];
              for (let j = 0; j < a.length; j++) a[j] += g[j];
            });
            tf.dispose([input, ...(dy ? [dy] : []), ...(y ? [y] : [])]);
            inputs[k] = undefined;
            stepBusy += performance.now() - t0;
            if (last) stepLoss += r.value;
            if (r.inputGrad) sends.push(chain.prev!.send(tag(PipeTag.Gradient), r.inputGrad));
          }
        }
        const t0 = performance.now();
        const grads = vars.map((v, i) => ({ name: v.name, tensor: tf.tensor(acc[i], v.shape) }));
        optimizer.applyGradients(grads);
        tf.dispose(grads.map((g) => g.tensor));
        stepBusy += performance.now() - t0;
        await Promise.all(sends);
        const stepMs = performance.now() - stepStart;
        busyMs += stepBusy;
        idleMs += Math.max(0, stepMs - stepBusy);
        return { samples: m, loss: stepLoss };
      },
      // Gather the stages' weights (and the loss) on rank 0, which evaluates and checkpoints the whole model.
      endEpoch: async (epoch, lossSum) => {
        const own = await concatValues(tf, vars);
        if (rank > 0 && spec.checkpointDir) await saveStageOptimizer(tf, spec.checkpointDir, epoch + 1, rank, optimizer);
        if (last) {
          await chain.prev!.send(tag(PipeTag.Gather), flatten([new Float32Array([lossSum]), own]));
          return undefined;
        }
        const later = await expectFrame(chain.next!, PipeTag.Gather);
        if (rank > 0) {
          await chain.prev!.send(tag(PipeTag.Gather), flatten([later.subarray(0, 1), own, later.subarray(1)]));
          return undefined;
        }
        assign(tf, stageVars(layers.slice(bounds[1])), later.subarray(1));
        return { lossSum: later[0], evaluation: await evaluate(tf, model, spec, data, batcher, alone) };
      },
      evaluateOnly: () => (rank === 0 ? evaluate(tf, model, spec, data, batcher, alone) : Promise.resolve(undefined)),
      // One optimizer state over the whole model, as single would have written it.
      checkpoint: async (state) => {
        const parts = [await optimizerState(optimizer), ...takeStageOptimizers(tf, spec.checkpointDir!, state.epochsDone, stages)];
        const sizes = Array.from({ length: stages }, (_, s) => stageVars(layers.slice(bounds[s], bounds[s + 1])).length);
        return saveCheckpoint(tf, spec.checkpointDir!, model, mergeOptimizerStates(parts.map((p, s) => ({ state: p, vars: sizes[s] }))), state);
      },
    });

    // Per-stage busy and idle time to rank 0, then goodbye forward; close after the next stage has.
    const mine = new Float32Array([busyMs, idleMs]);
    let stats: Float32Array = mine;
    if (chain.next) stats = flatten([mine, await expectFrame(chain.next, PipeTag.Stats, 2 * (stages - rank - 1))]);
    if (chain.prev) {
      await chain.prev.send(tag(PipeTag.Stats), stats);
      await expectFrame(chain.prev, PipeTag.Bye, 0);
    }
    if (chain.next) {
      const closed = chain.nextClosed();
      await chain.next.send(tag(PipeTag.Bye), new Float32Array(0));
      await closed;
    }
    const stageTimes: StageTime[] = Array.from({ length: stages }, (_, s) => ({ rank: s, layers: [bounds[s], bounds[s + 1]] as const, busyMs: stats[2 * s] ?? NaN, idleMs: stats[2 * s + 1] ?? NaN }));
    const pipeline: PipelineMetrics = {
      schedule: spec.pipeline.schedule,
      stages: rank === 0 ? stageTimes : [],
      microBatches: micro,
      layerCostsMs: layerCosts,
      bubbleFraction: rank === 0 ? bubbleFraction(stageTimes) : NaN,
      idealBubbleFraction: idealBubble(stages, micro),
    };
    return { ...loopMetrics, pipeline };
  } finally {
    chain.close();
  }
}

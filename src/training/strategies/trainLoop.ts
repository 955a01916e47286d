/**
 * The epoch/step loop that every strategy's reporting worker runs (`single`/`ddp` ranks, the
 * `dp` coordinator rank, every `pipeline` stage): epochs from the start epoch, the steps of
 * each, the `job/step`, `job/memory`, `job/epoch` and `job/checkpoint` events, the tensor-leak
 * watch, the evaluation at the end of every epoch and the final metrics. What differs between
 * strategies — how one optimizer step is computed, how the ranks meet to evaluate, what a
 * checkpoint holds — comes in as functions.
 *
 * Cancellation is the coordinator's: it kills the worker processes (see `launchers/coordinator.ts`), so the loop
 * needs no flag of its own; a step that is cut off mid-way never reaches a checkpoint, which is
 * written whole or not at all (`checkpoint.ts`).
 */
import type { LayersModel } from '@tensorflow/tfjs-layers';
import type { Tensor } from '@tensorflow/tfjs-core';
import type { Tf } from '../backends/types';
import type { Optimizer } from '@tensorflow/tfjs-core';
import { latestCheckpoint, loadCheckpoint, loadWeights, type TrainerState } from '../job/checkpoint';
import type { Dataset } from '../job/data';
import type { JobEvent, JobMetrics } from '../job/events';
import type { JobSpec } from '../job/spec';
import { lossFn } from '../job/model';
import type { Batcher } from './rank';
import { valuesOf } from './reads';

/** Watches `tf.memory().numTensors` after every step; growth on every one of `window` steps is a leak. */
export class LeakWatch {
  private history: number[] = [];
  private reported = false;

  constructor(private readonly window = 5) {}

  /** Returns the step the growth started at, once, when a leak is seen. */
  observe(step: number, numTensors: number): number | undefined {
    this.history.push(numTensors);
    if (this.history.length > this.window + 1) this.history.shift();
    if (this.reported || this.history.length <= this.window) return undefined;
    for (let i = 1; i < this.history.length; i++) if (this.history[i] <= this.history[i - 1]) return undefined;
    this.reported = true;
    return step - this.window;
  }
}

export interface Evaluation {
  readonly accuracy: number;
  readonly loss: number;
}

/** Who evaluates what: a contiguous slice of the test split per rank, and how the sums meet. */
export interface EvalGroup {
  readonly rank: number;
  readonly worldSize: number;
  allReduceSum(data: Float32Array): Promise<void>;
}

export const alone: EvalGroup = { rank: 0, worldSize: 1, allReduceSum: () => Promise.resolve() };

/** Accuracy and mean loss on the test split; every rank of `group` calls it and gets the same answer. */
export async function evaluate(tf: Tf, model: LayersModel, spec: JobSpec, data: Dataset, batcher: Batcher, group: EvalGroup): Promise<Evaluation> {
  const n = data.test.count;
  const from = Math.floor((group.rank * n) / group.worldSize);
  const to = Math.floor(((group.rank + 1) * n) / group.worldSize);
  let correct = 0;
  let lossSum = 0;
  for (let start = from; start < to; start += 512) {
    const rows = Array.from({ length: Math.min(512, to - start) }, (_, i) => start + i);
    const { x, y } = batcher.batch(data.test, rows);
    const both = tf.tidy(() => {
      const out = model.apply(x, { training: false }) as Tensor;
      const hits = tf.sum(tf.cast(tf.equal(tf.argMax(out, -1), tf.argMax(y, -1)), 'float32'));
      return tf.stack([hits, lossFn(tf, spec.loss, y, out)]);
    });
    tf.dispose([x, y]);
    // One read per batch (an awaited one on webgpu).
    const [c, l] = await valuesOf(tf, both);
    both.dispose();
    correct += c;
    lossSum += l * rows.length;
  }
  const sums = new Float32Array([correct, lossSum]);
  await group.allReduceSum(sums);
  return { accuracy: sums[0] / n, loss: sums[1] / n };
}

/** Where a job starts: epoch and optimizer steps done, and the checkpoint it resumed from. */
export interface Start {
  readonly startEpoch: number;
  readonly globalStep: number;
  readonly from?: string;
}

/**
 * With `--resume` and a checkpoint in the job's checkpointDir: loads its weights into `model`
 * and its optimizer state into `optimizer` (when given: a pipeline stage loads its part later),
 * says so (when `announce`), and says where to start.
 */
export async function resumeIfAsked(tf: Tf, spec: JobSpec, resume: boolean, model: LayersModel, optimizer: Optimizer | undefined, announce: boolean, emit: (event: JobEvent) => Promise<void>): Promise<Start> {
  const from = resume && spec.checkpointDir ? latestCheckpoint(spec.checkpointDir) : undefined;
  if (!from) return { startEpoch: 0, globalStep: 0 };
  const state = optimizer ? await loadCheckpoint(tf, from, model, optimizer) : loadWeights(tf, from, model);
  if (announce) await emit({ type: 'job/log', level: 'info', message: `resumed from ${from} (${state.epochsDone} epochs done)` });
  return { startEpoch: state.epochsDone, globalStep: state.globalStep, from };
}

/** What one optimizer step did. */
export interface StepOutcome {
  /** Samples of the global batch (all ranks together) the step trained on. */
  readonly samples: number;
  /** The mean loss over the global batch; only read on the rank that reports steps. */
  readonly loss: number;
}

/** The end of an epoch on the rank that reports it: the sum of the epoch's step losses, and the evaluation. */
export interface EpochOutcome {
  readonly lossSum: number;
  readonly evaluation: Evaluation;
}

export interface LoopOptions {
  readonly tf: Tf;
  readonly spec: JobSpec;
  readonly rank: number;
  readonly emit: (event: JobEvent) => Promise<void>;
  /** Where the loop starts (> 0 when resumed) and the optimizer steps already done. */
  readonly startEpoch: number;
  readonly globalStep: number;
  readonly stepsPerEpoch: number;
  /** Whether this rank sends `job/step` (the rank that knows the global loss: rank 0, or the last pipeline stage). */
  readonly reportsSteps: boolean;
  /** Before the steps of an epoch (the shuffle of DistributedSampler). */
  readonly beginEpoch: (epoch: number) => void;
  /** One optimizer step: `step` counts from 0 within the epoch. */
  readonly step: (epoch: number, step: number) => Promise<StepOutcome>;
  /**
   * After the steps of an epoch, on every rank (the ranks may need to meet): resolves with the
   * epoch's outcome on the rank that reports epochs and writes checkpoints, undefined elsewhere.
   * `lossSum` is this rank's sum of step losses.
   */
  readonly endEpoch: (epoch: number, lossSum: number) => Promise<EpochOutcome | undefined>;
  /** Nothing left to train (resumed after the last epoch): the evaluation alone, on the reporting rank. */
  readonly evaluateOnly: () => Promise<Evaluation | undefined>;
  /** Writes the checkpoint of an epoch (called on the reporting rank when the job has a checkpointDir); resolves with its folder. */
  readonly checkpoint: (state: TrainerState) => Promise<string>;
}

/** Runs the epochs; resolves with the job's metrics as this rank saw them (rank 0's are the job's). */
export async function trainLoop(o: LoopOptions): Promise<JobMetrics> {
  const { tf, spec, rank, emit } = o;
  const leaks = new LeakWatch();
  const started = Date.now();
  let globalStep = o.globalStep;
  let samples = 0;
  let lastTrainLoss = NaN;
  let lastEval: Evaluation = { accuracy: NaN, loss: NaN };
  for (let epoch = o.startEpoch; epoch < spec.epochs; epoch++) {
    o.beginEpoch(epoch);
    const epochStart = Date.now();
    let epochSamples = 0;
    let lossSum = 0;
    for (let step = 0; step < o.stepsPerEpoch; step++) {
      const r = await o.step(epoch, step);
      globalStep++;
      epochSamples += r.samples;
      samples += r.samples;
      lossSum += r.loss;
      const mem = tf.memory();
      const leakFrom = leaks.observe(globalStep, mem.numTensors);
      if (leakFrom !== undefined) await emit({ type: 'job/log', level: 'warning', rank, message: `tensor leak: tf.memory().numTensors has grown on every step since step ${leakFrom} (now ${mem.numTensors}); a tensor is created each step and never disposed` });
      if (step === 0 || globalStep % 20 === 0) await emit({ type: 'job/memory', rank, step: globalStep, numTensors: mem.numTensors, numBytes: mem.numBytes, rssBytes: process.memoryUsage().rss });
      if (o.reportsSteps) {
        const secs = Math.max(1e-3, (Date.now() - epochStart) / 1000);
        await emit({ type: 'job/step', epoch: epoch + 1, step: step + 1, stepsPerEpoch: o.stepsPerEpoch, globalStep, loss: r.loss, samplesPerSecond: epochSamples / secs });
      }
    }
    // A Find Max Batch Size trial only needs to know that its steps fit.
    if (spec.trialSteps !== undefined) break;
    const trainSecs = Math.max(1e-3, (Date.now() - epochStart) / 1000);
    const end = await o.endEpoch(epoch, lossSum);
    if (!end) continue;
    lastTrainLoss = end.lossSum / o.stepsPerEpoch;
    lastEval = end.evaluation;
    await emit({ type: 'job/epoch', epoch: epoch + 1, epochs: spec.epochs, trainLoss: lastTrainLoss, testLoss: lastEval.loss, testAccuracy: lastEval.accuracy, samplesPerSecond: epochSamples / trainSecs, durationMs: Date.now() - epochStart });
    if (spec.checkpointDir) {
      const dir = await o.checkpoint({ epochsDone: epoch + 1, globalStep, job: spec.name, savedAt: new Date().toISOString(), file: spec.file, model: spec.model });
      await emit({ type: 'job/checkpoint', epoch: epoch + 1, dir });
    }
  }
  if (o.startEpoch >= spec.epochs) lastEval = (await o.evaluateOnly()) ?? lastEval;
  const durationMs = Date.now() - started;
  const checkpoint = spec.checkpointDir ? latestCheckpoint(spec.checkpointDir) : undefined;
  return {
    testAccuracy: lastEval.accuracy,
    testLoss: lastEval.loss,
    trainLoss: lastTrainLoss,
    epochs: spec.epochs,
    steps: globalStep,
    samplesPerSecond: samples / Math.max(1e-3, durationMs / 1000),
    durationMs,
    ...(checkpoint ? { checkpoint } : {}),
  };
}

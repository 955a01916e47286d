/**
 * What the rank of every strategy shares (worker.ts for ddp and dp, pipeline.ts, the loop in
 * trainLoop.ts): its messages to and from the coordinator over fork IPC, and the Batcher that
 * gathers a batch's rows into tensors. Kept apart from worker.ts, which picks the strategy, so
 * that the strategies need not import the module that imports them.
 */
import type { Tensor } from '@tensorflow/tfjs-core';
import type { LoadedBackend, Tf } from '../backends/types';
import type { Dataset, Split } from '../job/data';
import type { CoordinatorMessage, JobEvent, WorkerMessage } from '../job/events';
import { stepsPerEpoch } from './sampler';

export type Init = Extract<CoordinatorMessage, { type: 'worker/init' }>;

export function send(m: WorkerMessage): Promise<void> {
  return new Promise((resolve) => {
    if (!process.send || !process.connected) return resolve();
    process.send(m, undefined, {}, () => resolve());
  });
}

export const emit = (event: JobEvent): Promise<void> => send({ type: 'worker/event', event });

export function nextMessage<T extends CoordinatorMessage['type']>(type: T): Promise<Extract<CoordinatorMessage, { type: T }>> {
  return new Promise((resolve) => {
    const on = (m: CoordinatorMessage) => {
      if (m?.type !== type) return;
      process.off('message', on);
      resolve(m as Extract<CoordinatorMessage, { type: T }>);
    };
    process.on('message', on);
  });
}

export class Batcher {
  private xbuf: Float32Array;
  private readonly width: number;

  constructor(private readonly tf: Tf, private readonly data: Dataset, maxRows: number) {
    this.width = data.inputShape.reduce((a, b) => a * b, 1);
    this.xbuf = new Float32Array(maxRows * this.width);
  }

  /** x and one-hot y for `rows` of `split`. */
  batch(split: Split, rows: ArrayLike<number>): { x: Tensor; y: Tensor } {
    const n = rows.length;
    if (this.xbuf.length < n * this.width) this.xbuf = new Float32Array(n * this.width);
    const labels = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      const r = rows[i];
      this.xbuf.set(split.xs.subarray(r * this.width, (r + 1) * this.width), i * this.width);
      labels[i] = split.labels[r];
    }
    const tf = this.tf;
    // tf.tensor copies (or takes) the values; a fresh slice keeps the reused buffer ours.
    const x = tf.tensor(this.xbuf.slice(0, n * this.width), [n, ...this.data.inputShape]);
    const y = tf.tidy(() => tf.cast(tf.oneHot(tf.tensor1d(labels, 'int32'), this.data.numClasses), 'float32'));
    return { x, y };
  }
}

export function flatten(arrays: Float32Array[], extra: number[] = []): Float32Array {
  const out = new Float32Array(arrays.reduce((n, a) => n + a.length, 0) + extra.length);
  let off = 0;
  for (const a of arrays) {
    out.set(a, off);
    off += a.length;
  }
  out.set(extra, off);
  return out;
}

export function readyMessage(init: Init, backend: LoadedBackend, data: Dataset, startEpoch: number): Extract<WorkerMessage, { type: 'worker/ready' }> {
  const localBatch = init.spec.batchSize / init.worldSize;
  return {
    type: 'worker/ready',
    rank: init.rank,
    pid: process.pid,
    device: backend.device,
    backend: backend.name,
    ...(backend.adapter ? { adapter: backend.adapter } : {}),
    backendNote: backend.note,
    stepsPerEpoch: stepsPerEpoch(Math.ceil(data.train.count / init.worldSize), localBatch, init.spec.maxStepsPerEpoch),
    trainSamples: data.train.count,
    testSamples: data.test.count,
    startEpoch,
  };
}

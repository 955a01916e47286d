/**
 * The types every part of training shares about the backend, apart from the code that loads it
 * (backend.ts), so that what backend.ts itself imports (oom.ts) can name them without a cycle.
 */
import type * as tf from '@tensorflow/tfjs-core';
import type * as tfl from '@tensorflow/tfjs-layers';
import type { WorkerAdapter } from '../job/events';

/** The TF.js a job's code sees: tfjs-core and tfjs-layers in one namespace, as `@tensorflow/tfjs` has them. */
export type Tf = typeof tf & typeof tfl;

export interface LoadedBackend {
  readonly tf: Tf;
  /** The TF.js backend name: `tensorflow`, `webgpu`, `wasm` or `cpu`. */
  readonly name: string;
  /** Which package provides it, for people: `@tensorflow/tfjs-node-gpu`, `wasm`, ... */
  readonly label: string;
  /** `gpu:1 (CUDA_VISIBLE_DEVICES=1)`, `gpu (webgpu adapter ...)`, `cpu (webgpu adapter ..., software)` or `cpu`. */
  readonly device: string;
  /** webgpu: the adapter the worker got. */
  readonly adapter?: WorkerAdapter;
  /** webgpu: why the device can no longer be trusted (out of memory, lost), once it cannot. */
  readonly outOfMemory?: () => string | undefined;
  readonly gpu: boolean;
  /** Why better backends were skipped, e.g. `no GPU: @tensorflow/tfjs-node-gpu is not installed`. */
  readonly note: string;
}

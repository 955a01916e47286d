/**
 * The problems of a script's output, as types of their own: cudaErrors.ts finds CUDA problems with
 * the traceback reader of pythonErrors.ts, and pythonErrors.ts names them among a job's problems, so
 * the types live apart from both (no import cycle).
 */
export type CudaProblemKind = 'cuda-oom' | 'cudnn-not-initialized' | 'device-side-assert' | 'nccl';

/** What every problem of a script's output says and where it belongs. */
export interface ProblemBase {
  /** The error as printed (without a rank prefix). */
  readonly message: string;
  /** What it means or where it was raised, for people. */
  readonly explanation: string;
  /** What to try, most likely first. */
  readonly hints: readonly string[];
  /** The user's innermost frame of the traceback, when there was one. */
  readonly file?: string;
  readonly line?: number;
  readonly rank?: number;
}

export interface CudaProblem extends ProblemBase {
  readonly kind: CudaProblemKind;
  /** cuda-oom: the size of the allocation that failed, as printed ("20.00 MiB"). */
  readonly tryingToAllocate?: string;
  /** device-side-assert: the kernel's failed assertion, when printed ("t >= 0 && t < n_classes"). */
  readonly assertion?: string;
}

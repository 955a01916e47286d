/**
 * The CUDA problem of a script's output, as a type of its own: cudaErrors.ts finds them with the
 * traceback reader of pythonErrors.ts, and pythonErrors.ts names them among a job's problems, so
 * the type lives apart from both (no import cycle).
 */
export type CudaProblemKind = 'cuda-oom' | 'cudnn-not-initialized' | 'device-side-assert' | 'nccl';

export interface CudaProblem {
  readonly kind: CudaProblemKind;
  /** The error line as printed (without a rank prefix). */
  readonly message: string;
  /** What it usually means, for people. */
  readonly explanation: string;
  /** What to try, most likely first. */
  readonly hints: readonly string[];
  /** The script line that raised it, from the traceback, when there was one. */
  readonly file?: string;
  readonly line?: number;
  readonly rank?: number;
  /** cuda-oom: the size of the allocation that failed, as printed ("20.00 MiB"). */
  readonly tryingToAllocate?: string;
  /** device-side-assert: the kernel's failed assertion, when printed ("t >= 0 && t < n_classes"). */
  readonly assertion?: string;
}

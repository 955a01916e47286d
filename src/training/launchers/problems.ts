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

/**
 * From the Python companion (python/gpu_workbench/_modules.py), not from the output: a shape error raised
 * inside a module, at the line where that module is made in the user's code (`self.fc = nn.Linear(512, 10)`),
 * naming the module, what it expected and got, and the previous module's output shape. The exception's
 * own problem stays at the line that raised it (`raisedAt`).
 */
export interface ModuleShapeProblem extends ProblemBase {
  readonly kind: 'module-shape';
  /** Its qualified name in the model (`features.3`), '' for the model itself. */
  readonly module: string;
  readonly className: string;
  readonly repr: string;
  readonly expected: string;
  readonly got: string;
  readonly previous?: { readonly module: string; readonly className: string; readonly outputShape: readonly number[] | null; readonly file?: string; readonly line?: number };
  /** The user's line that raised it (where the exception's own problem is). */
  readonly raisedAt?: { readonly file: string; readonly line: number };
}

/**
 * From the Python companion: an out-of-memory error's memory, parameters, gradients, optimizer state and
 * activations (measured, or estimated where their tensors did not exist yet) and the 16-bit estimates. Shown
 * with the out-of-memory problem of the same rank (the CUDA error or the exception), else on its own.
 */
export interface OomMemoryProblem extends ProblemBase {
  readonly kind: 'oom-memory';
  /** One line each: what was measured in fp32, and what autocast and half parameters would make of it. */
  readonly memoryLines: readonly string[];
}

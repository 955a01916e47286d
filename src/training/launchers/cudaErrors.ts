/**
 * CUDA error lines in the output of a PyTorch script, turned into problems with an
 * explanation and what to try. Recognised (the wording of PyTorch's own messages):
 * - `CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; …)` — raised as
 *   `RuntimeError` (≤ 1.12), `torch.cuda.OutOfMemoryError` (1.13-2.4) or `torch.OutOfMemoryError`;
 * - `cuDNN error: CUDNN_STATUS_NOT_INITIALIZED`;
 * - `CUDA error: device-side assert triggered`, with the kernel's own
 *   ``Assertion `t >= 0 && t < n_classes` failed.`` line when it was printed;
 * - `NCCL error in: …/ProcessGroupNCCL.cpp:1269, unhandled cuda error, NCCL version 2.14.3`.
 * The location is the innermost traceback frame outside the Python library folders (the
 * user's own line), else the innermost frame, of the rank's traceback as `PythonTracebackParser`
 * reads it: the same frames, so a CUDA error and any other exception of the same traceback land
 * on the same line. Lines may carry the `[rank1]: ` prefix of recent PyTorch versions, or
 * `[default1]:` from torchrun's --tee; the rank is kept.
 */
import { outputLine } from './outputLines';
import type { CudaProblem, CudaProblemKind } from './problems';
import { innermostUser, PythonTracebackParser, type ScriptException } from './pythonErrors';

export type { CudaProblem, CudaProblemKind } from './problems';
export { libraryFrame, prefixRank, rankPrefix } from './outputLines';

const oomLine = /CUDA out of memory\.?(?: Tried to allocate ([\d.]+ ?[KMGTP]?i?B))?/;
const cudnnLine = /CUDNN_STATUS_NOT_INIT(?:IALIZED)?/;
const assertLine = /device-side assert triggered/;
const kernelAssert = /Assertion `(.+?)` failed/;
const ncclLine = /NCCL error/;

function explain(kind: CudaProblemKind, size: string | undefined, assertion: string | undefined): { explanation: string; hints: string[] } {
  switch (kind) {
    case 'cuda-oom':
      return {
        explanation: `The GPU ran out of memory${size ? ` while trying to allocate ${size}` : ''}: the weights, gradients, optimizer state and the activations kept for the backward pass of one batch did not fit.`,
        hints: [
          'Use a smaller batch size (or accumulate gradients over several smaller batches).',
          'With pipeline parallelism, cut each batch into more micro-batches.',
          'Use DistributedDataParallel (ddp) instead of DataParallel (dp): dp gathers every output and gradient on the first GPU.',
          'torch.cuda.empty_cache() only returns cached, unused blocks to the driver; it frees no tensor that is still referenced.',
          'If reserved memory is much larger than allocated, fragmentation: set PYTORCH_CUDA_ALLOC_CONF (max_split_size_mb or expandable_segments:True).',
        ],
      };
    case 'cudnn-not-initialized':
      return {
        explanation: 'cuDNN could not start. Usually the driver, CUDA and cuDNN versions do not match the ones this PyTorch build expects, or the GPU was already out of memory when cuDNN tried to create its handle.',
        hints: [
          'Check that python -c "import torch; print(torch.version.cuda, torch.backends.cudnn.version())" matches the installed driver (nvidia-smi shows the CUDA version the driver supports).',
          'Try a smaller batch size: cuDNN reports an out-of-memory at initialisation this way.',
          'As a test, torch.backends.cudnn.enabled = False shows whether cuDNN is the cause.',
        ],
      };
    case 'device-side-assert':
      return {
        explanation: `A CUDA kernel's own check failed${assertion ? ` (${assertion})` : ''}. Usually an index out of range: most often a class label ≥ num_classes (or negative) in the loss, or an embedding index ≥ num_embeddings. CUDA reports it asynchronously, so the traceback may point at a later line.`,
        hints: [
          'Check the labels: they must lie in 0 … num_classes-1 (e.g. assert labels.max() < num_classes).',
          'Rerun with CUDA_LAUNCH_BLOCKING=1 so that the traceback points at the operation that failed.',
          'Or run the same batch on the CPU, where the error names the bad index.',
        ],
      };
    case 'nccl':
      return {
        explanation: 'NCCL, the library that moves tensors between GPUs, failed: often another rank died or hung, the GPUs cannot reach each other (P2P/network), or a CUDA error happened inside a collective.',
        hints: [
          'Look for the first rank that failed: the NCCL error on the others is often a consequence.',
          'Rerun with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=ALL) to see the cause.',
          'On a single machine, NCCL_P2P_DISABLE=1 works around broken peer-to-peer; the gloo backend works without NCCL at all.',
        ],
      };
  }
}

/** The kind of CUDA error a line (or an exception's message) reports, if any. */
export function cudaKind(text: string): CudaProblemKind | undefined {
  if (oomLine.test(text)) return 'cuda-oom';
  if (cudnnLine.test(text)) return 'cudnn-not-initialized';
  if (assertLine.test(text)) return 'device-side-assert';
  if (ncclLine.test(text)) return 'nccl';
  return undefined;
}

/**
 * Feeds output line by line (stdout and stderr alike) and returns problems as their error lines
 * arrive. It reads the tracebacks with its own `tracebacks` parser, whose exceptions `pushLine`
 * returns too, so a caller that wants both parses each line once.
 */
export class CudaErrorParser {
  readonly tracebacks = new PythonTracebackParser();
  private pendingAssertion: string | undefined;
  private readonly seen = new Set<string>();
  private readonly found: CudaProblem[] = [];

  push(raw: string): CudaProblem[] {
    return this.pushLine(raw).problems;
  }

  /** The CUDA problems and the complete exceptions (see `PythonTracebackParser.push`) of a line. */
  pushLine(raw: string): { problems: CudaProblem[]; exceptions: ScriptException[] } {
    const exceptions = this.tracebacks.push(raw);
    const { rank, text } = outputLine(raw);
    const k = kernelAssert.exec(text);
    if (k) {
      this.pendingAssertion ??= k[1];
      return { problems: [], exceptions };
    }
    const kind = cudaKind(text);
    if (!kind) return { problems: [], exceptions };
    const size = kind === 'cuda-oom' ? oomLine.exec(text)?.[1] : undefined;
    // The explanatory lines PyTorch prints after the error repeat its words; one problem per error per rank.
    const dedupe = `${kind}/${rank ?? -1}`;
    if (this.seen.has(dedupe)) return { problems: [], exceptions };
    this.seen.add(dedupe);
    const frames = this.tracebacks.frames(rank);
    const where = innermostUser(frames) ?? frames[frames.length - 1];
    const assertion = kind === 'device-side-assert' ? this.pendingAssertion : undefined;
    const { explanation, hints } = explain(kind, size, assertion);
    const problem: CudaProblem = {
      kind,
      message: text.trim(),
      explanation,
      hints,
      ...(where ? { file: where.file, line: where.line } : {}),
      ...(rank !== undefined ? { rank } : {}),
      ...(size ? { tryingToAllocate: size } : {}),
      ...(assertion ? { assertion } : {}),
    };
    this.found.push(problem);
    return { problems: [problem], exceptions };
  }

  /** Every problem found so far. */
  problems(): readonly CudaProblem[] {
    return this.found;
  }
}

/** All problems in a whole output text. */
export function parseCudaErrors(text: string): CudaProblem[] {
  const parser = new CudaErrorParser();
  for (const line of text.split('\n')) parser.push(line);
  return [...parser.problems()];
}

/** The rank torchrun's error summary names as the root cause ("rank      : 1 (local_rank: 1)"), if any. */
export function rootCauseRank(text: string): number | undefined {
  const at = text.indexOf('Root Cause (first observed failure)');
  if (at < 0) return undefined;
  const m = /rank\s*:\s*(\d+)/.exec(text.slice(at));
  return m ? Number(m[1]) : undefined;
}

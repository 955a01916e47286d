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
 * user's own line), else the innermost frame. Lines may carry the `[rank1]: ` prefix of
 * recent PyTorch versions, or `[default1]:` from torchrun's --tee; the rank is kept.
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

interface Frame {
  readonly file: string;
  readonly line: number;
}

/**
 * `[rank1]: ` (PyTorch ≥ 2.2, with the space it adds), `[default1]:` (torchrun's --tee, role
 * "default": the line follows as printed, its indentation kept) or `[1]:` followed by text (a
 * bare `[1]:` line heads an entry of torchrun's failure summary and is not a rank's output).
 */
export const rankPrefix = /^\[rank(\d+)\]: ?|^\[default(\d+)\]:|^\[(\d+)\]:(?=.)/;

/** The rank a `rankPrefix` match names. */
export function prefixRank(m: RegExpExecArray): number {
  return Number(m[1] ?? m[2] ?? m[3]);
}
const frameLine = /^\s*File "([^"]+)", line (\d+)/;
const oomLine = /CUDA out of memory\.?(?: Tried to allocate ([\d.]+ ?[KMGTP]?i?B))?/;
const cudnnLine = /CUDNN_STATUS_NOT_INIT(?:IALIZED)?/;
const assertLine = /device-side assert triggered/;
const kernelAssert = /Assertion `(.+?)` failed/;
const ncclLine = /NCCL error/;
/** Frames in these folders are Python's, PyTorch's or a library's, not the user's; `<frozen runpy>`, `<string>` are no files. */
export const libraryFrame = /[/\\](?:site-packages|dist-packages|lib[/\\]python\d[\d.]*|Lib)[/\\]|^<[^>]*>$/;

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

/** Feeds output line by line (stdout and stderr alike) and returns problems as their error lines arrive. */
export class CudaErrorParser {
  /** Traceback frames seen since the last "Traceback" header, per rank (-1 when lines carry no rank). */
  private readonly frames = new Map<number, Frame[]>();
  private pendingAssertion: string | undefined;
  private readonly seen = new Set<string>();
  private readonly found: CudaProblem[] = [];

  push(raw: string): CudaProblem[] {
    const prefix = rankPrefix.exec(raw);
    const rank = prefix ? prefixRank(prefix) : undefined;
    const text = (prefix ? raw.slice(prefix[0].length) : raw).replace(/\r$/, '');
    const key = rank ?? -1;
    if (/^Traceback \(most recent call last\):/.test(text)) {
      this.frames.set(key, []);
      return [];
    }
    const frame = frameLine.exec(text);
    if (frame) {
      const list = this.frames.get(key) ?? [];
      list.push({ file: frame[1], line: Number(frame[2]) });
      this.frames.set(key, list);
      return [];
    }
    const k = kernelAssert.exec(text);
    if (k) {
      this.pendingAssertion ??= k[1];
      return [];
    }
    const kind = cudaKind(text);
    if (!kind) return [];
    const size = kind === 'cuda-oom' ? oomLine.exec(text)?.[1] : undefined;
    // The explanatory lines PyTorch prints after the error repeat its words; one problem per error per rank.
    const dedupe = `${kind}/${key}`;
    if (this.seen.has(dedupe)) return [];
    this.seen.add(dedupe);
    const where = this.location(key);
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
    return [problem];
  }

  /** Every problem found so far. */
  problems(): readonly CudaProblem[] {
    return this.found;
  }

  private location(key: number): Frame | undefined {
    const frames = this.frames.get(key) ?? this.frames.get(-1) ?? [];
    for (let i = frames.length - 1; i >= 0; i--) if (!libraryFrame.test(frames[i].file)) return frames[i];
    return frames[frames.length - 1];
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

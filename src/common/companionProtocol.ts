/**
 * The channel between the Python companion `gpu_workbench` (python/gpu_workbench, shipped in the
 * extension) and the extension: each process of a job (each torchrun rank) connects to the Unix
 * socket named by `GPU_WORKBENCH_CHANNEL=unix:<path>` and writes one JSON message per line.
 *
 * Why a Unix socket the launcher listens on: one connection per rank, so the lines of many ranks
 * never interleave; nothing of it goes through the script's stdout or stderr, which torchrun's
 * --redirects/--tee reroute; a file descriptor would not survive torchrun (its workers are
 * started with close_fds), and a shared file would need polling and could tear lines between
 * writers. A connection's end tells that its process is gone.
 *
 * Lines are validated on receipt: a torn or foreign line is skipped with a message, never thrown.
 */

/** The environment variable that names the channel; unset, the companion does nothing. */
export const companionChannelEnv = 'GPU_WORKBENCH_CHANNEL';
/** The protocol version every message carries as `v`. */
export const companionProtocolVersion = 1;
/** A line longer than this is no message of the companion's: skipped. */
export const maxCompanionLineBytes = 64 * 1024;

/** Who sent a message: torchrun's RANK, LOCAL_RANK and WORLD_SIZE (a plain run is rank 0 of 1). */
export interface RankIdentity {
  readonly rank: number;
  readonly localRank: number;
  readonly worldSize: number;
}

/** A CUDA device's caching allocator after an optimizer step. */
export interface CudaStepMemory {
  readonly kind: 'cuda';
  /** `cuda:N`, N as the process sees it (after CUDA_VISIBLE_DEVICES). */
  readonly device: string;
  /** torch.cuda.memory_allocated: bytes in live tensors. */
  readonly allocatedBytes: number;
  /** torch.cuda.memory_reserved: bytes the caching allocator holds (allocated plus its free cache). */
  readonly reservedBytes: number;
  /** torch.cuda.max_memory_allocated since the previous step: the step's own peak. */
  readonly peakAllocatedBytes: number;
}

/** A process without CUDA: its resident memory after an optimizer step (not a GPU's). */
export interface CpuStepMemory {
  readonly kind: 'cpu';
  readonly device: 'cpu';
  /** The process's resident set size. */
  readonly rssBytes: number;
  /** The largest resident set size during the step (Linux resets the peak every step). */
  readonly peakRssBytes: number;
  /** True where the peak could not be reset: then it is the process's peak since it started. */
  readonly peakSinceStart?: true;
}

/** One rank's memory on one device after one optimizer step. */
export type RankMemory = RankIdentity & {
  /** Optimizer steps of this process so far (every optimizer counts). */
  readonly step: number;
  /** The rank's process id (absent from companions before it), to find the rank among nvidia-smi's processes. */
  readonly pid?: number;
  /** Wall time since the previous step ended (the first: since the companion started the script). */
  readonly stepSeconds: number;
} & (CudaStepMemory | CpuStepMemory);

export type ReportValue = number | string | boolean | null;

export type CompanionMessage =
  /** A process started under `python -m gpu_workbench.run`. */
  | (RankIdentity & { readonly type: 'hello'; readonly pid: number; readonly script: string; readonly python: string; readonly companion: string })
  /** torch was imported and the step hook installed: torch ≥ 2.0's global post-hook, or a wrapper of step (1.13). */
  | (RankIdentity & { readonly type: 'hooks'; readonly torch: string; readonly stepHook: 'post-hook' | 'step-wrapper' })
  /** After every optimizer step, one per device the process uses. */
  | ({ readonly type: 'memory' } & RankMemory)
  /** `gpu_workbench.report(loss=...)`. */
  | (RankIdentity & { readonly type: 'report'; readonly metrics: Readonly<Record<string, ReportValue>> })
  /** Messages the process could not send in time (the extension read too slowly) and dropped. */
  | (RankIdentity & { readonly type: 'dropped'; readonly count: number })
  /** A Find Max Batch Size trial: the process reached GPU_WORKBENCH_MAX_STEPS optimizer steps and ends with exit status 0. */
  | (RankIdentity & { readonly type: 'stopped'; readonly step: number; readonly maxSteps: number })
  /** The script's uncaught out-of-memory error (CUDA's, or the CPU allocator's under the trial's memory limit), before Python prints it. */
  | (RankIdentity & { readonly type: 'oom'; readonly device: 'cuda' | 'cpu'; readonly error: string; readonly message: string; readonly batchSize?: number });

export type CompanionParse = { readonly ok: true; readonly message: CompanionMessage } | { readonly ok: false; readonly error: string };

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const isBytes = isCount;

/** Parses and validates one line of the channel; `error` says what is wrong with it. */
export function parseCompanionLine(line: string): CompanionParse {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return { ok: false, error: 'not JSON' };
  }
  if (!isObj(value)) return { ok: false, error: 'not a JSON object' };
  if (value.v !== companionProtocolVersion) return { ok: false, error: `protocol version ${JSON.stringify(value.v)}, expected ${companionProtocolVersion}` };
  const bad = (what: string): CompanionParse => ({ ok: false, error: `${String(value.type)} message: ${what}` });
  if (!isCount(value.rank) || !isCount(value.localRank) || !Number.isSafeInteger(value.worldSize) || (value.worldSize as number) < 1) return bad('rank, localRank and worldSize must be whole numbers (worldSize at least 1)');
  const id: RankIdentity = { rank: value.rank, localRank: value.localRank, worldSize: value.worldSize as number };
  switch (value.type) {
    case 'hello':
      if (!Number.isSafeInteger(value.pid) || typeof value.script !== 'string' || typeof value.python !== 'string' || typeof value.companion !== 'string') return bad('needs pid, script, python and companion');
      return { ok: true, message: { type: 'hello', ...id, pid: value.pid as number, script: value.script, python: value.python, companion: value.companion } };
    case 'hooks':
      if (typeof value.torch !== 'string' || (value.stepHook !== 'post-hook' && value.stepHook !== 'step-wrapper')) return bad('needs torch and stepHook (post-hook or step-wrapper)');
      return { ok: true, message: { type: 'hooks', ...id, torch: value.torch, stepHook: value.stepHook } };
    case 'memory': {
      if (!Number.isSafeInteger(value.step) || (value.step as number) < 1) return bad('step must be a whole number of at least 1');
      if (typeof value.stepSeconds !== 'number' || !Number.isFinite(value.stepSeconds) || value.stepSeconds < 0) return bad('stepSeconds must be a number of seconds');
      if (value.pid !== undefined && (!Number.isSafeInteger(value.pid) || (value.pid as number) < 1)) return bad('pid must be a process id');
      const step = { step: value.step as number, stepSeconds: value.stepSeconds, ...(value.pid !== undefined ? { pid: value.pid as number } : {}) };
      if (value.kind === 'cuda') {
        if (typeof value.device !== 'string' || !/^cuda:\d+$/.test(value.device)) return bad('a cuda device is cuda:N');
        if (!isBytes(value.allocatedBytes) || !isBytes(value.reservedBytes) || !isBytes(value.peakAllocatedBytes)) return bad('allocatedBytes, reservedBytes and peakAllocatedBytes must be byte counts');
        return { ok: true, message: { type: 'memory', ...id, ...step, kind: 'cuda', device: value.device, allocatedBytes: value.allocatedBytes, reservedBytes: value.reservedBytes, peakAllocatedBytes: value.peakAllocatedBytes } };
      }
      if (value.kind === 'cpu') {
        if (value.device !== 'cpu') return bad('a cpu record has device "cpu"');
        if (!isBytes(value.rssBytes) || !isBytes(value.peakRssBytes)) return bad('rssBytes and peakRssBytes must be byte counts');
        return { ok: true, message: { type: 'memory', ...id, ...step, kind: 'cpu', device: 'cpu', rssBytes: value.rssBytes, peakRssBytes: value.peakRssBytes, ...(value.peakSinceStart === true ? { peakSinceStart: true as const } : {}) } };
      }
      return bad(`kind must be cuda or cpu, got ${JSON.stringify(value.kind)}`);
    }
    case 'report': {
      if (!isObj(value.metrics)) return bad('metrics must be an object');
      const metrics: Record<string, ReportValue> = {};
      for (const [k, v] of Object.entries(value.metrics)) {
        if (v !== null && typeof v !== 'number' && typeof v !== 'string' && typeof v !== 'boolean') return bad(`metric ${k} must be a number, string, boolean or null`);
        metrics[k] = v;
      }
      return { ok: true, message: { type: 'report', ...id, metrics } };
    }
    case 'dropped':
      if (!isCount(value.count)) return bad('count must be a whole number');
      return { ok: true, message: { type: 'dropped', ...id, count: value.count } };
    case 'stopped':
      if (!Number.isSafeInteger(value.step) || !Number.isSafeInteger(value.maxSteps) || (value.maxSteps as number) < 1) return bad('step and maxSteps must be whole numbers (maxSteps at least 1)');
      return { ok: true, message: { type: 'stopped', ...id, step: value.step as number, maxSteps: value.maxSteps as number } };
    case 'oom':
      if (value.device !== 'cuda' && value.device !== 'cpu') return bad(`device must be cuda or cpu, got ${JSON.stringify(value.device)}`);
      if (typeof value.error !== 'string' || typeof value.message !== 'string') return bad('needs error and message');
      if (value.batchSize !== undefined && (!Number.isSafeInteger(value.batchSize) || (value.batchSize as number) < 1)) return bad('batchSize must be a whole number of at least 1');
      return { ok: true, message: { type: 'oom', ...id, device: value.device, error: value.error, message: value.message, ...(value.batchSize !== undefined ? { batchSize: value.batchSize as number } : {}) } };
    default:
      return { ok: false, error: `unknown message type ${JSON.stringify(value.type)}` };
  }
}

/** The RankMemory part of a memory message (what `job/rankMemory` carries). */
export function rankMemoryOf(m: Extract<CompanionMessage, { type: 'memory' }>): RankMemory {
  const { type: _type, ...rest } = m;
  return rest;
}

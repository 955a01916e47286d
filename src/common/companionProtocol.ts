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

/** A place in the user's code: an absolute file and a 1-based line. */
export interface SourcePlace {
  readonly file: string;
  readonly line: number;
}

/** One part of a model's memory: its bytes as they are (fp32 for most models) and in 16 bits. */
export interface MemoryPart {
  readonly bytes: number;
  /** The same tensors in 16 bits (float32 halved, other dtypes as they are): what half parameters would make of it. */
  readonly halfBytes: number;
  /** True: summed from the tensors themselves; false: estimated (`note` says from what). */
  readonly measured: boolean;
  readonly note?: string;
}

/**
 * A model's memory on one rank: parameters, gradients and the optimizer's state (measured from their
 * tensors after the first optimizer step, estimated from the parameters before it), activations (the
 * bytes of the leaf modules' outputs in the first step's forward), and what torch.autocast or half
 * parameters would make of it, estimated from those numbers.
 */
export interface ModelMemory {
  readonly params: MemoryPart;
  readonly grads: MemoryPart;
  readonly optimizerState: MemoryPart;
  /** Absent when no forward of the model was seen. */
  readonly activations?: MemoryPart;
  readonly totalBytes: number;
  /** torch.autocast (bf16/fp16): parameters, gradients and optimizer state stay fp32, the activations halve, plus 16-bit copies of the weights it casts. */
  readonly autocast: { readonly params: number; readonly grads: number; readonly optimizerState: number; readonly activations: number; readonly weightCopies: number; readonly totalBytes: number };
  /** model.half(): every fp32 tensor of the four halves (the optimizer's state follows the parameters). */
  readonly halfParams: { readonly params: number; readonly grads: number; readonly optimizerState: number; readonly activations: number; readonly totalBytes: number };
}

/** A module of the first step's summary, each once, in the order first called. */
export interface ModelSummaryRow {
  /** Its qualified name in the model (`features.3`), '' for the model itself. */
  readonly name: string;
  readonly className: string;
  /** 0 for the model, 1 for its children, ... */
  readonly depth: number;
  /** The shape of its output's (first) tensor; null when it returned none. */
  readonly outputShape: readonly number[] | null;
  /** Its own parameters (not its children's). */
  readonly params: number;
}

/** An exception as raised: its type (`RuntimeError`, `torch.cuda.OutOfMemoryError`) and message. */
export interface RaisedException {
  readonly type: string;
  readonly message: string;
}

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
  | (RankIdentity & {
      readonly type: 'oom'; readonly device: 'cuda' | 'cpu'; readonly error: string; readonly message: string; readonly batchSize?: number;
      /** The process's memory when it failed (absent from companions before it): each CUDA device's allocator (its peak since the last step), else the RSS and its peak. */
      readonly memory?: ReadonlyArray<CudaStepMemory | CpuStepMemory>;
    })
  /** After the first optimizer step: the model's modules (torchinfo-style), its parameter counts and memory. */
  | (RankIdentity & { readonly type: 'modelSummary'; readonly rows: readonly ModelSummaryRow[]; readonly totalParams: number; readonly trainableParams: number; readonly memory: ModelMemory; /** Rows left out to fit one line of the channel. */ readonly rowsOmitted?: number })
  /**
   * An uncaught shape error raised inside a module's forward: the module (its qualified name in `model`, '' for
   * the model itself), where it was made in the user's code, what it expected and what it got, and the
   * previous module to finish and its output shape.
   */
  | (RankIdentity & {
      readonly type: 'moduleError';
      readonly exception: RaisedException;
      /** The user's innermost frame of the traceback. */
      readonly raisedAt?: SourcePlace;
      readonly module: string;
      readonly className: string;
      /** `Linear(in_features=512, out_features=10, bias=True)` (a container: `Net(...)`). */
      readonly repr: string;
      readonly expected: string;
      readonly got: string;
      /** Where the module was made (`self.fc = nn.Linear(512, 10)`). */
      readonly definedAt?: SourcePlace;
      /** The model's class, when the module is a part of it. */
      readonly model?: string;
      readonly previous?: { readonly module: string; readonly className: string; readonly outputShape: readonly number[] | null; readonly definedAt?: SourcePlace };
    })
  /** An uncaught out-of-memory error: the model's memory as far as it was measured. */
  | (RankIdentity & { readonly type: 'oomMemory'; readonly exception: RaisedException; readonly raisedAt?: SourcePlace; readonly firstStepDone: boolean; readonly memory: ModelMemory });

export type CompanionParse = { readonly ok: true; readonly message: CompanionMessage } | { readonly ok: false; readonly error: string };

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const isBytes = isCount;

const optional = (v: unknown, check: (v: unknown) => boolean): boolean => v === undefined || check(v);
const isPlace = (v: unknown): v is SourcePlace => isObj(v) && typeof v.file === 'string' && Number.isSafeInteger(v.line) && (v.line as number) >= 1;
const isRaised = (v: unknown): v is RaisedException => isObj(v) && typeof v.type === 'string' && typeof v.message === 'string';
const isShape = (v: unknown): boolean => v === null || (Array.isArray(v) && v.every(isCount));
const isSummaryRow = (v: unknown): v is ModelSummaryRow => isObj(v) && typeof v.name === 'string' && typeof v.className === 'string' && isCount(v.depth) && isShape(v.outputShape) && isCount(v.params);
const isPart = (v: unknown): v is MemoryPart => isObj(v) && isBytes(v.bytes) && isBytes(v.halfBytes) && typeof v.measured === 'boolean' && optional(v.note, (n) => typeof n === 'string');
const allBytes = (v: unknown, keys: readonly string[]): boolean => isObj(v) && keys.every((k) => isBytes(v[k]));
function isModelMemory(v: unknown): v is ModelMemory {
  return isObj(v) && isPart(v.params) && isPart(v.grads) && isPart(v.optimizerState) && optional(v.activations, isPart) && isBytes(v.totalBytes)
    && allBytes(v.autocast, ['params', 'grads', 'optimizerState', 'activations', 'weightCopies', 'totalBytes'])
    && allBytes(v.halfParams, ['params', 'grads', 'optimizerState', 'activations', 'totalBytes']);
}

/** A device's memory record (of a memory message, or of an oom message's `memory`); a string says what is wrong with it. */
function deviceRecord(value: Obj): CudaStepMemory | CpuStepMemory | string {
  if (value.kind === 'cuda') {
    if (typeof value.device !== 'string' || !/^cuda:\d+$/.test(value.device)) return 'a cuda device is cuda:N';
    if (!isBytes(value.allocatedBytes) || !isBytes(value.reservedBytes) || !isBytes(value.peakAllocatedBytes)) return 'allocatedBytes, reservedBytes and peakAllocatedBytes must be byte counts';
    return { kind: 'cuda', device: value.device, allocatedBytes: value.allocatedBytes, reservedBytes: value.reservedBytes, peakAllocatedBytes: value.peakAllocatedBytes };
  }
  if (value.kind === 'cpu') {
    if (value.device !== 'cpu') return 'a cpu record has device "cpu"';
    if (!isBytes(value.rssBytes) || !isBytes(value.peakRssBytes)) return 'rssBytes and peakRssBytes must be byte counts';
    return { kind: 'cpu', device: 'cpu', rssBytes: value.rssBytes, peakRssBytes: value.peakRssBytes, ...(value.peakSinceStart === true ? { peakSinceStart: true as const } : {}) };
  }
  return `kind must be cuda or cpu, got ${JSON.stringify(value.kind)}`;
}

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
      const record = deviceRecord(value);
      return typeof record === 'string' ? bad(record) : { ok: true, message: { type: 'memory', ...id, ...step, ...record } };
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
      if (value.memory !== undefined && !Array.isArray(value.memory)) return bad('memory must be a list of device records');
      {
        const records = ((value.memory ?? []) as unknown[]).map((r) => (isObj(r) ? deviceRecord(r) : 'a memory record must be an object'));
        const wrong = records.find((r): r is string => typeof r === 'string');
        if (wrong !== undefined) return bad(`memory: ${wrong}`);
        return { ok: true, message: { type: 'oom', ...id, device: value.device, error: value.error, message: value.message, ...(value.batchSize !== undefined ? { batchSize: value.batchSize as number } : {}), ...(value.memory !== undefined ? { memory: records as Array<CudaStepMemory | CpuStepMemory> } : {}) } };
      }
    case 'modelSummary': {
      if (!Array.isArray(value.rows) || !value.rows.every(isSummaryRow)) return bad('rows must be a list of {name, className, depth, outputShape, params}');
      if (!isCount(value.totalParams) || !isCount(value.trainableParams)) return bad('totalParams and trainableParams must be whole numbers');
      if (!isModelMemory(value.memory)) return bad('memory must have params, grads, optimizerState (bytes, halfBytes, measured), totalBytes, autocast and halfParams');
      if (!optional(value.rowsOmitted, isCount)) return bad('rowsOmitted must be a whole number');
      return { ok: true, message: { type: 'modelSummary', ...id, rows: value.rows, totalParams: value.totalParams, trainableParams: value.trainableParams, memory: value.memory, ...(typeof value.rowsOmitted === 'number' ? { rowsOmitted: value.rowsOmitted } : {}) } };
    }
    case 'moduleError': {
      if (!isRaised(value.exception)) return bad('exception must be {type, message}');
      if (typeof value.module !== 'string' || typeof value.className !== 'string' || typeof value.repr !== 'string' || typeof value.expected !== 'string' || typeof value.got !== 'string') return bad('needs module, className, repr, expected and got');
      if (!optional(value.raisedAt, isPlace) || !optional(value.definedAt, isPlace)) return bad('raisedAt and definedAt must be {file, line}');
      if (!optional(value.model, (v) => typeof v === 'string')) return bad('model must be a class name');
      const p = value.previous;
      if (!optional(p, (v) => isObj(v) && typeof v.module === 'string' && typeof v.className === 'string' && isShape(v.outputShape) && optional(v.definedAt, isPlace))) return bad('previous must be {module, className, outputShape}');
      return { ok: true, message: { type: 'moduleError', ...id, exception: value.exception, module: value.module, className: value.className, repr: value.repr, expected: value.expected, got: value.got, ...(value.raisedAt ? { raisedAt: value.raisedAt as SourcePlace } : {}), ...(value.definedAt ? { definedAt: value.definedAt as SourcePlace } : {}), ...(typeof value.model === 'string' ? { model: value.model } : {}), ...(p ? { previous: p as { module: string; className: string; outputShape: number[] | null; definedAt?: SourcePlace } } : {}) } };
    }
    case 'oomMemory':
      if (!isRaised(value.exception)) return bad('exception must be {type, message}');
      if (!optional(value.raisedAt, isPlace)) return bad('raisedAt must be {file, line}');
      if (typeof value.firstStepDone !== 'boolean') return bad('firstStepDone must be true or false');
      if (!isModelMemory(value.memory)) return bad('memory must have params, grads, optimizerState (bytes, halfBytes, measured), totalBytes, autocast and halfParams');
      return { ok: true, message: { type: 'oomMemory', ...id, exception: value.exception, ...(value.raisedAt ? { raisedAt: value.raisedAt as SourcePlace } : {}), firstStepDone: value.firstStepDone, memory: value.memory } };
    default:
      return { ok: false, error: `unknown message type ${JSON.stringify(value.type)}` };
  }
}

/** The RankMemory part of a memory message (what `job/rankMemory` carries). */
export function rankMemoryOf(m: Extract<CompanionMessage, { type: 'memory' }>): RankMemory {
  const { type: _type, ...rest } = m;
  return rest;
}

/**
 * Messages between the extension host and the "Tuning Results" webview panel, typed once and
 * imported by both ends (src/views/tuning/tuningResults.ts and webview-ui/results/). The host folds the
 * experiment's events (live, or replayed from its journal) into these rows; the page only draws.
 * Self-contained on purpose: the page's bundle must not pull in the engine (units.ts is common too).
 */
import { formatBytes } from './units';

/** A trial's state as the results view shows it (the engine's statuses). */
export type ResultsTrialStatus = 'pending' | 'running' | 'done' | 'stopped' | 'failed' | 'interrupted';

/** Why the experiment stopped a trial: ASHA's cutoff, the scheduler's maxT, the whole experiment, or the user (terminated its task). */
export type ResultsStopReason = 'asha' | 'maxT' | 'experiment' | 'user';

/** A trial's peak memory so far, from the companion's messages of all its processes. */
export type TrialMemory =
  /** Some process used CUDA: the largest step peak of allocated (live tensors) and of reserved (the caching allocator's hold) of any process and device. */
  | { readonly device: 'cuda'; readonly peakAllocatedBytes: number; readonly peakReservedBytes: number; readonly processes: number; readonly steps: number }
  /** No CUDA: the largest resident set size of any process (the whole process's memory, not a GPU's). */
  | { readonly device: 'cpu'; readonly peakRssBytes: number; readonly processes: number; readonly steps: number };

/** Why a trial ended: it ran out of memory (the companion's `oom` message, or torch's words on stderr). */
export interface TrialOutOfMemory {
  readonly device: 'cuda' | 'cpu' | 'unknown';
  /** The trial's batch size, from its config (its one parameter named batch_size, batchSize, batch or bs). */
  readonly batchSize?: number;
  /** The error's first line, e.g. `RuntimeError: ... DefaultCPUAllocator: can't allocate memory ...`. */
  readonly message: string;
}

export interface ResultsTrial {
  readonly trialId: number;
  readonly status: ResultsTrialStatus;
  /** The config the trial ran with, as its process got it (nested). */
  readonly config: Readonly<Record<string, unknown>>;
  /** The searched parameters only, flat (`optimizer.lr`), in the space's order: the table's config column and the scatter's x. */
  readonly values: Readonly<Record<string, unknown>>;
  /** The learning curve: [time attribute (training_iteration unless the scheduler says otherwise), metric] per report that had the metric. */
  readonly curve: ReadonlyArray<readonly [number, number]>;
  /** The trial's peak memory, from the companion (command trials running a Python script; torchrun job trials). */
  readonly memory?: TrialMemory;
  /** Set when the trial failed by running out of memory (status 'failed'). */
  readonly outOfMemory?: TrialOutOfMemory;
  /** Reports received (the "iterations" column). */
  readonly iterations: number;
  /** The last reported metric, or null before the first. */
  readonly metric: number | null;
  readonly stopReason?: ResultsStopReason;
  /** The scheduler's words, e.g. "loss 0.91 is worse than the rung's cutoff 0.52 at training_iteration 4". */
  readonly stopMessage?: string;
  readonly error?: string;
  /** 2 or more when an interrupted trial was run again. */
  readonly attempt: number;
  /** The (last attempt's) log file of the trial, relative to the experiment's folder: the row links to it. */
  readonly log: string;
}

export interface ResultsParam {
  /** Flat path, as in `ResultsTrial.values`. */
  readonly name: string;
  /** `log` for loguniform / qloguniform / lograndint: the scatter's x axis is logarithmic. */
  readonly scale: 'linear' | 'log' | 'category';
}

export interface ResultsExperiment {
  readonly name: string;
  readonly metric: string;
  readonly mode: 'min' | 'max';
  /** The x of the learning curves. */
  readonly timeAttr: string;
  readonly params: readonly ResultsParam[];
  readonly totalTrials: number;
  /** `running`: live; `done` / `stopped`: the run ended (here or before); `journal`: read back from a journal with no run in this window. */
  readonly state: 'running' | 'done' | 'stopped' | 'journal';
  readonly best: { readonly trialId: number; readonly metric: number } | null;
  /** What "Apply Best Config" does: write into the job file, or offer the config JSON (command trials). */
  readonly apply: {
    readonly kind: 'job';
    readonly file: string;
    /** The keys the search varied (key paths): what Apply Best Config writes without asking. */
    readonly varied: ReadonlyArray<readonly string[]>;
  } | { readonly kind: 'command' };
}

/** Sent by the extension host to the results page. */
export type HostToResultsMessage =
  /** After `results/ready` (and whenever the page is re-created): everything to draw from scratch. */
  | { readonly type: 'results/init'; readonly experiment: ResultsExperiment; readonly trials: readonly ResultsTrial[] }
  /** A trial changed (started, reported, stopped, ended): its whole row, replacing the old one. */
  | { readonly type: 'results/trial'; readonly trial: ResultsTrial }
  /** The experiment's state or best trial changed. */
  | { readonly type: 'results/experiment'; readonly experiment: ResultsExperiment };

/** Sent by the results page to the extension host. */
export type ResultsToHostMessage =
  /** The page has loaded its script and can receive messages (the ready handshake). */
  | { readonly type: 'results/ready' }
  /** The user pressed "Apply Best Config". */
  | { readonly type: 'results/applyBest' }
  /** The user asked to see a trial's terminal (its task), e.g. by double-clicking its row. */
  | { readonly type: 'results/showTrial'; readonly trialId: number }
  /** The user clicked a trial's log link: open its log file in an editor. */
  | { readonly type: 'results/openLog'; readonly trialId: number };

// Formatting shared by the trial task names (host) and the results page.


export { formatBytes };

/** `1.2 GiB allocated / 1.5 GiB reserved (CUDA)`, `312.4 MiB RSS (CPU)`: a trial's peak, labelled what it is. */
export function formatTrialMemory(m: TrialMemory): string {
  const each = m.processes > 1 ? ', largest of its processes' : '';
  return m.device === 'cuda'
    ? `${formatBytes(m.peakAllocatedBytes)} allocated / ${formatBytes(m.peakReservedBytes)} reserved (CUDA${each})`
    : `${formatBytes(m.peakRssBytes)} RSS (CPU${each})`;
}

/** `out of memory (batch size 512)`, `out of memory`. */
export function outOfMemoryStatus(oom: TrialOutOfMemory): string {
  return `out of memory${oom.batchSize !== undefined ? ` (batch size ${oom.batchSize})` : ''}`;
}

/** A number as short as reads well in a tab title: `3.2e-3`, `0.032`, `64`, `1.5e5`. */
export function compactNumber(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (Number.isInteger(v) && a < 1e6) return String(v);
  if (a !== 0 && (a < 0.01 || a >= 1e5)) {
    const [mantissa, exp] = v.toExponential(1).split('e');
    return `${mantissa.replace(/\.0$/, '')}e${exp.replace(/^\+/, '')}`;
  }
  return String(Number(v.toPrecision(3)));
}

export function compactValue(v: unknown): string {
  if (typeof v === 'number') return compactNumber(v);
  if (typeof v === 'string') return v;
  if (Array.isArray(v)) return `[${v.map(compactValue).join(',')}]`;
  return JSON.stringify(v);
}

/** A metric to four significant digits (`0.1183`), in exponent form when tiny or huge. */
export function formatMetric(m: number): string {
  const a = Math.abs(m);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return m.toExponential(2).replace('e+', 'e');
  return String(Number(m.toPrecision(4)));
}

/** Validates a message from the page; returns undefined for anything malformed. */
export function parseResultsMessage(value: unknown): ResultsToHostMessage | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const m = value as { type?: unknown; trialId?: unknown };
  switch (m.type) {
    case 'results/ready':
    case 'results/applyBest':
      return { type: m.type };
    case 'results/showTrial':
    case 'results/openLog':
      return typeof m.trialId === 'number' && Number.isInteger(m.trialId) && m.trialId > 0 ? { type: m.type, trialId: m.trialId } : undefined;
    default:
      return undefined;
  }
}

/** Validates a message from the host (the page's side); undefined for anything else on the window. */
export function asResultsHostMessage(value: unknown): HostToResultsMessage | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const m = value as { type?: unknown; experiment?: unknown; trials?: unknown; trial?: unknown };
  switch (m.type) {
    case 'results/init':
      return typeof m.experiment === 'object' && m.experiment !== null && Array.isArray(m.trials) ? value as HostToResultsMessage : undefined;
    case 'results/trial':
      return typeof m.trial === 'object' && m.trial !== null && typeof (m.trial as { trialId?: unknown }).trialId === 'number' ? value as HostToResultsMessage : undefined;
    case 'results/experiment':
      return typeof m.experiment === 'object' && m.experiment !== null ? value as HostToResultsMessage : undefined;
    default:
      return undefined;
  }
}

/**
 * Messages that cross a boundary, typed once and imported by both ends.
 * Webview <-> extension host for the GPU panel. Each message is a member of a discriminated
 * union; receivers switch exhaustively and validate what arrives from the other side.
 */
import type { GpuDevice, GpuHint, GpuInventoryEntry, GpuProcess, GpuSnapshot, MemorySeries } from '../gpu/types';
import type { PanelRank } from './rankMemory';

/** Sent by the extension host to the GPU panel webview. */
export type HostToPanelMessage =
  /** After `panel/ready`, and whenever the view becomes visible again: everything to draw from scratch. */
  | { readonly type: 'gpu/init'; readonly snapshot: GpuSnapshot | null; readonly history: readonly MemorySeries[]; readonly inventory: readonly GpuInventoryEntry[]; readonly hints: readonly GpuHint[]; readonly historyMinutes: number }
  /** On every new sample. */
  | { readonly type: 'gpu/snapshot'; readonly snapshot: GpuSnapshot; readonly hints: readonly GpuHint[] }
  /**
   * The training job started from "Start Training…" (null when none ran since the extension
   * started): after `gpu/init`, and as the job progresses (a few times a second at most).
   * The panel marks the job's devices and draws its loss curve.
   */
  | { readonly type: 'gpu/job'; readonly job: PanelJob | null };

/** One worker of a training job, as the GPU panel marks it. */
export interface PanelJobWorker {
  readonly rank: number;
  /** The GPU the worker runs on (its `CUDA_VISIBLE_DEVICES` index), null for a CPU worker. */
  readonly gpuIndex: number | null;
  /** What the worker really got, e.g. `gpu:1 (CUDA_VISIBLE_DEVICES=1)` or `cpu`. */
  readonly device: string;
  /** The worker's process id, to find it among the GPU's processes (absent from hosts before this field). */
  readonly pid?: number;
  /** Bytes the worker's backend holds on its device by TF.js's own count (webgpu), from its last `job/memory`; null until known or on a backend without a device count. */
  readonly deviceBytes?: number | null;
}

/** A training job as the GPU panel shows it. */
export interface PanelJob {
  readonly name: string;
  readonly strategy: string;
  readonly state: 'starting' | 'running' | 'done' | 'failed' | 'cancelled';
  /** One line for people: "epoch 1/2 · step 26/63 · loss 0.517 · 4,150 samples/s", or the outcome. */
  readonly status: string;
  /** Empty until the job has started its workers. */
  readonly workers: readonly PanelJobWorker[];
  /** Training loss after optimizer steps (global step numbers), oldest first; thinned out on long jobs. */
  readonly lossSteps: readonly number[];
  readonly loss: readonly number[];
  /** torchrun jobs under the Python companion: each rank's memory after its optimizer steps, with its curve. */
  readonly ranks?: readonly PanelRank[];
  /** torchrun jobs: the CUDA_VISIBLE_DEVICES the job set (a rank's `cuda:N` is GPU cudaVisibleDevices[N]). */
  readonly cudaVisibleDevices?: readonly number[];
  /** torchrun jobs: memory that grows every step, naming the ranks; null or absent while none does. */
  readonly growth?: PanelGrowthHint | null;
  /** What `lossSteps` count: optimizer steps (default), or a torchrun script's printed / reported losses in order when it named no step. */
  readonly lossAxis?: 'step' | 'report';
  /** torchrun jobs: the last value of each metric the script printed or reported, for people (`loss 0.0312 · test_acc 98.37%`). */
  readonly metrics?: string;
  /** torchrun jobs on Slurm, while the job runs: the last reading of its nodes' GPUs (absent before the first and after the end). */
  readonly slurmNodes?: PanelSlurmNodes;
}

/** A node's state by `sinfo`. */
export interface PanelSlurmNodeState {
  readonly node: string;
  /** sinfo's state: idle, allocated, mixed, down, drained, draining, ... (a `*` suffix: not responding). */
  readonly state: string;
  readonly reason?: string;
  /** Down, drained, draining, failing or not responding: the node does not (or will not) run work. */
  readonly unavailable: boolean;
}

/** One node of a running Slurm job: its GPUs by nvidia-smi (read with `srun --overlap`) and its state by sinfo. */
export interface PanelSlurmNode {
  readonly node: string;
  readonly devices: readonly GpuDevice[];
  readonly processes: readonly GpuProcess[];
  /** Indexes of the allocation's GPUs with no compute process and (where known) under 5 % utilisation: allocated, yet idle. */
  readonly idle: readonly number[];
  /** What nvidia-smi (or the node) said instead of GPUs. */
  readonly error?: string;
  readonly slurm?: PanelSlurmNodeState;
}

/** The nodes of a running Slurm job, as the GPU panel draws them ("Slurm job J"). */
export interface PanelSlurmNodes {
  readonly jobId: string;
  /** Slurm's node list (`n[1-2]`). */
  readonly nodeList: string;
  readonly nodes: readonly PanelSlurmNode[];
  /** The job's nodes sinfo marks down or drained (a node that did not answer the probe is only here). */
  readonly unavailable: readonly PanelSlurmNodeState[];
  /** Milliseconds since the epoch of the reading. */
  readonly takenAt: number;
  /** The probe failed (srun's words): the last nodes shown are old or absent. */
  readonly error?: string;
}

/** Memory of a job of ours that grows every optimizer step. */
export interface PanelGrowthHint {
  readonly message: string;
  readonly ranks: readonly number[];
  /** The language server's finding in the running script that explains such growth (accumulated loss…), when it has one. */
  readonly finding?: PanelFinding;
  /**
   * Without a finding: the running script, to open (the language server checks the files shown in
   * editors, so a script no editor shows has no findings yet; once open, its finding is linked).
   */
  readonly script?: string;
}

/** A diagnostic of the OOM-hints language server, as the panel links it. */
export interface PanelFinding {
  /** Absolute path of the script. */
  readonly file: string;
  /** 0-based line, as VS Code counts. */
  readonly line: number;
  /** The rule, e.g. `accumulated-loss`. */
  readonly code: string;
  /** The diagnostic's first line. */
  readonly message: string;
}

/** Sent by the GPU panel webview to the extension host. */
export type PanelToHostMessage =
  /** The page has loaded its script and can receive messages (the ready handshake). */
  | { readonly type: 'panel/ready' }
  /** The user asked to open a documentation link (webviews cannot open external links themselves). */
  | { readonly type: 'panel/openLink'; readonly url: string }
  /** The user pressed "Retry" after a tool error (or "Check again" when no GPU was found). */
  | { readonly type: 'panel/refresh' }
  /** The user asked to open one of the extension's settings (the no-GPU state's nvidia-smi path). */
  | { readonly type: 'panel/openSetting'; readonly id: string }
  /** The user asked to open the linter's finding a growth hint links, or its script at line 0 (the host opens only what it sent). */
  | { readonly type: 'panel/openFinding'; readonly file: string; readonly line: number };

/** Validates a message from the webview; returns undefined for anything malformed. */
export function parsePanelMessage(value: unknown): PanelToHostMessage | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const m = value as { type?: unknown; url?: unknown };
  switch (m.type) {
    case 'panel/ready':
    case 'panel/refresh':
      return { type: m.type };
    case 'panel/openLink':
      return typeof m.url === 'string' && /^https:\/\//.test(m.url) ? { type: 'panel/openLink', url: m.url } : undefined;
    case 'panel/openSetting': {
      const id = (value as { id?: unknown }).id;
      return typeof id === 'string' && /^gpuWorkbench\.[\w.]+$/.test(id) ? { type: 'panel/openSetting', id } : undefined;
    }
    case 'panel/openFinding': {
      const { file, line } = value as { file?: unknown; line?: unknown };
      return typeof file === 'string' && file.length > 0 && Number.isSafeInteger(line) && (line as number) >= 0 ? { type: 'panel/openFinding', file, line: line as number } : undefined;
    }
    default:
      return undefined;
  }
}

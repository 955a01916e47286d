/**
 * The GPU engine's data model. Shared by the sampler, the CLI (`gpu-workbench gpus --json`),
 * the extension and the webview, so it must stay free of Node and VS Code imports.
 *
 * A value the tool reports as `[N/A]` or `[Not Supported]` is `null`, never 0: a 0 would
 * read as "idle" or "empty" when the truth is "unknown".
 */

/** Where the numbers came from. */
export type GpuSource = 'nvidia-smi' | 'amd' | 'none';

export interface GpuDevice {
  /** The tool's device index (what `CUDA_VISIBLE_DEVICES` and `torch.cuda.device(i)` use). */
  readonly index: number;
  readonly uuid: string | null;
  readonly name: string | null;
  readonly memoryUsedMiB: number | null;
  /** Memory the driver reserves for itself (`memory.reserved`, newer NVIDIA drivers only). */
  readonly memoryReservedMiB: number | null;
  readonly memoryTotalMiB: number | null;
  readonly utilizationPercent: number | null;
  readonly temperatureC: number | null;
  readonly powerW: number | null;
  readonly powerLimitW: number | null;
}

export interface GpuProcess {
  readonly gpuIndex: number;
  readonly pid: number;
  readonly name: string;
  /** `used_gpu_memory`; `null` where the driver does not report it (e.g. under WSL or in containers). */
  readonly memoryMiB: number | null;
}

/** One reading of every device. */
export interface GpuSnapshot {
  readonly source: GpuSource;
  readonly devices: readonly GpuDevice[];
  readonly processes: readonly GpuProcess[];
  /** The tool's own error text when it failed (missing, driver down, bad field, ...). */
  readonly error?: string;
  /** Milliseconds since the epoch when the sample was taken (by our clock). */
  readonly takenAt: number;
  /** True when the tool has been silent for three intervals: the numbers shown are old. */
  readonly stale?: boolean;
  /** When the tool failed and is restarted with backoff: milliseconds until the next try. */
  readonly retryInMs?: number;
  /**
   * With source 'none': nothing here can report a GPU (no nvidia-smi, amd-smi or rocm-smi on
   * PATH, no AMD card in sysfs); `error` says where it looked. Not an error, unlike a tool that
   * exists and failed or hung (that leaves this unset).
   */
  readonly noGpu?: boolean;
  /**
   * With source 'none': the nvidia-smi the user named (setting gpuWorkbench.gpuMonitor.nvidiaSmiPath
   * or `--nvidia-smi`) cannot be run. An error to fix, never "no GPU here"; `error` names the path.
   */
  readonly badNvidiaSmiPath?: string;
}

/** Static facts read once at start (from `systeminformation`), never in the polling loop. */
export interface GpuInventoryEntry {
  readonly vendor: string | null;
  readonly model: string | null;
  readonly vramMiB: number | null;
  readonly driverVersion: string | null;
  readonly bus: string | null;
}

/** Memory over time for one device, oldest first; `t` in ms since the epoch. */
export interface MemorySeries {
  readonly gpuIndex: number;
  readonly uuid: string | null;
  readonly t: readonly number[];
  readonly usedMiB: readonly (number | null)[];
  readonly totalMiB: number | null;
}

/** Advice computed from the history, in the words of the course notes. */
export interface GpuHint {
  readonly kind: 'memory-growth' | 'imbalance' | 'reserved-vs-allocated';
  readonly gpuIndex: number | null;
  readonly message: string;
  readonly docsUrl?: string;
}

/**
 * The GPU engine's front door: picks a source (NVIDIA's `nvidia-smi`, then AMD's sysfs, then
 * `rocm-smi`, else 'none' with the reasons), samples only while someone holds a lease (the panel
 * while visible, a running job), keeps the history and computes the hints. No `vscode` import:
 * the CLI uses it as the extension does.
 */
import { MemoryHistory } from './history';
import { computeHints } from './hints';
import { Inventory, type GraphicsLoader } from './inventory';
import { NvidiaSmiSampler, probeFields, type ProbeResult } from './nvidiaSampler';
import { readAmdSysfs, readAmdTools, readRocmSmi } from './amd';
import { readAmdSmi } from './amdSmi';
import { joinProcesses } from './nvidiaSmi';
import type { GpuDevice, GpuHint, GpuInventoryEntry, GpuProcess, GpuSnapshot, MemorySeries } from './types';

export interface GpuMonitorOptions {
  intervalMs: number;
  /** Default 'nvidia-smi', looked up on PATH. */
  nvidiaSmiPath?: string;
  /** Minutes of history per device (default 10). */
  historyMinutes?: number;
  env?: NodeJS.ProcessEnv;
  /** Default '/sys'; tests point it at a fixture tree. */
  sysfsRoot?: string;
  /** How often compute processes are read (default 2000 ms). */
  processIntervalMs?: number;
  /** Where the inventory comes from (default: systeminformation's `graphics()`). */
  inventoryLoader?: GraphicsLoader;
}

export interface Disposable {
  dispose(): void;
}

type Listener = (snapshot: GpuSnapshot, hints: readonly GpuHint[]) => void;

/** A running source of snapshots. */
interface Backend {
  stop(): void;
  /** Resolves once what the source reads besides devices (processes) has been read once. */
  settled(snapshot: GpuSnapshot): Promise<GpuSnapshot>;
}

const defaults = { nvidiaSmiPath: 'nvidia-smi', historyMinutes: 10, sysfsRoot: '/sys', processIntervalMs: 2000 };

export class GpuMonitor {
  private opts: GpuMonitorOptions & typeof defaults;
  private readonly leases = new Map<number, string>();
  private nextLease = 1;
  private readonly listeners = new Set<Listener>();
  private backend: Backend | null = null;
  private generation = 0;
  private latestSnapshot: GpuSnapshot | null = null;
  private currentHints: GpuHint[] = [];
  private readonly memory: MemoryHistory;
  private readonly inventoryCache: Inventory;
  private disposed = false;
  /** `--help-query-gpu` is asked once per tool and environment; a missing tool is asked again. */
  private probed: { key: string; result: Promise<ProbeResult> } | null = null;

  constructor(opts: GpuMonitorOptions) {
    this.opts = { ...defaults, ...stripUndefined(opts), intervalMs: opts.intervalMs };
    this.memory = new MemoryHistory(MemoryHistory.capacityFor(this.opts.historyMinutes, this.opts.intervalMs));
    this.inventoryCache = new Inventory(opts.inventoryLoader);
  }

  /** Sampling runs only while at least one lease is held (the panel while visible, a running job). */
  acquire(reason: string): Disposable {
    if (this.disposed) return { dispose: () => undefined };
    const id = this.nextLease++;
    this.leases.set(id, reason);
    if (this.leases.size === 1) this.start();
    let released = false;
    return {
      dispose: () => {
        if (released) return;
        released = true;
        this.leases.delete(id);
        if (this.leases.size === 0) this.stop();
      },
    };
  }

  /** Why sampling runs now (the reasons given to `acquire`). */
  get leaseReasons(): string[] {
    return [...this.leases.values()];
  }

  get sampling(): boolean {
    return this.backend !== null;
  }

  onSnapshot(listener: Listener): Disposable {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  }

  latest(): GpuSnapshot | null {
    return this.latestSnapshot;
  }

  /** Memory per device over the last `historyMinutes`, oldest first. */
  history(): MemorySeries[] {
    return this.memory.series();
  }

  hints(): GpuHint[] {
    return [...this.currentHints];
  }

  /** Static facts from systeminformation: read once, lazily, cached; never in the polling loop. */
  inventory(): Promise<GpuInventoryEntry[]> {
    return this.inventoryCache.get();
  }

  /** Applies new settings; restarts sampling with the new interval, path or roots if it runs. */
  configure(opts: Partial<GpuMonitorOptions>): void {
    const before = this.opts;
    this.opts = { ...this.opts, ...stripUndefined(opts) };
    if (this.opts.intervalMs !== before.intervalMs || this.opts.historyMinutes !== before.historyMinutes) {
      this.memory.resize(MemoryHistory.capacityFor(this.opts.historyMinutes, this.opts.intervalMs));
    }
    const restart = (['intervalMs', 'nvidiaSmiPath', 'env', 'sysfsRoot', 'processIntervalMs'] as const).some((k) => this.opts[k] !== before[k]);
    if (restart && this.backend) this.restart();
  }

  /** Restarts the tool now (the user pressed Retry). */
  refresh(): void {
    if (this.backend) this.restart();
  }

  /** Stops sampling and kills every child process. */
  dispose(): void {
    this.disposed = true;
    this.leases.clear();
    this.stop();
    this.listeners.clear();
  }

  /**
   * For `sampleOnce`: the snapshot completed with what the source reads more slowly than the
   * devices (the compute processes), when that arrives soon.
   */
  async settle(snapshot: GpuSnapshot): Promise<GpuSnapshot> {
    return this.backend ? this.backend.settled(snapshot) : snapshot;
  }

  private restart(): void {
    this.stop();
    this.start();
  }

  private start(): void {
    if (this.backend || this.disposed) return;
    const gen = ++this.generation;
    const emit = (s: GpuSnapshot): void => { if (gen === this.generation) this.accept(s); };
    const reasons: string[] = [];
    const sampler = new NvidiaSmiSampler({
      path: this.opts.nvidiaSmiPath,
      intervalMs: this.opts.intervalMs,
      env: this.opts.env,
      processIntervalMs: this.opts.processIntervalMs,
      onSnapshot: emit,
      probe: () => this.probe(),
      onMissing: (reason) => {
        if (gen !== this.generation) return;
        const path = this.opts.nvidiaSmiPath;
        if (path !== defaults.nvidiaSmiPath) {
          // A path the user set and got wrong is theirs to fix, not a machine without a GPU.
          emit({ source: 'none', devices: [], processes: [], takenAt: Date.now(), badNvidiaSmiPath: path, error: `${reason}: fix gpuWorkbench.gpuMonitor.nvidiaSmiPath / --nvidia-smi` });
          return;
        }
        reasons.push(reason);
        void this.startAmd(gen, reasons, emit);
      },
    });
    this.backend = {
      stop: () => sampler.stop(),
      settled: async (s) => {
        await sampler.processesRead();
        return s.source === 'nvidia-smi' ? { ...s, processes: joinProcesses(sampler.processes, s.devices) } : s;
      },
    };
    sampler.start();
  }

  private probe(): Promise<ProbeResult> {
    const { nvidiaSmiPath, env, intervalMs } = this.opts;
    const key = JSON.stringify([nvidiaSmiPath, env ?? null]);
    if (this.probed?.key !== key) {
      const result = probeFields(nvidiaSmiPath, env, Math.max(3000, 3 * intervalMs));
      const entry = { key, result };
      this.probed = entry;
      void result.then((r) => { if (r === 'missing' && this.probed === entry) this.probed = null; });
    }
    return this.probed.result;
  }

  private async startAmd(gen: number, reasons: string[], emit: (s: GpuSnapshot) => void): Promise<void> {
    const { sysfsRoot, intervalMs, env } = this.opts;
    const first = await readAmdSysfs(sysfsRoot);
    if (gen !== this.generation) return;
    if (first.devices.length) {
      this.backend = poller(intervalMs, { devices: first.devices, processes: [] }, async () => ({ devices: (await readAmdSysfs(sysfsRoot)).devices, processes: [] }), emit, 'AMD sysfs');
      return;
    }
    if (first.reason) reasons.push(first.reason);
    // The tools, amd-smi first, then rocm-smi; keep polling whichever answered.
    const timeoutMs = Math.max(5000, 3 * intervalMs);
    const tools = await readAmdTools(env, timeoutMs);
    if (gen !== this.generation) return;
    if (tools.tool) {
      const tool = tools.tool;
      this.backend = poller(intervalMs, tools, async () => {
        const r = tool === 'amd-smi' ? await readAmdSmi(env, timeoutMs) : { ...(await readRocmSmi(env, timeoutMs)), processes: [] };
        if (r.error) throw new Error(r.error);
        return r;
      }, emit, tool);
      return;
    }
    reasons.push(...tools.reasons);
    // Nothing to poll: say so once. A lease taken later (or Retry) looks again. Only when no tool is
    // installed and sysfs has no AMD card is it "no GPU here"; a tool that ran and failed is an error.
    const noGpu = tools.allMissing && !first.unreadableCard;
    emit({ source: 'none', devices: [], processes: [], error: reasons.join('; '), takenAt: Date.now(), ...(noGpu ? { noGpu: true } : {}) });
  }

  private stop(): void {
    this.generation++;
    this.backend?.stop();
    this.backend = null;
  }

  private accept(snapshot: GpuSnapshot): void {
    this.latestSnapshot = snapshot;
    this.memory.push(snapshot);
    this.currentHints = computeHints(this.memory, snapshot);
    for (const l of [...this.listeners]) {
      try {
        l(snapshot, this.currentHints);
      } catch {
        // One faulty listener must not stop the others or the sampling.
      }
    }
  }
}

interface AmdReading { readonly devices: readonly GpuDevice[]; readonly processes: readonly GpuProcess[] }

/** Polls an asynchronous reader every interval, never overlapping reads; stale after 3 silent intervals. */
function poller(intervalMs: number, first: AmdReading, read: () => Promise<AmdReading>, emit: (s: GpuSnapshot) => void, what: string): Backend {
  let stopped = false;
  let busy = false;
  let last = Date.now();
  let latest: GpuSnapshot = { source: 'amd', devices: first.devices, processes: first.processes, takenAt: last };
  emit(latest);
  const timer = setInterval(() => {
    if (busy) {
      if (Date.now() - last > 3 * intervalMs) emit({ ...latest, stale: true, error: `${what} has given no reading for 3 intervals` });
      return;
    }
    busy = true;
    read().then(({ devices, processes }) => {
      busy = false;
      if (stopped) return;
      last = Date.now();
      latest = { source: 'amd', devices, processes, takenAt: last };
      emit(latest);
    }, (err: unknown) => {
      busy = false;
      if (!stopped) emit({ ...latest, stale: true, takenAt: Date.now(), error: err instanceof Error ? err.message : String(err) });
    });
  }, intervalMs);
  return { stop: () => { stopped = true; clearInterval(timer); }, settled: (s) => Promise.resolve(s) };
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

export interface SampleOnceOptions extends Partial<GpuMonitorOptions> {
  /** Give up after this long (default: 10 s, or 5 intervals if longer). */
  timeoutMs?: number;
}

/** One reading, for `gpu-workbench gpus` without --watch and for a status bar refresh. */
export function sampleOnce(opts: SampleOnceOptions = {}): Promise<GpuSnapshot> {
  const intervalMs = opts.intervalMs ?? 1000;
  const monitor = new GpuMonitor({ ...opts, intervalMs });
  const timeoutMs = opts.timeoutMs ?? Math.max(10_000, 5 * intervalMs);
  return new Promise<GpuSnapshot>((resolve) => {
    let done = false;
    const finish = (s: GpuSnapshot): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      monitor.dispose();
      resolve(s);
    };
    const timer = setTimeout(() => finish(monitor.latest() ?? {
      source: 'none', devices: [], processes: [], takenAt: Date.now(), stale: true,
      error: `no reading within ${(timeoutMs / 1000).toFixed(1)} s`,
    }), timeoutMs);
    monitor.onSnapshot((s) => {
      if (s.devices.length && !s.stale && !s.error) {
        void monitor.settle(s).then(finish, () => finish(s));
      } else if (s.error || s.stale) {
        finish(s);
      }
    });
    monitor.acquire('sampleOnce');
  });
}

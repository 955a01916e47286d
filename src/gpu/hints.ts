/**
 * Advice computed from the memory history, in the words of the course notes. Each rule needs a
 * sustained pattern, not one reading, so flat or noisy memory stays silent.
 */
import type { DeviceWindow, MemoryHistory } from './history';
import type { GpuHint, GpuSnapshot } from './types';

/** The rule's docs (one place; the OOM-hints rule of the same name explains the fix). */
export const accumulatedLossDocsUrl = 'https://github.com/gpu-workbench/gpu-workbench/blob/main/docs/rules/accumulated-loss.md';
export const dataParallelDocsUrl = 'https://pytorch.org/docs/stable/notes/cuda.html#use-nn-parallel-distributeddataparallel-instead-of-multiprocessing-or-nn-dataparallel';
export const cachingAllocatorDocsUrl = 'https://pytorch.org/docs/stable/notes/cuda.html#memory-management';

/**
 * Thresholds, chosen so that the allocator's warm-up, a flat plateau and sampling noise do not
 * fire: memory must rise in most steps over a real span, and keep rising at the end.
 */
export const hintThresholds = {
  /** Samples looked at (the newest ones). */
  window: 30,
  growth: {
    /** At least this many consecutive samples with a process on the device. */
    minSamples: 8,
    /** A change smaller than this (MiB) is noise, neither a rise nor a drop. */
    noiseMiB: 2,
    /** Share of steps that must rise, and the most that may fall. */
    minRiseShare: 0.5,
    maxDropShare: 0.1,
    /** Total growth over the run: at least this many MiB and this share of the device. */
    minGrowthMiB: 64,
    minGrowthShare: 0.01,
  },
  imbalance: {
    /** Samples averaged per device. */
    samples: 5,
    /** The fullest device holds this many times the others' median ... */
    ratio: 1.5,
    /** ... and this much more (MiB, or this share of the device, whichever is larger) ... */
    minGapMiB: 1024,
    minGapShare: 0.1,
    /** ... and is at least this full. */
    minFullShare: 0.3,
  },
  reserved: {
    /** Consecutive idle samples with a process on the device and memory held. */
    minSamples: 5,
    maxIdleUtilization: 5,
    minHeldShare: 0.25,
    /** Memory counts as flat when it moves less than this (MiB, or share of the device). */
    flatMiB: 64,
    flatShare: 0.01,
  },
} as const;

function gib(mib: number): string {
  return `${(mib / 1024).toFixed(1)} GiB`;
}

/** The newest run of samples with a process on the device and a known memory reading. */
function activeRun(w: DeviceWindow): number {
  let start = w.usedMiB.length;
  while (start > 0 && w.processes[start - 1] > 0 && !Number.isNaN(w.usedMiB[start - 1])) start--;
  return start;
}

function growthHint(w: DeviceWindow, names: Map<number, string>): GpuHint | null {
  const g = hintThresholds.growth;
  const start = activeRun(w);
  const used = w.usedMiB.subarray(start);
  if (used.length < g.minSamples) return null;
  let rises = 0;
  let drops = 0;
  for (let i = 1; i < used.length; i++) {
    const d = used[i] - used[i - 1];
    if (d > g.noiseMiB) rises++;
    else if (d < -g.noiseMiB) drops++;
  }
  const steps = used.length - 1;
  const growth = used[used.length - 1] - used[0];
  const minGrowth = Math.max(g.minGrowthMiB, (w.totalMiB ?? 0) * g.minGrowthShare);
  if (rises / steps < g.minRiseShare || drops / steps > g.maxDropShare || growth < minGrowth) return null;
  // Sustained, not a warm-up that has levelled off: the newer half sits above the older half,
  // and memory still rose within the newest quarter.
  const half = Math.floor(used.length / 2);
  if (Math.min(...used.subarray(half)) < Math.max(...used.subarray(0, half))) return null;
  const quarter = Math.max(2, Math.floor(used.length / 4));
  const tail = used.subarray(used.length - quarter);
  if (tail[tail.length - 1] - tail[0] <= g.noiseMiB) return null;
  const seconds = (w.t[w.t.length - 1] - w.t[start]) / 1000;
  const who = names.get(w.gpuIndex);
  return {
    kind: 'memory-growth',
    gpuIndex: w.gpuIndex,
    message: `GPU ${w.gpuIndex}: memory grows every iteration: accumulating tensors? (+${Math.round(growth)} MiB in ${seconds.toFixed(0)} s${who ? ` while ${who} runs` : ''}) `
      + 'Summing a loss tensor (`total += loss`) keeps every step\'s graph alive; add `loss.item()` instead.',
    docsUrl: accumulatedLossDocsUrl,
  };
}

function mean(values: Float64Array): number {
  let s = 0;
  let n = 0;
  for (const v of values) if (!Number.isNaN(v)) { s += v; n++; }
  return n ? s / n : NaN;
}

function median(values: number[]): number {
  const v = [...values].sort((a, b) => a - b);
  const m = Math.floor(v.length / 2);
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

function imbalanceHint(windows: DeviceWindow[], latest: GpuSnapshot | null): GpuHint | null {
  const t = hintThresholds.imbalance;
  if (!latest || windows.length < 2) return null;
  const level = windows.map((w) => ({ w, used: mean(w.usedMiB.subarray(Math.max(0, w.usedMiB.length - t.samples))) }))
    .filter((x) => !Number.isNaN(x.used) && x.w.totalMiB);
  if (level.length < 2) return null;
  const fullest = level.reduce((a, b) => (b.used > a.used ? b : a));
  const others = level.filter((x) => x !== fullest).map((x) => x.used);
  const rest = median(others);
  const total = fullest.w.totalMiB ?? 0;
  if (fullest.used < t.ratio * rest || fullest.used - rest < Math.max(t.minGapMiB, total * t.minGapShare) || fullest.used < total * t.minFullShare) return null;
  // DataParallel is one process driving every device; two unrelated jobs on two GPUs are not it.
  const gpu = fullest.w.gpuIndex;
  const shared = latest.processes.find((p) => p.gpuIndex === gpu && latest.processes.some((q) => q.pid === p.pid && q.gpuIndex !== gpu));
  if (!shared) return null;
  return {
    kind: 'imbalance',
    gpuIndex: gpu,
    message: `GPU ${gpu} holds ${gib(fullest.used)}, the other devices of PID ${shared.pid} about ${gib(rest)}. `
      + `With DataParallel, GPU ${gpu} holds the gathered outputs; DistributedDataParallel balances this.`,
    docsUrl: dataParallelDocsUrl,
  };
}

function reservedHint(w: DeviceWindow): GpuHint | null {
  const r = hintThresholds.reserved;
  const total = w.totalMiB;
  if (!total) return null;
  const start = activeRun(w);
  let idleStart = w.usedMiB.length;
  while (idleStart > start && w.utilization[idleStart - 1] <= r.maxIdleUtilization) idleStart--; // NaN (unknown) ends the run
  const used = w.usedMiB.subarray(idleStart);
  if (used.length < r.minSamples) return null;
  const lo = Math.min(...used);
  const hi = Math.max(...used);
  if (lo < total * r.minHeldShare || hi - lo > Math.max(r.flatMiB, total * r.flatShare)) return null;
  return {
    kind: 'reserved-vs-allocated',
    gpuIndex: w.gpuIndex,
    message: `GPU ${w.gpuIndex}: ${gib(hi)} stays held while the GPU is idle. nvidia-smi shows what PyTorch's caching allocator has reserved `
      + '(`torch.cuda.memory_reserved()`), not what live tensors use (`torch.cuda.memory_allocated()`). '
      + '`torch.cuda.empty_cache()` returns the cache to the driver; it frees nothing that is still referenced.',
    docsUrl: cachingAllocatorDocsUrl,
  };
}

/** The hints for the current history; `latest` supplies the processes (who runs where). */
export function computeHints(history: MemoryHistory, latest: GpuSnapshot | null): GpuHint[] {
  const windows = history.windows(hintThresholds.window);
  const names = new Map<number, string>();
  for (const p of latest?.processes ?? []) if (!names.has(p.gpuIndex)) names.set(p.gpuIndex, `${p.name} (PID ${p.pid})`);
  const hints: GpuHint[] = [];
  for (const w of windows) {
    const h = growthHint(w, names);
    if (h) hints.push(h);
  }
  const imbalance = imbalanceHint(windows, latest);
  if (imbalance) hints.push(imbalance);
  for (const w of windows) {
    const h = reservedHint(w);
    if (h) hints.push(h);
  }
  return hints;
}

/**
 * Per-rank memory of a torchrun job (the Python companion's `memory` messages), as the GPU panel
 * shows it: each rank's latest numbers and a thinned curve, the parts of its process bar
 * (allocated ⊂ reserved ⊂ nvidia-smi's total for the process), which process is which rank (by
 * pid), and memory that grows every step. Pure and free of Node and `vscode`, so that the
 * extension host and the panel's page share it and it is unit-tested in Node.
 */
import type { RankMemory } from './companionProtocol';

/** One rank's memory on one device, as the panel draws it. */
export interface PanelRank {
  readonly rank: number;
  /** The rank's process (null from a companion that does not send it). */
  readonly pid: number | null;
  /** `cuda:N` as the process sees it, or `cpu`. */
  readonly device: string;
  /** The latest record (its last optimizer step). */
  readonly latest: RankMemory;
  /** The curve: optimizer steps, oldest first, and the bytes at each (allocated on CUDA, RSS on CPU); thinned on long jobs. */
  readonly steps: readonly number[];
  readonly bytes: readonly number[];
}

/** What a rank's curve and growth check follow: allocated bytes on CUDA, the resident set on CPU. */
export function trackedBytes(m: RankMemory): number {
  return m.kind === 'cuda' ? m.allocatedBytes : m.rssBytes;
}

/** The word for that quantity: "allocated" or "RSS". */
export function trackedWord(kind: RankMemory['kind']): string {
  return kind === 'cuda' ? 'allocated' : 'RSS';
}

export const growthThresholds = {
  /** Steps looked at (the newest ones). */
  window: 40,
  /** The process's first steps are warm-up (optimizer state, allocator pools): not looked at. */
  skipSteps: 2,
  /** At least this many steps in the window. */
  minSteps: 8,
  /** A change smaller than this is noise, neither a rise nor a drop: the larger of these bytes and this share of the level. */
  noiseBytes: 512 * 1024,
  noiseShare: 0.005,
  /** Share of the steps that must rise, and the most that may fall. */
  minRiseShare: 0.75,
  maxDropShare: 0.1,
  /** Total growth over the window: at least this many bytes, and this many times the noise. */
  minGrowthBytes: 16 * 2 ** 20,
  minGrowthNoises: 8,
} as const;

/** Memory that grew every step over a span of steps. */
export interface Growth {
  readonly fromStep: number;
  readonly toStep: number;
  readonly growthBytes: number;
}

/**
 * Whether the series grows step after step: most steps rise by more than the noise and almost
 * none fall, the total is well beyond the noise, the newer half sits wholly above the older one,
 * and the newest quarter still rises (a warm-up that levelled off, a plateau, noise, or one jump
 * does not count). `steps` and `bytes` are consecutive optimizer steps, oldest first.
 */
export function detectGrowth(steps: readonly number[], bytes: readonly number[], t = growthThresholds): Growth | null {
  let start = Math.max(0, Math.min(steps.length, bytes.length) - t.window);
  const end = Math.min(steps.length, bytes.length);
  while (start < end && steps[start] <= t.skipSteps) start++;
  const b = bytes.slice(start, end);
  if (b.length < t.minSteps) return null;
  const sorted = [...b].sort((x, y) => x - y);
  const noise = Math.max(t.noiseBytes, t.noiseShare * sorted[Math.floor(sorted.length / 2)]);
  let rises = 0;
  let drops = 0;
  for (let i = 1; i < b.length; i++) {
    const d = b[i] - b[i - 1];
    if (d > noise) rises++;
    else if (d < -noise) drops++;
  }
  const n = b.length - 1;
  const growth = b[b.length - 1] - b[0];
  if (rises / n < t.minRiseShare || drops / n > t.maxDropShare || growth < Math.max(t.minGrowthBytes, t.minGrowthNoises * noise)) return null;
  const half = Math.floor(b.length / 2);
  if (Math.min(...b.slice(half)) <= Math.max(...b.slice(0, half))) return null;
  const quarter = Math.max(2, Math.floor(b.length / 4));
  const tail = b.slice(b.length - quarter);
  if (tail[tail.length - 1] - tail[0] <= noise) return null;
  return { fromStep: steps[start], toStep: steps[end - 1], growthBytes: growth };
}

/** The most points a rank's curve keeps; past it every other point goes (the newest always stays). */
export const maxCurvePoints = 300;

interface Series {
  pid: number | null;
  latest: RankMemory;
  steps: number[];
  bytes: number[];
  /** The newest steps unthinned, for the growth check. */
  recentSteps: number[];
  recentBytes: number[];
}

/** Collects the job's memory messages, per rank and device. */
export class RankMemoryTracker {
  private readonly series = new Map<string, Series>();

  constructor(private readonly maxPoints = maxCurvePoints, private readonly window: number = growthThresholds.window) {}

  add(m: RankMemory): void {
    const key = `${m.rank}\0${m.device}`;
    let s = this.series.get(key);
    if (!s) {
      s = { pid: null, latest: m, steps: [], bytes: [], recentSteps: [], recentBytes: [] };
      this.series.set(key, s);
    }
    // A rank restarted by torchrun counts its steps from 1 again: a new curve.
    if (s.steps.length && m.step <= s.steps[s.steps.length - 1]) {
      s.steps.length = s.bytes.length = s.recentSteps.length = s.recentBytes.length = 0;
    }
    s.pid = m.pid ?? s.pid;
    s.latest = m;
    const v = trackedBytes(m);
    s.steps.push(m.step);
    s.bytes.push(v);
    if (s.steps.length > this.maxPoints) {
      // Keep the first, every other one after it, and the newest.
      const keep = (_: number, i: number, a: readonly number[]) => i % 2 === 0 || i === a.length - 1;
      s.steps = s.steps.filter(keep);
      s.bytes = s.bytes.filter(keep);
    }
    s.recentSteps.push(m.step);
    s.recentBytes.push(v);
    if (s.recentSteps.length > this.window) {
      s.recentSteps.shift();
      s.recentBytes.shift();
    }
  }

  get size(): number {
    return this.series.size;
  }

  /** Every rank and device, by rank then device. */
  ranks(): PanelRank[] {
    return [...this.series.values()]
      .map((s) => ({ rank: s.latest.rank, pid: s.pid, device: s.latest.device, latest: s.latest, steps: [...s.steps], bytes: [...s.bytes] }))
      .sort((a, b) => a.rank - b.rank || a.device.localeCompare(b.device));
  }

  /** The ranks (and devices) whose memory grows every step now. */
  growth(): (Growth & { readonly rank: number; readonly device: string; readonly kind: RankMemory['kind'] })[] {
    const out: (Growth & { rank: number; device: string; kind: RankMemory['kind'] })[] = [];
    for (const s of this.series.values()) {
      const g = detectGrowth(s.recentSteps, s.recentBytes);
      if (g) out.push({ ...g, rank: s.latest.rank, device: s.latest.device, kind: s.latest.kind });
    }
    return out.sort((a, b) => a.rank - b.rank || a.device.localeCompare(b.device));
  }
}

/** Bytes as people read them: `812 KiB`, `238.6 MiB`, `1.25 GiB`. */
export function bytesText(bytes: number): string {
  const mib = bytes / 2 ** 20;
  if (Math.abs(mib) < 1) return `${Math.round(bytes / 1024)} KiB`;
  if (Math.abs(mib) < 1024) return `${mib.toFixed(1)} MiB`;
  return `${(mib / 1024).toFixed(2)} GiB`;
}

/** "memory grows every optimizer step on rank 1 (RSS +48.0 MiB over steps 3-22)" for the growing ranks. */
export function growthMessage(growth: readonly ReturnType<RankMemoryTracker['growth']>[number][]): string {
  const parts = growth.map((g) => `rank ${g.rank}${g.kind === 'cuda' ? ` ${g.device}` : ''} (${trackedWord(g.kind)} +${bytesText(g.growthBytes)} over steps ${g.fromStep}-${g.toStep})`);
  const ranks = parts.length === 1 ? parts[0] : `${parts.slice(0, -1).join(', ')} and ${parts[parts.length - 1]}`;
  return `Memory grows every optimizer step on ${ranks}: accumulating tensors? Summing a loss tensor (\`total += loss\`) keeps every step's graph alive; add \`loss.item()\` instead.`;
}

/** One part of a rank's process bar. */
export interface BarSegment {
  readonly part: 'allocated' | 'cached' | 'other';
  readonly bytes: number;
  /** Share of the process's total, 0..100. */
  readonly percent: number;
}

export const segmentWords: Record<BarSegment['part'], string> = {
  allocated: 'allocated: live tensors (torch.cuda.memory_allocated)',
  cached: 'reserved but free: the caching allocator\'s cache (memory_reserved − memory_allocated; empty_cache() returns it)',
  other: 'the rest of what nvidia-smi counts for the process: the CUDA context, cuDNN/cuBLAS workspaces and other allocations outside PyTorch\'s allocator',
};

/**
 * The parts of a rank's bar: allocated ⊂ reserved ⊂ the process's total by nvidia-smi. The
 * total is the larger of nvidia-smi's figure and reserved (the two are sampled at different
 * moments); without nvidia-smi's figure the bar is reserved alone (no "other" part).
 */
export function rankBarSegments(processMiB: number | null, allocatedBytes: number, reservedBytes: number): BarSegment[] {
  const allocated = Math.max(0, allocatedBytes);
  const reserved = Math.max(allocated, reservedBytes);
  const total = Math.max(reserved, processMiB == null ? 0 : processMiB * 2 ** 20);
  const seg = (part: BarSegment['part'], bytes: number): BarSegment => ({ part, bytes, percent: total > 0 ? (100 * bytes) / total : 0 });
  return [seg('allocated', allocated), seg('cached', reserved - allocated), seg('other', total - reserved)];
}

/** The job's CUDA ranks by process id: what a device card puts inside that process's bar. */
export function ranksByPid(ranks: readonly PanelRank[]): Map<number, PanelRank[]> {
  const out = new Map<number, PanelRank[]>();
  for (const r of ranks) {
    if (r.pid == null) continue;
    const list = out.get(r.pid) ?? [];
    list.push(r);
    out.set(r.pid, list);
  }
  return out;
}

/**
 * Which record of a process goes into its bar on a device card: the process's CUDA record whose
 * device is that card (a rank that uses several devices sends one per device), matched by the
 * GPU index the rank's `cuda:N` maps to through CUDA_VISIBLE_DEVICES (`visible`, null when unset);
 * a process with a single CUDA record gets it on whichever card lists the process.
 */
export function recordForCard(ranks: readonly PanelRank[] | undefined, gpuIndex: number, visible: readonly number[] | null): PanelRank | undefined {
  const cuda = (ranks ?? []).filter((r) => r.latest.kind === 'cuda');
  if (cuda.length <= 1) return cuda[0];
  return cuda.find((r) => {
    const n = Number(/^cuda:(\d+)$/.exec(r.device)?.[1]);
    return (visible ? visible[n] : n) === gpuIndex;
  });
}

/** A rank's latest numbers in a few words: `allocated 1.20 GiB · reserved 2.00 GiB` on CUDA, `RSS 238.6 MiB` on CPU. */
export function rankLegend(m: RankMemory): string {
  return m.kind === 'cuda' ? `allocated ${bytesText(m.allocatedBytes)} · reserved ${bytesText(m.reservedBytes)}` : `RSS ${bytesText(m.rssBytes)}`;
}

/** The tooltip of a rank's process bar: what each part is, with its size. */
export function rankBarTooltip(rank: number, job: string, m: RankMemory, processMiB: number | null): string {
  if (m.kind !== 'cuda') return `rank ${rank} of ${job}, step ${m.step}: RSS ${bytesText(m.rssBytes)} (the process's resident memory on the CPU; no GPU memory)`;
  const [allocated, cached, other] = rankBarSegments(processMiB, m.allocatedBytes, m.reservedBytes);
  return [
    `rank ${rank} of ${job} (${m.device}), after optimizer step ${m.step}:`,
    `■ ${bytesText(allocated.bytes)} ${segmentWords.allocated}`,
    `■ ${bytesText(cached.bytes)} ${segmentWords.cached}`,
    processMiB == null ? '(nvidia-smi did not report this process\'s total)' : `□ ${bytesText(other.bytes)} ${segmentWords.other}`,
    `Reserved ${bytesText(m.reservedBytes)} = allocated + cache; nvidia-smi ${processMiB == null ? '—' : `${Math.round(processMiB)} MiB`} = reserved + the rest. Step peak allocated ${bytesText(m.peakAllocatedBytes)}.`,
  ].join('\n');
}

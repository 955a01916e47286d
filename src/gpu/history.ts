/**
 * Memory over time per device, for the panel's chart and the hints: a fixed-capacity ring buffer
 * of typed arrays per device (`historyMinutes` worth of samples at the sampling interval), so a
 * monitor left running for days holds the same memory as one started a minute ago.
 */
import type { GpuSnapshot, MemorySeries } from './types';

/** What the hints read for one device, oldest first. `NaN` where the tool reported unknown. */
export interface DeviceWindow {
  readonly gpuIndex: number;
  readonly uuid: string | null;
  readonly totalMiB: number | null;
  readonly t: Float64Array;
  readonly usedMiB: Float64Array;
  readonly utilization: Float64Array;
  /** Compute processes on the device at each sample. */
  readonly processes: Uint16Array;
}

class DeviceRing {
  readonly t: Float64Array;
  readonly used: Float64Array;
  readonly util: Float64Array;
  readonly procs: Uint16Array;
  private head = 0; // next write position
  size = 0;
  totalMiB: number | null = null;

  constructor(readonly capacity: number, readonly gpuIndex: number, public uuid: string | null) {
    this.t = new Float64Array(capacity);
    this.used = new Float64Array(capacity);
    this.util = new Float64Array(capacity);
    this.procs = new Uint16Array(capacity);
  }

  push(t: number, used: number | null, util: number | null, procs: number): void {
    const i = this.head;
    this.t[i] = t;
    this.used[i] = used ?? NaN;
    this.util[i] = util ?? NaN;
    this.procs[i] = Math.min(procs, 0xffff);
    this.head = (i + 1) % this.capacity;
    if (this.size < this.capacity) this.size++;
  }

  /** Copies the last `n` entries (all by default) of one array, oldest first. */
  ordered<T extends Float64Array | Uint16Array>(src: T, make: (n: number) => T, n = this.size): T {
    const count = Math.min(n, this.size);
    const out = make(count);
    const start = (this.head - count + this.capacity) % this.capacity;
    for (let k = 0; k < count; k++) out[k] = src[(start + k) % this.capacity];
    return out;
  }
}

export class MemoryHistory {
  private rings = new Map<string, DeviceRing>();
  private capacity: number;

  /** `capacity` samples per device; see `MemoryHistory.capacityFor`. */
  constructor(capacity: number) {
    this.capacity = Math.max(2, Math.floor(capacity));
  }

  /** Samples that cover `historyMinutes` at one sample every `intervalMs`. */
  static capacityFor(historyMinutes: number, intervalMs: number): number {
    return Math.max(2, Math.ceil((historyMinutes * 60_000) / Math.max(1, intervalMs)));
  }

  get capacityPerDevice(): number {
    return this.capacity;
  }

  /** Changes the capacity, keeping the newest samples that fit. */
  resize(capacity: number): void {
    const next = Math.max(2, Math.floor(capacity));
    if (next === this.capacity) return;
    this.capacity = next;
    const old = this.rings;
    this.rings = new Map();
    for (const [key, ring] of old) {
      const fresh = new DeviceRing(next, ring.gpuIndex, ring.uuid);
      fresh.totalMiB = ring.totalMiB;
      const t = ring.ordered(ring.t, (n) => new Float64Array(n));
      const used = ring.ordered(ring.used, (n) => new Float64Array(n));
      const util = ring.ordered(ring.util, (n) => new Float64Array(n));
      const procs = ring.ordered(ring.procs, (n) => new Uint16Array(n));
      for (let k = Math.max(0, t.length - next); k < t.length; k++) fresh.push(t[k], nan(used[k]), nan(util[k]), procs[k]);
      this.rings.set(key, fresh);
    }
  }

  /** Records one snapshot. Stale and failed snapshots are not new readings and are skipped. */
  push(snapshot: GpuSnapshot): void {
    if (snapshot.stale || snapshot.error || snapshot.devices.length === 0) return;
    const procs = new Map<number, number>();
    for (const p of snapshot.processes) procs.set(p.gpuIndex, (procs.get(p.gpuIndex) ?? 0) + 1);
    for (const d of snapshot.devices) {
      const key = d.uuid ?? `index:${d.index}`;
      let ring = this.rings.get(key);
      if (!ring) {
        ring = new DeviceRing(this.capacity, d.index, d.uuid);
        this.rings.set(key, ring);
      }
      ring.totalMiB = d.memoryTotalMiB ?? ring.totalMiB;
      ring.push(snapshot.takenAt, d.memoryUsedMiB, d.utilizationPercent, procs.get(d.index) ?? 0);
    }
  }

  clear(): void {
    this.rings.clear();
  }

  /** The chart's data: per device, oldest first, `null` where the tool reported unknown. */
  series(): MemorySeries[] {
    return [...this.rings.values()].sort((a, b) => a.gpuIndex - b.gpuIndex).map((r) => ({
      gpuIndex: r.gpuIndex,
      uuid: r.uuid,
      t: Array.from(r.ordered(r.t, (n) => new Float64Array(n))),
      usedMiB: Array.from(r.ordered(r.used, (n) => new Float64Array(n)), nan),
      totalMiB: r.totalMiB,
    }));
  }

  /** The last `n` samples per device, as typed arrays, for the hints. */
  windows(n: number): DeviceWindow[] {
    return [...this.rings.values()].sort((a, b) => a.gpuIndex - b.gpuIndex).map((r) => ({
      gpuIndex: r.gpuIndex,
      uuid: r.uuid,
      totalMiB: r.totalMiB,
      t: r.ordered(r.t, (k) => new Float64Array(k), n),
      usedMiB: r.ordered(r.used, (k) => new Float64Array(k), n),
      utilization: r.ordered(r.util, (k) => new Float64Array(k), n),
      processes: r.ordered(r.procs, (k) => new Uint16Array(k), n),
    }));
  }
}

function nan(v: number): number | null {
  return Number.isNaN(v) ? null : v;
}

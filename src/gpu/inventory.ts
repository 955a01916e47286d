/**
 * Static facts about the GPUs (model, vendor, VRAM, driver), read once from `systeminformation`.
 * Its `graphics()` runs `lspci`, `nvidia-smi` and friends synchronously and blocks the event loop
 * for ~300 ms, and it drops zero values: so it is called at most once per loader, lazily, never
 * from the polling loop, and its answer is cached.
 */
import type { GpuInventoryEntry } from './types';

/** The part of a `systeminformation` graphics controller we read. */
export interface GraphicsController {
  vendor?: string;
  model?: string;
  name?: string;
  vram?: number | null;
  driverVersion?: string;
  bus?: string;
  pciBus?: string;
}

export type GraphicsLoader = () => Promise<{ controllers: GraphicsController[] }>;

const defaultLoader: GraphicsLoader = async () => {
  // Loaded on first use: the module itself is large and most sessions never ask.
  const si = await import('systeminformation');
  return si.graphics();
};

function text(v: string | undefined): string | null {
  const t = v?.trim();
  return t ? t : null;
}

export function toInventory(controllers: readonly GraphicsController[]): GpuInventoryEntry[] {
  return controllers.map((c) => ({
    vendor: text(c.vendor),
    model: text(c.name) ?? text(c.model),
    // `vram` is MB as the tool reported it; systeminformation leaves 0 or undefined when unknown.
    vramMiB: typeof c.vram === 'number' && c.vram > 0 ? c.vram : null,
    driverVersion: text(c.driverVersion),
    bus: text(c.pciBus) ?? text(c.bus),
  }));
}

/** A lazily computed, cached inventory. A failed read is cached as an empty list. */
export class Inventory {
  private pending: Promise<GpuInventoryEntry[]> | null = null;
  private calls = 0;

  constructor(private readonly load: GraphicsLoader = defaultLoader) {}

  /** How many times the loader ran (tests: it must be once). */
  get loads(): number {
    return this.calls;
  }

  get(): Promise<GpuInventoryEntry[]> {
    if (!this.pending) {
      this.calls++;
      this.pending = this.load().then((g) => toInventory(g.controllers ?? []), () => []);
    }
    return this.pending;
  }
}

/** Snapshots and history as the host sends them, for the browser tests. */
import type { GpuDevice, GpuHint, GpuProcess, GpuSnapshot, MemorySeries } from '../../src/gpu/types';

/** A fixed clock so that screenshots are the same on every run. */
export const t0 = Date.UTC(2026, 10, 3, 14, 30, 0);

export function rtx3090(index: number, usedMiB: number | null, extra: Partial<GpuDevice> = {}): GpuDevice {
  return {
    index,
    uuid: `GPU-3090000${index}-aaaa-bbbb-cccc-ddddeeeeffff`,
    name: 'NVIDIA GeForce RTX 3090',
    memoryUsedMiB: usedMiB,
    memoryReservedMiB: 310,
    memoryTotalMiB: 24576,
    utilizationPercent: index === 0 ? 87 : 12,
    temperatureC: index === 0 ? 71 : 45,
    powerW: index === 0 ? 287.4 : 98.1,
    powerLimitW: 350,
    ...extra,
  };
}

export const processes: GpuProcess[] = [
  { gpuIndex: 0, pid: 4242, name: '/usr/bin/python3', memoryMiB: 6912 },
  { gpuIndex: 0, pid: 4250, name: 'python', memoryMiB: 210 },
  { gpuIndex: 1, pid: 5100, name: 'torchrun', memoryMiB: 2800 },
];

/** Two RTX 3090s: GPU 0 at 7270 MiB (7.1 GiB), GPU 1 at 3072 MiB (3.0 GiB). */
export function twoGpus(takenAt = t0, used0 = 7270, used1 = 3072, procs: GpuProcess[] = processes): GpuSnapshot {
  return { source: 'nvidia-smi', devices: [rtx3090(0, used0), rtx3090(1, used1)], processes: procs, takenAt };
}

/** `samples` points, one every 10 s, ending at `end`: GPU 0 climbs, GPU 1 stays flat. */
export function history(end = t0, samples = 30): MemorySeries[] {
  const t = Array.from({ length: samples }, (_, i) => end - (samples - 1 - i) * 10_000);
  return [
    { gpuIndex: 0, uuid: rtx3090(0, 0).uuid, t, usedMiB: t.map((_, i) => 2048 + Math.round((5222 * i) / (samples - 1))), totalMiB: 24576 },
    { gpuIndex: 1, uuid: rtx3090(1, 0).uuid, t, usedMiB: t.map(() => 3072), totalMiB: 24576 },
  ];
}

export const growthHint: GpuHint = {
  kind: 'memory-growth',
  gpuIndex: 0,
  message: 'Memory grows every iteration: accumulating tensors? (e.g. `total_loss += loss` keeps the graph alive)',
  docsUrl: 'https://example.org/docs/rules/accumulating-loss',
};

/** What the monitor sends when `nvidia-smi` cannot reach the driver (it retries with backoff). */
export const noDriver: GpuSnapshot = {
  source: 'nvidia-smi',
  devices: [],
  processes: [],
  error: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
  takenAt: t0,
  retryInMs: 4000,
};

/** A laptop without a GPU: no tool installed, no AMD card (what the monitor sends, see monitor.ts). */
export const noGpuTool: GpuSnapshot = {
  source: 'none',
  devices: [],
  processes: [],
  error: 'nvidia-smi not found on PATH; no AMD GPU in /sys/class/drm; amd-smi not found on PATH; rocm-smi not found on PATH',
  takenAt: t0,
  noGpu: true,
};

/** The nvidia-smi path the user set does not exist (what the monitor sends, see monitor.ts). */
export const badNvidiaSmiPath: GpuSnapshot = {
  source: 'none',
  devices: [],
  processes: [],
  error: 'nvidia-smi not found at /opt/typo/nvidia-smi: fix gpuWorkbench.gpuMonitor.nvidiaSmiPath / --nvidia-smi',
  takenAt: t0,
  badNvidiaSmiPath: '/opt/typo/nvidia-smi',
};

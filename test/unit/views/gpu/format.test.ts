import assert from 'node:assert/strict';
import type { GpuDevice, GpuSnapshot } from '../../../../src/gpu/types';
import { escapeMarkdown, formatStatusSummary, formatStatusTooltip } from '../../../../src/views/gpu/format';

function device(index: number, usedMiB: number | null, totalMiB: number | null = 24576, extra: Partial<GpuDevice> = {}): GpuDevice {
  return {
    index, uuid: `GPU-${index}`, name: 'NVIDIA GeForce RTX 3090', memoryUsedMiB: usedMiB, memoryReservedMiB: 310, memoryTotalMiB: totalMiB,
    utilizationPercent: 87, temperatureC: 71, powerW: 287.4, powerLimitW: 350, ...extra,
  };
}

function snapshot(devices: GpuDevice[], extra: Partial<GpuSnapshot> = {}): GpuSnapshot {
  return { source: 'nvidia-smi', devices, processes: [], takenAt: Date.UTC(2026, 10, 3, 14, 30, 0), ...extra };
}

describe('status bar summary (formatStatusSummary)', () => {
  it('lists each GPU as used/total GiB', () => {
    assert.equal(formatStatusSummary(snapshot([device(0, 7270), device(1, 3072)])), 'GPU 0: 7.1/24 GiB · GPU 1: 3.0/24 GiB');
  });

  it('keeps one decimal for a capacity that is not a whole GiB', () => {
    // An H100 80GB reports 81559 MiB; a V100 16GB 16160 MiB.
    assert.equal(formatStatusSummary(snapshot([device(0, 512, 81559), device(1, 0, 16160)])), 'GPU 0: 0.5/79.6 GiB · GPU 1: 0.0/15.8 GiB');
  });

  it('shows an unreported value as "—", never 0', () => {
    assert.equal(formatStatusSummary(snapshot([device(0, null), device(1, 1024, null)])), 'GPU 0: —/24 GiB · GPU 1: 1.0/— GiB');
  });

  it('sums the devices past four so the line stays short', () => {
    const eight = Array.from({ length: 8 }, (_, i) => device(i, 1024 * (i + 1), 81920));
    assert.equal(formatStatusSummary(snapshot(eight)), '8 GPUs: 36.0/640 GiB');
    const four = Array.from({ length: 4 }, (_, i) => device(i, 1024, 81920));
    assert.equal(formatStatusSummary(snapshot(four)), 'GPU 0: 1.0/80 GiB · GPU 1: 1.0/80 GiB · GPU 2: 1.0/80 GiB · GPU 3: 1.0/80 GiB');
  });

  it('says "No GPU" when no tool reports a device', () => {
    assert.equal(formatStatusSummary(snapshot([], { source: 'none', error: 'nvidia-smi: not found' })), 'No GPU');
  });
});

describe('status bar tooltip (formatStatusTooltip)', () => {
  it('details every device and its processes, with unreported values as "—"', () => {
    const s = snapshot([device(0, 7270), device(1, 3072, 24576, { temperatureC: null, powerW: null })], {
      processes: [{ gpuIndex: 0, pid: 4242, name: '/usr/bin/python3', memoryMiB: 6912 }, { gpuIndex: 1, pid: 5100, name: 'torch_run', memoryMiB: null }],
    });
    const md = formatStatusTooltip(s);
    assert.match(md, /\*\*GPU 0\*\* NVIDIA GeForce RTX 3090/);
    assert.match(md, /Memory 7\.1 \/ 24\.0 GiB \(7270 MiB used, 310 MiB reserved, 24576 MiB total\)/);
    assert.match(md, /Utilisation 87 % · 71 °C · 287 \/ 350 W/);
    assert.match(md, /python3 \(PID 4242\) 6912 MiB/);
    assert.match(md, /Utilisation 87 % · — · — \/ 350 W/);
    assert.match(md, /torch\\_run \(PID 5100\) —/, 'process names are escaped for Markdown');
  });

  it('gives the tool\'s own error text when there is no GPU', () => {
    const md = formatStatusTooltip(snapshot([], { source: 'none', error: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." }));
    assert.match(md, /^\*\*No GPU\*\*/);
    assert.match(md, /The GPU tool reported: NVIDIA\\-SMI has failed because it couldn't communicate with the NVIDIA driver\\\./);
  });

  it('with no GPU here (no tool ran) says where it looked, as the panel does, not what a tool reported', () => {
    const md = formatStatusTooltip(snapshot([], { source: 'none', noGpu: true, error: 'nvidia-smi not found on PATH; no AMD GPU in /sys/class/drm' }));
    assert.match(md, /^\*\*No GPU\*\*/);
    assert.match(md, /Looked for: nvidia\\-smi not found on PATH; no AMD GPU in \/sys\/class\/drm\\\.$/m);
    assert.doesNotMatch(md, /The GPU tool reported/);
  });

  it('says when the numbers are stale', () => {
    assert.match(formatStatusTooltip(snapshot([device(0, 1024)], { stale: true })), /\*\*Stale:\*\* no new sample since/);
    assert.doesNotMatch(formatStatusTooltip(snapshot([device(0, 1024)])), /Stale/);
  });

  it('escapes Markdown in text that is not ours', () => {
    assert.equal(escapeMarkdown('a_b*c[d](e)`f`'), 'a\\_b\\*c\\[d\\]\\(e\\)\\`f\\`');
  });
});

import assert from 'node:assert/strict';
import { MemoryHistory } from '../../../src/gpu/history';
import { accumulatedLossDocsUrl, computeHints } from '../../../src/gpu/hints';
import type { GpuDevice, GpuProcess, GpuSnapshot } from '../../../src/gpu/types';

function device(index: number, used: number, util = 95, total = 24576): GpuDevice {
  return { index, uuid: `GPU-0000000${index}`, name: 'NVIDIA GeForce RTX 3090', memoryUsedMiB: used, memoryReservedMiB: 312, memoryTotalMiB: total, utilizationPercent: util, temperatureC: 60, powerW: 300, powerLimitW: 350 };
}

/** Feeds `n` samples (one a second) and returns the hints after the last. */
function run(n: number, sample: (k: number) => { devices: GpuDevice[]; processes: GpuProcess[] }) {
  const h = new MemoryHistory(600);
  let last: GpuSnapshot | null = null;
  for (let k = 0; k < n; k++) {
    last = { source: 'nvidia-smi', ...sample(k), takenAt: 1_000_000 + k * 1000 };
    h.push(last);
  }
  return computeHints(h, last);
}

const python = (gpuIndex: number, pid = 4242): GpuProcess => ({ gpuIndex, pid, name: 'python', memoryMiB: 1000 });
// A repeatable pseudo-random sequence: noise that a test can rely on.
function noise(seed: number): () => number {
  let s = seed;
  return () => { s = (s * 1103515245 + 12345) % 2 ** 31; return s / 2 ** 31 - 0.5; };
}

describe('hints from the memory history', () => {
  it('flags memory that grows sample after sample while a process runs', () => {
    const hints = run(20, (k) => ({ devices: [device(0, 4000 + 96 * k)], processes: [python(0)] }));
    const growth = hints.find((x) => x.kind === 'memory-growth');
    assert.ok(growth, JSON.stringify(hints));
    assert.equal(growth.gpuIndex, 0);
    assert.match(growth.message, /grows every iteration: accumulating tensors\?/);
    assert.match(growth.message, /python \(PID 4242\)/);
    assert.equal(growth.docsUrl, accumulatedLossDocsUrl);
  });

  it('flags growth in steps (the caching allocator grows by blocks)', () => {
    const hints = run(24, (k) => ({ devices: [device(0, 4000 + 40 * Math.floor(k * 0.7))], processes: [python(0)] }));
    assert.ok(hints.some((x) => x.kind === 'memory-growth'), JSON.stringify(hints));
  });

  it('stays silent on flat memory', () => {
    assert.deepEqual(run(40, () => ({ devices: [device(0, 7168)], processes: [python(0)] })), []);
  });

  it('stays silent on noisy memory', () => {
    const r = noise(7);
    assert.deepEqual(run(40, () => ({ devices: [device(0, 8000 + Math.round(400 * r()))], processes: [python(0)] })), []);
  });

  it('stays silent on the warm-up that levels off', () => {
    const hints = run(30, (k) => ({ devices: [device(0, 2000 + 500 * Math.min(k, 6))], processes: [python(0)] }));
    assert.deepEqual(hints.filter((x) => x.kind === 'memory-growth'), []);
  });

  it('stays silent on growth with no process on the device (another tenant, a display)', () => {
    assert.deepEqual(run(20, (k) => ({ devices: [device(0, 4000 + 96 * k)], processes: [] })), []);
  });

  it('flags one device far fuller than the others under one process (DataParallel)', () => {
    const hints = run(6, () => ({ devices: [device(0, 21000), device(1, 9000), device(2, 9100), device(3, 8900)], processes: [0, 1, 2, 3].map((i) => python(i, 777)) }));
    const imb = hints.find((x) => x.kind === 'imbalance');
    assert.ok(imb, JSON.stringify(hints));
    assert.equal(imb.gpuIndex, 0);
    assert.match(imb.message, /GPU 0 holds the gathered outputs; DistributedDataParallel balances this/);
  });

  it('stays silent on balanced devices, and on two unrelated jobs of different size', () => {
    assert.deepEqual(run(6, () => ({ devices: [device(0, 9000), device(1, 9100)], processes: [python(0, 1), python(1, 1)] })), []);
    assert.deepEqual(run(6, () => ({ devices: [device(0, 21000), device(1, 3000)], processes: [python(0, 1), python(1, 2)] })), []);
  });

  it('explains reserved vs allocated when memory stays held on an idle GPU', () => {
    const hints = run(8, () => ({ devices: [device(0, 18000, 0)], processes: [python(0)] }));
    const r = hints.find((x) => x.kind === 'reserved-vs-allocated');
    assert.ok(r, JSON.stringify(hints));
    assert.match(r.message, /caching allocator/);
    assert.match(r.message, /torch\.cuda\.empty_cache\(\)`? returns the cache to the driver; it frees nothing that is still referenced/);
  });

  it('does not explain reserved memory on a busy GPU, a nearly empty one, or with unknown utilisation (MIG)', () => {
    assert.deepEqual(run(8, () => ({ devices: [device(0, 18000, 97)], processes: [python(0)] })), []);
    assert.deepEqual(run(8, () => ({ devices: [device(0, 900, 0)], processes: [python(0)] })), []);
    assert.deepEqual(run(8, () => ({ devices: [{ ...device(0, 18000), utilizationPercent: null }], processes: [python(0)] })), []);
  });
});

import assert from 'node:assert/strict';
import { MemoryHistory } from '../../../src/gpu/history';
import type { GpuDevice, GpuSnapshot } from '../../../src/gpu/types';

function device(index: number, used: number | null, total = 24576): GpuDevice {
  return { index, uuid: `GPU-0000000${index}`, name: 'GPU', memoryUsedMiB: used, memoryReservedMiB: null, memoryTotalMiB: total, utilizationPercent: 50, temperatureC: 50, powerW: 100, powerLimitW: 300 };
}
function snap(t: number, ...used: (number | null)[]): GpuSnapshot {
  return { source: 'nvidia-smi', devices: used.map((u, i) => device(i, u)), processes: [], takenAt: t };
}

describe('MemoryHistory (ring buffer)', () => {
  it('holds historyMinutes worth of samples at the interval', () => {
    assert.equal(MemoryHistory.capacityFor(10, 1000), 600);
    assert.equal(MemoryHistory.capacityFor(1, 250), 240);
  });

  it('keeps the newest samples in order once full, and no more than its capacity', () => {
    const h = new MemoryHistory(4);
    for (let i = 1; i <= 10; i++) h.push(snap(i * 1000, i * 10, i));
    const [g0, g1] = h.series();
    assert.deepEqual(g0.t, [7000, 8000, 9000, 10000]);
    assert.deepEqual(g0.usedMiB, [70, 80, 90, 100]);
    assert.deepEqual(g1.usedMiB, [7, 8, 9, 10]);
    assert.equal(g0.totalMiB, 24576);
  });

  it('orders correctly before it wraps, and keeps unknown readings as null', () => {
    const h = new MemoryHistory(5);
    h.push(snap(1, 10));
    h.push(snap(2, null));
    h.push(snap(3, 30));
    assert.deepEqual(h.series()[0].usedMiB, [10, null, 30]);
  });

  it('skips stale and failed snapshots (they are not new readings)', () => {
    const h = new MemoryHistory(5);
    h.push(snap(1, 10));
    h.push({ ...snap(2, 10), stale: true });
    h.push({ ...snap(3, 10), error: 'nvidia-smi exited with code 1' });
    assert.deepEqual(h.series()[0].t, [1]);
  });

  it('resizes to the newest samples that fit', () => {
    const h = new MemoryHistory(6);
    for (let i = 1; i <= 6; i++) h.push(snap(i, i));
    h.resize(3);
    assert.equal(h.capacityPerDevice, 3);
    assert.deepEqual(h.series()[0].usedMiB, [4, 5, 6]);
    h.push(snap(7, 7));
    assert.deepEqual(h.series()[0].usedMiB, [5, 6, 7]);
    h.resize(10);
    h.push(snap(8, 8));
    assert.deepEqual(h.series()[0].usedMiB, [5, 6, 7, 8]);
  });
});

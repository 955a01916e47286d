import assert from 'node:assert/strict';
import { Inventory, toInventory } from '../../../src/gpu/inventory';
import { GpuMonitor } from '../../../src/gpu/monitor';

describe('GPU inventory (systeminformation, once)', () => {
  it('maps controllers, reading 0 and missing values as unknown', () => {
    assert.deepEqual(toInventory([
      { vendor: 'NVIDIA Corporation', model: 'GA102 [GeForce RTX 3090]', name: 'NVIDIA GeForce RTX 3090', vram: 24576, driverVersion: '550.54.15', pciBus: '00000000:01:00.0', bus: 'PCIe' },
      { vendor: 'Intel Corporation', model: 'UHD Graphics 630', vram: 0, bus: 'Onboard' },
    ]), [
      { vendor: 'NVIDIA Corporation', model: 'NVIDIA GeForce RTX 3090', vramMiB: 24576, driverVersion: '550.54.15', bus: '00000000:01:00.0' },
      { vendor: 'Intel Corporation', model: 'UHD Graphics 630', vramMiB: null, driverVersion: null, bus: 'Onboard' },
    ]);
  });

  it('loads lazily, once, however often it is asked, and never while sampling', async () => {
    let loads = 0;
    const inv = new Inventory(() => { loads++; return Promise.resolve({ controllers: [{ vendor: 'AMD', model: 'Radeon' }] }); });
    assert.equal(loads, 0);
    const [a, b] = await Promise.all([inv.get(), inv.get()]);
    await inv.get();
    assert.equal(loads, 1);
    assert.equal(a, b);
    const m = new GpuMonitor({ intervalMs: 1000, inventoryLoader: () => { loads++; return Promise.resolve({ controllers: [] }); } });
    assert.equal(loads, 1, 'constructing a monitor reads nothing');
    assert.deepEqual(await m.inventory(), []);
    assert.deepEqual(await m.inventory(), []);
    assert.equal(loads, 2);
    m.dispose();
  });

  it('caches a failed read as an empty list', async () => {
    const inv = new Inventory(() => Promise.reject(new Error('lspci: not found')));
    assert.deepEqual(await inv.get(), []);
  });
});

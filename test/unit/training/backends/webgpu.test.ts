/**
 * The webgpu backend on the real Dawn (the `webgpu` package's dawn.node) over whatever Vulkan
 * adapter this machine has: Mesa's lavapipe in CI (scripts/setup-test-deps.sh installs it).
 * Where Dawn finds no adapter at all these tests are skipped, saying why; they never pass
 * without running. What a hardware adapter would do is tested by handing `loadBackend` a
 * dawn.node instance whose adapter reports hardware (nvidia, hopper) while really being the
 * machine's own: the order and the labels are decided on what Dawn reports, the training runs
 * for real.
 */
import assert from 'node:assert/strict';
import type { Tensor } from '@tensorflow/tfjs-core';
import { loadBackend } from '../../../../src/training/backends/backend';
import { isOutOfMemory, OutOfMemoryError } from '../../../../src/training/backends/oom';
import {
  adapterLabel, checkPin, describeAdapter, guardWebgpuMemory, isSoftwareAdapter, judgePin, loadDawn, parseBusIds, parseDeviceSelectDebug, pciTag, pinEnv, shortBusId, openWebgpu, parseAdapterList, webgpuErrorAsOutOfMemory,
  type Gpu, type GpuDevice, type WebgpuAdapter,
} from '../../../../src/training/backends/webgpu';
import { hintFor } from '../../../../src/training/strategies/worker';
import { adaptersOrSkip } from '../webgpuAdapters';

const pretendInfo = { vendor: 'nvidia', architecture: 'hopper', device: 'test-hardware-adapter', description: 'NVIDIA: 580.65.06', isFallbackAdapter: false };

/** A dawn.node instance whose adapter says it is hardware; everything else is the real adapter. */
function pretendHardware(real: Gpu): Gpu {
  return {
    requestAdapter: async (options) => {
      const adapter = await real.requestAdapter(options);
      if (!adapter) return null;
      return new Proxy(adapter, {
        get: (target, key) => {
          if (key === 'info') return pretendInfo;
          const value: unknown = Reflect.get(target, key, target);
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      });
    },
  };
}

function realGpu(): Gpu {
  const dawn = loadDawn();
  if ('error' in dawn) throw new Error(dawn.error);
  return dawn.create([]);
}

describe('webgpu adapters (pure)', () => {
  it('reads the adapter list out of dawn.node\'s answer to an adapter name none has', () => {
    const message = "no suitable backends found\nAvailable adapters:\n * backend: 'vulkan', name: 'NVIDIA H100 80GB HBM3'\n * backend: 'vulkan', name: 'NVIDIA H100 80GB HBM3'\n * backend: 'vulkan', name: 'llvmpipe (LLVM 15.0.6, 256 bits)'";
    assert.deepEqual(parseAdapterList(message), [
      { backend: 'vulkan', name: 'NVIDIA H100 80GB HBM3' },
      { backend: 'vulkan', name: 'NVIDIA H100 80GB HBM3' },
      { backend: 'vulkan', name: 'llvmpipe (LLVM 15.0.6, 256 bits)' },
    ]);
  });

  it('tells software adapters (lavapipe, SwiftShader) from hardware ones', () => {
    const limits = { maxBufferSize: 2 ** 32 - 1, maxStorageBufferBindingSize: 2 ** 27 };
    const lavapipe = describeAdapter(0, { vendor: 'mesa', architecture: 'software', device: 'llvmpipe-llvm-15-0-6-256-bits-', description: 'llvmpipe: Mesa 25.0.7 (LLVM 15.0.6)', isFallbackAdapter: true }, limits);
    assert.equal(lavapipe.software, true);
    assert.equal(lavapipe.driver, 'Mesa 25.0.7 (LLVM 15.0.6)');
    assert.equal(adapterLabel(lavapipe), 'llvmpipe-llvm-15-0-6-256-bits- (mesa, software; driver: llvmpipe: Mesa 25.0.7 (LLVM 15.0.6))');
    assert.equal(isSoftwareAdapter({ vendor: 'google', architecture: '', device: 'swiftshader-device-(subzero)', description: 'SwiftShader driver', isFallbackAdapter: false }), true);
    const nvidia = describeAdapter(1, pretendInfo, limits);
    assert.equal(nvidia.software, false);
    assert.equal(adapterLabel(nvidia), 'test-hardware-adapter (nvidia, hopper; driver: NVIDIA: 580.65.06)');
  });
});

describe('one GPU per webgpu worker (PCI address through Mesa\'s device-select layer)', () => {
  // Two identical GPUs, as nvidia-smi and the layer would print them. The layer's lines follow its
  // source's format strings (Mesa's device_select_layer.c); they were not recorded on a GPU machine.
  const smi = '0, 00000000:41:00.0\n1, 00000000:C1:00.0\n';
  const layer = [
    'selectable devices:',
    '  GPU 0: 10de:2330 "NVIDIA H100 80GB HBM3" discrete GPU 0000:41:00.0',
    '  GPU 1: 10de:2330 "NVIDIA H100 80GB HBM3" discrete GPU 0000:c1:00.0',
    '  GPU 2: 10005:0 "llvmpipe (LLVM 15.0.6, 256 bits)" CPU',
    'device-select: device_select_find_dri_prime_tag_default selected 1',
  ].join('\n');
  const h100 = describeAdapter(0, { vendor: 'nvidia', architecture: 'hopper', device: 'nvidia-h100-80gb-hbm3', description: 'NVIDIA: 580.65.06' }, { maxBufferSize: 2 ** 32, maxStorageBufferBindingSize: 2 ** 31 });

  it('turns nvidia-smi\'s PCI bus ids into the layer\'s DRI_PRIME tags', () => {
    assert.deepEqual([...parseBusIds(smi)], [[0, '00000000:41:00.0'], [1, '00000000:C1:00.0']]);
    assert.equal(pciTag('00000000:C1:00.0'), 'pci-0000_c1_00_0');
    assert.equal(shortBusId('00000000:C1:00.0'), '0000:c1:00.0');
    assert.deepEqual(pinEnv('00000000:C1:00.0'), { DRI_PRIME: 'pci-0000_c1_00_0!' });
    assert.equal(pciTag('GPU-5e1b'), undefined);
  });

  it('takes a pin only when the layer picked that very PCI address and Dawn sees that one adapter alone', () => {
    const report = parseDeviceSelectDebug(layer);
    assert.deepEqual(report.devices.map((d) => d.pci), ['0000:41:00.0', '0000:c1:00.0', undefined]);
    assert.deepEqual(report.selected, { rule: 'device_select_find_dri_prime_tag_default', index: 1 });
    assert.deepEqual(judgePin('00000000:C1:00.0', report, { adapters: [h100] }), { ok: true, adapter: h100 });
    // The layer picked GPU 1, not GPU 0's address.
    assert.match((judgePin('00000000:41:00.0', report, { adapters: [h100] }) as { why: string }).why, /did not pick PCI 0000:41:00\.0 by its address \(device_select_find_dri_prime_tag_default picked device 1\)/);
    // No tag matched: the layer falls back to a default device and exposes them all.
    const fallback = parseDeviceSelectDebug(layer.replace('device_select_find_dri_prime_tag_default selected 1', 'device_select_find_boot_vga selected 0'));
    assert.match((judgePin('00000000:C1:00.0', fallback, { adapters: [h100, h100] }) as { why: string }).why, /did not pick PCI 0000:c1:00\.0 by its address \(device_select_find_boot_vga picked device 0\)/);
    assert.match((judgePin('00000000:C1:00.0', report, { adapters: [h100, h100] }) as { why: string }).why, /Dawn still saw 2 adapters/);
    assert.match((judgePin('00000000:C1:00.0', { devices: [] }, { adapters: [h100, h100] }) as { why: string }).why, /device-select layer is not active/);
    assert.match((judgePin('00000000:02:00.0', report, { adapters: [h100] }) as { why: string }).why, /^no Vulkan device at PCI 0000:02:00\.0 \(the layer saw NVIDIA H100 80GB HBM3 at 0000:41:00\.0, /);
  });
});

describe('webgpu backend on Dawn', function () {
  this.timeout(120_000);
  let adapters: WebgpuAdapter[] = [];

  before(async function () {
    adapters = await adaptersOrSkip(this);
  });

  it('asks the real layer for a GPU this machine has not and is told no, naming what the layer saw', async () => {
    const r = await checkPin('00000000:41:00.0');
    assert.equal(r.ok, false);
    // lavapipe has no PCI address; without mesa-vulkan-drivers' layer there is no report at all.
    assert.match((r as { why: string }).why, /^no Vulkan device at PCI 0000:41:00\.0 \(the layer saw .+\)$|device-select layer is not active/);
  });

  it('lists every adapter Dawn sees with its vendor, architecture, driver and limits', () => {
    assert.ok(adapters.length >= 1);
    for (const a of adapters) {
      assert.ok(a.limits.maxBufferSize > 0 && a.limits.maxStorageBufferBindingSize > 0, JSON.stringify(a));
      assert.equal(typeof a.software, 'boolean');
      if (/llvmpipe/.test(a.description)) assert.deepEqual([a.vendor, a.software], ['mesa', true], JSON.stringify(a));
    }
  });

  it('auto never picks a software adapter: on lavapipe alone it loads wasm and says why webgpu was skipped', async function () {
    if (adapters.some((a) => !a.software)) {
      console.log('      skipped: this machine has a hardware WebGPU adapter, so auto rightly takes it');
      this.skip();
    }
    const b = await loadBackend('auto');
    assert.equal(b.name, 'wasm');
    assert.match(b.note, /webgpu: the only adapter is software, .*\(mesa, software; driver: llvmpipe/);
  });

  it('auto takes webgpu on a hardware adapter, before tensorflow, wasm and cpu, and names the adapter', async () => {
    const b = await loadBackend('auto', { webgpu: pretendHardware(realGpu()) });
    assert.equal(b.name, 'webgpu');
    assert.equal(b.gpu, true);
    assert.equal(b.device, 'gpu (webgpu adapter test-hardware-adapter (nvidia, hopper; driver: NVIDIA: 580.65.06))');
    assert.deepEqual([b.adapter?.vendor, b.adapter?.architecture, b.adapter?.driver, b.adapter?.software], ['nvidia', 'hopper', '580.65.06', false]);
    assert.match(b.note, /^skipped: @tensorflow\/tfjs-node-gpu is not installed/);
    // It really computes on the device.
    const tf = b.tf;
    const y = tf.matMul(tf.tensor2d([[1, 2], [3, 4]]), tf.tensor2d([[5], [6]]));
    assert.deepEqual(Array.from(await y.data()), [17, 39]);
  });

  it('"backend": "webgpu" takes a software adapter too, and says its shaders run on the CPU', async function () {
    const soft = adapters.find((a) => a.software);
    if (!soft || adapters.some((a) => !a.software)) {
      console.log('      skipped: Dawn ranks a hardware adapter first here');
      this.skip();
    }
    const b = await loadBackend('webgpu');
    assert.equal(b.name, 'webgpu');
    assert.equal(b.gpu, false);
    assert.match(b.device, /^cpu \(webgpu adapter .*software/);
    assert.equal(b.adapter?.software, true);
    assert.match(b.note, /^no GPU; the webgpu adapter is software, its shaders run on the CPU: /);
  });

  it('requests the adapter\'s own limits, not WebGPU\'s defaults (maxBufferSize 256 MiB)', async () => {
    const b = await loadBackend('webgpu');
    const device = (b.tf.backend() as unknown as { device: GpuDevice }).device;
    const first = adapters[0];
    assert.equal(device.limits.maxBufferSize, first.limits.maxBufferSize);
    assert.equal(device.limits.maxStorageBufferBindingSize, first.limits.maxStorageBufferBindingSize);
  });

  it('a tensor larger than the device allows fails with an OutOfMemoryError naming the limit', async () => {
    const b = await loadBackend('webgpu');
    const tf = b.tf;
    const { maxBufferSize, maxStorageBufferBindingSize } = (tf.backend() as unknown as { device: GpuDevice }).device.limits;
    const limit = Math.min(maxBufferSize, maxStorageBufferBindingSize);
    const name = maxStorageBufferBindingSize <= maxBufferSize ? 'maxStorageBufferBindingSize' : 'maxBufferSize';
    let t: Tensor | undefined;
    await assert.rejects(async () => {
      t = tf.add(tf.ones([Math.floor(limit / 4) + 1024]), 1);
      await t.data();
    }, (err: Error) => {
      assert.ok(err instanceof OutOfMemoryError, `${err.name}: ${err.message}`);
      assert.match(err.message, new RegExp(`^out of memory: a [\\d.]+ [MG]iB tensor is larger than this GPU's ${name} \\([\\d.]+ [MG]iB, the most its adapter offers\\)$`));
      assert.ok(isOutOfMemory(err.message));
      assert.match(hintFor(err.message) ?? '', /ran out of memory: try a smaller batchSize/);
      return true;
    });
    t?.dispose();
    // The backend goes on working for tensors that fit.
    assert.deepEqual(Array.from(await tf.add(tf.ones([4]), 1).data()), [2, 2, 2, 2]);
  });

  it('Dawn\'s out-of-memory error on a device becomes an OutOfMemoryError at the next allocation and for the job\'s error', async () => {
    const got = await openWebgpu({ allowSoftware: true });
    assert.ok(got.ok);
    const { device, memory } = got.opened;
    const g = globalThis as unknown as { GPUUncapturedErrorEvent: new (type: string, init: { error: unknown }) => unknown; GPUOutOfMemoryError: new (message: string) => unknown };
    assert.equal(memory.failure(), undefined);
    (device as unknown as { dispatchEvent(e: unknown): boolean }).dispatchEvent(new g.GPUUncapturedErrorEvent('uncapturederror', { error: new g.GPUOutOfMemoryError('Allocation failed: VK_ERROR_OUT_OF_DEVICE_MEMORY') }));
    assert.throws(() => device.createBuffer({ size: 16, usage: 0x80 }), (err: Error) => err instanceof OutOfMemoryError && err.message === 'out of memory on the GPU: Allocation failed: VK_ERROR_OUT_OF_DEVICE_MEMORY');
    const later = webgpuErrorAsOutOfMemory(memory.failure, new Error('mapAsync failed'));
    assert.ok(later instanceof OutOfMemoryError && isOutOfMemory(later.message));
    device.destroy();
  });
});

describe('webgpu memory guard (a lost device)', () => {
  it('a device lost mid-job is out of memory; one we destroyed is not', async () => {
    const listeners: unknown[] = [];
    const fake = (reason: string): GpuDevice & { created: number } => {
      const d = {
        created: 0,
        limits: { maxBufferSize: 1024, maxStorageBufferBindingSize: 512 },
        lost: Promise.resolve({ reason, message: reason === 'unknown' ? 'Device lost: VK_ERROR_DEVICE_LOST' : 'device was destroyed' }),
        createBuffer: () => { d.created++; return {}; },
        addEventListener: (_t: string, l: unknown) => { listeners.push(l); },
        destroy: () => undefined,
      };
      return d;
    };
    const lost = fake('unknown');
    const guard = guardWebgpuMemory(lost);
    await lost.lost;
    await Promise.resolve();
    assert.throws(() => lost.createBuffer({ size: 4, usage: 0x80 }), /^OutOfMemoryError: out of memory: the GPU device was lost \(Device lost: VK_ERROR_DEVICE_LOST\)$/);
    assert.ok(webgpuErrorAsOutOfMemory(guard.failure, new Error('x')) instanceof OutOfMemoryError);
    const destroyed = fake('destroyed');
    const ok = guardWebgpuMemory(destroyed);
    await destroyed.lost;
    await Promise.resolve();
    destroyed.createBuffer({ size: 4, usage: 0x80 });
    assert.equal(destroyed.created, 1);
    assert.equal(ok.failure(), undefined);
    // Over the limits, before Dawn sees the buffer.
    assert.throws(() => destroyed.createBuffer({ size: 2048, usage: 0x08 }), /^OutOfMemoryError: out of memory: a 2048 bytes tensor is larger than this GPU's maxBufferSize \(1024 bytes, the most its adapter offers\)$/);
    assert.throws(() => destroyed.createBuffer({ size: 600, usage: 0x80 }), /maxStorageBufferBindingSize/);
    destroyed.createBuffer({ size: 600, usage: 0x08 }); // not a storage buffer: no binding limit
    assert.equal(destroyed.created, 2);
  });
});

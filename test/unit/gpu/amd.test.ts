import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseRocmSmiJson, readAmdSysfs } from '../../../src/gpu/amd';
import { fixtures } from '../../paths';

describe('AMD readings', () => {
  it('reads AMD cards from a sysfs tree, skipping connectors and other vendors', async () => {
    const { devices, reason } = await readAmdSysfs(join(fixtures, 'amd', 'sysfs'));
    assert.equal(reason, undefined);
    assert.deepEqual(devices, [
      { index: 0, uuid: null, name: 'AMD Radeon RX 7900 XTX', memoryUsedMiB: 8192, memoryReservedMiB: null, memoryTotalMiB: 24560, utilizationPercent: 97, temperatureC: 61, powerW: 287, powerLimitW: 327 },
      { index: 1, uuid: null, name: 'AMD GPU 0x73bf', memoryUsedMiB: 1024, memoryReservedMiB: null, memoryTotalMiB: 16368, utilizationPercent: 0, temperatureC: null, powerW: null, powerLimitW: null },
    ]);
  });

  it('says why when there is no AMD card', async () => {
    const none = await readAmdSysfs(join(fixtures, 'amd', 'empty-sysfs'));
    assert.deepEqual(none.devices, []);
    assert.match(none.reason ?? '', /no AMD GPU in .*empty-sysfs/);
    const missing = await readAmdSysfs(join(fixtures, 'amd', 'no-such-root'));
    assert.match(missing.reason ?? '', /no AMD GPU/);
  });

  it('parses rocm-smi --showmeminfo vram --json', () => {
    const devices = parseRocmSmiJson(readFileSync(join(fixtures, 'amd', 'rocm-smi-showmeminfo-vram.json'), 'utf8'));
    assert.deepEqual(devices.map((d) => [d.index, d.memoryUsedMiB, d.memoryTotalMiB, d.utilizationPercent]), [[0, 26214, 65520, 43], [1, 10, 65520, 0]]);
    assert.equal(devices[0].temperatureC, null);
    assert.deepEqual(parseRocmSmiJson('WARNING: No AMD GPUs specified'), []);
  });
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot } from '../../paths';
import { envWithoutNvidiaSmi, fakeEnv } from './helpers';

const cli = join(repoRoot, 'out', 'src', 'cli.js');
function gpus(args: string[], env: NodeJS.ProcessEnv) {
  const r = spawnSync(process.execPath, [cli, 'gpus', ...args], { env, encoding: 'utf8', timeout: 15000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('gpu-workbench gpus (the built CLI with the fake nvidia-smi on PATH)', function () {
  this.timeout(20000);

  it('--json prints the devices and processes, null for N/A', () => {
    const r = gpus(['--json'], fakeEnv('na-fields').env);
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout) as { source: string; devices: Record<string, unknown>[]; processes: Record<string, unknown>[]; error?: string };
    assert.equal(out.source, 'nvidia-smi');
    assert.equal(out.error, undefined);
    assert.deepEqual(Object.keys(out.devices[0]).sort(), ['index', 'memoryReservedMiB', 'memoryTotalMiB', 'memoryUsedMiB', 'name', 'powerLimitW', 'powerW', 'temperatureC', 'utilizationPercent', 'uuid'].sort());
    assert.equal(out.devices[0].powerW, null);
    assert.equal(out.devices[1].utilizationPercent, null);
    assert.deepEqual(out.processes, [{ gpuIndex: 0, pid: 777, name: 'python', memoryMiB: null }]);
  });

  it('prints a gpustat-like table', () => {
    const r = gpus([], fakeEnv('two-gpus').env);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^\[0\] NVIDIA GeForce RTX 3090 \| +\d+°C, +\d+ % \| \[█+░+\] +\d+ \/ +24576 MiB \| +\d+ \/ 350 W$/m);
    assert.match(r.stdout, /^\[1\] NVIDIA GeForce RTX 3090/m);
    assert.match(r.stdout, /^ +48213 +python +\d+ MiB$/m);
  });

  it('says "No GPU found" with the reason, and still exits 0', () => {
    const r = gpus([], { ...envWithoutNvidiaSmi() });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /No GPU found: nvidia-smi not found on PATH/);
    const j = gpus(['--json'], fakeEnv('no-driver').env);
    assert.equal(j.code, 0);
    const out = JSON.parse(j.stdout) as { devices: unknown[]; error: string };
    assert.deepEqual(out.devices, []);
    assert.match(out.error, /^NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver/);
  });

  it('--watch --json prints one JSON line per sample', () => {
    const r = gpus(['--watch', '--json', '--interval', '60', '--count', '3'], fakeEnv('one-gpu').env);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as { devices: unknown[] });
    assert.equal(lines.length, 3);
    assert.ok(lines.every((l) => l.devices.length === 1));
  });

  it('exits 2 on bad options, 0 on --help', () => {
    for (const bad of [['--bogus'], ['--interval', 'fast', '--watch'], ['--count', '2']]) {
      const r = gpus(bad, fakeEnv('one-gpu').env);
      assert.equal(r.code, 2, bad.join(' '));
      assert.match(r.stderr, /usage: gpu-workbench gpus/);
    }
    const h = gpus(['--help'], fakeEnv('one-gpu').env);
    assert.equal(h.code, 0);
    assert.match(h.stdout, /--watch/);
  });
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot } from '../../paths';
import { renderTable } from '../../../src/cli/gpus';
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
    const out = JSON.parse(j.stdout) as { devices: unknown[]; error: string; noGpu?: boolean };
    assert.deepEqual(out.devices, []);
    assert.match(out.error, /^NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver/);
    assert.equal(out.noGpu, undefined, 'a tool that exists and fails is an error, not "no GPU"');
  });

  it('with no GPU tool on PATH, starts with the explanation (no "no source" header, no clock) and says where to point it', () => {
    const r = gpus([], envWithoutNvidiaSmi());
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trimEnd().split('\n');
    assert.match(lines[0], /^No GPU found: nvidia-smi not found on PATH; .*amd-smi not found on PATH; rocm-smi not found on PATH\.$/);
    assert.doesNotMatch(r.stdout, /no source/);
    assert.doesNotMatch(r.stdout, /\d{1,2}:\d{2}:\d{2}/, 'no time of a reading that never happened');
    assert.match(r.stdout, /--nvidia-smi PATH/);
    const out = JSON.parse(gpus(['--json'], envWithoutNvidiaSmi()).stdout) as { source: string; noGpu?: boolean };
    assert.equal(out.source, 'none');
    assert.equal(out.noGpu, true);
  });

  it('the no-GPU line ends in one period even when a tool\'s message already ends in one', () => {
    const text = renderTable({ source: 'none', devices: [], processes: [], takenAt: 0, noGpu: true, error: 'nvidia-smi not found on PATH; amd-smi: no AMD GPU.' });
    assert.equal(text.split('\n')[0], 'No GPU found: nvidia-smi not found on PATH; amd-smi: no AMD GPU.');
  });

  it('a wrong --nvidia-smi PATH is an error naming that path and exits 1, not "No GPU found"', () => {
    const r = gpus(['--nvidia-smi', '/opt/typo/nvidia-smi'], envWithoutNvidiaSmi());
    assert.equal(r.code, 1, r.stderr);
    assert.equal(r.stdout.trimEnd(), 'Could not read the GPUs: nvidia-smi not found at /opt/typo/nvidia-smi: fix gpuWorkbench.gpuMonitor.nvidiaSmiPath / --nvidia-smi');
    const j = gpus(['--json', '--nvidia-smi=/opt/typo/nvidia-smi'], envWithoutNvidiaSmi());
    assert.equal(j.code, 1);
    const out = JSON.parse(j.stdout) as { noGpu?: boolean; badNvidiaSmiPath?: string };
    assert.equal(out.noGpu, undefined);
    assert.equal(out.badNvidiaSmiPath, '/opt/typo/nvidia-smi');
    const w = gpus(['--watch', '--nvidia-smi', '/opt/typo/nvidia-smi'], envWithoutNvidiaSmi());
    assert.equal(w.code, 1, 'watching stops: nothing to watch until the path is fixed');
    assert.match(w.stdout, /nvidia-smi not found at \/opt\/typo\/nvidia-smi/);
  });

  it('a tool that exists and fails keeps its error, worded as one', () => {
    const r = gpus([], fakeEnv('no-driver').env);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^Could not read the GPUs: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver/m);
    assert.doesNotMatch(r.stdout, /No GPU found/);
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

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { readAmdTools } from '../../../src/gpu/amd';
import { clearAmdSmiCache, parseAmdSmiMetricJson, parseAmdSmiProcessJson, parseAmdSmiStaticJson, readAmdSmi } from '../../../src/gpu/amdSmi';
import { fixtures } from '../../paths';

const recorded = (name: string): string => readFileSync(join(fixtures, 'amd', 'amd-smi', name), 'utf8');
const fakeAmdBin = join(fixtures, 'bin-amd');

/** The fake amd-smi first on PATH; no rocm-smi anywhere (PATH is only the fake and /usr/bin:/bin). */
function amdEnv(scenario: string): { env: NodeJS.ProcessEnv; log: string } {
  const log = join(mkdtempSync(join(tmpdir(), 'amd-smi-fake-')), 'invocations.jsonl');
  return { log, env: { ...process.env, PATH: [fakeAmdBin, '/usr/bin', '/bin'].join(delimiter), FAKE_AMD_SMI_SCENARIO: scenario, FAKE_AMD_SMI_LOG: log } };
}

describe('amd-smi readings', () => {
  beforeEach(() => clearAmdSmiCache());

  it('parses metric --json: MiB from "MB", hotspot when edge is N/A, names and power caps from static', () => {
    const statics = parseAmdSmiStaticJson(recorded('static-two-gpus.json'));
    const devices = parseAmdSmiMetricJson(recorded('metric-two-gpus.json'), statics);
    assert.deepEqual(devices, [
      { index: 0, uuid: null, name: 'AMD Instinct MI300X', memoryUsedMiB: 73728, memoryReservedMiB: null, memoryTotalMiB: 196592, utilizationPercent: 87, temperatureC: 58, powerW: 412, powerLimitW: 750 },
      { index: 1, uuid: null, name: 'AMD Instinct MI300X', memoryUsedMiB: 283, memoryReservedMiB: null, memoryTotalMiB: 196592, utilizationPercent: 0, temperatureC: 38, powerW: 142, powerLimitW: null },
    ]);
  });

  it('keeps N/A as null, never 0', () => {
    const [d] = parseAmdSmiMetricJson(recorded('metric-na.json')) ?? [];
    assert.equal(d.memoryTotalMiB, 16368);
    assert.equal(d.memoryUsedMiB, null);
    assert.equal(d.utilizationPercent, null);
    assert.equal(d.temperatureC, null);
    assert.equal(d.powerW, null);
    assert.equal(d.name, null);
    assert.equal(parseAmdSmiStaticJson(recorded('static-none.json')).get(0)?.name, null);
  });

  it('converts memory units: B, KB, GB and a bare number of MB', () => {
    const one = (v: unknown): number | null => parseAmdSmiMetricJson(JSON.stringify([{ gpu: 0, mem_usage: { used_vram: v } }]))?.[0].memoryUsedMiB ?? null;
    assert.equal(one({ value: 3 * 1024 * 1024 * 1024, unit: 'B' }), 3072);
    assert.equal(one({ value: 2048, unit: 'KB' }), 2);
    assert.equal(one({ value: 1.5, unit: 'GB' }), 1536);
    assert.equal(one(4096), 4096);
    assert.equal(one({ value: 5, unit: 'furlongs' }), null);
  });

  it('parses process --json: vram_mem in bytes to MiB, mem_usage when that is all there is, no rows for an idle GPU', () => {
    assert.deepEqual(parseAmdSmiProcessJson(recorded('process-two-gpus.json')), [
      { gpuIndex: 0, pid: 420157, name: 'python3', memoryMiB: 71680 },
      { gpuIndex: 0, pid: 420315, name: 'rvs', memoryMiB: 0 },
    ]);
    assert.deepEqual(parseAmdSmiProcessJson(recorded('process-none.json')), []);
  });

  it('accepts the {"gpu_data": [...]} wrapping and rejects text that is not JSON', () => {
    const wrapped = `{"gpu_data": ${recorded('metric-two-gpus.json')}}`;
    assert.deepEqual(parseAmdSmiMetricJson(wrapped)?.map((d) => d.memoryUsedMiB), [73728, 283]);
    assert.equal(parseAmdSmiMetricJson('ERROR: no GPU'), null);
    assert.equal(parseAmdSmiProcessJson('{"not": "a list"}'), null);
  });

  describe('through the fake amd-smi on PATH', function () {
    this.timeout(30_000);

    it('reads devices, names and processes, spawning amd-smi with argument lists and asking static only once', async () => {
      const { env, log } = amdEnv('two-gpus');
      const first = await readAmdSmi(env, 10_000);
      assert.equal(first.error, undefined);
      assert.deepEqual(first.devices.map((d) => [d.index, d.name, d.memoryUsedMiB, d.memoryTotalMiB]), [[0, 'AMD Instinct MI300X', 73728, 196592], [1, 'AMD Instinct MI300X', 283, 196592]]);
      assert.deepEqual(first.processes.map((p) => [p.gpuIndex, p.pid, p.name, p.memoryMiB]), [[0, 420157, 'python3', 71680], [0, 420315, 'rvs', 0]]);
      const second = await readAmdSmi(env, 10_000);
      assert.equal(second.devices[0].name, 'AMD Instinct MI300X');
      const calls = readFileSync(log, 'utf8').trim().split('\n').map((l) => (JSON.parse(l) as { argv: string[] }).argv);
      assert.equal(calls.filter((a) => a[0] === 'static').length, 1);
      assert.equal(calls.filter((a) => a[0] === 'metric').length, 2);
      assert.ok(calls.every((a) => a.includes('--json')));
    });

    it('passes the tool\'s own error text on', async () => {
      const r = await readAmdSmi(amdEnv('error').env, 10_000);
      assert.deepEqual(r.devices, []);
      assert.match(r.error ?? '', /amd-smi metric failed \(exit 1\): ERROR:root:Unable to detect any GPU devices/);
      assert.equal(r.missing, undefined);
    });

    it('says so when amd-smi prints something that is not JSON', async () => {
      const r = await readAmdSmi(amdEnv('garbage').env, 10_000);
      assert.match(r.error ?? '', /amd-smi metric printed no JSON: Segmentation fault handler/);
    });

    it('kills a hung amd-smi after the timeout and says so', async () => {
      const r = await readAmdSmi(amdEnv('hang').env, 1500);
      assert.deepEqual(r.devices, []);
      assert.match(r.error ?? '', /amd-smi metric gave no answer within 1\.5 s/);
    });

    it('tries amd-smi before rocm-smi, and names both when neither is there', async () => {
      const found = await readAmdTools(amdEnv('two-gpus').env, 10_000);
      assert.equal(found.tool, 'amd-smi');
      assert.equal(found.devices.length, 2);
      assert.equal(found.processes.length, 2);

      const none = await readAmdTools({ ...process.env, PATH: ['/usr/bin', '/bin'].join(delimiter) }, 10_000);
      assert.equal(none.tool, null);
      assert.deepEqual(none.reasons, ['amd-smi not found on PATH', 'rocm-smi not found on PATH']);
      assert.equal(none.allMissing, true, 'no tool installed: "no GPU here", not an error');

      const broken = await readAmdTools(amdEnv('error').env, 10_000);
      assert.equal(broken.tool, null);
      assert.match(broken.reasons[0], /Unable to detect any GPU devices/);
      assert.equal(broken.reasons[1], 'rocm-smi not found on PATH');
      assert.equal(broken.allMissing, false, 'amd-smi is there and failed: an error, not "no GPU"');
    });
  });
});

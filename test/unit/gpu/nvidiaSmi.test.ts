import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  SampleAssembler, detectToolError, gpuQueryFields, joinProcesses, numberValue, parseComputeApps,
  parseGpuRow, parseGpuSamples, parseHelpQueryGpu, splitRow,
} from '../../../src/gpu/nvidiaSmi';
import { fixtures } from '../../paths';

const fixture = (name: string): string => readFileSync(join(fixtures, 'nvidia-smi', name), 'utf8');

describe('nvidia-smi parser', () => {
  it('reads one GPU per row and one sample per loop iteration', () => {
    const samples = parseGpuSamples(fixture('one-gpu.csv'));
    assert.equal(samples.length, 3);
    assert.deepEqual(samples[1][0], {
      index: 0, uuid: 'GPU-5d2e7f1a-93c4-4b8e-a1f6-0c9d2b7e4a11', name: 'NVIDIA GeForce RTX 4090',
      memoryUsedMiB: 6120, memoryReservedMiB: 329, memoryTotalMiB: 24564, utilizationPercent: 87,
      temperatureC: 55, powerW: 312.4, powerLimitW: 450,
    });
  });

  it('groups the rows of two GPUs into one snapshot per timestamp', () => {
    const samples = parseGpuSamples(fixture('two-gpus.csv'));
    assert.equal(samples.length, 3);
    assert.deepEqual(samples.map((s) => s.map((d) => d.index)), [[0, 1], [0, 1], [0, 1]]);
    assert.deepEqual(samples.map((s) => s[0].memoryUsedMiB), [7168, 7296, 7424]);
    assert.equal(samples[2][1].memoryUsedMiB, 3080);
  });

  it('reads eight GPUs per sample', () => {
    const samples = parseGpuSamples(fixture('eight-gpus.csv'));
    assert.equal(samples.length, 2);
    assert.deepEqual(samples[0].map((d) => d.index), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert.ok(samples.every((s) => s.every((d) => d.name === 'NVIDIA A100-SXM4-80GB' && d.memoryTotalMiB === 81920)));
  });

  it('turns [N/A] and [Not Supported] into null, never 0', () => {
    const [sample] = parseGpuSamples(fixture('na-fields.csv'));
    const [gtx, k80] = sample;
    assert.equal(gtx.powerW, null);
    assert.equal(gtx.powerLimitW, null);
    assert.equal(gtx.memoryReservedMiB, null);
    assert.equal(gtx.utilizationPercent, 100);
    assert.equal(k80.utilizationPercent, null);
    assert.equal(k80.temperatureC, null);
    assert.equal(k80.powerW, 62.31);
    for (const v of ['[N/A]', '[Not Supported]', 'N/A', '[Unknown Error]', '[Insufficient Permissions]', '']) assert.equal(numberValue(v), null, v);
    assert.equal(numberValue('0'), 0);
    assert.equal(numberValue('1234 MiB'), 1234);
  });

  it('reads MIG-enabled GPUs, whose utilisation nvidia-smi cannot report', () => {
    const [sample] = parseGpuSamples(fixture('mig.csv'));
    assert.equal(sample.length, 2);
    assert.equal(sample[0].utilizationPercent, null);
    assert.equal(sample[0].memoryUsedMiB, 19623);
    assert.equal(sample[1].utilizationPercent, 0);
  });

  it('skips an Xid event line between samples instead of failing', () => {
    const samples = parseGpuSamples(fixture('xid-between-samples.txt'));
    assert.equal(samples.length, 2);
    assert.deepEqual(samples.map((s) => s.map((d) => d.utilizationPercent)), [[95, 40], [0, 0]]);
  });

  it('keeps a product name that contains a comma whole (nvidia-smi does not quote)', () => {
    const [[d]] = parseGpuSamples(fixture('comma-in-name.csv'));
    assert.equal(d.name, 'NVIDIA RTX A6000, Lenovo');
    assert.equal(d.memoryUsedMiB, 1024);
    assert.equal(d.powerLimitW, 300);
    assert.deepEqual(splitRow('"a, b", 1', 2, -1), ['"a, b"', '1']);
    assert.equal(parseGpuRow('2026/11/03 17:30:00.250, 0, GPU-c0ffee00-1234, "Quoted, Name", 1, 2, 3, 4, 5, 6, 7', gpuQueryFields)?.device.name, 'Quoted, Name');
  });

  it('reads columns by the field names asked for, not by position', () => {
    const fields = ['index', 'memory.total', 'name', 'memory.used'];
    const row = parseGpuRow('3, 16160, Tesla V100-SXM2-16GB, 100', fields);
    assert.equal(row?.device.index, 3);
    assert.equal(row?.device.memoryTotalMiB, 16160);
    assert.equal(row?.device.memoryUsedMiB, 100);
    assert.equal(row?.device.memoryReservedMiB, null, 'a field not asked for is unknown');
    assert.equal(row?.device.temperatureC, null);
  });

  it('starts a new sample when an index repeats, even without timestamps', () => {
    const asm = new SampleAssembler(['index', 'memory.used']);
    const done = ['0, 10', '1, 20', '0, 11', '1, 21', '0, 12'].flatMap((l) => asm.push(l));
    // After the first sample the assembler knows a sample has two rows: the second one completes at once.
    assert.deepEqual(done.map((rows) => rows.map((r) => r.device.memoryUsedMiB)), [[10, 20], [11, 21]]);
    assert.deepEqual(asm.flush()?.map((r) => r.device.memoryUsedMiB), [12]);
  });

  it('starts a new sample when the timestamp changes', () => {
    const fields = ['timestamp', 'index'];
    const text = '2026/11/03 14:00:00.000, 0\n2026/11/03 14:00:01.000, 1\n';
    assert.deepEqual(parseGpuSamples(text, fields).map((s) => s.map((d) => d.index)), [[0], [1]]);
    assert.deepEqual(parseGpuSamples(text, fields, 5000).map((s) => s.map((d) => d.index)), [[0, 1]], 'within the tolerance: one sample');
  });

  it('recognises the driver failure and an invalid field with the tool\'s own text', () => {
    const noDriver = detectToolError(fixture('no-driver.txt'));
    assert.equal(noDriver?.kind, 'no-driver');
    assert.equal(noDriver?.message, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.");
    const invalid = detectToolError(fixture('invalid-field.txt'));
    assert.equal(invalid?.kind, 'invalid-field');
    assert.equal(invalid?.field, 'memory.reserved');
    assert.equal(invalid?.message, 'Field "memory.reserved" is not a valid field to query.');
    assert.equal(detectToolError(fixture('two-gpus.csv')), null);
    assert.deepEqual(parseGpuSamples(fixture('no-driver.txt')), [], 'an error message is not a sample');
  });

  it('lists the fields of an old and a new driver from --help-query-gpu', () => {
    const old = parseHelpQueryGpu(fixture('help-query-gpu-old.txt'));
    const fresh = parseHelpQueryGpu(fixture('help-query-gpu-new.txt'));
    assert.ok(!old.has('memory.reserved'));
    assert.ok(fresh.has('memory.reserved'));
    for (const f of gpuQueryFields.filter((x) => x !== 'memory.reserved')) assert.ok(old.has(f), f);
    assert.ok(old.has('gpu_name') && old.has('name'), 'aliases are listed too');
    assert.ok(!old.has('YYYY/MM/DD HH:MM:SS.msec'), 'quotes inside descriptions are not fields');
  });

  it('reads compute processes and joins them to devices on the UUID', () => {
    const apps = parseComputeApps(fixture('compute-apps.csv'));
    assert.equal(apps.length, 3);
    assert.equal(apps[2].name, '/opt/conda/bin/python3 train.py --lr=1e-3,wd=0.1', 'a comma in the command line stays in the name');
    assert.equal(apps[2].memoryMiB, 300);
    const [devices] = parseGpuSamples(fixture('two-gpus.csv'));
    assert.deepEqual(joinProcesses(apps, devices), [
      { gpuIndex: 0, pid: 48213, name: 'python', memoryMiB: 6854 },
      { gpuIndex: 1, pid: 48213, name: 'python', memoryMiB: 2760 },
      { gpuIndex: 1, pid: 51007, name: '/opt/conda/bin/python3 train.py --lr=1e-3,wd=0.1', memoryMiB: 300 },
    ]);
  });

  it('reports process memory the driver does not give as null (MIG)', () => {
    const apps = parseComputeApps(fixture('compute-apps-mig.csv'));
    assert.deepEqual(apps.map((a) => a.memoryMiB), [9766, null]);
    const [devices] = parseGpuSamples(fixture('mig.csv'));
    assert.deepEqual(joinProcesses(apps, devices).map((p) => p.gpuIndex), [0, 0]);
  });
});

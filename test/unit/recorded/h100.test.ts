import assert from 'node:assert/strict';
import { gpuQueryFields, parseHelpQueryGpu } from '../../../src/gpu/nvidiaSmi';
import { parseBusIds, pciTag } from '../../../src/training/backends/webgpu';
import { moduleShapeProblem, moduleShapeText, summaryText } from '../../../src/training/launchers/modelSummary';
import { channel as channelOf, MiB, only, recorded, smi } from './recordings';

/**
 * What a real GPU machine said, read by our code: an NVIDIA H100 80GB HBM3, driver 580.159.04,
 * PyTorch 2.11.0+cu130, recorded by scripts/gpu-check.sh on 2026-11-26 (the files and how:
 * test/fixtures/torchrun/cuda/h100/README.md). What only the H100 recorded; what both it and the
 * H200 did, read the same way for each, is in machines.test.ts. Everything else in the suite
 * about CUDA is read from documentation examples or runs on the CPU.
 */

const h100 = (name: string): string => recorded('h100', name);
const channel = (name: string) => channelOf('h100', name);

describe('recorded on an H100: nvidia-smi', () => {
  it('driver 580 knows every field the panel asks for, so no field is dropped', () => {
    const known = parseHelpQueryGpu(smi('help-query-gpu-580.txt'));
    assert.deepEqual(gpuQueryFields.filter((f) => !known.has(f)), []);
  });

  it('the PCI bus id the webgpu worker pins by', () => {
    assert.deepEqual([...parseBusIds(smi('h100-pci-bus.csv'))], [[0, '00000000:00:06.0']]);
    assert.equal(pciTag('00000000:00:06.0'), 'pci-0000_00_06_0');
  });
});

describe('recorded on an H100: the companion on CUDA (torch 2.11)', () => {
  it('every message of every recorded run is one the extension accepts', () => {
    const files = ['memory-2ranks.jsonl', 'oom.jsonl', 'fp32.jsonl', 'bf16.jsonl', 'shape.jsonl', 'compile.jsonl'];
    const types = new Set(files.flatMap((f) => channel(f).map((m) => m.type)));
    assert.deepEqual([...types].sort(), ['hello', 'hooks', 'memory', 'modelSummary', 'moduleError', 'oom', 'oomMemory']);
  });

  it('the first step\'s estimates match what the GPU measured, fp32 and with bf16 autocast, within 10%', () => {
    // The same model and batch twice (cuda_train.py --batch-size 64 --image 256): once fp32, once under autocast(bf16).
    const [fp32] = only(channel('fp32.jsonl'), 'modelSummary');
    const peak = (file: string) => Math.max(...only(channel(file), 'memory').map((m) => (m.kind === 'cuda' ? m.peakAllocatedBytes : 0)));
    const within = (estimate: number, measured: number, what: string) =>
      assert.ok(Math.abs(estimate / measured - 1) < 0.1, `${what}: estimated ${(estimate / MiB).toFixed(0)} MiB, the GPU's step peak ${(measured / MiB).toFixed(0)} MiB`);
    within(fp32.memory.totalBytes, peak('fp32.jsonl'), 'fp32');
    within(fp32.memory.autocast.totalBytes, peak('bf16.jsonl'), 'bf16 autocast');
    assert.ok(peak('bf16.jsonl') < 0.6 * peak('fp32.jsonl'), 'autocast about halves this conv net\'s peak');
    assert.match(summaryText(fp32), /with torch\.autocast \(bf16\/fp16\), estimated: 2\.\d\d GiB, 2\.\d\d GiB less/);
  });

  it('a shape error under torch 2.11 is the module\'s, at the line that made it', () => {
    const [err] = only(channel('shape.jsonl'), 'moduleError');
    const text = moduleShapeText(moduleShapeProblem(err));
    assert.match(text, /^shape error in fc \(Linear\)/);
    assert.match(text, /expected input with 1568 features \(in_features\), got input of \d+x2048: 2048 features/);
    assert.equal(err.definedAt?.line, 15);
  });

  it('torch.compile: the compiled model trains under the companion, its summary is the compiled module, memory every step', () => {
    const messages = channel('compile.jsonl');
    const [summary] = only(messages, 'modelSummary');
    assert.deepEqual(summary.rows.map((r) => r.className), ['OptimizedModule']);
    assert.deepEqual(only(messages, 'memory').map((m) => m.step), [1, 2, 3, 4]);
    assert.match(h100('compile-before-fix.stderr.txt'), /UnspecializedNNModuleVariable\(Net\) is already tracked for mutation/);
  });
});

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseCompanionLine, rankMemoryOf, type CompanionMessage } from '../../../src/common/companionProtocol';
import { RankMemoryTracker } from '../../../src/common/rankMemory';
import { gpuQueryFields, parseGpuSamples, parseHelpQueryGpu } from '../../../src/gpu/nvidiaSmi';
import { parseBusIds, pciTag } from '../../../src/training/backends/webgpu';
import { parseCudaErrors } from '../../../src/training/launchers/cudaErrors';
import { moduleShapeProblem, moduleShapeText, oomMemoryProblem, summaryText } from '../../../src/training/launchers/modelSummary';
import { fixtures } from '../../paths';

/**
 * What a real GPU machine said, read by our code: an NVIDIA H100 80GB HBM3, driver 580.159.04,
 * PyTorch 2.11.0+cu130, recorded by scripts/gpu-check.sh on 2026-11-26 (the files and how:
 * test/fixtures/torchrun/cuda/h100/README.md). Everything else in the suite about CUDA is read
 * from documentation examples or runs on the CPU.
 */

const h100 = (name: string): string => readFileSync(join(fixtures, 'torchrun', 'cuda', 'h100', name), 'utf8');
const smi = (name: string): string => readFileSync(join(fixtures, 'nvidia-smi', name), 'utf8');

/** Every line of a recorded channel, parsed as the extension parses it; a line it refuses fails the test with its reason. */
function channel(name: string): CompanionMessage[] {
  return h100(name).split('\n').filter((l) => l.trim()).map((line, i) => {
    const r = parseCompanionLine(line);
    if (!r.ok) assert.fail(`${name}:${i + 1}: ${r.error}`);
    return r.message;
  });
}

function only<T extends CompanionMessage['type']>(messages: CompanionMessage[], type: T): Extract<CompanionMessage, { type: T }>[] {
  return messages.filter((m): m is Extract<CompanionMessage, { type: T }> => m.type === type);
}

const MiB = 2 ** 20;

describe('recorded on an H100: nvidia-smi', () => {
  it('the GPU panel\'s query row reads as the H100 it is', () => {
    const [[gpu]] = parseGpuSamples(smi('h100.csv'));
    assert.deepEqual(gpu, {
      index: 0, uuid: 'GPU-12fdda38-30e1-39fa-a9cc-fd44d91ff9a8', name: 'NVIDIA H100 80GB HBM3',
      memoryUsedMiB: 0, memoryReservedMiB: 480, memoryTotalMiB: 81559, utilizationPercent: 0,
      temperatureC: 36, powerW: 70.71, powerLimitW: 700,
    });
  });

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

  it('two ranks on one GPU: allocated inside reserved every step, the step\'s peak above what stays, and no growth', () => {
    const messages = channel('memory-2ranks.jsonl');
    assert.ok(only(messages, 'hooks').every((m) => m.torch.startsWith('2.11') && m.stepHook === 'post-hook'));
    const memory = only(messages, 'memory').map(rankMemoryOf);
    assert.deepEqual(memory.filter((m) => m.rank === 0).map((m) => m.step), [1, 2, 3, 4, 5, 6]);
    assert.deepEqual([...new Set(memory.map((m) => `${m.rank} ${m.device}`))].sort(), ['0 cuda:0', '1 cuda:0']);
    for (const m of memory) {
      assert.equal(m.kind, 'cuda');
      if (m.kind !== 'cuda') continue;
      assert.ok(m.allocatedBytes > 0 && m.allocatedBytes <= m.reservedBytes, `step ${m.step}: allocated within reserved`);
      assert.ok(m.peakAllocatedBytes >= m.allocatedBytes, `step ${m.step}: the step's peak holds what stays after it`);
    }
    const tracker = new RankMemoryTracker();
    memory.forEach((m) => tracker.add(m));
    assert.deepEqual(tracker.growth(), [], 'a steady training loop is not reported as growing');
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

  it('a CUDA out-of-memory error: torch 2.11\'s message, the memory when it happened, and autocast\'s saving', () => {
    const messages = channel('oom.jsonl');
    const [oom] = only(messages, 'oom');
    assert.equal(oom.device, 'cuda');
    const [mem] = only(messages, 'oomMemory');
    const problem = oomMemoryProblem(mem);
    assert.match(problem.message, /^torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate 64\.00 GiB\. GPU 0 has a total capacity of 79\.18 GiB/);
    assert.deepEqual([problem.file?.endsWith('cuda_train.py'), problem.line], [true, 50]);
    assert.match(problem.explanation, /before its first optimizer step/);
    assert.match(problem.memoryLines.join('\n'), /activations 64\.0 GiB \(the leaf modules' outputs in the forward, up to the failure\)/);
    assert.match(problem.memoryLines[1], /^with torch\.autocast \(bf16\/fp16\), estimated: 33\.\d+ GiB, 31\.\d+ GiB less/);
  });

  it('the same error in torchrun\'s output (ranks prefixed [default0]:) is a CUDA out-of-memory problem at the script\'s line', () => {
    const problems = parseCudaErrors(h100('oom.stderr.txt'));
    assert.equal(problems.length, 1);
    const [p] = problems;
    assert.deepEqual([p.kind, p.tryingToAllocate, p.file?.endsWith('cuda_train.py'), p.line], ['cuda-oom', '64.00 GiB', true, 50]);
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

describe('recorded on an H100: Find Max Batch Size on a torchrun job', () => {
  it('doubles to the first CUDA out-of-memory, bisects, and ends on the largest batch that fitted', () => {
    const events = h100('find-batch.events.jsonl').split('\n').filter(Boolean).map((l) => JSON.parse(l) as { type: string; batchSize?: number; outcome?: { kind: string; reason?: string }; result?: { devices: { batchSize: number; limit: string; trials: { batchSize: number; outcome: { kind: string } }[] }[] } });
    const done = events.find((e) => e.type === 'batch/done');
    assert.ok(done?.result);
    const [device] = done.result.devices;
    assert.deepEqual([device.batchSize, device.limit], [61, 'memory']);
    const trials = device.trials.map((t) => `${t.batchSize}:${t.outcome.kind}`);
    assert.deepEqual(trials.slice(0, 5), ['4:fits', '8:fits', '16:fits', '32:fits', '64:oom']);
    for (const t of device.trials) {
      if (t.outcome.kind === 'fits') assert.ok(t.batchSize <= 61);
      else assert.ok(t.batchSize > 61);
    }
    const oom = events.find((e) => e.type === 'batch/trial' && e.outcome?.kind === 'oom');
    assert.match(oom?.outcome?.reason ?? '', /^OutOfMemoryError: CUDA out of memory\. Tried to allocate/);
  });
});

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { formatBatchEvent } from '../../../src/cli/train';
import { rankMemoryOf } from '../../../src/common/companionProtocol';
import { RankMemoryTracker } from '../../../src/common/rankMemory';
import { checkNvidiaSmi, checkPythons, checkWebgpuAdapters, verdictOf, type Exec, type NvidiaGpu } from '../../../src/doctor/checks';
import { exitCodeOf, renderReport, type Check, type DoctorReport } from '../../../src/doctor/report';
import { parseGpuSamples } from '../../../src/gpu/nvidiaSmi';
import type { GpuDevice } from '../../../src/gpu/types';
import { parseCudaErrors } from '../../../src/training/launchers/cudaErrors';
import { searchBatchSize, type FindBatchSizeEvent, type FindBatchSizeResult, type TrialOutcome } from '../../../src/training/launchers/findBatchSize';
import { oomMemoryProblem } from '../../../src/training/launchers/modelSummary';
import { searchMessage } from '../../../src/views/batchSize/batchSizeSearch';
import { formatStatusSummary, formatStatusTooltip } from '../../../src/views/gpu/format';
import { fixtures } from '../../paths';
import { channel, only, recorded, smi, type Machine } from './recordings';

/**
 * What two real GPU machines said, read by our code, the same assertions for each with what each
 * machine should give: an NVIDIA H100 80GB HBM3 (2026-11-26) and an NVIDIA H200 (2026-11-27),
 * both driver 580.159.04 and PyTorch 2.11.0+cu130, recorded by scripts/gpu-check.sh (what ran:
 * the README in test/fixtures/torchrun/cuda/h100/ and h200/). What only the H100 recorded is in
 * h100.test.ts.
 */

interface Expected {
  readonly label: string;
  /** The GPU panel's row of the idle machine (nvidia-smi's query, test/fixtures/nvidia-smi/<machine>.csv). */
  readonly row: GpuDevice;
  /** What the status bar and its tooltip show for that row. */
  readonly statusBar: string;
  readonly tooltip: readonly string[];
  /** The doctor's GPU from its own nvidia-smi query. */
  readonly doctorGpu: NvidiaGpu;
  /** cuda_train.py --batch-size 256 --image 1024: torch's total capacity, and the activations the companion counted up to the failure. */
  readonly oom: { readonly capacityGiB: string; readonly activations: string; readonly autocast: RegExp };
  /** cuda_grow.job.json --find-batch-size: the events file, its trials in order, and what it ends on. */
  readonly findBatch: {
    readonly file: string;
    readonly trials: readonly string[];
    readonly batchSize: number;
    readonly limit: FindBatchSizeResult['devices'][number]['limit'];
    readonly text: string;
    readonly message: string;
    readonly offer?: number;
  };
}

const machines: Record<Machine, Expected> = {
  h100: {
    label: 'an H100',
    row: {
      index: 0, uuid: 'GPU-12fdda38-30e1-39fa-a9cc-fd44d91ff9a8', name: 'NVIDIA H100 80GB HBM3',
      memoryUsedMiB: 0, memoryReservedMiB: 480, memoryTotalMiB: 81559, utilizationPercent: 0,
      temperatureC: 36, powerW: 70.71, powerLimitW: 700,
    },
    statusBar: 'GPU 0: 0.0/79.6 GiB',
    tooltip: ['Memory 0.0 / 79.6 GiB (0 MiB used, 480 MiB reserved, 81559 MiB total)', 'Utilisation 0 % · 36 °C · 71 / 700 W'],
    doctorGpu: { index: 0, name: 'NVIDIA H100 80GB HBM3', uuid: 'GPU-12fdda38-30e1-39fa-a9cc-fd44d91ff9a8', pciBusId: '00000000:00:06.0', driver: '580.159.04', memoryMiB: 81559 },
    oom: { capacityGiB: '79.18', activations: '64.0', autocast: /^with torch\.autocast \(bf16\/fp16\), estimated: 33\.\d+ GiB, 31\.\d+ GiB less/ },
    findBatch: {
      file: 'find-batch.events.jsonl',
      trials: ['4 fits', '8 fits', '16 fits', '32 fits', '64 oom', '48 fits', '56 fits', '60 fits', '62 oom', '61 fits'],
      batchSize: 61,
      limit: 'memory',
      text: 'largest batch that fits: 61 on GPU 0 (torch 2.11.0+cu130) [gpu:0] (62 runs out of memory; 10 trials)\nset --batch-size 61 in the "args" of cuda_grow.job.json',
      message: 'Largest batch that fits for cuda_grow: 61 (--batch-size 61), measured on GPU 0 (torch 2.11.0+cu130).',
      offer: 61,
    },
  },
  h200: {
    label: 'an H200',
    row: {
      index: 0, uuid: 'GPU-4a632048-c2c5-910d-188a-835ffcf67fdb', name: 'NVIDIA H200',
      memoryUsedMiB: 0, memoryReservedMiB: 616, memoryTotalMiB: 143771, utilizationPercent: 0,
      temperatureC: 34, powerW: 77.47, powerLimitW: 700,
    },
    statusBar: 'GPU 0: 0.0/140.4 GiB',
    tooltip: ['Memory 0.0 / 140.4 GiB (0 MiB used, 616 MiB reserved, 143771 MiB total)', 'Utilisation 0 % · 34 °C · 77 / 700 W'],
    doctorGpu: { index: 0, name: 'NVIDIA H200', uuid: 'GPU-4a632048-c2c5-910d-188a-835ffcf67fdb', pciBusId: '00000000:00:06.0', driver: '580.159.04', memoryMiB: 143771 },
    // Two modules further than on the H100 (conv, ReLU, conv: three 64 GiB outputs counted; the first
    // conv's had been freed, torch says 131.92 GiB in use), then the second ReLU's 64 GiB did not fit.
    oom: { capacityGiB: '139.80', activations: '192', autocast: /^with torch\.autocast \(bf16\/fp16\), estimated: 97\.\d+ GiB, 95\.\d+ GiB less/ },
    findBatch: {
      // Cut by the gpu-check step's 200 s timeout (SIGTERM) during the trial of 107.
      file: 'find-batch-cancelled.events.jsonl',
      trials: ['4 fits', '8 fits', '16 fits', '32 fits', '64 fits', '128 oom', '96 fits', '112 oom', '104 fits', '108 oom', '106 fits', '107 cancelled'],
      batchSize: 106,
      limit: 'cancelled',
      text: 'the search was cancelled on GPU 0 (torch 2.11.0+cu130) [gpu:0] (106 fits)',
      message: 'Find Max Batch Size for cuda_grow was cancelled; a batch of 106 fits so far.',
    },
  },
};

for (const [machine, x] of Object.entries(machines) as [Machine, Expected][]) {
  describe(`recorded on ${x.label}: nvidia-smi and the GPU panel`, () => {
    it('the query row reads as the GPU it is, and the status bar and tooltip show its memory', () => {
      const samples = parseGpuSamples(smi(`${machine}.csv`));
      assert.equal(samples.length, 1);
      assert.deepEqual(samples[0], [x.row]);
      const snapshot = { source: 'nvidia-smi' as const, devices: samples[0], processes: [], takenAt: Date.UTC(2026, 10, 27) };
      assert.equal(formatStatusSummary(snapshot), x.statusBar);
      const tooltip = formatStatusTooltip(snapshot);
      for (const line of x.tooltip) assert.ok(tooltip.includes(line), `the tooltip has "${line}":\n${tooltip}`);
    });
  });

  describe(`recorded on ${x.label}: gpu-workbench doctor`, () => {
    const report = JSON.parse(recorded(machine, 'doctor.json')) as DoctorReport;
    const check = (id: string): Check => report.checks.find((c) => c.id === id) ?? assert.fail(`no check ${id}`);
    /** A program that answers `stdout`, as the machine did, once `expect` has looked at how it was called. */
    const answering = (stdout: string, expect: (file: string, args: readonly string[]) => void): Exec => (file, args) => {
      expect(file, args);
      return Promise.resolve({ code: 0, signal: null, stdout: `${stdout}\n`, stderr: '', timedOut: false });
    };

    it('nvidia-smi\'s answer, read again, is the GPU the panel sees and the check the machine reported', async () => {
      const recordedCheck = check('nvidia-smi');
      const { check: c, gpus } = await checkNvidiaSmi(answering(recordedCheck.evidence.slice(1).join('\n'), (file, args) => {
        assert.equal(`$ ${file} ${args.join(' ')}`, recordedCheck.evidence[0], 'the query the machine answered');
      }));
      assert.deepEqual(gpus, [x.doctorGpu]);
      assert.deepEqual(c, recordedCheck);
      // Two queries, two parsers (the doctor's and the panel's): the same GPU.
      assert.deepEqual([gpus[0].uuid, gpus[0].name, gpus[0].memoryMiB], [x.row.uuid, x.row.name, x.row.memoryTotalMiB]);
    });

    it('the WebGPU adapter and torch\'s answer, read again, give the checks the machine reported', async () => {
      const adapters = check('webgpu-adapters');
      assert.deepEqual(await checkWebgpuAdapters(() => Promise.resolve({ ok: true, value: { adapters: adapters.data?.adapters } }), 1), adapters);
      const python = check('python:python3');
      const checks = await checkPythons(answering(python.evidence[1], (file) => assert.equal(file, 'python3')), ['python3'], 1);
      assert.deepEqual(checks, [python]);
      assert.match(checks[0].summary, new RegExp(`torch\\.cuda\\.is_available\\(\\) True, 1 device\\(s\\): ${x.row.name}, NCCL$`));
    });

    it('the verdict and exit code are what the checks call for; a GPU that did not train would change both', () => {
      const gpus = [x.doctorGpu];
      assert.equal(verdictOf(report.checks, gpus), 'Every GPU trains (1 of 1).');
      assert.equal(report.verdict, verdictOf(report.checks, gpus));
      assert.equal(exitCodeOf(report.checks), 0);
      assert.equal(report.exitCode, 0);
      const train = check('train:gpu0');
      assert.equal(train.title, `training on GPU 0 (${x.row.name})`);
      const failed = report.checks.map((c) => (c.id === train.id ? { ...c, status: 'fail' as const } : c));
      assert.equal(verdictOf(failed, gpus), `0 of 1 GPUs train; training on GPU 0 (${x.row.name}) did not.`);
      assert.equal(exitCodeOf(failed), 1);
      const text = renderReport(report).split('\n');
      assert.equal(text.at(-1), 'Every GPU trains (1 of 1).');
      assert.ok(text.some((l) => l.startsWith(`[ok  ] training on GPU 0 (${x.row.name}): webgpu on gpu:0 (PCI 00000000:00:06.0, webgpu adapter `)), text.join('\n'));
    });
  });

  describe(`recorded on ${x.label}: the companion on CUDA (torch 2.11)`, () => {
    it('two ranks on one GPU: allocated inside reserved every step, the step\'s peak above what stays, and no growth', () => {
      const messages = channel(machine, 'memory-2ranks.jsonl');
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

    it('a CUDA out-of-memory error: torch 2.11\'s message at the GPU\'s capacity, the script\'s line, and the memory when it happened', () => {
      const messages = channel(machine, 'oom.jsonl');
      const [oom] = only(messages, 'oom');
      assert.equal(oom.device, 'cuda');
      const [mem] = only(messages, 'oomMemory');
      const problem = oomMemoryProblem(mem);
      assert.match(problem.message, new RegExp(`^torch\\.OutOfMemoryError: CUDA out of memory\\. Tried to allocate 64\\.00 GiB\\. GPU 0 has a total capacity of ${x.oom.capacityGiB.replace('.', '\\.')} GiB`));
      assert.deepEqual([problem.file?.endsWith('cuda_train.py'), problem.line], [true, 50]);
      assert.match(problem.explanation, /before its first optimizer step/);
      assert.match(problem.memoryLines.join('\n'), new RegExp(`activations ${x.oom.activations.replace('.', '\\.')} GiB \\(the leaf modules' outputs in the forward, up to the failure\\)`));
      assert.match(problem.memoryLines[1], x.oom.autocast);
    });

    it('the same error in torchrun\'s output (ranks prefixed [default0]:) is a CUDA out-of-memory problem of rank 0 at the script\'s line', () => {
      const problems = parseCudaErrors(recorded(machine, 'oom.stderr.txt'));
      assert.equal(problems.length, 1);
      const [p] = problems;
      assert.deepEqual([p.kind, p.tryingToAllocate, p.rank, p.file?.endsWith('cuda_train.py'), p.line], ['cuda-oom', '64.00 GiB', 0, true, 50]);
      assert.ok(p.message.includes(`GPU 0 has a total capacity of ${x.oom.capacityGiB} GiB`), p.message);
    });
  });

  describe(`recorded on ${x.label}: Find Max Batch Size on a torchrun job`, () => {
    const events = recorded(machine, x.findBatch.file).split('\n').filter(Boolean).map((l) => JSON.parse(l) as FindBatchSizeEvent);
    const done = events.find((e): e is Extract<FindBatchSizeEvent, { type: 'batch/done' }> => e.type === 'batch/done');
    const trialText = (t: { batchSize: number; outcome: TrialOutcome }) => `${t.batchSize} ${t.outcome.kind}`;

    it('doubles to the first CUDA out-of-memory, bisects, and keeps the largest batch that fitted', () => {
      assert.ok(done);
      const [device] = done.result.devices;
      assert.deepEqual([device.batchSize, device.limit], [x.findBatch.batchSize, x.findBatch.limit]);
      assert.deepEqual(device.trials.map(trialText), x.findBatch.trials);
      assert.deepEqual(events.filter((e) => e.type === 'batch/trial').map((e) => trialText(e)), x.findBatch.trials, 'one event per trial, as they ran');
      for (const t of device.trials) {
        if (t.outcome.kind === 'fits') assert.ok(t.batchSize <= device.batchSize, `${t.batchSize} fits, at most the result`);
        else assert.ok(t.batchSize > device.batchSize, `${t.batchSize} ${t.outcome.kind}, above the result`);
      }
      const oom = device.trials.find((t) => t.outcome.kind === 'oom');
      assert.match(oom?.outcome.kind === 'oom' ? oom.outcome.reason : '', new RegExp(`^OutOfMemoryError: CUDA out of memory\\. Tried to allocate .* GPU 0 has a total capacity of ${x.oom.capacityGiB.replace('.', '\\.')} GiB`));
    });

    it('the search, given the outcomes the GPU gave, tries the same batches in the same order and ends on the same result', async () => {
      assert.ok(done);
      const [device] = done.result.devices;
      const outcomes = new Map(device.trials.map((t) => [t.batchSize, t.outcome]));
      const job = JSON.parse(readFileSync(join(fixtures, 'torchrun', 'cuda', 'cuda_grow.job.json'), 'utf8')) as { args: string[] };
      const again = await searchBatchSize({
        start: Number(job.args[job.args.indexOf('--batch-size') + 1]), // where the search on the machine started
        max: device.max,
        trial: (batch) => Promise.resolve({ outcome: outcomes.get(batch) ?? assert.fail(`the search tried ${batch}, which the GPU did not`) }),
      });
      assert.deepEqual(again.trials.map(trialText), x.findBatch.trials);
      assert.deepEqual([again.batchSize, again.limit], [x.findBatch.batchSize, x.findBatch.limit]);
    });

    it('the result in words, in the terminal and in the editor\'s message, with the setting offered only for a finished search', () => {
      assert.ok(done);
      assert.equal(formatBatchEvent(done), x.findBatch.text);
      assert.equal(done.result.suggestedBatchSize, x.findBatch.offer);
      const message = searchMessage({ result: done.result, code: 0, signal: null, stderr: '' });
      assert.equal(message.text, x.findBatch.message);
      assert.equal(message.error, false);
      assert.equal(message.offer, x.findBatch.offer);
    });
  });
}

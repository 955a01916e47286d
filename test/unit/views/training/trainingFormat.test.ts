import assert from 'node:assert/strict';
import type { GpuDevice, GpuSnapshot } from '../../../../src/gpu/types';
import type { JobEvent } from '../../../../src/training/job/events';
import {
  appendLoss, deviceChoices, doneMessage, existingRunPrompt, failureMessage, plannedBackend, ranOn, gpuIndexOf, hostExitMessage, progressPercent, progressText,
  strategyItems, templateFileName, templateJobText,
} from '../../../../src/views/training/trainingFormat';
import { parseJob } from '../../../../src/training/job/spec';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseGpuSamples } from '../../../../src/gpu/nvidiaSmi';
import { fixtures } from '../../../paths';

type Step = Extract<JobEvent, { type: 'job/step' }>;

function step(extra: Partial<Step> = {}): Step {
  return { type: 'job/step', epoch: 1, step: 26, stepsPerEpoch: 63, globalStep: 26, loss: 0.51749, samplesPerSecond: 4150.4, ...extra };
}

function gpu(index: number, usedMiB: number | null, totalMiB: number | null = 24576): GpuDevice {
  return { index, uuid: `GPU-${index}`, name: 'NVIDIA GeForce RTX 3090', memoryUsedMiB: usedMiB, memoryReservedMiB: 310, memoryTotalMiB: totalMiB, utilizationPercent: 10, temperatureC: 40, powerW: 90, powerLimitW: 350 };
}

function snapshot(devices: GpuDevice[], extra: Partial<GpuSnapshot> = {}): GpuSnapshot {
  return { source: 'nvidia-smi', devices, processes: [], takenAt: Date.UTC(2026, 10, 3, 14, 30), ...extra };
}

describe('training progress text', () => {
  it('reads epoch, step, loss and samples/s as the notification shows them', () => {
    assert.equal(progressText(step(), 2), 'epoch 1/2 · step 26/63 · loss 0.517 · 4,150 samples/s');
  });

  it('counts the steps of earlier epochs in the percentage', () => {
    assert.equal(progressPercent(step({ epoch: 1, step: 63 }), 2), 50);
    assert.equal(progressPercent(step({ epoch: 2, step: 63 }), 2), 100);
    assert.ok(Math.abs(progressPercent(step(), 2) - (100 * 26) / 126) < 1e-9);
  });
});

describe('training quick picks', () => {
  it('lists the engine strategies with the job file strategy first', () => {
    const items = strategyItems('ddp');
    assert.deepEqual(items.map((i) => i.strategy), ['ddp', 'single', 'dp', 'pipeline']);
    assert.match(items[0].description, /from the job file/);
    assert.deepEqual(strategyItems('single', ['single', 'dp', 'ddp', 'pipeline']).map((i) => i.strategy), ['single', 'dp', 'ddp', 'pipeline']);
  });

  it('offers each GPU with its name and free memory, the job devices picked', () => {
    const s = snapshot([gpu(0, 7270), gpu(1, 3072), gpu(2, null)], { processes: [{ gpuIndex: 0, pid: 42, name: 'python', memoryMiB: 6912 }] });
    const c = deviceChoices(s, 'ddp', [1, 2], 2);
    assert.equal(c.kind, 'gpus');
    assert.equal(c.canPickMany, true);
    assert.deepEqual(c.items.map((i) => i.label), ['GPU 0 · NVIDIA GeForce RTX 3090', 'GPU 1 · NVIDIA GeForce RTX 3090', 'GPU 2 · NVIDIA GeForce RTX 3090']);
    assert.deepEqual(c.items.map((i) => i.description), ['16.9 GiB free of 24.0 GiB · 1 process', '21.0 GiB free of 24.0 GiB', 'free memory not reported']);
    assert.deepEqual(c.items.map((i) => i.picked), [false, true, true]);
    assert.deepEqual(c.items.map((i) => i.devices), [[0], [1], [2]]);
  });

  it('lets a single-device job pick one GPU only', () => {
    const c = deviceChoices(snapshot([gpu(0, 100), gpu(1, 100)]), 'single', [0, 1], 2);
    assert.equal(c.canPickMany, false);
    assert.deepEqual(c.items.map((i) => i.picked), [true, false]);
  });

  it('picks the first GPUs when the job names devices the machine does not have', () => {
    const c = deviceChoices(snapshot([gpu(0, 100), gpu(1, 100), gpu(2, 100)]), 'ddp', [5, 6], 2);
    assert.deepEqual(c.items.map((i) => i.picked), [true, true, false]);
  });

  it('offers counts of CPU workers without a GPU and says why', () => {
    const c = deviceChoices(snapshot([], { source: 'none', error: 'nvidia-smi: not found' }), 'ddp', [0, 1], 2);
    assert.equal(c.kind, 'cpu');
    assert.equal(c.canPickMany, false);
    assert.deepEqual(c.items.map((i) => i.label), ['2 CPU workers']);
    assert.deepEqual(c.items[0].devices, 2);
    assert.match(c.placeholder, /CPU workers: no GPU \(nvidia-smi: not found\)/);
    const more = deviceChoices(null, 'dp', [0, 1, 2], 8);
    assert.deepEqual(more.items.map((i) => i.label), ['3 CPU workers', '2 CPU workers', '4 CPU workers', '8 CPU workers']);
    assert.match(more.placeholder, /no GPU reading/);
    assert.deepEqual(deviceChoices(null, 'single', [0], 8).items.map((i) => i.label), ['1 CPU worker']);
  });

  it('on a GPU machine without a GPU backend, says the picked GPUs get CPU workers and names the backend (recorded nvidia-smi of two RTX 3090s)', () => {
    const devices = parseGpuSamples(readFileSync(join(fixtures, 'nvidia-smi', 'two-gpus.csv'), 'utf8')).at(-1)!;
    const machine = snapshot(devices);
    const noGpuBackend = plannedBackend('auto', () => false);
    assert.deepEqual(noGpuBackend, { gpu: false, name: 'wasm', why: '@tensorflow/tfjs-node-gpu is not installed' });
    const c = deviceChoices(machine, 'ddp', [0, 1], 2, noGpuBackend);
    assert.equal(c.kind, 'gpus');
    assert.deepEqual(c.items.map((i) => i.label), ['GPU 0 · NVIDIA GeForce RTX 3090', 'GPU 1 · NVIDIA GeForce RTX 3090']);
    assert.deepEqual(c.items.map((i) => i.detail), Array(2).fill('runs on a CPU worker (wasm), not on this GPU: @tensorflow/tfjs-node-gpu is not installed'));
    assert.equal(c.placeholder, 'The job will run on CPU workers (wasm), one per picked GPU: no GPU backend (@tensorflow/tfjs-node-gpu is not installed)');
    assert.equal(c.titleNote, ' · runs on CPU (wasm)');
    // With tfjs-node-gpu installed the GPUs are what they say; a job that forces wasm runs on the CPU whatever is installed.
    const gpuBackend = plannedBackend('auto', (pkg) => pkg === '@tensorflow/tfjs-node-gpu');
    const onGpu = deviceChoices(machine, 'ddp', [0, 1], 2, gpuBackend);
    assert.deepEqual([onGpu.items.map((i) => i.detail), onGpu.titleNote, onGpu.placeholder], [[undefined, undefined], '', 'The GPUs to train on, one worker each']);
    assert.deepEqual(plannedBackend('wasm', () => true), { gpu: false, name: 'wasm', why: 'the job\'s "backend" is "wasm"' });
    assert.equal(plannedBackend('auto', (pkg) => pkg === '@tensorflow/tfjs-node').name, 'tensorflow (tfjs-node)');
    assert.match(plannedBackend('tensorflow-gpu', () => false).why ?? '', /not installed: the job will fail$/);
    // WebGPU: auto takes a hardware adapter, never a software one; a job that asks for webgpu gets lavapipe, on the CPU.
    const lavapipe = { software: true, device: 'llvmpipe-llvm-15-0-6-256-bits-', description: 'llvmpipe: Mesa 25.0.7' };
    const h100 = { software: false, device: 'nvidia-h100', description: 'NVIDIA: 580.65.06' };
    assert.deepEqual(plannedBackend('auto', () => false, { adapters: [h100, lavapipe] }), { gpu: true, name: 'webgpu (NVIDIA: 580.65.06)' });
    assert.deepEqual(plannedBackend('auto', () => false, { adapters: [lavapipe] }), { gpu: false, name: 'wasm', why: '@tensorflow/tfjs-node-gpu is not installed; the only WebGPU adapter is software (llvmpipe: Mesa 25.0.7)' });
    assert.deepEqual(plannedBackend('webgpu', () => false, { adapters: [lavapipe] }), { gpu: false, name: 'webgpu (software: llvmpipe: Mesa 25.0.7)', why: 'the only WebGPU adapter is software, its shaders run on the CPU' });
    assert.match(plannedBackend('webgpu', () => false, { error: 'Dawn found no Vulkan adapter' }).why ?? '', /^the job's "backend" is "webgpu" but no WebGPU adapter \(Dawn found no Vulkan adapter\): the job will fail$/);
    assert.equal(plannedBackend('auto', (pkg) => pkg === '@tensorflow/tfjs-node-gpu', { adapters: [h100] }).name, 'tensorflow-gpu (tfjs-node-gpu)');
    // No GPU at all: the CPU workers' picker names the backend too.
    assert.equal(deviceChoices(null, 'ddp', [0, 1], 2, noGpuBackend).placeholder, 'Training runs on CPU workers (wasm): no GPU reading');
  });

  it('maps a worker device string to its GPU', () => {
    assert.equal(gpuIndexOf('gpu:1 (CUDA_VISIBLE_DEVICES=1)'), 1);
    assert.equal(gpuIndexOf('cpu'), null);
  });
});

describe('training end messages', () => {
  it('reports the test accuracy when the job is done', () => {
    const text = doneMessage('mnist-ddp', { testAccuracy: 0.93456, testLoss: 0.2, trainLoss: 0.25, epochs: 2, steps: 126, samplesPerSecond: 4150.2, durationMs: 12_345 });
    assert.equal(text, 'Training mnist-ddp finished: test accuracy 93.46% after 2 epochs (4,150 samples/s, 12.3 s).');
  });

  it('says where the job really ran, from its job/started: on CPU (wasm) although GPUs were picked', () => {
    const m = { testAccuracy: 0.93456, testLoss: 0.2, trainLoss: 0.25, epochs: 2, steps: 126, samplesPerSecond: 4150.2, durationMs: 12_345 };
    // GPUs 0 and 1 picked; no GPU backend loaded, so each worker ran on the CPU through wasm.
    const onCpu = { backend: 'wasm', workers: [{ rank: 0, pid: 1, device: 'cpu', backend: 'wasm' }, { rank: 1, pid: 2, device: 'cpu', backend: 'wasm' }] };
    assert.equal(doneMessage('mnist-ddp', m, onCpu), 'Training mnist-ddp finished: test accuracy 93.46% after 2 epochs on CPU (wasm) (4,150 samples/s, 12.3 s).');
    assert.equal(ranOn({ backend: 'tensorflow', workers: [{ rank: 0, pid: 1, device: 'gpu:0 (CUDA_VISIBLE_DEVICES=0)', backend: 'tensorflow' }, { rank: 1, pid: 2, device: 'gpu:1 (CUDA_VISIBLE_DEVICES=1)', backend: 'tensorflow' }] }), 'on GPU 0, 1 (tensorflow)');
  });

  it('says what happened, on which rank, and what to try', () => {
    const text = failureMessage('mnist-ddp', { type: 'job/failed', reason: 'worker 1 (pid 4242) was killed by SIGKILL', rank: 1, hint: 'try a smaller batchSize or fewer devices.' });
    assert.equal(text, 'Training mnist-ddp failed on rank 1: worker 1 (pid 4242) was killed by SIGKILL. Try: try a smaller batchSize or fewer devices.');
    assert.equal(failureMessage('j', { type: 'job/failed', reason: 'a.job.json: /batchSize must be an integer\na.job.json: /epochs must be an integer' }), 'Training j failed: a.job.json: /batchSize must be an integer; a.job.json: /epochs must be an integer.');
    assert.equal(failureMessage('j', { type: 'job/failed', reason: 'cancelled', cancelled: true }), 'Training j was stopped.');
  });

  it('says how the host process died', () => {
    assert.match(hostExitMessage('j', null, 'SIGKILL'), /^The training host for j was killed by SIGKILL before the job ended; its workers were stopped\. .*out-of-memory/);
    assert.match(hostExitMessage('j', 3, null), /exited with code 3 before the job ended/);
  });
});

describe('training loss series', () => {
  it('keeps every point of a short job and thins a long one, keeping the first and newest', () => {
    const steps: number[] = [];
    const loss: number[] = [];
    for (let i = 1; i <= 10; i++) appendLoss(steps, loss, i, 1 / i, 100);
    assert.equal(steps.length, 10);
    for (let i = 11; i <= 5000; i++) appendLoss(steps, loss, i, 1 / i, 100);
    assert.ok(steps.length <= 100 && steps.length > 40, `${steps.length} points`);
    assert.equal(steps[0], 1);
    assert.equal(steps[steps.length - 1], 5000);
    assert.equal(loss[loss.length - 1], 1 / 5000);
    assert.deepEqual([...steps].sort((a, b) => a - b), steps);
    appendLoss(steps, loss, 5001, Number.NaN, 100);
    assert.equal(steps[steps.length - 1], 5000, 'a NaN loss is not drawn');
  });
});

describe('job files from the editor', () => {
  it('creates the template under a free name, and the template is a valid job', () => {
    assert.equal(templateFileName(new Set(['README.md'])), 'mnist.job.json');
    assert.equal(templateFileName(new Set(['mnist.job.json', 'mnist-2.job.json'])), 'mnist-3.job.json');
    const spec = parseJob(JSON.parse(templateJobText('mnist-3.job.json')), '/ws/mnist-3.job.json');
    assert.equal(spec.name, 'mnist-3');
    assert.equal(spec.strategy, 'ddp');
    assert.deepEqual(spec.devices, [0, 1]);
  });
});

describe('Start Training on a folder that holds a run (existingRunPrompt)', () => {
  const run = { root: '/w/checkpoints', epochs: [1, 2, 3], entries: ['epoch-1', 'epoch-2', 'epoch-3', 'latest.json'], latest: { dir: 'epoch-3', epoch: 3 }, job: 'mnist', savedAt: '2026-11-24T09:41:49.123Z' };

  it('asks Resume or Start Over (closing cancels), saying what each does and that the earlier run is kept', () => {
    const p = existingRunPrompt(run, { name: 'mnist', epochs: 25 }, 'checkpoints');
    assert.equal(p.message, 'checkpoints already holds a run of mnist: 3 epochs done (latest epoch-3, saved 2026-11-24 09:41:49 UTC).');
    assert.deepEqual(p.buttons, ['Resume', 'Start Over']);
    assert.equal(p.detail, 'Resume: continue after epoch 3, up to epoch 25, in the same folder.\nStart Over: move the earlier run into checkpoints/previous-<time>/ (kept, nothing deleted) and train from epoch 1.');
  });

  it('says a finished run has nothing left to train, and offers no Resume without a whole checkpoint', () => {
    assert.match(existingRunPrompt({ ...run, latest: { dir: 'epoch-25', epoch: 25 } }, { name: 'mnist', epochs: 25 }, 'checkpoints').detail, /^Resume: the job's 25 epochs are done already, so it only evaluates the model \(raise "epochs" to train on\)\./);
    const broken = existingRunPrompt({ root: '/w/checkpoints', epochs: [2], entries: ['epoch-2'] }, { name: 'mnist', epochs: 25 }, 'checkpoints');
    assert.deepEqual(broken.buttons, ['Start Over']);
    assert.equal(broken.message, 'checkpoints already holds 1 checkpoint folder of an earlier run, with no latest.json naming a whole one.');
  });

  it('offers no Resume for another job\'s run (another job file, or another model) and says whose it is; Start Over keeps it aside', () => {
    const theirs = { ...run, job: 'cifar', file: '/w/cifar.job.json', model: { kind: 'preset', preset: 'cnn', filters: [8] } };
    const p = existingRunPrompt(theirs, { name: 'mnist', epochs: 25, file: '/w/mnist.job.json', model: { kind: 'preset', preset: 'mlp', hiddenUnits: [128] } }, 'checkpoints');
    assert.deepEqual(p.buttons, ['Start Over']);
    assert.equal(p.message, 'checkpoints already holds a run that is not mnist\'s: it was written by another job file, /w/cifar.job.json (job cifar) (3 epochs done, latest epoch-3, saved 2026-11-24 09:41:49 UTC).');
    assert.equal(p.detail, 'Resume is not offered: it would continue this job from another job\'s weights. Start Over: move the earlier run into checkpoints/previous-<time>/ (kept, nothing deleted) and train from epoch 1. Or give this job its own "checkpointDir".');
    // The same job file with its model changed since.
    const changed = existingRunPrompt({ ...theirs, file: '/w/mnist.job.json' }, { name: 'mnist', epochs: 25, file: '/w/mnist.job.json', model: { kind: 'preset', preset: 'mlp', hiddenUnits: [128] } }, 'checkpoints');
    assert.deepEqual(changed.buttons, ['Start Over']);
    assert.match(changed.message, /is not mnist's: its model \(.*"cnn".*\) is not this job's \(.*"mlp".*\)/);
    // A checkpoint of an older version (no file recorded) of another job name.
    assert.deepEqual(existingRunPrompt({ ...run, job: 'cifar' }, { name: 'mnist', epochs: 25, file: '/w/mnist.job.json' }, 'checkpoints').buttons, ['Start Over']);
    // Its own run: Resume, saying when latest.json was unreadable.
    const own = existingRunPrompt({ ...theirs, file: '/w/mnist.job.json', latest: { dir: 'epoch-3', epoch: 3, repaired: 'latest.json is empty' }, model: { kind: 'preset', preset: 'mlp', hiddenUnits: [128] } }, { name: 'mnist', epochs: 25, file: '/w/mnist.job.json', model: { kind: 'preset', preset: 'mlp', hiddenUnits: [128] } }, 'checkpoints');
    assert.deepEqual(own.buttons, ['Resume', 'Start Over']);
    assert.match(own.detail, /^Resume: continue after epoch 3, up to epoch 25, in the same folder \(latest\.json is empty: epoch-3 is the newest whole checkpoint\)\./);
  });
});

/**
 * `gpu-workbench doctor`: each check against the real tool where this machine has it (Dawn on
 * lavapipe, Debian's python3-torch, the training host on wasm) and against the fake nvidia-smi's
 * recorded-format answers for the GPU parts this machine cannot show.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from '../../paths';
import { checkBackends, checkNvidiaSmi, checkPythons, checkTrainingStep, checkWebgpuAdapters, exec, pythonCandidates, type Probe, type RunJob } from '../../../src/doctor/checks';
import { icdFiles, readIcd } from '../../../src/doctor/vulkan';
import { runJob } from '../../../src/training/launchers/coordinator';
import type { DoctorReport } from '../../../src/doctor/report';
import { envWithoutNvidiaSmi, fakeBin, fakeEnv } from '../gpu/helpers';

const cli = join(repoRoot, 'out', 'src', 'cli.js');
const fakeNvidiaSmi = join(fakeBin, 'nvidia-smi');

/** Runs the built CLI to its end (no deadline here: every external command inside has its own). */
function doctor(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [cli, 'doctor', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** A program that never answers, for the deadline paths. */
function hangingProgram(): string {
  const file = join(mkdtempSync(join(tmpdir(), 'gw-hang-')), 'hangs');
  writeFileSync(file, '#!/bin/sh\nexec sleep 1000\n');
  chmodSync(file, 0o755);
  return file;
}

const fixedProbe = (answers: Record<string, Awaited<ReturnType<Probe>>>): Probe => (what) => Promise.resolve(answers[what] ?? { ok: false, why: `no answer for ${what}`, evidence: [] });

describe('gpu-workbench doctor: nvidia-smi', function () {
  this.timeout(30_000);

  it('lists the driver and every GPU with its UUID and PCI bus id, in nvidia-smi numbering', async () => {
    const env = fakeEnv('two-gpus').env;
    const r = await checkNvidiaSmi((f, a, o) => exec(f, a, { ...o, env }), fakeNvidiaSmi);
    assert.equal(r.check.status, 'ok');
    assert.equal(r.gpus.length, 2);
    assert.deepEqual(r.gpus[1], { index: 1, name: 'NVIDIA GeForce RTX 3090', uuid: 'GPU-1a2b3c4d-0002-4e5f-8a9b-0c1d2e3f4a51', pciBusId: '00000000:02:00.0', driver: '550.54.15', memoryMiB: 24576 });
    assert.match(r.check.summary, /driver 550\.54\.15, 2 GPUs: \[0\] NVIDIA GeForce RTX 3090, \[1\] NVIDIA GeForce RTX 3090/);
    assert.ok(r.check.evidence.some((e) => e.includes('00000000:01:00.0')), 'the tool\'s own rows are the evidence');
  });

  it('a driver that is not loaded is a failure in the tool\'s own words, with what to do', async () => {
    const env = fakeEnv('no-driver').env;
    const r = await checkNvidiaSmi((f, a, o) => exec(f, a, { ...o, env }), fakeNvidiaSmi);
    assert.equal(r.check.status, 'fail');
    assert.match(r.check.summary, /^NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver/);
    assert.match(r.check.fix ?? '', /driver/);
    assert.deepEqual(r.gpus, []);
  });

  it('no nvidia-smi at all is not an error on a CPU machine', async () => {
    const r = await checkNvidiaSmi(exec, join(tmpdir(), 'no-such-dir', 'nvidia-smi'));
    assert.equal(r.check.status, 'info');
    assert.match(r.check.summary, /not found: no NVIDIA driver on this machine/);
  });

  it('a hanging nvidia-smi is killed at its deadline and named as hanging', async () => {
    const r = await checkNvidiaSmi(exec, hangingProgram(), 300);
    assert.equal(r.check.status, 'fail');
    assert.match(r.check.summary, /did not answer within/);
  });
});

describe('gpu-workbench doctor: adapters and backends (probe answers)', () => {
  const lavapipe = { index: 0, vendor: 'mesa', architecture: 'software', device: 'llvmpipe', description: 'llvmpipe (LLVM 19.1.7, 256 bits)', driver: 'Mesa 25.0.7', software: true };
  const nvidia = { index: 0, vendor: 'nvidia', architecture: 'hopper', device: 'NVIDIA H100 80GB HBM3', description: 'NVIDIA H100 80GB HBM3', driver: '580.65.06', software: false };

  it('only a software adapter on a machine with NVIDIA GPUs is a failure (the Vulkan driver is missing), with the fix', async () => {
    const c = await checkWebgpuAdapters(fixedProbe({ 'webgpu-adapters': { ok: true, value: { adapters: [lavapipe] } } }), 2);
    assert.equal(c.status, 'fail');
    assert.match(c.summary, /only software adapters/);
    assert.match(c.evidence[0], /llvmpipe.*\(software\)/);
    assert.match(c.fix ?? '', /Vulkan driver/);
  });

  // The H100 machine of 2026-11-26 (test/fixtures/torchrun/cuda/h100): CUDA worked, nvidia_icd.json was there, Dawn said
  // "Found no drivers": first the Vulkan loader was missing, then glvnd, which NVIDIA's ICD library needs.
  const found = (...libs: string[]) => libs.map((l) => `\t${l} (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/${l}`).join('\n');
  const nvidiaIcd = { path: '/usr/share/vulkan/icd.d/nvidia_icd.json', library: 'libGLX_nvidia.so.0' };
  const noDrivers = fixedProbe({ 'webgpu-adapters': { ok: true, value: { error: 'Dawn found no Vulkan adapter: no GPU driver with a Vulkan ICD (NVIDIA\'s driver ships one; Mesa\'s mesa-vulkan-drivers for others and for lavapipe) is installed' } } });

  it('no adapter on an NVIDIA machine: names the missing Vulkan loader and glvnd, as found on a real H100', async () => {
    const bare = await checkWebgpuAdapters(noDrivers, 1, 1000, () => Promise.resolve({ ldconfig: found('libGLX_nvidia.so.0', 'libnvidia-glcore.so.580.159.04'), icds: [nvidiaIcd], exists: () => false }));
    assert.equal(bare.status, 'fail');
    assert.ok(bare.evidence.includes('the Vulkan loader libvulkan.so.1 is not installed (Dawn loads it to reach any Vulkan driver)'));
    assert.ok(bare.evidence.includes('/usr/share/vulkan/icd.d/nvidia_icd.json: driver library libGLX_nvidia.so.0'));
    assert.equal(bare.fix, 'install the Vulkan loader: apt-get install libvulkan1 (dnf install vulkan-loader); install glvnd: apt-get install libglvnd0 (dnf install libglvnd).');
    const loaderOnly = await checkWebgpuAdapters(noDrivers, 1, 1000, () => Promise.resolve({ ldconfig: found('libGLX_nvidia.so.0', 'libvulkan.so.1'), icds: [nvidiaIcd], exists: () => false }));
    assert.equal(loaderOnly.fix, 'install glvnd: apt-get install libglvnd0 (dnf install libglvnd).');
    // The summary says what is missing (the H100's doctor of session 10 said "no GPU driver with a Vulkan ICD is installed").
    assert.equal(loaderOnly.summary, 'Dawn found no Vulkan adapter: glvnd\'s libGLdispatch.so.0, which NVIDIA\'s Vulkan driver needs, is not installed');
    assert.equal(bare.summary, 'Dawn found no Vulkan adapter: the Vulkan loader libvulkan.so.1 is not installed; glvnd\'s libGLdispatch.so.0, which NVIDIA\'s Vulkan driver needs, is not installed');
    const carried = await checkWebgpuAdapters(noDrivers, 1, 1000, () => Promise.resolve({ ldconfig: found('libGLX_nvidia.so.0'), icds: [nvidiaIcd], libraryPath: ['/tmp/kit'], exists: (p) => p === '/tmp/kit/libvulkan.so.1' || p === '/tmp/kit/libGLdispatch.so.0' }));
    assert.match(carried.fix ?? '', /^The webgpu backend needs a Vulkan driver/, 'all pieces there (LD_LIBRARY_PATH counts): the general advice');
    assert.match(carried.summary, /no GPU driver with a Vulkan ICD/, 'nothing found missing: Dawn\'s own words');
  });

  it('no adapter: a missing driver manifest, or one whose library is gone, is named; on a CPU machine nothing is diagnosed', async () => {
    const none = await checkWebgpuAdapters(noDrivers, 2, 1000, () => Promise.resolve({ ldconfig: found('libvulkan.so.1'), icds: [] }));
    assert.match(none.fix ?? '', /^no Vulkan driver is installed: NVIDIA's driver ships nvidia_icd\.json/);
    const gone = await checkWebgpuAdapters(noDrivers, 2, 1000, () => Promise.resolve({ ldconfig: found('libvulkan.so.1'), icds: [{ path: '/etc/vulkan/icd.d/nvidia_icd.json', library: '/usr/lib/nvidia/libGLX_nvidia.so.0' }], exists: () => false }));
    assert.ok(gone.evidence.includes('/etc/vulkan/icd.d/nvidia_icd.json: driver library /usr/lib/nvidia/libGLX_nvidia.so.0, which the dynamic loader does not find'));
    assert.deepEqual(readIcd('/usr/share/vulkan/icd.d/nvidia_icd.json', () => '{"file_format_version": "1.0.1", "ICD": {"library_path": "libGLX_nvidia.so.0", "api_version": "1.4.312"}}'), nvidiaIcd);
    assert.deepEqual(readIcd('/x.json', () => '{"ICD": {}}'), { path: '/x.json', error: 'no ICD.library_path in it' });
    assert.match(readIcd('/y.json', () => '{not json').error ?? '', /JSON/);
    assert.deepEqual(icdFiles({ VK_DRIVER_FILES: '/a/nvidia_icd.json:/b/lvp_icd.json' }), ['/a/nvidia_icd.json', '/b/lvp_icd.json']);
    let asked = false;
    const cpu = await checkWebgpuAdapters(noDrivers, 0, 1000, () => { asked = true; return Promise.resolve({ icds: [] }); });
    assert.deepEqual([cpu.status, asked], ['info', false]);
  });

  it('the same on a CPU machine is only information; hardware adapters are ok, fewer than the GPUs a warning', async () => {
    assert.equal((await checkWebgpuAdapters(fixedProbe({ 'webgpu-adapters': { ok: true, value: { adapters: [lavapipe] } } }), 0)).status, 'info');
    const one = await checkWebgpuAdapters(fixedProbe({ 'webgpu-adapters': { ok: true, value: { adapters: [nvidia, lavapipe] } } }), 1);
    assert.equal(one.status, 'ok');
    assert.match(one.evidence[0], /NVIDIA H100 80GB HBM3, vendor nvidia, architecture hopper, driver 580\.65\.06$/);
    assert.equal((await checkWebgpuAdapters(fixedProbe({ 'webgpu-adapters': { ok: true, value: { adapters: [nvidia] } } }), 2)).status, 'warn');
  });

  it('a probe process that crashes is a failure naming how it died', async () => {
    const c = await checkWebgpuAdapters(fixedProbe({ 'webgpu-adapters': { ok: false, why: 'the probe process was killed by SIGSEGV without an answer', evidence: ['$ node cli.js doctor --probe webgpu-adapters'] } }), 0);
    assert.equal(c.status, 'fail');
    assert.match(c.summary, /SIGSEGV/);
  });

  it('a backend that is not installed is information with the reason; one that loads says on what', async () => {
    const checks = await checkBackends(fixedProbe({
      'backend:tensorflow-gpu': { ok: true, value: { ok: false, why: 'backend "tensorflow-gpu" is not available: @tensorflow/tfjs-node-gpu is not installed' } },
      'backend:wasm': { ok: true, value: { ok: true, label: 'wasm', device: 'cpu', gpu: false, note: '' } },
    }));
    assert.deepEqual(checks.map((c) => c.id), ['backend:tensorflow-gpu', 'backend:webgpu', 'backend:tensorflow', 'backend:wasm', 'backend:cpu']);
    assert.equal(checks[0].status, 'info');
    assert.match(checks[0].summary, /@tensorflow\/tfjs-node-gpu is not installed/);
    assert.equal(checks[3].status, 'ok');
    assert.match(checks[3].summary, /loads \(wasm\) on cpu/);
  });
});

describe('gpu-workbench doctor: Python and torch (the real interpreters)', function () {
  this.timeout(120_000);
  const debianTorch = '/usr/bin/python3';
  const hasTorch = existsSync(debianTorch);

  it('finds each Python once, the one asked for first', () => {
    const found = pythonCandidates(debianTorch, `/usr/bin:/bin:${process.env.PATH ?? ''}`);
    assert.equal(found[0], debianTorch);
    assert.equal(new Set(found).size, found.length);
  });

  it('Debian\'s CPU torch: ok on a CPU machine, a warning where nvidia-smi lists GPUs (torch.cuda.is_available() is False)', async function () {
    if (!hasTorch) this.skip();
    const [cpu] = await checkPythons(exec, [debianTorch], 0);
    if (cpu.status === 'info') this.skip(); // no torch for this interpreter here: said in its summary
    assert.equal(cpu.status, 'ok', cpu.summary);
    assert.match(cpu.summary, /^Python 3\.\d+\.\d+, torch \d+\.\d+.*CPU only/);
    const [gpu] = await checkPythons(exec, [debianTorch], 2);
    assert.equal(gpu.status, 'warn');
    assert.match(gpu.summary, /torch\.cuda\.is_available\(\) False although nvidia-smi lists 2 GPU\(s\)/);
    assert.match(gpu.fix ?? '', /CUDA build of PyTorch/);
  });

  it('a folder named torch in the working directory is not what gets imported', async function () {
    if (!hasTorch) this.skip();
    const ws = mkdtempSync(join(tmpdir(), 'gw-ws-'));
    writeFileSync(join(ws, 'torch.py'), 'raise SystemExit("the workspace torch.py ran")\n');
    const cwd = process.cwd();
    process.chdir(ws);
    try {
      const [c] = await checkPythons(exec, [debianTorch], 0);
      assert.doesNotMatch(c.summary + c.evidence.join('\n'), /workspace torch\.py ran/);
    } finally {
      process.chdir(cwd);
    }
  });

  it('an interpreter that hangs is killed at its deadline; one that does not exist is named', async () => {
    const [hang, missing] = await checkPythons(exec, [hangingProgram(), join(tmpdir(), 'no-such-python')], 0, 300);
    assert.equal(hang.status, 'fail');
    assert.match(hang.summary, /did not answer within/);
    assert.equal(missing.status, 'fail');
    assert.match(missing.summary, /cannot be run: .*ENOENT/);
  });
});

describe('gpu-workbench doctor: a short training run (the real training host)', function () {
  this.timeout(240_000);
  const jobs = runJob as unknown as RunJob;

  it('without a GPU: trains on the CPU backend and measures samples/s after the warm-up', async () => {
    const c = await checkTrainingStep(jobs, undefined, { steps: 6, warmup: 2, timeoutMs: 200_000 });
    assert.equal(c.status, 'ok', `${c.summary}\n${c.evidence.join('\n')}`);
    assert.equal(c.id, 'train:cpu');
    assert.match(c.summary, /^(wasm|cpu) on cpu: [\d,]+ samples\/s \(MLP 784-512-512-10, batch 256, Adam, 4 timed steps after 2 warm-up\)$/);
    assert.ok((c.data?.samplesPerSecond as number) > 0);
    assert.ok(c.evidence.some((e) => /^rank 0 \(pid \d+\): backend (wasm|cpu), device cpu$/.test(e)), c.evidence.join('\n'));
  });

  it('a GPU that nvidia-smi lists but the worker did not get is a failure, never reported as trained on', async () => {
    const gpu = { index: 1, name: 'NVIDIA GeForce RTX 3090', uuid: 'GPU-x', pciBusId: '00000000:02:00.0', driver: '550.54.15', memoryMiB: 24576 };
    const c = await checkTrainingStep(jobs, gpu, { steps: 4, warmup: 1, timeoutMs: 200_000 });
    assert.equal(c.status, 'fail');
    assert.equal(c.id, 'train:gpu1');
    assert.match(c.summary, /^trained on (wasm|cpu) on cpu, not on the GPU/);
  });
});

describe('gpu-workbench doctor (the built CLI)', function () {
  this.timeout(300_000);

  it('--json on this machine: every check with evidence; with no GPU and CPU training working, exit 0', async () => {
    const r = await doctor(['--json', '--steps', '4'], envWithoutNvidiaSmi());
    assert.equal(r.code, 0, r.stderr + r.stdout);
    const report = JSON.parse(r.stdout) as DoctorReport;
    const ids = report.checks.map((c) => c.id);
    for (const id of ['nvidia-smi', 'webgpu-adapters', 'backend:tensorflow-gpu', 'backend:webgpu', 'backend:tensorflow', 'backend:wasm', 'backend:cpu', 'train:cpu']) assert.ok(ids.includes(id), `${id} in ${ids.join(', ')}`);
    assert.ok(ids.some((id) => id.startsWith('python:')));
    for (const c of report.checks) assert.ok(c.evidence.length > 0 && c.summary.length > 0, `${c.id} says what it saw`);
    assert.equal(report.checks.find((c) => c.id === 'backend:wasm')?.status, 'ok');
    // Where Dawn sees lavapipe (CI installs it), the webgpu backend loads on it and says it is software, on the CPU.
    const adapters = report.checks.find((c) => c.id === 'webgpu-adapters')?.data?.adapters as { software: boolean }[] | undefined;
    if (adapters?.some((a) => a.software)) {
      const webgpu = report.checks.find((c) => c.id === 'backend:webgpu');
      assert.equal(webgpu?.status, 'ok', webgpu?.summary);
      assert.match(webgpu?.summary ?? '', /^loads \(webgpu.*\) on cpu \(webgpu adapter .*software/);
    } else {
      console.log('      (no software Vulkan adapter here: the webgpu backend on lavapipe not checked)');
    }
    assert.match(report.verdict, /^No GPU here; training runs on the CPU/);
    assert.equal(report.exitCode, 0);
  });

  it('with nvidia-smi listing two GPUs that no backend reaches: each GPU fails, exit 1, and the text names why', async () => {
    const r = await doctor(['--steps', '3'], fakeEnv('two-gpus').env);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stdout, /^\[ok {2}\] NVIDIA driver \(nvidia-smi\): driver 550\.54\.15, 2 GPUs/m);
    assert.match(r.stdout, /^\[FAIL\] training on GPU 0 \(NVIDIA GeForce RTX 3090\): trained on \w+ on cpu, not on the GPU/m);
    assert.match(r.stdout, /^\[FAIL\] training on GPU 1 /m);
    assert.match(r.stdout, /^0 of 2 GPUs train; training on GPU 0 \(NVIDIA GeForce RTX 3090\), training on GPU 1 \(NVIDIA GeForce RTX 3090\) did not\.$/m);
  });

  it('bad options exit 2 with the usage', async () => {
    const r = await doctor(['--steps', 'x'], process.env);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--steps expects a whole number of at least 3, got 'x'/);
  });
});

/**
 * The checks of `gpu-workbench doctor`, each from its own evidence:
 * - `nvidia-smi`: the driver and the GPUs (index, name, UUID, PCI bus id, memory), the same
 *   numbering as the GPU panel and `CUDA_VISIBLE_DEVICES`;
 * - the WebGPU (Vulkan) adapters Dawn sees, hardware or software;
 * - which training backends load, each in its own process (a native module that crashes or
 *   hangs takes only its probe with it), and why not;
 * - every Python on PATH (and `--python`): its torch, CUDA build, `torch.cuda.is_available()`;
 * - one short training run per GPU on the best backend (`auto`), with its samples/s, which
 *   fails when the worker did not really get that GPU.
 * Every external command has a deadline; one that hangs is a `fail` that says so.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, isAbsolute, join } from 'node:path';
import type { JobEvent } from '../training/job/events';
import { detectToolError, splitRow } from '../gpu/nvidiaSmi';
import type { Check } from './report';
import { diagnoseVulkan, type VulkanFacts } from './vulkan';

export interface ExecResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
  /** Set when the program could not be started (ENOENT: not installed). */
  readonly spawnError?: NodeJS.ErrnoException;
  readonly timedOut: boolean;
}

export type Exec = (file: string, args: readonly string[], o: { readonly timeoutMs: number; readonly cwd?: string; readonly env?: NodeJS.ProcessEnv }) => Promise<ExecResult>;

/** Runs a program to its end or its deadline (then SIGKILL), never throwing. */
export const exec: Exec = (file, args, o) => new Promise((resolve) => {
  let timedOut = false;
  const child = execFile(file, [...args], { timeout: o.timeoutMs, killSignal: 'SIGKILL', maxBuffer: 16 << 20, encoding: 'utf8', cwd: o.cwd, env: o.env ?? process.env }, (err, stdout, stderr) => {
    const e = err as (NodeJS.ErrnoException & { killed?: boolean; signal?: NodeJS.Signals | null; code?: number | string }) | null;
    if (e?.killed && e.signal === 'SIGKILL') timedOut = true;
    const spawnError = e && typeof e.code === 'string' ? e : undefined;
    resolve({ code: spawnError ? null : child.exitCode, signal: child.signalCode, stdout: String(stdout ?? ''), stderr: String(stderr ?? ''), timedOut, ...(spawnError ? { spawnError } : {}) });
  });
  child.stdin?.end();
});

const seconds = (ms: number): string => `${Math.round(ms / 1000)} s`;

/** The last lines of a program's output, for evidence. */
function tail(text: string, lines = 6): string {
  const all = text.trim().split(/\r?\n/).filter((l) => l.trim() !== '');
  return all.slice(-lines).join('\n');
}

// ---------------------------------------------------------------------------------------------
// nvidia-smi

export interface NvidiaGpu {
  readonly index: number;
  readonly name: string;
  readonly uuid: string;
  readonly pciBusId: string;
  readonly driver: string;
  readonly memoryMiB: number | null;
}

const gpuFields = ['index', 'name', 'uuid', 'pci.bus_id', 'driver_version', 'memory.total'];

/** `nvidia-smi --query-gpu=...`: the driver and the GPUs, or why not. */
export async function checkNvidiaSmi(run: Exec, nvidiaSmi = 'nvidia-smi', timeoutMs = 15_000): Promise<{ check: Check; gpus: NvidiaGpu[] }> {
  const args = [`--query-gpu=${gpuFields.join(',')}`, '--format=csv,noheader,nounits'];
  const command = `${nvidiaSmi} ${args.join(' ')}`;
  const r = await run(nvidiaSmi, args, { timeoutMs });
  const base = { id: 'nvidia-smi', title: 'NVIDIA driver (nvidia-smi)' };
  if (r.spawnError?.code === 'ENOENT') {
    return { gpus: [], check: { ...base, status: 'info', summary: `${nvidiaSmi} not found${isAbsolute(nvidiaSmi) ? '' : ' on PATH'}: no NVIDIA driver on this machine`, evidence: [`$ ${command}`, `not found (${r.spawnError.message})`], fix: 'On a machine with an NVIDIA GPU, install its driver: it brings nvidia-smi and the Vulkan driver that the webgpu backend uses.' } };
  }
  if (r.spawnError) return { gpus: [], check: { ...base, status: 'fail', summary: `${nvidiaSmi} cannot be run: ${r.spawnError.message}`, evidence: [`$ ${command}`, r.spawnError.message] } };
  if (r.timedOut) {
    return { gpus: [], check: { ...base, status: 'fail', summary: `${nvidiaSmi} did not answer within ${seconds(timeoutMs)}`, evidence: [`$ ${command}`, `no answer after ${seconds(timeoutMs)}; killed`, ...(r.stdout.trim() ? [tail(r.stdout)] : [])], fix: 'A driver that hangs nvidia-smi usually needs the GPU reset or the machine rebooted; look at `dmesg` for Xid errors.' } };
  }
  const toolError = detectToolError(`${r.stdout}\n${r.stderr}`);
  if (r.code !== 0 || toolError) {
    const fix = toolError?.kind === 'no-driver' || toolError?.kind === 'nvml'
      ? 'The NVIDIA kernel driver is not loaded or does not match its libraries: reboot after a driver update, or reinstall the driver.'
      : undefined;
    return { gpus: [], check: { ...base, status: 'fail', summary: toolError?.message ?? `${nvidiaSmi} exited with ${r.code ?? r.signal}`, evidence: [`$ ${command}`, tail(`${r.stdout}\n${r.stderr}`)], ...(fix ? { fix } : {}) } };
  }
  const gpus: NvidiaGpu[] = [];
  const rows = r.stdout.split(/\r?\n/).filter((l) => l.trim() !== '');
  for (const line of rows) {
    const v = splitRow(line, gpuFields.length, 1);
    if (!v || !/^\d+$/.test(v[0])) continue;
    const mem = Number(v[5]);
    gpus.push({ index: Number(v[0]), name: v[1], uuid: v[2], pciBusId: v[3], driver: v[4], memoryMiB: Number.isFinite(mem) && v[5] !== '' ? mem : null });
  }
  if (gpus.length === 0) {
    return { gpus, check: { ...base, status: 'fail', summary: `${nvidiaSmi} ran but listed no GPU`, evidence: [`$ ${command}`, tail(r.stdout) || '(no output)'] } };
  }
  const drivers = [...new Set(gpus.map((g) => g.driver))];
  return {
    gpus,
    check: {
      ...base,
      status: 'ok',
      summary: `driver ${drivers.join(', ')}, ${gpus.length} GPU${gpus.length === 1 ? '' : 's'}: ${gpus.map((g) => `[${g.index}] ${g.name}`).join(', ')}`,
      evidence: [`$ ${command}`, ...rows.map((l) => l.trim())],
      data: { gpus },
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Probes in a child process: the WebGPU adapters, and each training backend

/** Runs `doctor --probe <what>` in a fresh process and returns its JSON answer, or why there is none. */
export type Probe = (what: string, timeoutMs: number) => Promise<{ ok: true; value: Record<string, unknown>; command?: string } | { ok: false; why: string; evidence: string[] }>;

/** A probe that runs `node <cli> doctor --probe <what>` (the CLI running now, by default). */
export function probeWith(command: readonly string[], run: Exec = exec): Probe {
  return async (what, timeoutMs) => {
    const [file, ...args] = command;
    const full = [...args, '--probe', what];
    const r = await run(file, full, { timeoutMs, env: { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? tmpdir() } });
    const shown = `$ ${[file, ...full].join(' ')}`;
    if (r.timedOut) return { ok: false, why: `the probe did not finish within ${seconds(timeoutMs)} (killed)`, evidence: [shown, tail(r.stderr)] };
    const last = r.stdout.trim().split('\n').at(-1) ?? '';
    try {
      const value = JSON.parse(last) as Record<string, unknown>;
      if (value && typeof value === 'object') return { ok: true, value, command: shown };
    } catch {
      // no JSON: the process died
    }
    const how = r.signal ? `was killed by ${r.signal}` : `exited with ${r.code}`;
    return { ok: false, why: `the probe process ${how} without an answer`, evidence: [shown, tail(`${r.stdout}\n${r.stderr}`) || '(no output)'] };
  };
}

/** One WebGPU adapter as the probe reports it (see training/backends/webgpu.ts). */
interface AdapterFacts {
  readonly index?: number;
  readonly vendor?: string;
  readonly architecture?: string;
  readonly device?: string;
  readonly description?: string;
  readonly driver?: string;
  readonly software?: boolean;
}

function adapterLine(a: AdapterFacts): string {
  const what = [a.description || a.device, a.vendor && `vendor ${a.vendor}`, a.architecture && `architecture ${a.architecture}`, a.driver && !(a.description ?? '').includes(a.driver) && `driver ${a.driver}`].filter(Boolean).join(', ');
  return `[${a.index ?? '?'}] ${what || 'no description'}${a.software ? ' (software)' : ''}`;
}

/** The Vulkan adapters Dawn (the webgpu backend) sees. */
export async function checkWebgpuAdapters(probe: Probe, nvidiaGpus: number, timeoutMs = 60_000, vulkan?: () => Promise<VulkanFacts>): Promise<Check> {
  const base = { id: 'webgpu-adapters', title: 'WebGPU adapters (Dawn on Vulkan)' };
  const r = await probe('webgpu-adapters', timeoutMs);
  if (!r.ok) return { ...base, status: 'fail', summary: `Dawn could not list adapters: ${r.why}`, evidence: r.evidence };
  // No adapter on a machine with NVIDIA GPUs: which piece between Dawn and the driver is missing (vulkan.ts).
  // The summary names what is missing where that was found, not Dawn's general guess.
  const why = async (): Promise<{ evidence: string[]; fix: string; causes: string[] }> => {
    if (!vulkan || nvidiaGpus === 0) return { evidence: [], fix: vulkanFix, causes: [] };
    const d = diagnoseVulkan(await vulkan());
    return { evidence: d.evidence, fix: d.fix ?? vulkanFix, causes: d.causes };
  };
  if (typeof r.value.error === 'string') {
    const d = await why();
    const summary = d.causes.length ? `Dawn found no Vulkan adapter: ${d.causes.join('; ')}` : r.value.error;
    return { ...base, status: nvidiaGpus > 0 ? 'fail' : 'info', summary, evidence: [r.value.error, ...d.evidence], fix: d.fix };
  }
  const adapters = (Array.isArray(r.value.adapters) ? r.value.adapters : []) as AdapterFacts[];
  const hardware = adapters.filter((a) => !a.software);
  const evidence = adapters.length ? adapters.map(adapterLine) : ['Dawn found no Vulkan adapter'];
  if (hardware.length > 0) {
    const short = nvidiaGpus > hardware.length;
    return { ...base, status: short ? 'warn' : 'ok', summary: `${hardware.length} hardware adapter${hardware.length === 1 ? '' : 's'}${short ? `, fewer than the ${nvidiaGpus} GPUs nvidia-smi lists` : ''}`, evidence, data: { adapters }, ...(short ? { fix: vulkanFix } : {}) };
  }
  if (adapters.length > 0) {
    return { ...base, status: nvidiaGpus > 0 ? 'fail' : 'info', summary: 'only software adapters (a CPU Vulkan such as lavapipe): the webgpu backend is used only when a job asks for it by name', evidence, data: { adapters }, ...(nvidiaGpus > 0 ? { fix: vulkanFix } : {}) };
  }
  if (nvidiaGpus === 0) return { ...base, status: 'info', summary: 'no Vulkan adapter', evidence };
  const d = await why();
  return { ...base, status: 'fail', summary: d.causes.length ? `no Vulkan adapter: ${d.causes.join('; ')}` : 'no Vulkan adapter', evidence: [...evidence, ...d.evidence], fix: d.fix };
}

const vulkanFix = 'The webgpu backend needs a Vulkan driver: NVIDIA\'s driver ships one (check `vulkaninfo --summary` and /usr/share/vulkan/icd.d/nvidia_icd.json; containers need NVIDIA_DRIVER_CAPABILITIES to include graphics). For tests without a GPU, Mesa\'s lavapipe (mesa-vulkan-drivers 24 or newer, from bookworm-backports on Debian 12).';

/** The backends a worker can load, best first (the order `auto` tries). */
export const probedBackends = ['tensorflow-gpu', 'webgpu', 'tensorflow', 'wasm', 'cpu'] as const;

/** Which training backends load here, each in its own process, and what each says it runs on. */
export async function checkBackends(probe: Probe, timeoutMs = 60_000): Promise<Check[]> {
  const checks: Check[] = [];
  for (const name of probedBackends) {
    const base = { id: `backend:${name}`, title: `training backend ${name}` };
    const r = await probe(`backend:${name}`, timeoutMs);
    if (!r.ok) {
      checks.push({ ...base, status: 'fail', summary: `loading it ${r.why}`, evidence: r.evidence });
      continue;
    }
    const v = r.value as { ok?: boolean; why?: string; label?: string; device?: string; gpu?: boolean; note?: string };
    const shown = r.command ? [r.command] : [];
    if (!v.ok) {
      // An optional backend that is simply not installed is no failure.
      const why = (v.why ?? 'no reason given').replace(/^backend "[^"]*" is not available: /, '');
      checks.push({ ...base, status: 'info', summary: `not available: ${why}`, evidence: [...shown, v.why ?? ''] });
      continue;
    }
    checks.push({ ...base, status: 'ok', summary: `loads (${v.label ?? name}) on ${v.device ?? 'an unknown device'}`, evidence: [...shown, `device: ${v.device ?? '?'}`, ...(v.note ? [`note: ${v.note}`] : [])], data: { gpu: v.gpu === true, device: v.device } });
  }
  return checks;
}

// ---------------------------------------------------------------------------------------------
// Python and torch

const torchScript = [
  'import json, sys',
  'd = {"python": sys.executable, "version": sys.version.split()[0]}',
  'try:',
  '    import torch',
  'except Exception as e:',
  '    d["error"] = "%s: %s" % (type(e).__name__, e)',
  'else:',
  '    d["torch"] = torch.__version__',
  '    d["cudaBuild"] = torch.version.cuda',
  '    d["cuda"] = bool(torch.cuda.is_available())',
  '    d["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if d["cuda"] else []',
  '    d["nccl"] = bool(torch.distributed.is_available() and torch.distributed.is_nccl_available())',
  'print(json.dumps(d))',
].join('\n');

/** `python3`, `python` on PATH and `/usr/bin/python3`, plus the one asked for, each once (by real path). */
export function pythonCandidates(explicit: string | undefined, path = process.env.PATH ?? ''): string[] {
  const found: string[] = [];
  const seen = new Set<string>();
  const add = (p: string) => {
    let real = p;
    try { real = realpathSync(p); } catch { /* keep as given */ }
    if (seen.has(real)) return;
    seen.add(real);
    found.push(p);
  };
  if (explicit) add(explicit);
  for (const name of ['python3', 'python']) {
    for (const dir of path.split(delimiter).filter(Boolean)) {
      const p = join(dir, name);
      if (existsSync(p)) { add(p); break; }
    }
  }
  if (existsSync('/usr/bin/python3')) add('/usr/bin/python3');
  return found;
}

/** One check per Python: its torch, whether that torch sees CUDA. Run from a temporary folder, so a workspace's own `torch/` is not imported. */
export async function checkPythons(run: Exec, pythons: readonly string[], nvidiaGpus: number, timeoutMs = 90_000): Promise<Check[]> {
  const cwd = mkdtempSync(join(tmpdir(), 'gw-doctor-'));
  try {
    const checks: Check[] = [];
    const executables = new Set<string>();
    for (const py of pythons) {
      const base = { id: `python:${py}`, title: `Python ${py}` };
      const command = `$ ${py} -c "import torch; print(torch.__version__, torch.cuda.is_available(), ...)"`;
      const r = await run(py, ['-c', torchScript], { timeoutMs, cwd });
      if (r.spawnError) { checks.push({ ...base, status: 'fail', summary: `cannot be run: ${r.spawnError.message}`, evidence: [command, r.spawnError.message] }); continue; }
      if (r.timedOut) { checks.push({ ...base, status: 'fail', summary: `did not answer within ${seconds(timeoutMs)} (importing torch hangs?)`, evidence: [command, tail(r.stderr)] }); continue; }
      let d: { python?: string; version?: string; torch?: string; cudaBuild?: string | null; cuda?: boolean; devices?: string[]; nccl?: boolean; error?: string };
      try {
        d = JSON.parse(r.stdout.trim().split('\n').at(-1) ?? '') as typeof d;
      } catch {
        checks.push({ ...base, status: 'fail', summary: `exited with ${r.code ?? r.signal} without an answer`, evidence: [command, tail(`${r.stdout}\n${r.stderr}`)] });
        continue;
      }
      // `python` and `python3` are often one interpreter (pyenv shims, symlinks): report it once.
      if (d.python) {
        let real = d.python;
        try { real = realpathSync(d.python); } catch { /* as reported */ }
        if (executables.has(real)) continue;
        executables.add(real);
      }
      const evidence = [command, r.stdout.trim().split('\n').at(-1) ?? ''];
      if (d.error) { checks.push({ ...base, status: 'info', summary: `Python ${d.version}, no torch (${d.error})`, evidence, fix: 'torchrun jobs need the interpreter that has PyTorch: set it with the job\'s "python" field or --python.' }); continue; }
      const torch = `Python ${d.version}, torch ${d.torch}`;
      if (d.cuda) {
        checks.push({ ...base, status: 'ok', summary: `${torch} (CUDA ${d.cudaBuild}), torch.cuda.is_available() True, ${d.devices?.length ?? 0} device(s): ${(d.devices ?? []).join(', ')}${d.nccl ? ', NCCL' : ', no NCCL'}`, evidence, data: { ...d } });
      } else if (nvidiaGpus > 0) {
        checks.push({ ...base, status: 'warn', summary: `${torch}, torch.cuda.is_available() False although nvidia-smi lists ${nvidiaGpus} GPU(s)${d.cudaBuild ? '' : ': a CPU-only build of PyTorch'}`, evidence, data: { ...d }, fix: d.cudaBuild ? 'The CUDA build does not see the GPUs: check CUDA_VISIBLE_DEVICES and that the driver is new enough for this CUDA.' : 'Install a CUDA build of PyTorch (pip install torch with the CUDA index URL from pytorch.org).' });
      } else {
        checks.push({ ...base, status: 'ok', summary: `${torch}, CPU only (no GPU here)`, evidence, data: { ...d } });
      }
    }
    return checks;
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// One short training run per GPU

/** What `runJob` needs: the coordinator's, injected so the doctor does not pull the training host into every import. */
export type RunJob = (o: { file: string; overrides: Record<string, unknown>; onEvent: (e: JobEvent) => void }) => { finished: Promise<Extract<JobEvent, { type: 'job/done' | 'job/failed' }>>; cancel(): void };

/** The doctor's job: MLP 784-512-512-10 on MNIST digits, Adam, a fixed number of steps. */
export const stepJob = { name: 'doctor-step', model: { preset: 'mlp', hiddenUnits: [512, 512] }, data: { mnist: { trainSize: 8192, testSize: 64 } }, batchSize: 256, epochs: 1, optimizer: { name: 'adam', learningRate: 0.001 }, seed: 1, strategy: 'single', devices: [0] };

export interface StepOptions {
  /** Steps in all; the first `warmup` (kernel compilation, first allocations) are not timed. */
  readonly steps: number;
  readonly warmup: number;
  readonly timeoutMs: number;
  readonly now?: () => number;
}

/** Trains `steps` steps on one device (a GPU index, or `cpu` when there is none) with `auto` and says what the worker really ran on. */
export async function checkTrainingStep(runJob: RunJob, gpu: NvidiaGpu | undefined, o: StepOptions): Promise<Check> {
  const now = o.now ?? (() => performance.now());
  const dir = mkdtempSync(join(tmpdir(), 'gw-doctor-job-'));
  const file = join(dir, 'doctor-step.job.json');
  writeFileSync(file, JSON.stringify(stepJob, null, 2));
  const base = gpu ? { id: `train:gpu${gpu.index}`, title: `training on GPU ${gpu.index} (${gpu.name})` } : { id: 'train:cpu', title: 'training without a GPU' };
  let started: Extract<JobEvent, { type: 'job/started' }> | undefined;
  const stepTimes: number[] = [];
  try {
    const handle = runJob({
      file,
      overrides: { strategy: 'single', devices: [gpu?.index ?? 0], backend: 'auto', batchSize: stepJob.batchSize, trialSteps: o.steps },
      onEvent: (e) => {
        if (e.type === 'job/started') started = e;
        else if (e.type === 'job/step') stepTimes.push(now());
      },
    });
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => { timer = setTimeout(() => resolve('timeout'), o.timeoutMs); });
    const end = await Promise.race([handle.finished, timedOut]);
    clearTimeout(timer);
    if (end === 'timeout') {
      handle.cancel();
      await handle.finished;
      return { ...base, status: 'fail', summary: `${o.steps} steps did not finish within ${seconds(o.timeoutMs)} (${stepTimes.length} done)`, evidence: startedEvidence(started) };
    }
    const evidence = startedEvidence(started);
    if (end.type === 'job/failed') {
      return { ...base, status: 'fail', summary: `the training run failed: ${end.reason.split('\n')[0]}`, evidence: [...evidence, end.reason, ...(end.hint ? [end.hint] : [])] };
    }
    const worker = started?.workers[0];
    const timed = stepTimes.slice(o.warmup);
    const rate = timed.length >= 2 ? (stepJob.batchSize * (timed.length - 1)) / ((timed[timed.length - 1] - timed[0]) / 1000) : undefined;
    const speed = rate !== undefined ? `${Math.round(rate).toLocaleString('en-US')} samples/s` : 'too few steps to time';
    const what = `MLP 784-512-512-10, batch ${stepJob.batchSize}, Adam, ${timed.length} timed steps after ${o.warmup} warm-up`;
    const backend = `${started?.backend ?? '?'} on ${worker?.device ?? '?'}`;
    const data = { backend: started?.backend, device: worker?.device, samplesPerSecond: rate, steps: stepTimes.length };
    if (!gpu) return { ...base, status: 'ok', summary: `${backend}: ${speed} (${what})`, evidence, data };
    // A GPU the worker is not on is never reported as trained on.
    if (!worker?.device.startsWith('gpu')) {
      return { ...base, status: 'fail', summary: `trained on ${backend}, not on the GPU: ${speed}`, evidence, data, fix: 'See the backend checks above for why no GPU backend loaded (webgpu needs the Vulkan driver; tensorflow-gpu needs @tensorflow/tfjs-node-gpu with CUDA 11.2).' };
    }
    return { ...base, status: 'ok', summary: `${backend}: ${speed} (${what})`, evidence, data };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function startedEvidence(started: Extract<JobEvent, { type: 'job/started' }> | undefined): string[] {
  if (!started) return ['the worker did not start'];
  return [`job started: ${started.description}`, ...started.workers.map((w) => `rank ${w.rank} (pid ${w.pid}): backend ${w.backend}, device ${w.device}`)];
}

/** The status of a whole report in a line. */
export function verdictOf(checks: readonly Check[], gpus: readonly NvidiaGpu[]): string {
  const trains = checks.filter((c) => c.id.startsWith('train:'));
  if (trains.length === 0) return `${gpus.length === 0 ? 'No GPU here' : `${gpus.length} GPU(s) found`}; training not checked (--no-train).`;
  const failed = trains.filter((c) => c.status === 'fail');
  const bad = checks.filter((c) => c.status === 'fail' && !c.id.startsWith('train:'));
  if (gpus.length === 0) {
    const cpu = trains[0];
    const rate = cpu?.data?.samplesPerSecond;
    const speed = typeof rate === 'number' ? `, ${Math.round(rate).toLocaleString('en-US')} samples/s` : '';
    return cpu?.status === 'ok' ? `No GPU here; training runs on the CPU (${String(cpu.data?.backend)}${speed}).${bad.length ? ` ${bad.length} other check(s) failed.` : ''}` : `No GPU here, and training on the CPU failed: ${cpu?.summary ?? 'not run'}.`;
  }
  if (failed.length === 0 && trains.length === gpus.length) return `Every GPU trains (${gpus.length} of ${gpus.length}).${bad.length ? ` ${bad.length} other check(s) failed.` : ''}`;
  return `${gpus.length - failed.length} of ${gpus.length} GPUs train; ${failed.map((c) => c.title).join(', ')} did not.`;
}

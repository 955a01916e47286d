/**
 * `gpu-workbench doctor`: what this machine offers for training, each with its own evidence
 * (see src/doctor/checks.ts), then one short training run per GPU. The first thing to run on a
 * new machine. Exit code 0 when every GPU trains on a GPU backend (or, with no GPU, training on
 * the CPU works), 1 otherwise, 2 for bad options.
 */
import { cpus } from 'node:os';
import { checkBackends, checkNvidiaSmi, checkPythons, checkTrainingStep, checkWebgpuAdapters, exec, probeWith, pythonCandidates, verdictOf, type RunJob } from '../doctor/checks';
import { runProbe } from '../doctor/probe';
import { icdFiles, readIcd, type VulkanFacts } from '../doctor/vulkan';
import { exitCodeOf, renderCheck, renderHeader, type Check, type DoctorReport } from '../doctor/report';
import { runJob } from '../training/launchers/coordinator';
import { commandLineArgs, parseCommandLine, UsageError, wholeNumber } from './args';

const help = `usage: gpu-workbench doctor [--json] [--no-train] [--steps N] [--nvidia-smi PATH] [--python PATH]

Checks what this machine offers for training, each with its evidence: the NVIDIA driver and GPUs
(nvidia-smi), the WebGPU (Vulkan) adapters Dawn sees, which training backends load and why not,
every Python on PATH with its torch and torch.cuda.is_available(), then trains a few steps of an
MLP on every GPU on the best backend and prints samples/s.

options:
  --json             print the report as JSON: {"checks":[{"id","title","status","summary",
                     "evidence","fix"?,"data"?}],"verdict","exitCode",...}
  --no-train         skip the training runs
  --steps N          training steps per GPU, the first third not timed (default 30)
  --nvidia-smi PATH  the nvidia-smi to run (default: nvidia-smi on PATH)
  --python PATH      also check this Python interpreter
  -h, --help         show this help

Exit code 0 when every GPU trains on a GPU backend (with no GPU: when training on the CPU
works), 1 when a check failed, 2 for bad options.`;

interface Options {
  json: boolean;
  train: boolean;
  steps: number;
  nvidiaSmi: string;
  python: string | undefined;
  probe: string | undefined;
}

function parseArgs(argv: string[]): Options | 'help' {
  const o: Options = { json: false, train: true, steps: 30, nvidiaSmi: 'nvidia-smi', python: undefined, probe: undefined };
  for (const { arg, name, value } of commandLineArgs(argv)) {
    switch (name) {
      case '-h': case '--help': return 'help';
      case '--json': o.json = true; break;
      case '--no-train': o.train = false; break;
      case '--steps': o.steps = wholeNumber(value(), name, 3); break;
      case '--nvidia-smi': o.nvidiaSmi = value(); break;
      case '--python': o.python = value(); break;
      case '--probe': o.probe = value(); break;
      default: throw new UsageError(`unknown option '${arg}'`);
    }
  }
  return o;
}

export async function run(argv: string[]): Promise<number> {
  const o = parseCommandLine('doctor', help, () => parseArgs(argv));
  if (typeof o === 'number') return o;
  if (o.probe !== undefined) {
    process.stdout.write(`${JSON.stringify(await runProbe(o.probe))}\n`);
    return 0;
  }
  const opts = o;
  const checks: Check[] = [];
  // In a terminal, each check as it ends: the training runs take a while.
  const add = (...cs: Check[]) => {
    checks.push(...cs);
    if (!opts.json) for (const c of cs) process.stdout.write(`${renderCheck(c)}\n`);
  };
  const report = (): DoctorReport => ({
    version: 1,
    takenAt: new Date().toISOString(),
    host: { platform: process.platform, arch: process.arch, node: process.versions.node, cpus: cpus().length },
    checks,
    verdict: '',
    exitCode: exitCodeOf(checks),
  });
  if (!opts.json) process.stdout.write(`${renderHeader(report())}\n\n`);
  const probe = probeWith([process.execPath, process.argv[1], 'doctor']);
  const nvidia = await checkNvidiaSmi(exec, opts.nvidiaSmi);
  add(nvidia.check);
  add(await checkWebgpuAdapters(probe, nvidia.gpus.length, undefined, vulkanFacts));
  add(...await checkBackends(probe));
  add(...await checkPythons(exec, pythonCandidates(opts.python), nvidia.gpus.length));
  if (opts.train) {
    const step = { steps: opts.steps, warmup: Math.floor(opts.steps / 3), timeoutMs: 300_000 };
    const jobs = runJob as unknown as RunJob;
    if (nvidia.gpus.length === 0) add(await checkTrainingStep(jobs, undefined, step));
    for (const gpu of nvidia.gpus) add(await checkTrainingStep(jobs, gpu, step));
  }
  const final: DoctorReport = { ...report(), verdict: verdictOf(checks, nvidia.gpus) };
  if (opts.json) process.stdout.write(`${JSON.stringify(final, null, 2)}\n`);
  else process.stdout.write(`\n${final.verdict}\n`);
  return final.exitCode;
}

/** What the dynamic loader and the Vulkan loader would find here (src/doctor/vulkan.ts). */
async function vulkanFacts(): Promise<VulkanFacts> {
  let ldconfig: string | undefined;
  for (const file of ['/sbin/ldconfig', 'ldconfig']) {
    const r = await exec(file, ['-p'], { timeoutMs: 10_000 });
    if (r.code === 0) {
      ldconfig = r.stdout;
      break;
    }
  }
  return { ...(ldconfig !== undefined ? { ldconfig } : {}), icds: icdFiles().map((f) => readIcd(f)), libraryPath: (process.env.LD_LIBRARY_PATH ?? '').split(':').filter(Boolean) };
}

/**
 * Command trials under the Python companion (python/gpu_workbench, issue #15 item 5): a trial whose
 * command runs a Python script (`python train.py ...`, `torchrun ... train.py ...`) runs it as
 * `python -m gpu_workbench.run train.py ...` (torchrun: `-m gpu_workbench.run` before the script),
 * with the companion on PYTHONPATH and its channel in the environment. Over the channel come the
 * script's `gpu_workbench.report(...)` metrics (a trial's reports, as `::report::` lines are), its
 * memory after every optimizer step (folded here into the trial's peak), and an uncaught
 * out-of-memory error (the trial ends "out of memory", with its batch size).
 *
 * Pure: no process and no socket here (experiment.ts runs the trial and owns its channel).
 */
import { basename } from 'node:path';
import type { CpuStepMemory, CudaStepMemory, RankIdentity } from '../common/companionProtocol';
import type { TrialMemory, TrialOutOfMemory } from '../common/tuningProtocol';

export type CompanionCommand =
  | { readonly wrapped: true; readonly args: readonly string[] }
  /** `note`: why a Python command could not be wrapped (absent for a program that is not Python). */
  | { readonly wrapped: false; readonly args: readonly string[]; readonly note?: string };

const pythonProgram = /^python(\d+(\.\d+)*)?w?(\.exe)?$/i;
const torchrunProgram = /^torchrun(\.exe)?$/i;
/** torchrun's options that take no value (torch 1.13 to 2.x); every other option takes one. */
const torchrunFlags = new Set(['--standalone', '--no-python', '--no_python', '--module', '-m', '--run-path', '--run_path', '--virtual-local-rank', '--virtual_local_rank', '-h', '--help']);
const companionModule = ['-m', 'gpu_workbench.run'];

function torchrunArgs(args: readonly string[], from: number): CompanionCommand {
  for (let i = from; i < args.length; i++) {
    const a = args[i];
    if (a === '-m' || a === '--module' || a === '--no-python' || a === '--no_python' || a === '--run-path' || a === '--run_path') {
      return { wrapped: false, args, note: `torchrun ${a} runs no script file the companion could run` };
    }
    if (a === '-h' || a === '--help') return { wrapped: false, args };
    if (a.startsWith('-')) {
      if (!a.includes('=') && !torchrunFlags.has(a)) i++; // its value
      continue;
    }
    return { wrapped: true, args: [...args.slice(0, i), ...companionModule, ...args.slice(i)] };
  }
  return { wrapped: false, args, note: 'torchrun names no script' };
}

/**
 * The trial's command with the companion in it: `python [options] script.py args` gets
 * `-m gpu_workbench.run` before the script, as do `torchrun [options] script.py args` and
 * `python -m torch.distributed.run ...`. Anything else runs as it is (`wrapped: false`).
 */
export function companionCommand(args: readonly string[]): CompanionCommand {
  if (args.length === 0) return { wrapped: false, args };
  const program = basename(args[0]);
  if (torchrunProgram.test(program)) return torchrunArgs(args, 1);
  if (!pythonProgram.test(program)) return { wrapped: false, args };
  for (let i = 1; i < args.length; i++) {
    const a = args[i];
    if (a === '--') return i + 1 < args.length ? { wrapped: true, args: [...args.slice(0, i + 1), ...companionModule, ...args.slice(i + 1)] } : { wrapped: false, args };
    if (a === '-') return { wrapped: false, args, note: 'python - reads its script from stdin' };
    if (a.startsWith('--')) {
      if (a === '--check-hash-based-pycs') i++;
      else if (a !== '--check-hash-based-pycs' && /^--(help|version)/.test(a)) return { wrapped: false, args };
      continue;
    }
    if (a.startsWith('-')) {
      // Single-letter options, several in one word (-uB); c, m, W and X take the rest of the word or the next one.
      for (let k = 1; k < a.length; k++) {
        const letter = a[k];
        if (letter === 'c') return { wrapped: false, args, note: 'python -c runs no script file the companion could run' };
        if (letter === 'm') {
          const module = k + 1 < a.length ? a.slice(k + 1) : args[i + 1];
          const next = k + 1 < a.length ? i + 1 : i + 2;
          if (module === 'torch.distributed.run' || module === 'torch.distributed.launch') return torchrunArgs(args, next);
          return { wrapped: false, args, note: `python -m ${module ?? ''} runs a module, not a script file the companion could run` };
        }
        if (letter === 'W' || letter === 'X') {
          if (k + 1 === a.length) i++;
          break;
        }
      }
      continue;
    }
    return { wrapped: true, args: [...args.slice(0, i), ...companionModule, ...args.slice(i)] };
  }
  return { wrapped: false, args };
}

/**
 * The trial's batch size: the config's one whole-number parameter named batch_size, batchSize,
 * batch-size, batch or bs (at any depth, any case); undefined when there is none or several.
 */
export function configBatchSize(config: Readonly<Record<string, unknown>>): number | undefined {
  const found: number[] = [];
  const walk = (obj: Readonly<Record<string, unknown>>): void => {
    for (const [key, value] of Object.entries(obj)) {
      const name = key.toLowerCase().replace(/[_-]/g, '');
      if ((name === 'batchsize' || name === 'batch' || name === 'bs') && Number.isSafeInteger(value) && (value as number) >= 1) found.push(value as number);
      else if (typeof value === 'object' && value !== null && !Array.isArray(value)) walk(value as Record<string, unknown>);
    }
  };
  walk(config);
  return found.length === 1 ? found[0] : undefined;
}

/** torch's words for running out of memory, in a trial's stderr (a script run without the companion). */
const outOfMemoryWords = /OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|HIP out of memory|DefaultCPUAllocator: (?:can't allocate memory|not enough memory)|^MemoryError\b/;

/** The out-of-memory error among a trial's last stderr lines, if one is there. */
export function outOfMemoryInText(lines: readonly string[]): { device: TrialOutOfMemory['device']; message: string } | undefined {
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = lines[i].trim();
    if (!outOfMemoryWords.test(line)) continue;
    const device = /CUDA|HIP|OutOfMemoryError/.test(line) ? 'cuda' : /DefaultCPUAllocator/.test(line) ? 'cpu' : 'unknown';
    return { device, message: line.slice(0, 500) };
  }
  return undefined;
}

/** Folds the companion's `memory` messages of one trial (all its processes) into its peak. */
export class TrialMemoryPeak {
  private cuda = false;
  private allocated = 0;
  private reserved = 0;
  private rss = 0;
  private steps = 0;
  private readonly ranks = new Set<number>();

  /** A record after an optimizer step (`step`), or at an out-of-memory failure (no step); true when the peak (or the step count) changed. */
  add(m: RankIdentity & { readonly step?: number } & (CudaStepMemory | CpuStepMemory)): boolean {
    const before = JSON.stringify(this.value());
    this.ranks.add(m.rank);
    this.steps = Math.max(this.steps, m.step ?? 0);
    if (m.kind === 'cuda') {
      this.cuda = true;
      this.allocated = Math.max(this.allocated, m.peakAllocatedBytes, m.allocatedBytes);
      this.reserved = Math.max(this.reserved, m.reservedBytes);
    } else {
      this.rss = Math.max(this.rss, m.peakRssBytes, m.rssBytes);
    }
    return JSON.stringify(this.value()) !== before;
  }

  value(): TrialMemory | undefined {
    if (this.ranks.size === 0) return undefined;
    return this.cuda
      ? { device: 'cuda', peakAllocatedBytes: this.allocated, peakReservedBytes: this.reserved, processes: this.ranks.size, steps: this.steps }
      : { device: 'cpu', peakRssBytes: this.rss, processes: this.ranks.size, steps: this.steps };
  }
}

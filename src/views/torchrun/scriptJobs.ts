/**
 * "Run with torchrun…" and "Create Tune Spec…" on a PyTorch script, their pure parts (no
 * `vscode`, unit-tested in Node): where the new job file or tune spec goes (next to the script),
 * their text, and the interpreter pick's items from what each Python's torch says
 * (`checkPythons` of the doctor). `runWithTorchrun.ts` asks the questions and writes the files.
 */
import { basename, dirname, join } from 'node:path';
import type { Check } from '../../doctor/report';
import { interpreterText, type InterpreterChoice } from './torchrunFormat';

/** `…/train.py` → `…/train.job.json`, next to the script. */
export function torchrunJobPath(script: string): string {
  return join(dirname(script), `${scriptStem(script)}.job.json`);
}

/** `…/train.py` → `…/train.tune.json`, next to the script. */
export function tuneSpecPath(script: string): string {
  return join(dirname(script), `${scriptStem(script)}.tune.json`);
}

/** The script's name without `.py`: the job's and the experiment's name. */
export function scriptStem(script: string): string {
  return basename(script).replace(/\.py$/i, '') || 'train';
}

/** Whether a path is a Python script the commands take. */
export function isPythonScript(path: string): boolean {
  return /\.py$/i.test(path);
}

export interface TorchrunJobOptions {
  /** The script (absolute, or as it should appear): the job names it relative to its own folder. */
  readonly script: string;
  /** A count of CPU processes, or the GPUs to run on (one process each, `CUDA_VISIBLE_DEVICES`). */
  readonly processes: number | readonly number[];
  /** The interpreter with torch; written into the job, so the job runs the same from the CLI. */
  readonly python: string;
  readonly args?: readonly string[];
}

/**
 * A torchrun job file (`schemas/job.schema.json`, loaded by `loadTorchrunJob`) for the script:
 * `nprocPerNode` for CPU processes, `devices` for GPUs (one process each).
 */
export function torchrunJobText(o: TorchrunJobOptions): string {
  if (typeof o.processes === 'number' && !(Number.isInteger(o.processes) && o.processes >= 1)) throw new RangeError(`processes must be a whole number of at least 1, got ${o.processes}`);
  if (typeof o.processes !== 'number' && o.processes.length === 0) throw new RangeError('no GPU given: pick at least one');
  const job = {
    name: scriptStem(o.script),
    kind: 'torchrun',
    script: basename(o.script),
    args: [...(o.args ?? [])],
    ...(typeof o.processes === 'number' ? { nprocPerNode: o.processes } : { devices: [...o.processes] }),
    python: o.python,
  };
  return `${JSON.stringify(job, null, 2)}\n`;
}

/**
 * A tune spec over the script (`schemas/tune.schema.json`): each trial runs the script with the
 * config as `--lr` and `--batch-size` (also in GPU_WORKBENCH_CONFIG), and the script reports its
 * loss with `::report::{"loss": …}` lines; ASHA stops the
 * trials that fall behind. A starting point to edit: the names of the arguments are the script's.
 */
export function tuneSpecText(script: string, python: string): string {
  const spec = {
    name: scriptStem(script),
    space: {
      lr: { loguniform: [1e-4, 1e-1] },
      batch_size: { choice: [32, 64, 128] },
    },
    search: { algorithm: 'tpe', seed: 1 },
    metric: 'loss',
    mode: 'min',
    numSamples: 12,
    maxConcurrent: 2,
    scheduler: { type: 'asha', maxT: 10, gracePeriod: 1, reductionFactor: 3 },
    trial: { command: [python, basename(script), '--lr', '${config.lr}', '--batch-size', '${config.batch_size}'] },
  };
  return `${JSON.stringify(spec, null, 2)}\n`;
}

export interface InterpreterItem {
  readonly label: string;
  readonly description: string;
  readonly detail?: string;
  readonly python: string;
  /** Whether its torch imports (the doctor's check passed or warned). */
  readonly hasTorch: boolean;
}

/**
 * The interpreter pick: every candidate with what its torch said (`checks`, by the doctor's
 * `python:<path>` ids; a candidate the doctor left out was the same interpreter as one before it),
 * those with torch first; among equals the chosen one (the setting, the Python extension's, or
 * the default) first, with where it came from.
 */
export function interpreterItems(chosen: InterpreterChoice, candidates: readonly string[], checks: readonly Check[]): InterpreterItem[] {
  const byId = new Map(checks.map((c) => [c.id, c]));
  const items: InterpreterItem[] = [];
  for (const python of [chosen.python, ...candidates.filter((c) => c !== chosen.python)]) {
    const check = byId.get(`python:${python}`);
    if (!check) continue;
    const hasTorch = check.status === 'ok' || check.status === 'warn';
    items.push({
      label: python,
      description: hasTorch ? check.summary : `${check.summary}: cannot run torchrun`,
      ...(python === chosen.python ? { detail: interpreterText(chosen) } : {}),
      python,
      hasTorch,
    });
  }
  return [...items.filter((i) => i.hasTorch), ...items.filter((i) => !i.hasTorch)];
}

/**
 * `gpu-workbench tune SPEC.json`: runs a hyperparameter search from a tune spec, with a live
 * table like Ray Tune's CLIReporter (redrawn on a terminal, printed every few seconds otherwise)
 * and the best trial at the end; `--json` prints the events instead, one per line.
 */
import { appendFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { formatBytes, outOfMemoryStatus, type TrialMemory } from '../common/tuningProtocol';
import { sampleOnce } from '../gpu/monitor';
import type { TuneEvent } from '../tuning/events';
import { Experiment, ExperimentError, type TrialView } from '../tuning/experiment';
import { formatValue } from '../tuning/space';
import { loadSpec, SpecError, type TuneSpec } from '../tuning/spec';
import { commandLineArgs, parseCommandLine, UsageError, wholeNumber } from './args';

const help = `usage: gpu-workbench tune SPEC.json [--json] [--resume] [--name NAME] [--gpus N]

Runs the trials of a tune spec (*.tune.json): each trial is the spec's command with the config in
GPU_WORKBENCH_CONFIG and \${config.<name>} placeholders, reporting lines such as
::report::{"loss": 0.42} on stdout. A command that runs a Python script (python3 train.py,
torchrun train.py) runs it under the companion: gpu_workbench.report(...) reports, the table
shows each trial's peak memory, and a trial that runs out of memory reads
OUT OF MEMORY (batch size N). The journal and each trial's output (trial_<n>.log) go to
.gpu-workbench/experiments/<name>/ under the current folder.

options:
  --json         print the events as JSON, one per line and nothing else on stdout (no
                 table); the last is
                 {"type":"experiment/done","best":{"trialId","config","metric"},...}
  --resume       continue the experiment's journal: finished trials are kept, trials that
                 were running are run again, the search carries on where it was
  --name NAME    the experiment's name (default: the spec's "name", else its file name)
  --gpus N       GPUs to share out (default: as many as nvidia-smi / rocm-smi report)
  --interval S   without a terminal and without --json: print the table every S seconds
                 (default 5)
  -h, --help     show this help

Ctrl-C stops every trial (SIGTERM, then SIGKILL after stopGraceSeconds); --resume re-runs them.
Exit code 0 when the experiment ran to its end, 1 when it could not run or every trial failed,
2 for bad options or a bad spec, 130 when stopped.`;

interface Options { spec: string; json: boolean; resume: boolean; name?: string; gpus?: number; intervalS: number }

function parseArgs(argv: string[]): Options | 'help' {
  let spec: string | undefined;
  const o: Partial<Options> = { json: false, resume: false, intervalS: 5 };
  for (const { arg, name, value } of commandLineArgs(argv)) {
    switch (name) {
      case '-h': case '--help': return 'help';
      case '--json': o.json = true; break;
      case '--resume': o.resume = true; break;
      case '--name': o.name = value(); break;
      case '--gpus': o.gpus = wholeNumber(value(), name); break;
      case '--interval': {
        const v = Number(value());
        if (!(v > 0)) throw new UsageError('--interval expects a positive number of seconds');
        o.intervalS = v;
        break;
      }
      default:
        if (arg.startsWith('-')) throw new UsageError(`unknown option '${arg}'`);
        if (spec !== undefined) throw new UsageError(`one spec at a time (got '${spec}' and '${arg}')`);
        spec = arg;
    }
  }
  if (spec === undefined) throw new UsageError('missing SPEC.json');
  return { ...(o as Options), spec };
}

const statusWord: Record<TrialView['status'], string> = {
  pending: 'PENDING', running: 'RUNNING', done: 'TERMINATED', stopped: 'STOPPED', failed: 'ERROR', interrupted: 'INTERRUPTED',
};

/** The status table, as Ray's CLIReporter lays it out. */
export function renderTable(spec: TuneSpec, name: string, total: number, trials: readonly TrialView[], maxRows = 20): string {
  const counts = new Map<string, number>();
  const word = (t: TrialView): string => (t.status === 'stopped' && t.stopReason === 'maxT' ? 'TERMINATED' : t.outOfMemory ? 'OUT OF MEMORY' : statusWord[t.status]);
  const statusCell = (t: TrialView): string => (t.outOfMemory ? outOfMemoryStatus(t.outOfMemory).toUpperCase().replace('(BATCH SIZE', '(batch size') : word(t));
  for (const t of trials) counts.set(word(t), (counts.get(word(t)) ?? 0) + 1);
  const withMemory = trials.some((t) => t.memory);
  const paramNames = spec.space.dims.filter((d) => d.kind !== 'grid' || d.size > 1).map((d) => d.path);
  const flat = trials.map((t) => spec.space.flatConfig(t.params));
  const shownParams = paramNames.filter((p) => flat.some((f) => p in f));
  const timeAttr = spec.scheduler.type === 'asha' ? spec.scheduler.timeAttr : 'training_iteration';
  const header = ['Trial name', 'status', ...shownParams, 'iter', spec.metric, ...(withMemory ? ['peak memory'] : [])];
  const metricOf = (t: TrialView): unknown => t.reports[t.reports.length - 1]?.[spec.metric];
  let rows = trials.map((t, i) => {
    const last = t.reports[t.reports.length - 1];
    const m = metricOf(t);
    return [`trial_${String(t.trialId).padStart(5, '0')}`, statusCell(t), ...shownParams.map((p) => (p in flat[i] ? formatValue(flat[i][p]) : '')),
      last ? formatValue(last[timeAttr] ?? t.reports.length) : '', typeof m === 'number' ? formatValue(m) : '', ...(withMemory ? [t.memory ? memoryCell(t.memory) : ''] : [])];
  });
  let more = '';
  if (rows.length > maxRows) {
    // Keep the running trials and the most recent ones, as Ray trims its table.
    const running = rows.filter((r) => r[1] === 'RUNNING');
    const rest = rows.filter((r) => r[1] !== 'RUNNING').slice(-(Math.max(0, maxRows - running.length)));
    more = `... ${rows.length - running.length - rest.length} more trials not shown`;
    rows = [...rest, ...running].sort((a, b) => a[0].localeCompare(b[0]));
  }
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c].length)));
  const numeric = header.map((_, c) => c >= 2 && rows.every((r) => r[c] === '' || !Number.isNaN(Number(r[c]))));
  const line = (cells: string[]): string => `| ${cells.map((x, c) => (numeric[c] ? x.padStart(widths[c]) : x.padEnd(widths[c]))).join(' | ')} |`;
  const rule = (ch: string): string => `+${widths.map((w) => ch.repeat(w + 2)).join('+')}+`;
  const best = bestLine(spec, trials);
  const summary = [...counts.entries()].map(([k, v]) => `${v} ${k}`).join(', ');
  return [
    '== Status ==',
    `Experiment ${name}: ${trials.length}/${total} trials${summary ? ` (${summary})` : ''}`,
    ...(best ? [best] : []),
    rule('-'), line(header), rule('-'), ...rows.map(line), rule('-'),
    ...(more ? [more] : []),
  ].join('\n');
}

/** A trial's peak memory in a cell: `1.2 GiB allocated / 1.5 GiB reserved` on CUDA, `312.4 MiB RSS` on a CPU. */
function memoryCell(m: TrialMemory): string {
  return m.device === 'cuda' ? `${formatBytes(m.peakAllocatedBytes)} allocated / ${formatBytes(m.peakReservedBytes)} reserved` : `${formatBytes(m.peakRssBytes)} RSS`;
}

function bestLine(spec: TuneSpec, trials: readonly TrialView[]): string | null {
  let best: { t: TrialView; m: number } | null = null;
  for (const t of trials) {
    if (t.status !== 'done' && t.status !== 'stopped') continue;
    const m = t.reports[t.reports.length - 1]?.[spec.metric];
    if (typeof m !== 'number' || Number.isNaN(m)) continue;
    if (!best || (spec.mode === 'min' ? m < best.m : m > best.m)) best = { t, m };
  }
  return best ? `Current best trial: trial_${String(best.t.trialId).padStart(5, '0')} with ${spec.metric}=${formatValue(best.m)} and params=${JSON.stringify(best.t.config)}` : null;
}

async function gpuCount(): Promise<{ count: number; note?: string }> {
  try {
    const s = await sampleOnce({ intervalMs: 500, timeoutMs: 5000 });
    return { count: s.devices.length, note: s.devices.length ? undefined : s.error };
  } catch (err) {
    return { count: 0, note: (err as Error).message };
  }
}

export async function run(argv: string[]): Promise<number> {
  const o = parseCommandLine('tune', help, () => parseArgs(argv));
  if (typeof o === 'number') return o;
  let spec: TuneSpec;
  try {
    spec = loadSpec(o.spec);
  } catch (err) {
    if (err instanceof SpecError) {
      process.stderr.write(`gpu-workbench tune: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const gpus = o.gpus !== undefined ? { count: o.gpus } : await gpuCount();
  let experiment: Experiment;
  try {
    experiment = new Experiment({
      spec, workspace: process.cwd(), name: o.name, resume: o.resume, gpuCount: gpus.count,
      // Each trial's output goes to its log file (the experiment writes those); its own warnings to experiment.log.
      output: (trialId, text) => {
        if (trialId !== 0) return;
        mkdirSync(experiment.dir, { recursive: true });
        appendFileSync(join(experiment.dir, 'experiment.log'), text);
      },
    });
  } catch (err) {
    if (err instanceof ExperimentError) {
      process.stderr.write(`gpu-workbench tune: ${err.message}\n`);
      return 1;
    }
    throw err;
  }

  const tty = !o.json && process.stdout.isTTY === true;
  let drawnLines = 0;
  const draw = (): void => {
    const table = renderTable(spec, experiment.name, experiment.total, experiment.trialViews());
    if (tty) {
      const clear = drawnLines ? `\x1b[${drawnLines}F\x1b[J` : '';
      process.stdout.write(`${clear}${table}\n`);
      drawnLines = table.split('\n').length;
    } else process.stdout.write(`${table}\n\n`);
  };
  let pending: NodeJS.Timeout | null = null;
  // Without a terminal the table is printed every few seconds; with --json stdout is JSON lines
  // for jq or a file, so the table is not printed at all (the events say the same).
  const timer = tty || o.json ? null : setInterval(draw, o.intervalS * 1000);
  timer?.unref();
  experiment.onEvent((e: TuneEvent) => {
    if (o.json) {
      process.stdout.write(`${JSON.stringify(e)}\n`);
      return;
    }
    if (e.type === 'experiment/started') {
      process.stdout.write(`Experiment ${e.name}${e.resumed ? ' (resumed)' : ''}: ${e.totalTrials} trials, up to ${e.maxConcurrent} at once on ${e.gpus ? `${e.gpus} GPU${e.gpus === 1 ? '' : 's'}` : 'CPU (no GPU found)'}\n`);
      process.stdout.write(`Journal and trial logs: ${e.dir}\n`);
      if (!e.gpus && gpus.note && o.gpus === undefined) process.stdout.write(`(${gpus.note})\n`);
    }
    if (tty && !pending) pending = setTimeout(() => { pending = null; draw(); }, 200);
  });

  let signalled: NodeJS.Signals | null = null;
  const onSignal = (sig: NodeJS.Signals): void => {
    if (signalled) return;
    signalled = sig;
    if (!o.json) process.stderr.write(`\ngpu-workbench tune: ${sig}: stopping every trial (run again with --resume to continue)\n`);
    void experiment.stop();
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const s of signals) process.on(s, onSignal);
  try {
    const best = await experiment.run();
    if (pending) clearTimeout(pending);
    if (timer) clearInterval(timer);
    if (!o.json) {
      draw();
      if (best) process.stdout.write(`\nBest trial: trial_${String(best.trialId).padStart(5, '0')} with ${spec.metric}=${formatValue(best.metric)}\nBest config: ${JSON.stringify(best.config)}\n`);
      else process.stdout.write('\nNo trial reported the metric; see the trial logs.\n');
    }
    if (signalled) return 130;
    const views = experiment.trialViews();
    return views.length > 0 && views.every((t) => t.status === 'failed') ? 1 : 0;
  } catch (err) {
    if (err instanceof ExperimentError) {
      process.stderr.write(`gpu-workbench tune: ${err.message}\n`);
      return 1;
    }
    throw err;
  } finally {
    for (const s of signals) process.off(s, onSignal);
    if (timer) clearInterval(timer);
  }
}

/**
 * The Runs view's rows, from run records (runRecord.ts) and experiment journals, without `vscode`:
 * what each row says, its icon and the actions it offers (its `contextValue`), newest first.
 */
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { readJournal } from '../../tuning/journal';
import type { RunRecord, RunStatus } from '../../training/job/runRecord';
import { metricsText } from '../../training/launchers/scriptMetrics';

/** What a row shows of a run's state: `interrupted` is a `running` record whose process is gone. */
export type RowStatus = RunStatus | 'interrupted' | 'unfinished';

/** A tuning experiment as its journal tells it. */
export interface ExperimentSummary {
  readonly name: string;
  /** The experiment's folder (`.gpu-workbench/experiments/<name>`). */
  readonly dir: string;
  readonly startedAt: number;
  readonly endedAt?: number;
  readonly status: 'done' | 'cancelled' | 'unfinished';
  readonly trials: number;
  readonly totalTrials?: number;
  readonly failed: number;
  readonly metric?: string;
  readonly best?: { readonly trialId: number; readonly metric: number };
}

export interface RunRow {
  readonly kind: 'training' | 'torchrun' | 'experiment';
  /** The record's id, or the experiment's folder. */
  readonly key: string;
  readonly label: string;
  readonly description: string;
  /** Markdown-free lines for the tooltip and the row's children. */
  readonly details: readonly string[];
  readonly status: RowStatus;
  /** A codicon id. */
  readonly icon: string;
  /** `run` / `experiment`, then one `.can-<action>` per action the row offers: stop, resume, checkpoint, rerun, log, results. */
  readonly contextValue: string;
  readonly startedAt: number;
}

const icons: Record<RowStatus, string> = { running: 'sync~spin', done: 'pass', failed: 'error', cancelled: 'circle-slash', interrupted: 'debug-disconnect', unfinished: 'debug-pause' };

/** 2.5 s, 3 min 20 s, 1 h 05 min. */
export function durationText(ms: number): string {
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} min`;
}

/** Where a run really ran: `ddp · wasm · cpu ×2` or `torchrun · PyTorch · gpu:0, gpu:1`. */
export function whereText(r: RunRecord): string {
  const devices = r.devices ?? [];
  const same = devices.length > 1 && devices.every((d) => d === devices[0]);
  const devicesText = devices.length === 0 ? '' : same ? `${devices[0]} ×${devices.length}` : devices.join(', ');
  return [r.strategy, r.backend, devicesText].filter(Boolean).join(' · ');
}

/** The metrics of a run for people: a training job's under their usual names, a script's as it named them. */
export function runMetricsText(r: RunRecord): string {
  if (r.kind === 'torchrun') return metricsText(r.metrics);
  const m = r.metrics;
  const parts: Record<string, number> = {};
  if (m.testAccuracy !== undefined) parts.test_acc = m.testAccuracy;
  if (m.testLoss !== undefined) parts.test_loss = m.testLoss;
  if (m.trainLoss !== undefined) parts.loss = m.trainLoss;
  return metricsText(parts);
}

/**
 * A run's row in Compare Curves…'s pick: the name is the label, so the description is what tells
 * runs of one job apart: status, when it started, its final metrics.
 */
export function comparePickItem(r: RunRecord): { label: string; description: string } {
  const started = Date.parse(r.startedAt);
  return { label: r.name, description: [r.status, Number.isFinite(started) ? new Date(started).toLocaleString() : undefined, runMetricsText(r)].filter(Boolean).join(' · ') };
}

export function recordRow(r: RunRecord, now: number, processGone: (r: RunRecord) => boolean, ownedHere = false): RunRow {
  const status: RowStatus = r.status === 'running' && !ownedHere && processGone(r) ? 'interrupted' : r.status;
  const started = Date.parse(r.startedAt);
  const ended = r.endedAt ? Date.parse(r.endedAt) : status === 'running' ? now : undefined;
  const duration = ended !== undefined && Number.isFinite(started) ? durationText(Math.max(0, ended - started)) : undefined;
  const metrics = runMetricsText(r);
  const where = whereText(r);
  const epochs = r.kind === 'training' && r.epochs !== undefined ? `epoch ${r.epochsDone ?? 0}/${r.epochs}` : undefined;
  const statusText = status === 'running' ? `running${epochs ? ` · ${epochs}` : ''}` : status;
  const actions = ['log', 'rerun'];
  if (status === 'running') actions.push('stop');
  if (r.checkpointDir) actions.push('checkpoint');
  if (r.kind === 'training' && r.checkpointDir && r.checkpointEpoch !== undefined && status !== 'running' && status !== 'done') actions.push('resume');
  if (status !== 'running') actions.push('delete');
  const details = [
    `${r.kind === 'torchrun' ? 'torchrun job' : 'training job'} ${r.name}: ${statusText}${r.resumed ? ' (resumed)' : ''}`,
    ...(where ? [`ran on: ${where}`] : []),
    `started ${new Date(started).toLocaleString()}${duration ? `, ${status === 'running' ? 'for' : 'took'} ${duration}` : ''}`,
    ...(epochs && status !== 'running' ? [epochs] : []),
    ...(metrics ? [`metrics: ${metrics}`] : []),
    ...(r.reason ? [`${status === 'failed' ? 'failed' : 'why'}: ${r.reason}`] : []),
    ...(status === 'interrupted' ? [`its process (pid ${r.pid}) is gone without a word: the run was cut off`] : []),
    ...(r.checkpointDir ? [`checkpoints: ${r.checkpointDir}${r.checkpointEpoch !== undefined ? ` (last after epoch ${r.checkpointEpoch})` : ''}`] : []),
    `job file: ${r.file}`,
  ];
  return {
    kind: r.kind, key: r.id, label: r.name,
    description: [statusText === status ? status : statusText, duration, metrics].filter(Boolean).join(' · '),
    details, status, icon: icons[status], contextValue: ['run', ...actions.map((a) => `can-${a}`)].join('.'), startedAt: started,
  };
}

export function experimentRow(e: ExperimentSummary): RunRow {
  const trials = `${e.trials}${e.totalTrials !== undefined ? `/${e.totalTrials}` : ''} trials${e.failed ? ` (${e.failed} failed)` : ''}`;
  const best = e.best && e.metric ? `best ${e.metric} ${metricsText({ [e.metric]: e.best.metric }).slice(e.metric.length + 1)} (trial ${e.best.trialId})` : undefined;
  const duration = e.endedAt !== undefined ? durationText(e.endedAt - e.startedAt) : undefined;
  return {
    kind: 'experiment', key: e.dir, label: e.name,
    description: [e.status, trials, best].filter(Boolean).join(' · '),
    details: [
      `tuning experiment ${e.name}: ${e.status}`,
      `started ${new Date(e.startedAt).toLocaleString()}${duration ? `, took ${duration}` : ''}`,
      trials,
      ...(best ? [best] : []),
      `journal: ${join(e.dir, 'journal.jsonl')}`,
    ],
    status: e.status, icon: icons[e.status], contextValue: e.status === 'unfinished' ? 'experiment.can-results' : 'experiment.can-results.can-delete', startedAt: e.startedAt,
  };
}

/** The experiments under `<workspace>/.gpu-workbench/experiments`, each from its journal; one that cannot be read is skipped with why. */
export function readExperiments(root: string): { experiments: ExperimentSummary[]; skipped: { file: string; reason: string }[] } {
  let names: string[];
  try {
    names = readdirSync(root);
  } catch {
    return { experiments: [], skipped: [] };
  }
  const experiments: ExperimentSummary[] = [];
  const skipped: { file: string; reason: string }[] = [];
  for (const name of names) {
    const dir = join(root, name);
    const file = join(dir, 'journal.jsonl');
    let records;
    try {
      if (!statSync(file).isFile()) continue;
      records = readJournal(file).records;
    } catch {
      continue; // not an experiment folder
    }
    const header = records[0];
    if (header?.type !== 'journal/header') {
      skipped.push({ file, reason: 'it does not start with a journal header' });
      continue;
    }
    let totalTrials: number | undefined;
    let endedAt: number | undefined;
    let status: ExperimentSummary['status'] = 'unfinished';
    let best: ExperimentSummary['best'];
    const trials = new Set<number>();
    const failed = new Set<number>();
    for (const r of records) {
      switch (r.type) {
        case 'experiment/started': totalTrials = r.totalTrials; break;
        case 'trial/started': trials.add(r.trialId); failed.delete(r.trialId); break;
        case 'trial/failed': failed.add(r.trialId); break;
        case 'experiment/done':
          endedAt = r.at;
          status = r.stopped ? 'cancelled' : 'done';
          best = r.best ? { trialId: r.best.trialId, metric: r.best.metric } : undefined;
          break;
        default: break;
      }
    }
    const metric = typeof header.spec.metric === 'string' ? header.spec.metric : undefined;
    experiments.push({ name: header.name, dir, startedAt: header.at, ...(endedAt !== undefined ? { endedAt } : {}), status, trials: trials.size, ...(totalTrials !== undefined ? { totalTrials } : {}), failed: failed.size, ...(metric ? { metric } : {}), ...(best ? { best } : {}) });
  }
  return { experiments, skipped };
}

/** Every row, newest first. */
export function runRows(records: readonly RunRecord[], experiments: readonly ExperimentSummary[], now: number, processGone: (r: RunRecord) => boolean, ownedHere: (id: string) => boolean = () => false): RunRow[] {
  return [...records.map((r) => recordRow(r, now, processGone, ownedHere(r.id))), ...experiments.map(experimentRow)].sort((a, b) => b.startedAt - a.startedAt);
}

/** Whether a process's arguments are those of `gpu-workbench train` (the CLI script, then `train`): the only process of a run the view may signal. */
export function isTrainCommandLine(args: readonly string[]): boolean {
  const cli = args.findIndex((a) => /(?:^|[/\\])(?:cli\.js|gpu-workbench)$/.test(a));
  return cli >= 0 && args[cli + 1] === 'train';
}

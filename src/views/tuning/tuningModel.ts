/**
 * The tuning layer's pure parts (no `vscode` import, unit-tested in Node): trial task names, and
 * the results model that folds an experiment's events, live or replayed from its journal, into
 * the rows the results page draws.
 */
import { join } from 'node:path';
import { compactValue, type ResultsExperiment, type ResultsParam, type ResultsTrial, type TrialMemory, type TrialOutOfMemory } from '../../common/tuningProtocol';
import type { TuneEvent } from '../../tuning/events';
import { legacyTrialLog, type TrialView } from '../../tuning/experiment';
import type { JournalRecord } from '../../tuning/journal';
import type { Config, Params } from '../../tuning/space';
import type { TuneSpec } from '../../tuning/spec';

/**
 * `Trial 7 · lr=3.2e-3 batch=64`: the trial's number and its searched values, each under the last
 * part of its path unless two parameters share that part. Long names end in `…`.
 */
export function trialTaskName(trialId: number, values: Readonly<Record<string, unknown>>, maxLength = 80): string {
  const keys = Object.keys(values);
  const leaf = (k: string): string => k.split('.').pop() as string;
  const clash = new Set(keys.map(leaf).filter((l, i, all) => all.indexOf(l) !== i));
  const pairs = keys.map((k) => `${clash.has(leaf(k)) ? k : leaf(k)}=${compactValue(values[k])}`);
  const name = pairs.length ? `Trial ${trialId} · ${pairs.join(' ')}` : `Trial ${trialId}`;
  return name.length > maxLength ? `${name.slice(0, maxLength - 1).trimEnd()}…` : name;
}

/**
 * A trial's log file: the row's `log` (a file name from the journal) in the experiment's folder;
 * without one (an unknown trial), the first attempt's name. A name that would leave the folder is
 * not followed (a hand-edited journal): the default name is used instead.
 */
export function trialLogPath(dir: string, trialId: number, log: string | undefined): string {
  const safe = log !== undefined && /^[\w.-]+$/.test(log) && log !== '.' && log !== '..';
  return join(dir, safe ? log : legacyTrialLog(trialId));
}

/** What the model needs to know of the spec. */
export interface ResultsSetup {
  readonly name: string;
  readonly metric: string;
  readonly mode: 'min' | 'max';
  readonly timeAttr: string;
  readonly totalTrials: number;
  readonly apply: ResultsExperiment['apply'];
  /** The searched values of a trial, flat, for the table and the scatter. */
  readonly values: (params: Params, config: Config) => Record<string, unknown>;
  /** The scale of a flat parameter (from the space's dims). */
  readonly scale: (name: string) => ResultsParam['scale'];
}

/** The setup of a parsed spec: its space gives the flat values and scales, as the CLI's table shows them. */
export function setupFromSpec(spec: TuneSpec, name: string, totalTrials: number, apply: ResultsExperiment['apply']): ResultsSetup {
  const dims = new Map(spec.space.dims.map((d) => [d.path, d]));
  const hidden = new Set(spec.space.dims.filter((d) => d.kind === 'grid' && d.size <= 1).map((d) => d.path));
  return {
    name, metric: spec.metric, mode: spec.mode, totalTrials, apply,
    timeAttr: spec.scheduler.type === 'asha' ? spec.scheduler.timeAttr : 'training_iteration',
    values: (params) => Object.fromEntries(Object.entries(spec.space.flatConfig(params)).filter(([k]) => !hidden.has(k))),
    scale: (n) => {
      const d = dims.get(n);
      if (!d) return 'linear';
      if (d.kind === 'categorical' || d.kind === 'grid') return 'category';
      return d.kind !== 'normal' && d.log ? 'log' : 'linear';
    },
  };
}

interface MutableTrial {
  trialId: number;
  status: ResultsTrial['status'];
  config: Config;
  values: Record<string, unknown>;
  reports: Array<Readonly<Record<string, unknown>>>;
  stopReason?: ResultsTrial['stopReason'];
  stopMessage?: string;
  error?: string;
  attempt: number;
  log: string;
  memory?: TrialMemory;
  outOfMemory?: TrialOutOfMemory;
}

/** The results of one experiment, folded from its events; each `apply` says which trial changed. */
export class ResultsModel {
  private readonly trials = new Map<number, MutableTrial>();
  private state: ResultsExperiment['state'];
  private total: number;
  private finalBest: ResultsExperiment['best'] | undefined;

  constructor(private readonly setup: ResultsSetup, state: ResultsExperiment['state'] = 'running') {
    this.state = state;
    this.total = setup.totalTrials;
  }

  /** The trials a (resumed) experiment restored from its journal, as `Experiment.trialViews()` gives them. */
  seed(views: readonly TrialView[]): void {
    for (const v of views) {
      this.trials.set(v.trialId, {
        trialId: v.trialId, status: v.status, config: v.config, values: this.setup.values(v.params, v.config), reports: [...v.reports],
        stopReason: v.stopReason, error: v.error, attempt: 1, log: v.log ?? legacyTrialLog(v.trialId),
        ...(v.memory ? { memory: v.memory } : {}), ...(v.outOfMemory ? { outOfMemory: v.outOfMemory } : {}),
      });
    }
  }

  /** Folds one event or journal record in; returns the trial that changed, if one did. */
  apply(e: TuneEvent | JournalRecord): ResultsTrial | null {
    switch (e.type) {
      case 'journal/header':
        return null;
      case 'experiment/started':
        this.state = 'running';
        this.total = e.totalTrials;
        this.finalBest = undefined;
        return null;
      case 'experiment/done':
        this.state = e.stopped ? 'stopped' : 'done';
        this.finalBest = e.best ? { trialId: e.best.trialId, metric: e.best.metric } : null;
        return null;
      case 'trial/started': {
        // A new attempt starts afresh: its memory and its end are its own.
        const t: MutableTrial = { trialId: e.trialId, status: 'running', config: e.config, values: this.setup.values(e.params, e.config), reports: [], attempt: e.attempt, log: e.log ?? legacyTrialLog(e.trialId) };
        this.trials.set(e.trialId, t);
        return this.row(t);
      }
      default:
        break;
    }
    const t = this.trials.get(e.trialId);
    if (!t) return null;
    switch (e.type) {
      case 'trial/report': t.reports.push(e.result); break;
      case 'trial/stopped':
        t.status = e.reason === 'experiment' ? 'interrupted' : 'stopped';
        t.stopReason = e.reason;
        t.stopMessage = e.message;
        break;
      case 'trial/done': t.status = 'done'; break;
      case 'trial/failed': t.status = 'failed'; t.error = e.error; t.outOfMemory = e.outOfMemory; break;
      case 'trial/memory': t.memory = e.memory; break;
      case 'trial/interrupted': t.status = 'interrupted'; break;
      case 'trial/slurm': return null; // its job id is in the log and the journal
      default: {
        const unreachable: never = e;
        return unreachable;
      }
    }
    return this.row(t);
  }

  /** A journal read back: a run that was not seen to end ended when its process did. */
  markEnded(): void {
    if (this.state === 'running') this.state = 'journal';
  }

  rows(): ResultsTrial[] {
    return [...this.trials.values()].sort((a, b) => a.trialId - b.trialId).map((t) => this.row(t));
  }

  row(trialId: number): ResultsTrial | null;
  row(t: MutableTrial): ResultsTrial;
  row(arg: number | MutableTrial): ResultsTrial | null {
    const t = typeof arg === 'number' ? this.trials.get(arg) : arg;
    if (!t) return null;
    const { metric, timeAttr } = this.setup;
    const curve: Array<[number, number]> = [];
    t.reports.forEach((r, i) => {
      const m = r[metric];
      const x = r[timeAttr];
      if (typeof m === 'number' && Number.isFinite(m)) curve.push([typeof x === 'number' ? x : i + 1, m]);
    });
    const lastMetric = t.reports[t.reports.length - 1]?.[metric];
    return {
      trialId: t.trialId, status: t.status, config: t.config, values: t.values, curve, iterations: t.reports.length,
      metric: typeof lastMetric === 'number' && Number.isFinite(lastMetric) ? lastMetric : null,
      attempt: t.attempt,
      log: t.log,
      ...(t.stopReason ? { stopReason: t.stopReason } : {}),
      ...(t.stopMessage ? { stopMessage: t.stopMessage } : {}),
      ...(t.error ? { error: t.error } : {}),
      ...(t.memory ? { memory: t.memory } : {}),
      ...(t.outOfMemory && t.status === 'failed' ? { outOfMemory: t.outOfMemory } : {}),
    };
  }

  /** As the engine judges it: among ended trials (done or stopped), the best last reported metric. */
  best(): ResultsExperiment['best'] {
    if (this.finalBest !== undefined) return this.finalBest;
    let best: { trialId: number; metric: number } | null = null;
    for (const t of this.trials.values()) {
      if (t.status !== 'done' && t.status !== 'stopped') continue;
      const m = t.reports[t.reports.length - 1]?.[this.setup.metric];
      if (typeof m !== 'number' || Number.isNaN(m)) continue;
      if (!best || (this.setup.mode === 'min' ? m < best.metric : m > best.metric)) best = { trialId: t.trialId, metric: m };
    }
    return best;
  }

  /** The best trial's config, for "Apply Best Config". */
  bestConfig(): { trialId: number; metric: number; config: Config } | null {
    const b = this.best();
    const t = b ? this.trials.get(b.trialId) : undefined;
    return b && t ? { ...b, config: t.config } : null;
  }

  /** True while trials may still change. */
  get live(): boolean {
    return this.state === 'running';
  }

  experiment(): ResultsExperiment {
    const seen = new Set<string>();
    for (const t of this.trials.values()) for (const k of Object.keys(t.values)) seen.add(k);
    const { name, metric, mode, timeAttr, apply } = this.setup;
    return {
      name, metric, mode, timeAttr, apply, totalTrials: this.total, state: this.state, best: this.best(),
      params: [...seen].map((n) => ({ name: n, scale: this.setup.scale(n) })),
    };
  }
}

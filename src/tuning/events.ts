/**
 * What an experiment reports, in order, to the CLI (`--json` prints them one per line), to the
 * VS Code layer (tasks, results view) and to its journal (one record per line). Sent by
 * `Experiment` in src/tuning/experiment.ts.
 */
import type { TrialMemory, TrialOutOfMemory } from '../common/tuningProtocol';
import type { Config, Params } from './space';

export type TrialResult = Readonly<Record<string, unknown>>;

/** Why a trial was stopped before it ended by itself. */
export type StopReason =
  /** ASHA judged its metric worse than the rung's cutoff. */
  | 'asha'
  /** It reached the scheduler's maxT (Ray stops trials there). */
  | 'maxT'
  /** The experiment was stopped (Ctrl-C, "Stop Experiment", VS Code closing); a resume re-runs it. */
  | 'experiment'
  /** Someone stopped this one trial (in VS Code: terminated its task); it counts as ended, a resume keeps it. */
  | 'user';

export interface BestTrial { readonly trialId: number; readonly config: Config; readonly metric: number }

export type TuneEvent =
  /** Once per run of the experiment, before any trial (again, with resumed: true, after --resume). */
  | { readonly type: 'experiment/started'; readonly name: string; readonly dir: string; readonly totalTrials: number; readonly maxConcurrent: number; readonly gpus: number; readonly resumed: boolean; readonly at: number }
  /**
   * A trial's process started. `attempt` is 2 or more when an interrupted trial is re-run. `log`: the
   * file, relative to the experiment's folder, that holds this attempt's whole output (absent in
   * journals written before it was recorded, whose trials wrote `trial_<id>.log`).
   */
  | { readonly type: 'trial/started'; readonly trialId: number; readonly config: Config; readonly params: Params; readonly cudaVisibleDevices: string | null; readonly attempt: number; readonly log?: string; readonly at: number }
  /** One `::report::{...}` line, with `training_iteration` filled in (the count of reports) unless given. */
  | { readonly type: 'trial/report'; readonly trialId: number; readonly result: TrialResult; readonly at: number }
  /** The experiment stopped the trial (SIGTERM, then SIGKILL after the grace period). */
  | { readonly type: 'trial/stopped'; readonly trialId: number; readonly reason: StopReason; readonly message: string; readonly at: number }
  /** The trial's Slurm job (the slurm executor): a resume re-attaches to it while Slurm still runs it. */
  | { readonly type: 'trial/slurm'; readonly trialId: number; readonly jobId: string; readonly output: string; readonly at: number }
  /** The trial's process exited with status 0 by itself. */
  | { readonly type: 'trial/done'; readonly trialId: number; readonly at: number }
  /**
   * The trial's peak memory so far, from the companion's messages after each optimizer step: when it
   * first comes, when it grows (at most every few seconds) and once more when the trial ends.
   */
  | { readonly type: 'trial/memory'; readonly trialId: number; readonly memory: TrialMemory; readonly at: number }
  /**
   * The trial could not start, exited non-zero or was killed by a signal it was not sent. `outOfMemory`:
   * it ran out of memory (the companion's oom message, or torch's words on its stderr), with its batch size.
   */
  | { readonly type: 'trial/failed'; readonly trialId: number; readonly error: string; readonly outOfMemory?: TrialOutOfMemory; readonly at: number }
  /** Written on resume for a trial that was running when the experiment died; it will be re-run. */
  | { readonly type: 'trial/interrupted'; readonly trialId: number; readonly at: number }
  /** Every trial has ended (or the experiment was stopped: `stopped: true`). `best` by the last reported metric. */
  | { readonly type: 'experiment/done'; readonly best: BestTrial | null; readonly stopped: boolean; readonly at: number };

export type TuneEventType = TuneEvent['type'];

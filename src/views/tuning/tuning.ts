/**
 * Tuning in VS Code: "Tune Hyperparameters…" runs a tune spec's experiment (src/tuning/) with
 * every trial shown as its own task (a CustomExecution whose pseudoterminal prints the trial's
 * output as it comes), a cancellable progress notification, and the results panel updating live.
 * "Stop Tuning" (or cancelling the notification, or closing VS Code) ends every trial process.
 * Running trials executes workspace code, so the run commands refuse in an untrusted workspace.
 */
import * as vscode from 'vscode';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { basename, dirname, isAbsolute, join } from 'node:path';
import { findNodeAtLocation, parseTree } from 'jsonc-parser';
import { gpuMonitorOptions } from '../../config';
import { sampleOnce, type GpuMonitor } from '../../gpu/monitor';
import { log } from '../../log';
import { editConfigInEditor } from '../common/configEdit';
import type { TuneEvent } from '../../tuning/events';
import { Experiment, ExperimentError, experimentDir } from '../../tuning/experiment';
import { readJournal } from '../../tuning/journal';
import { loadSpec, parseSpec, SpecError, totalTrials, type TuneSpec } from '../../tuning/spec';
import { ApplyConfigError, describeDifferences, planBestConfig, type BestConfigPlan } from '../../tuning/applyConfig';
import { compactValue, formatMetric, formatTrialMemory, type ResultsExperiment, type ResultsParam } from '../../common/tuningProtocol';
import { ResultsModel, setupFromSpec, trialLogPath, trialTaskName, type ResultsSetup } from './tuningModel';
import { ResultsPanel, type ResultsSource } from './tuningResults';
import { restoreTarget, type JournalEntry } from './tuningRestore';
import { closesWhenEnded, TrialTerminal, trialExecution } from './trialTerminal';

export const trialTaskType = 'gpuWorkbench.trial';

/** The task definition of one trial: unique per experiment, trial and attempt (VS Code will not start a task identical to a running one). */
export interface TrialTaskDefinition extends vscode.TaskDefinition {
  readonly type: typeof trialTaskType;
  readonly experiment: string;
  readonly trial: number;
  readonly attempt: number;
}

/** A trial's task: its terminal, its name (the terminal's), and whether its end was handled (a Rerun Task of it ends too). */
interface TrialEntry { terminal: TrialTerminal; name: string; execution?: vscode.TaskExecution; ended?: boolean }

const untrustedMessage = 'GPU Workbench: tuning runs the trial commands of your workspace, so it is disabled until you trust this workspace (Manage Workspace Trust).';

/** One running experiment in this window. */
class TuningSession implements ResultsSource {
  readonly key: string;
  readonly model: ResultsModel;
  private readonly terminals = new Map<number, TrialEntry>();
  private readonly subscriptions: vscode.Disposable[] = [];
  private stopRequested = false;

  constructor(
    private readonly extensionUri: vscode.Uri,
    readonly experiment: Experiment,
    readonly spec: TuneSpec,
    private readonly folder: vscode.WorkspaceFolder | undefined,
  ) {
    this.key = experiment.dir;
    this.model = new ResultsModel(setupFromSpec(spec, experiment.name, experiment.total, applyTarget(spec)));
  }

  get name(): string {
    return this.experiment.name;
  }

  /** The experiment's `output` option: each trial's stdout and stderr. */
  output(trialId: number, text: string): void {
    if (trialId === 0) {
      log.warn(`Tuning ${this.name}: ${text.trimEnd()}`);
      return;
    }
    // The experiment writes the same text to the trial's log file.
    this.terminals.get(trialId)?.terminal.write(text);
  }

  /** Runs the experiment under a cancellable progress notification; resolves when every trial has ended. */
  async run(monitor: GpuMonitor): Promise<void> {
    this.subscriptions.push(this.experiment.onEvent((e) => this.onEvent(e)), monitor.acquire(`tuning ${this.name}`));
    ResultsPanel.show(this.extensionUri, this, { preserveFocus: true, column: vscode.ViewColumn.Beside });
    try {
      await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: `Tuning ${this.name}`, cancellable: true }, async (progress, token) => {
        token.onCancellationRequested(() => void this.stop());
        let reported = 0;
        const sub = this.experiment.onEvent((e) => {
          if (e.type === 'experiment/started' || e.type === 'trial/started' || e.type === 'trial/done' || e.type === 'trial/stopped' || e.type === 'trial/failed') {
            const rows = this.model.rows();
            const ended = rows.filter((r) => r.status !== 'running' && r.status !== 'pending' && r.status !== 'interrupted').length;
            const best = this.model.experiment().best;
            const share = (100 * ended) / Math.max(1, this.experiment.total);
            progress.report({
              increment: share - reported,
              message: `${ended} of ${this.experiment.total} trials ended, ${rows.filter((r) => r.status === 'running').length} running${best ? ` · best ${this.spec.metric} ${formatMetric(best.metric)} (trial ${best.trialId})` : ''}`,
            });
            reported = share;
          }
        });
        try {
          await this.experiment.run();
        } finally {
          sub.dispose();
        }
      });
    } finally {
      this.dispose();
    }
    const best = this.model.experiment().best;
    if (this.stopRequested) {
      void vscode.window.showInformationMessage(`Experiment ${this.name} stopped; every trial process has ended. Tune Hyperparameters… on the same spec resumes it.`);
      return;
    }
    // Not awaited: the command ends with the experiment, not when the message is dismissed.
    void vscode.window.showInformationMessage(
      best ? `Experiment ${this.name} finished: the best is trial ${best.trialId} with ${this.spec.metric} ${formatMetric(best.metric)}.` : `Experiment ${this.name} finished, but no trial reported ${this.spec.metric}; see the trials' terminals.`,
      ...(best ? ['Apply Best Config', 'Show Results'] : ['Show Results']),
    ).then((choice) => {
      if (choice === 'Apply Best Config') return this.applyBest();
      if (choice === 'Show Results') ResultsPanel.show(this.extensionUri, this);
      return undefined;
    }).then(undefined, (err: unknown) => log.error(`Apply Best Config: ${String(err)}`));
  }

  async stop(options?: { readonly graceMs?: number }): Promise<void> {
    this.stopRequested = true;
    await this.experiment.stop(options);
  }

  applyBest(): Promise<void> {
    return applyBestConfig(this.model, this.spec.metric);
  }

  async showTrial(trialId: number): Promise<void> {
    const entry = this.terminals.get(trialId);
    const terminal = entry && vscode.window.terminals.find((t) => t.name === entry.name || t.name.endsWith(entry.name));
    if (terminal) terminal.show();
    else await this.openLog(trialId);
  }

  openLog(trialId: number): Promise<void> {
    return openTrialLog(this.experiment.dir, trialId, this.model.row(trialId)?.log);
  }

  dispose(): void {
    for (const s of this.subscriptions.splice(0)) s.dispose();
    sessions.delete(this);
    // The results stay on screen, read from the model that no longer changes.
    ResultsPanel.forKey(this.key)?.postExperiment();
  }

  private onEvent(e: TuneEvent): void {
    if (e.type === 'experiment/started' && e.resumed) this.model.seed(this.experiment.trialViews());
    const row = this.model.apply(e);
    const panel = ResultsPanel.forKey(this.key);
    if (row) panel?.postTrial(row);
    if (e.type !== 'trial/report' && e.type !== 'trial/memory') panel?.postExperiment();
    switch (e.type) {
      case 'trial/started': this.startTask(e.trialId, e.attempt, e.cudaVisibleDevices); break;
      case 'trial/done': {
        const r = this.model.row(e.trialId);
        this.endTask(e.trialId, 0, `\x1b[32mTrial ${e.trialId} finished\x1b[0m${r?.metric != null ? `: ${this.spec.metric} ${formatMetric(r.metric)} after ${r.iterations} report${r.iterations === 1 ? '' : 's'}` : ''}${r?.memory ? `; peak memory ${formatTrialMemory(r.memory)}` : ''}.`);
        break;
      }
      case 'trial/stopped': {
        const why = e.reason === 'asha' ? `Stopped by ASHA: ${e.message}`
          : e.reason === 'maxT' ? `Stopped at the scheduler's maxT: ${e.message}`
            : e.reason === 'user' ? `Stopped: ${e.message}`
              : 'Stopped: the experiment was stopped. Tune Hyperparameters… on the same spec re-runs this trial.';
        this.endTask(e.trialId, e.reason === 'experiment' ? 130 : 0, `\x1b[33m${why}\x1b[0m`);
        break;
      }
      case 'trial/failed': {
        const memory = this.model.row(e.trialId)?.memory;
        this.endTask(e.trialId, 1, `\x1b[31mTrial ${e.trialId} ${e.outOfMemory ? 'ran out of memory' : 'failed'}: ${e.error}\x1b[0m${memory ? `\r\nPeak memory before it ended: ${formatTrialMemory(memory)}.` : ''}`);
        break;
      }
      default: break;
    }
  }

  private startTask(trialId: number, attempt: number, cuda: string | null): void {
    const row = this.model.row(trialId);
    const name = trialTaskName(trialId, row?.values ?? {});
    const header = `${this.name} · trial ${trialId}${attempt > 1 ? ` (attempt ${attempt})` : ''} · config ${JSON.stringify(row?.config ?? {})}${cuda !== null ? ` · CUDA_VISIBLE_DEVICES=${cuda}` : ''}`;
    const terminal = new TrialTerminal(header, () => {
      if (this.experiment.cancelTrial(trialId, 'its task was terminated in VS Code')) log.info(`Tuning ${this.name}: trial ${trialId} stopped from its terminal`);
    });
    const entry: TrialEntry = { terminal, name };
    this.terminals.set(trialId, entry);
    const definition: TrialTaskDefinition = { type: trialTaskType, experiment: this.name, trial: trialId, attempt };
    const callback = trialExecution(terminal, () => this.rerunRefusal(trialId));
    const task = new vscode.Task(definition, this.folder ?? vscode.TaskScope.Workspace, name, 'GPU Workbench', new vscode.CustomExecution(callback));
    // Silent: shown only when it fails. Its terminal closes when it ends well (onTaskEnded).
    task.presentationOptions = { reveal: vscode.TaskRevealKind.Silent, panel: vscode.TaskPanelKind.Dedicated, focus: false, clear: false, echo: false, showReuseMessage: false };
    // Its task may end after the experiment (and this session) did: found by its definition.
    trialTasks.set(trialTaskKey(definition), { session: this, trialId });
    vscode.tasks.executeTask(task).then(
      (execution) => { entry.execution = execution; },
      (err: unknown) => {
        trialTasks.delete(trialTaskKey(definition));
        log.warn(`Tuning ${this.name}: cannot show trial ${trialId} as a task (${String(err)}); its output is in ${trialLogPath(this.experiment.dir, trialId, row?.log)}`);
      },
    );
  }

  /** What "Rerun Task" on a trial's task prints: a trial does not run outside its experiment. */
  private rerunRefusal(trialId: number): string {
    const row = this.model.row(trialId);
    const state = row?.status === 'done' || (row?.status === 'stopped' && row.stopReason === 'maxT') ? 'has finished'
      : row?.status === 'failed' ? 'has failed'
        : row?.status === 'running' || row?.status === 'pending' ? 'is still running'
          : row?.stopReason === 'asha' ? 'was stopped by ASHA' : 'was stopped';
    return `\x1b[33mRerun Task does not run trial ${trialId} again (it ${state}): a trial runs only as part of its experiment ${this.name}. `
      + `Its output is in ${trialLogPath(this.experiment.dir, trialId, row?.log)}; to run trials again, run Tune Hyperparameters… on the spec.\x1b[0m`;
  }

  private endTask(trialId: number, code: number, message: string): void {
    this.terminals.get(trialId)?.terminal.end(code, message);
  }

  /**
   * A task of this experiment ended (VS Code has its exit code): the trial's terminal closes
   * unless the trial failed (`closesWhenEnded`); its output is in its log file. Only its first
   * end: a Rerun Task of it keeps the terminal that says why nothing ran.
   */
  onTaskEnded(trialId: number): void {
    const entry = this.terminals.get(trialId);
    const row = this.model.row(trialId);
    if (!entry || entry.ended || !row) return;
    entry.ended = true;
    if (!closesWhenEnded(row.status)) return;
    vscode.window.terminals.find((t) => t.name === entry.name || t.name.endsWith(entry.name))?.dispose();
  }
}

/** The experiments running in this window. */
const sessions = new Set<TuningSession>();

/** Trial tasks whose end has not been seen yet, by `trialTaskKey`. */
const trialTasks = new Map<string, { session: TuningSession; trialId: number }>();

function trialTaskKey(d: Partial<TrialTaskDefinition>): string {
  return JSON.stringify([d.experiment, d.trial, d.attempt]);
}

/** A task ended: a trial's (its first end, not a Rerun Task's) may close its terminal. */
function onTaskEnded(definition: vscode.TaskDefinition): void {
  if (definition.type !== trialTaskType) return;
  const key = trialTaskKey(definition as Partial<TrialTaskDefinition>);
  const found = trialTasks.get(key);
  if (!found) return;
  trialTasks.delete(key);
  found.session.onTaskEnded(found.trialId);
}

/**
 * How long a trial gets between SIGTERM and SIGKILL when the window closes, whatever its spec
 * says: VS Code gives the extension host about 5 s after deactivate() before it exits, and a
 * trial that ignores SIGTERM must be killed before then (its process group is its own, so the
 * host's exit would not take it along).
 */
export const shutdownGraceMs = 2500;

/**
 * Stops every experiment running in this window and resolves once every trial process has
 * exited: for deactivate(), whose promise VS Code awaits (disposables it does not).
 */
export async function stopAllTuning(graceMs = shutdownGraceMs): Promise<void> {
  await Promise.all([...sessions].map((s) => s.stop({ graceMs })));
}

function applyTarget(spec: TuneSpec): ResultsExperiment['apply'] {
  return spec.trial.kind === 'job' ? { kind: 'job', file: spec.trial.job, varied: spec.space.variedPaths() } : { kind: 'command' };
}

/** Opens a trial's log (`log`: its row's file name, from the journal) in an editor. */
async function openTrialLog(dir: string, trialId: number, log: string | undefined): Promise<void> {
  const file = trialLogPath(dir, trialId, log);
  if (!existsSync(file)) {
    void vscode.window.showWarningMessage(`Trial ${trialId} has no log file: ${file} does not exist (deleted, or written by a version that kept no log).`);
    return;
  }
  await vscode.window.showTextDocument(vscode.Uri.file(file), { preview: true });
}

/** Where a JSON pointer points in a document, to show a spec error at its field. */
function rangeOf(doc: vscode.TextDocument, pointer: string): vscode.Range | undefined {
  const root = parseTree(doc.getText());
  if (!root) return undefined;
  const segments = pointer.split('/').slice(1).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~')).map((s) => (/^\d+$/.test(s) ? Number(s) : s));
  // The deepest part of the path that exists (a missing field is reported at its parent).
  for (let n = segments.length; n >= 0; n--) {
    const node = findNodeAtLocation(root, segments.slice(0, n));
    if (node) {
      const at = node.parent?.type === 'property' ? node.parent : node;
      return new vscode.Range(doc.positionAt(at.offset), doc.positionAt(at.offset + at.length));
    }
  }
  return undefined;
}

async function showSpecError(uri: vscode.Uri, err: SpecError): Promise<void> {
  const file = vscode.workspace.asRelativePath(uri);
  const choice = await vscode.window.showErrorMessage(`Tune spec ${file}: ${err.path || '/'}: ${err.detail}`, 'Open Spec');
  if (choice !== 'Open Spec') return;
  const doc = await vscode.workspace.openTextDocument(uri);
  const range = rangeOf(doc, err.path);
  await vscode.window.showTextDocument(doc, { selection: range, preview: false });
}

/** The spec to run: the one given (explorer context menu), else a pick of the workspace's `*.tune.json`, the active editor's first. */
async function pickSpec(arg?: unknown): Promise<vscode.Uri | undefined> {
  if (arg instanceof vscode.Uri) return arg;
  const active = vscode.window.activeTextEditor?.document;
  const activeSpec = active && active.uri.scheme === 'file' && active.uri.fsPath.endsWith('.tune.json') ? active.uri : undefined;
  const found = await vscode.workspace.findFiles('**/*.tune.json', '{**/node_modules/**,**/.gpu-workbench/**}', 500);
  const uris = [...(activeSpec ? [activeSpec] : []), ...found.filter((u) => u.toString() !== activeSpec?.toString()).sort((a, b) => a.fsPath.localeCompare(b.fsPath))];
  if (uris.length === 0) {
    const create = 'Create Tune Spec for Script…';
    const answer = await vscode.window.showErrorMessage('No tune spec (*.tune.json) in this workspace. Create one over a PyTorch script (or see examples/tuning/quadratic.tune.json) and run Tune Hyperparameters… again.', create);
    if (answer === create) await vscode.commands.executeCommand('gpuWorkbench.createTuneSpec');
    return undefined;
  }
  if (uris.length === 1) return uris[0];
  const picked = await vscode.window.showQuickPick(
    uris.map((uri) => ({ label: basename(uri.fsPath), description: vscode.workspace.asRelativePath(dirname(uri.fsPath)), detail: uri === activeSpec ? 'the active editor' : undefined, uri })),
    { title: 'Tune Hyperparameters', placeHolder: 'Which tune spec?', matchOnDescription: true },
  );
  return picked?.uri;
}

async function gpuCount(monitor: GpuMonitor): Promise<number> {
  const latest = monitor.latest();
  if (latest && !latest.stale) return latest.devices.length;
  try {
    const s = await sampleOnce({ ...gpuMonitorOptions(), intervalMs: 500, timeoutMs: 5000 });
    return s.devices.length;
  } catch (err) {
    log.warn(`Tuning: could not count the GPUs (${String(err)}); trials run on the CPU`);
    return 0;
  }
}

async function tune(extensionUri: vscode.Uri, monitor: GpuMonitor, arg?: unknown): Promise<void> {
  if (!vscode.workspace.isTrusted) {
    void vscode.window.showErrorMessage(untrustedMessage);
    return;
  }
  const uri = await pickSpec(arg);
  if (!uri) return;
  const open = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
  if (open?.isDirty) await open.save();
  let spec: TuneSpec;
  try {
    spec = loadSpec(uri.fsPath);
  } catch (err) {
    if (err instanceof SpecError) return showSpecError(uri, err);
    throw err;
  }
  const folder = vscode.workspace.getWorkspaceFolder(uri);
  const workspace = folder?.uri.fsPath ?? dirname(uri.fsPath);
  let name = spec.name;
  let resume = false;
  if (existsSync(join(experimentDir(workspace, name), 'journal.jsonl'))) {
    const running = [...sessions].find((s) => s.experiment.dir === experimentDir(workspace, name));
    if (running) {
      ResultsPanel.show(extensionUri, running);
      void vscode.window.showInformationMessage(`Experiment ${name} is running already.`);
      return;
    }
    let fresh = 2;
    while (existsSync(experimentDir(workspace, `${spec.name}-${fresh}`))) fresh++;
    const choice = await vscode.window.showInformationMessage(
      `Experiment ${name} exists already (.gpu-workbench/experiments/${name}).`,
      { modal: true, detail: 'Resume keeps the finished trials, re-runs the ones that were interrupted and continues the search.' },
      'Resume', `Start ${spec.name}-${fresh}`,
    );
    if (!choice) return;
    if (choice === 'Resume') resume = true;
    else name = `${spec.name}-${fresh}`;
  }
  const gpus = await gpuCount(monitor);
  // The experiment's output goes to the session, made right after it.
  const out: { session?: TuningSession } = {};
  let experiment: Experiment;
  try {
    experiment = new Experiment({ spec, workspace, name, resume, gpuCount: gpus, output: (id, text) => out.session?.output(id, text) });
  } catch (err) {
    if (err instanceof ExperimentError) {
      void vscode.window.showErrorMessage(`Tune Hyperparameters: ${err.message}`);
      return;
    }
    throw err;
  }
  const session = new TuningSession(extensionUri, experiment, spec, folder);
  out.session = session;
  sessions.add(session);
  log.info(`Tuning ${experiment.name}: ${experiment.total} trials, up to ${experiment.maxConcurrent} at once, ${gpus} GPU${gpus === 1 ? '' : 's'}${resume ? ' (resumed)' : ''}`);
  try {
    await session.run(monitor);
  } catch (err) {
    session.dispose();
    if (err instanceof ExperimentError) {
      void vscode.window.showErrorMessage(`Tune Hyperparameters: ${err.message}`);
      return;
    }
    throw err;
  }
}

async function stopTuning(): Promise<void> {
  const running = [...sessions];
  if (running.length === 0) {
    void vscode.window.showInformationMessage('No experiment is running.');
    return;
  }
  let targets = running;
  if (running.length > 1) {
    const picked = await vscode.window.showQuickPick(
      [{ label: 'All experiments', sessions: running }, ...running.map((s) => ({ label: s.name, sessions: [s] }))],
      { title: 'Stop Tuning', placeHolder: 'Which experiment should stop? Every trial process of it ends.' },
    );
    if (!picked) return;
    targets = picked.sessions;
  }
  await Promise.all(targets.map((s) => s.stop()));
}

// --- Results from a journal --------------------------------------------------------------------

function listExperiments(): JournalEntry[] {
  const out: JournalEntry[] = [];
  for (const f of vscode.workspace.workspaceFolders ?? []) {
    const root = join(f.uri.fsPath, '.gpu-workbench', 'experiments');
    let names: string[];
    try {
      names = readdirSync(root);
    } catch {
      continue;
    }
    for (const name of names) {
      const journal = join(root, name, 'journal.jsonl');
      try {
        out.push({ dir: join(root, name), name, folder: f.name, mtime: statSync(journal).mtimeMs });
      } catch {
        // not an experiment folder
      }
    }
  }
  return out.sort((a, b) => b.mtime - a.mtime);
}

/** The workspace's spec whose JSON is the one the journal was started with (for the job file's path). */
async function findSpecFile(raw: Readonly<Record<string, unknown>>): Promise<TuneSpec | undefined> {
  const want = JSON.stringify(raw);
  for (const uri of await vscode.workspace.findFiles('**/*.tune.json', '**/node_modules/**', 500)) {
    try {
      const s = loadSpec(uri.fsPath);
      if (JSON.stringify(s.raw) === want) return s;
    } catch {
      // another spec, or a broken one
    }
  }
  return undefined;
}

function flatten(config: Readonly<Record<string, unknown>>, prefix = ''): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(config)) {
    const p = prefix ? `${prefix}.${k}` : k;
    if (typeof v === 'object' && v !== null && !Array.isArray(v)) Object.assign(out, flatten(v as Record<string, unknown>, p));
    else out[p] = v;
  }
  return out;
}

/** Reads an experiment's journal into a results model (with no run behind it). */
async function journalSource(entry: JournalEntry): Promise<ResultsSource> {
  const { records, dropped } = readJournal(join(entry.dir, 'journal.jsonl'));
  const header = records[0];
  if (!header || header.type !== 'journal/header') throw new Error(`${join(entry.dir, 'journal.jsonl')}: not an experiment journal (no header record)`);
  for (const d of dropped) log.warn(`Tuning results: ${entry.dir}/journal.jsonl:${d.line}: dropped an unreadable record (${d.text})`);
  const file = await findSpecFile(header.spec);
  let setup: ResultsSetup;
  try {
    const spec = file ?? parseSpec(header.spec, join(entry.dir, 'journal.jsonl'));
    const trial = header.spec.trial as { job?: unknown } | undefined;
    const apply: ResultsExperiment['apply'] = file ? applyTarget(file) : typeof trial?.job === 'string' ? { kind: 'job', file: trial.job, varied: spec.space.variedPaths() } : { kind: 'command' };
    setup = setupFromSpec(spec, header.name, totalTrials(spec), apply);
  } catch (err) {
    // A spec the current schema no longer takes: show the trials with their configs flattened.
    log.warn(`Tuning results: the spec in ${entry.dir} does not parse now (${String(err)}); showing its configs as recorded`);
    const raw = header.spec as { metric?: unknown; mode?: unknown };
    setup = {
      name: header.name, metric: typeof raw.metric === 'string' ? raw.metric : 'metric', mode: raw.mode === 'max' ? 'max' : 'min',
      timeAttr: 'training_iteration', totalTrials: 0, apply: { kind: 'command' },
      values: (_p, config) => flatten(config),
      scale: (): ResultsParam['scale'] => 'linear',
    };
  }
  const model = new ResultsModel(setup, 'journal');
  for (const r of records) model.apply(r);
  model.markEnded();
  return {
    key: entry.dir,
    model,
    applyBest: () => applyBestConfig(model, setup.metric),
    showTrial: (id) => openTrialLog(entry.dir, id, model.row(id)?.log),
    openLog: (id) => openTrialLog(entry.dir, id, model.row(id)?.log),
  };
}

async function showResults(extensionUri: vscode.Uri, dir?: string): Promise<void> {
  const all = listExperiments();
  const entries = dir === undefined ? all : all.filter((e) => e.dir === dir);
  const live = new Map([...sessions].map((s) => [s.key, s]));
  if (entries.length === 0) {
    void vscode.window.showInformationMessage('No experiment yet: .gpu-workbench/experiments/ holds none in this workspace. Run Tune Hyperparameters… first.');
    return;
  }
  const picked = entries.length === 1 ? entries[0] : (await vscode.window.showQuickPick(
    entries.map((e) => ({ label: e.name, description: `${e.folder}${live.has(e.dir) ? ' · running' : ''}`, detail: `last written ${new Date(e.mtime).toLocaleString()}`, entry: e })),
    { title: 'Show Tuning Results', placeHolder: 'Which experiment?' },
  ))?.entry;
  if (!picked) return;
  const session = live.get(picked.dir);
  try {
    ResultsPanel.show(extensionUri, session ?? await journalSource(picked));
  } catch (err) {
    void vscode.window.showErrorMessage(`Show Tuning Results: ${(err as Error).message}`);
  }
}

/** A "Tuning Results" tab VS Code brings back after a window reload: the same experiment, read from its journal. */
async function restoreResults(extensionUri: vscode.Uri, panel: vscode.WebviewPanel, state: unknown): Promise<void> {
  const target = restoreTarget(state, (vscode.workspace.workspaceFolders ?? []).map((f) => ({ name: f.name, fsPath: f.uri.fsPath })));
  if ('problem' in target) {
    log.warn(`Tuning results: not restoring a results tab: ${target.problem}`);
    panel.dispose();
    return;
  }
  const live = [...sessions].find((s) => s.key === target.entry.dir);
  try {
    ResultsPanel.restore(extensionUri, panel, live ?? await journalSource(target.entry));
  } catch (err) {
    log.warn(`Tuning results: cannot restore ${target.entry.dir}: ${(err as Error).message}`);
    panel.dispose();
    void vscode.window.showWarningMessage(`Tuning Results: cannot show ${target.entry.name} again: ${(err as Error).message}`);
  }
}

// --- Apply Best Config ---------------------------------------------------------------------------

async function applyBestConfig(model: ResultsModel, metric: string): Promise<void> {
  const best = model.bestConfig();
  const e = model.experiment();
  if (!best) {
    void vscode.window.showInformationMessage(`Experiment ${e.name} has no best trial yet: none has ended with a ${metric}.`);
    return;
  }
  const summary = `trial ${best.trialId} (${metric} ${formatMetric(best.metric)})`;
  if (e.apply.kind === 'command') {
    const choice = await vscode.window.showInformationMessage(
      `The best is ${summary}: ${Object.entries(flatten(best.config)).map(([k, v]) => `${k}=${compactValue(v)}`).join(' ')}. Its trials run a command, so there is no job file to write the config into.`,
      'Copy Config JSON',
    );
    if (choice) {
      await vscode.env.clipboard.writeText(`${JSON.stringify(best.config, null, 2)}\n`);
      void vscode.window.setStatusBarMessage(`Copied the config of ${summary}`, 5000);
    }
    return;
  }
  let file = e.apply.file;
  if (!isAbsolute(file)) {
    const picked = await vscode.window.showOpenDialog({ title: `Job file for ${e.name} (${file} in its spec)`, filters: { 'Job files': ['json'] }, canSelectMany: false });
    if (!picked?.[0]) return;
    file = picked[0].fsPath;
  }
  const uri = vscode.Uri.file(file);
  let doc: vscode.TextDocument;
  try {
    doc = await vscode.workspace.openTextDocument(uri);
  } catch (err) {
    void vscode.window.showErrorMessage(`Apply Best Config: cannot open the job file ${file}: ${(err as Error).message}`);
    return;
  }
  const shown = vscode.workspace.asRelativePath(uri);
  // Only the keys the search varied go in at once; the keys the experiment held fixed (its budget:
  // epochs, data size, devices, strategy…) are the user's job settings, written only on request.
  let plan: BestConfigPlan;
  try {
    plan = planBestConfig(doc.getText(), best.config, e.apply.varied, shown);
  } catch (err) {
    if (!(err instanceof ApplyConfigError)) throw err;
    void vscode.window.showErrorMessage(`Apply Best Config: ${err.message}`);
    return;
  }
  const changed = await editConfigInEditor(doc, plan.tuned, 'Apply Best Config');
  if (!changed) return;
  // VS Code for the Web (code-server) auto-saves by default; say "not saved" only when it stays so.
  const unsaved = (): string => (vscode.workspace.getConfiguration('files', doc.uri).get<string>('autoSave') === 'off' && doc.isDirty ? '; the file is not saved yet' : '');
  const done = changed.length === 0
    ? `${shown} has the tuned values of ${summary} already.`
    : `Applied the config of ${summary} to ${shown}: ${changed.join(', ')}. Undo (Ctrl+Z) takes it back${unsaved()}.`;
  if (plan.differences.length === 0) {
    void vscode.window.showInformationMessage(changed.length === 0 ? `${shown} has the config of ${summary} already.` : done);
    return;
  }
  const also = 'Also Apply the Fixed Values';
  const choice = await vscode.window.showInformationMessage(
    `${done} The experiment also held fixed values that differ from the file's, kept as the file has them: ${describeDifferences(plan.differences)}.`,
    also,
  );
  if (choice !== also) return;
  const more = await editConfigInEditor(doc, plan.fixed, 'Apply Best Config');
  if (!more || more.length === 0) return;
  void vscode.window.showInformationMessage(`Applied the experiment's fixed values to ${shown} too: ${more.join(', ')}. Undo (Ctrl+Z) takes them back${unsaved()}.`);
}

async function applyBestCommand(): Promise<void> {
  const source = ResultsPanel.active()?.current ?? (sessions.size === 1 ? [...sessions][0] : undefined);
  if (source) return source.applyBest();
  const entries = listExperiments();
  if (entries.length === 0) {
    void vscode.window.showInformationMessage('No experiment yet: run Tune Hyperparameters… first.');
    return;
  }
  const picked = entries.length === 1 ? entries[0] : (await vscode.window.showQuickPick(entries.map((e) => ({ label: e.name, description: e.folder, entry: e })), { title: 'Apply Best Config', placeHolder: 'From which experiment?' }))?.entry;
  if (!picked) return;
  const live = [...sessions].find((s) => s.key === picked.dir);
  await (live ?? await journalSource(picked)).applyBest();
}

/** Registers the tuning commands and the trial task type. */
export function registerTuning(context: vscode.ExtensionContext, monitor: GpuMonitor): void {
  const { extensionUri } = context;
  const report = (what: string) => (err: unknown): void => {
    log.error(`${what}: ${err instanceof Error ? err.stack ?? err.message : String(err)}`);
    void vscode.window.showErrorMessage(`${what}: ${err instanceof Error ? err.message : String(err)}`);
  };
  context.subscriptions.push(
    vscode.commands.registerCommand('gpuWorkbench.tune', (arg?: unknown) => tune(extensionUri, monitor, arg).catch(report('Tune Hyperparameters'))),
    vscode.commands.registerCommand('gpuWorkbench.stopTuning', () => stopTuning().catch(report('Stop Tuning'))),
    // `dir`: an experiment's folder (the Runs view's Show Results); the user picks one without it.
    vscode.commands.registerCommand('gpuWorkbench.showTuningResults', (dir?: unknown) => showResults(extensionUri, typeof dir === 'string' ? dir : undefined).catch(report('Show Tuning Results'))),
    vscode.commands.registerCommand('gpuWorkbench.applyBestConfig', () => applyBestCommand().catch(report('Apply Best Config'))),
    // A results tab survives a window reload: VS Code keeps the page's state (the experiment's folder).
    vscode.window.registerWebviewPanelSerializer(ResultsPanel.viewType, {
      deserializeWebviewPanel: (panel, state: unknown) => restoreResults(extensionUri, panel, state),
    }),
    // Trials are started by their experiment, never from tasks.json: the provider offers none.
    vscode.tasks.registerTaskProvider(trialTaskType, { provideTasks: () => [], resolveTask: () => undefined }),
    vscode.tasks.onDidEndTask((e) => onTaskEnded(e.execution.task.definition)),
    {
      dispose: () => {
        // Closing the window: deactivate() awaits stopAllTuning(); this only covers a disposal without it.
        void stopAllTuning();
        ResultsPanel.disposeAll();
      },
    },
  );
}

/**
 * `"kind": "torchrun"` jobs in the editor: the user's PyTorch script runs as a VS Code task whose
 * terminal shows the script's own output (a CustomExecution over `runTorchrun`, the same engine
 * as `gpu-workbench train`), and every problem the engine parses from that output (a CUDA error,
 * with the explanation and what to try, or any exception of the script) becomes a diagnostic at
 * the user's innermost traceback frame.
 *
 * Why a DiagnosticCollection fed by the engine's `job/log` problems and not a task problemMatcher:
 * a CUDA error's location is the innermost traceback frame *outside* the Python libraries, which
 * comes several lines before the error line, interleaved with other ranks' lines (`[default1]:`
 * prefixes from torchrun's --tee), and the explanation is not in the output at all. A regex
 * matcher can pick neither that frame nor the text to show; the engine's parser does both, and
 * the CLI and the editor then report the same problems.
 *
 * Stopping (Stop Training, Terminate Task, closing the terminal, Ctrl-C in it) ends torchrun's
 * whole process group, workers included. A task run from tasks.json (`{"type":
 * "gpuWorkbench.torchrun", "job": "…job.json"}`) works the same way and refuses in an untrusted
 * workspace, like every way of starting training, and while another job runs (a torchrun task
 * or a job "Start Training…" runs in the training host), naming it.
 *
 * The interpreter: the job's `"python"`, else the setting `gpuWorkbench.training.python`, else
 * the Python extension's selected interpreter, else `python3`; when it cannot run or has no
 * torch, the failure says where it came from and what to change.
 */
import { readFileSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import * as vscode from 'vscode';
import { slurmSettings } from '../common/slurmSettings';
import { readJobNodes } from '../../gpu/slurmNodes';
import { SlurmNodesPoller } from '../../gpu/slurmNodesPoller';
import { ElasticStatus } from './elasticStatus';
import type { SlurmJobInfo } from '../../training/launchers/slurm';
import { probeTorchVersion } from '../../training/launchers/multinode';
import type { Disposable, GpuMonitor } from '../../gpu/monitor';
import type { JobEvent } from '../../training/job/events';
import type { JobOverrides } from '../../training/job/spec';
import type { ScriptProblem } from '../../training/launchers/pythonErrors';
import { loadTorchrunJob, runTorchrun, type TorchrunHandle, type TorchrunSpec } from '../../training/launchers/torchrun';
import type { FormatState } from '../../cli/train';
import type { PanelJob } from '../../common/protocol';
import { trainingJobFeed } from '../training/trainingFeed';
import { terminalMemoryText } from './rankMemoryFormat';
import { RankMemoryView } from './rankMemoryView';
import { runsOption } from '../runs/runsFolder';
import { ScriptCurve } from './scriptCurve';
import {
  diagnosticSource, interpreterText, problemDiagnostics, taskExitCode, terminalText, torchrunEndMessage, torchrunRefusal, torchrunTaskName, withInterpreterHint,
  type InterpreterChoice,
} from './torchrunFormat';

export const torchrunTaskType = 'gpuWorkbench.torchrun';

/** A torchrun job as a task: `job` is the job file (relative to the workspace folder, or absolute); `run` makes each start from "Start Training…" unique. */
export interface TorchrunTaskDefinition extends vscode.TaskDefinition {
  readonly type: typeof torchrunTaskType;
  readonly job: string;
  readonly run?: number;
}

type FinalEvent = Extract<JobEvent, { type: 'job/done' | 'job/failed' }>;

/**
 * The task's terminal: starts the job when VS Code opens it, prints its output as it comes, and
 * ends with the job's exit code. Closing it (Terminate Task) or Ctrl-C stops the job.
 */
class TorchrunTerminal implements vscode.Pseudoterminal {
  private readonly writeEmitter = new vscode.EventEmitter<string>();
  private readonly closeEmitter = new vscode.EventEmitter<number>();
  readonly onDidWrite = this.writeEmitter.event;
  readonly onDidClose = this.closeEmitter.event;
  private closed = false;
  private ended = false;

  constructor(private readonly onOpen: (terminal: TorchrunTerminal) => void, private readonly onStop: () => void) {}

  open(): void {
    this.onOpen(this);
  }

  /** The user closed the terminal or terminated the task. */
  close(): void {
    this.closed = true;
    if (!this.ended) this.onStop();
  }

  handleInput(data: string): void {
    if (data === '\x03' && !this.ended) this.onStop();
  }

  write(text: string): void {
    if (!this.closed) this.writeEmitter.fire(`${text.replace(/\r?\n/g, '\r\n')}\r\n`);
  }

  end(code: number): void {
    if (this.ended) return;
    this.ended = true;
    if (!this.closed) this.closeEmitter.fire(code);
  }
}

/** What makes a job's spec when its terminal opens (the interpreter is chosen then), with where its interpreter came from. */
export type SpecLoader = (file: string, overrides: JobOverrides) => Promise<{ spec: TorchrunSpec; interpreter: InterpreterChoice }>;

interface ActiveRun {
  readonly file: string;
  /** What it was started with (the devices picked), for its run record. */
  readonly overrides: JobOverrides;
  name: string;
  handle?: TorchrunHandle;
  /** Resolves when the job has ended (or never started). */
  readonly ended: Promise<FinalEvent | undefined>;
  stopRequested: boolean;
}

/** Runs torchrun jobs as tasks, one at a time, and keeps their problems in the Problems panel. */
export class TorchrunTasks implements vscode.Disposable {
  private readonly diagnostics = vscode.languages.createDiagnosticCollection('gpuWorkbench.torchrun');
  private active: ActiveRun | undefined;
  private runs = 0;
  /** The last torchrun job's model summary (the companion's, after its first step), for Show Model Summary. */
  private lastSummary: { readonly job: string; readonly text: string } | undefined;

  constructor(
    private readonly channel: vscode.LogOutputChannel,
    private readonly monitor: GpuMonitor,
    private readonly loadSpec: SpecLoader,
    /** The name of a job running outside these tasks (in the training host), else undefined. */
    private readonly busy: () => string | undefined,
  ) {}

  get running(): boolean {
    return this.active !== undefined;
  }

  get runningName(): string | undefined {
    return this.active?.name;
  }

  /** Starts the job as a task (from "Start Training…", with the devices picked there); the spec was validated by the caller. */
  async start(spec: TorchrunSpec, overrides: JobOverrides): Promise<void> {
    const folder = vscode.workspace.getWorkspaceFolder(vscode.Uri.file(spec.file));
    const definition: TorchrunTaskDefinition = { type: torchrunTaskType, job: folder ? vscode.workspace.asRelativePath(spec.file, false) : spec.file, run: ++this.runs };
    const task = this.task(definition, folder ?? vscode.TaskScope.Workspace, torchrunTaskName(spec.name, spec.nprocPerNode), spec.file, overrides);
    await vscode.tasks.executeTask(task);
  }

  /** A task from tasks.json: the same execution, resolved against its folder. */
  resolveTask(task: vscode.Task): vscode.Task | undefined {
    const d = task.definition as Partial<TorchrunTaskDefinition>;
    if (typeof d.job !== 'string' || !d.job) return undefined;
    const folder = typeof task.scope === 'object' ? task.scope : vscode.workspace.workspaceFolders?.[0];
    const file = isAbsolute(d.job) ? d.job : folder ? resolve(folder.uri.fsPath, d.job) : resolve(d.job);
    return this.task(task.definition as TorchrunTaskDefinition, task.scope ?? vscode.TaskScope.Workspace, task.name || `torchrun ${d.job}`, file, {});
  }

  /** Ends the running job (torchrun and all its workers) and waits for its end. */
  async stop(): Promise<void> {
    const run = this.active;
    if (!run) return;
    run.stopRequested = true;
    run.handle?.cancel();
    await run.ended;
  }

  /**
   * Show Model Summary: the last torchrun job's summary (layers, output shapes, parameters, memory and its
   * 16-bit estimates) in an editor, on demand: it was in the task terminal and the log, which scroll on.
   */
  async showSummary(): Promise<void> {
    const s = this.lastSummary;
    if (!s) {
      void vscode.window.showInformationMessage('No model summary yet: a torchrun job sends it after its first optimizer step (its Python companion hooks the model). Start one with GPU Workbench: Start Training…');
      return;
    }
    const doc = await vscode.workspace.openTextDocument({ content: `${s.job} (torchrun job)\n${s.text}\n`, language: 'plaintext' });
    await vscode.window.showTextDocument(doc, { preview: true });
  }

  dispose(): void {
    this.active?.handle?.cancel();
    this.diagnostics.dispose();
  }

  private task(definition: TorchrunTaskDefinition, scope: vscode.WorkspaceFolder | vscode.TaskScope, name: string, file: string, overrides: JobOverrides): vscode.Task {
    const execution = new vscode.CustomExecution(() => {
      let run: ActiveRun | undefined;
      const terminal = new TorchrunTerminal(
        (t) => { run = this.begin(file, overrides, t); },
        () => {
          if (run && this.active === run) void this.stop();
        },
      );
      return Promise.resolve(terminal);
    });
    const task = new vscode.Task(definition, scope, name, 'GPU Workbench', execution);
    task.presentationOptions = { reveal: vscode.TaskRevealKind.Always, panel: vscode.TaskPanelKind.Dedicated, focus: false, clear: true, echo: false, showReuseMessage: false };
    task.isBackground = false;
    return task;
  }

  /** The terminal opened: load the job and run it, unless it may not run now. */
  private begin(file: string, overrides: JobOverrides, terminal: TorchrunTerminal): ActiveRun | undefined {
    // One job at a time, whichever way it runs: two would share the GPUs and the panel.
    const refusal = torchrunRefusal({ trusted: vscode.workspace.isTrusted, running: this.active?.name ?? this.busy() });
    if (refusal) {
      terminal.write(`\x1b[31m${refusal}\x1b[0m`);
      terminal.end(1);
      if (vscode.workspace.isTrusted) void vscode.window.showErrorMessage(refusal);
      return undefined;
    }
    let resolveEnded!: (e: FinalEvent | undefined) => void;
    const run: ActiveRun = { file, name: file, overrides, ended: new Promise((r) => { resolveEnded = r; }), stopRequested: false };
    this.active = run;
    // A new run of any torchrun job: the last run's problems are stale.
    this.diagnostics.clear();
    void this.loadSpec(file, overrides).then(
      ({ spec, interpreter }) => {
        if (run.stopRequested) {
          terminal.write('\x1b[33mStopped before it started.\x1b[0m');
          this.finish(run, terminal, undefined, resolveEnded);
          return;
        }
        this.execute(run, spec, interpreter, terminal, resolveEnded);
      },
      (err: unknown) => {
        const message = err instanceof Error ? err.message : String(err);
        terminal.write(`\x1b[31mCannot start ${file}: ${message}\x1b[0m`);
        this.channel.error(`torchrun job ${file}: ${message}`);
        this.finish(run, terminal, undefined, resolveEnded);
      },
    );
    return run;
  }

  private execute(run: ActiveRun, spec: TorchrunSpec, interpreter: InterpreterChoice, terminal: TorchrunTerminal, resolveEnded: (e: FinalEvent | undefined) => void): void {
    run.name = spec.name;
    const lease: Disposable = this.monitor.acquire('torchrun');
    const problems: ScriptProblem[] = [];
    const panelBase = {
      name: spec.name,
      strategy: 'torchrun',
      workers: (spec.devices ?? []).map((d, rank) => ({ rank, gpuIndex: d, device: `gpu:${d} (CUDA_VISIBLE_DEVICES=${d})` })),
      lossSteps: [],
      loss: [],
    };
    const runningStatus = `torchrun · ${spec.nprocPerNode} process${spec.nprocPerNode === 1 ? '' : 'es'}`;
    let panel: PanelJob = { ...panelBase, state: 'running', status: runningStatus };
    // A multi-node job: which node this is, its world and its restarts (the same job), in the card's status line.
    const elastic = new ElasticStatus();
    trainingJobFeed.set(panel);
    // Each rank's memory (the companion's, after every optimizer step): its process bar and curve in the panel, growth named by rank.
    const memory = new RankMemoryView(spec.script, panelBase.workers, spec.devices, (change) => {
      panel = { ...panel, ...change };
      trainingJobFeed.set(panel);
    });
    const memoryLines: FormatState = { every: 1 };
    // The losses and metrics the script printed or reported.
    const curve = new ScriptCurve();
    this.channel.info(`starting ${spec.name} (${vscode.workspace.asRelativePath(spec.file)}) as a task: torchrun with ${spec.nprocPerNode} process${spec.nprocPerNode === 1 ? '' : 'es'}, ${interpreterText(interpreter)}`);
    const onEvent = (event: JobEvent): void => {
      // A missing interpreter or torch: the hint says where the interpreter came from and what changes it here.
      const e = event.type === 'job/failed' ? withInterpreterHint(event, interpreter) : event;
      memory.onEvent(e);
      // The CLI's memory line, as often as it prints it; the latest one before the job's end.
      const memoryText = terminalMemoryText(e, memoryLines);
      if (memoryText !== undefined) terminal.write(`\x1b[2m${memoryText}\x1b[0m`);
      const text = terminalText(e);
      if (text !== undefined) terminal.write(text);
      if (e.type === 'job/summary' && e.text) {
        this.lastSummary = { job: spec.name, text: e.text };
        this.channel.info(`${spec.name}: ${e.text}`);
      } else if (e.type === 'job/log' && e.problem) {
        problems.push(e.problem);
        this.channel.warn(e.message);
        this.showProblems(problems, spec);
      } else if (e.type === 'job/log' && e.rank === undefined && /^(?:torchrun|Slurm): /.test(e.message)) {
        this.channel.info(e.message);
        if (e.elastic) {
          elastic.onEvent(e.elastic);
          panel = { ...panel, status: `${runningStatus} · ${elastic.text() ?? ''}` };
          trainingJobFeed.set(panel);
        }
      } else if (e.type === 'job/report' && curve.add(e)) {
        panel = { ...panel, ...curve.panel() };
        trainingJobFeed.set(panel);
      }
    };
    // A Slurm job's nodes: probed with srun --overlap while squeue says RUNNING, drawn as the panel's "Slurm job J" section.
    const nodes = new SlurmNodesPoller((id, list, count) => readJobNodes(id, list, count), (slurmNodes) => {
      const { slurmNodes: _old, ...rest } = panel;
      panel = slurmNodes ? { ...rest, slurmNodes } : rest;
      trainingJobFeed.set(panel);
    });
    const slurm = spec.nodes?.launcher === 'slurm' ? { slurm: slurmSettings(vscode.Uri.file(spec.file)), onSlurmInfo: (info: SlurmJobInfo) => nodes.update(info) } : {};
    let handle: TorchrunHandle;
    try {
      handle = runTorchrun(spec, onEvent, { ...runsOption(spec.file), overrides: run.overrides, ...slurm });
    } catch (err) {
      nodes.stop();
      lease.dispose();
      memory.dispose();
      terminal.write(`\x1b[31mCannot start torchrun: ${err instanceof Error ? err.message : String(err)}\x1b[0m`);
      this.finish(run, terminal, undefined, resolveEnded);
      return;
    }
    run.handle = handle;
    if (run.stopRequested) handle.cancel();
    void handle.finished.then((ending) => {
      const final = withInterpreterHint(ending, interpreter);
      nodes.stop();
      lease.dispose();
      memory.dispose();
      const state = final.type === 'job/done' ? 'done' : final.cancelled ? 'cancelled' : 'failed';
      const message = torchrunEndMessage(spec.name, final, problems);
      const restarts = elastic.restartsText();
      trainingJobFeed.set({ ...panelBase, ...memory.current(), state, status: restarts ? `${message} (${restarts})` : message, ...curve.panel() });
      if (state === 'failed') this.channel.error(message);
      else this.channel.info(message);
      this.finish(run, terminal, final, resolveEnded);
      void this.notify(message, state, problems.length);
    });
  }

  private finish(run: ActiveRun, terminal: TorchrunTerminal, final: FinalEvent | undefined, resolveEnded: (e: FinalEvent | undefined) => void): void {
    if (this.active === run) this.active = undefined;
    terminal.end(final ? taskExitCode(final) : 1);
    resolveEnded(final);
  }

  private showProblems(problems: readonly ScriptProblem[], spec: TorchrunSpec): void {
    const byFile = new Map<string, vscode.Diagnostic[]>();
    for (const p of problemDiagnostics(problems, spec.script, spec.cwd)) {
      const d = new vscode.Diagnostic(lineRange(p.file, p.line), p.message, p.severity === 'warning' ? vscode.DiagnosticSeverity.Warning : vscode.DiagnosticSeverity.Error);
      d.source = diagnosticSource;
      d.code = p.code;
      if (p.related.length) d.relatedInformation = p.related.map((r) => new vscode.DiagnosticRelatedInformation(new vscode.Location(vscode.Uri.file(r.file), lineRange(r.file, r.line)), r.message));
      byFile.set(p.file, [...(byFile.get(p.file) ?? []), d]);
    }
    this.diagnostics.clear();
    for (const [file, list] of byFile) this.diagnostics.set(vscode.Uri.file(file), list);
  }

  private async notify(message: string, state: 'done' | 'failed' | 'cancelled', problems: number): Promise<void> {
    const showProblems = 'Show Problems';
    const actions = problems ? [showProblems] : [];
    const answer = state === 'failed' ? await vscode.window.showErrorMessage(message, ...actions) : await vscode.window.showInformationMessage(message, ...actions);
    if (answer === showProblems) await vscode.commands.executeCommand('workbench.actions.view.problems');
  }
}

/** The line's text range (from its first non-blank character), or the whole line when the file cannot be read. */
function lineRange(file: string, line: number): vscode.Range {
  try {
    const text = readFileSync(file, 'utf8').split(/\r?\n/)[line];
    if (text !== undefined) {
      const start = text.length - text.trimStart().length;
      return new vscode.Range(line, start, line, Math.max(start + 1, text.trimEnd().length));
    }
  } catch {
    // Not readable here (a path from another machine's traceback): the whole line.
  }
  return new vscode.Range(line, 0, line, Number.MAX_SAFE_INTEGER);
}

/** A spec loader for tasks: the job file with the interpreter chosen for it. */
export function specLoader(interpreter: (file: string) => Promise<InterpreterChoice>): SpecLoader {
  return async (file, overrides) => {
    const choice = await interpreter(file);
    const spec = loadTorchrunJob(file, overrides, choice.python);
    // A multi-node (or Slurm) job spells torchrun's flags for its torch: asked here without blocking, so runTorchrun finds it cached.
    if (spec.nodes) await probeTorchVersion(spec.python);
    return { spec, interpreter: choice };
  };
}

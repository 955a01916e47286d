/**
 * "Start Training…" and "Stop Training": pick a job file, confirm strategy and devices, and run
 * the job in a forked training host (`dist/trainingHost.js`), so that a crash or an out-of-memory
 * error never takes the editor down. Progress in a cancellable notification, the log in the
 * "GPU Workbench: Training" channel, the job's devices and loss curve in the GPU panel (through
 * `trainingJobFeed`), and a GPU monitor lease while it runs so the panel keeps sampling.
 * A `"kind": "torchrun"` job runs instead as a VS Code task (`torchrunTask.ts`): its terminal
 * shows the script's output and its exceptions (CUDA errors with their explanation) go to the Problems panel at the user's line.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { cpus } from 'node:os';
import { dirname, relative } from 'node:path';
import * as vscode from 'vscode';
import { formatEvent } from '../../cli/train';
import type { PanelJob } from '../../common/protocol';
import type { Disposable, GpuMonitor } from '../../gpu/monitor';
import type { GpuSnapshot } from '../../gpu/types';
import { listWebgpuAdapters } from '../../training/backends/webgpu';
import { existingRun } from '../../training/job/checkpoint';
import type { HostCommand, JobEvent } from '../../training/job/events';
import { JobFileError, loadJobFile, type JobOverrides, type JobSpec, type Strategy } from '../../training/job/spec';
import { isTorchrunJob, loadTorchrunJob, type TorchrunSpec } from '../../training/launchers/torchrun';
import { chooseInterpreter, jobPythonField, type InterpreterChoice } from '../torchrun/torchrunFormat';
import { specLoader, TorchrunTasks, torchrunTaskType } from '../torchrun/torchrunTask';
import { createTuneSpec, openWalkthrough, runWithTorchrun } from '../torchrun/runWithTorchrun';
import { trainingJobFeed } from './trainingFeed';
import { runsOption } from '../runs/runsFolder';
import { problemRange } from '../jobFiles/specProblems';
import {
  appendLoss, deviceChoices, doneMessage, existingRunPrompt, failureMessage, hostExitMessage, panelWorkers, plannedBackend, withDeviceBytes, progressPercent, progressText,
  strategyItems, templateFileName, templateJobText, type DeviceItem, type PlannedAdapters, type PlannedBackend,
} from './trainingFormat';

/** How long a cancelled job gets to stop its workers before the host is killed. */
const cancelGraceMs = 5000;
const snapshotWaitMs = 3000;

type FinalEvent = Extract<JobEvent, { type: 'job/done' | 'job/failed' }>;
type Ending = { kind: 'event'; event: FinalEvent } | { kind: 'hostExit'; code: number | null; signal: NodeJS.Signals | null } | { kind: 'forkError'; error: Error };

/** One job in one forked host; ends when the host has exited. */
class TrainingRun {
  readonly ended: Promise<Ending>;
  private readonly child: ChildProcess;
  private final: FinalEvent | undefined;
  private workerPids: number[] = [];
  private exited = false;
  private cancelling = false;
  private epochs: number;
  private readonly steps: number[] = [];
  private readonly loss: number[] = [];
  private panel: PanelJob;
  private readonly cliState = { every: 1 };
  private lastPercent = 0;
  /** What the job really got (backend, devices), for the end message. */
  started: Extract<JobEvent, { type: 'job/started' }> | undefined;

  constructor(
    hostScript: string,
    readonly spec: JobSpec,
    overrides: JobOverrides,
    resume: boolean,
    private readonly channel: vscode.LogOutputChannel,
    private readonly onProgress: (message: string, increment: number) => void,
  ) {
    this.epochs = spec.epochs;
    this.panel = { name: spec.name, strategy: spec.strategy, state: 'starting', status: 'starting workers…', workers: [], lossSteps: [], loss: [] };
    trainingJobFeed.set(this.panel);
    this.child = fork(hostScript, [], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'], execArgv: [] });
    const output = (d: Buffer) => { for (const line of d.toString().split('\n')) if (line.trim()) channel.warn(`host: ${line}`); };
    this.child.stdout?.on('data', output);
    this.child.stderr?.on('data', output);
    this.ended = new Promise<Ending>((resolve) => {
      this.child.on('message', (raw: unknown) => this.onEvent(raw as JobEvent));
      this.child.on('error', (error) => {
        this.killWorkers();
        resolve({ kind: 'forkError', error });
      });
      this.child.on('exit', (code, signal) => {
        this.exited = true;
        // A host killed under a job leaves its workers without a parent: they exit when their IPC
        // channel closes, and we kill them too so that none outlives the job.
        if (!this.final) this.killWorkers();
        resolve(this.final ? { kind: 'event', event: this.final } : { kind: 'hostExit', code, signal });
      });
    });
    this.send({ type: 'host/start', file: spec.file, overrides, resume, ...runsOption(spec.file) });
  }

  get running(): boolean {
    return !this.exited;
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** host/cancel, then SIGKILL of the host and its workers after a grace period. */
  async cancel(): Promise<void> {
    if (this.exited) return;
    if (!this.cancelling) {
      this.cancelling = true;
      this.channel.info('stopping the job…');
      this.send({ type: 'host/cancel' });
      const timer = setTimeout(() => {
        if (this.exited) return;
        this.channel.warn(`the training host did not stop within ${cancelGraceMs / 1000} s: killing it and its workers`);
        this.child.kill('SIGKILL');
        this.killWorkers();
      }, cancelGraceMs);
      void this.ended.then(() => clearTimeout(timer));
    }
    await this.ended;
  }

  private send(command: HostCommand): void {
    if (this.child.connected) this.child.send(command);
  }

  private onEvent(e: JobEvent): void {
    if (e.type === 'job/started') {
      this.started = e;
      this.workerPids = e.workers.map((w) => w.pid);
      this.epochs = e.epochs;
    }
    // The log reads as `gpu-workbench train` prints: backend and devices first.
    const line = e.type === 'job/checkpoint' ? `checkpoint: ${relative(dirname(this.spec.file), e.dir) || e.dir}` : formatEvent(e, this.cliState);
    if (line) {
      const text = line.split('\n');
      if (e.type === 'job/failed' && !e.cancelled) text.forEach((l) => this.channel.error(l));
      else if (e.type === 'job/log' && e.level === 'warning') text.forEach((l) => this.channel.warn(l));
      else text.forEach((l) => this.channel.info(l));
    }
    switch (e.type) {
      case 'job/started':
        this.update({ state: 'running', status: e.description, workers: panelWorkers(e.workers) });
        this.onProgress(e.description, 0);
        break;
      case 'job/step': {
        appendLoss(this.steps, this.loss, e.globalStep, e.loss);
        const text = progressText(e, this.epochs);
        const percent = progressPercent(e, this.epochs);
        this.onProgress(text, Math.max(0, percent - this.lastPercent));
        this.lastPercent = Math.max(this.lastPercent, percent);
        this.update({ status: text, lossSteps: [...this.steps], loss: [...this.loss] });
        break;
      }
      case 'job/epoch':
        this.onProgress(`epoch ${e.epoch}/${e.epochs} done · test accuracy ${(100 * e.testAccuracy).toFixed(2)}%`, 0);
        break;
      case 'job/done':
        this.final = e;
        this.update({ state: 'done', status: `done · test accuracy ${(100 * e.metrics.testAccuracy).toFixed(2)}%` });
        // The host exits when its channel closes; every worker has exited already.
        if (this.child.connected) this.child.disconnect();
        break;
      case 'job/failed':
        this.final = e;
        this.update({ state: e.cancelled ? 'cancelled' : 'failed', status: e.cancelled ? 'stopped' : `failed${e.rank !== undefined ? ` on rank ${e.rank}` : ''}: ${e.reason}` });
        if (this.child.connected) this.child.disconnect();
        break;
      case 'job/memory':
        // What TF.js holds on the device, for the GPU panel's process row of this worker.
        if (e.deviceBytes !== undefined) this.update({ workers: withDeviceBytes(this.panel.workers, e.rank, e.deviceBytes) });
        break;
      case 'job/summary':
      case 'job/rankMemory':
      case 'job/checkpoint':
      case 'job/log':
      case 'job/report':
        break;
      default: {
        const unknown: never = e;
        this.channel.warn(`unknown event from the training host: ${JSON.stringify(unknown).slice(0, 200)}`);
      }
    }
  }

  /** Marks the end for the panel when the host died without a final event. */
  markHostDied(status: string): void {
    this.update({ state: 'failed', status });
  }

  private update(change: Partial<PanelJob>): void {
    this.panel = { ...this.panel, ...change };
    trainingJobFeed.set(this.panel);
  }

  private killWorkers(): void {
    for (const pid of this.workerPids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
  }
}

class TrainingController implements vscode.Disposable {
  private readonly channel = vscode.window.createOutputChannel('GPU Workbench: Training', { log: true });
  private run: TrainingRun | undefined;
  private starting = false;
  readonly torchrun: TorchrunTasks;

  constructor(private readonly context: vscode.ExtensionContext, private readonly monitor: GpuMonitor) {
    // A torchrun task from tasks.json refuses while a job runs in the training host.
    this.torchrun = new TorchrunTasks(this.channel, monitor, specLoader(torchrunInterpreter), () => (this.run?.running ? this.run.spec.name : undefined));
  }

  /** The running job's name, whichever way it runs. */
  private get runningName(): string | undefined {
    return this.run?.running ? this.run.spec.name : this.torchrun.runningName;
  }

  private async stopRunning(): Promise<void> {
    if (this.run?.running) await this.run.cancel();
    await this.torchrun.stop();
  }

  /** `uri`: a job file chosen in the explorer's context menu; otherwise the user picks one. */
  async start(uri?: vscode.Uri): Promise<void> {
    if (!trusted('start training')) return;
    if (this.starting) return;
    this.starting = true;
    let lease: Disposable | undefined;
    try {
      if (!await this.stopRunningIfAgreed()) return;
      const file = uri?.scheme === 'file' && uri.fsPath.endsWith('.job.json') ? uri.fsPath : await this.pickJobFile();
      if (!file) return;
      if (isTorchrunJob(file)) {
        // The script has its own strategy: only the devices (one process each) are picked, then it runs as a task.
        const spec = await this.validateTorchrun(file, {});
        if (!spec) return;
        lease = this.monitor.acquire('training');
        const jobDevices = spec.devices ?? Array.from({ length: spec.nprocPerNode }, (_, i) => i);
        const devices = await this.pickDevices(jobDevices, 'ddp', await this.snapshot(), `Start Training (2/2): devices for ${spec.name} (torchrun, one process each)`);
        if (devices === undefined) return;
        const final = await this.validateTorchrun(file, { devices });
        if (final) await this.torchrun.start(final, { devices });
        return;
      }
      const spec = await this.validate(file, {});
      if (!spec) return;

      const strategy = await this.pickStrategy(spec);
      if (!strategy) return;
      // Sampling starts now so that the device pick shows fresh free memory.
      lease = this.monitor.acquire('training');
      const devices = await this.pickDevices(spec.devices, strategy, await this.snapshot(), `Start Training (3/3): devices for ${spec.name} (${strategy})`, plannedBackend(spec.backend, this.hostCanLoad, await this.webgpuAdapters()));
      if (devices === undefined) return;
      const overrides: JobOverrides = { strategy, devices };
      const final = await this.validate(file, overrides);
      if (!final) return;
      const resume = await this.askResume(final);
      if (resume === undefined) return;
      // A torchrun task (tasks.json) may have started while the pickers were open.
      const startedMeanwhile = this.runningName;
      if (startedMeanwhile !== undefined) {
        void vscode.window.showErrorMessage(`Cannot start ${final.name}: training ${startedMeanwhile} started meanwhile. Stop it first (GPU Workbench: Stop Training).`);
        return;
      }
      const jobLease = lease;
      lease = undefined;
      this.launch(final, overrides, resume, jobLease);
    } finally {
      lease?.dispose();
      this.starting = false;
    }
  }

  /** The Runs view's Re-run and Resume: a recorded run's job file with the overrides it ran with, no pickers. */
  async startAgain(file: string, overrides: JobOverrides, resume: boolean): Promise<void> {
    if (!trusted('start training') || this.starting) return;
    this.starting = true;
    try {
      // As Start Training does: offer to stop the running job rather than refuse.
      if (!await this.stopRunningIfAgreed()) return;
      if (isTorchrunJob(file)) {
        const spec = await this.validateTorchrun(file, overrides);
        if (spec) await this.torchrun.start(spec, overrides);
        return;
      }
      const spec = await this.validate(file, overrides);
      if (spec) this.launch(spec, overrides, resume, this.monitor.acquire('training'));
    } finally {
      this.starting = false;
    }
  }

  /** Whether `pid` runs a job of this window: its training host, or this extension host (a torchrun task). */
  runsHere(pid: number): boolean {
    return pid === process.pid || (this.run?.running === true && this.run.pid === pid);
  }

  /** "Run with torchrun…" and "Create Tune Spec for Script…" on a Python script (runWithTorchrun.ts), with this controller's pickers. */
  scriptCommand(command: typeof runWithTorchrun): (arg?: unknown) => Promise<void> {
    return async (arg) => {
      const lease = this.monitor.acquire('training');
      try {
        await command(arg, {
          channel: this.channel,
          pickProcesses: async (name) => this.pickDevices([0, 1], 'ddp', await this.snapshot(), `Run with torchrun (1/2): processes for ${name} (torchrun, one process per device)`),
          defaultInterpreter: () => chooseInterpreter({ setting: vscode.workspace.getConfiguration('gpuWorkbench.training').get<string>('python', ''), extension: pythonExtensionInterpreter }),
          gpuCount: () => this.monitor.latest()?.devices.length ?? 0,
          runJob: (file) => this.runTorchrunFile(file),
        });
      } finally {
        lease.dispose();
      }
    };
  }

  /** True when no job runs, or the user agreed to stop the running one (and it has stopped). */
  private async stopRunningIfAgreed(): Promise<boolean> {
    const running = this.runningName;
    if (running === undefined) return true;
    const stop = 'Stop and Start Another';
    const answer = await vscode.window.showWarningMessage(`Training ${running} is still running. Stop it and start another job?`, { modal: true }, stop);
    if (answer !== stop) return false;
    await this.stopRunning();
    return true;
  }

  /** Runs a torchrun job file as it is (its own devices), after stopping a running job if the user agrees. */
  private async runTorchrunFile(file: string): Promise<void> {
    if (!await this.stopRunningIfAgreed()) return;
    const spec = await this.validateTorchrun(file, {});
    if (spec) await this.torchrun.start(spec, {});
  }

  async stop(): Promise<void> {
    if (!trusted('stop training')) return;
    if (this.runningName === undefined) {
      void vscode.window.showInformationMessage('No training job is running.');
      return;
    }
    await this.stopRunning();
  }

  dispose(): void {
    // The editor is closing: the host stops its workers when its channel closes; make sure.
    void this.run?.cancel();
    this.torchrun.dispose(); // ends torchrun's process group
    this.channel.dispose();
  }

  /**
   * Whether to resume, when the job's checkpoint folder holds an earlier run: Resume, or Start
   * Over (the engine moves the earlier run into previous-<time>/ first); undefined: cancelled.
   */
  private async askResume(spec: JobSpec): Promise<boolean | undefined> {
    const run = spec.checkpointDir ? existingRun(spec.checkpointDir) : undefined;
    if (!run) return false;
    const prompt = existingRunPrompt(run, spec, vscode.workspace.asRelativePath(run.root));
    const answer = await vscode.window.showWarningMessage(prompt.message, { modal: true, detail: prompt.detail }, ...prompt.buttons);
    return answer === undefined ? undefined : answer === 'Resume';
  }

  private launch(spec: JobSpec, overrides: JobOverrides, resume: boolean, lease: Disposable): void {
    const host = this.context.asAbsolutePath('dist/trainingHost.js');
    this.channel.info(`${resume ? 'resuming' : 'starting'} ${spec.name} (${vscode.workspace.asRelativePath(spec.file)}): strategy ${overrides.strategy}, devices ${JSON.stringify(overrides.devices)}`);
    void vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `Training ${spec.name}`, cancellable: true },
      async (progress, token) => {
        const run = new TrainingRun(host, spec, overrides, resume, this.channel, (message, increment) => progress.report({ message, increment }));
        this.run = run;
        progress.report({ message: 'starting workers…' });
        const cancel = token.onCancellationRequested(() => void run.cancel());
        try {
          const ending = await run.ended;
          void this.report(run, ending);
        } finally {
          cancel.dispose();
          lease.dispose();
        }
      },
    );
  }

  private async report(run: TrainingRun, ending: Ending): Promise<void> {
    const name = run.spec.name;
    let message: string;
    let error = true;
    switch (ending.kind) {
      case 'event':
        if (ending.event.type === 'job/done') {
          message = doneMessage(name, ending.event.metrics, run.started);
          error = false;
        } else {
          message = failureMessage(name, ending.event);
          error = ending.event.cancelled !== true;
        }
        break;
      case 'hostExit':
        message = hostExitMessage(name, ending.code, ending.signal);
        run.markHostDied(message);
        this.channel.error(message);
        break;
      case 'forkError':
        message = `The training host could not be started (${ending.error.message}). Is the extension built (dist/trainingHost.js)?`;
        run.markHostDied(message);
        this.channel.error(message);
        break;
    }
    const showLog = 'Show Log';
    const answer = error ? await vscode.window.showErrorMessage(message, showLog) : await vscode.window.showInformationMessage(message, showLog);
    if (answer === showLog) this.channel.show(true);
  }

  private async pickJobFile(): Promise<string | undefined> {
    type Item = vscode.QuickPickItem & { file?: string; create?: true; torchrun?: true };
    const files = await vscode.workspace.findFiles('**/*.job.json', '**/node_modules/**', 500);
    const active = vscode.window.activeTextEditor?.document.uri;
    const activeJob = active?.scheme === 'file' && active.fsPath.endsWith('.job.json') ? active.fsPath : undefined;
    const paths = [...new Set([...(activeJob ? [activeJob] : []), ...files.map((f) => f.fsPath).sort()])];
    const items: Item[] = paths.map((p) => ({
      label: vscode.workspace.asRelativePath(p),
      description: p === activeJob ? 'active editor' : undefined,
      file: p,
    }));
    items.push({ label: '', kind: vscode.QuickPickItemKind.Separator }, { label: '$(add) Create from template…', description: 'MNIST, an MLP with DDP on 2 devices', create: true },
      { label: '$(add) torchrun job for a PyTorch script…', description: 'Run with torchrun: writes <script>.job.json next to it', torchrun: true });
    const picked = await vscode.window.showQuickPick(items, { title: 'Start Training (1/3): job file', placeHolder: paths.length ? 'The job to run' : 'No *.job.json in the workspace: create one from the MNIST template' });
    if (!picked) return undefined;
    if (picked.torchrun) {
      // Its own questions (script, processes, interpreter), then it runs the job it wrote.
      await this.scriptCommand(runWithTorchrun)();
      return undefined;
    }
    return picked.create ? this.createFromTemplate() : picked.file;
  }

  /** Writes a new job file (never over an existing one) into the workspace folder and opens it. */
  private async createFromTemplate(): Promise<string | undefined> {
    const folders = vscode.workspace.workspaceFolders ?? [];
    const folder = folders.length > 1 ? await vscode.window.showWorkspaceFolderPick({ placeHolder: 'Where to create the job file' }) : folders[0];
    if (!folder) {
      void vscode.window.showErrorMessage('Open a folder first: the job file is created in the workspace folder.');
      return undefined;
    }
    const entries = await vscode.workspace.fs.readDirectory(folder.uri);
    const name = templateFileName(new Set(entries.map(([n]) => n)));
    const uri = vscode.Uri.joinPath(folder.uri, name);
    await vscode.workspace.fs.writeFile(uri, Buffer.from(templateJobText(name), 'utf8'));
    await vscode.window.showTextDocument(uri, { preview: false });
    this.channel.info(`created ${vscode.workspace.asRelativePath(uri)} from the MNIST template`);
    return uri.fsPath;
  }

  private async pickStrategy(spec: JobSpec): Promise<Strategy | undefined> {
    const picked = await vscode.window.showQuickPick(strategyItems(spec.strategy), { title: `Start Training (2/3): strategy for ${spec.name}`, placeHolder: 'How to spread the job over the devices', matchOnDetail: true });
    return picked?.strategy;
  }

  private adapters: Promise<PlannedAdapters> | undefined;

  /** The WebGPU adapters Dawn lists on this machine, asked once (a child process, ~0.2 s) and kept. */
  private webgpuAdapters(): Promise<PlannedAdapters> {
    this.adapters ??= listWebgpuAdapters().catch((err: unknown) => ({ error: err instanceof Error ? err.message : String(err) }));
    return this.adapters;
  }

  /** Whether the training host (dist/trainingHost.js, whose workers load the backend) finds an optional package. */
  private readonly hostCanLoad = (pkg: string): boolean => {
    try {
      createRequire(this.context.asAbsolutePath('dist/trainingHost.js')).resolve(pkg);
      return true;
    } catch {
      return false;
    }
  };

  /** `backend`: what a TF.js job's workers will run on (none for torchrun, whose script has its own). */
  private async pickDevices(jobDevices: readonly number[], strategy: Strategy, snapshot: GpuSnapshot | null, title: string, backend?: PlannedBackend): Promise<number | number[] | undefined> {
    const choices = deviceChoices(snapshot, strategy, jobDevices, cpus().length, backend);
    title += choices.titleNote;
    if (choices.canPickMany) {
      const picked = await vscode.window.showQuickPick<DeviceItem & vscode.QuickPickItem>(choices.items, { title, placeHolder: choices.placeholder, canPickMany: true });
      if (!picked) return undefined;
      if (picked.length === 0) {
        void vscode.window.showWarningMessage('No GPU picked: training needs at least one device.');
        return undefined;
      }
      return picked.flatMap((p) => p.devices as number[]);
    }
    const picked = await vscode.window.showQuickPick<DeviceItem & vscode.QuickPickItem>(choices.items, { title, placeHolder: choices.placeholder });
    return picked?.devices;
  }

  /** The monitor's latest reading, or the first one within a few seconds (none: no GPU reading). */
  private snapshot(): Promise<GpuSnapshot | null> {
    const latest = this.monitor.latest();
    if (latest) return Promise.resolve(latest);
    return new Promise((resolve) => {
      const sub = this.monitor.onSnapshot((s) => {
        clearTimeout(timer);
        sub.dispose();
        resolve(s);
      });
      const timer = setTimeout(() => {
        sub.dispose();
        resolve(this.monitor.latest());
      }, snapshotWaitMs);
    });
  }

  /** The torchrun job with its interpreter (see `torchrunInterpreter`), or undefined after an error naming the file and the field. */
  private async validateTorchrun(file: string, overrides: JobOverrides): Promise<TorchrunSpec | undefined> {
    try {
      return loadTorchrunJob(file, overrides, (await torchrunInterpreter(file)).python);
    } catch (err) {
      await this.invalid(file, err);
      return undefined;
    }
  }

  /** The job with these overrides, or undefined after an error naming the file and the field. */
  private async validate(file: string, overrides: JobOverrides): Promise<JobSpec | undefined> {
    try {
      return loadJobFile(file, overrides);
    } catch (err) {
      await this.invalid(file, err);
      return undefined;
    }
  }

  private async invalid(file: string, err: unknown): Promise<void> {
    const message = err instanceof Error ? err.message : String(err);
    this.channel.error(`invalid job: ${message}`);
    const open = 'Open File';
    const answer = await vscode.window.showErrorMessage(`Cannot start training: ${message.replace(/\n/g, '; ')}`, open);
    if (answer === open) await this.openAt(file, err instanceof JobFileError ? err.problems[0] : undefined);
  }

  /** Opens the job file with the field a problem names selected: the range its squiggle has (problemRange). */
  private async openAt(file: string, problem: string | undefined): Promise<void> {
    const editor = await vscode.window.showTextDocument(vscode.Uri.file(file), { preview: false });
    const at = problem ? problemRange(editor.document.getText(), problem) : undefined;
    if (!at) return;
    const range = new vscode.Range(editor.document.positionAt(at.offset), editor.document.positionAt(at.offset + at.length));
    editor.selection = new vscode.Selection(range.start, range.end);
    editor.revealRange(range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
  }
}

function trusted(what: string): boolean {
  if (vscode.workspace.isTrusted) return true;
  void vscode.window.showErrorMessage(`GPU Workbench cannot ${what} in an untrusted workspace: a job file runs code (models, data loaders) from the workspace. Trust the workspace first (Workspaces: Manage Workspace Trust).`);
  return false;
}

export function registerTraining(context: vscode.ExtensionContext, monitor: GpuMonitor): void {
  const controller = new TrainingController(context, monitor);
  context.subscriptions.push(
    controller,
    vscode.commands.registerCommand('gpuWorkbench.startTraining', (uri?: vscode.Uri) => controller.start(uri instanceof vscode.Uri ? uri : undefined)),
    vscode.commands.registerCommand('gpuWorkbench.stopTraining', () => controller.stop()),
    // The Runs view's actions (not in the palette): run a recorded job again, and whether a run's process is this window's.
    vscode.commands.registerCommand('gpuWorkbench.runs.startAgain', (file: string, overrides: JobOverrides, resume: boolean) => controller.startAgain(file, overrides, resume)),
    vscode.commands.registerCommand('gpuWorkbench.runs.runsHere', (pid: number) => controller.runsHere(pid)),
    vscode.commands.registerCommand('gpuWorkbench.runWithTorchrun', controller.scriptCommand(runWithTorchrun)),
    vscode.commands.registerCommand('gpuWorkbench.createTuneSpec', controller.scriptCommand(createTuneSpec)),
    vscode.commands.registerCommand('gpuWorkbench.gettingStarted', openWalkthrough),
    vscode.commands.registerCommand('gpuWorkbench.showModelSummary', () => controller.torchrun.showSummary()),
    // torchrun tasks come from "Start Training…" or from tasks.json; the provider offers none itself.
    vscode.tasks.registerTaskProvider(torchrunTaskType, { provideTasks: () => [], resolveTask: (task) => controller.torchrun.resolveTask(task) }),
  );
}

/**
 * The interpreter for a torchrun job in the editor and where it came from: the job's own
 * "python", else the setting `gpuWorkbench.training.python`, else the Python extension's selected
 * environment, else `python3`.
 */
async function torchrunInterpreter(file: string): Promise<InterpreterChoice> {
  let text = '';
  try {
    // Through VS Code's file system, like every workspace file the extension reads itself.
    text = new TextDecoder().decode(await vscode.workspace.fs.readFile(vscode.Uri.file(file)));
  } catch {
    // Unreadable: loading the job reports it.
  }
  return chooseInterpreter({
    job: jobPythonField(text),
    setting: vscode.workspace.getConfiguration('gpuWorkbench.training').get<string>('python', ''),
    extension: pythonExtensionInterpreter,
  });
}

/** The Python extension's selected interpreter, when that extension is installed and names one. */
async function pythonExtensionInterpreter(): Promise<string | undefined> {
  type PythonApi = { environments?: { getActiveEnvironmentPath(): { path: string } } };
  const ext = vscode.extensions.getExtension<PythonApi>('ms-python.python');
  if (!ext) return undefined;
  try {
    const api = ext.isActive ? ext.exports : await ext.activate();
    return api.environments?.getActiveEnvironmentPath().path || undefined;
  } catch {
    return undefined;
  }
}

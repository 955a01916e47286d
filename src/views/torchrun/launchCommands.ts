/**
 * GPU Workbench: Copy Launch Commands: the exact command every node of a torchrun job runs (its
 * nnodes and rendezvous, one fresh rendezvous id for all of them unless the job has one, flags
 * spelt for the interpreter's torch) onto the clipboard, for machines with no scheduler: paste
 * each into a terminal on its node. From the palette (the active editor's job, else a pick of the
 * workspace's torchrun jobs) and the job file's context menu. The same text as
 * `gpu-workbench train JOB --print-launch`.
 */
import * as vscode from 'vscode';
import { log } from '../../log';
import { probeTorchVersion, launchCommands } from '../../training/launchers/multinode';
import { isTorchrunJob, loadTorchrunJob, slurmBatchText } from '../../training/launchers/torchrun';
import { slurmSettings } from '../common/slurmSettings';

export const copyLaunchCommandsId = 'gpuWorkbench.copyLaunchCommands';

/** The job: the one clicked, the active editor's, else one picked from the workspace's torchrun jobs. */
async function pickJob(arg: unknown): Promise<vscode.Uri | undefined> {
  if (arg instanceof vscode.Uri) return arg;
  const active = vscode.window.activeTextEditor?.document.uri;
  if (active?.scheme === 'file' && active.path.endsWith('.job.json') && isTorchrunJob(active.fsPath)) return active;
  const jobs = (await vscode.workspace.findFiles('**/*.job.json', '**/node_modules/**', 200)).filter((u) => u.scheme === 'file' && isTorchrunJob(u.fsPath));
  if (!jobs.length) {
    void vscode.window.showWarningMessage('Copy Launch Commands: no torchrun job ("kind": "torchrun" in a *.job.json file) in this workspace.');
    return undefined;
  }
  const picked = await vscode.window.showQuickPick(jobs.map((uri) => ({ label: vscode.workspace.asRelativePath(uri), uri })), { title: 'Copy Launch Commands: torchrun job' });
  return picked?.uri;
}

async function copyLaunchCommands(arg: unknown): Promise<void> {
  const uri = await pickJob(arg);
  if (!uri) return;
  // The extension runs where the workspace is (extensionKind "workspace"), so a file: URI is a path here.
  if (uri.scheme !== 'file') {
    void vscode.window.showErrorMessage(`Copy Launch Commands: ${uri.toString()} is not a file on the machine the extension runs on.`);
    return;
  }
  if (!isTorchrunJob(uri.fsPath)) {
    void vscode.window.showErrorMessage(`Copy Launch Commands: ${vscode.workspace.asRelativePath(uri)} is no torchrun job ("kind": "torchrun"): a TF.js job runs on this machine only.`);
    return;
  }
  let text: string;
  let nodes: number;
  try {
    const spec = loadTorchrunJob(uri.fsPath);
    const torch = await probeTorchVersion(spec.python);
    text = spec.nodes?.launcher === 'slurm' ? slurmBatchText(spec, torch, slurmSettings()) : launchCommands(spec, torch);
    nodes = spec.nodes?.maxNodes ?? 1;
  } catch (err) {
    void vscode.window.showErrorMessage(`Copy Launch Commands: ${err instanceof Error ? err.message : String(err)}`);
    return;
  }
  await vscode.env.clipboard.writeText(`${text}\n`);
  log.info(`Copy Launch Commands: ${vscode.workspace.asRelativePath(uri)}\n${text}`);
  const open = 'Open in Editor';
  const answer = await vscode.window.showInformationMessage(`Copied the launch commands of ${nodes} node${nodes > 1 ? 's' : ''} for ${vscode.workspace.asRelativePath(uri)}: run each on its own machine.`, open);
  if (answer === open) await vscode.window.showTextDocument(await vscode.workspace.openTextDocument({ language: 'shellscript', content: `${text}\n` }));
}

/**
 * Keeps the context key `gpuWorkbench.torchrunJobs` (the paths of the workspace's torchrun job
 * files) up to date, so that the explorer's and the editor's context menus offer Copy Launch
 * Commands on torchrun jobs only.
 */
function watchTorchrunJobs(context: vscode.ExtensionContext): void {
  const torchrun = new Set<string>();
  let timer: NodeJS.Timeout | undefined;
  const publish = () => {
    clearTimeout(timer);
    timer = setTimeout(() => void vscode.commands.executeCommand('setContext', 'gpuWorkbench.torchrunJobs', [...torchrun]), 100);
  };
  const check = (uri: vscode.Uri) => {
    const had = torchrun.has(uri.fsPath);
    const is = isTorchrunJob(uri.fsPath);
    if (is) torchrun.add(uri.fsPath);
    else torchrun.delete(uri.fsPath);
    if (had !== is) publish();
  };
  const watcher = vscode.workspace.createFileSystemWatcher('**/*.job.json');
  context.subscriptions.push(
    watcher,
    watcher.onDidCreate(check),
    watcher.onDidChange(check),
    watcher.onDidDelete((uri) => { if (torchrun.delete(uri.fsPath)) publish(); }),
    { dispose: () => clearTimeout(timer) },
  );
  void Promise.resolve(vscode.workspace.findFiles('**/*.job.json', '**/node_modules/**', 2000)).then((files) => files.forEach(check), () => undefined);
}

export function registerCopyLaunchCommands(context: vscode.ExtensionContext): void {
  watchTorchrunJobs(context);
  context.subscriptions.push(vscode.commands.registerCommand(copyLaunchCommandsId, (arg?: unknown) => copyLaunchCommands(arg)));
}

/**
 * "GPU Workbench: Find Max Batch Size": the largest batch that fits per device for a job file.
 *
 * The search runs in a forked process (`dist/cli.js train JOB --find-batch-size --json`), and
 * each of its trials in fresh worker processes below that, so an out-of-memory error (or a
 * backend that aborts) never reaches the editor. A cancellable progress notification shows the
 * trials; the result offers to write the batch size into the job file as an editor edit the
 * user can undo (Ctrl+Z), as Apply Best Config does.
 */
import { basename } from 'node:path';
import * as vscode from 'vscode';
import { formatBatchEvent } from '../../cli/train';
import { torchrunRefusal } from '../../training/launchers/findBatchSize';
import { isTorchrunJob } from '../../training/launchers/torchrun';
import { editConfigInEditor } from '../common/configEdit';
import { searchMessage, startSearch, type SearchEnding } from './batchSizeSearch';

let log: vscode.LogOutputChannel;

async function pickJobFile(uri: vscode.Uri | undefined): Promise<vscode.Uri | undefined> {
  if (uri?.scheme === 'file' && uri.fsPath.endsWith('.job.json')) return uri;
  const active = vscode.window.activeTextEditor?.document.uri;
  if (active?.scheme === 'file' && active.fsPath.endsWith('.job.json')) return active;
  // torchrun jobs are not offered: the search runs TF.js jobs only.
  const files = (await vscode.workspace.findFiles('**/*.job.json', '**/node_modules/**', 500)).filter((f) => !isTorchrunJob(f.fsPath)).sort((a, b) => a.fsPath.localeCompare(b.fsPath));
  if (files.length === 0) {
    void vscode.window.showInformationMessage('Find Max Batch Size: no TF.js *.job.json in the workspace (it does not search torchrun jobs). Create one with Start Training… first.');
    return undefined;
  }
  const picked = await vscode.window.showQuickPick(files.map((f) => ({ label: vscode.workspace.asRelativePath(f), file: f })), { title: 'Find Max Batch Size', placeHolder: 'For which job?' });
  return picked?.file;
}

/** Writes `batchSize` into the job file in an editor: a user edit, undoable, left for the user to save. */
async function writeBatchSize(uri: vscode.Uri, batchSize: number): Promise<void> {
  const doc = await vscode.workspace.openTextDocument(uri);
  const changed = await editConfigInEditor(doc, { batchSize }, 'Find Max Batch Size');
  if (changed?.length === 0) void vscode.window.showInformationMessage(`${vscode.workspace.asRelativePath(uri)} has "batchSize": ${batchSize} already.`);
}

async function findBatchSize(context: vscode.ExtensionContext, arg: unknown): Promise<void> {
  if (!vscode.workspace.isTrusted) {
    void vscode.window.showErrorMessage('GPU Workbench cannot find the max batch size in an untrusted workspace: it runs the job, and a job file runs code (models, data loaders) from the workspace. Trust the workspace first (Workspaces: Manage Workspace Trust).');
    return;
  }
  const uri = await pickJobFile(arg instanceof vscode.Uri ? arg : undefined);
  if (!uri) return;
  // A correct torchrun job this search cannot try: say so, without sending the user to the file.
  if (isTorchrunJob(uri.fsPath)) {
    void vscode.window.showInformationMessage(torchrunRefusal(uri.fsPath));
    return;
  }
  // The search reads the job from disk.
  const open = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
  if (open?.isDirty && !await open.save()) return;
  const name = basename(uri.fsPath);
  const cli = context.asAbsolutePath('dist/cli.js');
  log.info(`${name}: searching the largest batch that fits (each trial a few steps in a fresh worker process)`);
  const ending = await vscode.window.withProgress<SearchEnding>({ location: vscode.ProgressLocation.Notification, title: `Find Max Batch Size: ${name}`, cancellable: true }, (progress, token) => {
    progress.report({ message: 'first trial…' });
    const said = token.onCancellationRequested(() => log.info('cancelling the search…'));
    const search = startSearch(cli, uri.fsPath, {
      onEvent: (e) => {
        for (const line of formatBatchEvent(e).split('\n')) log.info(line);
        if (e.type === 'batch/trial') progress.report({ message: `batch ${e.batchSize}: ${e.outcome.kind === 'oom' ? 'out of memory' : e.outcome.kind}` });
      },
      onLine: (line) => log.warn(line),
      cancel: token,
    });
    // Disposed with the extension (window closed, reload): the search and its trial workers stop too.
    const running = { dispose: () => search.stop() };
    context.subscriptions.push(running);
    return search.ended.finally(() => {
      said.dispose();
      const i = context.subscriptions.indexOf(running);
      if (i >= 0) context.subscriptions.splice(i, 1);
    });
  });
  const m = searchMessage(ending);
  if (m.error) log.error(m.text);
  else log.info(m.text);
  const showLog = 'Show Log';
  const set = m.offer !== undefined ? `Set "batchSize": ${m.offer}` : undefined;
  const answer = await (m.error ? vscode.window.showErrorMessage(m.text, showLog) : vscode.window.showInformationMessage(m.text, ...(set ? [set] : []), showLog));
  if (answer === showLog) log.show(true);
  else if (set && answer === set && m.offer !== undefined) await writeBatchSize(uri, m.offer);
}

/**
 * Keeps the context key `gpuWorkbench.torchrunJobs` (the paths of the workspace's torchrun job
 * files) up to date, so that the explorer's context menu does not offer the search on them.
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

/** Registers "GPU Workbench: Find Max Batch Size" (`gpuWorkbench.findBatchSize`, optionally given a job file's Uri). */
export function registerFindBatchSize(context: vscode.ExtensionContext): void {
  log = vscode.window.createOutputChannel('GPU Workbench: Find Max Batch Size', { log: true });
  watchTorchrunJobs(context);
  context.subscriptions.push(
    log,
    vscode.commands.registerCommand('gpuWorkbench.findBatchSize', (arg?: unknown) => findBatchSize(context, arg).catch((err: unknown) => {
      log.error(err instanceof Error ? err.stack ?? err.message : String(err));
      void vscode.window.showErrorMessage(`Find Max Batch Size: ${err instanceof Error ? err.message : String(err)}`);
    })),
  );
}

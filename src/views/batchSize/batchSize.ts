/**
 * "GPU Workbench: Find Max Batch Size": the largest batch that fits per device for a job file.
 *
 * The search runs in a forked process (`dist/cli.js train JOB --find-batch-size --json`), and
 * each of its trials in fresh worker processes below that, so an out-of-memory error (or a
 * backend that aborts) never reaches the editor. A cancellable progress notification shows the
 * trials; the result offers to write the batch size into the job file as an editor edit the
 * user can undo (Ctrl+Z), as Apply Best Config does. A torchrun job's result goes where its
 * "batchSize" setting says: the script's option in "args", or the variable in "env".
 */
import { basename } from 'node:path';
import * as vscode from 'vscode';
import { formatBatchEvent } from '../../cli/train';
import { isTorchrunJob } from '../../training/launchers/torchrun';
import { BatchSizeEditError, batchSizeEdit } from '../../training/launchers/torchrunBatchArg';
import { editConfigInEditor, replaceInEditor } from '../common/configEdit';
import { searchMessage, startSearch, type SearchEnding } from './batchSizeSearch';

let log: vscode.LogOutputChannel;

async function pickJobFile(uri: vscode.Uri | undefined): Promise<vscode.Uri | undefined> {
  if (uri?.scheme === 'file' && uri.fsPath.endsWith('.job.json')) return uri;
  const active = vscode.window.activeTextEditor?.document.uri;
  if (active?.scheme === 'file' && active.fsPath.endsWith('.job.json')) return active;
  const files = (await vscode.workspace.findFiles('**/*.job.json', '**/node_modules/**', 500)).sort((a, b) => a.fsPath.localeCompare(b.fsPath));
  if (files.length === 0) {
    void vscode.window.showInformationMessage('Find Max Batch Size: no *.job.json in the workspace. Create one with Start Training… (or Run with torchrun… for a PyTorch script) first.');
    return undefined;
  }
  const picked = await vscode.window.showQuickPick(files.map((f) => ({ label: vscode.workspace.asRelativePath(f), file: f })), { title: 'Find Max Batch Size', placeHolder: 'For which job?' });
  return picked?.file;
}

/** Writes `batchSize` into the job file in an editor: a user edit, undoable, left for the user to save. */
async function writeBatchSize(uri: vscode.Uri, batchSize: number): Promise<void> {
  const doc = await vscode.workspace.openTextDocument(uri);
  if (isTorchrunJob(uri.fsPath)) {
    // Where the job's "batchSize" setting says: the option's value in "args", or "env".
    let applied;
    try {
      applied = batchSizeEdit(doc.getText(), batchSize, vscode.workspace.asRelativePath(uri));
    } catch (err) {
      if (!(err instanceof BatchSizeEditError)) throw err;
      void vscode.window.showErrorMessage(`Find Max Batch Size: ${err.message}`);
      return;
    }
    if (!applied.edit) void vscode.window.showInformationMessage(`${vscode.workspace.asRelativePath(uri)} sets ${applied.setting} already.`);
    else await replaceInEditor(doc, applied.edit, 'Find Max Batch Size');
    return;
  }
  const changed = await editConfigInEditor(doc, { batchSize }, 'Find Max Batch Size');
  if (changed?.length === 0) void vscode.window.showInformationMessage(`${vscode.workspace.asRelativePath(uri)} has "batchSize": ${batchSize} already.`);
}

/** A torchrun job's memory limit per trial process from the setting (none given: the CLI's default). */
function memoryLimitArgs(uri: vscode.Uri): string[] {
  const mib = vscode.workspace.getConfiguration('gpuWorkbench.findBatchSize', uri).get<number | null>('memoryLimitMiB', null);
  return isTorchrunJob(uri.fsPath) && typeof mib === 'number' && Number.isSafeInteger(mib) && mib >= 0 ? ['--memory-limit', String(mib)] : [];
}

async function findBatchSize(context: vscode.ExtensionContext, arg: unknown): Promise<void> {
  if (!vscode.workspace.isTrusted) {
    void vscode.window.showErrorMessage('GPU Workbench cannot find the max batch size in an untrusted workspace: it runs the job, and a job file runs code (models, data loaders) from the workspace. Trust the workspace first (Workspaces: Manage Workspace Trust).');
    return;
  }
  const uri = await pickJobFile(arg instanceof vscode.Uri ? arg : undefined);
  if (!uri) return;
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
      args: memoryLimitArgs(uri),
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
  const set = m.offer !== undefined ? m.offerLabel ?? `Set "batchSize": ${m.offer}` : undefined;
  const answer = await (m.error ? vscode.window.showErrorMessage(m.text, showLog) : vscode.window.showInformationMessage(m.text, ...(set ? [set] : []), showLog));
  if (answer === showLog) log.show(true);
  else if (set && answer === set && m.offer !== undefined) await writeBatchSize(uri, m.offer);
}

/** Registers "GPU Workbench: Find Max Batch Size" (`gpuWorkbench.findBatchSize`, optionally given a job file's Uri). */
export function registerFindBatchSize(context: vscode.ExtensionContext): void {
  log = vscode.window.createOutputChannel('GPU Workbench: Find Max Batch Size', { log: true });
  context.subscriptions.push(
    log,
    vscode.commands.registerCommand('gpuWorkbench.findBatchSize', (arg?: unknown) => findBatchSize(context, arg).catch((err: unknown) => {
      log.error(err instanceof Error ? err.stack ?? err.message : String(err));
      void vscode.window.showErrorMessage(`Find Max Batch Size: ${err instanceof Error ? err.message : String(err)}`);
    })),
  );
}

/**
 * The Runs view (a tree in the GPU Workbench sidebar, under the GPU panel): every training job,
 * torchrun job and tuning experiment of the workspace, running and finished, newest first, read
 * from the run records the engines write (`.gpu-workbench/runs/`, see runRecord.ts) and the
 * experiment journals. A file watcher brings runs started from a terminal (`gpu-workbench train`)
 * in as they start and end; nothing is kept in memory that a reload would lose.
 *
 * Actions by row (its contextValue says which apply): open the log, open the checkpoint folder,
 * re-run, resume, stop, delete; an experiment opens its Tuning Results. A file of the folder that
 * is no readable record is skipped, with one warning naming it.
 */
import { readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import * as vscode from 'vscode';
import { log } from '../../log';
import { deleteRun, logFile, readRunRecords, runProcessGone, runsFolder, type RunRecord } from '../../training/job/runRecord';
import { isTrainCommandLine, readExperiments, runRows, type RunRow } from './runsModel';

export const runsViewId = 'gpuWorkbench.runs';

type Node = { readonly row: RunRow; readonly folder: vscode.WorkspaceFolder } | { readonly detail: string; readonly parent: string };

/** Whether `pid` is a `gpu-workbench train` process, so that a SIGTERM stops a job and nothing else. */
function isTrainCli(pid: number): boolean {
  try {
    return isTrainCommandLine(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0'));
  } catch {
    return false;
  }
}

class RunsProvider implements vscode.TreeDataProvider<Node>, vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private records = new Map<string, { record: RunRecord; dir: string }>();
  private readonly told = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private ticker: NodeJS.Timeout | undefined;
  private rows: Node[] = [];

  /** Reads every folder's records and journals again (debounced: a run writes several files at once). */
  refresh(delayMs = 150): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.reload(), delayMs);
  }

  record(key: string): { record: RunRecord; dir: string } | undefined {
    return this.records.get(key);
  }

  private reload(): void {
    this.timer = undefined;
    const rows: Node[] = [];
    const records = new Map<string, { record: RunRecord; dir: string }>();
    for (const folder of vscode.workspace.workspaceFolders ?? []) {
      if (folder.uri.scheme !== 'file') continue;
      const dir = runsFolder(folder.uri.fsPath);
      const read = readRunRecords(dir);
      const exps = readExperiments(join(folder.uri.fsPath, '.gpu-workbench', 'experiments'));
      for (const s of [...read.skipped, ...exps.skipped]) {
        const key = `${s.file}\0${s.reason}`;
        if (this.told.has(key)) continue;
        this.told.add(key);
        const message = `Runs: skipped ${vscode.workspace.asRelativePath(s.file)}: ${s.reason}.`;
        log.warn(message);
        void vscode.window.showWarningMessage(message);
      }
      for (const r of read.records) records.set(r.id, { record: r, dir });
      for (const row of runRows(read.records, exps.experiments, Date.now(), runProcessGone)) rows.push({ row, folder });
    }
    rows.sort((a, b) => ('row' in b ? b.row.startedAt : 0) - ('row' in a ? a.row.startedAt : 0));
    this.records = records;
    this.rows = rows;
    // Running rows show their duration growing, and a run whose process died shows as interrupted.
    clearInterval(this.ticker);
    this.ticker = rows.some((n) => 'row' in n && n.row.status === 'running') ? setInterval(() => this.reload(), 5000) : undefined;
    void vscode.commands.executeCommand('setContext', 'gpuWorkbench.runs.empty', rows.length === 0);
    this.changed.fire(undefined);
  }

  getChildren(node?: Node): Node[] {
    if (!node) return this.rows;
    return 'row' in node ? node.row.details.slice(1).map((detail) => ({ detail, parent: node.row.key })) : [];
  }

  getTreeItem(node: Node): vscode.TreeItem {
    if ('detail' in node) {
      const item = new vscode.TreeItem(node.detail, vscode.TreeItemCollapsibleState.None);
      item.id = `${node.parent}\0${node.detail.replace(/\d/g, '#').slice(0, 40)}`;
      item.tooltip = node.detail;
      item.accessibilityInformation = { label: node.detail };
      return item;
    }
    const { row } = node;
    const item = new vscode.TreeItem(row.label, vscode.TreeItemCollapsibleState.Collapsed);
    item.id = row.key;
    item.description = row.description;
    item.accessibilityInformation = { label: `${row.label} ${row.description}` };
    item.tooltip = row.details.join('\n');
    item.iconPath = new vscode.ThemeIcon(row.icon, row.status === 'failed' || row.status === 'interrupted' ? new vscode.ThemeColor('testing.iconFailed') : row.status === 'done' ? new vscode.ThemeColor('testing.iconPassed') : undefined);
    item.contextValue = row.contextValue;
    const entry = this.records.get(row.key);
    if (entry) item.command = { command: 'gpuWorkbench.runs.openLog', title: 'Open Log', arguments: [node] };
    return item;
  }

  dispose(): void {
    clearTimeout(this.timer);
    clearInterval(this.ticker);
    this.changed.dispose();
  }
}

export function registerRunsView(context: vscode.ExtensionContext): void {
  const provider = new RunsProvider();
  const view = vscode.window.createTreeView(runsViewId, { treeDataProvider: provider, showCollapseAll: true });
  const watchers = (vscode.workspace.workspaceFolders ?? []).map((f) => vscode.workspace.createFileSystemWatcher(new vscode.RelativePattern(f, '.gpu-workbench/{runs/*.json,experiments/*/journal.jsonl}')));
  for (const w of watchers) {
    w.onDidCreate(() => provider.refresh());
    w.onDidChange(() => provider.refresh());
    w.onDidDelete(() => provider.refresh());
  }
  // The watcher is the way in; a file system it cannot watch (a network mount, inotify's limit reached) would leave
  // the view still: while it is visible, the folders' modification times are also looked at every 2 s (a record
  // written or replaced is a rename into the folder, which changes its time).
  const stamps = new Map<string, number>();
  const poll = setInterval(() => {
    if (!view.visible) return;
    let changed = false;
    for (const f of vscode.workspace.workspaceFolders ?? []) {
      for (const dir of [runsFolder(f.uri.fsPath), join(f.uri.fsPath, '.gpu-workbench', 'experiments')]) {
        let t = 0;
        try {
          t = statSync(dir).mtimeMs;
        } catch {
          // not there (yet)
        }
        if ((stamps.get(dir) ?? 0) !== t) changed = true;
        stamps.set(dir, t);
      }
    }
    if (changed) provider.refresh();
  }, 2000);
  const rowOf = (node: unknown): RunRow | undefined => (typeof node === 'object' && node !== null && 'row' in node ? (node as { row: RunRow }).row : undefined);
  const recordOf = (node: unknown) => {
    const row = rowOf(node);
    return row ? provider.record(row.key) : undefined;
  };
  context.subscriptions.push(
    provider, view, ...watchers, { dispose: () => clearInterval(poll) },
    vscode.workspace.onDidChangeWorkspaceFolders(() => provider.refresh()),
    vscode.commands.registerCommand('gpuWorkbench.runs.refresh', () => provider.refresh(0)),
    vscode.commands.registerCommand('gpuWorkbench.runs.openLog', async (node: unknown) => {
      const entry = recordOf(node);
      if (!entry) return;
      try {
        await vscode.window.showTextDocument(vscode.Uri.file(logFile(entry.dir, entry.record.id)), { preview: true });
      } catch (err) {
        void vscode.window.showErrorMessage(`The log of ${entry.record.name} cannot be opened: ${(err as Error).message}`);
      }
    }),
    vscode.commands.registerCommand('gpuWorkbench.runs.openCheckpoints', async (node: unknown) => {
      const dir = recordOf(node)?.record.checkpointDir;
      if (!dir) return;
      const uri = vscode.Uri.file(dir);
      if (vscode.workspace.getWorkspaceFolder(uri)) await vscode.commands.executeCommand('revealInExplorer', uri);
      else await vscode.commands.executeCommand('revealFileInOS', uri);
    }),
    vscode.commands.registerCommand('gpuWorkbench.runs.rerun', (node: unknown) => {
      const r = recordOf(node)?.record;
      if (r) void vscode.commands.executeCommand('gpuWorkbench.runs.startAgain', r.file, r.overrides ?? {}, false);
    }),
    vscode.commands.registerCommand('gpuWorkbench.runs.resume', (node: unknown) => {
      const r = recordOf(node)?.record;
      if (r) void vscode.commands.executeCommand('gpuWorkbench.runs.startAgain', r.file, r.overrides ?? {}, true);
    }),
    vscode.commands.registerCommand('gpuWorkbench.runs.stop', async (node: unknown) => {
      const r = recordOf(node)?.record;
      if (!r) return;
      if (await vscode.commands.executeCommand<boolean>('gpuWorkbench.runs.runsHere', r.pid)) {
        await vscode.commands.executeCommand('gpuWorkbench.stopTraining');
      } else if (!runProcessGone(r) && isTrainCli(r.pid)) {
        // gpu-workbench train stops its job on SIGTERM (workers included) and records it as stopped.
        process.kill(r.pid, 'SIGTERM');
      } else {
        void vscode.window.showInformationMessage(`${r.name} runs in another window or on another machine (pid ${r.pid} on ${r.host}): stop it there.`);
      }
      provider.refresh(500);
    }),
    vscode.commands.registerCommand('gpuWorkbench.runs.delete', async (node: unknown) => {
      const row = rowOf(node);
      if (!row) return;
      const entry = provider.record(row.key);
      const what = entry ? `the record and log of the run ${row.label} (${row.description})` : `the experiment ${row.label}: its journal and every trial's folder and log (${row.key})`;
      const answer = await vscode.window.showWarningMessage(`Delete ${what}?`, { modal: true, detail: entry?.record.checkpointDir ? `Its checkpoints in ${entry.record.checkpointDir} stay.` : undefined }, 'Delete');
      if (answer !== 'Delete') return;
      if (entry) deleteRun(entry.dir, entry.record.id);
      else rmSync(row.key, { recursive: true, force: true });
      provider.refresh(0);
    }),
    vscode.commands.registerCommand('gpuWorkbench.runs.showResults', (node: unknown) => {
      const row = rowOf(node);
      if (row?.kind === 'experiment') void vscode.commands.executeCommand('gpuWorkbench.showTuningResults', row.key);
    }),
  );
  provider.refresh(0);
}

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
import { deleteRun, logFile, runProcessGone, runsFolder, type RunRecord } from '../../training/job/runRecord';
import { CurvesPanel, type RunRef } from './curvesPanel';
import { comparePickItem, isTrainCommandLine, type RunRow } from './runsModel';
import { RunsTree, type DetailNode, type RowNode } from './runsTree';

export const runsViewId = 'gpuWorkbench.runs';

type Node = RowNode<vscode.WorkspaceFolder> | DetailNode;

/** Whether `pid` is a `gpu-workbench train` process, so that a SIGTERM stops a job and nothing else. */
function isTrainCli(pid: number): boolean {
  try {
    return isTrainCommandLine(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0'));
  } catch {
    return false;
  }
}

class RunsProvider implements vscode.TreeDataProvider<Node>, vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<Node | Node[] | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private empty: boolean | undefined;
  /** Redraws only the rows whose text changed (see runsTree.ts): a whole-tree redraw closes a context menu open on any row. */
  private readonly tree = new RunsTree<vscode.WorkspaceFolder>({
    folders: () => (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === 'file').map((folder) => ({ folder, fsPath: folder.uri.fsPath })),
    skipped: (file, reason) => {
      const message = `Runs: skipped ${vscode.workspace.asRelativePath(file)}: ${reason}.`;
      log.warn(message);
      void vscode.window.showWarningMessage(message);
    },
    changed: (nodes) => {
      const empty = this.tree.roots.length === 0;
      if (empty !== this.empty) void vscode.commands.executeCommand('setContext', 'gpuWorkbench.runs.empty', empty);
      this.empty = empty;
      this.changed.fire(nodes ? [...nodes] : undefined);
    },
  });

  /** Reads every folder's records and journals again, coalesced (a run writes several files at once, and a record every epoch). */
  refresh(delayMs = 150): void {
    this.tree.refresh(delayMs);
  }

  /** Reads them now. */
  reload(): void {
    this.tree.reload();
    if (this.empty === undefined) {
      this.empty = this.tree.roots.length === 0;
      void vscode.commands.executeCommand('setContext', 'gpuWorkbench.runs.empty', this.empty);
    }
  }

  record(key: string): { record: RunRecord; dir: string } | undefined {
    return this.tree.record(key);
  }

  /** Every run's record, newest first (for Compare Curves…'s list). */
  allRecords(): { record: RunRecord; dir: string }[] {
    return this.tree.allRecords();
  }

  getChildren(node?: Node): Node[] {
    if (!node) return [...this.tree.roots];
    return 'row' in node ? this.tree.children(node) : [];
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
    if (this.tree.record(row.key)) item.command = { command: 'gpuWorkbench.runs.openLog', title: 'Open Log', arguments: [node] };
    return item;
  }

  dispose(): void {
    this.tree.dispose();
    this.changed.dispose();
  }
}

export function registerRunsView(context: vscode.ExtensionContext): void {
  const provider = new RunsProvider();
  // canSelectMany: Compare Curves on the runs selected (Ctrl/Shift+click).
  const view = vscode.window.createTreeView(runsViewId, { treeDataProvider: provider, showCollapseAll: true, canSelectMany: true });
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
  /** The runs (not experiments) among the clicked row and the view's selection, clicked first. */
  const selectedRuns = (node: unknown, selection: unknown): RunRef[] => {
    const nodes: unknown[] = [node, ...(Array.isArray(selection) ? (selection as unknown[]) : [])];
    const refs: RunRef[] = [];
    for (const n of nodes) {
      const entry = recordOf(n);
      if (entry && !refs.some((r) => r.id === entry.record.id)) refs.push({ dir: entry.dir, id: entry.record.id });
    }
    return refs;
  };
  context.subscriptions.push(
    provider, view, ...watchers, { dispose: () => clearInterval(poll) },
    // Open Curves: the clicked run, or every run selected when the click was on one of several selected.
    vscode.commands.registerCommand('gpuWorkbench.runs.openCurves', (node: unknown, selection: unknown) => {
      const refs = selectedRuns(node, Array.isArray(selection) && selection.includes(node) ? selection : []);
      if (refs.length) CurvesPanel.show(context.extensionUri, refs);
    }),
    // Compare Curves…: the runs selected in the view when there are two or more; else the user picks them.
    vscode.commands.registerCommand('gpuWorkbench.runs.compareCurves', async (node: unknown, selection: unknown) => {
      const selected = selectedRuns(node, selection);
      if (selected.length >= 2) {
        CurvesPanel.show(context.extensionUri, selected);
        return;
      }
      provider.reload();
      const all = provider.allRecords();
      if (all.length === 0) {
        void vscode.window.showInformationMessage('Compare Curves: there are no runs in this workspace yet (.gpu-workbench/runs).');
        return;
      }
      const items = all.map((e) => ({ ...comparePickItem(e.record), picked: selected.some((s) => s.id === e.record.id), ref: { dir: e.dir, id: e.record.id } }));
      const picked = await vscode.window.showQuickPick(items, { canPickMany: true, title: 'Compare Curves', placeHolder: 'The runs to overlay' });
      if (picked?.length) CurvesPanel.show(context.extensionUri, picked.map((p) => p.ref));
    }),
    // A Curves tab survives a window reload: VS Code keeps the page's state (the runs' ids).
    vscode.window.registerWebviewPanelSerializer(CurvesPanel.viewType, {
      deserializeWebviewPanel: (panel, state: unknown): Promise<void> => {
        const ids = typeof state === 'object' && state !== null && Array.isArray((state as { runIds?: unknown }).runIds) ? (state as { runIds: unknown[] }).runIds.filter((x): x is string => typeof x === 'string') : [];
        const dirs = (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === 'file').map((f) => runsFolder(f.uri.fsPath));
        const refs = ids.flatMap((id) => {
          const dir = dirs.find((d) => { try { return statSync(join(d, `${id}.json`)).isFile(); } catch { return false; } });
          return dir ? [{ dir, id }] : [];
        });
        if (refs.length) CurvesPanel.restore(context.extensionUri, panel, refs);
        else panel.dispose();
        return Promise.resolve();
      },
    }),
    { dispose: () => CurvesPanel.disposeAll() },
    vscode.workspace.onDidChangeWorkspaceFolders(() => provider.refresh()),
    vscode.commands.registerCommand('gpuWorkbench.runs.refresh', () => provider.reload()),
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
      provider.reload();
    }),
    vscode.commands.registerCommand('gpuWorkbench.runs.showResults', (node: unknown) => {
      const row = rowOf(node);
      if (row?.kind === 'experiment') void vscode.commands.executeCommand('gpuWorkbench.showTuningResults', row.key);
    }),
  );
  provider.reload();
}

/**
 * The "Curves" webview panel (an editor tab) of one or several runs of the Runs view: every metric
 * their records hold, one chart per metric, the runs overlaid (curvesModel.ts, webview-ui/curves).
 * One panel per set of runs. While one of its runs is running and the tab is visible, the panel
 * looks at the records' modification times every second and sends the page the new points, so it
 * follows the run as its record grows (a record is rewritten at each epoch, and at most once a
 * second for a script's reports).
 */
import { readFileSync, statSync } from 'node:fs';
import * as vscode from 'vscode';
import { parseCurvesMessage, type CurvesToHostMessage, type HostToCurvesMessage } from '../../common/curvesProtocol';
import { log } from '../../log';
import { logFile, parseRunRecord, recordFile, runProcessGone, type RunRecord } from '../../training/job/runRecord';
import { chartPageOptions, chartWebviewOptions, createChartPanel, PageLink } from '../common/chartPanel';
import { renderCurvesHtml } from './curvesHtml';
import { curvesView } from './curvesModel';

/** A run of the panel: its record's folder and id. */
export interface RunRef {
  readonly dir: string;
  readonly id: string;
}

/** The record of `ref`, or why there is none (deleted, torn, foreign). */
export function readRecord(ref: RunRef): RunRecord | { readonly problem: string } {
  let text: string;
  try {
    text = readFileSync(recordFile(ref.dir, ref.id), 'utf8');
  } catch (err) {
    return { problem: (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'its record is gone (deleted?)' : `its record cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})` };
  }
  const r = parseRunRecord(text);
  if ('problem' in r) return r;
  return r.id === ref.id ? r : { problem: `its record's id (${r.id}) is not its file name` };
}

const stamp = (ref: RunRef): number => {
  try {
    return statSync(recordFile(ref.dir, ref.id)).mtimeMs;
  } catch {
    return 0;
  }
};

export class CurvesPanel implements vscode.Disposable {
  static readonly viewType = 'gpuWorkbench.runCurves';
  private static readonly open = new Map<string, CurvesPanel>();

  private readonly subscriptions: vscode.Disposable[] = [];
  private readonly link: PageLink<HostToCurvesMessage, CurvesToHostMessage>;
  /** The last good record of each run (a record that reads badly for a moment keeps its last curves). */
  private readonly records = new Map<string, RunRecord>();
  private readonly told = new Set<string>();
  private stamps = '';
  private timer: NodeJS.Timeout | undefined;

  private static keyOf(refs: readonly RunRef[]): string {
    return refs.map((r) => `${r.dir}\0${r.id}`).sort().join('\n');
  }

  /** Opens (or reveals) the panel of these runs. */
  static show(extensionUri: vscode.Uri, refs: readonly RunRef[]): CurvesPanel {
    const key = CurvesPanel.keyOf(refs);
    const existing = CurvesPanel.open.get(key);
    if (existing) {
      existing.panel.reveal();
      existing.refresh();
      return existing;
    }
    return new CurvesPanel(createChartPanel(CurvesPanel.viewType, 'Curves', extensionUri, { viewColumn: vscode.ViewColumn.Active }), extensionUri, refs, key);
  }

  /** Takes over a panel VS Code brings back after a window reload (the serializer's). */
  static restore(extensionUri: vscode.Uri, panel: vscode.WebviewPanel, refs: readonly RunRef[]): CurvesPanel {
    panel.webview.options = chartWebviewOptions(extensionUri);
    const key = CurvesPanel.keyOf(refs);
    CurvesPanel.open.get(key)?.panel.dispose();
    return new CurvesPanel(panel, extensionUri, refs, key);
  }

  static disposeAll(): void {
    for (const p of [...CurvesPanel.open.values()]) p.panel.dispose();
  }

  private constructor(readonly panel: vscode.WebviewPanel, extensionUri: vscode.Uri, private readonly refs: readonly RunRef[], private readonly key: string) {
    CurvesPanel.open.set(key, this);
    this.load();
    const names = refs.map((r) => this.records.get(r.id)?.name ?? r.id);
    const what = refs.length === 1 ? names[0] : `${refs.length} runs`;
    panel.title = `Curves: ${what}`;
    const webview = panel.webview;
    webview.html = renderCurvesHtml({ ...chartPageOptions(webview, extensionUri, 'curves'), what, runIds: refs.map((r) => r.id) });
    this.link = new PageLink(panel, 'Curves', 'curves/ready', parseCurvesMessage, (m) => this.onMessage(m), this.subscriptions);
    this.subscriptions.push(
      panel.onDidChangeViewState(() => this.follow()),
      panel.onDidDispose(() => this.dispose()),
    );
  }

  /** Reads the records again and sends the page what changed (nothing if no record did). */
  refresh(): void {
    this.load();
    this.post();
  }

  dispose(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    if (CurvesPanel.open.get(this.key) === this) CurvesPanel.open.delete(this.key);
    for (const s of this.subscriptions.splice(0)) s.dispose();
  }

  /** Whether a run of the panel is still running (a `running` record whose process is gone is not). */
  private live(): boolean {
    return [...this.records.values()].some((r) => r.status === 'running' && !runProcessGone(r));
  }

  private load(): boolean {
    const stamps = this.refs.map(stamp).join(',');
    if (stamps === this.stamps) return false;
    this.stamps = stamps;
    for (const ref of this.refs) {
      const r = readRecord(ref);
      if (!('problem' in r)) {
        this.records.set(ref.id, r);
        continue;
      }
      if (r.problem.includes('gone')) this.records.delete(ref.id);
      const what = `${ref.id}: ${r.problem}`;
      if (this.told.has(what)) continue;
      this.told.add(what);
      const message = `Curves: skipped the run ${ref.id}: ${r.problem}.`;
      log.warn(message);
      void vscode.window.showWarningMessage(message);
    }
    return true;
  }

  /** Polls the records while a run is running and the page shows (cheap: one stat per run a second). */
  private follow(): void {
    const wanted = this.link.ready && this.panel.visible && this.live();
    if (wanted && !this.timer) {
      this.timer = setInterval(() => {
        if (this.load()) this.post();
        if (!this.live()) this.follow();
      }, 1000);
    } else if (!wanted && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  private message(): HostToCurvesMessage {
    const records = this.refs.flatMap((r) => this.records.get(r.id) ?? []);
    const view = curvesView(records, (r) => !runProcessGone(r));
    return { type: 'curves/data', runs: view.runs, metrics: view.metrics, live: view.live };
  }

  private onMessage(message: CurvesToHostMessage): void {
    switch (message.type) {
      case 'curves/ready':
        this.load();
        this.post();
        this.follow();
        break;
      case 'curves/openLog': {
        const ref = this.refs.find((r) => r.id === message.runId);
        if (ref) void vscode.window.showTextDocument(vscode.Uri.file(logFile(ref.dir, ref.id)), { preview: true }).then(undefined, (err: unknown) => log.warn(`Curves: cannot open the log of ${ref.id}: ${String(err)}`));
        break;
      }
      default: {
        const unreachable: never = message;
        log.warn(`Curves: unhandled message ${JSON.stringify(unreachable)}`);
      }
    }
  }

  private post(): void {
    if (this.link.ready) this.link.post(this.message());
  }
}

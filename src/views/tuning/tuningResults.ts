/**
 * The "Tuning Results: <experiment>" webview panel (an editor tab). It draws a ResultsModel: a
 * live experiment's (updated as its events arrive) or one read back from a journal. It speaks to
 * its page only after the page's `results/ready`; a panel in the background loses its page (no
 * retainContextWhenHidden), so the flag resets and the page asks again when shown.
 */
import * as vscode from 'vscode';
import { parseResultsMessage, type HostToResultsMessage, type ResultsToHostMessage, type ResultsTrial } from '../../common/tuningProtocol';
import { log } from '../../log';
import { chartPageOptions, chartWebviewOptions, createChartPanel, PageLink } from '../common/chartPanel';
import { renderResultsHtml } from './resultsHtml';
import type { ResultsModel } from './tuningModel';

/** What the panel shows and what its buttons do. */
export interface ResultsSource {
  /** The experiment's folder: one panel per experiment. */
  readonly key: string;
  readonly model: ResultsModel;
  applyBest(): Promise<void>;
  showTrial(trialId: number): Promise<void>;
  /** Opens the trial's log file (the row's `log`) in an editor. */
  openLog(trialId: number): Promise<void>;
}

export class ResultsPanel implements vscode.Disposable {
  static readonly viewType = 'gpuWorkbench.tuningResults';
  private static readonly open = new Map<string, ResultsPanel>();
  private static activeKey: string | undefined;

  private readonly subscriptions: vscode.Disposable[] = [];
  private readonly link: PageLink<HostToResultsMessage, ResultsToHostMessage>;

  /** Opens (or reveals) the experiment's panel; a live source replaces a journal one with the same key. */
  static show(extensionUri: vscode.Uri, source: ResultsSource, opts: { preserveFocus?: boolean; column?: vscode.ViewColumn } = {}): ResultsPanel {
    const existing = ResultsPanel.open.get(source.key);
    if (existing) {
      existing.setSource(source);
      existing.panel.reveal(opts.column, opts.preserveFocus);
      return existing;
    }
    const panel = createChartPanel(ResultsPanel.viewType, `Tuning Results: ${source.model.experiment().name}`, extensionUri,
      { viewColumn: opts.column ?? vscode.ViewColumn.Active, preserveFocus: opts.preserveFocus });
    const p = new ResultsPanel(panel, extensionUri, source);
    ResultsPanel.open.set(source.key, p);
    return p;
  }

  /** Takes over a panel VS Code brings back after a window reload (the serializer's), showing `source`. */
  static restore(extensionUri: vscode.Uri, panel: vscode.WebviewPanel, source: ResultsSource): ResultsPanel {
    const existing = ResultsPanel.open.get(source.key);
    if (existing) {
      // Opened again before this tab was restored: one panel per experiment.
      panel.dispose();
      existing.setSource(source);
      return existing;
    }
    panel.webview.options = chartWebviewOptions(extensionUri);
    panel.title = `Tuning Results: ${source.model.experiment().name}`;
    const p = new ResultsPanel(panel, extensionUri, source);
    ResultsPanel.open.set(source.key, p);
    return p;
  }

  /** The panel the user looks at now, if any (for "Apply Best Config" from the palette). */
  static active(): ResultsPanel | undefined {
    return ResultsPanel.activeKey ? ResultsPanel.open.get(ResultsPanel.activeKey) : undefined;
  }

  static forKey(key: string): ResultsPanel | undefined {
    return ResultsPanel.open.get(key);
  }

  static disposeAll(): void {
    for (const p of [...ResultsPanel.open.values()]) p.panel.dispose();
  }

  private constructor(readonly panel: vscode.WebviewPanel, extensionUri: vscode.Uri, private source: ResultsSource) {
    const webview = panel.webview;
    webview.html = renderResultsHtml({ ...chartPageOptions(webview, extensionUri, 'results'), experiment: source.model.experiment().name, experimentKey: source.key });
    if (panel.active) ResultsPanel.activeKey = source.key;
    this.link = new PageLink(panel, 'Tuning results', 'results/ready', parseResultsMessage, (m) => this.onMessage(m), this.subscriptions);
    this.subscriptions.push(
      panel.onDidChangeViewState(({ webviewPanel }) => {
        if (webviewPanel.active) ResultsPanel.activeKey = this.source.key;
      }),
      panel.onDidDispose(() => this.dispose()),
    );
  }

  get sourceKey(): string {
    return this.source.key;
  }

  get current(): ResultsSource {
    return this.source;
  }

  setSource(source: ResultsSource): void {
    this.source = source;
    this.postInit();
  }

  /** A trial changed. */
  postTrial(trial: ResultsTrial): void {
    this.link.post({ type: 'results/trial', trial });
  }

  /** The experiment's state or best trial changed. */
  postExperiment(): void {
    this.link.post({ type: 'results/experiment', experiment: this.source.model.experiment() });
  }

  dispose(): void {
    if (ResultsPanel.open.get(this.source.key) === this) ResultsPanel.open.delete(this.source.key);
    if (ResultsPanel.activeKey === this.source.key) ResultsPanel.activeKey = undefined;
    for (const s of this.subscriptions.splice(0)) s.dispose();
  }

  private postInit(): void {
    this.link.post({ type: 'results/init', experiment: this.source.model.experiment(), trials: this.source.model.rows() });
  }

  private onMessage(message: ResultsToHostMessage): void {
    switch (message.type) {
      case 'results/ready':
        this.postInit();
        break;
      case 'results/applyBest':
        void this.source.applyBest().catch((err: unknown) => log.error(`Apply Best Config: ${String(err)}`));
        break;
      case 'results/showTrial':
        void this.source.showTrial(message.trialId).catch((err: unknown) => log.warn(`Tuning results: cannot show trial ${message.trialId}: ${String(err)}`));
        break;
      case 'results/openLog':
        void this.source.openLog(message.trialId).catch((err: unknown) => log.warn(`Tuning results: cannot open the log of trial ${message.trialId}: ${String(err)}`));
        break;
      default: {
        const unreachable: never = message;
        log.warn(`Tuning results: unhandled message ${JSON.stringify(unreachable)}`);
      }
    }
  }
}

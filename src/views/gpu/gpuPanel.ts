/**
 * The GPU panel: a webview view in the GPU Workbench sidebar. It holds a monitor lease only while
 * the view is visible, so nothing samples while nobody looks, and speaks to its page only after
 * the page's `panel/ready` (a hidden view's page is torn down, so the flag resets on hide).
 */
import * as vscode from 'vscode';
import { parsePanelMessage, type HostToPanelMessage } from '../../common/protocol';
import { gpuMonitorSettings } from '../../config';
import type { Disposable, GpuMonitor } from '../../gpu/monitor';
import type { GpuHint, GpuInventoryEntry, GpuSnapshot } from '../../gpu/types';
import { log } from '../../log';
import { makeNonce, renderPanelHtml } from './panelHtml';
import { trainingJobFeed } from '../training/trainingFeed';

export class GpuPanelProvider implements vscode.WebviewViewProvider, vscode.Disposable {
  static readonly viewId = 'gpuWorkbench.gpuPanel';

  private view: vscode.WebviewView | undefined;
  /** The page said `panel/ready` and has not been torn down since. */
  private ready = false;
  private lease: Disposable | undefined;
  /** Lives as long as the provider. */
  private readonly subscriptions: Disposable[] = [];
  /** Lives as long as the current view. */
  private viewSubscriptions: vscode.Disposable[] = [];
  private inventory: readonly GpuInventoryEntry[] = [];
  private inventoryRequested = false;

  constructor(private readonly extensionUri: vscode.Uri, private readonly monitor: GpuMonitor) {
    this.subscriptions.push(
      monitor.onSnapshot((snapshot, hints) => this.onSnapshot(snapshot, hints)),
      trainingJobFeed.onChange((job) => {
        if (this.ready && this.view?.visible) this.post({ type: 'gpu/job', job });
      }),
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration('gpuWorkbench.gpuMonitor.enabled')) this.updateLease();
      }),
    );
  }

  resolveWebviewView(view: vscode.WebviewView): void {
    this.disposeView();
    this.view = view;
    this.ready = false;
    view.webview.options = {
      enableScripts: true,
      localResourceRoots: [vscode.Uri.joinPath(this.extensionUri, 'dist'), vscode.Uri.joinPath(this.extensionUri, 'media')],
    };
    view.webview.html = this.html(view.webview);
    this.viewSubscriptions.push(
      view.webview.onDidReceiveMessage((raw: unknown) => this.onMessage(raw)),
      view.onDidChangeVisibility(() => {
        // Without retainContextWhenHidden the page is destroyed when hidden and reloaded when shown;
        // it says `panel/ready` again then.
        if (!view.visible) this.ready = false;
        this.updateLease();
      }),
      view.onDidDispose(() => {
        if (this.view === view) {
          this.view = undefined;
          this.ready = false;
          this.disposeView();
          this.updateLease();
        }
      }),
    );
    this.updateLease();
  }

  /** The view title's refresh button and the command palette's "Refresh GPUs". */
  refresh(): void {
    if (this.view?.visible) this.monitor.refresh();
    else void vscode.commands.executeCommand(`${GpuPanelProvider.viewId}.focus`);
  }

  dispose(): void {
    this.disposeView();
    this.lease?.dispose();
    this.lease = undefined;
    for (const s of this.subscriptions.splice(0)) s.dispose();
  }

  private html(webview: vscode.Webview): string {
    const dist = vscode.Uri.joinPath(this.extensionUri, 'dist');
    const media = vscode.Uri.joinPath(this.extensionUri, 'media');
    const { intervalMs } = gpuMonitorSettings();
    return renderPanelHtml({
      cspSource: webview.cspSource,
      nonce: makeNonce(),
      scriptUri: webview.asWebviewUri(vscode.Uri.joinPath(dist, 'webview.js')).toString(),
      styleUris: [
        webview.asWebviewUri(vscode.Uri.joinPath(dist, 'uPlot.min.css')).toString(),
        webview.asWebviewUri(vscode.Uri.joinPath(media, 'panel.css')).toString(),
      ],
      // The monitor marks a silent tool stale after 3 intervals; allow for its start-up probe too.
      firstSampleTimeoutMs: Math.max(15_000, 5 * intervalMs),
    });
  }

  private onMessage(raw: unknown): void {
    const message = parsePanelMessage(raw);
    if (!message) {
      log.warn(`GPU panel: ignored a malformed message from the webview: ${JSON.stringify(raw)?.slice(0, 200)}`);
      return;
    }
    switch (message.type) {
      case 'panel/ready':
        this.ready = true;
        this.postInit();
        break;
      case 'panel/openLink':
        void this.openLink(message.url);
        break;
      case 'panel/refresh':
        log.info('GPU panel: Retry pressed, restarting the GPU tool');
        this.monitor.refresh();
        break;
      case 'panel/openSetting':
        // The settings editor filtered to exactly that setting; a change restarts the monitor (extension.ts).
        // The nvidia-smi path is machine-scoped: in a remote window (SSH, WSL, code-server) it is a
        // setting of the remote machine, which the User tab does not list.
        void vscode.commands.executeCommand(vscode.env.remoteName ? 'workbench.action.openRemoteSettings' : 'workbench.action.openSettings', { query: `@id:${message.id}` });
        break;
      case 'panel/openFinding':
        void this.openFinding(message.file, message.line);
        break;
      default: {
        const unreachable: never = message;
        log.warn(`GPU panel: unhandled message ${JSON.stringify(unreachable)}`);
      }
    }
  }

  private async openLink(url: string): Promise<void> {
    const uri = vscode.Uri.parse(url, true);
    if (uri.scheme !== 'https') {
      log.warn(`GPU panel: refused to open a non-https link: ${url}`);
      return;
    }
    await vscode.env.openExternal(uri);
  }

  /** Opens the script at the linter's finding that the job's growth hint links (or the script it offers), and nothing else the page might name. */
  private async openFinding(file: string, line: number): Promise<void> {
    const growth = trainingJobFeed.current()?.growth;
    const finding = growth?.finding;
    const offered = (finding?.file === file && finding.line === line) || (growth?.script === file && line === 0);
    if (!offered) {
      log.warn(`GPU panel: refused to open ${file}:${line + 1}, which is no finding the panel was sent`);
      return;
    }
    const position = new vscode.Position(line, 0);
    await vscode.window.showTextDocument(vscode.Uri.file(file), { preview: false, selection: new vscode.Range(position, position) });
  }

  private onSnapshot(snapshot: GpuSnapshot, hints: readonly GpuHint[]): void {
    if (snapshot.devices.length === 0) this.loadInventory();
    if (this.ready && this.view?.visible) this.post({ type: 'gpu/snapshot', snapshot, hints });
  }

  private postInit(): void {
    const snapshot = this.monitor.latest();
    if (snapshot && snapshot.devices.length === 0) this.loadInventory();
    this.post({
      type: 'gpu/init',
      snapshot,
      history: this.monitor.history(),
      inventory: this.inventory,
      hints: this.monitor.hints(),
      historyMinutes: gpuMonitorSettings().historyMinutes ?? 10,
    });
    const job = trainingJobFeed.current();
    if (job) this.post({ type: 'gpu/job', job });
  }

  /**
   * The inventory (systeminformation) blocks the event loop for ~300 ms, so it is read only when
   * it helps: when no tool reports a device, to say what hardware the system sees. Once, deferred.
   */
  private loadInventory(): void {
    if (this.inventoryRequested) return;
    this.inventoryRequested = true;
    setTimeout(() => {
      this.monitor.inventory().then(
        (inventory) => {
          this.inventory = inventory;
          if (inventory.length && this.ready && this.view?.visible) this.postInit();
        },
        (err: unknown) => log.warn(`GPU panel: could not read the graphics inventory: ${String(err)}`),
      );
    }, 0);
  }

  private post(message: HostToPanelMessage): void {
    const view = this.view;
    if (!view) return;
    view.webview.postMessage(message).then(undefined, (err: unknown) => log.warn(`GPU panel: postMessage failed: ${String(err)}`));
  }

  /** Sample while someone can see the numbers, unless sampling is turned off. */
  private updateLease(): void {
    const want = this.view?.visible === true && gpuMonitorSettings().enabled;
    if (want && !this.lease) {
      this.lease = this.monitor.acquire('panel');
      log.debug('GPU panel visible: sampling');
    } else if (!want && this.lease) {
      this.lease.dispose();
      this.lease = undefined;
      log.debug('GPU panel hidden: sampling released');
    }
  }

  private disposeView(): void {
    for (const s of this.viewSubscriptions.splice(0)) s.dispose();
  }
}

export function registerGpuPanel(context: vscode.ExtensionContext, monitor: GpuMonitor): void {
  const provider = new GpuPanelProvider(context.extensionUri, monitor);
  context.subscriptions.push(
    provider,
    vscode.window.registerWebviewViewProvider(GpuPanelProvider.viewId, provider),
    vscode.commands.registerCommand('gpuWorkbench.showPanel', () => vscode.commands.executeCommand(`${GpuPanelProvider.viewId}.focus`)),
    vscode.commands.registerCommand('gpuWorkbench.refreshGpus', () => provider.refresh()),
  );
}

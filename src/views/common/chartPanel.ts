/**
 * What the editor-tab panels of the chart pages share, the Curves panel (runs/curvesPanel.ts) and
 * the Tuning Results panel (tuning/tuningResults.ts): the webview's options (scripts on, resources
 * from dist/ only), the page's resources (its bundle, uPlot's style sheet, a fresh nonce for the
 * strict CSP of webviewHtml.ts), and the talk with the page, which starts at the page's ready
 * message: a panel in the background loses its page (no retainContextWhenHidden), so the link
 * goes quiet when the panel is hidden and the page asks again when shown.
 */
import * as vscode from 'vscode';
import { log } from '../../log';
import { makeNonce, type WebviewPageOptions } from './webviewHtml';

/** The webview options of a chart page: its script runs, and it may load from the extension's dist/ only. */
export function chartWebviewOptions(extensionUri: vscode.Uri): vscode.WebviewOptions {
  return { enableScripts: true, localResourceRoots: [vscode.Uri.joinPath(extensionUri, 'dist')] };
}

/** A new editor-tab panel for a chart page. */
export function createChartPanel(viewType: string, title: string, extensionUri: vscode.Uri, show: { readonly viewColumn: vscode.ViewColumn; readonly preserveFocus?: boolean }): vscode.WebviewPanel {
  return vscode.window.createWebviewPanel(viewType, title, show, chartWebviewOptions(extensionUri));
}

/** The page options of the chart page whose bundle is `dist/<bundle>.js`: with uPlot's style sheet and a fresh nonce. */
export function chartPageOptions(webview: vscode.Webview, extensionUri: vscode.Uri, bundle: string): WebviewPageOptions {
  const dist = vscode.Uri.joinPath(extensionUri, 'dist');
  return {
    cspSource: webview.cspSource,
    nonce: makeNonce(),
    scriptUri: webview.asWebviewUri(vscode.Uri.joinPath(dist, `${bundle}.js`)).toString(),
    styleUris: [webview.asWebviewUri(vscode.Uri.joinPath(dist, 'uPlot.min.css')).toString()],
  };
}

/**
 * The messages between a panel and its page. Messages from the page are checked by `parse` (a
 * malformed one is logged and dropped) and go to `handle`; the page's `readyType` message opens
 * the link, hiding the panel closes it, and `post` sends only while it is open. Its listeners are
 * added to `subscriptions` (first, so that the panel's own view-state listener sees `ready` as it now is).
 */
export class PageLink<ToPage, ToHost extends { readonly type: string }> {
  private open = false;

  constructor(
    private readonly panel: vscode.WebviewPanel,
    /** The panel's name in the log: `Curves`, `Tuning results`. */
    private readonly what: string,
    readyType: ToHost['type'],
    parse: (raw: unknown) => ToHost | undefined,
    handle: (message: ToHost) => void,
    subscriptions: vscode.Disposable[],
  ) {
    subscriptions.push(
      panel.webview.onDidReceiveMessage((raw: unknown) => {
        const message = parse(raw);
        if (!message) {
          log.warn(`${what}: ignored a malformed message from the webview: ${JSON.stringify(raw)?.slice(0, 200)}`);
          return;
        }
        if (message.type === readyType) this.open = true;
        handle(message);
      }),
      panel.onDidChangeViewState(({ webviewPanel }) => {
        if (!webviewPanel.visible) this.open = false;
      }),
    );
  }

  /** Whether the page has said it is ready and has not been hidden since. */
  get ready(): boolean {
    return this.open;
  }

  post(message: ToPage): void {
    if (!this.open) return;
    this.panel.webview.postMessage(message).then(undefined, (err: unknown) => log.warn(`${this.what}: postMessage failed: ${String(err)}`));
  }
}

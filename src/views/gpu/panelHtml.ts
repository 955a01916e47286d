/**
 * The GPU panel's page, as a pure function of its resource URIs, so that the browser tests load
 * exactly what VS Code loads (same CSP, same markup) without a `vscode` import.
 */
import { appMain, renderWebviewPage, type WebviewPageOptions } from '../common/webviewHtml';

export { makeNonce } from '../common/webviewHtml';

export interface PanelHtmlOptions extends WebviewPageOptions {
  /**
   * How long the page waits for its first sample before it says that none arrived
   * (it never spins forever). Defaults to 15 s.
   */
  readonly firstSampleTimeoutMs?: number;
}

export function renderPanelHtml(opts: PanelHtmlOptions): string {
  const timeout = Math.max(1, Math.round(opts.firstSampleTimeoutMs ?? 15_000));
  return renderWebviewPage(opts, {
    title: 'GPUs',
    bodyAttributes: `data-first-sample-timeout-ms="${timeout}"`,
    body: appMain('Waiting for the first sample…'),
  });
}

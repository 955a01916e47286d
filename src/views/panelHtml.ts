/**
 * The GPU panel's page, as a pure function of its resource URIs, so that the browser tests load
 * exactly what VS Code loads (same CSP, same markup) without a `vscode` import.
 */

export interface PanelHtmlOptions {
  /** `webview.cspSource`: the origin the webview's own resources are served from. */
  readonly cspSource: string;
  /** A fresh random nonce per render; only the script carrying it may run. */
  readonly nonce: string;
  /** `dist/webview.js` as a webview URI. */
  readonly scriptUri: string;
  /** Style sheets (uPlot's CSS, the panel's CSS) as webview URIs. */
  readonly styleUris: readonly string[];
  /**
   * How long the page waits for its first sample before it says that none arrived
   * (it never spins forever). Defaults to 15 s.
   */
  readonly firstSampleTimeoutMs?: number;
}

/** 32 hex characters from a CSPRNG; works in Node 20 and in browsers alike. */
export function makeNonce(): string {
  const bytes = new Uint8Array(16);
  globalThis.crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

function attr(value: string): string {
  return value.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

export function renderPanelHtml(opts: PanelHtmlOptions): string {
  if (!/^[A-Za-z0-9+/=_-]{16,}$/.test(opts.nonce)) throw new Error('renderPanelHtml: the nonce must be 16+ base64/hex characters');
  // Lit (under @vscode-elements) styles its shadow roots with constructable style sheets
  // (`adoptedStyleSheets`), which CSP does not govern, so style-src needs neither a nonce nor
  // 'unsafe-inline'. uPlot sizes its elements through the CSSOM (`el.style.x = …`), which CSP
  // allows as well. The browser tests fail on any violation, so this stays as strict as works.
  const csp = [
    "default-src 'none'",
    `script-src 'nonce-${opts.nonce}'`,
    `style-src ${opts.cspSource}`,
    `img-src ${opts.cspSource} data:`,
    `font-src ${opts.cspSource}`,
  ].join('; ');
  const timeout = Math.max(1, Math.round(opts.firstSampleTimeoutMs ?? 15_000));
  const styles = opts.styleUris.map((u) => `    <link rel="stylesheet" href="${attr(u)}">`).join('\n');
  return `<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="UTF-8">
    <meta http-equiv="Content-Security-Policy" content="${attr(csp)}">
    <meta name="viewport" content="width=device-width, initial-scale=1.0">
${styles}
    <title>GPUs</title>
  </head>
  <body data-first-sample-timeout-ms="${timeout}">
    <main id="app" aria-live="polite">
      <p class="waiting">Waiting for the first sample…</p>
    </main>
    <script nonce="${attr(opts.nonce)}" src="${attr(opts.scriptUri)}"></script>
  </body>
</html>
`;
}

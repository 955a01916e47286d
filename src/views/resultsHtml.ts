/**
 * The "Tuning Results" page, as a pure function of its resource URIs, so that the browser tests
 * load exactly what VS Code loads (same CSP, same markup) without a `vscode` import. The page's
 * own styles are adopted by its script (constructable style sheets, which CSP does not govern),
 * so the only style sheet it links is uPlot's.
 */

export interface ResultsHtmlOptions {
  /** `webview.cspSource`: the origin the webview's own resources are served from. */
  readonly cspSource: string;
  /** A fresh random nonce per render (`makeNonce()` in panelHtml.ts); only the script carrying it may run. */
  readonly nonce: string;
  /** `dist/results.js` as a webview URI. */
  readonly scriptUri: string;
  /** Style sheets (uPlot's CSS) as webview URIs. */
  readonly styleUris: readonly string[];
  /** The experiment's name, for the document title. */
  readonly experiment: string;
}

function escape(value: string): string {
  return value.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

export function renderResultsHtml(opts: ResultsHtmlOptions): string {
  if (!/^[A-Za-z0-9+/=_-]{16,}$/.test(opts.nonce)) throw new Error('renderResultsHtml: the nonce must be 16+ base64/hex characters');
  const csp = [
    "default-src 'none'",
    `script-src 'nonce-${opts.nonce}'`,
    `style-src ${opts.cspSource}`,
    `img-src ${opts.cspSource} data:`,
    `font-src ${opts.cspSource}`,
  ].join('; ');
  const styles = opts.styleUris.map((u) => `    <link rel="stylesheet" href="${escape(u)}">`).join('\n');
  return `<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="UTF-8">
    <meta http-equiv="Content-Security-Policy" content="${escape(csp)}">
    <meta name="viewport" content="width=device-width, initial-scale=1.0">
${styles}
    <title>Tuning Results: ${escape(opts.experiment)}</title>
  </head>
  <body>
    <main id="app" aria-live="polite">
      <p class="waiting">Loading the results of ${escape(opts.experiment)}…</p>
    </main>
    <script nonce="${escape(opts.nonce)}" src="${escape(opts.scriptUri)}"></script>
  </body>
</html>
`;
}

/**
 * The frame every webview page of ours shares: a strict Content-Security-Policy (only the script
 * with this render's nonce runs; styles, images and fonts only from the webview's own origin),
 * the style sheets, a title, and the page's body. Pure (no `vscode` import), so the browser tests
 * load exactly what VS Code loads.
 */

export interface WebviewPageOptions {
  /** `webview.cspSource`: the origin the webview's own resources are served from. */
  readonly cspSource: string;
  /** A fresh random nonce per render (`makeNonce()`); only the script carrying it may run. */
  readonly nonce: string;
  /** The page's bundle (`dist/<name>.js`) as a webview URI. */
  readonly scriptUri: string;
  /** Style sheets as webview URIs. */
  readonly styleUris: readonly string[];
}

/** 32 hex characters from a CSPRNG; works in Node 20 and in browsers alike. */
export function makeNonce(): string {
  const bytes = new Uint8Array(16);
  globalThis.crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** Escapes text for an HTML attribute or element. */
export function escapeHtml(value: string): string {
  return value.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/**
 * Lit (under @vscode-elements) styles its shadow roots with constructable style sheets
 * (`adoptedStyleSheets`), which CSP does not govern, so style-src needs neither a nonce nor
 * 'unsafe-inline'. uPlot sizes its elements through the CSSOM (`el.style.x = …`), which CSP
 * allows as well. The browser tests fail on any violation, so this stays as strict as works.
 */
export function webviewCsp(cspSource: string, nonce: string): string {
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src ${cspSource}`,
    `img-src ${cspSource} data:`,
    `font-src ${cspSource}`,
  ].join('; ');
}

/** `body` is trusted markup written by the caller; `title` is escaped here. */
export function renderWebviewPage(opts: WebviewPageOptions, page: { readonly title: string; readonly bodyAttributes?: string; readonly body: string }): string {
  if (!/^[A-Za-z0-9+/=_-]{16,}$/.test(opts.nonce)) throw new Error('webview page: the nonce must be 16+ base64/hex characters');
  const styles = opts.styleUris.map((u) => `    <link rel="stylesheet" href="${escapeHtml(u)}">`).join('\n');
  return `<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="UTF-8">
    <meta http-equiv="Content-Security-Policy" content="${escapeHtml(webviewCsp(opts.cspSource, opts.nonce))}">
    <meta name="viewport" content="width=device-width, initial-scale=1.0">
${styles}
    <title>${escapeHtml(page.title)}</title>
  </head>
  <body${page.bodyAttributes ? ` ${page.bodyAttributes}` : ''}>
${page.body}
    <script nonce="${escapeHtml(opts.nonce)}" src="${escapeHtml(opts.scriptUri)}"></script>
  </body>
</html>
`;
}

/**
 * The body of a page whose script draws it into `<main id="app">`: `waiting` (escaped here) until
 * it does; `data` becomes the element's `data-*` attributes (escaped; an undefined one is left out),
 * which the script reads.
 */
export function appMain(waiting: string, data: Readonly<Record<string, string | undefined>> = {}): string {
  const attributes = Object.entries(data).flatMap(([name, value]) => (value === undefined ? [] : [` data-${name}="${escapeHtml(value)}"`])).join('');
  return `    <main id="app" aria-live="polite"${attributes}>
      <p class="waiting">${escapeHtml(waiting)}</p>
    </main>`;
}

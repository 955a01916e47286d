/**
 * One editor-tab webview page (Tuning Results, Curves) in headless Chromium, as VS Code would show it:
 * its HTML from the extension's own renderer with its real CSP, the built `dist/<name>.js`, theme
 * variables, a fake `acquireVsCodeApi` whose posts the test reads, and messages sent as the host sends them.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, normalize, sep } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { repoRoot } from '../paths';
import { eventually } from './harness';
import type { Theme } from './themes';

export interface PageServer { readonly origin: string; close(): Promise<void> }

/** Serves `/<name>.html` (from `html(origin)`) and the files of dist/; fails early when dist/<name>.js is not built. */
export async function startPageServer(name: string, html: (origin: string) => string): Promise<PageServer> {
  const bundle = join(repoRoot, 'dist', `${name}.js`);
  if (!existsSync(bundle)) throw new Error(`${bundle} is missing: build the webviews first (npm run build)`);
  let origin = '';
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', origin);
    if (url.pathname === `/${name}.html`) {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }).end(html(origin));
      return;
    }
    const file = normalize(join(repoRoot, decodeURIComponent(url.pathname)));
    if (!file.startsWith(join(repoRoot, 'dist') + sep) || !existsSync(file)) {
      res.writeHead(404).end();
      return;
    }
    const types: Record<string, string> = { '.js': 'text/javascript', '.css': 'text/css', '.map': 'application/json' };
    res.writeHead(200, { 'content-type': types[extname(file)] ?? 'application/octet-stream' }).end(readFileSync(file));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { origin, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

/** Theme variables and a fake `acquireVsCodeApi` before the page's script (a string: the tests compile without the DOM library). */
function fakeVsCode(theme: Theme, name: string): string {
  return `(() => {
  const vars = ${JSON.stringify(theme.vars)};
  window.__csp = [];
  document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
  let themed = false;
  const apply = () => {
    const html = document.documentElement;
    if (html && !themed) {
      for (const [k, v] of Object.entries(vars)) html.style.setProperty(k, v);
      html.style.setProperty('background', 'var(--vscode-editor-background)');
      themed = true;
    }
    if (!document.body) return false;
    document.body.classList.add(${JSON.stringify(theme.bodyClass)});
    return true;
  };
  if (!apply()) new MutationObserver((_r, o) => { if (apply()) o.disconnect(); }).observe(document, { childList: true, subtree: true });
  window.acquireVsCodeApi = () => ({
    postMessage: (m) => { void window.__pagePosted(JSON.stringify(m)); },
    getState: () => { const s = sessionStorage.getItem(${JSON.stringify(`${name}-state`)}); return s == null ? undefined : JSON.parse(s); },
    setState: (s) => { sessionStorage.setItem(${JSON.stringify(`${name}-state`)}, JSON.stringify(s)); return s; },
  });
})();`;
}

export interface WebviewPage<Out extends { type: string }, In> {
  readonly page: Page;
  /** What the page posted to the host, in order. */
  readonly posted: Out[];
  readonly errors: string[];
  cspViolations(): Promise<string[]>;
  waitForPosted(type: Out['type'], count?: number): Promise<void>;
  send(message: In): Promise<void>;
  close(): Promise<void>;
}

export async function openWebviewPage<Out extends { type: string }, In>(browser: Browser, server: PageServer, name: string, theme: Theme): Promise<WebviewPage<Out, In>> {
  const context = await browser.newContext({ viewport: { width: 1100, height: 900 }, timezoneId: 'UTC', locale: 'en-GB' });
  const page = await context.newPage();
  const consoleCsp: string[] = [];
  const errors: string[] = [];
  page.on('console', (m) => { if (/Content[- ]Security[- ]Policy/i.test(m.text())) consoleCsp.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.addInitScript({ content: fakeVsCode(theme, name) });
  const posted: Out[] = [];
  await page.exposeFunction('__pagePosted', (json: string) => { posted.push(JSON.parse(json) as Out); });
  await page.goto(`${server.origin}/${name}.html`);
  return {
    page, posted, errors,
    cspViolations: async () => [...consoleCsp, ...await page.evaluate<string[]>('window.__csp')],
    waitForPosted: (type, count = 1) => eventually(() => Promise.resolve(posted.filter((m) => m.type === type).length >= count),
      `the page posts ${count} × ${type} (posted ${JSON.stringify(posted)}; errors ${JSON.stringify(errors)}; CSP ${JSON.stringify(consoleCsp)})`, 10_000),
    send: async (message) => { await page.evaluate(`window.postMessage(${JSON.stringify(message)}, '*')`); },
    close: () => context.close(),
  };
}

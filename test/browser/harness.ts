/**
 * Loads the GPU panel exactly as VS Code would (the page from `renderPanelHtml`, its real CSP,
 * the built `dist/webview.js`) in Debian's Chromium, with a fake `acquireVsCodeApi` injected
 * before the page's script runs. The repo is served over http on 127.0.0.1 so that the CSP's
 * `${cspSource}` is a real origin, as `vscode-webview://…` is inside VS Code.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, normalize, sep } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import type { HostToPanelMessage, PanelToHostMessage } from '../../src/common/protocol';
import { makeNonce, renderPanelHtml } from '../../src/views/gpu/panelHtml';
import { repoRoot } from '../paths';
import type { Theme } from './themes';

const types: Record<string, string> = { '.js': 'text/javascript', '.css': 'text/css', '.png': 'image/png', '.svg': 'image/svg+xml', '.map': 'application/json' };

export interface PanelServer {
  readonly origin: string;
  close(): Promise<void>;
}

/** Serves `/panel.html` (rendered per request) and the repo's `dist/` and `media/` folders only. */
export async function startPanelServer(): Promise<PanelServer> {
  const bundle = join(repoRoot, 'dist', 'webview.js');
  if (!existsSync(bundle)) throw new Error(`${bundle} is missing: build the webview first (npm run build)`);
  let origin = '';
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', origin);
    if (url.pathname === '/favicon.ico') {
      res.writeHead(204).end();
      return;
    }
    if (url.pathname === '/panel.html') {
      const timeout = Number(url.searchParams.get('firstSampleTimeoutMs') ?? '');
      const html = renderPanelHtml({
        cspSource: origin,
        nonce: makeNonce(),
        scriptUri: `${origin}/dist/webview.js`,
        styleUris: [`${origin}/dist/uPlot.min.css`, `${origin}/media/panel.css`],
        ...(timeout > 0 ? { firstSampleTimeoutMs: timeout } : {}),
      });
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
      res.end(html);
      return;
    }
    const file = normalize(join(repoRoot, decodeURIComponent(url.pathname)));
    const allowed = [join(repoRoot, 'dist') + sep, join(repoRoot, 'media') + sep].some((dir) => file.startsWith(dir));
    if (!allowed || !existsSync(file)) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': types[extname(file)] ?? 'application/octet-stream', 'cache-control': 'no-store' });
    res.end(readFileSync(file));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { origin, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

export async function launchChromium(): Promise<Browser> {
  const executablePath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  if (!existsSync(executablePath)) throw new Error(`Chromium not found at ${executablePath}: install Debian's chromium or set CHROMIUM_PATH`);
  return chromium.launch({
    executablePath,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/**
 * Runs in the page before any of its scripts: VS Code's theme variables and body class, and a
 * fake `acquireVsCodeApi` that records posted messages and keeps state in sessionStorage (so it
 * survives a reload, as VS Code keeps it across a view's hide and show). A string, because the
 * tests compile without the DOM library.
 */
function fakeVsCodeScript(theme: Theme): string {
  return `(() => {
  const vars = ${JSON.stringify(theme.vars)};
  const bodyClass = ${JSON.stringify(theme.bodyClass)};
  const stateKey = 'gpu-panel-state';
  window.__csp = [];
  document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
  // Init scripts run before <html> exists: theme it (and its body) as soon as each appears.
  let themedHtml = false;
  const applyTheme = () => {
    const html = document.documentElement;
    if (html && !themedHtml) {
      for (const [k, v] of Object.entries(vars)) html.style.setProperty(k, v);
      // The sidebar's background is painted by VS Code behind the (transparent) webview.
      html.style.setProperty('background', 'var(--vscode-sideBar-background)');
      themedHtml = true;
    }
    if (!document.body) return false;
    document.body.classList.add(bodyClass);
    document.body.dataset.vscodeThemeKind = bodyClass;
    return true;
  };
  if (!applyTheme()) new MutationObserver((_r, o) => { if (applyTheme()) o.disconnect(); }).observe(document, { childList: true, subtree: true });
  let acquired = false;
  window.acquireVsCodeApi = () => {
    if (acquired) throw new Error('An instance of the VS Code API has already been acquired');
    acquired = true;
    return {
      postMessage: (m) => { void window.__gpuPanelPosted(JSON.stringify(m)); },
      getState: () => { const s = sessionStorage.getItem(stateKey); return s == null ? undefined : JSON.parse(s); },
      setState: (s) => { sessionStorage.setItem(stateKey, JSON.stringify(s)); return s; },
    };
  };
})();`;
}

export interface PanelPage {
  readonly page: Page;
  /** Console lines that mention the Content Security Policy, plus `securitypolicyviolation` events. */
  cspViolations(): Promise<string[]>;
  /** Uncaught errors in the page. */
  readonly errors: string[];
  /** What the page posted to the host, in order. */
  posted(): Promise<PanelToHostMessage[]>;
  /** Calls back on every message the page posts from now on (as the host's onDidReceiveMessage). */
  onPosted(listener: (message: PanelToHostMessage) => void): void;
  /** Waits (with a deadline) until the page has posted a message of this type. */
  waitForPosted(type: PanelToHostMessage['type'], count?: number): Promise<void>;
  /** Delivers a message from the host, as VS Code does: a `message` event on the window. */
  send(message: HostToPanelMessage): Promise<void>;
  /** Loads the page again, as when VS Code re-creates a hidden view's page. */
  reload(): Promise<void>;
  close(): Promise<void>;
}

export async function openPanel(browser: Browser, server: PanelServer, theme: Theme, opts: { firstSampleTimeoutMs?: number; width?: number } = {}): Promise<PanelPage> {
  const context = await browser.newContext({ viewport: { width: opts.width ?? 380, height: 900 }, timezoneId: 'UTC', locale: 'en-GB' });
  const page = await context.newPage();
  const consoleCsp: string[] = [];
  const errors: string[] = [];
  page.on('console', (m) => {
    if (/Content[- ]Security[- ]Policy/i.test(m.text())) consoleCsp.push(m.text());
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.addInitScript({ content: fakeVsCodeScript(theme) });
  // Posted messages go straight to the test through a binding: no polling, no eval in the page
  // (the page's CSP forbids eval, which Playwright's string predicates would need).
  const posted: PanelToHostMessage[] = [];
  const listeners = new Set<(m: PanelToHostMessage) => void>();
  await page.exposeFunction('__gpuPanelPosted', (json: string) => {
    const message = JSON.parse(json) as PanelToHostMessage;
    posted.push(message);
    for (const l of [...listeners]) l(message);
  });
  const url = `${server.origin}/panel.html${opts.firstSampleTimeoutMs ? `?firstSampleTimeoutMs=${opts.firstSampleTimeoutMs}` : ''}`;
  await page.goto(url);
  return {
    page,
    errors,
    cspViolations: async () => [...consoleCsp, ...await page.evaluate<string[]>('window.__csp')],
    posted: () => Promise.resolve([...posted]),
    onPosted: (listener) => {
      listeners.add(listener);
    },
    waitForPosted: (type, count = 1) => new Promise<void>((resolve, reject) => {
      const done = (): boolean => posted.filter((m) => m.type === type).length >= count;
      if (done()) return resolve();
      const check = (): void => {
        if (!done()) return;
        clearTimeout(timer);
        listeners.delete(check);
        resolve();
      };
      const timer = setTimeout(() => {
        listeners.delete(check);
        // Say why: a bundle built with eval-based source maps, for one, dies on the page's CSP.
        reject(new Error(`the page did not post ${count} × ${type} within 10 s; it posted ${JSON.stringify(posted)}; page errors: ${JSON.stringify(errors)}; CSP: ${JSON.stringify(consoleCsp)}`));
      }, 10_000);
      listeners.add(check);
    }),
    send: async (message) => {
      await page.evaluate(`window.postMessage(${JSON.stringify(message)}, '*')`);
    },
    reload: async () => {
      await page.reload();
    },
    close: () => context.close(),
  };
}

/** Polls a condition until it holds or the deadline passes (uPlot paints on its own schedule). */
export async function eventually(condition: () => Promise<boolean>, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) assert.fail(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** A page a suite checks after each test: no CSP violation, no uncaught error. */
export interface CheckedPage {
  cspViolations(): Promise<string[]>;
  readonly errors: readonly string[];
  close(): Promise<void>;
}

export interface PageSuite<S> {
  /** The suite's Chromium and page server, from `before` on. */
  readonly browser: Browser;
  readonly server: S;
  /** Closes the page after the test; a passed test then fails if the page broke its CSP or threw. */
  track<P extends CheckedPage>(page: P): P;
}

/**
 * Registers the hooks of a suite of webview pages in headless Chromium: `before` starts the page
 * server and Chromium, `afterEach` closes the test's tracked pages and (when the test passed)
 * asserts each loaded without a Content Security Policy violation or an uncaught error, `after`
 * closes Chromium and the server. Call it inside the suite's `describe`.
 */
export function pageSuite<S extends { close(): Promise<void> }>(startServer: () => Promise<S>): PageSuite<S> {
  let browser: Browser | undefined;
  let server: S | undefined;
  const open: CheckedPage[] = [];

  before(async () => {
    server = await startServer();
    browser = await launchChromium();
  });

  afterEach(async function () {
    for (const p of open.splice(0)) {
      // Every page must load without a CSP violation or an uncaught error, whatever the test did.
      const csp = await p.cspViolations();
      const errors = p.errors;
      await p.close();
      if (this.currentTest?.state === 'passed') {
        assert.deepEqual(csp, [], 'Content Security Policy violations');
        assert.deepEqual(errors, [], 'uncaught errors in the page');
      }
    }
  });

  after(async () => {
    await browser?.close();
    await server?.close();
  });

  return {
    get browser(): Browser {
      if (!browser) throw new Error('Chromium is not started: use the suite from its tests only');
      return browser;
    },
    get server(): S {
      if (!server) throw new Error('the page server is not started: use the suite from its tests only');
      return server;
    },
    track: (page) => {
      open.push(page);
      return page;
    },
  };
}

/** How many pixels of the first canvas matching `selector` are close to #rrggbb `hex`: proof a chart drew in a theme's colour. */
export async function canvasPixelsOfColor(page: Page, selector: string, hex: string): Promise<number> {
  // A string expression: the tests compile without the DOM library, and the page's CSP forbids eval.
  return page.evaluate<number>(`(() => {
    const canvas = document.querySelector(${JSON.stringify(selector)});
    if (!canvas) return 0;
    const [r, g, b] = [1, 3, 5].map((i) => parseInt(${JSON.stringify(hex)}.slice(i, i + 2), 16));
    const { data } = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i + 3] > 200 && Math.abs(data[i] - r) < 12 && Math.abs(data[i + 1] - g) < 12 && Math.abs(data[i + 2] - b) < 12) n++;
    }
    return n;
  })()`);
}

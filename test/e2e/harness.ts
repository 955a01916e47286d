/**
 * The end-to-end harness: the packaged extension in a real VS Code (code-server 4.100.3 from
 * `.e2e-cache/`, installed by scripts/setup-test-deps.sh) driven from Debian's chromium with
 * playwright-core. Recipe and pitfalls: ../shared/E2E.md.
 *
 * Every wait has a deadline and names what it waited for; nothing sleeps for a fixed time.
 * The server runs in its own process group (it forks a pty host, extension hosts, file
 * watchers), and that whole group is killed at the end, also when a test fails or mocha exits.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { accessSync, constants, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, delimiter, join } from 'node:path';
import { chromium, type Browser, type FrameLocator, type Page } from 'playwright-core';
import { fixtures, repoRoot } from '../paths';

export const codeServerVersion = '4.100.3';
export const extensionId = 'gpu-workbench.gpu-workbench';
export const chromiumPath = process.env.E2E_CHROMIUM ?? '/usr/bin/chromium';
export const codeServerEntry = join(repoRoot, '.e2e-cache', 'code-server', 'node_modules', 'code-server', 'out', 'node', 'entry.js');
export const e2eWorkspace = join(fixtures, 'e2e-workspace');
export const resultsDir = join(repoRoot, 'test-results', 'e2e');

/** The settings from E2E.md: no welcome page, no telemetry, no update or gallery calls. */
const userSettings = {
  'workbench.startupEditor': 'none',
  'telemetry.telemetryLevel': 'off',
  'update.mode': 'none',
  'extensions.autoCheckUpdates': false,
  'extensions.autoUpdate': false,
  'extensions.ignoreRecommendations': true,
  'workbench.tips.enabled': false,
  // The workspace lives inside this repository: no "open the parent repository?" toast over the view.
  'git.openRepositoryInParentFolders': 'never',
  // The terminal tabs list also with one terminal (VS Code hides it then): tests pick a terminal by its name there.
  'terminal.integrated.tabs.hideCondition': 'never',
};

/** Elapsed milliseconds since `t0`, for the timings the suite prints. */
export function since(t0: number): number {
  return Math.round(performance.now() - t0);
}

/** Polls `check` until it returns a value other than undefined/false, or throws after the deadline naming `what`. */
export async function waitUntil<T>(what: string, timeoutMs: number, check: () => T | undefined | false | Promise<T | undefined | false>, everyMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined && v !== false) return v;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? ` (last error: ${lastError instanceof Error ? lastError.message : JSON.stringify(lastError)})` : ''}`);
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

function assertReady(): void {
  if (!existsSync(codeServerEntry)) {
    throw new Error(`code-server ${codeServerVersion} is not installed at ${codeServerEntry}; run: bash scripts/setup-test-deps.sh e2e`);
  }
  try {
    accessSync(chromiumPath, constants.X_OK);
  } catch {
    throw new Error(`Debian chromium is not at ${chromiumPath}; run: bash scripts/setup-test-deps.sh browser`);
  }
}

// ---------------------------------------------------------------------------------------
// Packaging

let builtVsix: string | undefined;

function newestMtime(path: string): number {
  const s = statSync(path);
  if (!s.isDirectory()) return s.mtimeMs;
  let newest = 0;
  for (const e of readdirSync(path)) newest = Math.max(newest, newestMtime(join(path, e)));
  return newest;
}

/** dist/extension.js exists and no source is newer than the newest bundle (webpack leaves unchanged outputs untouched). */
function buildIsFresh(): boolean {
  const dist = join(repoRoot, 'dist');
  if (!existsSync(join(dist, 'extension.js'))) return false;
  const built = Math.max(...readdirSync(dist).filter((f) => /\.(js|wasm|css)$/.test(f)).map((f) => statSync(join(dist, f)).mtimeMs));
  const sources = ['src', 'webview-ui', 'media', 'package.json', 'webpack.config.js'].map((p) => join(repoRoot, p)).filter(existsSync);
  return Math.max(...sources.map(newestMtime)) <= built;
}

function run(cmd: string, args: string[], what: string, timeoutMs: number): string {
  const r = spawnSync(cmd, args, { cwd: repoRoot, encoding: 'utf8', timeout: timeoutMs, maxBuffer: 1 << 26, env: { ...process.env, FORCE_COLOR: '0' } });
  const out = `${r.stdout ?? ''}${r.stderr ?? ''}`;
  if (r.error) throw new Error(`${what}: ${r.error.message}\n${out.slice(-4000)}`);
  if (r.status !== 0) throw new Error(`${what} exited ${r.status ?? r.signal}\n${out.slice(-4000)}`);
  return out;
}

/**
 * vsce refuses a README with relative images unless it can tell where they will be served from
 * (it only guesses that for GitHub/GitLab repositories). Where the images point does not change
 * what these tests check, so they get base URLs made from package.json's `repository`.
 */
function readmeBaseUrls(): string[] {
  const manifest = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { repository?: string | { url?: string } };
  const url = typeof manifest.repository === 'string' ? manifest.repository : manifest.repository?.url;
  if (!url || /github\.com|gitlab\.com/.test(url)) return [];
  const base = url.replace(/\.git$/, '').replace(/\/$/, '');
  return ['--baseContentUrl', `${base}/blob/HEAD/`, '--baseImagesUrl', `${base}/raw/HEAD/`];
}

/**
 * The extension packaged as a user gets it. Reuses, in this order: `E2E_VSIX` if set, the vsix
 * already made by this process (every suite file installs the same one); else runs `npm run
 * build` (skipped when `E2E_SKIP_BUILD=1`, or when every source is older than the newest bundle
 * in dist/, as right after `npm test` built) and `vsce package --no-dependencies`. The argument
 * is no longer used (the vsix has a folder of its own) and stays for existing callers.
 */
export function packageVsix(_outDir?: string): { vsix: string; buildMs: number; packageMs: number } {
  if (process.env.E2E_VSIX) {
    if (!existsSync(process.env.E2E_VSIX)) throw new Error(`E2E_VSIX=${process.env.E2E_VSIX} does not exist`);
    return { vsix: process.env.E2E_VSIX, buildMs: 0, packageMs: 0 };
  }
  if (builtVsix && existsSync(builtVsix)) return { vsix: builtVsix, buildMs: 0, packageMs: 0 };
  let t0 = performance.now();
  if (process.env.E2E_SKIP_BUILD !== '1' && !buildIsFresh()) run('npm', ['run', '--silent', 'build'], 'npm run build', 300_000);
  const buildMs = since(t0);
  t0 = performance.now();
  // Packaged once per mocha process, into a folder of its own that outlives each suite's `outDir`
  // (suites remove theirs in `after`) and goes when the process exits.
  const dir = mkdtempSync(join(tmpdir(), 'gpu-workbench-e2e-vsix-'));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  const vsix = join(dir, 'gpu-workbench.vsix');
  run(join(repoRoot, 'node_modules', '.bin', 'vsce'), ['package', '--no-dependencies', ...readmeBaseUrls(), '--out', vsix], 'vsce package', 120_000);
  builtVsix = vsix;
  const packageMs = since(t0);
  console.log(`      packaged the extension for every e2e suite: build ${buildMs} ms, vsce ${packageMs} ms`);
  return { vsix, buildMs, packageMs };
}

// ---------------------------------------------------------------------------------------
// The server

export interface ServerOptions {
  /** Put the fake nvidia-smi (test/fixtures/bin) first on the server's PATH. Otherwise every PATH entry holding an nvidia-smi is removed. */
  fakeGpus: boolean;
  /** FAKE_NVIDIA_SMI_SCENARIO; default two-gpus. */
  scenario?: string;
  /** A vsix to install into the throwaway extensions folder before the server starts. */
  vsix?: string;
  /** Extra settings for the throwaway user. */
  settings?: Record<string, unknown>;
  /** Extra environment for the server and so for the extension host. */
  env?: NodeJS.ProcessEnv;
  /** A short name for the folders and screenshots. */
  name: string;
  /** The folder the server opens by default; default test/fixtures/e2e-workspace. */
  workspace?: string;
  /**
   * Leave workspace trust on (no `--disable-workspace-trust`): the folder opens in Restricted
   * Mode, without the trust dialog (`security.workspace.trust.startupPrompt: never`).
   */
  restricted?: boolean;
}

/** Settings that make a fresh user open every folder in Restricted Mode, with no dialog. */
const restrictedModeSettings = {
  'security.workspace.trust.enabled': true,
  'security.workspace.trust.startupPrompt': 'never',
  'security.workspace.trust.banner': 'always',
  'security.workspace.trust.untrustedFiles': 'open',
  'security.workspace.trust.emptyWindow': false,
};

export interface Timings {
  [step: string]: number;
}

const liveGroups = new Set<number>();
process.on('exit', () => {
  for (const pgid of liveGroups) {
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
});

/** A PATH with `test/fixtures/bin` first, or with every folder that holds an nvidia-smi taken out. */
export function serverPath(fakeGpus: boolean): string {
  const entries = (process.env.PATH ?? '').split(delimiter).filter((d) => d && !existsSync(join(d, 'nvidia-smi')));
  return (fakeGpus ? [join(fixtures, 'bin'), ...entries] : entries).join(delimiter);
}

export class CodeServer {
  readonly timings: Timings = {};
  private constructor(
    readonly root: string,
    readonly userDataDir: string,
    readonly extensionsDir: string,
    readonly env: NodeJS.ProcessEnv,
    private readonly child: ChildProcess,
    readonly port: number,
    private readonly output: () => string,
  ) {}

  get origin(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Starts code-server on 127.0.0.1 (a free port it picks itself) and waits for /healthz. */
  static async start(opts: ServerOptions): Promise<CodeServer> {
    assertReady();
    const root = mkdtempSync(join(tmpdir(), `gpu-workbench-e2e-${opts.name}-`));
    const userDataDir = join(root, 'user-data');
    const extensionsDir = join(root, 'extensions');
    mkdirSync(join(userDataDir, 'User'), { recursive: true });
    mkdirSync(extensionsDir, { recursive: true });
    const settings = { ...userSettings, ...(opts.restricted ? restrictedModeSettings : {}), ...opts.settings };
    writeFileSync(join(userDataDir, 'User', 'settings.json'), JSON.stringify(settings, null, 2));
    // Our own config file, or code-server writes ~/.config/code-server/config.yaml with a password.
    const config = join(root, 'cs.yaml');
    writeFileSync(config, 'bind-addr: 127.0.0.1:0\nauth: none\ncert: false\n');

    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PATH: serverPath(opts.fakeGpus),
      FAKE_NVIDIA_SMI_SCENARIO: opts.scenario ?? 'two-gpus',
      // The extension echoes its log to the console under CI (src/log.ts); handy in the host log.
      CI: 'true',
      // The VS Code server normally replaces PATH (and the rest) with what a login shell prints
      // (`$SHELL -ilc env`), and /etc/profile resets PATH, so the fake nvidia-smi would vanish.
      // It skips that when it believes it was launched from its CLI.
      VSCODE_CLI: '1',
      ...opts.env,
    };
    delete env.VSCODE_IPC_HOOK_CLI; // never talk to a VS Code this test might be running inside
    const base = ['--config', config, '--user-data-dir', userDataDir, '--extensions-dir', extensionsDir];
    const timings: Timings = {};

    if (opts.vsix) {
      const t0 = performance.now();
      const r = spawnSync(process.execPath, [codeServerEntry, ...base, '--install-extension', opts.vsix], { env, encoding: 'utf8', timeout: 60_000 });
      const out = `${r.stdout ?? ''}${r.stderr ?? ''}`;
      if (r.status !== 0 || !/successfully installed/i.test(out)) {
        throw new Error(`code-server --install-extension ${opts.vsix} failed (exit ${r.status ?? r.signal}):\n${out.slice(-3000)}`);
      }
      timings.installMs = since(t0);
    }

    const t0 = performance.now();
    const trust = opts.restricted ? [] : ['--disable-workspace-trust'];
    const child = spawn(
      process.execPath,
      [codeServerEntry, ...base, '--bind-addr', '127.0.0.1:0', '--auth', 'none', '--disable-telemetry', '--disable-update-check', ...trust, opts.workspace ?? e2eWorkspace],
      { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    if (child.pid === undefined) throw new Error('could not spawn code-server');
    liveGroups.add(child.pid);
    let output = '';
    const append = (b: Buffer): void => {
      output += b.toString();
      if (output.length > 200_000) output = output.slice(-100_000);
    };
    child.stdout?.on('data', append);
    child.stderr?.on('data', append);
    let exited: string | undefined;
    child.on('exit', (code, signal) => (exited = `code-server exited (${code ?? signal})`));

    try {
      const port = await waitUntil('code-server to print its address', 30_000, () => {
        if (exited) throw new Error(`${exited}:\n${output.slice(-3000)}`);
        const m = /HTTP server listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(output);
        return m ? Number(m[1]) : undefined;
      });
      await waitUntil(`GET http://127.0.0.1:${port}/healthz`, 30_000, async () => {
        if (exited) throw new Error(`${exited}:\n${output.slice(-3000)}`);
        const res = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(2000) });
        return res.ok;
      });
      timings.serverStartMs = since(t0);
      const server = new CodeServer(root, userDataDir, extensionsDir, env, child, port, () => output);
      Object.assign(server.timings, timings);
      return server;
    } catch (e) {
      await killGroup(child);
      throw e;
    }
  }

  /** The server's own output (stdout and stderr), for failure messages. */
  log(): string {
    return this.output();
  }

  /** Files under the user-data-dir's `logs/` whose path matches `re` (extension host and output channel logs). */
  logFiles(re: RegExp): string[] {
    const found: string[] = [];
    const walk = (dir: string): void => {
      if (!existsSync(dir)) return;
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const p = join(dir, e.name);
        if (e.isDirectory()) walk(p);
        else if (re.test(p)) found.push(p);
      }
    };
    walk(join(this.userDataDir, 'logs'));
    return found;
  }

  /** Every line of our LogOutputChannel ("GPU Workbench") and of the extension host logs that matches `re`. */
  grepLogs(re: RegExp): string[] {
    // The channel's own file first (logs/<session>/exthost1/<extension id>/GPU Workbench.log),
    // then the extension host's log, where the CI console echo lands.
    const files = [...this.logFiles(/GPU Workbench\.log$/), ...this.logFiles(/exthost\d*\.log$/)];
    return files.flatMap((f) => readFileSync(f, 'utf8').split('\n').filter((l) => re.test(l)));
  }

  /** Kills the whole process group (server, pty host, extension hosts, watchers) and removes the throwaway folders. */
  async stop(keepFiles = false): Promise<void> {
    await killGroup(this.child);
    if (!keepFiles) rmSync(this.root, { recursive: true, force: true });
  }
}

async function killGroup(child: ChildProcess): Promise<void> {
  const pgid = child.pid;
  if (pgid === undefined) return;
  const alive = (): boolean => {
    try {
      process.kill(-pgid, 0);
      return true;
    } catch {
      return false;
    }
  };
  try {
    process.kill(-pgid, 'SIGTERM');
  } catch {
    /* already gone */
  }
  try {
    await waitUntil(`code-server's process group ${pgid} to exit after SIGTERM`, 5000, () => !alive(), 50);
  } catch {
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      /* gone meanwhile */
    }
    await waitUntil(`code-server's process group ${pgid} to exit after SIGKILL`, 5000, () => !alive(), 50);
  }
  liveGroups.delete(pgid);
}

// ---------------------------------------------------------------------------------------
// The browser

export async function launchBrowser(): Promise<Browser> {
  assertReady();
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    timeout: 60_000,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
}

/** The URL of the workbench on `server` with `folder` open, and the `payload` options VS Code reads from the query (E2E.md (a)). */
export function workbenchUrl(server: CodeServer, folder = e2eWorkspace, payload?: [string, string][]): string {
  let url = `${server.origin}/?folder=${encodeURIComponent(folder)}`;
  if (payload) url += `&payload=${encodeURIComponent(JSON.stringify(payload))}`;
  return url;
}

/** A `vscode-remote://` URI for a path on the server machine, as the payload options want it. */
export function remoteUri(server: CodeServer, path: string): string {
  return `vscode-remote://127.0.0.1:${server.port}${path}`;
}

/** Opens a fresh page on the workbench with `folder` and waits until it has drawn. Console lines are kept for failure messages. */
export async function openWorkbench(browser: Browser, server: CodeServer, folder = e2eWorkspace): Promise<{ page: Page; console: string[]; ms: number }> {
  const t0 = performance.now();
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const consoleLines: string[] = [];
  page.on('console', (m) => consoleLines.push(`[${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => consoleLines.push(`[pageerror] ${e.message}`));
  await page.goto(workbenchUrl(server, folder), { timeout: 60_000 });
  await page.locator('.monaco-workbench').waitFor({ timeout: 60_000 });
  await page.locator('.activitybar').waitFor({ timeout: 60_000 });
  return { page, console: consoleLines, ms: since(t0) };
}

/**
 * The inner document of one of our webviews: two nested iframes (the webview host, then
 * `#active-frame`). The host frame's URL names the extension and the purpose (`webviewView` for a
 * sidebar view, `webviewPanel` for an editor panel), which keeps later webviews apart.
 */
export function webviewFrame(page: Page, purpose: 'webviewView' | 'webviewPanel' = 'webviewView'): FrameLocator {
  return page.frameLocator(`iframe.webview.ready[src*="extensionId=${extensionId}&"][src*="purpose=${purpose}"]`).frameLocator('iframe#active-frame');
}

export const activityBarItem = '.activitybar .action-item a[aria-label^="GPU Workbench"]';

/** Opens the GPU Workbench view from the activity bar and returns its inner webview document. */
export async function openGpuView(page: Page): Promise<FrameLocator> {
  await page.locator(activityBarItem).click({ timeout: 30_000 });
  await page.locator('.sidebar .composite.title', { hasText: 'GPU Workbench' }).waitFor({ timeout: 30_000 });
  const web = webviewFrame(page);
  await web.locator('body').waitFor({ timeout: 30_000 });
  return web;
}

/** Opens `name` from the explorer (more robust than Quick Open, E2E.md) and waits for its editor. */
export async function openFileFromExplorer(page: Page, name: string): Promise<void> {
  const explorer = page.locator('.explorer-folders-view');
  if (!(await explorer.isVisible())) await page.keyboard.press('Control+Shift+E');
  await page.locator('.explorer-folders-view .monaco-list-row', { hasText: name }).first().click({ timeout: 60_000 });
  await page.locator('.tabs-container .tab', { hasText: name }).waitFor({ timeout: 30_000 });
  await page.locator('.editor-instance .monaco-editor .view-lines').first().waitFor({ timeout: 30_000 });
}

/** One row of the Problems panel as the user reads it. */
export interface ProblemRow {
  text: string;
  /** 1-based, from the row's "[Ln N, Col M]". */
  line: number;
  column: number;
}

/** The marker rows the Problems panel shows now (files are expanded rows without a position). */
export async function problemRows(page: Page): Promise<ProblemRow[]> {
  const texts = await page.locator('.markers-panel .monaco-list-row').allInnerTexts();
  const rows: ProblemRow[] = [];
  for (const raw of texts) {
    const text = raw.replace(/\s+/g, ' ').trim();
    const m = /\[Ln (\d+), Col (\d+)\]/.exec(text);
    if (m) rows.push({ text, line: Number(m[1]), column: Number(m[2]) });
  }
  return rows;
}

/** On a failed test: a screenshot of the page and the tails of the server log and the page console. */
export async function reportFailure(ctx: Mocha.Context, page: Page | undefined, server: CodeServer | undefined, consoleLines: string[]): Promise<void> {
  const test = ctx.currentTest;
  if (test?.state !== 'failed') return;
  if (page) await screenshot(page, `failed-${test.title.replace(/\W+/g, '-').slice(0, 40)}`).catch(() => undefined);
  console.log(`      server log tail:\n${server?.log().slice(-2000) ?? '(no server)'}\n      page console tail:\n${consoleLines.slice(-30).join('\n')}`);
}

let shotCount = 0;
let resultsReset = false;
/**
 * Empties test-results/e2e/ so that the screenshots there are this run's only. Once per process:
 * every suite file calls it, and the later ones must not wipe the earlier ones' screenshots.
 */
export function resetResults(): void {
  if (resultsReset) return;
  resultsReset = true;
  rmSync(resultsDir, { recursive: true, force: true });
  mkdirSync(resultsDir, { recursive: true });
  shotCount = 0;
}

/** A screenshot of the step into test-results/e2e/, numbered in the order taken (this run's across all suite files). */
export async function screenshot(page: Page, name: string): Promise<string> {
  resetResults();
  shotCount += 1;
  const path = join(resultsDir, `${String(shotCount).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path });
  return path;
}

/**
 * A throwaway workspace folder holding copies of `files` (never the repository's own files,
 * which the tests must not modify); removed by the caller.
 */
export function copyWorkspace(name: string, files: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), `gpu-workbench-e2e-ws-${name}-`));
  for (const f of files) copyFileSync(f, join(dir, basename(f)));
  return dir;
}

/** A fresh temporary folder for this run (vsix, logs); removed by the caller. */
export function runDir(): string {
  return mkdtempSync(join(tmpdir(), 'gpu-workbench-e2e-run-'));
}

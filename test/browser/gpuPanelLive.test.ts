/**
 * The page fed by the real GPU engine: `GpuMonitor` spawning the fake `nvidia-smi` (first on
 * PATH), its snapshots relayed to the page as the panel provider relays them (init after
 * `panel/ready`, then one `gpu/snapshot` per sample, Retry -> `monitor.refresh()`).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import type { Browser } from 'playwright-core';
import { GpuMonitor } from '../../src/gpu/monitor';
import { fixtures } from '../paths';
import { launchChromium, openPanel, type PanelPage, type PanelServer, startPanelServer } from './harness';
import { dark } from './themes';

describe('GPU panel webview fed by GpuMonitor and the fake nvidia-smi', function () {
  this.timeout(60_000);
  let browser: Browser;
  let server: PanelServer;
  let emptySysfs: string;
  const cleanup: (() => Promise<void> | void)[] = [];

  before(async () => {
    server = await startPanelServer();
    browser = await launchChromium();
    // No AMD fallback from this machine's /sys: the test sees only what the fake tool says.
    emptySysfs = mkdtempSync(join(tmpdir(), 'gpu-panel-sysfs-'));
  });

  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  });

  after(async () => {
    await browser?.close();
    await server?.close();
    rmSync(emptySysfs, { recursive: true, force: true });
  });

  /** Opens the page and connects a monitor to it the way GpuPanelProvider does. */
  async function connect(scenario: string): Promise<{ panel: PanelPage; monitor: GpuMonitor; refreshes: () => number }> {
    const monitor = new GpuMonitor({
      intervalMs: 200,
      processIntervalMs: 400,
      env: { ...process.env, PATH: `${join(fixtures, 'bin')}${delimiter}${process.env.PATH ?? ''}`, FAKE_NVIDIA_SMI_SCENARIO: scenario },
      sysfsRoot: emptySysfs,
      inventoryLoader: () => Promise.resolve({ controllers: [] }),
    });
    cleanup.push(() => monitor.dispose());
    const panel = await openPanel(browser, server, dark);
    cleanup.push(async () => {
      const csp = await panel.cspViolations();
      const errors = [...panel.errors];
      await panel.close();
      assert.deepEqual(csp, [], 'Content Security Policy violations');
      assert.deepEqual(errors, [], 'uncaught errors in the page');
    });
    await panel.waitForPosted('panel/ready');
    await panel.send({ type: 'gpu/init', snapshot: monitor.latest(), history: monitor.history(), inventory: [], hints: monitor.hints(), historyMinutes: 10 });
    const sub = monitor.onSnapshot((snapshot, hints) => {
      panel.send({ type: 'gpu/snapshot', snapshot, hints }).catch(() => undefined);
    });
    cleanup.push(() => sub.dispose());
    let refreshes = 0;
    // Retry in the page -> the host restarts the tool, as GpuPanelProvider does.
    panel.onPosted((m) => {
      if (m.type === 'panel/refresh') {
        refreshes++;
        monitor.refresh();
      }
    });
    const lease = monitor.acquire('panel');
    cleanup.push(() => lease.dispose());
    return { panel, monitor, refreshes: () => refreshes };
  }

  it('shows the two fake RTX 3090s live, with their process, and the chart grows', async () => {
    const { panel } = await connect('two-gpus');
    const gpu0 = panel.page.locator('vscode-collapsible.device').nth(0);
    const gpu1 = panel.page.locator('vscode-collapsible.device').nth(1);
    await gpu1.waitFor({ timeout: 15_000 });
    assert.equal(await panel.page.locator('vscode-collapsible.device').count(), 2);
    assert.equal(await gpu0.locator('h3.title .description').textContent(), 'NVIDIA GeForce RTX 3090');
    assert.match((await gpu0.locator('.memory-numbers').textContent()) ?? '', /^\d+\.\d \/ 24\.0 GiB$/);
    assert.match((await gpu1.locator('.memory-numbers').textContent()) ?? '', /^\d+\.\d \/ 24\.0 GiB$/);
    assert.match((await gpu0.locator('.stat', { hasText: 'Power' }).locator('dd').textContent()) ?? '', /^\d+ \/ 350 W$/);
    // The compute process arrives from the second query (--query-compute-apps), joined on UUID.
    const row = gpu0.locator('tr.process').first();
    await row.waitFor({ timeout: 15_000 });
    const [pid, name, mem] = await row.locator('td').allTextContents();
    assert.match(pid, /^\d+$/);
    assert.equal(name, 'python');
    assert.match(mem, /^\d+ MiB$/);
    // Memory changes over time in this scenario: the text follows and the chart gains samples.
    const first = Number(await gpu0.locator('.chart').getAttribute('data-samples'));
    await panel.page.locator(`vscode-collapsible.device >> nth=0 >> .chart:not([data-samples="${first}"])`).waitFor({ timeout: 10_000 });
    assert.ok(Number(await gpu0.locator('.chart').getAttribute('data-samples')) > first);
  });

  it('shows nvidia-smi\'s own driver error, and Retry restarts the tool', async () => {
    const { panel, refreshes } = await connect('no-driver');
    await panel.page.getByRole('heading', { name: 'Could not read the GPUs' }).waitFor({ timeout: 15_000 });
    assert.match((await panel.page.locator('.tool-error').textContent()) ?? '', /NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver/);
    await panel.page.locator('vscode-button.retry').click();
    await panel.waitForPosted('panel/refresh');
    // The restarted tool fails the same way, and the page says so again instead of waiting forever.
    await panel.page.getByRole('heading', { name: 'Could not read the GPUs' }).waitFor({ timeout: 15_000 });
    assert.ok(refreshes() >= 1, 'the monitor was asked to restart');
  });
});

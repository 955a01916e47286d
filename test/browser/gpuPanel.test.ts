import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Locator } from 'playwright-core';
import type { HostToPanelMessage } from '../../src/common/protocol';
import type { GpuSnapshot } from '../../src/gpu/types';
import { repoRoot } from '../paths';
import { canvasPixelsOfColor, eventually, openPanel, pageSuite, startPanelServer, type PanelPage } from './harness';
import { badNvidiaSmiPath, growthHint, history, noDriver, noGpuTool, processes, rtx3090, t0, twoGpus } from './samples';
import { dark, highContrast, light, type Theme } from './themes';

const results = join(repoRoot, 'test-results');

function init(snapshot: GpuSnapshot | null = twoGpus(), extra: Partial<Extract<HostToPanelMessage, { type: 'gpu/init' }>> = {}): HostToPanelMessage {
  return { type: 'gpu/init', snapshot, history: history(), inventory: [], hints: [], historyMinutes: 10, ...extra };
}

/** Writes a screenshot artefact; with UPDATE_SCREENSHOTS=1 also refreshes the README's copy. */
async function screenshot(panel: PanelPage, name: string, docsName?: string): Promise<void> {
  mkdirSync(results, { recursive: true });
  const file = join(results, `${name}.png`);
  await panel.page.screenshot({ path: file, fullPage: true });
  if (docsName && process.env.UPDATE_SCREENSHOTS === '1') {
    mkdirSync(join(repoRoot, 'docs', 'images'), { recursive: true });
    copyFileSync(file, join(repoRoot, 'docs', 'images', `${docsName}.png`));
  }
}

function card(panel: PanelPage, index: number): Locator {
  return panel.page.locator(`vscode-collapsible.device[data-key="${rtx3090(index, 0).uuid}"]`);
}

function stat(c: Locator, label: string): Locator {
  return c.locator('.stat', { hasText: label }).locator('dd');
}

/** How many canvas pixels of a card's chart are (close to) the given #rrggbb: proof the chart drew in the theme's colour. */
async function pixelsOfColor(panel: PanelPage, index: number, hex: string): Promise<number> {
  return canvasPixelsOfColor(panel.page, `vscode-collapsible.device[data-key="${rtx3090(index, 0).uuid}"] canvas`, hex);
}

describe('GPU panel webview (headless Chromium)', function () {
  this.timeout(60_000);
  const suite = pageSuite(startPanelServer);

  async function panel(theme: Theme = dark, opts: { firstSampleTimeoutMs?: number } = {}): Promise<PanelPage> {
    return suite.track(await openPanel(suite.browser, suite.server, theme, opts));
  }

  it('posts panel/ready on load and says it is waiting for the first sample', async () => {
    const p = await panel();
    await p.waitForPosted('panel/ready');
    assert.deepEqual(await p.posted(), [{ type: 'panel/ready' }]);
    await p.page.getByText('Waiting for the first sample').waitFor();
  });

  it('shows both GPUs with their memory, utilisation, temperature, power and processes', async () => {
    const p = await panel();
    await p.waitForPosted('panel/ready');
    await p.send(init());
    const gpu0 = card(p, 0);
    const gpu1 = card(p, 1);
    await gpu0.waitFor();
    assert.equal(await p.page.locator('vscode-collapsible.device').count(), 2);
    // The card's header (inside the collapsible's shadow root): index and name.
    assert.equal(await gpu0.locator('h3.title').textContent(), 'GPU 0NVIDIA GeForce RTX 3090');
    assert.equal(await gpu0.locator('h3.title .description').textContent(), 'NVIDIA GeForce RTX 3090');
    assert.equal(await gpu1.locator('h3.title').textContent(), 'GPU 1NVIDIA GeForce RTX 3090');
    assert.equal(await gpu0.locator('.memory-numbers').textContent(), '7.1 / 24.0 GiB');
    assert.equal(await gpu1.locator('.memory-numbers').textContent(), '3.0 / 24.0 GiB');
    assert.match((await gpu0.locator('.memory-numbers').getAttribute('title')) ?? '', /7270 MiB used · 310 MiB reserved by the driver · 24576 MiB total/);
    assert.equal(await gpu0.locator('.memory-reserved').textContent(), 'Reserved by the driver: 0.3 GiB');
    assert.equal(await stat(gpu0, 'Utilisation').textContent(), '87 %');
    assert.equal(await stat(gpu0, 'Temperature').textContent(), '71 °C');
    assert.equal(await stat(gpu0, 'Power').textContent(), '287 / 350 W');
    assert.equal(await stat(gpu1, 'Power').textContent(), '98 / 350 W');

    // The bar is as full as the memory: 7270 of 24576 MiB.
    const bar = await gpu0.locator('.bar').boundingBox();
    const used = await gpu0.locator('.bar-used').boundingBox();
    assert.ok(bar && used, 'bar rendered');
    assert.ok(Math.abs(used.width / bar.width - 7270 / 24576) < 0.01, `used share ${used.width / bar.width}`);
    const used1 = await gpu1.locator('.bar-used').boundingBox();
    assert.ok(used1 && Math.abs(used1.width / bar.width - 3072 / 24576) < 0.01, `GPU 1 used share ${used1 && used1.width / bar.width}`);

    // Process rows: PID, name (file name of the path), MiB; biggest first, each on its own GPU.
    const rows0 = gpu0.locator('tr.process');
    assert.equal(await rows0.count(), 2);
    assert.deepEqual(await rows0.nth(0).locator('td').allTextContents(), ['4242', 'python3', '6912 MiB']);
    assert.deepEqual(await rows0.nth(1).locator('td').allTextContents(), ['4250', 'python', '210 MiB']);
    assert.deepEqual(await gpu1.locator('tr.process td').allTextContents(), ['5100', 'torchrun', '2800 MiB']);
    assert.equal(await rows0.nth(0).locator('td.name').getAttribute('title'), '/usr/bin/python3');

    // The chart exists and holds the history.
    await gpu0.locator('canvas').first().waitFor();
    assert.equal(await gpu0.locator('.chart').getAttribute('data-samples'), '30');
  });

  it('shows a value the tool did not report as "—", never 0', async () => {
    const p = await panel();
    await p.waitForPosted('panel/ready');
    const unknown = rtx3090(0, null, { memoryReservedMiB: null, utilizationPercent: null, temperatureC: null, powerW: null, powerLimitW: null });
    await p.send(init({ source: 'nvidia-smi', devices: [unknown], processes: [{ gpuIndex: 0, pid: 77, name: 'python', memoryMiB: null }], takenAt: t0 }, { history: [] }));
    const gpu0 = card(p, 0);
    await gpu0.waitFor();
    assert.equal(await gpu0.locator('.memory-numbers').textContent(), '— / 24.0 GiB');
    assert.equal(await gpu0.locator('.memory-reserved').textContent(), 'Reserved by the driver: —');
    assert.equal(await stat(gpu0, 'Utilisation').textContent(), '—');
    assert.equal(await stat(gpu0, 'Temperature').textContent(), '—');
    assert.equal(await stat(gpu0, 'Power').textContent(), '—');
    assert.deepEqual(await gpu0.locator('tr.process td').allTextContents(), ['77', 'python', '—']);
    const used = await gpu0.locator('.bar-used').boundingBox();
    assert.ok(!used || used.width === 0, 'no bar drawn for unknown memory');
  });

  it('updates in place on each snapshot: numbers, processes and the chart history', async () => {
    const p = await panel();
    await p.waitForPosted('panel/ready');
    await p.send(init());
    const gpu0 = card(p, 0);
    await gpu0.locator('canvas').first().waitFor();
    assert.match((await gpu0.locator('.chart-caption').textContent()) ?? '', /peak 7\.1 GiB/);
    // Tag the DOM nodes; an in-place update keeps them.
    await p.page.evaluate(`document.querySelectorAll('vscode-collapsible.device, canvas').forEach((e) => { e.dataset.tag = 'kept'; })`);

    await p.send({ type: 'gpu/snapshot', snapshot: twoGpus(t0 + 10_000, 9011, 3072, processes.filter((x) => x.pid !== 4250)), hints: [] });
    await gpu0.locator('.memory-numbers', { hasText: '8.8 / 24.0 GiB' }).waitFor({ timeout: 5000 });
    assert.equal(await gpu0.locator('.chart').getAttribute('data-samples'), '31');
    assert.match((await gpu0.locator('.chart-caption').textContent()) ?? '', /peak 8\.8 GiB/);
    assert.equal(await gpu0.locator('tr.process').count(), 1, 'the process that ended is gone');
    assert.equal(await p.page.locator('[data-tag="kept"]').count(), 4, 'cards and canvases were updated, not rebuilt');

    // A sample older than the last one is not drawn twice.
    await p.send({ type: 'gpu/snapshot', snapshot: twoGpus(t0 + 5_000), hints: [] });
    await gpu0.locator('.memory-numbers', { hasText: '7.1 / 24.0 GiB' }).waitFor({ timeout: 5000 });
    assert.equal(await gpu0.locator('.chart').getAttribute('data-samples'), '31');
  });

  it('draws the chart in the theme\'s --vscode-charts-blue, in dark, light and high-contrast themes', async () => {
    for (const theme of [dark, light, highContrast]) {
      const p = await panel(theme);
      await p.waitForPosted('panel/ready');
      await p.send(init(twoGpus(), { hints: [growthHint] }));
      const gpu0 = card(p, 0);
      await gpu0.locator('canvas').first().waitFor();
      await p.page.locator('.hint').waitFor();
      const blue = theme.vars['--vscode-charts-blue'];
      await eventually(async () => await pixelsOfColor(p, 0, blue) > 50, `${theme.name}: the memory line is drawn in ${blue}`);
      await screenshot(p, `gpu-panel-${theme.name}`, theme === highContrast ? undefined : `gpu-panel-${theme.name}`);
    }
  });

  it('shows the hints and opens their link through the host', async () => {
    const p = await panel();
    await p.waitForPosted('panel/ready');
    await p.send(init(twoGpus(), { hints: [growthHint] }));
    const hint = p.page.locator('.hint');
    await hint.getByText('accumulating tensors?', { exact: false }).waitFor();
    await hint.getByText('GPU 0').waitFor();
    await hint.getByRole('link', { name: 'Learn more' }).click();
    await p.waitForPosted('panel/openLink');
    assert.deepEqual((await p.posted()).at(-1), { type: 'panel/openLink', url: growthHint.docsUrl });
    assert.equal(p.page.url().endsWith('/panel.html'), true, 'the page did not navigate');
  });

  it('without a GPU, shows the tool\'s own error text and a Retry button that asks the host to refresh', async () => {
    const p = await panel();
    await p.waitForPosted('panel/ready');
    await p.send(init(noDriver, {
      history: [],
      inventory: [{ vendor: 'NVIDIA', model: 'GeForce RTX 3090', vramMiB: 24576, driverVersion: null, bus: 'PCIe' }],
    }));
    await p.page.getByRole('heading', { name: 'Could not read the GPUs' }).waitFor();
    await p.page.getByText('nvidia-smi reported:').waitFor();
    assert.equal(await p.page.locator('.tool-error').textContent(), noDriver.error);
    await p.page.getByText('next try in 4 s').waitFor();
    await p.page.getByText('Graphics hardware the system reports: NVIDIA GeForce RTX 3090 (24.0 GiB).').waitFor();
    assert.equal(await p.page.locator('vscode-collapsible.device').count(), 0);
    assert.equal(await p.page.locator('vscode-progress-ring').isVisible(), false, 'nothing spins');
    await screenshot(p, 'gpu-panel-no-gpu-dark');

    await p.page.locator('vscode-button.retry').click();
    await p.waitForPosted('panel/refresh');
    await p.page.getByText('Retrying…').waitFor();

    // It keeps working: the next good sample shows the devices.
    await p.send({ type: 'gpu/snapshot', snapshot: twoGpus(t0 + 1000), hints: [] });
    await card(p, 1).locator('.memory-numbers', { hasText: '3.0 / 24.0 GiB' }).waitFor();
    assert.equal(await p.page.locator('.problem').isVisible(), false);
  });

  it('on a machine with no GPU tool, shows a neutral "No GPU found" that says what still works and opens the nvidia-smi path setting', async () => {
    const p = await panel();
    await p.waitForPosted('panel/ready');
    await p.send(init(noGpuTool, { history: [] }));
    const heading = p.page.getByRole('heading', { name: 'No GPU found' });
    await heading.waitFor();
    // Not the error state: no red heading, no tool error block, no Retry.
    assert.equal(await p.page.getByRole('heading', { name: 'Could not read the GPUs' }).count(), 0);
    assert.equal(await p.page.locator('.problem').isVisible(), false);
    assert.equal(await p.page.locator('.tool-error').isVisible(), false);
    assert.equal(await p.page.locator('vscode-button.retry').isVisible(), false);
    const [headingColor, errorColor, textColor] = await p.page.evaluate<string[]>(`(() => {
      const probe = (name) => {
        const d = document.createElement('div');
        d.style.color = 'var(' + name + ')';
        document.body.append(d);
        const c = getComputedStyle(d).color;
        d.remove();
        return c;
      };
      return [getComputedStyle(document.querySelector('.no-gpu h2')).color, probe('--vscode-errorForeground'), probe('--vscode-foreground')];
    })()`);
    assert.notEqual(headingColor, errorColor, 'the heading is not in the error colour');
    assert.equal(headingColor, textColor);
    // What still works here, and where it looked.
    await p.page.getByText('the PyTorch OOM hints in the editor, hyperparameter tuning').waitFor();
    await p.page.getByText('training on the CPU').waitFor();
    await p.page.getByText(`Looked for: ${noGpuTool.error}.`).waitFor();
    await screenshot(p, 'gpu-panel-no-gpu-tool-dark');
    // The nvidia-smi path: a link that asks the host to open that setting.
    await p.page.getByRole('link', { name: 'set the path of nvidia-smi' }).click();
    await p.waitForPosted('panel/openSetting');
    assert.deepEqual((await p.posted()).at(-1), { type: 'panel/openSetting', id: 'gpuWorkbench.gpuMonitor.nvidiaSmiPath' });
    assert.equal(p.page.url().endsWith('/panel.html'), true, 'the page did not navigate');
    // "Check again" asks the host to look again.
    await p.page.locator('vscode-button.check-again').click();
    await p.waitForPosted('panel/refresh');
    await p.page.getByText('Looking again…').waitFor();
  });

  it('a wrong nvidia-smi path the user set is an error naming that path, with the setting link and Retry, not "No GPU found"', async () => {
    const p = await panel();
    await p.waitForPosted('panel/ready');
    await p.send(init(badNvidiaSmiPath, { history: [] }));
    await p.page.getByRole('heading', { name: 'nvidia-smi not found' }).waitFor();
    assert.equal(await p.page.locator('.tool-error').textContent(), 'nvidia-smi not found at /opt/typo/nvidia-smi: fix gpuWorkbench.gpuMonitor.nvidiaSmiPath / --nvidia-smi');
    assert.equal(await p.page.locator('.no-gpu').isVisible(), false, 'not the calm no-GPU state');
    assert.equal(await p.page.getByText('That is fine on a machine without a GPU').isVisible(), false);
    await p.page.getByRole('link', { name: 'fix the path of nvidia-smi' }).click();
    await p.waitForPosted('panel/openSetting');
    assert.deepEqual((await p.posted()).at(-1), { type: 'panel/openSetting', id: 'gpuWorkbench.gpuMonitor.nvidiaSmiPath' });
    await p.page.locator('vscode-button.retry').click();
    await p.waitForPosted('panel/refresh');
    // A tool that fails for another reason shows no setting link.
    await p.send({ type: 'gpu/snapshot', snapshot: noDriver, hints: [] });
    await p.page.getByRole('heading', { name: 'Could not read the GPUs' }).waitFor();
    assert.equal(await p.page.locator('.fix-setting').isVisible(), false);
  });

  it('keeps a tool that exists but fails an error, even with no source left ("none" with an error)', async () => {
    const p = await panel();
    await p.waitForPosted('panel/ready');
    const broken: GpuSnapshot = { source: 'none', devices: [], processes: [], takenAt: t0, error: 'nvidia-smi not found on PATH; no AMD GPU in /sys/class/drm; amd-smi metric failed (exit 1): ERROR:root:Unable to detect any GPU devices' };
    await p.send({ type: 'gpu/snapshot', snapshot: broken, hints: [] });
    await p.page.getByRole('heading', { name: 'Could not read the GPUs' }).waitFor();
    assert.equal(await p.page.locator('.tool-error').textContent(), broken.error);
    assert.equal(await p.page.locator('vscode-button.retry').isVisible(), true);
    assert.equal(await p.page.locator('.no-gpu').isVisible(), false);
  });

  it('turns "waiting" into an error when no sample arrives, and Retry asks again', async () => {
    const p = await panel(dark, { firstSampleTimeoutMs: 400 });
    await p.waitForPosted('panel/ready');
    await p.send(init(null, { history: [] }));
    await p.page.getByRole('heading', { name: 'No reading arrived' }).waitFor({ timeout: 10_000 });
    await p.page.getByText('sent no sample within').waitFor();
    assert.equal(await p.page.locator('vscode-progress-ring').isVisible(), false, 'nothing spins');
    await p.page.locator('vscode-button.retry').click();
    await p.waitForPosted('panel/refresh');
    await p.page.getByRole('heading', { name: 'No reading arrived' }).waitFor({ timeout: 10_000 });
  });

  it('marks old numbers with a stale badge, and clears it when samples flow again', async () => {
    const p = await panel();
    await p.waitForPosted('panel/ready');
    await p.send(init());
    await card(p, 0).waitFor();
    const badge = p.page.locator('vscode-badge.stale-badge');
    assert.equal(await badge.isVisible(), false);
    await p.send({ type: 'gpu/snapshot', snapshot: { ...twoGpus(t0 + 3000), stale: true }, hints: [] });
    await badge.waitFor({ state: 'visible' });
    assert.equal(await badge.textContent(), 'stale');
    await p.page.getByText('last sample 14:30:03').waitFor();
    await screenshot(p, 'gpu-panel-stale-dark');
    await p.send({ type: 'gpu/snapshot', snapshot: twoGpus(t0 + 4000), hints: [] });
    await badge.waitFor({ state: 'hidden' });
  });

  it('remembers collapsed cards across a reload of the page (getState/setState)', async () => {
    const p = await panel();
    await p.waitForPosted('panel/ready');
    await p.send(init());
    const rows1 = card(p, 1).locator('tr.process');
    await rows1.first().waitFor();
    // Collapse GPU 1 by clicking its header, as a user does.
    await card(p, 1).locator('.collapsible-header').click();
    await rows1.first().waitFor({ state: 'hidden' });

    await p.reload();
    await p.waitForPosted('panel/ready', 2);
    await p.send(init());
    await card(p, 0).locator('tr.process').first().waitFor({ state: 'visible' });
    assert.equal(await card(p, 1).getAttribute('open'), null, 'GPU 1 stays collapsed');
    assert.equal(await rows1.first().isVisible(), false);
    // Its summary stays visible in the header.
    assert.equal(await card(p, 1).locator('.summary').textContent(), '3.0 / 24.0 GiB');
  });
});

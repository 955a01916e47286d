/**
 * The charts keep to the panel's width (webview-ui/chartFit.ts): as wide as their box when the
 * sidebar is resized, and drawn when a collapsed card opens (it had no width to draw at).
 */
import assert from 'node:assert/strict';
import type { Locator } from 'playwright-core';
import type { HostToPanelMessage } from '../../src/common/protocol';
import { eventually, openPanel, pageSuite, startPanelServer, type PanelPage } from './harness';
import { history, rtx3090, twoGpus } from './samples';
import { dark } from './themes';

const init: HostToPanelMessage = { type: 'gpu/init', snapshot: twoGpus(), history: history(), inventory: [], hints: [], historyMinutes: 10 };
const steps = Array.from({ length: 40 }, (_, i) => i + 1);
const job: HostToPanelMessage = {
  type: 'gpu/job',
  job: { name: 'mnist', strategy: 'single', state: 'running', status: 'step 40', workers: [{ rank: 0, gpuIndex: 0, device: 'gpu:0' }], lossSteps: steps, loss: steps.map((s) => 1 / s) },
};

function card(p: PanelPage, index: number): Locator {
  return p.page.locator(`vscode-collapsible.device[data-key="${rtx3090(index, 0).uuid}"]`);
}

/** The plot's width and its box's, in CSS pixels (the plot is null while not drawn). */
async function widths(box: Locator): Promise<{ plot: number | null; box: number }> {
  const b = await box.boundingBox();
  const plot = box.locator('.uplot');
  return { plot: (await plot.count()) ? (await plot.boundingBox())?.width ?? null : null, box: b?.width ?? 0 };
}

/** Whether the plot spans its box (uPlot sizes to whole pixels). */
async function fits(box: Locator): Promise<boolean> {
  const w = await widths(box);
  return w.plot !== null && w.box > 0 && Math.abs(w.plot - w.box) <= 1;
}

describe('GPU panel: charts fit the panel (headless Chromium)', function () {
  this.timeout(60_000);
  const suite = pageSuite(startPanelServer);

  it('resizes the memory and loss charts with the panel', async () => {
    const p = suite.track(await openPanel(suite.browser, suite.server, dark, { width: 380 }));
    await p.waitForPosted('panel/ready');
    await p.send(init);
    await p.send(job);
    const boxes = [card(p, 0).locator('.chart-box'), card(p, 1).locator('.chart-box'), p.page.locator('section.job .job-chart')];
    for (const box of boxes) await eventually(() => fits(box), 'each chart spans its box at 380 px');
    const narrow = await widths(boxes[0]);
    await p.page.setViewportSize({ width: 700, height: 900 });
    for (const box of boxes) await eventually(() => fits(box), 'each chart spans its box after the panel widens to 700 px');
    const wide = await widths(boxes[0]);
    assert.ok((wide.plot ?? 0) > (narrow.plot ?? 0) + 200, `the chart grew: ${narrow.plot} -> ${wide.plot}`);
    await p.page.setViewportSize({ width: 300, height: 900 });
    for (const box of boxes) await eventually(() => fits(box), 'each chart shrinks with the panel to 300 px');
  });

  it('draws the chart of a card that was collapsed when the data came, once it opens', async () => {
    const p = suite.track(await openPanel(suite.browser, suite.server, dark));
    await p.waitForPosted('panel/ready');
    await p.send(init);
    await card(p, 1).locator('tr.process').first().waitFor();
    await card(p, 1).locator('.collapsible-header').click();
    // A reload restores the collapsed card before any data: its chart has no width to be drawn at.
    await p.reload();
    await p.waitForPosted('panel/ready', 2);
    await p.send(init);
    await eventually(() => fits(card(p, 0).locator('.chart-box')), 'the open card draws its chart');
    assert.equal(await card(p, 1).getAttribute('open'), null);
    assert.equal((await widths(card(p, 1).locator('.chart-box'))).plot, null, 'no chart drawn in a collapsed card');
    await card(p, 1).locator('.collapsible-header').click();
    await eventually(() => fits(card(p, 1).locator('.chart-box')), 'the chart is drawn at the card\'s width when it opens');
  });
});

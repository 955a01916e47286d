/**
 * The Curves page (the Runs view's Open Curves / Compare Run Curves…) in headless Chromium: the
 * page from `renderCurvesHtml` with its real CSP and the built `dist/curves.js`, a fake
 * `acquireVsCodeApi`, and `curves/data` messages as the host sends them (from curvesView, the
 * host's own code, over run records).
 */
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import type { CurvesToHostMessage, HostToCurvesMessage } from '../../src/common/curvesProtocol';
import type { RunCurve } from '../../src/training/job/runCurves';
import type { RunRecord } from '../../src/training/job/runRecord';
import { makeNonce } from '../../src/views/common/webviewHtml';
import { renderCurvesHtml } from '../../src/views/runs/curvesHtml';
import { curvesView } from '../../src/views/runs/curvesModel';
import { repoRoot } from '../paths';
import { canvasPixelsOfColor, eventually, pageSuite } from './harness';
import { hoverScan } from './lineScan';
import { dark, highContrast, light, type Theme } from './themes';
import { openWebviewPage, startPageServer, type PageServer, type WebviewPage } from './webviewPage';

const resultsDir = join(repoRoot, 'test-results');

// --- runs as their records hold them -------------------------------------------------------------

/** A constant line (so a tooltip's value is known wherever it is hovered), x = 0, 10, …, 100. */
const flat = (y: number, axis: RunCurve['axis'] = 'step'): RunCurve => ({ axis, points: Array.from({ length: 11 }, (_, i) => [i * 10, y] as [number, number]), seen: 11 });

const record = (id: string, name: string, startedAt: string, curves: RunRecord['curves'], change: Partial<RunRecord> = {}): RunRecord => ({
  version: 1, id, kind: 'training', name, file: `/w/${name}.job.json`, status: 'done', startedAt, pid: 1, host: 'h', metrics: {}, ...(curves ? { curves } : {}), ...change,
});

const runA = record('run-a', 'mnist', '2026-11-26T08:00:00.000Z', { loss: flat(1), testAccuracy: { axis: 'epoch', points: [[1, 0.8], [2, 0.85], [3, 0.9]], seen: 3 } });
const runB = record('run-b', 'mnist', '2026-11-26T09:30:00.000Z', { loss: flat(2), testAccuracy: { axis: 'epoch', points: [[1, 0.6], [2, 0.7], [3, 0.75]], seen: 3 } });
const runC = record('run-c', 'resnet', '2026-11-26T10:00:00.000Z', { loss: flat(3), bleu: flat(20, 'report') }, { kind: 'torchrun', status: 'running' });
const utc = (iso: string): string => iso.slice(11, 19);

function data(records: readonly RunRecord[], running = true): HostToCurvesMessage {
  const v = curvesView(records, () => running, utc);
  return { type: 'curves/data', runs: v.runs, metrics: v.metrics, live: v.live };
}

// --- the page harness ------------------------------------------------------------------------------

const startServer = (): Promise<PageServer> => startPageServer('curves', (origin) => renderCurvesHtml({ cspSource: origin, nonce: makeNonce(), scriptUri: `${origin}/dist/curves.js`, styleUris: [`${origin}/dist/uPlot.min.css`], what: '3 runs', runIds: ['run-a', 'run-b', 'run-c'] }));

type CurvesPage = WebviewPage<CurvesToHostMessage, HostToCurvesMessage>;

const openCurves = (browser: Browser, server: PageServer, theme: Theme): Promise<CurvesPage> => openWebviewPage(browser, server, 'curves', theme);

// --- the tests -------------------------------------------------------------------------------------

describe('Curves page webview (headless Chromium)', function () {
  this.timeout(60_000);
  const suite = pageSuite(startServer);

  async function curves(theme: Theme = dark): Promise<CurvesPage> {
    const p = suite.track(await openCurves(suite.browser, suite.server, theme));
    await p.waitForPosted('curves/ready');
    return p;
  }

  const lossChart = '.metric-chart[data-metric="loss"]';
  const highlights = (p: CurvesPage): Promise<string[]> => p.page.locator('.metric-chart').evaluateAll((cs) => cs.map((c) => (c as unknown as { dataset: { highlight?: string } }).dataset.highlight ?? ''));

  it('says curves/ready first, then shows a legend entry per run and a chart per metric, each run a line', async () => {
    const p = await curves();
    assert.deepEqual(p.posted, [{ type: 'curves/ready' }]);
    await p.send(data([runA, runB, runC]));
    await p.page.locator(`${lossChart} canvas`).waitFor();
    assert.deepEqual(await p.page.locator('.legend-entry .run-label').allTextContents(), ['mnist · 08:00:00', 'mnist · 09:30:00', 'resnet']);
    assert.deepEqual(await p.page.locator('.legend-entry .run-status').allTextContents(), ['done', 'done', 'running']);
    assert.deepEqual(await p.page.locator('.legend-entry .swatch').evaluateAll((s) => s.map((e) => (e as unknown as { className: string }).className)), ['swatch colour-0', 'swatch colour-1', 'swatch colour-2']);
    assert.deepEqual(await p.page.locator('figcaption').allTextContents(), ['Training loss by step', 'Test accuracy by epoch', 'bleu by report']);
    assert.deepEqual(await p.page.locator('.metric-chart').evaluateAll((cs) => cs.map((c) => (c as unknown as { dataset: { runs: string } }).dataset.runs)), ['3', '2', '1']);
    assert.equal(await p.page.locator('header.summary h1').textContent(), 'Curves: 3 runs');
    assert.match(await p.page.locator('header.summary .state').textContent() ?? '', /^Following the running run/);
    assert.equal(await p.page.locator(lossChart).getAttribute('aria-label'), 'Training loss by step: mnist · 08:00:00, mnist · 09:30:00, resnet');
    // The legend's log link asks the host for the run's log.
    await p.page.locator('.legend-item', { hasText: 'resnet' }).locator('a.log-link').click();
    await p.waitForPosted('curves/openLog');
    assert.deepEqual(p.posted.at(-1), { type: 'curves/openLog', runId: 'run-c' });
  });

  it('shows a tooltip naming the run, the step and the value of the line under the pointer', async () => {
    const p = await curves();
    await p.send(data([runA, runB, runC]));
    await p.page.locator(`${lossChart} canvas`).waitFor();
    const seen = await hoverScan(p.page, lossChart);
    assert.deepEqual([...new Set(seen.map((s) => s.text))].sort(), [
      'mnist · 08:00:00 · step 50: loss 1',
      'mnist · 09:30:00 · step 50: loss 2',
      'resnet · step 50: loss 3',
    ]);
    // Higher values higher up: resnet's line (3) above mnist's (1).
    const y = (text: string): number => seen.find((s) => s.text === text)!.y;
    assert.ok(y('resnet · step 50: loss 3') < y('mnist · 08:00:00 · step 50: loss 1'));
    // An accuracy reads as a percentage.
    const acc = await hoverScan(p.page, '.metric-chart[data-metric="testAccuracy"]');
    assert.ok(acc.some((s) => s.text === 'mnist · 08:00:00 · epoch 2: testAccuracy 85.00%'), JSON.stringify(acc));
    await p.page.mouse.move(5, 5);
    await p.page.locator(`${lossChart} .chart-tooltip`).waitFor({ state: 'hidden' });
  });

  it('a click on a line highlights its run in every chart and the legend, the others dimmed; a second click clears it', async () => {
    const p = await curves();
    await p.send(data([runA, runB, runC]));
    await p.page.locator(`${lossChart} canvas`).waitFor();
    const blue = dark.vars['--vscode-charts-blue'];
    const orange = dark.vars['--vscode-charts-orange'];
    const canvas = `${lossChart} canvas`;
    await eventually(async () => await canvasPixelsOfColor(p.page, canvas, blue) > 100 && await canvasPixelsOfColor(p.page, canvas, orange) > 100, 'run a (blue) and run b (orange) drawn');
    const seen = await hoverScan(p.page, lossChart);
    const onB = seen.find((s) => s.text.startsWith('mnist · 09:30:00'))!;
    await p.page.mouse.click(onB.x, onB.y);
    await eventually(async () => (await highlights(p)).every((h) => h === 'run-b'), 'run b highlighted in every chart');
    assert.equal(await p.page.locator('.legend-entry[data-run-id="run-b"]').getAttribute('aria-pressed'), 'true');
    assert.deepEqual(await p.page.locator('.legend-entry.dimmed').evaluateAll((es) => es.map((e) => (e as unknown as { dataset: { runId: string } }).dataset.runId)), ['run-a', 'run-c']);
    // Dimmed: run a's blue is no longer drawn opaque anywhere; run b's orange is.
    await eventually(async () => await canvasPixelsOfColor(p.page, canvas, blue) === 0, 'run a dimmed');
    assert.ok(await canvasPixelsOfColor(p.page, canvas, orange) > 100, 'run b drawn as before');
    await p.page.mouse.click(onB.x, onB.y);
    await eventually(async () => (await highlights(p)).every((h) => h === ''), 'the highlight cleared');
    await eventually(async () => await canvasPixelsOfColor(p.page, canvas, blue) > 100, 'run a drawn again');
    assert.equal(await p.page.locator('.legend-entry.dimmed').count(), 0);
  });

  it('keeps an accuracy\'s y axis within 0..100 %, also for a run of one point, whether it is recorded as a fraction or in percent', async () => {
    const p = await curves();
    // One epoch: a single point, which uPlot pads above and below.
    const fraction = record('run-a', 'mnist', '2026-11-26T08:00:00.000Z', { testAccuracy: { axis: 'epoch', points: [[1, 0.95]], seen: 1 } });
    // A script's `acc` in percent (beyond 0..1, so no fraction): its bound is 100.
    const percent = record('run-b', 'resnet', '2026-11-26T09:00:00.000Z', { acc: { axis: 'report', points: [[1, 97.5]], seen: 1 }, loss: flat(3, 'report') }, { kind: 'torchrun' });
    await p.send(data([fraction, percent], false));
    const yRange = async (metric: string): Promise<number[]> => {
      const box = p.page.locator(`.metric-chart[data-metric="${metric}"]`);
      await box.locator('canvas').waitFor();
      return (await box.getAttribute('data-y-range') ?? '').split(',').map(Number);
    };
    const [lo, hi] = await yRange('testAccuracy');
    assert.ok(lo >= 0 && lo < 0.95 && hi > 0.95 && hi <= 1, `testAccuracy's y axis from ${lo} to ${hi}: not within 0..100 % around 95 %`);
    const [plo, phi] = await yRange('acc');
    assert.ok(plo >= 0 && plo < 97.5 && phi > 97.5 && phi <= 100, `acc's y axis from ${plo} to ${phi}: not within 0..100 around 97.5`);
    // The point is drawn inside the axis: its tooltip is found.
    const seen = await hoverScan(p.page, '.metric-chart[data-metric="testAccuracy"]');
    assert.ok(seen.some((s) => s.text === 'mnist · epoch 1: testAccuracy 95.00%'), JSON.stringify(seen));
    // A loss has no such bound.
    const [, lossHi] = await yRange('loss');
    assert.ok(lossHi > 3, `loss's y axis up to ${lossHi}`);
  });

  it('the legend works from the keyboard: Tab to an entry, Enter or Space highlights its run, again clears it, Escape too; the pick survives a reload', async () => {
    const p = await curves();
    await p.send(data([runA, runB, runC]));
    await p.page.locator(`${lossChart} canvas`).waitFor();
    await p.page.keyboard.press('Tab');
    assert.equal(await p.page.evaluate<string>('document.activeElement.dataset.runId'), 'run-a');
    await p.page.keyboard.press('Enter');
    await eventually(async () => (await highlights(p)).every((h) => h === 'run-a'), 'run a highlighted');
    assert.equal(await p.page.evaluate<string>('document.activeElement.dataset.runId'), 'run-a', 'the focus stays on the entry');
    await p.page.keyboard.press('Space');
    await eventually(async () => (await highlights(p)).every((h) => h === ''), 'Space again cleared it');
    // Tab past the entry's log link to the next run.
    await p.page.keyboard.press('Tab');
    await p.page.keyboard.press('Tab');
    assert.equal(await p.page.evaluate<string>('document.activeElement.dataset.runId'), 'run-b');
    await p.page.keyboard.press('Space');
    await eventually(async () => (await highlights(p)).every((h) => h === 'run-b'), 'run b highlighted');
    await p.page.reload();
    await p.waitForPosted('curves/ready', 2);
    await p.send(data([runA, runB, runC]));
    await p.page.locator(`${lossChart} canvas`).waitFor();
    await eventually(async () => (await highlights(p)).every((h) => h === 'run-b'), 'run b still highlighted after a reload');
    await p.page.keyboard.press('Escape');
    await eventually(async () => (await highlights(p)).every((h) => h === ''), 'Escape cleared it');
    assert.deepEqual(JSON.parse(await p.page.evaluate<string>("sessionStorage.getItem('curves-state')")), { highlighted: null, runIds: ['run-a', 'run-b', 'run-c'] });
  });

  it('follows a running run: new points move its line on the same plot, a new metric adds a chart, the end says so', async () => {
    const p = await curves();
    await p.send(data([runA, runC]));
    await p.page.locator(`${lossChart} canvas`).waitFor();
    await p.page.evaluate(`document.querySelector('.metric-chart[data-metric="loss"] canvas').dataset.tag = 'kept'`);
    const grown: RunRecord = { ...runC, curves: { ...runC.curves, loss: { axis: 'step', points: [...flat(3).points, [110, 3], [120, 3]], seen: 13 }, val_loss: flat(4, 'step') } };
    await p.send(data([runA, grown]));
    await p.page.locator('.metric-chart[data-metric="val_loss"]').waitFor();
    assert.equal(await p.page.locator(`${lossChart} canvas[data-tag="kept"]`).count(), 1, 'the loss chart kept its plot');
    const seen = await hoverScan(p.page, lossChart, 0.99);
    assert.ok(seen.some((s) => s.text === 'resnet · step 120: loss 3'), JSON.stringify(seen));
    await p.send(data([runA, { ...grown, status: 'done' }], false));
    await p.page.locator('header.summary .state', { hasText: 'From the runs\' records.' }).waitFor();
  });

  it('says which runs have nothing to draw, and that there is nothing when none has', async () => {
    const p = await curves();
    const old = record('run-old', 'legacy', '2026-11-20T08:00:00.000Z', undefined);
    await p.send(data([old]));
    await p.page.locator('.legend-entry').waitFor();
    assert.equal(await p.page.locator('.legend-entry .run-note').textContent(), 'no curves in its record (recorded before curves were kept)');
    assert.equal(await p.page.locator('p.empty').textContent(), 'This run has recorded no metrics per step or epoch yet.');
    assert.equal(await p.page.locator('.metric-chart').count(), 0);
    // Malformed messages change nothing.
    await p.page.evaluate(`window.postMessage({ type: 'curves/data', runs: 'x', metrics: [] }, '*'); window.postMessage('hello', '*')`);
    await p.send(data([runA, old]));
    await p.page.locator(`${lossChart} canvas`).waitFor();
    assert.equal(await p.page.locator('p.empty').isHidden(), true);
  });

  it('draws each run in the theme\'s chart colours and shows its tooltip, in dark, light and high-contrast themes (screenshots)', async () => {
    for (const theme of [dark, light, highContrast]) {
      const p = await curves(theme);
      await p.send(data([runA, runB, runC]));
      const canvas = `${lossChart} canvas`;
      await p.page.locator(canvas).waitFor();
      for (const v of ['--vscode-charts-blue', '--vscode-charts-orange', '--vscode-charts-green'] as const) {
        const hex = theme.vars[v];
        await eventually(async () => await canvasPixelsOfColor(p.page, canvas, hex) > 100, `${theme.name}: a line in ${v} ${hex}`);
      }
      // The legend's swatches are the same colours.
      assert.equal(await p.page.locator('.legend-entry[data-run-id="run-b"] .swatch').evaluate((e) => (globalThis as unknown as { getComputedStyle(e: unknown): { borderTopColor: string } }).getComputedStyle(e).borderTopColor), hexToRgb(theme.vars['--vscode-charts-orange']));
      const seen = await hoverScan(p.page, lossChart);
      const onA = seen.find((s) => s.text.startsWith('mnist · 08:00:00'))!;
      await p.page.mouse.move(onA.x, onA.y);
      const tip = p.page.locator(`${lossChart} .chart-tooltip`);
      assert.equal(await tip.isVisible(), true);
      assert.equal(await tip.evaluate((e) => (globalThis as unknown as { getComputedStyle(e: unknown): { color: string } }).getComputedStyle(e).color), hexToRgb(theme.vars['--vscode-foreground']));
      mkdirSync(resultsDir, { recursive: true });
      await p.page.screenshot({ path: join(resultsDir, `curves-${theme.name}.png`), fullPage: true });
    }
  });
});

function hexToRgb(hex: string): string {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  return `rgb(${r}, ${g}, ${b})`;
}

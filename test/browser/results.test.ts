/**
 * The "Tuning Results" page in headless Chromium: the page from `renderResultsHtml` with its real
 * CSP and the built `dist/results.js`, a fake `acquireVsCodeApi`, and messages as the host sends them.
 */
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { formatMetric, type HostToResultsMessage, type ResultsExperiment, type ResultsToHostMessage, type ResultsTrial } from '../../src/common/tuningProtocol';
import { makeNonce } from '../../src/views/gpu/panelHtml';
import { renderResultsHtml } from '../../src/views/tuning/resultsHtml';
import { repoRoot } from '../paths';
import { canvasPixelsOfColor, eventually, pageSuite } from './harness';
import { hoverScan } from './lineScan';
import { dark, highContrast, light, type Theme } from './themes';
import { openWebviewPage, startPageServer, type PageServer, type WebviewPage } from './webviewPage';

const resultsDir = join(repoRoot, 'test-results');

// --- an experiment as the host would describe it ---------------------------------------------

const experiment: ResultsExperiment = {
  name: 'quadratic',
  metric: 'loss',
  mode: 'min',
  timeAttr: 'training_iteration',
  totalTrials: 12,
  state: 'running',
  best: { trialId: 3, metric: 0.118 },
  apply: { kind: 'job', file: '/ws/mnist.job.json', varied: [['lr'], ['batch_size'], ['optimizer']] },
  params: [{ name: 'lr', scale: 'log' }, { name: 'batch_size', scale: 'category' }, { name: 'optimizer', scale: 'category' }],
};

function curve(floor: number, n: number): Array<[number, number]> {
  return Array.from({ length: n }, (_, i) => [i + 1, Number((floor + 2.4 * Math.exp(-0.45 * (i + 1))).toFixed(4))]);
}

function trial(trialId: number, lr: number, batch: number, optimizer: string, floor: number, n: number, extra: Partial<ResultsTrial> = {}): ResultsTrial {
  const c = curve(floor, n);
  return {
    trialId, status: 'done', config: { lr, batch_size: batch, optimizer, epochs: 12 }, values: { lr, batch_size: batch, optimizer },
    curve: c, iterations: n, metric: c.length ? c[c.length - 1][1] : null, attempt: 1, log: `trial_${trialId}.log`, ...extra,
  };
}

const ashaMessage = (id: number, loss: string, cut: string, at: number): string => `loss ${loss} is worse than the rung's cutoff ${cut} at training_iteration ${at} (trial ${id})`;

function trials(): ResultsTrial[] {
  return [
    trial(1, 0.0042, 64, 'adam', 0.31, 12),
    trial(2, 0.05, 16, 'sgd', 1.2, 2, { status: 'stopped', stopReason: 'asha', stopMessage: ashaMessage(2, '1.61', '1.02', 2) }),
    // Its last point is exactly 0.118 after 12 iterations, so the best of the summary.
    { ...trial(3, 0.0032, 64, 'adam', 0.1, 12), metric: 0.118, curve: [...curve(0.1, 11), [12, 0.118]] },
    trial(4, 0.0002, 128, 'sgd', 0.9, 4, { status: 'stopped', stopReason: 'asha', stopMessage: ashaMessage(4, '1.28', '0.77', 4) }),
    trial(5, 0.011, 32, 'adam', 0.45, 12),
    trial(6, 0.0007, 32, 'sgd', 0.7, 3, { status: 'failed', error: 'python3 exited with code 1: RuntimeError: CUDA out of memory' }),
    trial(7, 0.0021, 128, 'adam', 0.2, 6, { status: 'running' }),
    trial(8, 0.02, 16, 'adam', 0.6, 0, { status: 'running' }),
  ];
}

function init(extra: Partial<ResultsExperiment> = {}, list = trials()): HostToResultsMessage {
  return { type: 'results/init', experiment: { ...experiment, ...extra }, trials: list };
}

// --- the page harness ------------------------------------------------------------------------------

const startServer = (): Promise<PageServer> => startPageServer('results', (origin) => renderResultsHtml({ cspSource: origin, nonce: makeNonce(), scriptUri: `${origin}/dist/results.js`, styleUris: [`${origin}/dist/uPlot.min.css`], experiment: 'quadratic', experimentKey: '/work/.gpu-workbench/experiments/quadratic' }));

type ResultsPage = WebviewPage<ResultsToHostMessage, HostToResultsMessage>;

const openResults = (browser: Browser, server: PageServer, theme: Theme = dark): Promise<ResultsPage> => openWebviewPage(browser, server, 'results', theme);

// --- the tests ---------------------------------------------------------------------------------

describe('Tuning Results webview (headless Chromium)', function () {
  this.timeout(60_000);
  const suite = pageSuite(startServer);

  async function results(theme: Theme = dark): Promise<ResultsPage> {
    const p = suite.track(await openResults(suite.browser, suite.server, theme));
    await p.waitForPosted('results/ready');
    return p;
  }

  const ids = (p: ResultsPage): Promise<string[]> => p.page.locator('table.trials tbody tr').evaluateAll((rows) => rows.map((r) => (r as unknown as { dataset: { trialId: string } }).dataset.trialId));

  it('says results/ready first, then lists every trial with status, metric, iterations and config', async () => {
    const p = await results();
    assert.deepEqual(p.posted, [{ type: 'results/ready' }]);
    await p.send(init());
    const rows = p.page.locator('table.trials tbody tr');
    await rows.first().waitFor();
    assert.equal(await rows.count(), 8);
    assert.deepEqual(await p.page.locator('table.trials thead th').allTextContents(), ['Trial', 'Status', 'loss', 'Iterations', 'lr', 'batch_size', 'optimizer', 'Log']);
    const cells = (id: number): Promise<string[]> => p.page.locator(`tr[data-trial-id="${id}"] td`).allTextContents();
    assert.deepEqual(await cells(3), ['3best', 'Done', '0.118', '12', '3.2e-3', '64', 'adam', 'trial_3.log']);
    assert.deepEqual(await cells(2), ['2', 'Stopped by ASHA', '2.176', '2', '0.05', '16', 'sgd', 'trial_2.log']);
    assert.deepEqual(await cells(6), ['6', 'Failed', '1.322', '3', '7e-4', '32', 'sgd', 'trial_6.log']);
    assert.deepEqual(await cells(8), ['8', 'Running', '—', '0', '0.02', '16', 'adam', 'trial_8.log']);
    assert.equal(await p.page.locator('tr[data-trial-id="6"] td.status').getAttribute('title'), 'python3 exited with code 1: RuntimeError: CUDA out of memory');
    assert.match(await p.page.locator('tr[data-trial-id="2"] td.status').getAttribute('title') ?? '', /worse than the rung's cutoff 1\.02/);
    assert.equal(await p.page.locator('header.summary h1').textContent(), 'quadratic');
    assert.equal(await p.page.locator('header.summary .state').textContent(), 'Running · 8 of 12 trials started · 2 running');
  });

  it('links each trial row to its log file: a click or Enter on the link asks the host to open it, without selecting the row or showing its terminal', async () => {
    const p = await results();
    await p.send(init({}, [...trials().slice(0, 7), trial(8, 0.02, 16, 'adam', 0.6, 0, { status: 'running', attempt: 2, log: 'trial_8.attempt-2.log' })]));
    const link = p.page.locator('tr[data-trial-id="6"] a.log-link');
    await link.waitFor();
    assert.equal(await link.textContent(), 'trial_6.log');
    assert.match(await link.getAttribute('title') ?? '', /^Open trial_6\.log /);
    await link.click();
    await p.waitForPosted('results/openLog');
    assert.deepEqual(p.posted.filter((m) => m.type === 'results/openLog'), [{ type: 'results/openLog', trialId: 6 }]);
    assert.equal(await p.page.locator('tr.selected').count(), 0, 'the click on the link selected its row');
    // A re-run attempt links to its own log, the name the journal gave it.
    const again = p.page.locator('tr[data-trial-id="8"] a.log-link');
    assert.equal(await again.textContent(), 'trial_8.attempt-2.log');
    await again.focus();
    await p.page.keyboard.press('Enter');
    await p.waitForPosted('results/openLog', 2);
    assert.deepEqual(p.posted.filter((m) => m.type === 'results/openLog').map((m) => (m as { trialId: number }).trialId), [6, 8]);
    assert.equal(p.posted.filter((m) => m.type === 'results/showTrial').length, 0, 'the link also asked for the trial\'s terminal');
  });

  it('keeps the experiment\'s folder in its state from the start, for VS Code to bring the tab back after a window reload', async () => {
    const p = await results();
    // Before any click: a state saved only at the first sort would leave a reloaded window without the tab.
    const saved = JSON.parse(await p.page.evaluate<string>("sessionStorage.getItem('results-state') ?? 'null'")) as { experimentKey?: string } | null;
    assert.equal(saved?.experimentKey, '/work/.gpu-workbench/experiments/quadratic');
  });

  it('highlights the best trial: its row, the summary and Apply Best Config, which asks the host', async () => {
    const p = await results();
    await p.send(init());
    await p.page.locator('tr.best').waitFor();
    assert.deepEqual(await p.page.locator('tr.best').evaluateAll((rows) => rows.map((r) => (r as unknown as { dataset: { trialId: string } }).dataset.trialId)), ['3']);
    assert.equal(await p.page.locator('tr.best .badge').textContent(), 'best');
    assert.equal(await p.page.locator('.best-text').textContent(), 'Best: Trial 3 · loss 0.118 (lowest) · lr=3.2e-3 batch_size=64 optimizer=adam');
    const apply = p.page.locator('vscode-button#apply-best');
    assert.equal(await apply.textContent(), 'Apply Best Config');
    assert.match(await apply.getAttribute('title') ?? '', /into \/ws\/mnist\.job\.json/);
    await apply.click();
    await p.waitForPosted('results/applyBest');
    // The scatter marks the best point too.
    assert.match(await p.page.locator('.chart.scatter').getAttribute('aria-label') ?? '', /best trial 3$/);

    // Before any trial has ended there is no best, and the button does nothing.
    await p.send(init({ best: null }, trials().map((t) => ({ ...t, status: 'running' as const }))));
    await p.page.locator('.best-text', { hasText: 'No best trial yet' }).waitFor();
    assert.equal(await p.page.locator('tr.best').count(), 0);
    assert.equal(await p.page.locator('vscode-button#apply-best').getAttribute('disabled'), '');
  });

  it('sorts by a column when its header is clicked, then the other way; missing metrics last; the order survives a reload', async () => {
    const p = await results();
    await p.send(init());
    await p.page.locator('table.trials tbody tr').first().waitFor();
    assert.deepEqual(await ids(p), ['1', '2', '3', '4', '5', '6', '7', '8']);
    await p.page.locator('th[data-key="metric"] button').click();
    assert.deepEqual(await ids(p), ['3', '1', '7', '5', '4', '6', '2', '8']);
    assert.equal(await p.page.locator('th[data-key="metric"]').getAttribute('aria-sort'), 'ascending');
    await p.page.locator('th[data-key="metric"] button').click();
    assert.deepEqual(await ids(p), ['2', '6', '4', '5', '7', '1', '3', '8']);
    assert.equal(await p.page.locator('th[data-key="metric"]').getAttribute('aria-sort'), 'descending');
    await p.page.locator('th[data-key="param:optimizer"] button').click();
    assert.deepEqual(await ids(p), ['1', '3', '5', '7', '8', '2', '4', '6']);
    await p.page.locator('th[data-key="param:lr"] button').click();
    assert.deepEqual(await ids(p), ['4', '6', '7', '3', '1', '5', '8', '2']);
    await p.page.locator('th[data-key="status"] button').click();
    assert.deepEqual(await ids(p), ['7', '8', '1', '3', '5', '2', '4', '6']);
    // The header keeps the keyboard focus, so Enter sorts the other way.
    await p.page.keyboard.press('Enter');
    assert.equal(await p.page.locator('th[data-key="status"]').getAttribute('aria-sort'), 'descending');

    await p.page.reload();
    await p.waitForPosted('results/ready', 2);
    await p.send(init());
    await p.page.locator('table.trials tbody tr').first().waitFor();
    assert.equal(await p.page.locator('th[data-key="status"]').getAttribute('aria-sort'), 'descending', 'sort kept in the webview state');
    assert.deepEqual(await ids(p), ['6', '2', '4', '1', '3', '5', '7', '8']);
  });

  it('marks where ASHA stopped each trial on its learning curve', async () => {
    const p = await results();
    await p.send(init());
    const markers = p.page.locator('.chart.curves .stop-marker');
    await markers.first().waitFor();
    assert.deepEqual(await markers.evaluateAll((ms) => ms.map((m) => (m as unknown as { dataset: { trialId: string } }).dataset.trialId).sort()), ['2', '4']);
    assert.equal(await p.page.locator('.stop-marker[data-trial-id="2"]').getAttribute('title'),
      `Trial 2 stopped by ASHA at training_iteration 2 (loss 2.176): ${ashaMessage(2, '1.61', '1.02', 2)}`);
    // The marker sits on the curve's last point: right of trial 4's (iteration 4 > 2) and above it (higher loss).
    const m2 = await p.page.locator('.stop-marker[data-trial-id="2"]').boundingBox();
    const m4 = await p.page.locator('.stop-marker[data-trial-id="4"]').boundingBox();
    const plot = await p.page.locator('.chart.curves .u-over').boundingBox();
    assert.ok(m2 && m4 && plot);
    assert.ok(m4.x > m2.x, 'iteration 4 is right of iteration 2');
    assert.ok(m2.y < m4.y, 'loss 2.176 is above loss 1.297');
    for (const m of [m2, m4]) assert.ok(m.x >= plot.x - 6 && m.x <= plot.x + plot.width && m.y >= plot.y - 6 && m.y <= plot.y + plot.height, 'inside the plot');
    assert.equal(await p.page.locator('.chart.curves').getAttribute('data-trials'), '7', 'every trial with a report has a curve');
  });

  it('updates live: a new report moves the curve and the table, a stop adds a marker, the end updates the summary', async () => {
    const p = await results();
    await p.send(init());
    await p.page.locator('tr[data-trial-id="8"]').waitFor();
    await p.send({ type: 'results/trial', trial: trial(8, 0.02, 16, 'adam', 0.6, 2, { status: 'running' }) });
    await p.page.locator('tr[data-trial-id="8"] td.iterations', { hasText: '2' }).waitFor();
    assert.equal(await p.page.locator('tr[data-trial-id="8"] td.metric').textContent(), '1.576');
    assert.equal(await p.page.locator('.chart.curves').getAttribute('data-trials'), '8');
    // Tag the canvas: a further report only adds a point, on the same plot.
    await p.page.evaluate(`document.querySelector('.chart.curves canvas').dataset.tag = 'kept'`);
    await p.send({ type: 'results/trial', trial: trial(8, 0.02, 16, 'adam', 0.6, 3, { status: 'running' }) });
    await p.page.locator('tr[data-trial-id="8"] td.iterations', { hasText: '3' }).waitFor();
    assert.equal(await p.page.locator('.chart.curves canvas[data-tag="kept"]').count(), 1, 'a report redraws the same plot');

    await p.send({ type: 'results/trial', trial: trial(8, 0.02, 16, 'adam', 0.6, 3, { status: 'stopped', stopReason: 'asha', stopMessage: ashaMessage(8, '1.2', '1.0', 3) }) });
    await p.page.locator('.stop-marker[data-trial-id="8"]').waitFor();
    assert.equal(await p.page.locator('tr[data-trial-id="8"] td.status').textContent(), 'Stopped by ASHA');

    await p.send({ type: 'results/experiment', experiment: { ...experiment, state: 'done', best: { trialId: 1, metric: 0.31 } } });
    await p.page.locator('header.summary .state', { hasText: 'Finished · 8 trials' }).waitFor();
    assert.deepEqual(await p.page.locator('tr.best').evaluateAll((rows) => rows.map((r) => (r as unknown as { dataset: { trialId: string } }).dataset.trialId)), ['1']);
  });

  it('shows each trial\'s peak memory (allocated / reserved on CUDA, RSS on a CPU) once a trial has one, and a trial that ran out of memory says so with its batch size', async () => {
    const p = await results();
    await p.send(init());
    await p.page.locator('tr[data-trial-id="8"]').waitFor();
    assert.equal(await p.page.locator('th[data-key="memory"]').count(), 0, 'no trial has a memory yet: no column');
    const GiB = 2 ** 30;
    const MiB = 2 ** 20;
    // As the host sends them: a CUDA trial's peak, and the trial of batch 128 that ran out of memory in its first step.
    await p.send({ type: 'results/trial', trial: trial(1, 0.0042, 64, 'adam', 0.31, 12, { memory: { device: 'cuda', peakAllocatedBytes: 1.25 * GiB, peakReservedBytes: 2 * GiB, processes: 1, steps: 120 } }) });
    await p.send({
      type: 'results/trial',
      trial: trial(4, 0.0002, 128, 'sgd', 0.9, 0, {
        status: 'failed', error: 'out of memory (batch size 128): torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB',
        outOfMemory: { device: 'cuda', batchSize: 128, message: 'torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' },
        memory: { device: 'cuda', peakAllocatedBytes: 7.5 * GiB, peakReservedBytes: 7.75 * GiB, processes: 1, steps: 0 },
      }),
    });
    await p.send({ type: 'results/trial', trial: trial(5, 0.011, 32, 'adam', 0.45, 12, { memory: { device: 'cpu', peakRssBytes: 312.4 * MiB, processes: 2, steps: 36 } }) });
    await p.page.locator('tr[data-trial-id="5"] td.memory', { hasText: 'RSS' }).waitFor();
    assert.deepEqual(await p.page.locator('table.trials thead th').allTextContents(), ['Trial', 'Status', 'loss', 'Iterations', 'Peak memory', 'lr', 'batch_size', 'optimizer', 'Log']);
    const cells = (id: number): Promise<string[]> => p.page.locator(`tr[data-trial-id="${id}"] td`).allTextContents();
    assert.deepEqual(await cells(4), ['4', 'Out of memory (batch size 128)', '—', '0', '7.5 GiB / 7.8 GiB', '2e-4', '128', 'sgd', 'trial_4.log']);
    assert.deepEqual(await cells(1), ['1', 'Done', '0.3208', '12', '1.3 GiB / 2.0 GiB', '4.2e-3', '64', 'adam', 'trial_1.log']);
    assert.equal((await cells(5))[4], '312.4 MiB RSS');
    assert.equal((await cells(2))[4], '—', 'a trial without a memory');
    assert.equal(await p.page.locator('tr[data-trial-id="4"] td.status').getAttribute('title'), 'out of memory (batch size 128): torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB');
    assert.equal(await p.page.locator('tr[data-trial-id="1"] td.memory').getAttribute('title'), 'Peak memory: 1.3 GiB allocated / 2.0 GiB reserved (CUDA)');
    assert.equal(await p.page.locator('tr[data-trial-id="5"] td.memory').getAttribute('title'), 'Peak memory: 312.4 MiB RSS (CPU, largest of its processes)');
    // A failure that was not out of memory still reads Failed.
    assert.equal((await cells(6))[1], 'Failed');
    // The column sorts by the peak (allocated on CUDA, RSS on a CPU), trials without one last.
    await p.page.locator('th[data-key="memory"] button').click();
    assert.deepEqual((await ids(p)).slice(0, 3), ['5', '1', '4']);
    mkdirSync(resultsDir, { recursive: true });
    await p.page.screenshot({ path: join(resultsDir, 'tuning-results-memory.png'), fullPage: true });
  });

  it('shows a tooltip naming the trial, the iteration and the metric of the learning curve under the pointer', async () => {
    const p = await results();
    await p.send(init());
    await p.page.locator('.chart.curves canvas').waitFor();
    const seen = await hoverScan(p.page, '.chart.curves');
    assert.ok(seen.length > 0, 'no tooltip anywhere down the middle of the chart');
    const byId = new Map(trials().map((t) => [t.trialId, t]));
    for (const { text } of seen) {
      const m = /^Trial (\d+) · training_iteration (\d+): loss (.+)$/.exec(text);
      assert.ok(m, text);
      const point = byId.get(Number(m[1]))!.curve.find(([x]) => x === Number(m[2]));
      assert.ok(point, `${text}: trial ${m[1]} has no point at ${m[2]}`);
      assert.equal(m[3], formatMetric(point[1]), text);
    }
    // Down the middle (iteration 6 or 7) the pointer meets the long-running trials' curves.
    const ids = new Set(seen.map((s) => Number(/^Trial (\d+)/.exec(s.text)![1])));
    for (const id of [1, 3, 5]) assert.ok(ids.has(id), `trial ${id} in ${JSON.stringify(seen)}`);
  });

  it('a click on a learning curve highlights its trial (its row selected, the other curves dimmed); a second click clears it', async () => {
    const p = await results();
    await p.send(init());
    const canvas = '.chart.curves canvas';
    await p.page.locator(canvas).waitFor();
    const green = dark.vars['--vscode-charts-green'];
    await eventually(async () => await canvasPixelsOfColor(p.page, canvas, green) > 100, 'the best trial drawn in green');
    const seen = await hoverScan(p.page, '.chart.curves');
    const on5 = seen.find((s) => s.text.startsWith('Trial 5 '));
    assert.ok(on5, JSON.stringify(seen));
    await p.page.mouse.click(on5.x, on5.y);
    await p.page.locator('tr[data-trial-id="5"].selected').waitFor();
    await eventually(async () => await p.page.locator('.chart.curves').getAttribute('data-highlight') === '5', 'trial 5 highlighted in the chart');
    // The best trial's curve is dimmed: no opaque green left.
    await eventually(async () => await canvasPixelsOfColor(p.page, canvas, green) === 0, 'the other curves dimmed');
    const after = await hoverScan(p.page, '.chart.curves');
    const again = after.find((s) => s.text.startsWith('Trial 5 '))!;
    await p.page.mouse.click(again.x, again.y);
    await eventually(async () => await p.page.locator('tr.selected').count() === 0, 'the row unselected');
    assert.equal(await p.page.locator('.chart.curves').getAttribute('data-highlight'), '');
    await eventually(async () => await canvasPixelsOfColor(p.page, canvas, green) > 100, 'the best trial drawn again');
    // A row picked from the keyboard (Space) highlights its curve the same way.
    await p.page.locator('tr[data-trial-id="1"]').focus();
    await p.page.keyboard.press('Space');
    await eventually(async () => await p.page.locator('.chart.curves').getAttribute('data-highlight') === '1', 'trial 1 highlighted from its row');
  });

  it('plots the metric against the parameter picked, by category for words, and remembers the pick', async () => {
    const p = await results();
    await p.send(init());
    const scatter = p.page.locator('.chart.scatter');
    await scatter.locator('canvas').waitFor();
    assert.deepEqual(await p.page.locator('#scatter-param option').allTextContents(), ['lr', 'batch_size', 'optimizer']);
    assert.equal(await scatter.getAttribute('data-param'), 'lr');
    assert.equal(await scatter.getAttribute('data-points'), '7', 'every trial with a metric');
    await p.page.locator('#scatter-param').selectOption('optimizer');
    await eventually(async () => await scatter.getAttribute('data-param') === 'optimizer', 'the scatter shows optimizer');
    assert.equal(await scatter.getAttribute('data-categories'), 'adam,sgd', 'words are placed by category');
    assert.equal(await scatter.getAttribute('aria-label'), 'loss against optimizer: 7 trials, best trial 3');

    // A row click selects the trial (drawn in blue) and is remembered with the parameter.
    await p.page.locator('tr[data-trial-id="5"]').click();
    await p.page.locator('tr[data-trial-id="5"].selected').waitFor();
    await p.page.reload();
    await p.waitForPosted('results/ready', 2);
    await p.send(init());
    await p.page.locator('tr[data-trial-id="5"].selected').waitFor();
    assert.equal(await p.page.locator('#scatter-param').inputValue(), 'optimizer');
    // Double-click (or Enter) asks the host for the trial's terminal.
    await p.page.locator('tr[data-trial-id="5"]').dblclick();
    await p.waitForPosted('results/showTrial');
    assert.deepEqual(p.posted.filter((m) => m.type === 'results/showTrial'), [{ type: 'results/showTrial', trialId: 5 }]);
  });

  it('draws in the theme\'s chart colours, in dark, light and high-contrast themes (screenshots)', async () => {
    for (const theme of [dark, light, highContrast]) {
      const p = await results(theme);
      await p.send(init());
      await p.page.locator('.stop-marker').first().waitFor();
      const green = theme.vars['--vscode-charts-green'];
      // The best curve is drawn in --vscode-charts-green.
      await eventually(async () => await p.page.evaluate<number>(`(() => {
        const canvas = document.querySelector('.chart.curves canvas');
        const [r, g, b] = [1, 3, 5].map((i) => parseInt(${JSON.stringify(green)}.slice(i, i + 2), 16));
        const { data } = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
        let n = 0;
        for (let i = 0; i < data.length; i += 4) if (data[i + 3] > 200 && Math.abs(data[i] - r) < 12 && Math.abs(data[i + 1] - g) < 12 && Math.abs(data[i + 2] - b) < 12) n++;
        return n;
      })()`) > 100, `${theme.name}: the best curve in ${green}`);
      mkdirSync(resultsDir, { recursive: true });
      const file = join(resultsDir, `tuning-results-${theme.name}.png`);
      await p.page.screenshot({ path: file, fullPage: true });
      if (theme === dark && process.env.UPDATE_SCREENSHOTS === '1') {
        mkdirSync(join(repoRoot, 'docs', 'images'), { recursive: true });
        copyFileSync(file, join(repoRoot, 'docs', 'images', 'tuning-results.png'));
      }
    }
  });

  it('ignores malformed messages', async () => {
    const p = await results();
    await p.page.evaluate(`window.postMessage({ type: 'results/trial' }, '*'); window.postMessage('hello', '*'); window.postMessage({ type: 'results/init', experiment: null }, '*')`);
    await p.send(init());
    await p.page.locator('table.trials tbody tr').first().waitFor();
    assert.equal(await p.page.locator('table.trials tbody tr').count(), 8);
  });
});

/**
 * Comparing runs' curves in a real VS Code (code-server + Debian chromium): two short
 * `gpu-workbench train` runs in the workspace (the repository's built CLI, as a user runs it in a
 * terminal), both selected in the Runs view (click, Ctrl+click), "Compare Run Curves…" from the
 * rows' context menu opens one Curves tab whose legend names both runs and whose charts draw them;
 * the tab comes back after Developer: Reload Window (its serializer); and "Compare Run Curves…"
 * from the palette, with no two runs selected, asks for the runs in a multi-select quick pick.
 */
import * as assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import type { Locator, Page } from 'playwright-core';
import { repoRoot } from '../paths';
import { screenshot, waitUntil } from './harness';
import { codeServerSuite, panelWebview, quickPick, quickPickLabels, reloadWindow, runCommand, trainingWorkspace } from './flows';

/** Runs `gpu-workbench train` in the workspace to its end. */
function train(dir: string, jobFile: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(repoRoot, 'dist', 'cli.js'), 'train', jobFile, '--strategy', 'ddp', '--devices', '2', '--epochs', '1'], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`gpu-workbench train exited ${code}: ${err.slice(-2000)}`))));
  });
}

describe('e2e: Compare Run Curves in code-server', function () {
  this.timeout(300_000);
  const s = codeServerSuite('curves', () => trainingWorkspace({ trainSize: 1000, testSize: 200, epochs: 1 }));

  /** The legend's labels of the compared runs (set by the first test, for the next ones). */
  let compared: string[] = [];

  const runsPane = (p: Page): Locator => p.locator('.pane', { has: p.locator('.pane-header', { hasText: /^\s*Runs/ }) });

  it('two runs selected in the Runs view open one Curves tab with both in its legend', async () => {
    await train(s.ws.dir, s.ws.jobFile);
    await train(s.ws.dir, s.ws.jobFile);
    const page = await s.open('mnist-ddp.job.json');
    await runCommand(page, 'GPU Workbench: Focus on Runs View');
    const rows = runsPane(page).locator('.monaco-list-row');
    await waitUntil('both runs listed as done', 60_000, async () => {
      const labels = await rows.evaluateAll((rs) => rs.map((r) => (r as unknown as { getAttribute(n: string): string | null }).getAttribute('aria-label') ?? ''));
      return labels.filter((l) => l.startsWith(`${s.ws.name} done`)).length === 2 || undefined;
    }, 250);
    // Select both runs as a user does (click the first, which opens its log; Ctrl+click the second), right-click one
    // and pick "Compare Run Curves…" (shown only with several rows selected: `listMultiSelection`). Two CI runs failed
    // here with no Curves webview ever created. Reproduced here: a click on the menu's item sometimes runs nothing
    // (one local run needed 5 attempts), and the menu then stays open over the rows. Why is not verified in VS Code's
    // source: probably the menu ignores a click that comes too soon after it opened, or it opens before the tree has
    // set its multi-selection context key. So the flow is retried step by step until the tab is there: the selection
    // checked on the rows (aria-selected), a menu left open closed with Escape, a menu without the item logged.
    // The attempts are printed with the suite's timings.
    const selected = async (): Promise<string[]> => rows.evaluateAll((rs) => rs.map((r) => (r as unknown as { getAttribute(n: string): string | null }).getAttribute('aria-selected') ?? ''));
    const curvesTab = page.locator('.tabs-container .tab', { hasText: 'Curves: 2 runs' });
    const fellBackToPick = page.locator('.quick-input-widget .quick-input-title', { hasText: 'Compare Curves' });
    const menu = page.locator('.context-view .monaco-menu');
    const compareItem = menu.locator('.action-label', { hasText: 'Compare Run Curves…' });
    await rows.nth(0).click();
    await page.locator('.tabs-container .tab', { hasText: /\.log$/ }).first().waitFor({ timeout: 30_000 });
    let attempts = 0;
    await waitUntil('Compare Run Curves… on the two selected runs to open the Curves tab', 180_000, async () => {
      if (await curvesTab.count() > 0) return true;
      if (await fellBackToPick.isVisible()) throw new Error(`the command asked for the runs in a quick pick: it saw fewer than two selected (rows aria-selected: ${(await selected()).join(', ')})`);
      if (await menu.isVisible()) {
        // A menu from the last attempt: close it (Escape goes to the menu, not to the tree's selection).
        await page.keyboard.press('Escape');
        await menu.waitFor({ state: 'hidden', timeout: 5_000 }).catch(() => undefined);
        return false;
      }
      const now = await selected();
      if (now[0] !== 'true') { await rows.nth(0).click(); return false; }
      if (now[1] !== 'true') { await rows.nth(1).click({ modifiers: ['Control'] }); return false; }
      attempts++;
      await rows.nth(1).click({ button: 'right' });
      await menu.waitFor({ timeout: 5_000 }).catch(() => undefined);
      if (await compareItem.count() === 0) {
        console.log(`      curves: attempt ${attempts}: the rows' menu showed [${(await menu.locator('.action-label').allInnerTexts()).join(' | ')}] with rows aria-selected ${(await selected()).join(', ')}`);
        return false;
      }
      await compareItem.first().click({ timeout: 5_000 });
      await curvesTab.first().waitFor({ timeout: 10_000 }).catch(() => undefined);
      return (await curvesTab.count()) > 0 || undefined;
    }, 250);
    s.timings.compareAttempts = attempts;
    const frame = panelWebview(page);
    const entries = frame.locator('.legend-entry');
    await waitUntil('the Curves tab\'s legend to list two runs', 60_000, async () => (await entries.count()) === 2 || undefined, 250);
    const labels = await frame.locator('.legend-entry .run-label').allTextContents();
    assert.equal(labels.length, 2);
    for (const l of labels) assert.match(l, new RegExp(`^${s.ws.name} · \\d\\d:\\d\\d:\\d\\d$`));
    assert.notEqual(labels[0], labels[1]);
    // Each chart draws both runs: the loss by step and the epoch metrics.
    await frame.locator('.metric-chart[data-metric="loss"][data-runs="2"] canvas').waitFor({ timeout: 30_000 });
    assert.equal(await frame.locator('.metric-chart[data-metric="testAccuracy"]').getAttribute('data-runs'), '2');
    await screenshot(page, 'curves-compare');
    compared = labels;
  });

  it('the Curves tab comes back after Developer: Reload Window, with the same runs', async () => {
    assert.ok(s.page && compared.length === 2, 'needs the Curves tab of the last test');
    const page = s.page;
    await reloadWindow(page, /mnist-ddp\.job\.json|Runs/);
    // The reloaded workbench lists the tab again; the serializer brings its page back from the runs' ids in its state.
    const tab = page.locator('.tabs-container .tab', { hasText: 'Curves: 2 runs' }).first();
    await tab.waitFor({ timeout: 120_000 });
    await tab.click();
    const frame = panelWebview(page);
    const labels = frame.locator('.legend-entry .run-label');
    await waitUntil('the restored Curves tab\'s legend to list the two runs', 90_000, async () => (await labels.count()) === 2 || undefined, 250);
    assert.deepEqual(await labels.allTextContents(), compared);
    await frame.locator('.metric-chart[data-metric="loss"][data-runs="2"] canvas').waitFor({ timeout: 30_000 });
    await screenshot(page, 'curves-restored');
  });

  it('Compare Run Curves… with fewer than two runs selected asks for the runs in a multi-select quick pick', async () => {
    assert.ok(s.page && compared.length === 2, 'needs the two runs of the first test');
    const page = s.page;
    // No Curves tab open: the one the pick opens is new.
    await runCommand(page, 'View: Close All Editors');
    await page.locator('.tabs-container .tab', { hasText: 'Curves:' }).first().waitFor({ state: 'detached', timeout: 30_000 });
    await runCommand(page, 'GPU Workbench: Compare Run Curves');
    const rows = await quickPick(page, 'Compare Curves');
    await waitUntil('both runs in the pick', 30_000, async () => (await rows.count()) === 2 || undefined, 250);
    assert.deepEqual(await quickPickLabels(page), [s.ws.name, s.ws.name]);
    // Nothing selected in the view: nothing picked yet; check both, then accept.
    const checked = async (): Promise<string[]> => rows.evaluateAll((rs) => rs.map((r) => (r as unknown as { getAttribute(n: string): string | null }).getAttribute('aria-checked') ?? ''));
    assert.deepEqual(await checked(), ['false', 'false']);
    await screenshot(page, 'curves-compare-pick');
    for (let i = 0; i < 2; i++) {
      await rows.nth(i).click();
      await waitUntil(`run ${i + 1} checked`, 30_000, async () => (await checked())[i] === 'true' || undefined, 100);
    }
    await page.keyboard.press('Enter');
    await page.locator('.tabs-container .tab', { hasText: 'Curves: 2 runs' }).first().waitFor({ timeout: 60_000 });
    const frame = panelWebview(page);
    const labels = frame.locator('.legend-entry .run-label');
    await waitUntil('the new Curves tab\'s legend to list the two runs', 60_000, async () => (await labels.count()) === 2 || undefined, 250);
    assert.deepEqual([...await labels.allTextContents()].sort(), [...compared].sort());
    await screenshot(page, 'curves-compare-picked');
  });
});

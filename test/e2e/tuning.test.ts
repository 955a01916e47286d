/**
 * The tuning user path in a real VS Code (code-server 4.100.3 + Debian chromium), on a throwaway
 * copy of examples/tuning/ with a small budget (8 trials, ASHA from the first report): F1 →
 * "GPU Workbench: Tune Hyperparameters…" starts the workspace's only spec; each trial is a task
 * whose terminal ("Trial N · …") closes when the trial ends well, its output kept in the log file
 * each row of the "Tuning Results: quadratic" tab links to; the tab lists the trials,
 * some "Stopped by ASHA", and names the best; Apply Best Config, for trials that run a command,
 * offers the config as JSON ("Copy Config JSON") since there is no job file to edit.
 */
import * as assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FrameLocator } from 'playwright-core';
import { screenshot, since, waitUntil } from './harness';
import { codeServerSuite, notification, panelWebview, runCommand, toastSettled, tuningWorkspace, waitForNotification } from './flows';

describe('e2e: tuning in code-server', function () {
  this.timeout(300_000);
  const s = codeServerSuite('tuning', tuningWorkspace);
  let results: FrameLocator | undefined;
  /** Set when the experiment finished: the later tests build on it. */
  let finished = false;
  /** What the results page said of the best trial. */
  let bestText = '';

  it('Tune Hyperparameters… runs the only spec; the results tab lists every trial, some stopped by ASHA, and the best', async () => {
    const t0 = performance.now();
    const page = await s.open('quadratic.tune.json');
    await runCommand(page, 'GPU Workbench: Tune Hyperparameters');

    // One spec in the workspace: it starts at once and the results open beside as an editor tab.
    await page.locator('.tabs-container .tab', { hasText: `Tuning Results: ${s.ws.name}` }).first().waitFor({ timeout: 60_000 });
    results = panelWebview(page);
    await results.locator('.best-text').waitFor({ timeout: 60_000 });
    await screenshot(page, 'tuning-started');

    // The end: "Experiment quadratic finished: the best is trial N with loss 0.344."
    const done = await waitForNotification(page, new RegExp(`Experiment ${s.ws.name} finished: the best is trial \\d+`), 240_000);
    s.timings.experimentMs = since(t0);
    const bestId = Number(/the best is trial (\d+)/.exec(done)![1]);

    const rows = results.locator('table tbody tr');
    await waitUntil(`${s.ws.numSamples} trial rows in the results table`, 30_000, async () => (await rows.count()) === s.ws.numSamples);
    const statuses = (await results.locator('table tbody td.status').allInnerTexts()).map((s) => s.trim());
    assert.ok(statuses.includes('Stopped by ASHA'), `no trial was stopped by ASHA: ${JSON.stringify(statuses)}`);
    assert.ok(statuses.every((s) => ['Done', 'Done (maxT)', 'Stopped by ASHA'].includes(s)), `every trial ended well: ${JSON.stringify(statuses)}`);

    const best = await waitUntil('".best-text" to name the best trial', 30_000, async () => {
      const t = (await results!.locator('.best-text').innerText()).trim();
      return t.startsWith('Best:') ? t : undefined;
    });
    assert.match(best, new RegExp(`^Best: Trial ${bestId} · loss [\\d.]+ \\(lowest\\)`), `the results page and the end message disagree on the best: "${best}" vs "${done}"`);
    assert.equal((await results.locator('tr.best').getAttribute('data-trial-id')), String(bestId), 'the best row is marked');
    bestText = best;
    await screenshot(page, 'tuning-results');

    // The journal on disk agrees with what the page shows.
    const journal = join(s.ws.dir, '.gpu-workbench', 'experiments', s.ws.name, 'journal.jsonl');
    assert.ok(existsSync(journal), `no journal at ${journal}`);
    assert.ok(readFileSync(journal, 'utf8').includes('"asha"'), 'the journal records no ASHA stop');
    finished = true;
  });

  it('each trial\'s terminal closed when it ended well; its log file holds its output (issue 17 item 5)', async () => {
    assert.ok(s.page && finished, 'needs the finished experiment');
    // The tasks reveal silently: open the panel (Toggle Terminal shows the existing terminals, no new shell).
    await runCommand(s.page, 'View: Toggle Terminal');
    const tabs = s.page.locator('.terminal-tabs-entry');
    const trialTabs = async (): Promise<string[]> => (await tabs.allInnerTexts()).map((t) => t.replace(/\s+/g, ' ').trim()).filter((t) => /Trial \d+ ·/.test(t));
    // No trial failed: no trial terminal is left (each closed once its task ended).
    await waitUntil('every trial terminal to close', 30_000, async () => (await trialTabs()).length === 0, 250);
    const dir = join(s.ws.dir, '.gpu-workbench', 'experiments', s.ws.name);
    const started = readFileSync(join(dir, 'journal.jsonl'), 'utf8').split('\n').filter((l) => l.includes('"trial/started"')).map((l) => JSON.parse(l) as { trialId: number; log?: string });
    assert.equal(started.length, s.ws.numSamples);
    for (const t of started) {
      assert.equal(t.log, `trial_${t.trialId}.log`, 'trial/started names the log');
      assert.match(readFileSync(join(dir, t.log), 'utf8'), /::report::\{"loss"/, `trial ${t.trialId}'s log holds its reports`);
    }
    await screenshot(s.page, 'tuning-trial-terminals-closed');
  });

  it('a trial row\'s log link opens the trial\'s log file in an editor (issue 17 item 5)', async () => {
    assert.ok(s.page && results && finished, 'needs the results page of the finished experiment');
    const link = results.locator('tr[data-trial-id="2"] a.log-link');
    assert.equal((await link.innerText()).trim(), 'trial_2.log');
    await link.click({ timeout: 30_000 });
    await s.page.locator('.tabs-container .tab', { hasText: 'trial_2.log' }).first().waitFor({ timeout: 30_000 });
    await s.page.locator('.monaco-editor .view-lines', { hasText: '::report::' }).first().waitFor({ timeout: 30_000 });
    await screenshot(s.page, 'tuning-trial-log');
    // Back to the results tab for the next tests.
    await s.page.locator('.tabs-container .tab', { hasText: `Tuning Results: ${s.ws.name}` }).first().click();
  });

  it('Tasks: Rerun Last Task on an ended trial says it does not run it again and ends, twice (issue 11 item 8)', async () => {
    assert.ok(s.page && finished, 'needs the finished experiment');
    const page = s.page;
    // The last task VS Code ran is the last trial started (its terminal closed when it ended).
    const journal = readFileSync(join(s.ws.dir, '.gpu-workbench', 'experiments', s.ws.name, 'journal.jsonl'), 'utf8');
    const lastId = journal.split('\n').filter((l) => l.includes('"trial/started"')).map((l) => (JSON.parse(l) as { trialId: number }).trialId).pop();
    // The terminal's text as its DOM renderer draws it (spaces are no-break spaces there).
    const screen = async (): Promise<string> => (await page.locator('.terminal-wrapper.active .xterm-rows').allInnerTexts().catch(() => [] as string[])).join('\n').replace(/\u00a0/g, ' ');
    const said = async (): Promise<number> => ((await screen()).match(/Rerun Task does not run/g) ?? []).length;
    // Focus back in the workbench (the last test left it in the results page, where F1 goes to the page).
    await page.locator('.tabs-container .tab', { hasText: 'trial_2.log' }).first().click({ timeout: 30_000 });
    for (const n of [1, 2]) {
      await runCommand(page, 'Tasks: Rerun Last Task');
      // Its task is silent (trial terminals show only when they fail): open the terminal panel to see it.
      await runCommand(page, 'Terminal: Focus Terminal');
      // The rerun's terminal (the same one both times: a dedicated task terminal); at its left end: the middle of a narrow tab entry is its Split button.
      await page.locator('.terminal-tabs-entry', { hasText: new RegExp(`Trial ${lastId} ·`) }).first().click({ timeout: 30_000, position: { x: 12, y: 8 } });
      // The second message shows that the first rerun ended: VS Code runs no task that is still active.
      await waitUntil(`rerun ${n}'s message in trial ${lastId}'s terminal`, 30_000, async () => (await said()) >= n, 250);
    }
    assert.equal(await notification(page, /already active/).count(), 0, 'VS Code said a trial task was still active');
    await screenshot(page, 'tuning-trial-rerun');
  });

  it('Apply Best Config on command trials offers Copy Config JSON', async () => {
    assert.ok(s.page && results && finished, 'needs the results page of the finished experiment');
    // F1 first (focus is still in the workbench), then back to the results tab (where F1 would go to the page).
    await runCommand(s.page, 'Notifications: Clear All Notifications');
    await s.page.locator('.tabs-container .tab', { hasText: `Tuning Results: ${s.ws.name}` }).first().click();
    await results.locator('#apply-best').click({ timeout: 30_000 });
    // "The best is trial N (loss …): lr=… batch_size=… Its trials run a command, so there is no job file …"
    const offer = notification(s.page, /Its trials run a command, so there is no job file/);
    await offer.waitFor({ timeout: 60_000 });
    await offer.locator('.monaco-button', { hasText: 'Copy Config JSON' }).waitFor({ timeout: 15_000 });
    await toastSettled(s.page, 'Copy Config JSON');
    await screenshot(s.page, 'tuning-apply-best');
    // The clipboard itself is not checked: headless chromium's clipboard needs a permission grant
    // and a focused page, which says more about the browser than about the extension.
  });

  it('the results tab comes back after Developer: Reload Window, read from the experiment\'s journal', async () => {
    assert.ok(s.page && finished && bestText, 'needs the results page of the finished experiment');
    const page = s.page;
    await runCommand(page, 'Notifications: Clear All Notifications');
    await runCommand(page, 'Developer: Reload Window');
    // The reloaded workbench lists the tab again; its page is restored when the tab is shown.
    const tab = page.locator('.tabs-container .tab', { hasText: `Tuning Results: ${s.ws.name}` }).first();
    await tab.waitFor({ timeout: 120_000 });
    await tab.click();
    const again = panelWebview(page);
    const rows = again.locator('table tbody tr');
    await waitUntil(`${s.ws.numSamples} trial rows in the restored results table`, 90_000, async () => (await rows.count()) === s.ws.numSamples);
    const best = await waitUntil('the restored page to name the best trial', 30_000, async () => {
      const t = (await again.locator('.best-text').innerText()).trim();
      return t.startsWith('Best:') ? t : undefined;
    });
    assert.equal(best, bestText, 'the restored tab shows the same best trial');
    await screenshot(page, 'tuning-results-restored');
    // The log links come from the journal: they work after the reload too.
    await again.locator('tr[data-trial-id="3"] a.log-link').click({ timeout: 30_000 });
    await page.locator('.tabs-container .tab', { hasText: 'trial_3.log' }).first().waitFor({ timeout: 30_000 });
  });
});

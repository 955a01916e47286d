/**
 * The Runs view in a real VS Code (code-server 4.100.3 + Debian chromium), on a throwaway copy of
 * examples/mnist/mnist-ddp.job.json with small sizes: the view starts empty (its welcome text); a
 * run of `gpu-workbench train` in the workspace folder (the repository's built CLI, as a user runs
 * it in a terminal) appears as it runs and ends as done, through the file watcher alone; a run
 * from "Start Training…" appears too, with where it ran (ddp · wasm) and its test accuracy; both
 * are still listed after Developer: Reload Window, read back from their records, and "Open Log"
 * opens the run's log file. Run Again on a done run runs it again, and again while that one runs:
 * the context menu opened on the done run stays open while the running one writes its epochs (only
 * that row is redrawn), Run Again picked once shows a modal that offers to stop the running one
 * first (six picks, each once, Cancel in between), and Stop and Start Another cancels it and runs
 * the new one; Stop Run, picked once from the running row's own menu while that row is redrawn,
 * stops it. Each item is clicked once it takes clicks (VS Code's menu items ignore a click in
 * their first 100 ms; see `pick`).
 */
import * as assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Locator, Page } from 'playwright-core';
import { readRunRecords, runsFolder } from '../../src/training/job/runRecord';
import { repoRoot } from '../paths';
import { screenshot, waitUntil } from './harness';
import { clickMenuItem, codeServerSuite, reloadWindow, runCommand, startTraining, toastSettled, trainingWorkspace, waitForNotification } from './flows';

describe('e2e: the Runs view in code-server', function () {
  this.timeout(300_000);
  const s = codeServerSuite('runs', () => trainingWorkspace({ trainSize: 2000, testSize: 500, epochs: 1 }));
  let cli: ChildProcess | undefined;
  after(() => { cli?.kill('SIGKILL'); });

  /** The Runs view's rows (top level and expanded details alike) as the user reads them. */
  const runsPane = (p: Page): Locator => p.locator('.pane', { has: p.locator('.pane-header', { hasText: /^\s*Runs/ }) });
  const rowTexts = async (p: Page): Promise<string[]> => {
    const rows = runsPane(p).locator('.monaco-list-row');
    const n = await rows.count();
    const texts: string[] = [];
    for (let i = 0; i < n; i++) texts.push((await rows.nth(i).getAttribute('aria-label').catch(() => null) ?? '').replace(/\s+/g, ' ').trim());
    return texts;
  };

  async function showRuns(p: Page): Promise<void> {
    await runCommand(p, 'GPU Workbench: Focus on Runs View');
    await runsPane(p).locator('.pane-body').waitFor({ timeout: 30_000 });
  }

  it('starts empty, then shows a gpu-workbench train run from a terminal as it runs and when it is done', async () => {
    const page = await s.open('mnist-ddp.job.json');
    await showRuns(page);
    await runsPane(page).getByText('No runs in this workspace yet').waitFor({ timeout: 30_000 });
    await screenshot(page, 'runs-empty');

    cli = spawn(process.execPath, [join(repoRoot, 'dist', 'cli.js'), 'train', s.ws.jobFile, '--strategy', 'ddp', '--devices', '2', '--epochs', '2'], { cwd: s.ws.dir, stdio: 'ignore' });
    await waitUntil('the terminal run to show as running', 120_000, async () => (await rowTexts(page)).find((t) => t.startsWith(`${s.ws.name} running`)), 100);
    await screenshot(page, 'runs-cli-running');
    const done = await waitUntil('the terminal run to show as done', 180_000, async () => (await rowTexts(page)).find((t) => t.startsWith(`${s.ws.name} done`)), 250);
    assert.match(done, /^mnist-ddp done · .+ · test_acc [\d.]+% · test_loss [\d.]+ · loss [\d.]+$/);
    await screenshot(page, 'runs-cli-done');
  });

  it('shows a run from Start Training… with where it ran, and both runs are still there after a window reload', async () => {
    const page = s.page!;
    await startTraining(page, 'mnist-ddp.job.json', 'ddp', '2 CPU workers');
    // The terminal run's checkpoints are in the job's folder: Start Over moves them aside.
    const dialog = page.locator('.monaco-dialog-box', { hasText: 'already holds a run of' });
    await dialog.waitFor({ state: 'visible', timeout: 30_000 });
    await dialog.getByRole('button', { name: 'Start Over' }).click();
    await waitForNotification(page, new RegExp(`Training ${s.ws.name} finished: test accuracy`), 240_000);
    await toastSettled(page, 'finished: test accuracy');
    await showRuns(page);
    await waitUntil('two done runs in the Runs view', 30_000, async () => (await rowTexts(page)).filter((t) => t.startsWith(`${s.ws.name} done`)).length === 2, 250);
    // The newest first: the editor's run; its details say where it ran.
    const first = runsPane(page).locator('.monaco-list-row').first();
    // Its twistie expands it without running the row's command (Open Log, whose editor took the focus
    // before an ArrowRight once: the key moved the log's cursor instead).
    await first.locator('.monaco-tl-twistie').click();
    const details = await waitUntil('the run\'s details', 30_000, async () => {
      const rows = await rowTexts(page);
      return rows.some((t) => t.startsWith('ran on: ddp · wasm · cpu ×2')) ? rows : undefined;
    }, 200);
    // The run's row: its status, duration and final metrics.
    assert.ok(details.some((t) => new RegExp(`^${s.ws.name} done · [\\d.]+ s · test_acc [\\d.]+% · test_loss [\\d.]+ · loss [\\d.]+$`).test(t)), JSON.stringify(details));
    await screenshot(page, 'runs-two-done');

    await reloadWindow(page, /mnist-ddp\.job\.json|Runs/);
    await showRuns(page);
    await waitUntil('both runs listed again after the reload', 60_000, async () => (await rowTexts(page)).filter((t) => t.startsWith(`${s.ws.name} done`)).length === 2, 250);
    await screenshot(page, 'runs-after-reload');

    // Open Log (the row's inline action, also its click) opens the run's log file.
    // The row by its accessible label (what rowTexts reads; the row's visible text is split over label and description).
    const doneRow = (await rowTexts(page)).findIndex((t) => t.startsWith(`${s.ws.name} done`));
    assert.ok(doneRow >= 0);
    await runsPane(page).locator('.monaco-list-row').nth(doneRow).click();
    const tab = page.locator('.tabs-container .tab', { hasText: /\.log$/ }).first();
    await tab.waitFor({ timeout: 30_000 });
    await page.locator('.editor-instance .view-lines', { hasText: 'done: test accuracy' }).first().waitFor({ timeout: 30_000 });
    await screenshot(page, 'runs-open-log');
  });

  it('Run Again on a done run runs it again; Run Again while that one runs asks to stop it first, and Stop and Start Another does', async () => {
    const page = s.page!;
    // The Runs view is still in front from the last test (no palette here: with the log file just
    // opened from the view, F1's palette closed again at once and the typing went into the log).
    await runsPane(page).locator('.pane-body').waitFor({ timeout: 30_000 });
    const menu = page.locator('.context-view .monaco-menu');
    const openMenu = async (label: RegExp): Promise<void> => {
      const index = (await rowTexts(page)).findIndex((t) => label.test(t));
      assert.ok(index >= 0, `a row ${label}: ${JSON.stringify(await rowTexts(page))}`);
      await runsPane(page).locator('.monaco-list-row').nth(index).click({ button: 'right' });
      await menu.waitFor({ timeout: 30_000 });
    };
    // One click on the item once it takes clicks (flows.ts): a redraw of the view must not close the menu or lose the click.
    const pick = (action: string): Promise<void> => clickMenuItem(page, action);
    const onRow = async (label: RegExp, action: string): Promise<void> => {
      await openMenu(label);
      await pick(action);
    };
    const count = async (status: string): Promise<number> => (await rowTexts(page)).filter((t) => t.startsWith(`${s.ws.name} ${status}`)).length;

    // Fast epochs (several a second here: a record write each, and one per checkpoint) and more than any
    // test run lasts: Run Again reads the job file with the run's own overrides (the newest done run,
    // from Start Training, overrode no epochs).
    const job = JSON.parse(readFileSync(s.ws.jobFile, 'utf8')) as { epochs: number; data: { mnist: Record<string, unknown> } };
    writeFileSync(s.ws.jobFile, `${JSON.stringify({ ...job, data: { mnist: { ...job.data.mnist, trainSize: 512, testSize: 128 } }, epochs: 100_000 }, null, 2)}\n`);
    const done = new RegExp(`^${s.ws.name} done`);
    await onRow(done, 'Run Again');
    await waitUntil('the run again to show as running', 120_000, async () => await count('running') === 1, 100);
    // While it runs, its row is redrawn as it writes its epochs; a context menu opened on a done run stays
    // open meanwhile, and Run Again picked once (never twice) offers to stop the running one (as Start
    // Training does). Several times, Cancel keeping the running one: before the view redrew only what
    // changed, a pick made while the whole list was being drawn again was lost (the menu closed, nothing
    // ran) about one time in three.
    const epochsWritten = (): number => readRunRecords(runsFolder(s.ws.dir)).records.find((r) => r.status === 'running')?.epochsDone ?? 0;
    const runningRow = async (): Promise<string | undefined> => (await rowTexts(page)).find((t) => t.startsWith(`${s.ws.name} running`));
    const dialog = page.locator('.monaco-dialog-box', { hasText: `Training ${s.ws.name} is still running. Stop it and start another job?` });
    const rounds = 6;
    for (let round = 1; round <= rounds; round++) {
      await openMenu(done);
      const from = epochsWritten();
      const shown = await runningRow();
      await waitUntil(`three more epochs written and the running row redrawn while the menu is open (pick ${round})`, 120_000, async () => epochsWritten() >= from + 3 && await runningRow() !== shown, 50);
      assert.ok(await menu.isVisible(), `pick ${round}: the context menu on the done run closed while the running run wrote epochs ${from + 1}-${epochsWritten()} (its row was "${shown}", now "${await runningRow()}")`);
      if (round === 1) await screenshot(page, 'runs-menu-open-while-running');
      await pick('Run Again');
      await dialog.waitFor({ state: 'visible', timeout: 15_000 }).catch(() => assert.fail(`pick ${round}: Run Again, picked once from the menu, did not run (no 'still running' dialog)`));
      if (round === rounds) break;
      await dialog.getByRole('button', { name: 'Cancel' }).click();
      await dialog.waitFor({ state: 'hidden', timeout: 30_000 });
    }
    await screenshot(page, 'runs-run-again-while-running');
    await dialog.getByRole('button', { name: 'Stop and Start Another' }).click();
    await waitUntil('the first run again cancelled and the second one running', 120_000, async () => await count('cancelled') === 1 && await count('running') === 1, 250);
    // Stop Run from the running row's own menu, open while that row is redrawn with its new epochs.
    const running = new RegExp(`^${s.ws.name} running`);
    await openMenu(running);
    const from = epochsWritten();
    const shown = await runningRow();
    await waitUntil('an epoch written and the running row redrawn while its own menu is open', 120_000, async () => epochsWritten() > from && await runningRow() !== shown, 50);
    assert.ok(await menu.isVisible(), `the context menu on the running run closed while it wrote epochs ${from + 1}-${epochsWritten()} (its row was "${shown}", now "${await runningRow()}")`);
    await screenshot(page, 'runs-menu-open-on-running');
    await pick('Stop Run');
    await waitUntil('both runs again cancelled, the two done runs untouched', 120_000, async () => await count('cancelled') === 2 && await count('running') === 0 && await count('done') === 2, 250);
    await screenshot(page, 'runs-run-again-stopped');
  });
});

/**
 * The OOM-hints user path in a real VS Code (code-server 4.100.3 + Debian chromium), on a
 * throwaway copy of examples/pytorch/train_with_hazards.py: the Problems panel lists the
 * `accumulated-loss` and `missing-no-grad` findings on the lines that hold those hazards, the
 * hover explains the memory effect and links the rule's docs, and the quick fix from Ctrl+.
 * rewrites the line, the finding goes away and the saved file holds the fixed line.
 *
 * The expected lines and the fix come from the example's own text, not from numbers written
 * here, so that editing the example does not silently test something else.
 * With UPDATE_SCREENSHOTS=1 the Problems panel + quick-fix menu screenshot is also copied to
 * docs/images/oom-hints.png.
 */
import * as assert from 'node:assert/strict';
import { copyFileSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { repoRoot } from '../paths';
import { rule as accumulatedLoss } from '../../src/lint/rules/accumulatedLoss';
import { exampleName, hazardLines, hazardsExample, showProblems, waitForProblem } from './hazards';
import { CodeServer, copyWorkspace, launchBrowser, openFileFromExplorer, openWorkbench, packageVsix, problemRows, reportFailure, resetResults, runDir, screenshot, since, waitUntil } from './harness';

/** Focuses the editor of the open file and puts the cursor at line:column with Go to Line (Ctrl+G). */
async function goTo(page: Page, line: number, column: number): Promise<void> {
  // Clicking the active tab focuses its editor wherever it is scrolled (a click into the text
  // could land on a hover or outside the scrolled lines).
  await page.locator('.tabs-container .tab.active').first().click({ timeout: 15_000 });
  await page.locator('.editor-instance .monaco-editor.focused').first().waitFor({ timeout: 15_000 });
  await page.keyboard.press('Control+G');
  const input = page.locator('.quick-input-widget input');
  await input.waitFor({ timeout: 15_000 });
  await input.fill(`:${line}:${column}`);
  await page.keyboard.press('Enter');
  await page.locator('.quick-input-widget').waitFor({ state: 'hidden', timeout: 15_000 });
  // The status bar shows the cursor: "Ln 57, Col 13".
  await page.locator('.statusbar-item', { hasText: `Ln ${line}, Col ${column}` }).first().waitFor({ timeout: 15_000 });
}

/** Plain text of markdown as the hover renders it (backticks and emphasis gone). */
function rendered(md: string): string {
  return md.replace(/`/g, '').replace(/\*\*/g, '');
}

describe('e2e: OOM hints in code-server', function () {
  this.timeout(180_000);
  const timings: Record<string, number> = {};
  const expected = hazardLines(readFileSync(hazardsExample, 'utf8'));
  let browser: Browser | undefined;
  let server: CodeServer | undefined;
  let page: Page | undefined;
  let consoleLines: string[] = [];
  let work: string;
  let workspace: string;
  /** Set when the first test saw the findings: the later ones build on them and fail fast without. */
  let findingsListed = false;

  before(async () => {
    resetResults();
    work = runDir();
    workspace = copyWorkspace('oom', [hazardsExample]);
    browser = await launchBrowser();
    server = await CodeServer.start({ name: 'oom', fakeGpus: true, vsix: packageVsix(work).vsix, workspace });
  });

  after(async () => {
    await page?.close().catch(() => undefined);
    await browser?.close().catch(() => undefined);
    await server?.stop();
    rmSync(work, { recursive: true, force: true });
    rmSync(workspace, { recursive: true, force: true });
    console.log(`      e2e OOM-hints timings (ms): ${JSON.stringify(timings)}`);
  });

  afterEach(async function () {
    await reportFailure(this, page, server, consoleLines);
  });

  it('lists accumulated-loss and missing-no-grad in the Problems panel on the hazard lines', async () => {
    const t0 = performance.now();
    const opened = await openWorkbench(browser!, server!, workspace);
    page = opened.page;
    consoleLines = opened.console;
    await openFileFromExplorer(page, exampleName);
    await showProblems(page);
    const acc = await waitForProblem(page, 'accumulated-loss');
    const noGrad = await waitForProblem(page, 'missing-no-grad');
    timings.openToFindingsMs = since(t0);
    await screenshot(page, 'oom-hints-problems-panel');
    assert.equal(acc.line, expected.accumulated.line, `accumulated-loss is on line ${acc.line}, the "${expected.accumulated.target} += ${expected.accumulated.value}" line is ${expected.accumulated.line}: ${acc.text}`);
    assert.equal(acc.column, expected.accumulated.column, `accumulated-loss starts at column ${acc.column}: ${acc.text}`);
    assert.equal(noGrad.line, expected.noGrad.line, `missing-no-grad is on line ${noGrad.line}, evaluate()'s model call is on line ${expected.noGrad.line}: ${noGrad.text}`);
    assert.match(acc.text, new RegExp(`\`?${expected.accumulated.value}\`? is stored in \`?${expected.accumulated.target}\`?`), 'the accumulated-loss message does not name the loss and its accumulator');
    findingsListed = true;
  });

  it('explains the memory effect and links the rule docs in the hover', async () => {
    assert.ok(page && findingsListed, 'needs the workbench with the findings from the first test');
    const { line, column } = expected.accumulated;
    await goTo(page, line, column + 2);
    // editor.action.showHover (Ctrl+K Ctrl+I) at the cursor: the keyboard way to the same hover a mouse gets.
    await page.keyboard.press('Control+K');
    await page.keyboard.press('Control+I');
    const firstSentence = rendered(accumulatedLoss.explanation).split('. ')[0];
    const hover = page.locator('.monaco-hover:not(.hidden)', { hasText: firstSentence.slice(0, 60) });
    await hover.first().waitFor({ state: 'visible', timeout: 30_000 });
    const text = (await hover.first().innerText()).replace(/\s+/g, ' ');
    assert.ok(text.includes(firstSentence), `the hover lacks the memory effect "${firstSentence}":\n${text}`);
    // No DOM types in this project: the anchors are read through a minimal shape.
    type Anchor = { getAttribute(name: string): string | null; textContent: string | null };
    const links = await hover.first().locator('a').evaluateAll((els) => els.map((e) => {
      const a = e as unknown as Anchor;
      return `${a.getAttribute('data-href') ?? ''} ${a.getAttribute('href') ?? ''} ${a.textContent ?? ''}`;
    }));
    assert.ok(links.some((l) => l.includes(accumulatedLoss.docsUrl)), `no link to ${accumulatedLoss.docsUrl} in the hover; links: ${JSON.stringify(links)}`);
    await screenshot(page, 'oom-hints-hover');
    await page.keyboard.press('Escape');
    await hover.first().waitFor({ state: 'hidden', timeout: 15_000 });
  });

  it('applies the quick fix from Ctrl+.: the finding goes away and the saved file holds the fixed line', async () => {
    assert.ok(page && findingsListed, 'needs the workbench with the findings from the first test');
    const { line, column, target, value, indent } = expected.accumulated;
    const fixedLine = `${indent}${target} += ${value}.item()`;
    const title = `Store \`${value}.item()\` instead`;
    await goTo(page, line, column + 2);
    const t0 = performance.now();
    await page.keyboard.press('Control+.');
    const action = page.locator('.action-widget .monaco-list-row', { hasText: title });
    await action.first().waitFor({ state: 'visible', timeout: 30_000 });
    timings.quickFixMenuMs = since(t0);
    const shot = await screenshot(page, 'oom-hints-quick-fix-menu');
    if (process.env.UPDATE_SCREENSHOTS === '1') copyFileSync(shot, join(repoRoot, 'docs', 'images', 'oom-hints.png'));
    // The menu blocks the pointer until the mouse moves (context-view-pointerBlock): choose the
    // action with the keyboard, as a user of Ctrl+. does.
    const focusedAction = page.locator('.action-widget .monaco-list-row.action.focused', { hasText: title });
    for (let i = 0; i < 10 && !(await focusedAction.isVisible()); i++) await page.keyboard.press('ArrowDown');
    await focusedAction.waitFor({ timeout: 5_000 });
    await page.keyboard.press('Enter');
    await page.locator('.action-widget').waitFor({ state: 'hidden', timeout: 15_000 });
    // The editor holds the fix, the finding leaves the Problems panel while the other stays.
    await page.locator('.editor-instance .view-line', { hasText: `${target} += ${value}.item()` }).first().waitFor({ timeout: 30_000 });
    await waitUntil('the accumulated-loss row to leave the Problems panel', 60_000, async () => {
      const rows = await problemRows(page!);
      return rows.some((r) => r.text.includes('missing-no-grad')) && !rows.some((r) => r.text.includes('accumulated-loss'));
    });
    timings.fixToProblemGoneMs = since(t0);
    await page.keyboard.press('Control+S');
    const onDisk = join(workspace, exampleName);
    const saved = await waitUntil(`${onDisk} to hold "${fixedLine.trim()}" after Ctrl+S`, 30_000, () => {
      const lines = readFileSync(onDisk, 'utf8').split('\n');
      return lines[line - 1] === fixedLine ? lines : undefined;
    });
    await page.locator('.tabs-container .tab.dirty', { hasText: exampleName }).waitFor({ state: 'detached', timeout: 15_000 });
    await screenshot(page, 'oom-hints-fixed-and-saved');
    // Only that line changed.
    const original = readFileSync(hazardsExample, 'utf8').split('\n');
    const changed = saved.map((l, i) => (l === original[i] ? -1 : i + 1)).filter((i) => i > 0);
    assert.deepEqual(changed, [line], `the quick fix changed other lines than ${line}: ${JSON.stringify(changed)}`);
    assert.equal(saved.length, original.length);
  });
});

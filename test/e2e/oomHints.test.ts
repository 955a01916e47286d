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
import { copyFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { repoRoot } from '../paths';
import { rule as accumulatedLoss } from '../../src/lint/rules/accumulatedLoss';
import { exampleName, expectHazardsListed, hazardsExample, hazardsSuite, type HazardLines } from './hazards';
import { problemRows, screenshot, since, waitUntil } from './harness';
import { pressInEditor } from './flows';

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
  const s = hazardsSuite('oom');
  /** Where the example's hazards are: set by the first test. */
  let expected!: HazardLines;
  /** Set when the first test saw the findings: the later ones build on them and fail fast without. */
  let findingsListed = false;

  it('lists accumulated-loss and missing-no-grad in the Problems panel on the hazard lines', async () => {
    const t0 = performance.now();
    const page = await s.open(exampleName);
    const listed = await expectHazardsListed(page);
    s.timings.openToFindingsMs = since(t0);
    await screenshot(page, 'oom-hints-problems-panel');
    expected = listed.expected;
    const acc = listed.accumulated;
    assert.equal(acc.column, expected.accumulated.column, `accumulated-loss starts at column ${acc.column}: ${acc.text}`);
    assert.match(acc.text, new RegExp(`\`?${expected.accumulated.value}\`? is stored in \`?${expected.accumulated.target}\`?`), 'the accumulated-loss message does not name the loss and its accumulator');
    findingsListed = true;
  });

  it('explains the memory effect and links the rule docs in the hover', async () => {
    const page = s.page;
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
    const page = s.page;
    assert.ok(page && findingsListed, 'needs the workbench with the findings from the first test');
    const { line, column, target, value, indent } = expected.accumulated;
    const fixedLine = `${indent}${target} += ${value}.item()`;
    const title = `Store \`${value}.item()\` instead`;
    await goTo(page, line, column + 2);
    const t0 = performance.now();
    await page.keyboard.press('Control+.');
    const action = page.locator('.action-widget .monaco-list-row', { hasText: title });
    await action.first().waitFor({ state: 'visible', timeout: 30_000 });
    s.timings.quickFixMenuMs = since(t0);
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
      const rows = await problemRows(page);
      return rows.some((r) => r.text.includes('missing-no-grad')) && !rows.some((r) => r.text.includes('accumulated-loss'));
    });
    s.timings.fixToProblemGoneMs = since(t0);
    await pressInEditor(page, 'Control+S');
    const onDisk = join(s.ws.dir, exampleName);
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

/**
 * The example with GPU-memory hazards that the OOM-hints tests open, and where its hazards are,
 * read from its own text (so that editing the example cannot silently test something else);
 * the suite those tests share (code-server with fake GPUs on a copy of the example), and their
 * first step (open it, see both findings on their lines in the Problems panel).
 */
import * as assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { repoRoot } from '../paths';
import { codeServerSuite, type CodeServerSuite } from './flows';
import { copyWorkspace, openFileFromExplorer, problemRows, waitUntil, type ProblemRow } from './harness';

export const exampleName = 'train_with_hazards.py';
export const hazardsExample = join(repoRoot, 'examples', 'pytorch', exampleName);

/** Where the example's hazards are, read from its text (1-based lines and columns, as the Problems panel shows them). */
export interface HazardLines {
  /** `epoch_loss += loss`: the accumulated-loss line. */
  accumulated: { line: number; column: number; target: string; value: string; indent: string };
  /** `logits = model(x...)` inside `def evaluate`: the missing-no-grad line. */
  noGrad: { line: number };
}

export function hazardLines(text: string): HazardLines {
  const lines = text.split('\n');
  const acc = lines.findIndex((l) => /^\s*\w+\s*\+=\s*loss\s*$/.test(l));
  assert.ok(acc >= 0, `${exampleName} no longer has a "<name> += loss" line; the e2e test needs one`);
  const [, indent, target, value] = /^(\s*)(\w+)\s*\+=\s*(\w+)\s*$/.exec(lines[acc])!;
  const evaluate = lines.findIndex((l) => /^def evaluate\(/.test(l));
  assert.ok(evaluate >= 0, `${exampleName} no longer has "def evaluate("; the e2e test needs it`);
  const call = lines.findIndex((l, i) => i > evaluate && /=\s*model\(/.test(l));
  assert.ok(call > evaluate, `${exampleName}'s evaluate() no longer calls model(...); the e2e test needs it`);
  return { accumulated: { line: acc + 1, column: indent.length + 1, target, value, indent }, noGrad: { line: call + 1 } };
}

/**
 * Registers a code-server suite with the fake GPUs on a throwaway workspace holding a copy of
 * the example (the repository's file is never touched); `restricted` opens it in Restricted Mode.
 */
export function hazardsSuite(name: string, options: { restricted?: boolean } = {}): CodeServerSuite<{ dir: string }> {
  return codeServerSuite(name, () => ({ dir: copyWorkspace(name, [hazardsExample]) }), { fakeGpus: true, restricted: options.restricted });
}

/**
 * Opens the example from the explorer and the Problems panel (Ctrl+Shift+M), waits for the
 * `accumulated-loss` and `missing-no-grad` rows and checks that they are on the example's hazard
 * lines. Returns the rows and where the hazards are.
 */
export async function expectHazardsListed(page: Page): Promise<{ accumulated: ProblemRow; noGrad: ProblemRow; expected: HazardLines }> {
  const expected = hazardLines(readFileSync(hazardsExample, 'utf8'));
  await openFileFromExplorer(page, exampleName);
  await showProblems(page);
  const accumulated = await waitForProblem(page, 'accumulated-loss');
  const noGrad = await waitForProblem(page, 'missing-no-grad');
  const { target, value } = expected.accumulated;
  assert.equal(accumulated.line, expected.accumulated.line, `accumulated-loss is on line ${accumulated.line}, the "${target} += ${value}" line is ${expected.accumulated.line}: ${accumulated.text}`);
  assert.equal(noGrad.line, expected.noGrad.line, `missing-no-grad is on line ${noGrad.line}, evaluate()'s model call is on line ${expected.noGrad.line}: ${noGrad.text}`);
  return { accumulated, noGrad, expected };
}

/** Waits until the Problems panel lists a finding of `ruleId` and returns its row. */
async function waitForProblem(page: Page, ruleId: string, timeoutMs = 60_000): Promise<ProblemRow> {
  return waitUntil(`a "${ruleId}" row in the Problems panel`, timeoutMs, async () => (await problemRows(page)).find((r) => r.text.includes(ruleId)));
}

/** Opens the Problems panel (Ctrl+Shift+M) and waits for it. */
async function showProblems(page: Page): Promise<void> {
  await page.keyboard.press('Control+Shift+M');
  await page.locator('.markers-panel').waitFor({ timeout: 30_000 });
}


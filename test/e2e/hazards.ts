/**
 * The example with GPU-memory hazards that the OOM-hints tests open, and where its hazards are,
 * read from its own text (so that editing the example cannot silently test something else).
 */
import * as assert from 'node:assert/strict';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { repoRoot } from '../paths';
import { problemRows, waitUntil, type ProblemRow } from './harness';

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

/** Waits until the Problems panel lists a finding of `ruleId` and returns its row. */
export async function waitForProblem(page: Page, ruleId: string, timeoutMs = 60_000): Promise<ProblemRow> {
  return waitUntil(`a "${ruleId}" row in the Problems panel`, timeoutMs, async () => (await problemRows(page)).find((r) => r.text.includes(ruleId)));
}

/** Opens the Problems panel (Ctrl+Shift+M) and waits for it. */
export async function showProblems(page: Page): Promise<void> {
  await page.keyboard.press('Control+Shift+M');
  await page.locator('.markers-panel').waitFor({ timeout: 30_000 });
}


/**
 * "GPU Workbench: Find Max Batch Size" in a real VS Code (code-server 4.100.3 + Debian chromium):
 * a throwaway workspace holds a job whose model needs 64 MiB per example per tensor
 * (test/fixtures/jobs/big-activations.*), so the wasm backend really runs out of its 4 GiB heap
 * at a batch of about ten. The search runs from F1 on the open job file; its trials that run out
 * of memory do so in their own processes, the editor stays up, and the result message's
 * "Set batchSize" edits the job file in its editor, which Ctrl+Z takes back.
 */
import * as assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fixtures } from '../paths';
import { codeServerSuite, pressInEditor, processesWith, runCommand, toastSettled, waitForNotification, notification } from './flows';
import { openFileFromExplorer, screenshot, since, waitUntil } from './harness';

const jobName = 'big-activations.job.json';

function batchWorkspace(): { dir: string; jobFile: string; original: string } {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-workbench-e2e-ws-batch-'));
  for (const f of [jobName, 'big-activations.model.js', 'narrow.data.js']) copyFileSync(join(fixtures, 'jobs', f), join(dir, f));
  const jobFile = join(dir, jobName);
  return { dir, jobFile, original: readFileSync(jobFile, 'utf8') };
}

describe('e2e: Find Max Batch Size', function () {
  this.timeout(420_000);
  const s = codeServerSuite('find-batch-size', batchWorkspace);
  let found: number | undefined;

  it('searches from F1 on the open job: trials that run out of memory end in their own processes, and the message names the largest batch', async () => {
    const page = await s.open(jobName);
    await openFileFromExplorer(page, jobName);
    const t0 = performance.now();
    await runCommand(page, 'GPU Workbench: Find Max Batch Size');
    await waitForNotification(page, /Find Max Batch Size: big-activations\.job\.json/, 60_000);
    await screenshot(page, 'find-batch-size-running');
    const text = await waitForNotification(page, /Largest batch that fits for big-activations: \d+ per device, measured on CPU \(wasm\)\./, 360_000);
    s.timings.searchMs = since(t0);
    found = Number(/: (\d+) per device/.exec(text)![1]);
    s.timings.foundBatchSize = found;
    assert.ok(found >= 2 && found < 64, `the wasm heap holds a batch of about ten of this model, the search says ${found}: "${text}"`);
    await toastSettled(page, 'Largest batch that fits');
    await screenshot(page, 'find-batch-size-found');
    // The editor survived the out-of-memory trials, and none of their processes is left.
    assert.equal(await page.locator('.monaco-workbench').count(), 1);
    await waitUntil('the search process gone (it outlives none of its trial workers)', 10_000, () => processesWith(s.ws.jobFile, '--find-batch-size').length === 0);
  });

  it('"Set batchSize" writes the batch into the job file\'s editor, and Ctrl+Z takes it back', async () => {
    const page = s.page;
    assert.ok(page && found !== undefined, 'needs the search result');
    await notification(page, 'Largest batch that fits').locator('.monaco-button', { hasText: `Set "batchSize": ${found}` }).click({ timeout: 30_000 });
    const expected = s.ws.original.replace('"batchSize": 2,', `"batchSize": ${found},`);
    assert.notEqual(expected, s.ws.original);
    const state = await waitUntil(`${jobName} saved with batchSize ${found} or its tab dirty`, 30_000, async () =>
      readFileSync(s.ws.jobFile, 'utf8') === expected ? 'saved' : (await page.locator('.tabs-container .tab.dirty', { hasText: jobName }).count()) > 0 && 'dirty');
    await screenshot(page, 'find-batch-size-set');
    if (state === 'dirty') await pressInEditor(page, 'Control+S');
    await waitUntil(`${jobName} on disk to hold batchSize ${found}`, 30_000, () => readFileSync(s.ws.jobFile, 'utf8') === expected);
    await pressInEditor(page, 'Control+Z');
    const undone = await waitUntil(`${jobName} saved as the original or its tab dirty`, 30_000, async () =>
      readFileSync(s.ws.jobFile, 'utf8') === s.ws.original ? 'saved' : (await page.locator('.tabs-container .tab.dirty', { hasText: jobName }).count()) > 0 && 'dirty');
    if (undone === 'dirty') await pressInEditor(page, 'Control+S');
    await waitUntil(`${jobName} on disk to be the original again`, 30_000, () => readFileSync(s.ws.jobFile, 'utf8') === s.ws.original);
  });
});

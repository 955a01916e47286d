/**
 * "GPU Workbench: Find Max Batch Size" on a torchrun job in a real VS Code (code-server 4.100.3 +
 * Debian chromium), issue #15 item 2: a throwaway workspace holds test/fixtures/torchrun/batchsize's
 * grow.py (16 MiB of activations an example) and a one-process job that names its batch size
 * option ("batchSize": {"arg": "--batch-size"}), with the workspace setting
 * gpuWorkbench.findBatchSize.memoryLimitMiB = 700. The search runs from F1 on the open job file,
 * each trial a real torchrun run stopped by the companion after 2 steps, until torch's CPU
 * allocator fails under the limit; "Set --batch-size N" writes the value into the job's args in
 * its editor, and Ctrl+Z takes it back. Skipped, saying why, when /usr/bin/python3 has no torch.
 */
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fixtures } from '../paths';
import { codeServerSuite, notification, pressInEditor, processesWith, runCommand, toastSettled, waitForNotification } from './flows';
import { openFileFromExplorer, screenshot, since, waitUntil } from './harness';

const jobName = 'grow.job.json';
const probe = spawnSync('/usr/bin/python3', ['-c', 'import torch'], { encoding: 'utf8', timeout: 60_000 });
const torchMissing = probe.status !== 0 ? '/usr/bin/python3 has no torch' : undefined;

function torchrunWorkspace(): { dir: string; jobFile: string; original: string } {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-workbench-e2e-ws-torchbatch-'));
  copyFileSync(join(fixtures, 'torchrun', 'batchsize', 'grow.py'), join(dir, 'grow.py'));
  const jobFile = join(dir, jobName);
  const original = '{\n  "kind": "torchrun",\n  "script": "grow.py",\n  "args": ["--batch-size", "16", "--steps", "100"],\n  "nprocPerNode": 1,\n  "python": "/usr/bin/python3",\n  "batchSize": { "arg": "--batch-size" }\n}\n';
  writeFileSync(jobFile, original);
  mkdirSync(join(dir, '.vscode'));
  writeFileSync(join(dir, '.vscode', 'settings.json'), JSON.stringify({ 'gpuWorkbench.findBatchSize.memoryLimitMiB': 700 }));
  return { dir, jobFile, original };
}

(torchMissing ? describe.skip : describe)(`e2e: Find Max Batch Size on a torchrun job${torchMissing ? ` (skipped: ${torchMissing})` : ''}`, function () {
  this.timeout(480_000);
  const s = codeServerSuite('torchrun-find-batch-size', torchrunWorkspace);
  let found: number | undefined;

  it('searches from F1 on the open torchrun job: real torchrun trials under the memory limit, and the message names the largest batch', async () => {
    const page = await s.open(jobName);
    await openFileFromExplorer(page, jobName);
    const t0 = performance.now();
    await runCommand(page, 'GPU Workbench: Find Max Batch Size');
    await waitForNotification(page, /Find Max Batch Size: grow\.job\.json/, 60_000);
    await screenshot(page, 'torchrun-find-batch-size-running');
    const text = await waitForNotification(page, /Largest batch that fits for grow: \d+ \(--batch-size \d+\), measured on CPU \(torch [^)]+\) \(each process limited to 700 MiB\)\./, 420_000);
    s.timings.searchMs = since(t0);
    found = Number(/fits for grow: (\d+) /.exec(text)![1]);
    s.timings.foundBatchSize = found;
    // 16 MiB an example on top of 250-500 MiB that torch and the script hold, under 700 MiB.
    assert.ok(found >= 12 && found <= 28, `found ${found}: "${text}"`);
    await toastSettled(page, 'Largest batch that fits');
    await screenshot(page, 'torchrun-find-batch-size-found');
    await waitUntil('the search and its torchrun trials gone', 10_000, () => processesWith(s.ws.jobFile, '--find-batch-size').length === 0 && processesWith('grow.py', 'gpu_workbench.run').length === 0);
  });

  it('"Set --batch-size N" writes the batch into the job\'s args in its editor, and Ctrl+Z takes it back', async () => {
    const page = s.page;
    assert.ok(page && found !== undefined, 'needs the search result');
    await notification(page, 'Largest batch that fits').locator('.monaco-button', { hasText: `Set --batch-size ${found}` }).click({ timeout: 30_000 });
    const expected = s.ws.original.replace('"--batch-size", "16"', `"--batch-size", "${found}"`);
    assert.notEqual(expected, s.ws.original);
    const state = await waitUntil(`${jobName} saved with --batch-size ${found} or its tab dirty`, 30_000, async () =>
      readFileSync(s.ws.jobFile, 'utf8') === expected ? 'saved' : (await page.locator('.tabs-container .tab.dirty', { hasText: jobName }).count()) > 0 && 'dirty');
    await screenshot(page, 'torchrun-find-batch-size-set');
    if (state === 'dirty') await pressInEditor(page, 'Control+S');
    await waitUntil(`${jobName} on disk to hold --batch-size ${found}`, 30_000, () => readFileSync(s.ws.jobFile, 'utf8') === expected);
    await pressInEditor(page, 'Control+Z');
    const undone = await waitUntil(`${jobName} saved as the original or its tab dirty`, 30_000, async () =>
      readFileSync(s.ws.jobFile, 'utf8') === s.ws.original ? 'saved' : (await page.locator('.tabs-container .tab.dirty', { hasText: jobName }).count()) > 0 && 'dirty');
    if (undone === 'dirty') await pressInEditor(page, 'Control+S');
    await waitUntil(`${jobName} on disk to be the original again`, 30_000, () => readFileSync(s.ws.jobFile, 'utf8') === s.ws.original);
  });
});

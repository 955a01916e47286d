/**
 * Per-rank memory of a torchrun job in a real VS Code (code-server + Debian chromium, no
 * nvidia-smi): a throwaway copy of test/fixtures/torchrun/rankmemory/leak.py, whose rank 0 sums
 * a held-out loss tensor every step (`total += held_out`, RSS +5 MiB a step), run for a long time
 * from "Start Training…" with "2 CPU workers". The GPU panel's job card shows each rank's RSS
 * and its curve, then "Memory grows every optimizer step on rank 0 (…)" with a link that opens
 * leak.py (no editor showed it, so the OOM hints had not checked it); then the link names the
 * accumulated-loss finding, and opens leak.py at its line. The task's terminal shows
 * the per-rank memory line. Stop Training ends the job. Skipped, saying why, when
 * /usr/bin/python3 has no torch.
 */
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fixtures } from '../paths';
import { openGpuView, screenshot, since, waitUntil } from './harness';
import { codeServerSuite, processesWith, runCommand, startTraining, waitForNotification } from './flows';

const torchPython = '/usr/bin/python3';
const torchProbe = spawnSync(torchPython, ['-c', 'import torch.distributed as d; print(d.is_gloo_available())'], { encoding: 'utf8', timeout: 60_000 });
const torchMissing = torchProbe.error ? `${torchPython} cannot be run (${(torchProbe.error as NodeJS.ErrnoException).code})`
  : torchProbe.status !== 0 ? `${torchPython} has no torch: apt-get install -y python3-torch` : !torchProbe.stdout.includes('True') ? 'torch has no gloo backend' : undefined;

/** The leaking script and its job (300 steps of 0.2 s: long enough to watch, stopped by the test). */
function leakWorkspace(): { dir: string; script: string; leakLine: number } {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-workbench-e2e-ws-rankmemory-'));
  const script = join(dir, 'leak.py');
  copyFileSync(join(fixtures, 'torchrun', 'rankmemory', 'leak.py'), script);
  const job = JSON.parse(readFileSync(join(fixtures, 'torchrun', 'rankmemory', 'leak.job.json'), 'utf8')) as Record<string, unknown>;
  job.args = ['--steps', '300', '--sleep', '0.2', '--leak'];
  writeFileSync(join(dir, 'leak.job.json'), `${JSON.stringify(job, null, 2)}\n`);
  mkdirSync(join(dir, '.vscode'));
  writeFileSync(join(dir, '.vscode', 'settings.json'), `${JSON.stringify({ 'terminal.integrated.gpuAcceleration': 'off' }, null, 2)}\n`);
  const leakLine = readFileSync(script, 'utf8').split('\n').findIndex((l) => l.trim() === 'total += held_out') + 1;
  assert.ok(leakLine > 0);
  return { dir, script, leakLine };
}

(torchMissing ? describe.skip : describe)(`e2e: per-rank memory of a torchrun job in code-server${torchMissing ? ` (skipped: ${torchMissing})` : ''}`, function () {
  this.timeout(400_000);
  const s = codeServerSuite('rankmemory', leakWorkspace);

  it('the GPU panel shows each rank\'s RSS curve and that rank 0 grows every step, linked to the accumulated-loss finding, and the task terminal shows the memory line', async () => {
    const t0 = performance.now();
    const page = await s.open('leak.job.json');
    await startTraining(page, 'leak.job.json', undefined, '2 CPU workers');

    const web = await openGpuView(page);
    const job = web.locator('section.job');
    const rows = job.locator('.rank-row');
    await waitUntil('both ranks\' memory in the job card', 180_000, async () => (await rows.count()) === 2, 500);
    s.timings.toRanksMs = since(t0);
    assert.match(await rows.nth(0).locator('.rank-label').innerText(), /^rank 0 · CPU$/);
    assert.match(await rows.nth(1).locator('.rank-value').innerText(), /^RSS \d+\.\d MiB · step \d+$/);

    const growth = job.locator('.job-growth');
    await growth.waitFor({ timeout: 180_000 });
    s.timings.toGrowthMs = since(t0);
    assert.match(await growth.innerText(), /^Memory grows every optimizer step on rank 0 \(RSS \+\d+\.\d MiB over steps 3-\d+\)/);
    assert.doesNotMatch(await growth.innerText(), /rank 1/, 'rank 1 does not leak');
    assert.match(await rows.nth(0).getAttribute('class') ?? '', /growing/);
    const link = growth.locator('a.job-finding');
    // No editor shows the script, so the OOM hints have not checked it: the link opens it first.
    await waitUntil('the link to open the script', 60_000, async () => (await link.isVisible()) && (await link.innerText()) === 'Open leak.py to check it for the cause', 500);
    await link.click();
    await page.locator('.tabs-container .tab.active', { hasText: 'leak.py' }).waitFor({ timeout: 30_000 });
    await waitUntil('the link to the linter\'s finding', 60_000, async () => (await link.isVisible()) && (await link.innerText()) === `accumulated-loss at leak.py:${s.ws.leakLine}`, 500);
    s.timings.toFindingMs = since(t0);
    await screenshot(page, 'rankmemory-growth');

    // The task terminal: the CLI's per-rank memory line.
    await waitUntil('the memory line in the task terminal', 60_000, async () => {
      const text = (await page.locator('.terminal-wrapper.active .xterm-rows').allInnerTexts().catch(() => [] as string[])).join('\n');
      return /memory: rank 0 step \d+ cpu rss \d+\.\d MiB, step peak \d+\.\d MiB \| rank 1 step/.test(text.replace(/\s*\n\s*/g, ' '));
    }, 500);

    // The link opens the script at the finding's line.
    await link.click();
    await page.locator('.tabs-container .tab.active', { hasText: 'leak.py' }).waitFor({ timeout: 30_000 });
    await waitUntil(`the cursor on line ${s.ws.leakLine}`, 30_000, async () => (await page.locator('.statusbar-item', { hasText: /^Ln \d+, Col \d+/ }).first().innerText().catch(() => '')).startsWith(`Ln ${s.ws.leakLine},`), 250);
    await screenshot(page, 'rankmemory-finding-opened');

    await runCommand(page, 'GPU Workbench: Stop Training');
    await waitForNotification(page, 'Training leak (torchrun) was stopped.', 60_000);
    await waitUntil('no process of the job to remain', 30_000, () => processesWith(s.ws.script).length === 0, 250);
  });
});

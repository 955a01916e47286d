/**
 * The training user path in a real VS Code (code-server 4.100.3 + Debian chromium), on a
 * throwaway copy of examples/mnist/mnist-ddp.job.json with small sizes: F1 → "GPU Workbench:
 * Start Training…" → the job file, `ddp`, "2 CPU workers" (the server has no nvidia-smi) → the
 * progress notification advances through `epoch … · step …` and the job ends with its test
 * accuracy. A second, longer run is stopped with "GPU Workbench: Stop Training", and then no
 * training process of this server (the installed extension's trainingHost.js: the host and its
 * workers) is left.
 */
import * as assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import type { Page } from 'playwright-core';
import { screenshot, since, waitUntil } from './harness';
import { codeServerSuite, notification, pickItem, processesWith, quickPick, quickPickLabels, runCommand, toastSettled, trainingWorkspace, waitForNotification } from './flows';

describe('e2e: training in code-server', function () {
  this.timeout(300_000);
  // Small enough for a loaded 2-core box; 2 epochs so the progress text is seen to advance.
  const s = codeServerSuite('training', () => trainingWorkspace({ trainSize: 4000, testSize: 1000, epochs: 2 }));
  /** Set when the first run ended well: the stop test builds on the same page. */
  let firstRunDone = false;

  /** The installed extension's training host processes (host and workers) of this test's server only. */
  const trainingProcesses = () => processesWith(s.server!.extensionsDir, 'trainingHost.js');

  /** F1 → Start Training… → job file → ddp → 2 CPU workers; returns when the device pick is accepted. */
  async function startTraining(p: Page, shots: string): Promise<void> {
    await runCommand(p, 'GPU Workbench: Start Training');
    await quickPick(p, 'Start Training (1/3): job file');
    assert.ok((await quickPickLabels(p)).includes('mnist-ddp.job.json'), `the job pick lacks mnist-ddp.job.json: ${JSON.stringify(await quickPickLabels(p))}`);
    await screenshot(p, `${shots}-pick-job`);
    await pickItem(p, 'mnist-ddp.job.json');

    await quickPick(p, 'Start Training (2/3): strategy');
    await screenshot(p, `${shots}-pick-strategy`);
    await pickItem(p, /^ddp$/);

    // No nvidia-smi on the server's PATH: the devices are counts of CPU workers.
    await quickPick(p, 'Start Training (3/3): devices', 30_000);
    const devices = await quickPickLabels(p);
    assert.ok(devices.includes('2 CPU workers'), `the device pick lacks "2 CPU workers": ${JSON.stringify(devices)}`);
    await screenshot(p, `${shots}-pick-devices`);
    await pickItem(p, '2 CPU workers');
    await p.locator('.quick-input-widget').waitFor({ state: 'hidden', timeout: 30_000 });
  }

  it('Start Training… runs the MNIST job with ddp on 2 CPU workers: progress, then the test accuracy', async () => {
    const t0 = performance.now();
    const page = await s.open('mnist-ddp.job.json');
    await startTraining(page, 'training');

    // The progress notification "Training mnist-ddp" reports "epoch 1/2 · step 3/16 · loss …".
    const progress = notification(page, `Training ${s.ws.name}`);
    const step = /epoch (\d+)\/(\d+) · step (\d+)\/(\d+)/;
    const first = await waitUntil('the progress notification to show "epoch … · step …"', 120_000, async () => {
      const text = (await progress.innerText().catch(() => '')).replace(/\s+/g, ' ');
      return step.exec(text)?.[0];
    }, 200);
    await toastSettled(page, `Training ${s.ws.name}`);
    await screenshot(page, 'training-progress');
    assert.equal(step.exec(first)![2], '2', `the progress counts 2 epochs: ${first}`);
    s.timings.toFirstStepMs = since(t0);

    // The end: "Training mnist-ddp finished: test accuracy 91.20% after 2 epochs (…)".
    const done = await waitForNotification(page, new RegExp(`Training ${s.ws.name} finished: test accuracy`), 240_000);
    await toastSettled(page, 'finished: test accuracy');
    await screenshot(page, 'training-finished');
    s.timings.toFinishedMs = since(t0);
    const m = /test accuracy ([\d.]+)% after (\d+) epochs?/.exec(done);
    assert.ok(m, `unreadable end message: ${done}`);
    assert.ok(Number(m[1]) > 50, `test accuracy ${m[1]}% is not above 50%: ${done}`);
    assert.equal(m[2], '2', `the job ran 2 epochs: ${done}`);
    // The host and its workers end with the job.
    await waitUntil('the training processes to exit after the job', 30_000, () => trainingProcesses().length === 0, 250);
    firstRunDone = true;
  });

  it('Stop Training ends a running job and leaves no worker process', async () => {
    assert.ok(s.page && firstRunDone, 'needs the workbench and the finished first run');
    // A longer job: the same file with many epochs.
    const job = JSON.parse(readFileSync(s.ws.jobFile, 'utf8')) as { epochs: number };
    job.epochs = 50;
    writeFileSync(s.ws.jobFile, `${JSON.stringify(job, null, 2)}\n`);
    // The first run's end message stays in the toasts for a while; close every notification.
    await runCommand(s.page, 'Notifications: Clear All Notifications');

    const t0 = performance.now();
    await startTraining(s.page, 'training-stop');
    const progress = notification(s.page, `Training ${s.ws.name}`);
    await waitUntil('the second run\'s progress to show "epoch … · step …" of 50 epochs', 120_000, async () => {
      const text = (await progress.innerText().catch(() => '')).replace(/\s+/g, ' ');
      return /epoch \d+\/50 · step \d+\/\d+/.test(text);
    }, 200);
    // While it runs: the training host and one worker per device, all from this server's extension.
    const running = await waitUntil('the training host and its 2 workers to be running', 30_000, () => {
      const ps = trainingProcesses();
      return ps.length >= 3 ? ps : undefined;
    }, 250);
    await screenshot(s.page, 'training-stop-running');

    await runCommand(s.page, 'GPU Workbench: Stop Training');
    await waitForNotification(s.page, `Training ${s.ws.name} was stopped.`, 60_000);
    await toastSettled(s.page, 'was stopped.');
    await screenshot(s.page, 'training-stopped');
    s.timings.stopMs = since(t0);
    // The host and both workers: none may outlive the stopped job (the extension kills them after a grace period).
    await waitUntil(`no training process of this server to remain (were: ${running.map((p) => `${p.pid} ${p.args}`).join('; ')})`, 30_000, () => trainingProcesses().length === 0, 250);
  });
});

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { HostToPanelMessage, PanelJob } from '../../src/common/protocol';
import { repoRoot } from '../paths';
import { canvasPixelsOfColor, eventually, openPanel, pageSuite, startPanelServer, type PanelPage } from './harness';
import { history, noDriver, rtx3090, t0, twoGpus } from './samples';
import { dark, highContrast, light } from './themes';

const init: HostToPanelMessage = { type: 'gpu/init', snapshot: twoGpus(), history: history(), inventory: [], hints: [], historyMinutes: 10 };

function job(extra: Partial<PanelJob> = {}): PanelJob {
  const steps = Array.from({ length: 40 }, (_, i) => i + 1);
  return {
    name: 'mnist-ddp',
    strategy: 'ddp',
    state: 'running',
    status: 'epoch 1/2 · step 40/63 · loss 0.517 · 4,150 samples/s',
    workers: [{ rank: 0, gpuIndex: 0, device: 'gpu:0 (CUDA_VISIBLE_DEVICES=0)' }, { rank: 1, gpuIndex: 1, device: 'gpu:1 (CUDA_VISIBLE_DEVICES=1)' }],
    lossSteps: steps,
    loss: steps.map((s) => 2.3 * Math.exp(-s / 12) + 0.3),
    ...extra,
  };
}

function mark(p: PanelPage, index: number) {
  return p.page.locator(`vscode-collapsible.device[data-key="${rtx3090(index, 0).uuid}"] .job-mark`);
}

/** Canvas pixels of the job's loss chart close to the given #rrggbb. */
async function lossPixels(p: PanelPage, hex: string): Promise<number> {
  return canvasPixelsOfColor(p.page, 'section.job canvas', hex);
}

describe('GPU panel: the training job (headless Chromium)', function () {
  this.timeout(60_000);
  const suite = pageSuite(startPanelServer);

  async function panel(theme = dark): Promise<PanelPage> {
    const p = suite.track(await openPanel(suite.browser, suite.server, theme));
    await p.waitForPosted('panel/ready');
    return p;
  }

  it('marks the job\'s GPUs with its name and rank and draws its loss curve in --vscode-charts-orange, in three themes', async () => {
    for (const theme of [dark, light, highContrast]) {
      const p = await panel(theme);
      await p.send(init);
      assert.equal(await p.page.locator('section.job').isVisible(), false, 'no job section before any job');
      await p.send({ type: 'gpu/job', job: job() });
      await mark(p, 0).waitFor();
      assert.equal(await mark(p, 0).textContent(), 'training: mnist-ddp, rank 0');
      assert.equal(await mark(p, 1).textContent(), 'training: mnist-ddp, rank 1');
      const section = p.page.locator('section.job');
      assert.equal(await section.locator('.job-title').textContent(), 'Training mnist-ddp (ddp)');
      assert.equal(await section.locator('.job-status').textContent(), 'epoch 1/2 · step 40/63 · loss 0.517 · 4,150 samples/s');
      assert.equal(await section.locator('.job-workers').textContent(), 'rank 0 · GPU 0, rank 1 · GPU 1');
      assert.equal(await section.locator('.job-chart').getAttribute('data-points'), '40');
      const orange = theme.vars['--vscode-charts-orange'];
      await eventually(async () => await lossPixels(p, orange) > 30, `${theme.name}: the loss line is drawn in ${orange}`);
      mkdirSync(join(repoRoot, 'test-results'), { recursive: true });
      await p.page.screenshot({ path: join(repoRoot, 'test-results', `gpu-panel-job-${theme.name}.png`), fullPage: true });
    }
  });

  it('updates in place as steps arrive, marks a card that appears later, and clears the marks when the job ends', async () => {
    const p = await panel();
    await p.send({ type: 'gpu/init', snapshot: { ...twoGpus(), devices: [rtx3090(0, 7270)] }, history: [], inventory: [], hints: [], historyMinutes: 10 });
    await p.send({ type: 'gpu/job', job: job({ lossSteps: [1, 2], loss: [2.3, 2.1] }) });
    await mark(p, 0).waitFor();
    // A mark on the element proves that the next message updates it rather than rebuilding it.
    await p.page.evaluate(`document.querySelector('section.job').dataset.probe = 'kept'`);
    await p.send({ type: 'gpu/job', job: job() });
    await eventually(async () => (await p.page.locator('section.job .job-chart').getAttribute('data-points')) === '40', 'the chart has the 40 points');
    assert.equal(await p.page.locator('section.job').getAttribute('data-probe'), 'kept', 'the same section element, updated in place');
    // GPU 1 reports only now: its card is marked as soon as it is built.
    await p.send({ type: 'gpu/snapshot', snapshot: twoGpus(t0 + 1000), hints: [] });
    await mark(p, 1).waitFor();
    assert.equal(await mark(p, 1).textContent(), 'training: mnist-ddp, rank 1');
    await p.send({ type: 'gpu/job', job: job({ state: 'done', status: 'done · test accuracy 93.46%' }) });
    await mark(p, 0).waitFor({ state: 'hidden' });
    assert.equal(await mark(p, 1).isVisible(), false);
    assert.equal(await p.page.locator('section.job .job-status').textContent(), 'done · test accuracy 93.46%');
    assert.equal(await p.page.locator('section.job .job-state').textContent(), 'done');
  });

  it('shows, in a worker\'s process row, what TF.js holds on the GPU beside nvidia-smi\'s figure, and drops it when the job ends', async () => {
    const p = await panel();
    await p.send(init);
    const row = (pid: number) => p.page.locator(`tr.process[data-pid="${pid}"]`);
    await row(4242).waitFor();
    const webgpu = (bytes0: number | null) => job({ workers: [
      { rank: 0, gpuIndex: 0, device: 'gpu:0 (webgpu adapter NVIDIA GeForce RTX 3090)', pid: 4242, deviceBytes: bytes0 },
      { rank: 1, gpuIndex: 1, device: 'gpu:1 (webgpu adapter NVIDIA GeForce RTX 3090)', pid: 5100, deviceBytes: 96 * 2 ** 20 },
    ] });
    await p.send({ type: 'gpu/job', job: webgpu(null) });
    // Rank 0 has not reported yet: its row is marked as the job's, nvidia-smi's figure alone.
    await eventually(async () => (await row(4242).getAttribute('class'))?.includes('job-worker') === true, 'rank 0\'s row is marked');
    assert.equal(await row(4242).locator('.held').isVisible(), false);
    assert.equal(await row(5100).locator('.mem').innerText(), '2800 MiB\nTF.js 96 MiB');
    await p.send({ type: 'gpu/job', job: webgpu(412 * 2 ** 20) });
    await eventually(async () => (await row(4242).locator('.held').textContent()) === 'TF.js 412 MiB', 'rank 0\'s TF.js bytes');
    assert.equal(await row(4242).locator('.total').textContent(), '6912 MiB');
    assert.match(await row(4242).locator('.mem').getAttribute('title') ?? '', /^rank 0 of mnist-ddp\. nvidia-smi: the whole process .*TF\.js: the device buffers its backend holds, by its own count \(412 MiB\)/);
    // Another process on the same GPU is not the job's.
    assert.equal((await row(4250).getAttribute('class'))?.includes('job-worker'), false);
    // It survives the next sample, and ends with the job.
    await p.send({ type: 'gpu/snapshot', snapshot: twoGpus(t0 + 1000), hints: [] });
    assert.equal(await row(4242).locator('.held').textContent(), 'TF.js 412 MiB');
    await p.send({ type: 'gpu/job', job: { ...webgpu(412 * 2 ** 20), state: 'done', status: 'done' } });
    await eventually(async () => !(await row(4242).locator('.held').isVisible()), 'the TF.js figure gone after the job');
    assert.equal(await row(4242).locator('.mem').innerText(), '6912 MiB');
  });

  it('shows a CPU-only job without a GPU, and ignores a malformed job message', async () => {
    const p = await panel();
    await p.send({ type: 'gpu/init', snapshot: noDriver, history: [], inventory: [], hints: [], historyMinutes: 10 });
    await p.send({ type: 'gpu/job', job: { name: 'bad' } as unknown as PanelJob });
    await p.send({ type: 'gpu/job', job: job({ workers: [{ rank: 0, gpuIndex: null, device: 'cpu' }, { rank: 1, gpuIndex: null, device: 'cpu' }] }) });
    await p.page.locator('section.job').waitFor();
    assert.equal(await p.page.locator('section.job .job-title').textContent(), 'Training mnist-ddp (ddp)');
    assert.equal(await p.page.locator('section.job .job-workers').textContent(), '2 CPU workers');
    assert.equal(await p.page.locator('.job-mark:visible').count(), 0);
  });
});

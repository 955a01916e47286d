import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { HostToPanelMessage, PanelJob, PanelSlurmNodes } from '../../src/common/protocol';
import type { JobNodes } from '../../src/gpu/slurmNodes';
import { fixtures, repoRoot } from '../paths';
import { eventually, openPanel, pageSuite, startPanelServer, type PanelPage } from './harness';
import { t0, twoGpus } from './samples';
import { dark, highContrast, light, type Theme } from './themes';

/**
 * Recorded on the test cluster (test/support/slurmCluster.ts): a 2-node job holding 2 GPUs per node, the fake
 * nvidia-smi's `mig` scenario first on PATH (GPU 1 of each node without a process), n2 drained (`bad gpu`)
 * while the job ran; readJobNodes' result as the poller sends it.
 */
const recorded = JSON.parse(readFileSync(join(fixtures, 'slurm', 'job-nodes-22.05.json'), 'utf8')) as { info: { nodes: string }; seen: JobNodes };
const nodes: PanelSlurmNodes = { ...recorded.seen, nodeList: recorded.info.nodes, takenAt: t0 };
const init: HostToPanelMessage = { type: 'gpu/init', snapshot: twoGpus(), history: [], inventory: [], hints: [], historyMinutes: 10 };

function slurmJob(extra: Partial<PanelJob> = {}): PanelJob {
  return { name: 'ddp-slurm', strategy: 'torchrun', state: 'running', status: 'torchrun · 1 process', workers: [], lossSteps: [], loss: [], ...extra };
}

function rgb(hex: string): string {
  const n = parseInt(hex.slice(1), 16);
  return `rgb(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255})`;
}

/** An element's computed style property, read in the page. */
function css(p: PanelPage, selector: string, prop: string): Promise<string> {
  return p.page.evaluate<string>(`getComputedStyle(document.querySelector(${JSON.stringify(selector)})).${prop}`);
}

describe('GPU panel: a Slurm job\'s nodes (headless Chromium)', function () {
  this.timeout(90_000);
  const suite = pageSuite(startPanelServer);

  async function panel(theme: Theme): Promise<PanelPage> {
    const p = suite.track(await openPanel(suite.browser, suite.server, theme));
    await p.waitForPosted('panel/ready');
    await p.send(init);
    return p;
  }

  it('draws a block per node with its GPUs and processes, the drained node as such with sinfo\'s reason, and the idle GPUs pointed out, in dark, light and high-contrast themes', async () => {
    for (const theme of [dark, light, highContrast]) {
      const p = await panel(theme);
      await p.send({ type: 'gpu/job', job: slurmJob({ slurmNodes: nodes }) });
      const section = p.page.locator('section.slurm-nodes');
      await section.waitFor();
      assert.equal(await section.locator('.slurm-title').textContent(), 'Slurm job 1', theme.name);
      assert.match(await section.locator('.slurm-meta').textContent() ?? '', /^n\[1-2\] · read \d\d:\d\d:\d\d with srun --overlap$/);
      const node = (name: string) => section.locator(`.slurm-node[data-node="${name}"]`);
      assert.deepEqual(await section.locator('.slurm-node').evaluateAll((els) => els.map((e) => (e as unknown as { dataset: { node: string } }).dataset.node)), ['n1', 'n2']);
      // n1 runs: its state, no down note; GPU 0 with its memory and two processes.
      assert.equal(await node('n1').locator('.slurm-node-state').textContent(), 'mixed');
      assert.equal(await node('n1').locator('.slurm-node-down').count(), 0);
      const gpu0 = node('n1').locator('.slurm-gpu[data-gpu="0"]');
      assert.equal(await gpu0.locator('.slurm-gpu-name').textContent(), 'GPU 0 · NVIDIA A100-SXM4-40GB');
      assert.equal(await gpu0.locator('.slurm-mem-text').textContent(), '19.2 / 40.0 GiB');
      assert.equal(await gpu0.locator('.slurm-mem').getAttribute('aria-valuenow'), '48');
      assert.equal(await gpu0.locator('.slurm-mem-fill').evaluate((e) => (e as unknown as { style: { width: string } }).style.width), '47.9%');
      assert.deepEqual(await gpu0.locator('.slurm-proc').allTextContents(), ['PID 7731 · python · 9766 MiB', 'PID 7790 · tritonserver · —']);
      assert.equal(await gpu0.getAttribute('data-idle'), null, 'GPU 0 has processes: not idle');
      // The drained node: said so, with the reason sinfo gives, in the theme's error colour.
      assert.equal(await node('n2').getAttribute('data-unavailable'), '');
      assert.equal(await node('n2').locator('.slurm-node-down').textContent(), 'Slurm marks this node draining: bad gpu');
      assert.equal(await css(p, '.slurm-node[data-node="n2"]', 'borderTopColor'), rgb(theme.vars['--vscode-errorForeground']), theme.name);
      assert.equal(await css(p, '.slurm-node[data-node="n2"] .slurm-node-down', 'color'), rgb(theme.vars['--vscode-errorForeground']));
      // Idle GPUs of the allocation: GPU 1 on each node, in the summary and on the GPU itself, with the warning colour.
      assert.equal(await section.locator('.slurm-idle-summary').textContent(), '2 allocated GPUs of the job sit idle (no process, under 5 % utilisation): n1 GPU 1, n2 GPU 1');
      const idle1 = node('n1').locator('.slurm-gpu[data-gpu="1"]');
      assert.equal(await idle1.getAttribute('data-idle'), '');
      assert.equal(await idle1.locator('.slurm-idle').textContent(), 'Idle: allocated to the job, yet no process runs on it');
      assert.equal(await css(p, '.slurm-node[data-node="n1"] .slurm-gpu[data-gpu="1"] .slurm-idle', 'borderLeftColor'), rgb(theme.vars['--vscode-editorWarning-foreground']));
      assert.equal(await css(p, '.slurm-node[data-node="n1"] .slurm-gpu[data-gpu="0"] .slurm-mem-fill', 'backgroundColor'), rgb(theme.vars['--vscode-charts-blue']));
      mkdirSync(join(repoRoot, 'test-results'), { recursive: true });
      await section.screenshot({ path: join(repoRoot, 'test-results', `gpu-panel-slurm-nodes-${theme.name}.png`) });
    }
  });

  it('shows a down node that did not answer the probe, and srun\'s error when a probe fails; the section goes when the job ends', async () => {
    const p = await panel(dark);
    const down = { node: 'n3', state: 'down*', reason: 'Not responding', unavailable: true };
    await p.send({ type: 'gpu/job', job: slurmJob({ slurmNodes: { ...nodes, nodeList: 'n[1-3]', unavailable: [...nodes.unavailable, down], error: 'srun: error: Task launch for StepId=1.3 failed on node n3: Communication connection failure' } }) });
    const section = p.page.locator('section.slurm-nodes');
    const n3 = section.locator('.slurm-node[data-node="n3"]');
    await n3.waitFor();
    assert.equal(await n3.locator('.slurm-node-down').textContent(), 'Slurm marks this node down*: Not responding');
    assert.equal(await n3.locator('.slurm-node-error').textContent(), 'It did not answer the probe.');
    assert.equal(await n3.locator('.slurm-gpu').count(), 0);
    assert.match(await section.locator('.slurm-error').textContent() ?? '', /^The probe failed: srun: error: Task launch for StepId=1\.3 failed on node n3/);
    // The job's card stays; the nodes' section goes once the job has ended.
    await p.send({ type: 'gpu/job', job: slurmJob({ state: 'done', status: 'done', slurmNodes: nodes }) });
    await eventually(async () => !(await section.isVisible()), 'no nodes section after the job');
    assert.equal(await p.page.locator('section.job').isVisible(), true);
  });
});

import assert from 'node:assert/strict';
import type { HostToPanelMessage, PanelJob } from '../../src/common/protocol';
import { eventually, openPanel, pageSuite, startPanelServer } from './harness';
import { noDriver } from './samples';
import { dark } from './themes';

const init: HostToPanelMessage = { type: 'gpu/init', snapshot: noDriver, history: [], inventory: [], hints: [], historyMinutes: 10 };

/** A torchrun job's card as torchrunTask.ts sends it: no worker devices, the script's printed losses and metrics. */
function torchrunJob(extra: Partial<PanelJob> = {}): PanelJob {
  return { name: 'mnist-torch', strategy: 'torchrun', state: 'running', status: 'torchrun · 2 processes', workers: [], lossSteps: [], loss: [], ...extra };
}

describe('GPU panel: a torchrun job\'s metrics (headless Chromium)', function () {
  this.timeout(60_000);
  const suite = pageSuite(startPanelServer);

  it('draws the losses the script printed, names them by report, and shows the last of every metric', async () => {
    const p = suite.track(await openPanel(suite.browser, suite.server, dark));
    await p.waitForPosted('panel/ready');
    await p.send(init);
    await p.send({ type: 'gpu/job', job: torchrunJob({ lossAxis: 'report' }) });
    const section = p.page.locator('section.job');
    await section.waitFor();
    assert.equal(await section.locator('.chart-caption').textContent(), 'Training loss: no reports yet');
    assert.equal(await section.locator('.job-metrics').isVisible(), false, 'no metrics line before any metric');
    await p.send({ type: 'gpu/job', job: torchrunJob({ state: 'done', status: 'done', lossAxis: 'report', lossSteps: [1, 2, 3, 4], loss: [0.98, 0.58, 0.45, 0.37], metrics: 'loss 0.3717 · test_loss 0.3143 · test_acc 93.75%' }) });
    await eventually(async () => (await section.locator('.job-chart').getAttribute('data-points')) === '4', 'the chart has the 4 printed losses');
    assert.equal(await section.locator('.chart-caption').textContent(), 'Training loss · last 0.370 at report 4');
    assert.equal(await section.locator('.job-metrics').textContent(), 'Last metrics: loss 0.3717 · test_loss 0.3143 · test_acc 93.75%');
    assert.equal(await section.locator('.job-metrics').isVisible(), true);
  });
});

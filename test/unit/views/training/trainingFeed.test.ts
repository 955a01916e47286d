import assert from 'node:assert/strict';
import type { PanelJob } from '../../../../src/common/protocol';
import { JobFeed } from '../../../../src/views/training/trainingFeed';

function job(extra: Partial<PanelJob> = {}): PanelJob {
  return { name: 'mnist-ddp', strategy: 'ddp', state: 'running', status: '', workers: [{ rank: 0, gpuIndex: 0, device: 'gpu:0' }], lossSteps: [], loss: [], ...extra };
}

describe('training job feed for the GPU panel', () => {
  it('passes state changes at once and coalesces a burst of steps into the newest', async () => {
    const feed = new JobFeed(50);
    const heard: (PanelJob | null)[] = [];
    const done = new Promise<void>((resolve) => feed.onChange((j) => {
      heard.push(j);
      if (j?.loss.length === 20) resolve();
    }));
    feed.set(job({ state: 'starting', workers: [] }));
    feed.set(job());
    for (let i = 1; i <= 20; i++) feed.set(job({ lossSteps: Array.from({ length: i }, (_, k) => k + 1), loss: Array.from({ length: i }, () => 1) }));
    await done;
    assert.deepEqual(heard.slice(0, 2).map((j) => j?.state), ['starting', 'running']);
    assert.ok(heard.length < 10, `${heard.length} messages for 22 updates`);
    assert.equal(feed.current()?.loss.length, 20);
    feed.set(job({ state: 'done' }));
    assert.equal(heard[heard.length - 1]?.state, 'done');
    feed.dispose();
  });
});

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { RankMemory } from '../../src/common/companionProtocol';
import type { HostToPanelMessage, PanelJob } from '../../src/common/protocol';
import type { PanelRank } from '../../src/common/rankMemory';
import { repoRoot } from '../paths';
import { eventually, openPanel, pageSuite, startPanelServer, type PanelPage } from './harness';
import { noGpuTool, t0, twoGpus } from './samples';
import { dark } from './themes';

const MiB = 2 ** 20;
const init: HostToPanelMessage = { type: 'gpu/init', snapshot: twoGpus(), history: [], inventory: [], hints: [], historyMinutes: 10 };

function rank(m: RankMemory, bytes: number[]): PanelRank {
  return { rank: m.rank, pid: m.pid ?? null, device: m.device, latest: m, steps: bytes.map((_, i) => i + 1), bytes };
}

function cudaRank(r: number, pid: number, allocatedMiB: number, reservedMiB: number, step = 20): PanelRank {
  const m: RankMemory = { rank: r, localRank: r, worldSize: 2, step, stepSeconds: 0.2, pid, kind: 'cuda', device: `cuda:${r}`, allocatedBytes: allocatedMiB * MiB, reservedBytes: reservedMiB * MiB, peakAllocatedBytes: (allocatedMiB + 100) * MiB };
  return rank(m, Array.from({ length: step }, () => allocatedMiB * MiB));
}

function cpuRank(r: number, pid: number, rss: number[]): PanelRank {
  const m: RankMemory = { rank: r, localRank: r, worldSize: 2, step: rss.length, stepSeconds: 0.2, pid, kind: 'cpu', device: 'cpu', rssBytes: rss[rss.length - 1], peakRssBytes: rss[rss.length - 1] };
  return rank(m, rss);
}

function torchrunJob(extra: Partial<PanelJob> = {}): PanelJob {
  return { name: 'ddp-train', strategy: 'torchrun', state: 'running', status: 'torchrun · 2 processes', workers: [], lossSteps: [], loss: [], ...extra };
}

describe('GPU panel: per-rank memory of a torchrun job (headless Chromium)', function () {
  this.timeout(60_000);
  const suite = pageSuite(startPanelServer);

  async function panel(): Promise<PanelPage> {
    const p = suite.track(await openPanel(suite.browser, suite.server, dark));
    await p.waitForPosted('panel/ready');
    return p;
  }

  it('splits each rank\'s process bar into allocated, the allocator\'s cache and the rest of nvidia-smi\'s figure, with a legend and a tooltip saying what each is', async () => {
    const p = await panel();
    await p.send(init);
    const row = (pid: number) => p.page.locator(`tr.process[data-pid="${pid}"]`);
    const detail = (pid: number) => p.page.locator(`tr.rank-detail[data-pid="${pid}"]`);
    await row(4242).waitFor();
    // Rank 0 is PID 4242 on GPU 0 (6912 MiB by nvidia-smi), rank 1 PID 5100 on GPU 1 (2800 MiB).
    await p.send({ type: 'gpu/job', job: torchrunJob({
      workers: [{ rank: 0, gpuIndex: 0, device: 'gpu:0', pid: 4242 }, { rank: 1, gpuIndex: 1, device: 'gpu:1', pid: 5100 }],
      ranks: [cudaRank(0, 4242, 2304, 4608), cudaRank(1, 5100, 1024, 2048)],
    }) });
    const bar = detail(4242).locator('.rank-bar');
    await bar.waitFor();
    const widths = async (pid: number) => detail(pid).locator('.rank-bar .seg').evaluateAll((els) => els.map((e) => (e as unknown as { style: { width: string } }).style.width));
    assert.deepEqual(await widths(4242), ['33.33%', '33.33%', '33.33%'], 'allocated 2304, cache 2304, the rest 2304 of 6912 MiB');
    assert.deepEqual(await widths(5100), ['36.57%', '36.57%', '26.86%'], 'allocated 1024, cache 1024, the rest 752 of 2800 MiB');
    assert.equal(await detail(4242).locator('.rank-legend').textContent(), 'rank 0 · allocated 2.25 GiB · reserved 4.50 GiB · context/other 2.25 GiB');
    const tip = await row(4242).locator('.mem').getAttribute('title') ?? '';
    assert.match(tip, /^rank 0 of ddp-train \(cuda:0\), after optimizer step 20:/);
    assert.match(tip, /2\.25 GiB allocated: live tensors/);
    assert.match(tip, /2\.25 GiB reserved but free: the caching allocator's cache/);
    assert.match(tip, /2\.25 GiB the rest of what nvidia-smi counts for the process: the CUDA context/);
    assert.equal(await bar.getAttribute('aria-label'), 'rank 0: allocated 2.25 GiB · reserved 4.50 GiB of 6912 MiB by nvidia-smi');
    // Another process on GPU 0 is not the job's: no bar.
    assert.equal(await detail(4250).isVisible(), false);
    // Each bar sits in the row right under its process's.
    assert.deepEqual(await p.page.locator('vscode-collapsible.device tbody tr').evaluateAll((trs) => trs.map((tr) => `${(tr as unknown as { className: string }).className}:${(tr as unknown as { dataset: { pid: string } }).dataset.pid}`)),
      ['process job-worker:4242', 'rank-detail:4242', 'process:4250', 'process job-worker:5100', 'rank-detail:5100']);
    assert.equal(await detail(4242).getAttribute('title'), tip);
    // A new nvidia-smi reading changes the rest, not allocated or reserved.
    await p.send({ type: 'gpu/snapshot', snapshot: twoGpus(t0 + 1000, 7270, 3072, [{ gpuIndex: 0, pid: 4242, name: '/usr/bin/python3', memoryMiB: 4608 }, { gpuIndex: 1, pid: 5100, name: 'torchrun', memoryMiB: 2800 }]), hints: [] });
    await eventually(async () => (await widths(4242)).join() === '50%,50%,0%', 'reserved is all of nvidia-smi\'s figure now');
    mkdirSync(join(repoRoot, 'test-results'), { recursive: true });
    await p.page.screenshot({ path: join(repoRoot, 'test-results', 'gpu-panel-ranks-cuda.png'), fullPage: true });
    // The job ends: the bars go, nvidia-smi's figure stays.
    await p.send({ type: 'gpu/job', job: torchrunJob({ state: 'done', status: 'done', ranks: [cudaRank(0, 4242, 2304, 4608)] }) });
    await eventually(async () => !(await bar.isVisible()), 'no bar after the job');
    assert.equal(await row(4242).locator('.total').textContent(), '4608 MiB');
  });

  it('shows each CPU rank\'s RSS and its curve in the job\'s card, the growth hint naming the rank, and opens the linter\'s finding', async () => {
    const p = await panel();
    await p.send({ type: 'gpu/init', snapshot: noGpuTool, history: [], inventory: [], hints: [], historyMinutes: 10 });
    const flat = Array.from({ length: 20 }, () => 282 * MiB);
    const growing = Array.from({ length: 20 }, (_, i) => (265 + 5 * i) * MiB);
    const finding = { file: '/work/project/train.py', line: 35, code: 'accumulated-loss', message: 'A tensor with autograd history is accumulated' };
    await p.send({ type: 'gpu/job', job: torchrunJob({
      workers: [{ rank: 0, gpuIndex: null, device: 'cpu', pid: 700 }, { rank: 1, gpuIndex: null, device: 'cpu', pid: 701 }],
      ranks: [cpuRank(0, 700, growing), cpuRank(1, 701, flat)],
      growth: { message: 'Memory grows every optimizer step on rank 0 (RSS +85.0 MiB over steps 3-20): accumulating tensors? Summing a loss tensor (`total += loss`) keeps every step\'s graph alive; add `loss.item()` instead.', ranks: [0], finding },
    }) });
    const section = p.page.locator('section.job');
    await section.locator('.rank-row').first().waitFor();
    const rows = section.locator('.rank-row');
    assert.equal(await rows.count(), 2);
    assert.equal(await rows.nth(0).locator('.rank-label').textContent(), 'rank 0 · CPU');
    assert.equal(await rows.nth(0).locator('.rank-value').textContent(), 'RSS 360.0 MiB · step 20');
    assert.equal(await rows.nth(1).locator('.rank-value').textContent(), 'RSS 282.0 MiB · step 20');
    assert.match(await rows.nth(0).getAttribute('title') ?? '', /RSS \(the process's resident memory\) per optimizer step/);
    assert.equal(await rows.nth(0).locator('svg.rank-curve').getAttribute('data-points'), '20');
    assert.equal(await rows.nth(0).locator('svg.rank-curve').getAttribute('aria-label'), 'rank 0: RSS over 20 optimizer steps, 265.0 MiB to 360.0 MiB');
    // The growing rank's curve climbs from the bottom left to the top right; the flat one is a level line.
    const points = async (i: number) => (await rows.nth(i).locator('polyline').getAttribute('points') ?? '').split(' ').map((xy) => xy.split(',').map(Number));
    const g = await points(0);
    assert.deepEqual([g[0], g[g.length - 1]], [[0, 22], [100, 2]]);
    assert.ok((await points(1)).every(([, y]) => y === 22));
    assert.equal(await rows.nth(0).getAttribute('class'), 'rank-row growing');
    assert.equal(await rows.nth(1).getAttribute('class'), 'rank-row');
    // The hint, its code in <code>, and the link to the finding.
    const hint = section.locator('.job-growth');
    assert.match(await hint.innerText(), /^Memory grows every optimizer step on rank 0 \(RSS \+85\.0 MiB over steps 3-20\)/);
    assert.deepEqual(await hint.locator('code').allTextContents(), ['total += loss', 'loss.item()']);
    const link = hint.locator('a.job-finding');
    assert.equal(await link.textContent(), 'accumulated-loss at train.py:36');
    assert.equal(await link.getAttribute('title'), 'Open /work/project/train.py at line 36: A tensor with autograd history is accumulated');
    await link.click();
    await p.waitForPosted('panel/openFinding');
    assert.deepEqual((await p.posted()).filter((m) => m.type === 'panel/openFinding'), [{ type: 'panel/openFinding', file: finding.file, line: 35 }]);
    mkdirSync(join(repoRoot, 'test-results'), { recursive: true });
    await p.page.screenshot({ path: join(repoRoot, 'test-results', 'gpu-panel-ranks-cpu.png'), fullPage: true });
    // Growth gone (a new run): no hint, no link; without a finding the hint has no link.
    await p.send({ type: 'gpu/job', job: torchrunJob({ ranks: [cpuRank(0, 700, flat)], growth: null }) });
    await eventually(async () => !(await hint.isVisible()), 'no hint');
    assert.equal(await rows.count(), 1);
    await p.send({ type: 'gpu/job', job: torchrunJob({ ranks: [cpuRank(0, 700, growing)], growth: { message: 'grows', ranks: [0] } }) });
    await hint.waitFor();
    assert.equal(await link.isVisible(), false, 'neither a finding nor a script: no link');
    // No finding yet (no editor shows the script): the link opens the script, whose findings the OOM hints then check.
    await p.send({ type: 'gpu/job', job: torchrunJob({ ranks: [cpuRank(0, 700, growing)], growth: { message: 'grows', ranks: [0], script: finding.file } }) });
    await eventually(async () => (await link.isVisible()) && (await link.textContent()) === 'Open train.py to check it for the cause', 'the link to open the script');
    await link.click();
    await p.waitForPosted('panel/openFinding', 2);
    assert.deepEqual((await p.posted()).filter((m) => m.type === 'panel/openFinding')[1], { type: 'panel/openFinding', file: finding.file, line: 0 });
  });
});

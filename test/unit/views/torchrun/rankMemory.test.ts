import assert from 'node:assert/strict';
import type { FormatState } from '../../../../src/cli/train';
import { parseCompanionLine, type RankMemory } from '../../../../src/common/companionProtocol';
import { parsePanelMessage } from '../../../../src/common/protocol';
import {
  bytesText, detectGrowth, growthMessage, rankBarSegments, rankBarTooltip, rankLegend, RankMemoryTracker, ranksByPid, recordForCard, type PanelRank,
} from '../../../../src/common/rankMemory';
import type { JobEvent } from '../../../../src/training/job/events';
import { growthHint, pickGrowthFinding, rankWorkers, terminalMemoryText } from '../../../../src/views/torchrun/rankMemoryFormat';

const MiB = 2 ** 20;

/** A deterministic pseudo-random sequence in [-1, 1) (no Math.random: the tests must not flake). */
function noise(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (x * 1664525 + 1013904223) >>> 0;
    return x / 2 ** 31 - 1;
  };
}

function cpu(rank: number, step: number, rssBytes: number, pid = 1000 + rank): RankMemory {
  return { rank, localRank: rank, worldSize: 2, step, stepSeconds: 0.1, pid, kind: 'cpu', device: 'cpu', rssBytes, peakRssBytes: rssBytes };
}

function cuda(rank: number, step: number, allocatedBytes: number, reservedBytes: number, device = `cuda:${rank}`, pid = 2000 + rank): RankMemory {
  return { rank, localRank: rank, worldSize: 2, step, stepSeconds: 0.1, pid, kind: 'cuda', device, allocatedBytes, reservedBytes, peakAllocatedBytes: allocatedBytes };
}

const steps = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

describe('per-rank memory: growth every step', () => {
  it('finds a real leak under noise: +3 MiB a step on 240 MiB of RSS with ±1 MiB jitter', () => {
    const r = noise(7);
    const s = steps(30);
    const bytes = s.map((i) => 240 * MiB + 3 * MiB * i + r() * MiB);
    const g = detectGrowth(s, bytes);
    assert.ok(g, 'the leak is found');
    assert.equal(g.fromStep, 3, 'the first two steps are warm-up');
    assert.equal(g.toStep, 30);
    assert.ok(g.growthBytes > 75 * MiB && g.growthBytes < 87 * MiB, `about 27 steps of 3 MiB, got ${bytesText(g.growthBytes)}`);
  });

  it('stays silent on flat memory with noise, on one jump, on a warm-up that levelled off, and on a sawtooth', () => {
    const r = noise(11);
    const s = steps(40);
    const cases: Record<string, number[]> = {
      'flat with ±2 MiB of noise': s.map(() => 240 * MiB + 2 * r() * MiB),
      'one jump of 200 MiB at step 20': s.map((i) => 240 * MiB + (i >= 20 ? 200 * MiB : 0) + r() * 0.2 * MiB),
      'warm-up that levelled off': s.map((i) => 240 * MiB + Math.min(i, 12) * 10 * MiB + r() * 0.2 * MiB),
      'sawtooth (grows, then the cache is freed)': s.map((i) => 240 * MiB + (i % 8) * 8 * MiB),
      'slow creep below the noise (100 KiB a step)': s.map((i) => 240 * MiB + i * 100 * 1024),
    };
    for (const [name, bytes] of Object.entries(cases)) assert.equal(detectGrowth(s, bytes), null, name);
  });

  it('needs enough steps: 6 steps of growth after the warm-up are too few, 12 are enough', () => {
    const grow = (n: number) => steps(n).map((i) => 100 * MiB + 4 * MiB * i);
    assert.equal(detectGrowth(steps(8), grow(8)), null);
    assert.ok(detectGrowth(steps(14), grow(14)));
  });

  it('the tracker names the growing rank only, and its message says RSS on CPU and allocated on CUDA', () => {
    const t = new RankMemoryTracker();
    for (let i = 1; i <= 20; i++) {
      t.add(cpu(0, i, 240 * MiB));
      t.add(cpu(1, i, 240 * MiB + 4 * MiB * i));
    }
    const g = t.growth();
    assert.deepEqual(g.map((x) => x.rank), [1]);
    assert.match(growthMessage(g), /^Memory grows every optimizer step on rank 1 \(RSS \+68\.0 MiB over steps 3-20\): accumulating tensors\?/);
    assert.match(growthMessage(g), /`loss\.item\(\)`/);
    const c = new RankMemoryTracker();
    for (let i = 1; i <= 20; i++) c.add(cuda(0, i, 1024 * MiB + 8 * MiB * i, 4096 * MiB));
    assert.match(growthMessage(c.growth()), /on rank 0 cuda:0 \(allocated \+136\.0 MiB over steps 3-20\)/);
  });
});

describe('per-rank memory: curves', () => {
  it('keeps each rank\'s curve, its pid and latest record, by rank', () => {
    const t = new RankMemoryTracker();
    t.add(cpu(1, 1, 10 * MiB));
    t.add(cpu(0, 1, 20 * MiB));
    t.add(cpu(0, 2, 21 * MiB));
    const [r0, r1] = t.ranks();
    assert.equal(r0.rank, 0);
    assert.equal(r0.pid, 1000);
    assert.deepEqual(r0.steps, [1, 2]);
    assert.deepEqual(r0.bytes, [20 * MiB, 21 * MiB]);
    assert.equal(r0.latest.step, 2);
    assert.equal(r1.rank, 1);
  });

  it('thins a long curve to at most its limit, keeping the first and the newest step', () => {
    const t = new RankMemoryTracker(50);
    for (let i = 1; i <= 1000; i++) t.add(cpu(0, i, i * MiB));
    const [r] = t.ranks();
    assert.ok(r.steps.length <= 50, `${r.steps.length} points`);
    assert.ok(r.steps.length >= 25, `${r.steps.length} points`);
    assert.equal(r.steps[0], 1);
    assert.equal(r.steps[r.steps.length - 1], 1000);
    assert.deepEqual(r.steps, [...r.steps].sort((a, b) => a - b));
  });

  it('starts a new curve when a restarted rank counts its steps from 1 again', () => {
    const t = new RankMemoryTracker();
    for (let i = 1; i <= 5; i++) t.add(cpu(0, i, i * MiB));
    t.add(cpu(0, 1, 50 * MiB, 4242));
    const [r] = t.ranks();
    assert.deepEqual(r.steps, [1]);
    assert.equal(r.pid, 4242);
  });
});

describe('per-rank memory: the process bar', () => {
  it('splits nvidia-smi\'s total into allocated, the allocator\'s cache and the rest', () => {
    const [a, c, o] = rankBarSegments(3000, 1000 * MiB, 2000 * MiB);
    assert.deepEqual([a.part, c.part, o.part], ['allocated', 'cached', 'other']);
    assert.deepEqual([a.bytes, c.bytes, o.bytes], [1000 * MiB, 1000 * MiB, 1000 * MiB]);
    assert.ok(Math.abs(a.percent - 100 / 3) < 1e-9 && Math.abs(a.percent + c.percent + o.percent - 100) < 1e-9);
  });

  it('never lets a part go negative or the bar overflow when nvidia-smi sampled less than reserved, and has no rest without its figure', () => {
    const late = rankBarSegments(1500, 1000 * MiB, 2000 * MiB);
    assert.deepEqual(late.map((s) => s.bytes), [1000 * MiB, 1000 * MiB, 0]);
    assert.equal(late.reduce((x, s) => x + s.percent, 0), 100);
    const unknown = rankBarSegments(null, 512 * MiB, 1024 * MiB);
    assert.deepEqual(unknown.map((s) => s.percent), [50, 50, 0]);
  });

  it('says what each part is in its tooltip and legend, and says RSS on a CPU rank', () => {
    const tip = rankBarTooltip(1, 'ddp', cuda(1, 12, 1200 * MiB, 2048 * MiB), 2600);
    assert.match(tip, /^rank 1 of ddp \(cuda:1\), after optimizer step 12:/);
    assert.match(tip, /1\.17 GiB allocated: live tensors \(torch\.cuda\.memory_allocated\)/);
    assert.match(tip, /848\.0 MiB reserved but free: the caching allocator's cache/);
    assert.match(tip, /552\.0 MiB the rest of what nvidia-smi counts for the process: the CUDA context/);
    assert.equal(rankLegend(cuda(1, 12, 1200 * MiB, 2048 * MiB)), 'allocated 1.17 GiB · reserved 2.00 GiB');
    assert.equal(rankLegend(cpu(0, 3, 238.6 * MiB)), 'RSS 238.6 MiB');
    assert.match(rankBarTooltip(0, 'ddp', cpu(0, 3, 238.6 * MiB), null), /RSS 238\.6 MiB \(the process's resident memory on the CPU; no GPU memory\)/);
  });
});

describe('per-rank memory: ranks and processes', () => {
  const rank = (m: RankMemory): PanelRank => ({ rank: m.rank, pid: m.pid ?? null, device: m.device, latest: m, steps: [m.step], bytes: [0] });

  it('matches ranks to processes by pid; a process on two devices gets the record of each card', () => {
    const ranks = [rank(cuda(0, 1, 1, 2, 'cuda:0', 500)), rank(cuda(0, 1, 3, 4, 'cuda:1', 500)), rank(cuda(1, 1, 5, 6, 'cuda:2', 501)), rank(cpu(2, 1, 7, 502))];
    const byPid = ranksByPid(ranks);
    assert.deepEqual([...byPid.keys()], [500, 501, 502]);
    // CUDA_VISIBLE_DEVICES=3,5: the process's cuda:1 is GPU 5.
    assert.equal(recordForCard(byPid.get(500), 5, [3, 5])?.device, 'cuda:1');
    assert.equal(recordForCard(byPid.get(500), 3, [3, 5])?.device, 'cuda:0');
    assert.equal(recordForCard(byPid.get(500), 1, null)?.device, 'cuda:1');
    assert.equal(recordForCard(byPid.get(501), 7, [3, 5])?.device, 'cuda:2', 'one CUDA record: on whichever card lists the process');
    assert.equal(recordForCard(byPid.get(502), 0, null), undefined, 'a CPU rank has no bar on a GPU card');
    assert.equal(ranksByPid([{ ...ranks[0], pid: null }]).size, 0, 'no pid, no match');
  });

  it('gives the job\'s workers the pids the ranks reported and their GPU through CUDA_VISIBLE_DEVICES', () => {
    const planned = [{ rank: 0, gpuIndex: 3, device: 'gpu:3 (CUDA_VISIBLE_DEVICES=3)' }, { rank: 1, gpuIndex: 5, device: 'gpu:5 (CUDA_VISIBLE_DEVICES=5)' }];
    assert.equal(rankWorkers(planned, [], [3, 5]), planned, 'unchanged before any rank reports');
    const w = rankWorkers(planned, [rank(cuda(1, 1, 1, 2, 'cuda:1', 601))], [3, 5]);
    assert.deepEqual(w, [planned[0], { rank: 1, gpuIndex: 5, device: 'gpu:5 (CUDA_VISIBLE_DEVICES=3,5)', pid: 601 }]);
    assert.deepEqual(rankWorkers([], [rank(cpu(0, 1, 1, 700)), rank(cpu(1, 1, 1, 701))], undefined), [
      { rank: 0, gpuIndex: null, device: 'cpu', pid: 700 },
      { rank: 1, gpuIndex: null, device: 'cpu', pid: 701 },
    ]);
  });

  it('the companion\'s memory message carries the pid, and a bad one is refused naming it', () => {
    const line = (pid: unknown) => JSON.stringify({ v: 1, type: 'memory', rank: 0, localRank: 0, worldSize: 1, step: 1, stepSeconds: 0.1, pid, kind: 'cpu', device: 'cpu', rssBytes: 1, peakRssBytes: 1 });
    const ok = parseCompanionLine(line(4321));
    assert.ok(ok.ok && ok.message.type === 'memory' && ok.message.pid === 4321);
    assert.deepEqual(parseCompanionLine(line(-1)), { ok: false, error: 'memory message: pid must be a process id' });
    const old = parseCompanionLine(line(undefined));
    assert.ok(old.ok && old.message.type === 'memory' && !('pid' in old.message), 'an older companion without pid still parses');
  });
});

describe('per-rank memory: the growth hint\'s finding', () => {
  const file = '/w/train.py';
  it('links the OOM-hints server\'s accumulated-loss finding first, and ignores other sources and rules', () => {
    const f = pickGrowthFinding(file, [
      { source: 'Pylance', code: 'accumulated-loss', line: 3, message: 'x' },
      { source: 'GPU Workbench', code: { value: 'missing-no-grad' }, line: 20, message: 'no grad' },
      { source: 'GPU Workbench', code: { value: 'accumulated-loss' }, line: 14, message: 'Accumulated loss: `total += loss` keeps the graph\nmore' },
      { source: 'GPU Workbench', code: 'accumulated-loss', line: 30, message: 'later one' },
      { source: 'GPU Workbench', code: 'data-parallel', line: 1, message: 'dp' },
    ]);
    assert.deepEqual(f, { file, line: 14, code: 'accumulated-loss', message: 'Accumulated loss: `total += loss` keeps the graph' });
    assert.equal(pickGrowthFinding(file, [{ source: 'GPU Workbench', code: 'data-parallel', line: 1, message: 'dp' }]), undefined);
    assert.equal(pickGrowthFinding(file, [{ source: 'GPU Workbench', code: 'missing-no-grad', line: 2, message: 'ng' }])?.code, 'missing-no-grad');
  });

  it('the hint names the ranks and carries the finding, else the script to open; none while nothing grows', () => {
    const t = new RankMemoryTracker();
    for (let i = 1; i <= 20; i++) t.add(cpu(1, i, 200 * MiB + 5 * MiB * i));
    const finding = { file, line: 14, code: 'accumulated-loss', message: 'm' };
    const h = growthHint(t.growth(), finding, file);
    assert.deepEqual(h?.ranks, [1]);
    assert.equal(h?.finding, finding);
    assert.equal(h?.script, undefined, 'the finding is the link');
    assert.equal(growthHint(t.growth(), undefined, file)?.script, file, 'without a finding: the script to open');
    assert.equal(growthHint([], finding, file), null);
  });

  it('the page may ask to open a finding by file and 0-based line, nothing malformed', () => {
    assert.deepEqual(parsePanelMessage({ type: 'panel/openFinding', file, line: 14 }), { type: 'panel/openFinding', file, line: 14 });
    for (const bad of [{ type: 'panel/openFinding', file, line: -1 }, { type: 'panel/openFinding', file: '', line: 1 }, { type: 'panel/openFinding', file, line: 1.5 }, { type: 'panel/openFinding', line: 1 }]) {
      assert.equal(parsePanelMessage(bad), undefined, JSON.stringify(bad));
    }
  });
});

describe('per-rank memory: the task terminal\'s memory line', () => {
  it('prints the CLI\'s line once every rank reported, then at most every 10 s, and the latest before the end', () => {
    let now = 0;
    const state: FormatState = { every: 1, now: () => now };
    const ev = (m: RankMemory): JobEvent => ({ type: 'job/rankMemory', ...m });
    assert.equal(terminalMemoryText(ev(cpu(0, 1, 100 * MiB)), state), undefined, 'rank 1 has not reported yet');
    assert.equal(terminalMemoryText(ev(cpu(1, 1, 110 * MiB)), state), 'memory: rank 0 step 1 cpu rss 100.0 MiB, step peak 100.0 MiB | rank 1 step 1 cpu rss 110.0 MiB, step peak 110.0 MiB');
    now = 9_999;
    assert.equal(terminalMemoryText(ev(cpu(0, 2, 120 * MiB)), state), undefined, 'throttled');
    now = 10_000;
    assert.match(terminalMemoryText(ev(cpu(1, 2, 130 * MiB)), state) ?? '', /^memory: rank 0 step 2 cpu rss 120\.0 MiB.* \| rank 1 step 2 cpu rss 130\.0 MiB/);
    now = 10_500;
    assert.equal(terminalMemoryText(ev(cpu(0, 3, 140 * MiB)), state), undefined);
    const done: JobEvent = { type: 'job/done', metrics: { testAccuracy: NaN, testLoss: NaN, trainLoss: NaN, epochs: 0, steps: 0, samplesPerSecond: NaN, durationMs: 1, torchrun: { command: [], exitCode: 0, problems: 0 } } };
    assert.match(terminalMemoryText(done, state) ?? '', /^memory: rank 0 step 3 cpu rss 140\.0 MiB/, 'the latest, before the end');
    assert.equal(terminalMemoryText(done, state), undefined, 'only once');
    assert.equal(terminalMemoryText({ type: 'job/log', level: 'info', message: 'x' }, state), undefined);
  });
});

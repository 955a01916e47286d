import assert from 'node:assert/strict';
import { delimiter, join } from 'node:path';
import { GpuMonitor, sampleOnce } from '../../../src/gpu/monitor';
import type { GpuHint, GpuSnapshot } from '../../../src/gpu/types';
import { fixtures } from '../../paths';
import { envWithoutNvidiaSmi, fakeEnv, invocations, isAlive, isQueryLoop, waitFor } from './helpers';

const noAmd = join(fixtures, 'amd', 'empty-sysfs');

describe('GpuMonitor with the fake nvidia-smi (real child processes)', function () {
  this.timeout(20000);
  const monitors: GpuMonitor[] = [];
  function monitor(scenario: string, intervalMs = 50, extra: NodeJS.ProcessEnv = {}): { m: GpuMonitor; log: string; seen: GpuSnapshot[]; hints: (readonly GpuHint[])[] } {
    const { env, log } = fakeEnv(scenario, extra);
    const m = new GpuMonitor({ intervalMs, env, sysfsRoot: noAmd, processIntervalMs: 200 });
    monitors.push(m);
    const seen: GpuSnapshot[] = [];
    const hints: (readonly GpuHint[])[] = [];
    m.onSnapshot((s, h) => { seen.push(s); hints.push(h); });
    return { m, log, seen, hints };
  }
  afterEach(() => { for (const m of monitors.splice(0)) m.dispose(); });

  it('streams snapshots of two GPUs from ONE long-lived nvidia-smi, with their processes', async () => {
    const { m, log, seen } = monitor('two-gpus');
    m.acquire('test');
    const good = () => seen.filter((s) => s.devices.length === 2 && !s.error);
    await waitFor(() => good().length >= 5 && good().some((s) => s.processes.length > 0), 'five samples with processes');
    const snaps = good();
    assert.ok(snaps.every((s) => s.source === 'nvidia-smi' && s.devices[0].index === 0 && s.devices[1].index === 1));
    assert.equal(snaps[0].devices[0].name, 'NVIDIA GeForce RTX 3090');
    assert.equal(snaps[0].devices[0].memoryTotalMiB, 24576);
    assert.ok(new Set(snaps.map((s) => s.devices[0].memoryUsedMiB)).size > 1, 'memory moves over time');
    const withProcs = snaps.find((s) => s.processes.length > 0);
    assert.deepEqual(withProcs?.processes.map((p) => [p.gpuIndex, p.pid, p.name]), [[0, 48213, 'python'], [1, 48213, 'python']]);
    assert.equal(m.latest(), seen[seen.length - 1]);
    const calls = invocations(log);
    assert.equal(calls.filter(isQueryLoop).length, 1, 'one query child for the whole stream');
    assert.deepEqual(calls.filter(isQueryLoop)[0].argv, [
      '--query-gpu=timestamp,index,uuid,name,memory.used,memory.reserved,memory.total,utilization.gpu,temperature.gpu,power.draw,power.limit',
      '--format=csv,noheader,nounits', '-lms', '50',
    ]);
    assert.equal(calls.filter((c) => c.argv.includes('--help-query-gpu')).length, 1, 'fields probed once');
    const history = m.history();
    assert.deepEqual(history.map((h) => h.gpuIndex), [0, 1]);
    assert.ok(history[0].t.length >= 5);
  });

  it('samples only while a lease is held, and restarts on configure()', async () => {
    const { m, log, seen } = monitor('one-gpu');
    assert.equal(m.sampling, false);
    const a = m.acquire('panel visible');
    const b = m.acquire('job running');
    await waitFor(() => seen.some((s) => s.devices.length === 1), 'a sample');
    a.dispose();
    assert.equal(m.sampling, true, 'one lease still held');
    b.dispose();
    assert.equal(m.sampling, false);
    const [child] = invocations(log).filter(isQueryLoop);
    await waitFor(() => !isAlive(child.pid), 'the query child to exit when the last lease goes');
    const c = m.acquire('again');
    m.configure({ intervalMs: 80 });
    await waitFor(() => invocations(log).filter(isQueryLoop).some((i) => i.argv.at(-1) === '80'), 'a child with the new interval');
    c.dispose();
  });

  it('marks the snapshot stale when the tool hangs, without blocking', async () => {
    const { m, seen, log } = monitor('hang');
    const t0 = Date.now();
    m.acquire('test');
    const stale = await waitFor(() => seen.find((s) => s.stale), 'a stale snapshot');
    assert.match(stale.error ?? '', /nvidia-smi has printed no sample .*3 intervals of 50 ms/);
    assert.deepEqual(stale.devices, []);
    assert.ok(Date.now() - t0 < 5000);
    assert.equal(invocations(log).filter(isQueryLoop).length, 1, 'a hung tool is not piled up with more children');
  });

  it('keeps the last numbers, marked stale, when the tool goes silent mid-stream', async () => {
    // 200 ms: a loaded test machine must not starve the fake into a stale mark before it hangs.
    const { m, seen, log } = monitor('hang-later', 200);
    m.acquire('test');
    const stale = await waitFor(() => seen.find((s) => s.stale), 'a stale snapshot');
    // Let several more intervals pass (the process poll runs every 200 ms) before counting.
    const polls = (): number => invocations(log).filter((i) => i.argv[0].startsWith('--query-compute-apps')).length;
    const before = polls();
    await waitFor(() => polls() >= before + 2, 'two more process polls');
    const fresh = seen.filter((s) => !s.stale);
    assert.equal(fresh.length, 2);
    assert.deepEqual(stale.devices, fresh[1].devices, 'the numbers shown are the last ones read');
    assert.match(stale.error ?? '', /has printed no sample for/);
    assert.equal(seen.filter((s) => s.stale).length, 1, 'said once, not every interval');
    assert.equal(m.history()[0].t.length, 2, 'a stale snapshot is not a new reading');
  });

  it('restarts a tool that dies, with growing backoff, and shows why', async () => {
    const { m, seen, log } = monitor('die');
    m.acquire('test');
    await waitFor(() => seen.filter((s) => s.retryInMs !== undefined).length >= 3, 'three restarts');
    const failures = seen.filter((s) => s.retryInMs !== undefined);
    assert.deepEqual(failures.slice(0, 3).map((s) => s.retryInMs), [250, 500, 1000]);
    assert.match(failures[0].error ?? '', /nvidia-smi exited with code 1: Unable to determine the device handle/);
    assert.equal(failures[0].stale, true, 'the last numbers are kept, marked stale');
    assert.equal(failures[0].devices.length, 2);
    assert.ok(seen.filter((s) => !s.error && s.devices.length === 2).length >= 3, 'each restart delivers a sample again');
    assert.ok(invocations(log).filter(isQueryLoop).length >= 3);
  });

  it('shows the driver failure in the tool\'s own words', async () => {
    const { m, seen } = monitor('no-driver');
    m.acquire('test');
    const failed = await waitFor(() => seen.find((s) => s.error), 'an error snapshot');
    assert.equal(failed.error, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.");
    assert.deepEqual(failed.devices, []);
    assert.ok((failed.retryInMs ?? 0) > 0, 'it tries again later (the driver may come up)');
  });

  it('says "nvidia-smi not found on PATH" and falls back to source none', async () => {
    const m = new GpuMonitor({ intervalMs: 50, env: envWithoutNvidiaSmi(), sysfsRoot: noAmd });
    monitors.push(m);
    const seen: GpuSnapshot[] = [];
    m.onSnapshot((s) => seen.push(s));
    m.acquire('test');
    const none = await waitFor(() => seen.find((s) => s.source === 'none'), 'a none snapshot');
    assert.match(none.error ?? '', /^nvidia-smi not found on PATH; no AMD GPU in .*empty-sysfs/);
    assert.deepEqual(none.devices, []);
  });

  it('a wrong nvidia-smi path the user set is an error naming that path, not "no GPU"', async () => {
    const m = new GpuMonitor({ intervalMs: 50, env: envWithoutNvidiaSmi(), sysfsRoot: noAmd, nvidiaSmiPath: '/opt/typo/nvidia-smi' });
    monitors.push(m);
    const seen: GpuSnapshot[] = [];
    m.onSnapshot((s) => seen.push(s));
    m.acquire('test');
    const none = await waitFor(() => seen.find((s) => s.source === 'none'), 'a none snapshot');
    assert.equal(none.error, 'nvidia-smi not found at /opt/typo/nvidia-smi: fix gpuWorkbench.gpuMonitor.nvidiaSmiPath / --nvidia-smi');
    assert.equal(none.noGpu, undefined);
    assert.equal(none.badNvidiaSmiPath, '/opt/typo/nvidia-smi');
    // The default looked up on PATH and missing stays the calm "no GPU here".
    const s = await sampleOnce({ env: envWithoutNvidiaSmi(), intervalMs: 100, sysfsRoot: noAmd, nvidiaSmiPath: 'nvidia-smi' });
    assert.equal(s.badNvidiaSmiPath, undefined);
  });

  it('reads AMD cards from sysfs when there is no nvidia-smi', async () => {
    const m = new GpuMonitor({ intervalMs: 50, env: envWithoutNvidiaSmi(), sysfsRoot: join(fixtures, 'amd', 'sysfs') });
    monitors.push(m);
    const seen: GpuSnapshot[] = [];
    m.onSnapshot((s) => seen.push(s));
    m.acquire('test');
    await waitFor(() => seen.length >= 2, 'two AMD readings');
    assert.equal(seen[0].source, 'amd');
    assert.deepEqual(seen[0].devices.map((d) => [d.name, d.memoryUsedMiB, d.memoryTotalMiB]), [['AMD Radeon RX 7900 XTX', 8192, 24560], ['AMD GPU 0x73bf', 1024, 16368]]);
  });

  it('falls back to amd-smi when sysfs has no AMD card, with its processes, and keeps polling it', async () => {
    const env = { ...process.env, PATH: [join(fixtures, 'bin-amd'), '/usr/bin', '/bin'].join(delimiter), FAKE_AMD_SMI_SCENARIO: 'two-gpus' };
    // amd-smi is slow to start (the fake is a Node script): an interval it can keep up with.
    const m = new GpuMonitor({ intervalMs: 1000, env, sysfsRoot: noAmd });
    monitors.push(m);
    const seen: GpuSnapshot[] = [];
    m.onSnapshot((s) => seen.push(s));
    m.acquire('test');
    const s = await waitFor(() => seen.filter((x) => x.devices.length && !x.stale)[1], 'two amd-smi readings');
    assert.equal(s.source, 'amd');
    assert.equal(s.error, undefined);
    assert.deepEqual(s.devices.map((d) => [d.name, d.memoryUsedMiB, d.memoryTotalMiB]), [['AMD Instinct MI300X', 73728, 196592], ['AMD Instinct MI300X', 283, 196592]]);
    assert.deepEqual(s.processes.map((p) => [p.gpuIndex, p.pid, p.name]), [[0, 420157, 'python3'], [0, 420315, 'rvs']]);
  });

  it('drops fields an old driver does not know: reserved is null, the rest is read', async () => {
    const { m, seen, log } = monitor('old-driver');
    m.acquire('test');
    const s = await waitFor(() => seen.find((x) => x.devices.length && !x.error), 'a sample');
    const [d] = s.devices;
    assert.equal(d.memoryReservedMiB, null);
    assert.equal(d.name, 'Tesla V100-SXM2-16GB');
    assert.equal(d.memoryTotalMiB, 16160);
    assert.equal(d.memoryUsedMiB, 6120);
    assert.equal(d.powerLimitW, 300);
    const loops = invocations(log).filter(isQueryLoop);
    assert.equal(loops.length, 1, 'the probe saved a failed start');
    assert.ok(!loops[0].argv[0].includes('memory.reserved'));
    assert.ok(seen.every((x) => !x.error), 'no error shown for a field that was dropped');
  });

  it('drops a field the query rejects even when the help text listed it', async () => {
    const { m, seen, log } = monitor('old-driver', 50, { FAKE_NVIDIA_SMI_HELP: 'new' });
    m.acquire('test');
    const s = await waitFor(() => seen.find((x) => x.devices.length && !x.error), 'a sample');
    assert.equal(s.devices[0].memoryReservedMiB, null);
    assert.equal(s.devices[0].memoryUsedMiB, 6120);
    const loops = invocations(log).filter(isQueryLoop);
    assert.equal(loops.length, 2);
    assert.ok(loops[0].argv[0].includes('memory.reserved') && !loops[1].argv[0].includes('memory.reserved'));
  });

  for (const scenario of ['two-gpus', 'hang']) {
    it(`leaves no child process behind on dispose (${scenario})`, async () => {
      const { m, log, seen } = monitor(scenario);
      m.acquire('test');
      await waitFor(() => invocations(log).some(isQueryLoop) && invocations(log).some((i) => i.argv[0].startsWith('--query-compute-apps')), 'the query and the process poll to start');
      if (scenario === 'two-gpus') await waitFor(() => seen.length > 0, 'a sample');
      const pids = invocations(log).map((i) => i.pid);
      assert.ok(pids.some(isAlive), 'the long-lived child runs');
      m.dispose();
      await waitFor(() => pids.every((p) => !isAlive(p)), 'every fake nvidia-smi to exit', 5000);
      const count = seen.length;
      assert.equal(m.sampling, false);
      assert.equal(seen.length, count);
    });
  }

  it('sampleOnce returns one reading with processes, then stops', async () => {
    const { env, log } = fakeEnv('eight-gpus');
    const s = await sampleOnce({ env, intervalMs: 100, sysfsRoot: noAmd });
    assert.equal(s.devices.length, 8);
    assert.equal(s.processes.length, 8);
    assert.ok(s.processes.every((p) => p.pid === 90210));
    const pids = invocations(log).map((i) => i.pid);
    await waitFor(() => pids.every((p) => !isAlive(p)), 'the children to exit', 5000);
  });

  it('sampleOnce reports a missing tool as source none', async () => {
    const s = await sampleOnce({ env: envWithoutNvidiaSmi(), intervalMs: 100, sysfsRoot: noAmd });
    assert.equal(s.source, 'none');
    assert.match(s.error ?? '', /nvidia-smi not found on PATH/);
  });

  it('hints at the DataParallel imbalance on the eight-GPU machine', async () => {
    const { m, hints } = monitor('eight-gpus');
    m.acquire('test');
    const h = await waitFor(() => hints.find((list) => list.some((x) => x.kind === 'imbalance')), 'an imbalance hint');
    const hint = h.find((x) => x.kind === 'imbalance');
    assert.equal(hint?.gpuIndex, 0);
    assert.match(hint?.message ?? '', /GPU 0 holds the gathered outputs; DistributedDataParallel balances this/);
    assert.deepEqual(m.hints(), hints[hints.length - 1]);
  });
});

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { connect } from 'node:net';
import { join } from 'node:path';
import { companionChannelEnv, parseCompanionLine, type CompanionMessage, type RankMemory } from '../../../../src/common/companionProtocol';
import { formatEvent, type FormatState } from '../../../../src/cli/train';
import type { JobEvent } from '../../../../src/training/job/events';
import { companionPythonPath, openCompanionChannel } from '../../../../src/training/launchers/companionChannel';
import { companionModule, loadTorchrunJob, torchrunCommand } from '../../../../src/training/launchers/torchrun';
import { fixtures, repoRoot } from '../../../paths';

const dir = join(fixtures, 'torchrun', 'companion');
const cli = join(repoRoot, 'out', 'src', 'cli.js');

/** Debian's python3-torch belongs to /usr/bin/python3; the launch tests need it. */
const torchPython = '/usr/bin/python3';
const probe = spawnSync(torchPython, ['-c', 'import torch, torch.distributed; print(torch.__version__, torch.distributed.is_gloo_available())'], { encoding: 'utf8', timeout: 60_000 });
const torchMissing = probe.error ? `${torchPython} cannot be run (${(probe.error as NodeJS.ErrnoException).code})` : probe.status !== 0 ? `${torchPython} has no torch (${probe.stderr.trim().split('\n').pop()}): apt-get install -y python3-torch` : !probe.stdout.includes('True') ? `torch ${probe.stdout.trim()} has no gloo backend` : undefined;

const line = (m: Record<string, unknown>) => JSON.stringify({ v: 1, rank: 0, localRank: 0, worldSize: 2, ...m });
const cpu = (rank: number, step: number, rss: number): RankMemory => ({ rank, localRank: rank, worldSize: 2, step, stepSeconds: 0.01, kind: 'cpu', device: 'cpu', rssBytes: rss, peakRssBytes: rss + 2 ** 20 });

describe('the companion\'s channel', () => {
  it('accepts the messages the companion sends and names what is wrong with any other line', () => {
    const ok = parseCompanionLine(line({ type: 'memory', step: 3, stepSeconds: 0.5, kind: 'cuda', device: 'cuda:1', allocatedBytes: 10, reservedBytes: 20, peakAllocatedBytes: 15 }));
    assert.deepEqual(ok, { ok: true, message: { type: 'memory', rank: 0, localRank: 0, worldSize: 2, step: 3, stepSeconds: 0.5, kind: 'cuda', device: 'cuda:1', allocatedBytes: 10, reservedBytes: 20, peakAllocatedBytes: 15 } });
    const bad = (l: string) => { const r = parseCompanionLine(l); return r.ok ? 'accepted' : r.error; };
    assert.equal(bad('{"v":1,"rank":0,"localRank":0,"worldSize":1,"type":"mem'), 'not JSON');
    assert.equal(bad('[1,2]'), 'not a JSON object');
    assert.equal(bad('{"type":"memory"}'), 'protocol version undefined, expected 1');
    assert.equal(bad(line({ type: 'memory', step: 1, stepSeconds: 0.1, kind: 'cpu', device: 'cpu', rssBytes: -5, peakRssBytes: 1 })), 'memory message: rssBytes and peakRssBytes must be byte counts');
    assert.equal(bad(line({ type: 'memory', step: 1, stepSeconds: 0.1, kind: 'tpu', device: 'xla:0' })), 'memory message: kind must be cuda or cpu, got "tpu"');
    assert.equal(bad(line({ type: 'memory', step: 1, stepSeconds: 0.1, kind: 'cuda', device: 'cpu', allocatedBytes: 1, reservedBytes: 1, peakAllocatedBytes: 1 })), 'memory message: a cuda device is cuda:N');
    assert.equal(bad(line({ type: 'report', rank: -1, metrics: {} })), 'report message: rank, localRank and worldSize must be whole numbers (worldSize at least 1)');
    assert.equal(bad(line({ type: 'report', metrics: { loss: [1] } })), 'report message: metric loss must be a number, string, boolean or null');
    assert.equal(bad(line({ type: 'launch' })), 'unknown message type "launch"');
  });

  it('reads each connection\'s lines, and skips a foreign, a torn and an overlong line with a message instead of failing', async () => {
    const messages: CompanionMessage[] = [];
    const skipped: string[] = [];
    const channel = openCompanionChannel({ onMessage: (m) => messages.push(m), onBadLine: (error, l) => skipped.push(`${error}: ${l.slice(0, 20)}`) });
    const path = channel.env[companionChannelEnv].replace(/^unix:/, '');
    const send = (chunks: string[]) => new Promise<void>((done, failed) => {
      const s = connect(path, () => {
        for (const c of chunks) s.write(c);
        s.end();
      });
      s.on('error', failed);
      s.on('close', () => done());
    });
    await Promise.all([
      // A message split across writes, then a foreign line, then one cut off by the process's end.
      send([line({ type: 'hooks', torch: '1.13', stepHook: 'step-wrap'.slice(0, 4) }).slice(0, 10), `${line({ type: 'hooks', torch: '1.13', stepHook: 'step-wrapper' }).slice(10)}\n`, 'hello world\n', line({ type: 'dropped', count: 1 }).slice(0, 30)]),
      send([`{"v":1,${' '.repeat(70_000)}\n`, `${line({ type: 'dropped', rank: 1, count: 2 })}\n`]),
    ]);
    await channel.close();
    assert.deepEqual(messages.map((m) => [m.type, m.rank]).sort(), [['dropped', 1], ['hooks', 0]]);
    assert.deepEqual(skipped.sort(), [`a line longer than 65536 bytes: ${`{"v":1,${' '.repeat(70_000)}`.slice(0, 20)}`, 'not JSON: hello world', 'not JSON: {"v":1,"rank":0,"loc']);
  });

  it('finds the companion package above the compiled code, as the bundle finds dist/python', () => {
    assert.equal(companionPythonPath(), join(repoRoot, 'python'));
    assert.throws(() => companionPythonPath('/'), /the Python companion \(python\/gpu_workbench\) is not at or above \//);
  });
});

describe('per-rank memory in the text output', () => {
  it('shows one compact line once every rank has reported, then at most every 10 s, and the last one before the end', () => {
    let now = 0;
    const state: FormatState = { every: 1, now: () => now };
    const ev = (m: RankMemory): JobEvent => ({ type: 'job/rankMemory', ...m });
    assert.equal(formatEvent(ev(cpu(0, 1, 100 * 2 ** 20)), state), '', 'rank 1 has not reported yet');
    assert.equal(formatEvent(ev(cpu(1, 1, 110 * 2 ** 20)), state), 'memory: rank 0 step 1 cpu rss 100.0 MiB, step peak 101.0 MiB | rank 1 step 1 cpu rss 110.0 MiB, step peak 111.0 MiB');
    now = 9_000;
    assert.equal(formatEvent(ev(cpu(0, 2, 120 * 2 ** 20)), state), '');
    now = 10_500;
    assert.equal(formatEvent(ev(cpu(1, 2, 130 * 2 ** 20)), state), 'memory: rank 0 step 2 cpu rss 120.0 MiB, step peak 121.0 MiB | rank 1 step 2 cpu rss 130.0 MiB, step peak 131.0 MiB');
    now = 11_000;
    assert.equal(formatEvent(ev({ rank: 0, localRank: 0, worldSize: 2, step: 3, stepSeconds: 0.2, kind: 'cuda', device: 'cuda:0', allocatedBytes: 2 ** 30, reservedBytes: 2 ** 31, peakAllocatedBytes: 1.5 * 2 ** 30 }), state), '');
    const done: JobEvent = { type: 'job/done', metrics: { testAccuracy: NaN, testLoss: NaN, trainLoss: NaN, epochs: 0, steps: 0, samplesPerSecond: NaN, durationMs: 2000, torchrun: { command: [], exitCode: 0, problems: 0 } } };
    assert.equal(formatEvent(done, state), 'memory: rank 0 step 2 cpu rss 120.0 MiB, step peak 121.0 MiB | rank 0 step 3 cuda:0 1024.0 MiB allocated / 2048.0 MiB reserved, step peak 1536.0 MiB | rank 1 step 2 cpu rss 130.0 MiB, step peak 131.0 MiB\ndone: torchrun exited 0 after 2.0 s');
  });
});

describe('torchrun jobs under the companion', function () {
  this.timeout(120_000);

  it('runs each rank as python -m gpu_workbench.run script args under torchrun\'s own -m', () => {
    const spec = loadTorchrunJob(join(dir, 'steps.job.json'));
    const argv = torchrunCommand(spec);
    assert.deepEqual(argv.slice(-5), [...companionModule, join(dir, 'steps.py'), '--lr', '0.1']);
    assert.deepEqual(torchrunCommand(spec, false).slice(-3), [join(dir, 'steps.py'), '--lr', '0.1']);
  });

  it('gpu-workbench train --json prints job/rankMemory for both ranks after every step, and the script\'s own stdout and PYTHONPATH are untouched', async function () {
    if (torchMissing) this.skip();
    const child = spawn(process.execPath, [cli, 'train', join(dir, 'steps.job.json'), '--json'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
    const code = await new Promise<number | null>((r) => child.on('close', r));
    const events = stdout.trim().split('\n').map((l) => JSON.parse(l) as JobEvent);
    const logs = events.flatMap((e) => (e.type === 'job/log' ? [e.message] : []));
    const final = events[events.length - 1];
    assert.equal(final.type, 'job/done', `${stderr}\n${logs.join('\n')}`);
    assert.equal(code, 0);
    const memory = events.flatMap((e) => (e.type === 'job/rankMemory' ? [e] : []));
    for (const rank of [0, 1]) {
      const mine = memory.filter((m) => m.rank === rank);
      assert.deepEqual(mine.map((m) => [m.step, m.localRank, m.worldSize, m.kind, m.device]), [1, 2, 3].map((s) => [s, rank, 2, 'cpu', 'cpu']), JSON.stringify(memory));
      for (const m of mine) assert.ok(m.kind === 'cpu' && m.rssBytes > 20 * 2 ** 20 && m.peakRssBytes >= m.rssBytes && m.stepSeconds > 0, JSON.stringify(m));
    }
    assert.ok(events.findIndex((e) => e.type === 'job/rankMemory') > events.findIndex((e) => e.type === 'job/log' && e.message.includes('-m gpu_workbench.run')));
    // The script's stdout (torchrun passes it through without a rank prefix): exactly its own lines, as a plain
    // `python steps.py --lr 0.1` prints them; nothing of the channel.
    for (const rank of [0, 1]) {
      const first = logs.filter((l) => l.startsWith(`{"rank": ${rank},`));
      assert.equal(first.length, 1, logs.join('\n'));
      assert.deepEqual(JSON.parse(first[0]), { rank, argv: [join(dir, 'steps.py'), '--lr', '0.1'], file: join(dir, 'steps.py'), name: '__main__', helper: 'companion_helper from the job PYTHONPATH' });
      const steps = logs.filter((l) => l.startsWith(`rank ${rank} step `));
      assert.deepEqual(steps.map((l) => l.replace(/loss \d\.\d{4}$/, 'loss x')), [1, 2, 3].map((s) => `rank ${rank} step ${s} loss x`));
    }
    assert.ok(!logs.some((l) => l.includes('"type"') || l.includes('gpu_workbench: skipped')), logs.join('\n'));
  });

  it('gpu-workbench train shows a per-rank memory line for people', async function () {
    if (torchMissing) this.skip();
    const r = await new Promise<{ code: number | null; out: string }>((done) => {
      const child = spawn(process.execPath, [cli, 'train', join(dir, 'steps.job.json')], { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
      child.on('close', (code) => done({ code, out }));
    });
    assert.equal(r.code, 0, r.out);
    const lines = r.out.split('\n').filter((l) => l.startsWith('memory: '));
    assert.ok(lines.length >= 1, r.out);
    assert.match(lines[lines.length - 1], /^memory: rank 0 step 3 cpu rss \d+\.\d MiB, step peak \d+\.\d MiB \| rank 1 step 3 cpu rss \d+\.\d MiB, step peak \d+\.\d MiB$/);
  });

  before(function () {
    if (torchMissing) console.warn(`companion launch tests skipped: ${torchMissing}`);
  });
});

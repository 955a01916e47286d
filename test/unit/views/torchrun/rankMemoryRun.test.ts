import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FormatState } from '../../../../src/cli/train';
import { RankMemoryTracker } from '../../../../src/common/rankMemory';
import { createLinter } from '../../../../src/lint/linter';
import type { JobEvent } from '../../../../src/training/job/events';
import { loadTorchrunJob, runTorchrun } from '../../../../src/training/launchers/torchrun';
import { growthHint, lintSource, pickGrowthFinding, rankWorkers, terminalMemoryText } from '../../../../src/views/torchrun/rankMemoryFormat';
import { fixtures, repoRoot } from '../../../paths';

const dir = join(fixtures, 'torchrun', 'rankmemory');
const torchPython = '/usr/bin/python3';
const probe = spawnSync(torchPython, ['-c', 'import torch, torch.distributed; print(torch.__version__, torch.distributed.is_gloo_available())'], { encoding: 'utf8', timeout: 60_000 });
const torchMissing = probe.error ? `${torchPython} cannot be run (${(probe.error as NodeJS.ErrnoException).code})` : probe.status !== 0 ? `${torchPython} has no torch: apt-get install -y python3-torch` : !probe.stdout.includes('True') ? `torch ${probe.stdout.trim()} has no gloo backend` : undefined;

describe('per-rank memory of a real torchrun job (2 CPU ranks, Debian torch)', function () {
  this.timeout(240_000);

  it('a script whose rank 0 sums a loss tensor every step gets the growth hint naming rank 0, linked to the accumulated-loss finding at that line; rank 1 stays quiet', async function () {
    if (torchMissing) this.skip();
    const spec = loadTorchrunJob(join(dir, 'leak.job.json'));
    const tracker = new RankMemoryTracker();
    const lines: FormatState = { every: 1 };
    const terminal: string[] = [];
    const events: JobEvent[] = [];
    const final = await runTorchrun(spec, (e) => {
      events.push(e);
      if (e.type === 'job/rankMemory') tracker.add(e);
      const text = terminalMemoryText(e, lines);
      if (text !== undefined) terminal.push(text);
    }).finished;
    assert.equal(final.type, 'job/done', JSON.stringify(events.filter((e) => e.type === 'job/log').slice(-10)));

    // Both ranks reported all 30 steps, each with its own process id.
    const ranks = tracker.ranks();
    assert.deepEqual(ranks.map((r) => [r.rank, r.device, r.latest.step, r.steps.length]), [[0, 'cpu', 30, 30], [1, 'cpu', 30, 30]]);
    assert.ok(ranks[0].pid && ranks[1].pid && ranks[0].pid !== ranks[1].pid, JSON.stringify(ranks.map((r) => r.pid)));
    assert.deepEqual(rankWorkers([], ranks, spec.devices), [
      { rank: 0, gpuIndex: null, device: 'cpu', pid: ranks[0].pid },
      { rank: 1, gpuIndex: null, device: 'cpu', pid: ranks[1].pid },
    ]);

    // The growth: rank 0 only (about 4 MiB of activations a step), in RSS words.
    const growth = tracker.growth();
    const rss = (r: number) => ranks[r].bytes.map((b) => (b / 2 ** 20).toFixed(1)).join(' ');
    assert.deepEqual(growth.map((g) => g.rank), [0], `rank 0: ${rss(0)}\nrank 1: ${rss(1)}`);
    assert.ok(growth[0].growthBytes > 50 * 2 ** 20, `rank 0 grew ${growth[0].growthBytes} bytes`);

    // The language server's finding in the script, as VS Code hands its diagnostics over.
    const text = readFileSync(spec.script, 'utf8');
    const linter = await createLinter();
    let findings;
    try {
      findings = linter.lintFile(spec.script, text);
    } finally {
      linter.dispose();
    }
    const diagnostics = findings.map((f) => ({ source: lintSource, code: { value: f.ruleId }, line: f.range.start.line, message: f.message }));
    const finding = pickGrowthFinding(spec.script, diagnostics);
    const leakLine = text.split('\n').findIndex((l) => l.trim() === 'total += held_out');
    assert.ok(leakLine > 0);
    assert.deepEqual(finding && { code: finding.code, line: finding.line }, { code: 'accumulated-loss', line: leakLine }, JSON.stringify(diagnostics));
    const hint = growthHint(growth, finding, spec.script);
    assert.deepEqual(hint?.ranks, [0]);
    assert.match(hint?.message ?? '', /^Memory grows every optimizer step on rank 0 \(RSS \+\d+\.\d MiB over steps 3-30\)/);
    assert.equal(hint?.finding?.file, spec.script);

    // The task terminal's memory line: first when both ranks reported step 1, the last one at step 30 before the end.
    assert.ok(terminal.length >= 2, terminal.join('\n'));
    assert.match(terminal[0], /^memory: rank 0 step 1 cpu rss \d+\.\d MiB, step peak \d+\.\d MiB \| rank 1 step 1 cpu rss /);
    assert.match(terminal[terminal.length - 1], /^memory: rank 0 step 30 cpu rss .* \| rank 1 step 30 cpu rss /);
  });

  it('the CLI runs the same job and warns once, naming the OOM hint at the leaking line; the same script without the leak gets no warning', function () {
    if (torchMissing) this.skip();
    const cli = join(repoRoot, 'out', 'src', 'cli.js');
    const tmp = mkdtempSync(join(tmpdir(), 'gw-growth-'));
    try {
      const train = (job: string) => {
        const r = spawnSync(process.execPath, [cli, 'train', job, '--json', '--runs-dir', join(tmp, 'runs')], { encoding: 'utf8', timeout: 200_000 });
        assert.equal(r.status, 0, r.stderr);
        return r.stdout.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l) as JobEvent);
      };
      const warnings = (events: JobEvent[]) => events.filter((e): e is Extract<JobEvent, { type: 'job/log' }> => e.type === 'job/log' && e.level === 'warning' && e.message.startsWith('Memory grows'));
      const leaking = warnings(train(join(dir, 'leak.job.json')));
      assert.equal(leaking.length, 1, JSON.stringify(leaking));
      const leakLine = readFileSync(join(dir, 'leak.py'), 'utf8').split('\n').findIndex((l) => l.trim() === 'total += held_out') + 1;
      assert.match(leaking[0].message, /^Memory grows every optimizer step on rank 0 \(RSS \+\d+\.\d MiB over steps 3-\d+\)/);
      assert.ok(leaking[0].message.includes(`likely cause, an OOM hint in the script: `) && leaking[0].message.includes(`leak.py:${leakLine}: accumulated-loss: \`held_out\` is stored in \`total\``), leaking[0].message);
      // Without --leak: the same two ranks and steps, no warning.
      const quiet = join(tmp, 'quiet.job.json');
      writeFileSync(quiet, JSON.stringify({ ...JSON.parse(readFileSync(join(dir, 'leak.job.json'), 'utf8')), script: join(dir, 'leak.py'), args: ['--steps', '30'] }));
      const events = train(quiet);
      assert.ok(events.filter((e) => e.type === 'job/rankMemory').length >= 60);
      assert.deepEqual(warnings(events), []);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  before(function () {
    if (torchMissing) console.warn(`per-rank memory run skipped: ${torchMissing}`);
  });
});

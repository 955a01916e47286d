// Tuning trials under the Python companion (issue #15 item 5): a command trial that runs a Python
// script reports through gpu_workbench.report over the channel, its peak memory lands in its record
// and the results, and a trial that runs out of memory ends "out of memory" with its batch size.
import * as assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseCompanionLine } from '../../../src/common/companionProtocol';
import { formatTrialMemory } from '../../../src/common/tuningProtocol';
import type { TuneEvent } from '../../../src/tuning/events';
import { Experiment } from '../../../src/tuning/experiment';
import { parseJobLine } from '../../../src/tuning/jobTrial';
import { readJournal } from '../../../src/tuning/journal';
import { loadSpec } from '../../../src/tuning/spec';
import { companionCommand, configBatchSize, outOfMemoryInText, TrialMemoryPeak } from '../../../src/tuning/trialCompanion';
import { ResultsModel, setupFromSpec } from '../../../src/views/tuning/tuningModel';
import { fixtures, repoRoot } from '../../paths';

const cli = join(repoRoot, 'out', 'src', 'cli.js');
const MiB = 2 ** 20;
/** Debian's python3-torch belongs to /usr/bin/python3 (torch 1.13, CPU). */
const torchPython = '/usr/bin/python3';
const probe = spawnSync(torchPython, ['-c', 'import torch; print(torch.__version__)'], { encoding: 'utf8', timeout: 60_000 });
const torchMissing = probe.error ? `${torchPython} cannot be run` : probe.status !== 0 ? `${torchPython} has no torch: apt-get install -y python3-torch` : undefined;

const m = ['-m', 'gpu_workbench.run'];

describe('tuning trials under the companion: the command', () => {
  it('puts -m gpu_workbench.run before the script of python and torchrun commands', () => {
    assert.deepEqual(companionCommand(['python3', 'train.py', '--lr', '0.1']).args, ['python3', ...m, 'train.py', '--lr', '0.1']);
    assert.deepEqual(companionCommand(['/usr/bin/python3.11', '-u', '-W', 'ignore', '-X', 'dev', 'train.py']).args, ['/usr/bin/python3.11', '-u', '-W', 'ignore', '-X', 'dev', ...m, 'train.py']);
    assert.deepEqual(companionCommand(['python', '-uB', '-Wignore', 'train.py']).args, ['python', '-uB', '-Wignore', ...m, 'train.py']);
    assert.deepEqual(companionCommand(['python', '--', 'train.py']).args, ['python', '--', ...m, 'train.py']);
    assert.deepEqual(companionCommand(['torchrun', '--nproc-per-node', '2', '--standalone', '--max_restarts=0', 'train.py', '--bs', '8']).args,
      ['torchrun', '--nproc-per-node', '2', '--standalone', '--max_restarts=0', ...m, 'train.py', '--bs', '8']);
    assert.deepEqual(companionCommand(['python3', '-m', 'torch.distributed.run', '--nproc_per_node', '2', 'train.py']).args,
      ['python3', '-m', 'torch.distributed.run', '--nproc_per_node', '2', ...m, 'train.py']);
    assert.equal(companionCommand(['python3', 'train.py']).wrapped, true);
  });

  it('leaves other commands as they are, and says why for a Python one it cannot wrap', () => {
    const same = (args: string[], note?: string) => assert.deepEqual(companionCommand(args), { wrapped: false, args, ...(note ? { note } : {}) });
    same([process.execPath, 'trial.js']);
    same(['bash', '-c', 'python3 train.py']);
    same(['python3', '-c', 'print(1)'], 'python -c runs no script file the companion could run');
    same(['python3', '-m', 'mypkg.train'], 'python -m mypkg.train runs a module, not a script file the companion could run');
    same(['torchrun', '--nproc-per-node', '2', '-m', 'mypkg.train'], 'torchrun -m runs no script file the companion could run');
    same(['torchrun', '--no-python', 'bash', 'x.sh'], 'torchrun --no-python runs no script file the companion could run');
    same(['python3', '-'], 'python - reads its script from stdin');
    same(['python3', '--version']);
    same([]);
  });

  it('finds the batch size in the config, at any depth, only when one parameter is named so', () => {
    assert.equal(configBatchSize({ lr: 0.1, batch_size: 64 }), 64);
    assert.equal(configBatchSize({ data: { batchSize: 128 } }), 128);
    assert.equal(configBatchSize({ 'batch-size': 32 }), 32);
    assert.equal(configBatchSize({ BS: 16 }), 16);
    assert.equal(configBatchSize({ lr: 0.1 }), undefined);
    assert.equal(configBatchSize({ batch_size: 64, eval: { batch_size: 256 } }), undefined, 'two: which one is unknown');
    assert.equal(configBatchSize({ batch_size: 'large' }), undefined);
  });

  it('reads torch\'s out-of-memory words in a failure that did not come through the companion', () => {
    assert.deepEqual(outOfMemoryInText(['Traceback (most recent call last):', 'torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB']),
      { device: 'cuda', message: 'torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' });
    assert.equal(outOfMemoryInText(['RuntimeError: [enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can\'t allocate memory: you tried to allocate 4294967296 bytes.'])?.device, 'cpu');
    assert.equal(outOfMemoryInText(['RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x8 and 9x2)']), undefined);
  });

  it('folds the memory of every process and step into the peak, labelled CUDA or CPU', () => {
    const cpu = new TrialMemoryPeak();
    assert.equal(cpu.value(), undefined);
    assert.equal(cpu.add({ rank: 0, localRank: 0, worldSize: 2, step: 1, kind: 'cpu', device: 'cpu', rssBytes: 200 * MiB, peakRssBytes: 250 * MiB }), true);
    assert.equal(cpu.add({ rank: 1, localRank: 1, worldSize: 2, step: 1, kind: 'cpu', device: 'cpu', rssBytes: 210 * MiB, peakRssBytes: 240 * MiB }), true, 'a second process');
    assert.equal(cpu.add({ rank: 0, localRank: 0, worldSize: 2, step: 1, kind: 'cpu', device: 'cpu', rssBytes: 200 * MiB, peakRssBytes: 230 * MiB }), false, 'nothing new');
    assert.deepEqual(cpu.value(), { device: 'cpu', peakRssBytes: 250 * MiB, processes: 2, steps: 1 });
    assert.equal(formatTrialMemory(cpu.value()!), '250.0 MiB RSS (CPU, largest of its processes)');
    const cuda = new TrialMemoryPeak();
    cuda.add({ rank: 0, localRank: 0, worldSize: 1, step: 1, kind: 'cuda', device: 'cuda:0', allocatedBytes: 1024 * MiB, reservedBytes: 1536 * MiB, peakAllocatedBytes: 1280 * MiB });
    cuda.add({ rank: 0, localRank: 0, worldSize: 1, step: 2, kind: 'cuda', device: 'cuda:0', allocatedBytes: 1024 * MiB, reservedBytes: 2048 * MiB, peakAllocatedBytes: 1100 * MiB });
    assert.deepEqual(cuda.value(), { device: 'cuda', peakAllocatedBytes: 1280 * MiB, peakReservedBytes: 2048 * MiB, processes: 1, steps: 2 });
    assert.equal(formatTrialMemory(cuda.value()!), '1.3 GiB allocated / 2.0 GiB reserved (CUDA)');
  });

  it('a torchrun job trial\'s job/rankMemory lines (train --json) are memory records for its peak', () => {
    const line = JSON.stringify({ type: 'job/rankMemory', rank: 1, localRank: 1, worldSize: 2, step: 4, stepSeconds: 0.2, pid: 77, kind: 'cpu', device: 'cpu', rssBytes: 300 * MiB, peakRssBytes: 310 * MiB });
    const parsed = parseJobLine(line);
    assert.deepEqual(parsed, { kind: 'memory', memory: { rank: 1, localRank: 1, worldSize: 2, step: 4, stepSeconds: 0.2, pid: 77, kind: 'cpu', device: 'cpu', rssBytes: 300 * MiB, peakRssBytes: 310 * MiB }, text: '' });
    const peak = new TrialMemoryPeak();
    if (parsed?.kind === 'memory') peak.add(parsed.memory);
    assert.deepEqual(peak.value(), { device: 'cpu', peakRssBytes: 310 * MiB, processes: 1, steps: 4 });
  });

  it('the companion\'s oom message may carry the memory at the failure, checked like a memory message', () => {
    const line = (x: Record<string, unknown>) => JSON.stringify({ v: 1, rank: 0, localRank: 0, worldSize: 1, type: 'oom', device: 'cpu', error: 'RuntimeError', message: 'x', batchSize: 8, ...x });
    const ok = parseCompanionLine(line({ memory: [{ kind: 'cpu', device: 'cpu', rssBytes: 5, peakRssBytes: 6 }] }));
    assert.deepEqual(ok.ok && ok.message.type === 'oom' ? ok.message.memory : ok, [{ kind: 'cpu', device: 'cpu', rssBytes: 5, peakRssBytes: 6 }]);
    assert.deepEqual(parseCompanionLine(line({ memory: [{ kind: 'cpu', device: 'cpu', rssBytes: -1, peakRssBytes: 6 }] })), { ok: false, error: 'oom message: memory: rssBytes and peakRssBytes must be byte counts' });
    assert.deepEqual(parseCompanionLine(line({ memory: 'lots' })), { ok: false, error: 'oom message: memory must be a list of device records' });
    assert.equal(parseCompanionLine(line({})).ok, true, 'an older companion sends none');
  });
});

/** Runs `gpu-workbench tune SPEC` (the text output, as a person sees it without a terminal). */
function tune(spec: string, cwd: string): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [cli, 'tune', spec, '--gpus', '0', '--interval', '600'], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => { out += d; });
    child.stderr.setEncoding('utf8').on('data', (d: string) => { err += d; });
    child.on('close', (code) => done({ code, out, err }));
  });
}

const of = <T extends TuneEvent['type']>(events: readonly unknown[], type: T): Array<Extract<TuneEvent, { type: T }>> =>
  events.filter((e): e is Extract<TuneEvent, { type: T }> => (e as { type: string }).type === type);

describe('tuning trials under the companion: real Python trials (torch 1.13, CPU)', function () {
  this.timeout(180_000);
  before(function () {
    if (torchMissing) {
      console.warn(`  skipped: ${torchMissing}`);
      this.skip();
    }
  });

  it('gpu_workbench.report feeds ASHA, each trial\'s peak memory is recorded, and a batch that does not fit ends "out of memory (batch size 4096)" without ending the experiment', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tune-companion-'));
    const name = `companion-${process.pid}-${Date.now()}`;
    const spec = join(dir, 'mem.tune.json');
    writeFileSync(spec, JSON.stringify({
      name, metric: 'loss', mode: 'min', maxConcurrent: 2,
      space: { batch_size: { grid: [8, 4096] } },
      search: { algorithm: 'grid' },
      scheduler: { type: 'asha', maxT: 3, gracePeriod: 1, reductionFactor: 2 },
      // Each example is 1 MiB: 8 fit in 700 MiB of data, 4096 (4 GiB) do not.
      trial: { command: [torchPython, 'train.py', '--batch-size', '${config.batch_size}'], cwd: join(fixtures, 'tuning', 'companion'), env: { GPU_WORKBENCH_MEMORY_LIMIT: String(700 * MiB) } },
    }));
    const r = await tune(spec, dir);
    assert.equal(r.code, 0, `${r.out}\n${r.err}`);
    const expDir = join(dir, '.gpu-workbench', 'experiments', name);
    const { records } = readJournal(join(expDir, 'journal.jsonl'));

    // Trial 1 (batch 8): three reports from gpu_workbench.report over the channel (none on stdout), then maxT.
    const reports = of(records, 'trial/report').filter((e) => e.trialId === 1);
    assert.deepEqual(reports.map((e) => [e.result.step, e.result.training_iteration]), [[1, 1], [2, 2], [3, 3]]);
    assert.ok(reports.every((e) => typeof e.result.loss === 'number' && e.result.loss > 0 && e.result.loss < 5), JSON.stringify(reports));
    assert.deepEqual(of(records, 'trial/stopped').map((e) => [e.trialId, e.reason]), [[1, 'maxT']], 'ASHA saw its reports');
    const log1 = readFileSync(join(expDir, 'trial_1.log'), 'utf8');
    assert.match(log1, /^gpu_workbench\.report: \{"loss":[\d.e-]+,"step":3\}$/m);
    assert.doesNotMatch(log1, /::report::/, 'the reports came over the channel, not stdout');
    const memory1 = of(records, 'trial/memory').filter((e) => e.trialId === 1).pop()?.memory;
    assert.ok(memory1?.device === 'cpu' && memory1.steps === 3 && memory1.processes === 1, JSON.stringify(memory1));
    assert.ok(memory1.peakRssBytes > 100 * MiB && memory1.peakRssBytes < 700 * MiB, `torch's RSS, under the limit: ${memory1.peakRssBytes}`);

    // Trial 2 (batch 4096): the CPU allocator's failure under the limit, from the companion's oom message.
    const failed = of(records, 'trial/failed');
    assert.equal(failed.length, 1, JSON.stringify(failed));
    assert.equal(failed[0].trialId, 2);
    assert.deepEqual({ ...failed[0].outOfMemory, message: undefined }, { device: 'cpu', batchSize: 4096, message: undefined });
    assert.match(failed[0].outOfMemory?.message ?? '', /^RuntimeError: .*DefaultCPUAllocator: can't allocate memory/);
    assert.match(failed[0].error, /^out of memory \(batch size 4096\): RuntimeError: /);
    const memory2 = of(records, 'trial/memory').filter((e) => e.trialId === 2).pop()?.memory;
    assert.ok(memory2?.device === 'cpu' && memory2.steps === 0 && memory2.peakRssBytes > 50 * MiB, `its memory at the failure (no step came): ${JSON.stringify(memory2)}`);
    const done = of(records, 'experiment/done');
    assert.equal(done.length, 1);
    assert.equal(done[0].best?.trialId, 1);

    // The CLI's table says so.
    const table = r.out.slice(r.out.lastIndexOf('== Status =='));
    assert.match(table, /1 TERMINATED, 1 OUT OF MEMORY/);
    assert.match(table, /\| trial_00001 \| TERMINATED +\| +8 \| +3 \| [\d.]+ \| +\d+\.\d MiB RSS \|/);
    assert.match(table, /\| trial_00002 \| OUT OF MEMORY \(batch size 4096\) \| +4096 \| +\| +\| +\d+\.\d MiB RSS \|/);
    assert.match(table, /\| peak memory +\|/);

    // The Tuning Results rows, folded from the journal as the view does.
    const loaded = loadSpec(spec);
    const model = new ResultsModel(setupFromSpec(loaded, name, 2, { kind: 'command' }));
    for (const rec of records) model.apply(rec);
    const [row1, row2] = model.rows();
    assert.deepEqual(row1.memory, memory1);
    assert.equal(row1.outOfMemory, undefined);
    assert.equal(row2.status, 'failed');
    assert.equal(row2.outOfMemory?.batchSize, 4096);
    assert.deepEqual(row2.memory, memory2);

    // Resumed from the journal: the engine's trials keep their memory and their out of memory.
    const resumed = new Experiment({ spec: loaded, workspace: dir, resume: true, gpuCount: 0 });
    await resumed.run();
    const views = resumed.trialViews();
    assert.deepEqual(views.map((v) => [v.status, v.memory?.device, v.outOfMemory?.batchSize]), [['stopped', 'cpu', undefined], ['failed', 'cpu', 4096]]);
  });

  it('a torchrun trial counts rank 0\'s reports once, and its memory is the largest of its 2 processes', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tune-companion-torchrun-'));
    const name = `companion-torchrun-${process.pid}-${Date.now()}`;
    const spec = join(dir, 'ddp.tune.json');
    writeFileSync(spec, JSON.stringify({
      name, metric: 'loss', mode: 'min',
      space: { batch_size: 4 },
      // As the torchrun jobs run it (see torchrunCommand): a c10d store on a free port, and --redirects/--tee, without
      // which Debian's torch 1.13 launcher dies on Python 3.11.
      trial: {
        command: [torchPython, '-m', 'torch.distributed.run', '--nnodes', '1', '--rdzv_backend', 'c10d', '--rdzv_endpoint', 'localhost:0', '--nproc_per_node', '2', '--redirects', '2', '--tee', '2', 'train.py', '--batch-size', '${config.batch_size}'],
        cwd: join(fixtures, 'tuning', 'companion'),
      },
    }));
    const r = await tune(spec, dir);
    assert.equal(r.code, 0, `${r.out}\n${r.err}`);
    const { records } = readJournal(join(dir, '.gpu-workbench', 'experiments', name, 'journal.jsonl'));
    assert.deepEqual(of(records, 'trial/report').map((e) => e.result.step), [1, 2, 3], 'rank 1 reports too, but the trial\'s are rank 0\'s');
    assert.equal(of(records, 'trial/done').length, 1);
    const memory = of(records, 'trial/memory').pop()?.memory;
    assert.ok(memory?.device === 'cpu' && memory.processes === 2 && memory.steps === 3, JSON.stringify(memory));
    assert.match(r.out, /\| trial_00001 \| TERMINATED +\| +3 \| [\d.]+ \| +\d+\.\d MiB RSS \|/);
  });
});

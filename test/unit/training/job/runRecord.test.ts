import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseTrainArgs } from '../../../../src/cli/train';
import type { JobEvent } from '../../../../src/training/job/events';
import { deleteRun, logFile, readRunRecords, recordFile, runProcessGone, runsFolder, writeRunRecord, type RunRecord } from '../../../../src/training/job/runRecord';
import { recordRun } from '../../../../src/training/job/runRecorder';
import { runJob } from '../../../../src/training/launchers/coordinator';
import { runRows } from '../../../../src/views/runs/runsModel';
import { fixtures, repoRoot } from '../../../paths';
import { tinyJob } from '../helpers';

const record = (id: string, startedAt: string, change: Partial<RunRecord> = {}): RunRecord => ({
  version: 1, id, kind: 'training', name: 'mnist', file: '/w/mnist.job.json', status: 'done', startedAt, pid: 1, host: 'h', metrics: { testAccuracy: 0.9 }, ...change,
});

describe('run records', () => {
  let dir: string;
  beforeEach(() => { dir = join(mkdtempSync(join(tmpdir(), 'gw-runs-')), 'runs'); });
  afterEach(() => rmSync(join(dir, '..'), { recursive: true, force: true }));

  it('are written whole and read back newest first; a missing folder holds none', () => {
    assert.deepEqual(readRunRecords(dir), { records: [], skipped: [] });
    writeRunRecord(dir, record('a', '2026-11-26T08:00:00.000Z'));
    writeRunRecord(dir, record('b', '2026-11-26T09:00:00.000Z', { status: 'running' }));
    writeRunRecord(dir, record('a', '2026-11-26T08:00:00.000Z', { status: 'failed', reason: 'boom' }));
    const read = readRunRecords(dir);
    assert.deepEqual(read.skipped, []);
    assert.deepEqual(read.records.map((r) => [r.id, r.status]), [['b', 'running'], ['a', 'failed']]);
    assert.deepEqual(readdirSync(dir).sort(), ['a.json', 'b.json'], 'no file written aside is left');
    deleteRun(dir, 'a');
    assert.deepEqual(readRunRecords(dir).records.map((r) => r.id), ['b']);
  });

  it('skip a torn, foreign, newer or damaged file with one reason naming it, and read the rest', () => {
    writeRunRecord(dir, record('good', '2026-11-26T08:00:00.000Z'));
    const good = readFileSync(recordFile(dir, 'good'), 'utf8');
    writeFileSync(join(dir, 'torn.json'), good.slice(0, 40));
    writeFileSync(join(dir, 'empty.json'), '');
    writeFileSync(join(dir, 'package.json'), '{"name": "x", "version": "1.0.0"}');
    writeFileSync(join(dir, 'list.json'), '[1, 2]');
    writeFileSync(join(dir, 'newer.json'), JSON.stringify({ ...record('newer', 'x'), version: 2 }));
    writeFileSync(join(dir, 'bad.json'), JSON.stringify({ ...record('bad', 'x'), status: 'exploded', metrics: { loss: 'low' } }));
    writeFileSync(join(dir, 'renamed.json'), good);
    writeFileSync(join(dir, '.good.json.tmp-12'), good.slice(0, 10));
    mkdirSync(join(dir, 'folder.json'));
    writeFileSync(join(dir, 'notes.txt'), 'hello');
    const read = readRunRecords(dir);
    assert.deepEqual(read.records.map((r) => r.id), ['good']);
    assert.deepEqual(Object.fromEntries(read.skipped.map((s) => [s.file.slice(dir.length + 1), s.reason])), {
      'bad.json': 'its status, metrics are missing or of the wrong type',
      'empty.json': 'it is empty',
      'folder.json': 'it cannot be read (EISDIR)',
      'list.json': 'it is not a run record (not a JSON object)',
      'newer.json': 'it is a run record of version 2, newer than this version of GPU Workbench reads (1)',
      'package.json': 'it is not a run record (no "version": 1)',
      'renamed.json': 'its id (good) is not its file name',
      'torn.json': 'it is not JSON (a write cut off?)',
    });
  });

  it('follow a training job\'s events: where it ran, epochs, checkpoint, final metrics, a log file', () => {
    let t = Date.parse('2026-11-26T08:00:00Z');
    const rec = recordRun({ dir, kind: 'training', file: '/w/mnist.job.json', name: 'mnist', overrides: { strategy: 'ddp', devices: [0, 1] }, checkpointDir: '/w/ck', now: () => new Date(t) }, assert.fail)!;
    assert.equal(readRunRecords(dir).records[0].status, 'running');
    const events: JobEvent[] = [
      { type: 'job/started', job: 'mnist', file: '/w/mnist.job.json', strategy: 'ddp', backend: 'wasm', description: 'backend wasm (CPU), 2 workers', workers: [{ rank: 0, pid: 5, device: 'cpu', backend: 'wasm' }, { rank: 1, pid: 6, device: 'cpu', backend: 'wasm' }], epochs: 2, stepsPerEpoch: 10, globalBatch: 64, trainSamples: 640, testSamples: 100, startEpoch: 0 },
      { type: 'job/step', epoch: 1, step: 10, stepsPerEpoch: 10, globalStep: 10, loss: 0.5, samplesPerSecond: 900 },
      { type: 'job/epoch', epoch: 1, epochs: 2, trainLoss: 0.5, testLoss: 0.4, testAccuracy: 0.88, samplesPerSecond: 900, durationMs: 1000 },
      { type: 'job/checkpoint', epoch: 1, dir: '/w/ck/epoch-1' },
      { type: 'job/done', metrics: { trainLoss: 0.3, testLoss: 0.35, testAccuracy: 0.91, epochs: 2, steps: 20, samplesPerSecond: 950, durationMs: 2000 } },
    ];
    for (const e of events) {
      t += 1000;
      rec.event(e);
    }
    const [r] = readRunRecords(dir).records;
    assert.deepEqual({ ...r, pid: 0, host: '' }, {
      version: 1, id: rec.id, kind: 'training', name: 'mnist', file: '/w/mnist.job.json', status: 'done', startedAt: '2026-11-26T08:00:00.000Z', endedAt: '2026-11-26T08:00:05.000Z', pid: 0, host: '',
      overrides: { strategy: 'ddp', devices: [0, 1] }, strategy: 'ddp', backend: 'wasm', description: 'backend wasm (CPU), 2 workers', devices: ['cpu', 'cpu'], epochs: 2, epochsDone: 1,
      checkpointDir: '/w/ck', checkpointEpoch: 1, metrics: { trainLoss: 0.3, testLoss: 0.35, testAccuracy: 0.91, samplesPerSecond: 950 },
      curves: {
        loss: { axis: 'step', points: [[10, 0.5]], seen: 1 },
        trainLoss: { axis: 'epoch', points: [[1, 0.5]], seen: 1 },
        testLoss: { axis: 'epoch', points: [[1, 0.4]], seen: 1 },
        testAccuracy: { axis: 'epoch', points: [[1, 0.88]], seen: 1 },
        samplesPerSecond: { axis: 'epoch', points: [[1, 900]], seen: 1 },
      },
    });
    const log = readFileSync(logFile(dir, rec.id), 'utf8');
    assert.match(log, /^mnist: ddp, backend wasm \(CPU\), 2 workers\n {2}rank 0 {2}pid 5 {2}cpu {2}wasm\n/);
    assert.match(log, /epoch 1\/2 done {2}train loss 0\.5000 {2}test loss 0\.4000 {2}test accuracy 88\.00%\ncheckpoint: \/w\/ck\/epoch-1\ndone: test accuracy 91\.00% in 2\.0 s\n$/);
  });

  it('say why a run failed or that it was stopped; a running record whose process is gone reads as gone', () => {
    const failed = recordRun({ dir, kind: 'torchrun', file: '/w/t.job.json', name: 't' }, assert.fail)!;
    failed.event({ type: 'job/failed', reason: 'rank 1 was killed by SIGKILL', rank: 1, hint: 'less memory' });
    const stopped = recordRun({ dir, kind: 'training', file: '/w/m.job.json', name: 'm' }, assert.fail)!;
    stopped.event({ type: 'job/failed', reason: 'cancelled', cancelled: true });
    const byId = new Map(readRunRecords(dir).records.map((r) => [r.id, r]));
    assert.equal(byId.get(failed.id)?.status, 'failed');
    assert.equal(byId.get(failed.id)?.reason, 'rank 1 was killed by SIGKILL');
    assert.equal(byId.get(stopped.id)?.status, 'cancelled');
    assert.equal(byId.get(stopped.id)?.reason, undefined);
    assert.equal(runProcessGone({ pid: process.pid, host: failed.current().host }), false);
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
    assert.equal(runProcessGone({ pid: Number(gone.stdout), host: failed.current().host }), true);
  });

  it('a folder that cannot be written: one warning, no record, the run goes on', () => {
    writeFileSync(join(dir, '..', 'file'), '');
    const warnings: string[] = [];
    assert.equal(recordRun({ dir: join(dir, '..', 'file', 'runs'), kind: 'training', file: '/w/m.job.json', name: 'm' }, (m) => warnings.push(m)), undefined);
    assert.equal(warnings.length, 1);
    assert.match(warnings[0], /^the run is not recorded: cannot write .*file\/runs \(ENOTDIR\)$/);
  });
});

describe('gpu-workbench train\'s run record options', () => {
  it('--runs-dir names the folder (resolved), --no-record turns recording off, neither leaves the default', () => {
    const o = parseTrainArgs(['job.json', '--runs-dir', 'out/runs']);
    assert.ok(o !== 'help' && o.runsDir === join(process.cwd(), 'out', 'runs'));
    const off = parseTrainArgs(['job.json', '--no-record']);
    assert.ok(off !== 'help' && off.runsDir === null);
    const plain = parseTrainArgs(['job.json']);
    assert.ok(plain !== 'help' && plain.runsDir === undefined);
  });
});

describe('run records of real runs', function () {
  this.timeout(120_000);
  let work: string;
  beforeEach(() => { work = mkdtempSync(join(tmpdir(), 'gw-runs-real-')); });
  afterEach(() => rmSync(work, { recursive: true, force: true }));

  it('gpu-workbench train writes the record and log of its run under the current folder\'s .gpu-workbench/runs', () => {
    const r = spawnSync(process.execPath, [join(repoRoot, 'out', 'src', 'cli.js'), 'train', tinyJob, '--strategy', 'ddp', '--devices', '2', '--json'], { cwd: work, encoding: 'utf8', timeout: 100_000 });
    assert.equal(r.status, 0, r.stderr);
    const { records, skipped } = readRunRecords(runsFolder(work));
    assert.deepEqual(skipped, []);
    assert.equal(records.length, 1);
    const [rec] = records;
    assert.equal(rec.status, 'done');
    assert.equal(rec.kind, 'training');
    assert.equal(rec.file, tinyJob);
    assert.equal(rec.strategy, 'ddp');
    assert.equal(rec.devices?.length, 2);
    assert.ok(rec.metrics.testAccuracy > 0, JSON.stringify(rec.metrics));
    assert.ok(Date.parse(rec.endedAt!) >= Date.parse(rec.startedAt));
    assert.match(readFileSync(logFile(runsFolder(work), rec.id), 'utf8'), /epoch 1\/\d+ done .*\n(.*\n)*done: test accuracy/);
    // What the Runs view shows of it.
    const [row] = runRows(records, [], Date.now(), runProcessGone);
    assert.match(row.description, /^done · [\d.]+ s · test_acc [\d.]+% · test_loss [\d.]+ · loss [\d.]+$/);
    assert.ok(row.details.some((d) => /^ran on: ddp · \w+ · cpu ×2$/.test(d)), JSON.stringify(row.details));
    // --no-record (a tuning trial) writes none.
    const none = spawnSync(process.execPath, [join(repoRoot, 'out', 'src', 'cli.js'), 'train', tinyJob, '--json', '--no-record', '--epochs', '1'], { cwd: work, encoding: 'utf8', timeout: 100_000 });
    assert.equal(none.status, 0, none.stderr);
    assert.equal(readRunRecords(runsFolder(work)).records.length, 1);
  });

  it('a torchrun job records what its script printed and reported, rank 0\'s', async function () {
    const probe = spawnSync('/usr/bin/python3', ['-c', 'import torch'], { encoding: 'utf8' });
    if (probe.status !== 0) this.skip();
    const runs = runsFolder(work);
    const events: JobEvent[] = [];
    const handle = runJob({ file: join(fixtures, 'torchrun', 'prints-metrics.job.json'), runsDir: runs, onEvent: (e) => events.push(e) });
    const final = await handle.finished;
    assert.equal(final.type, 'job/done', JSON.stringify(final));
    const reports = events.filter((e): e is Extract<JobEvent, { type: 'job/report' }> => e.type === 'job/report');
    // stdout, stderr and the companion's channel interleave as they like: compared as sets.
    const seen = (list: unknown[][]) => list.map((x) => JSON.stringify(x)).sort();
    assert.deepEqual(seen(reports.map((r) => [r.source, Object.keys(r.metrics).join(','), r.epoch ?? null])), seen([
      ['output', 'loss', 1], ['output', 'loss', 1], ['output', 'test_loss,test_acc', null], ['output', 'loss,acc', 1],
      ['output', 'loss', 2], ['output', 'loss', 2], ['output', 'test_loss,test_acc', null], ['output', 'loss,acc', 2],
      ['report', 'final_test_loss', null],
    ]), JSON.stringify(reports));
    const [rec] = readRunRecords(runs).records;
    assert.equal(rec.kind, 'torchrun');
    assert.equal(rec.status, 'done');
    assert.equal(rec.strategy, 'torchrun');
    const test = reports.filter((r) => r.metrics.test_acc !== undefined).pop()!;
    assert.equal(rec.metrics.test_acc, test.metrics.test_acc);
    assert.ok(rec.metrics.test_acc > 0.5 && rec.metrics.test_acc <= 1, JSON.stringify(rec.metrics));
    assert.equal(rec.metrics.final_test_loss, reports.find((r) => r.source === 'report')!.metrics.final_test_loss);
    assert.ok(final.type === 'job/done' && final.metrics.trainLoss === rec.metrics.loss && final.metrics.testAccuracy === rec.metrics.test_acc);
    assert.ok(existsSync(logFile(runs, rec.id)));
    // The curves of the Curves page: each printed or reported metric by its count of reports, the last being the record's metric.
    const curves = rec.curves!;
    assert.deepEqual(Object.keys(curves).sort(), ['acc', 'final_test_loss', 'loss', 'test_acc', 'test_loss']);
    assert.deepEqual(curves.loss.points.map(([x]) => x), [1, 2, 3, 4, 5, 6]);
    assert.equal(curves.loss.axis, 'report');
    assert.deepEqual(curves.test_acc.points.map(([x]) => x), [1, 2]);
    assert.equal(curves.test_acc.points[1][1], Number(rec.metrics.test_acc.toPrecision(6)));
    const [row] = runRows([rec], [], Date.now(), runProcessGone);
    assert.match(row.description, /^done · [\d.]+ s · .*loss [\d.]+.* · test_acc [\d.]+%/);
    assert.equal(row.details[1], 'ran on: torchrun · PyTorch · 1 process');
    assert.match(readFileSync(logFile(runs, rec.id), 'utf8'), /Test set: Average loss: [\d.]+, Accuracy: \d+\/128/);
  });
});

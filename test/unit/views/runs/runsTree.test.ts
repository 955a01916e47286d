// The Runs view's redraws: a record write redraws its row alone (the same node object VS Code
// knows the row by), the whole tree only when rows come, go or move, nothing when nothing
// changed; writes are coalesced to about one read a second; a running row is read again every
// 5 s without writes. Driven through real record files and a clock the test moves.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { recordFile, runsFolder, writeRunRecord, type RunRecord } from '../../../../src/training/job/runRecord';
import { JournalWriter } from '../../../../src/tuning/journal';
import { RunsTree, type RowNode, type Scheduler } from '../../../../src/views/runs/runsTree';

/** Timers on a clock that moves only when the test says so. */
class TestClock implements Scheduler {
  private t = Date.parse('2026-11-26T09:00:00Z');
  private timers: { at: number; fn: () => void; id: number }[] = [];
  private ids = 0;
  now(): number { return this.t; }
  setTimeout(fn: () => void, ms: number): unknown {
    const id = ++this.ids;
    this.timers.push({ at: this.t + ms, fn, id });
    return id;
  }
  clearTimeout(handle: unknown): void { this.timers = this.timers.filter((x) => x.id !== handle); }
  /** Moves the clock by `ms`, running each timer at its time. */
  advance(ms: number): void {
    const end = this.t + ms;
    for (;;) {
      const next = this.timers.filter((x) => x.at <= end).sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (!next) break;
      this.timers = this.timers.filter((x) => x !== next);
      this.t = next.at;
      next.fn();
    }
    this.t = end;
  }
}

type Folder = { name: string };
type Fired = readonly RowNode<Folder>[] | undefined;

describe('the Runs view redraws only what changed', () => {
  const roots: string[] = [];
  after(() => { for (const r of roots) rmSync(r, { recursive: true, force: true }); });

  function setup(o: { gone?: (r: RunRecord) => boolean } = {}) {
    const ws = mkdtempSync(join(tmpdir(), 'gw-runs-tree-'));
    roots.push(ws);
    const dir = runsFolder(ws);
    const clock = new TestClock();
    const folder: Folder = { name: 'ws' };
    const fired: Fired[] = [];
    const skipped: string[] = [];
    const tree = new RunsTree<Folder>({
      folders: () => [{ folder, fsPath: ws }],
      changed: (nodes) => fired.push(nodes),
      skipped: (file, reason) => skipped.push(`${file}: ${reason}`),
      processGone: o.gone ?? (() => false),
      scheduler: clock,
    });
    const at = (offsetMs: number) => new Date(clock.now() - 60_000 + offsetMs).toISOString();
    const done: RunRecord = {
      version: 1, id: 'done-1', kind: 'training', name: 'mnist', file: join(ws, 'mnist.job.json'), status: 'done', startedAt: at(0), endedAt: at(20_000),
      pid: 1, host: 'h', epochs: 2, epochsDone: 2, metrics: { testAccuracy: 0.91 },
    };
    const running: RunRecord = { ...done, id: 'running-1', status: 'running', startedAt: at(30_000), endedAt: undefined, epochs: 1000, epochsDone: 1, metrics: { trainLoss: 0.5 } };
    const keys = () => tree.roots.map((n) => n.row.key);
    const byKey = (key: string) => tree.roots.find((n) => n.row.key === key)!;
    /** The redraws so far (a function: an assertion on `fired` would narrow its type for the rest of a test). */
    const redraws = (): readonly Fired[] => fired;
    return { ws, dir, clock, tree, fired, redraws, skipped, done, running, keys, byKey };
  }

  it('a progress write redraws the running row alone: the same node, now with the new epoch; the done row is not touched', () => {
    const { dir, clock, tree, fired, redraws, done, running, keys, byKey } = setup();
    writeRunRecord(dir, done);
    writeRunRecord(dir, running);
    tree.reload();
    assert.deepEqual(keys(), ['running-1', 'done-1'], 'newest first');
    assert.deepEqual(fired, [undefined], 'the first read draws the whole tree');
    const runningNode = byKey('running-1');
    const doneNode = byKey('done-1');
    assert.match(runningNode.row.description, /^running · epoch 1\/1000 · /);
    fired.length = 0;

    clock.advance(1000);
    writeRunRecord(dir, { ...running, epochsDone: 2 });
    tree.refresh();
    clock.advance(150);
    assert.equal(redraws().length, 1, JSON.stringify(redraws()));
    assert.deepEqual(redraws()[0]?.map((n) => n.row.key), ['running-1'], 'only the running row is redrawn');
    assert.equal(redraws()[0]?.[0], runningNode, 'by the node VS Code already has');
    assert.equal(byKey('running-1'), runningNode);
    assert.equal(byKey('done-1'), doneNode);
    assert.match(runningNode.row.description, /^running · epoch 2\/1000 · /);
    tree.dispose();
  });

  it('nothing is redrawn when a read finds nothing changed (a write of the same record, a folder touched)', () => {
    const { dir, clock, tree, fired, done } = setup();
    writeRunRecord(dir, done);
    tree.reload();
    fired.length = 0;
    writeRunRecord(dir, done);
    tree.refresh();
    clock.advance(2000);
    tree.reload();
    assert.deepEqual(fired, []);
    assert.equal(tree.pending, false, 'no running row: no ticker');
    tree.dispose();
  });

  it('an added run, a deleted run redraw the whole tree, and the rows that stay keep their nodes', () => {
    const { dir, clock, tree, fired, done, running, keys, byKey } = setup();
    writeRunRecord(dir, done);
    tree.reload();
    const doneNode = byKey('done-1');
    fired.length = 0;

    writeRunRecord(dir, running);
    tree.refresh();
    clock.advance(1000);
    assert.deepEqual(fired, [undefined], 'a new row: the whole tree');
    assert.deepEqual(keys(), ['running-1', 'done-1']);
    assert.equal(byKey('done-1'), doneNode);
    fired.length = 0;

    rmSync(recordFile(dir, 'running-1'));
    tree.refresh();
    clock.advance(1000);
    assert.deepEqual(fired, [undefined], 'a row gone: the whole tree');
    assert.deepEqual(keys(), ['done-1']);
    assert.equal(byKey('done-1'), doneNode);
    tree.dispose();
  });

  it('a run that finishes redraws its row alone, and its ticker stops', () => {
    const { dir, clock, tree, fired, done, running, byKey } = setup();
    writeRunRecord(dir, done);
    writeRunRecord(dir, running);
    tree.reload();
    const runningNode = byKey('running-1');
    fired.length = 0;
    assert.equal(tree.pending, true, 'a running row is read again later');

    writeRunRecord(dir, { ...running, status: 'done', endedAt: new Date(clock.now()).toISOString(), epochsDone: 3, metrics: { testAccuracy: 0.95 } });
    tree.refresh();
    clock.advance(1000);
    assert.deepEqual(fired, [[runningNode]]);
    assert.match(runningNode.row.description, /^done · .* · test_acc 95(\.0+)?%$/);
    assert.equal(tree.pending, false);
    fired.length = 0;
    clock.advance(60_000);
    assert.deepEqual(fired, []);
    tree.dispose();
  });

  it('epochs written every 0.25 s are read about once a second, and the last one is shown', () => {
    const { dir, clock, tree, fired, running, byKey } = setup();
    writeRunRecord(dir, running);
    tree.reload();
    const runningNode = byKey('running-1');
    fired.length = 0;
    clock.advance(2000);
    // A record and its checkpoint write per epoch, as runRecorder.ts does: 8 writes a second.
    for (let epoch = 2; epoch <= 17; epoch++) {
      writeRunRecord(dir, { ...running, epochsDone: epoch });
      tree.refresh();
      writeRunRecord(dir, { ...running, epochsDone: epoch, checkpointDir: '/w/ck', checkpointEpoch: epoch });
      tree.refresh();
      clock.advance(250);
    }
    // 4 s of writes: the first read after 150 ms, then one a second.
    assert.ok(fired.length >= 3 && fired.length <= 5, `${fired.length} redraws for 32 writes in 4 s`);
    for (const f of fired) assert.deepEqual(f, [runningNode]);
    clock.advance(1000);
    assert.match(runningNode.row.description, /^running · epoch 17\/1000 · /, 'the last write is read');
    tree.dispose();
  });

  it('a running row is redrawn every 5 s without writes (its duration grows), and shows as interrupted when its process is gone', () => {
    let gone = false;
    const { dir, clock, tree, fired, done, running, byKey } = setup({ gone: () => gone });
    writeRunRecord(dir, done);
    writeRunRecord(dir, running);
    tree.reload();
    const runningNode = byKey('running-1');
    const before = runningNode.row.description;
    fired.length = 0;
    clock.advance(4900);
    assert.deepEqual(fired, []);
    clock.advance(100);
    assert.deepEqual(fired, [[runningNode]]);
    assert.notEqual(runningNode.row.description, before);
    assert.match(runningNode.row.description, /· 35\.0 s/, 'started 30 s before the first read, 5 s later');

    gone = true;
    clock.advance(5000);
    assert.deepEqual(fired.at(-1), [runningNode]);
    assert.equal(runningNode.row.status, 'interrupted');
    assert.equal(tree.pending, false, 'an interrupted run is not running: no more ticks');
    tree.dispose();
  });

  it('a running experiment\'s journal line redraws its row alone; a file that is no record is told once', () => {
    const { ws, dir, clock, tree, fired, skipped, done, byKey } = setup();
    writeRunRecord(dir, done);
    const expDir = join(ws, '.gpu-workbench', 'experiments', 'quad');
    const journal = new JournalWriter(join(expDir, 'journal.jsonl'));
    const at = clock.now() - 10_000;
    journal.append({ type: 'journal/header', version: 1, name: 'quad', spec: { metric: 'loss' }, at });
    journal.append({ type: 'experiment/started', name: 'quad', dir: expDir, totalTrials: 4, maxConcurrent: 2, gpus: 0, resumed: false, at });
    writeFileSync(join(dir, 'cut.json'), '{"version": 1, "id"');
    tree.reload();
    const expNode = byKey(expDir);
    assert.match(expNode.row.description, /^unfinished · 0\/4 trials$/);
    assert.equal(skipped.length, 1, skipped.join('\n'));
    fired.length = 0;

    journal.append({ type: 'trial/started', trialId: 1, config: {}, params: {}, cudaVisibleDevices: null, attempt: 1, at: clock.now() });
    tree.refresh();
    clock.advance(1000);
    assert.deepEqual(fired, [[expNode]]);
    assert.match(expNode.row.description, /^unfinished · 1\/4 trials$/);
    assert.equal(skipped.length, 1, 'the same file is not warned about again');
    journal.close();
    tree.dispose();
  });
});

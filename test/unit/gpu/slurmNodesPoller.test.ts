import assert from 'node:assert/strict';
import type { PanelSlurmNodes } from '../../../src/common/protocol';
import type { JobNodes } from '../../../src/gpu/slurmNodes';
import { hostListCount, SlurmNodesPoller, type PollTimer } from '../../../src/gpu/slurmNodesPoller';
import type { SlurmJobInfo } from '../../../src/training/launchers/slurm';

/** A timer driven by hand: `fire()` runs what is due; no sleeps. */
class FakeTimer implements PollTimer {
  pending: { fn: () => void; ms: number; handle: number }[] = [];
  private next = 1;
  t = 1_000;
  setTimeout(fn: () => void, ms: number): unknown {
    const handle = this.next++;
    this.pending.push({ fn, ms, handle });
    return handle;
  }
  clearTimeout(handle: unknown): void {
    this.pending = this.pending.filter((p) => p.handle !== handle);
  }
  now(): number {
    return this.t;
  }
  fire(): void {
    const due = this.pending;
    this.pending = [];
    this.t += due[0]?.ms ?? 0;
    for (const p of due) p.fn();
  }
}

/** A probe that answers only when told, counting the probes in flight at once. */
class FakeProbe {
  calls: { jobId: string; nodeList: string; nodeCount: number }[] = [];
  inFlight = 0;
  maxInFlight = 0;
  private waiting: { resolve: (n: JobNodes) => void; reject: (e: Error) => void }[] = [];
  readonly read = (jobId: string, nodeList: string, nodeCount: number): Promise<JobNodes> => {
    this.calls.push({ jobId, nodeList, nodeCount });
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    return new Promise<JobNodes>((resolve, reject) => this.waiting.push({ resolve, reject })).finally(() => this.inFlight--);
  };
  answer(idle: number[] = [1]): void {
    const w = this.waiting.shift();
    assert.ok(w, 'a probe is waiting');
    w.resolve({ jobId: this.calls[this.calls.length - 1].jobId, nodes: [{ node: 'n1', devices: [], processes: [], idle }], unavailable: [] });
  }
  fail(message: string): void {
    this.waiting.shift()?.reject(new Error(message));
  }
}

const settle = () => new Promise<void>((r) => setImmediate(r));
const info = (state: string, nodes?: string, nodeCount?: number): SlurmJobInfo => ({ id: '77', state, ...(nodes ? { nodes } : {}), ...(nodeCount ? { nodeCount } : {}) });

describe('gpu: polling a Slurm job\'s nodes for the panel', () => {
  function setup() {
    const timer = new FakeTimer();
    const probe = new FakeProbe();
    const sent: (PanelSlurmNodes | undefined)[] = [];
    const poller = new SlurmNodesPoller(probe.read, (n) => sent.push(n), 8000, timer);
    return { timer, probe, sent, poller };
  }

  it('starts probing when squeue says RUNNING on nodes, not while PENDING, and probes again an interval after each answer', async () => {
    const { timer, probe, sent, poller } = setup();
    poller.update(info('PENDING'));
    assert.equal(probe.calls.length, 0, 'no probe while the job waits');
    poller.update(info('RUNNING', 'n[1-2]', 2));
    assert.deepEqual(probe.calls, [{ jobId: '77', nodeList: 'n[1-2]', nodeCount: 2 }]);
    assert.equal(timer.pending.length, 0, 'the next probe is not scheduled before this one answers');
    probe.answer();
    await settle();
    assert.equal(sent.length, 1);
    assert.equal(sent[0]?.jobId, '77');
    assert.equal(sent[0]?.nodeList, 'n[1-2]');
    assert.deepEqual(sent[0]?.nodes.map((n) => [n.node, n.idle]), [['n1', [1]]]);
    assert.deepEqual(timer.pending.map((p) => p.ms), [8000]);
    timer.fire();
    assert.equal(probe.calls.length, 2);
  });

  it('never runs two probes at once: squeue saying RUNNING again while a probe is slow starts no second one', async () => {
    const { timer, probe, poller } = setup();
    poller.update(info('RUNNING', 'n[1-2]', 2));
    for (let i = 0; i < 5; i++) poller.update(info('RUNNING', 'n[1-2]', 2));
    assert.equal(probe.calls.length, 1);
    assert.equal(timer.pending.length, 0);
    probe.answer();
    await settle();
    timer.fire();
    poller.update(info('RUNNING', 'n[1-2]', 2));
    probe.answer();
    await settle();
    assert.equal(probe.maxInFlight, 1);
    assert.equal(probe.calls.length, 2);
    assert.equal(timer.pending.length, 1, 'one next probe due, not one per squeue reading');
  });

  it('stops when the job ends: the section is withdrawn, a probe in flight is dropped, nothing is scheduled', async () => {
    const { timer, probe, sent, poller } = setup();
    poller.update(info('RUNNING', 'n1', 1));
    probe.answer();
    await settle();
    timer.fire();
    assert.equal(probe.calls.length, 2);
    poller.update(info('COMPLETED', 'n1', 1));
    assert.equal(sent[sent.length - 1], undefined, 'the section goes when the job ends');
    probe.answer();
    await settle();
    assert.equal(sent.length, 2, 'the late answer is not drawn');
    assert.equal(timer.pending.length, 0);
    assert.equal(poller.active, false);
    poller.update(info('RUNNING', 'n1', 1));
    assert.equal(probe.calls.length, 2, 'a stopped poller does not start again');
  });

  it('stop() (the run ended or was stopped) cancels the next probe', async () => {
    const { timer, probe, sent, poller } = setup();
    poller.update(info('RUNNING', 'n1', 1));
    probe.answer();
    await settle();
    assert.equal(timer.pending.length, 1);
    poller.stop();
    assert.equal(timer.pending.length, 0);
    assert.deepEqual(sent.map((s) => s === undefined), [false, true]);
  });

  it('a failed probe keeps the last nodes, says what srun said, and tries again after the interval', async () => {
    const { timer, probe, sent, poller } = setup();
    poller.update(info('RUNNING', 'n[1-2]', 2));
    probe.answer();
    await settle();
    timer.fire();
    probe.fail('srun: error: Unable to create step for job 77: Job/step already completing or completed');
    await settle();
    const last = sent[sent.length - 1];
    assert.match(last?.error ?? '', /Unable to create step for job 77/);
    assert.deepEqual(last?.nodes.map((n) => n.node), ['n1']);
    assert.equal(timer.pending.length, 1);
  });

  it('counts the nodes of a host list when squeue gave no count', () => {
    assert.equal(hostListCount('n[1-3,7],gpu01'), 5);
    assert.equal(hostListCount('n1'), 1);
    assert.equal(hostListCount('a[01-02],b[1-2]'), 4);
    const { probe, poller } = setup();
    poller.update(info('RUNNING', 'n[1-2]'));
    assert.equal(probe.calls[0].nodeCount, 2);
  });
});

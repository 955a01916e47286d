import * as assert from 'node:assert/strict';
import { AshaScheduler, Bracket, FifoScheduler, percentile } from '../../../src/tuning/asha';
import type { AshaOptions } from '../../../src/tuning/spec';

const opts = (o: Partial<AshaOptions> = {}): AshaOptions => ({ type: 'asha', timeAttr: 'training_iteration', maxT: 100, gracePeriod: 1, reductionFactor: 4, brackets: 1, ...o });
const r = (it: number, acc: number): Record<string, number> => ({ training_iteration: it, acc });

describe('ASHA (Ray AsyncHyperBandScheduler semantics)', () => {
  it('places rungs at gracePeriod·rf^(k+s), highest first, per bracket', () => {
    assert.deepEqual(new Bracket(1, 100, 4, 0).rungs.map((x) => x.milestone), [64, 16, 4, 1]);
    assert.deepEqual(new Bracket(1, 100, 4, 1).rungs.map((x) => x.milestone), [64, 16, 4]);
    assert.deepEqual(new Bracket(1, 10, 2, 0).rungs.map((x) => x.milestone), [8, 4, 2, 1]);
    assert.deepEqual(new Bracket(10, 81, 3, 0).rungs.map((x) => x.milestone), [30, 10]);
  });

  it('cuts at the (1 − 1/rf) percentile: rf=4 over {1..8} is 6.25', () => {
    assert.equal(percentile([1, 2, 3, 4, 5, 6, 7, 8], 75), 6.25);
    const s = new AshaScheduler(opts(), 'acc', 'max');
    for (let id = 1; id <= 10; id++) s.onTrialAdd(id);
    for (let id = 1; id <= 8; id++) assert.equal(s.onTrialResult(id, r(1, id)).action, 'continue', 'rising values all pass');
    const d9 = s.onTrialResult(9, r(1, 6.2));
    assert.equal(d9.action, 'stop');
    assert.equal(d9.action === 'stop' && d9.reason, 'asha');
    assert.match(d9.action === 'stop' ? d9.message : '', /acc 6\.2 is worse than the cutoff 6\.25 at training_iteration 1/);
    // 9 was recorded (at 6.2) before 10 arrives: {1..8, 6.2} puts the cutoff at 6.2.
    assert.equal(s.onTrialResult(10, r(1, 6.3)).action, 'continue');
  });

  it('replays Ray\'s _Bracket doctest: (1,2) go, (1,4) go, cutoff 3, (1,1) stop, cutoff 2', () => {
    const b = new Bracket(1, 10, 2, 0);
    assert.equal(b.onResult(1, 1, 2).stop, false);
    assert.equal(b.onResult(2, 1, 4).stop, false);
    assert.equal(b.cutoff(b.rungs[3].recorded), 3);
    assert.equal(b.onResult(3, 1, 1).stop, true);
    assert.equal(b.cutoff(b.rungs[3].recorded), 2);
  });

  it('lets the first trial at a rung go on, however bad', () => {
    const s = new AshaScheduler(opts(), 'loss', 'min');
    s.onTrialAdd(1); s.onTrialAdd(2);
    assert.equal(s.onTrialResult(1, { training_iteration: 1, loss: 0.1 }).action, 'continue');
    assert.equal(s.onTrialResult(1, { training_iteration: 4, loss: 0.05 }).action, 'continue');
    // Trial 2 is much worse at iteration 1 (stopped) but would be first at rung 4.
    assert.equal(s.onTrialResult(2, { training_iteration: 1, loss: 9 }).action, 'stop');
    const s2 = new AshaScheduler(opts(), 'loss', 'min');
    s2.onTrialAdd(1);
    assert.equal(s2.onTrialResult(1, { training_iteration: 1, loss: 1e9 }).action, 'continue');
  });

  it('in mode min stops a loss above the 1/rf quantile of the recorded losses', () => {
    const s = new AshaScheduler(opts(), 'loss', 'min');
    for (let id = 1; id <= 6; id++) s.onTrialAdd(id);
    for (const [id, loss] of [[1, 0.1], [2, 0.2], [3, 0.3], [4, 0.4]]) s.onTrialResult(id, { training_iteration: 1, loss });
    // Rewards −0.1..−0.4: the 75th percentile is −0.175, so a loss above 0.175 stops.
    assert.equal(s.onTrialResult(5, { training_iteration: 1, loss: 0.18 }).action, 'stop');
    assert.equal(s.onTrialResult(6, { training_iteration: 1, loss: 0.15 }).action, 'continue');
  });

  it('judges one milestone per report: the highest reached and not yet recorded', () => {
    const s = new AshaScheduler(opts(), 'acc', 'max');
    s.onTrialAdd(1); s.onTrialAdd(2); s.onTrialAdd(3);
    // Trial 1 sets the bar at rungs 1, 4 and 16.
    for (const it of [1, 4, 16]) s.onTrialResult(1, r(it, 10));
    // Trial 2 first reports at iteration 20: judged at 16 only (10 vs 5: stop), rungs 1 and 4 untouched.
    assert.equal(s.onTrialResult(2, r(20, 5)).action, 'stop');
    const b = s.brackets[0];
    const at = (m: number): number[] => [...b.rungs.find((x) => x.milestone === m)!.recorded.keys()];
    assert.deepEqual(at(16), [1, 2]);
    assert.deepEqual(at(4), [1]);
    // Trial 3 jumps to 20 with a good value, then reports 21: judged at rung 4 (the highest unrecorded), Ray's quirk.
    assert.equal(s.onTrialResult(3, r(20, 11)).action, 'continue');
    assert.equal(s.onTrialResult(3, r(21, 9)).action, 'stop');
    assert.deepEqual(at(4), [1, 3]);
  });

  it('stops at maxT without judging and records the trial when it completes', () => {
    const s = new AshaScheduler(opts({ maxT: 16 }), 'acc', 'max');
    s.onTrialAdd(1);
    for (const it of [1, 4]) assert.equal(s.onTrialResult(1, r(it, 1)).action, 'continue');
    const d = s.onTrialResult(1, r(16, 1));
    assert.equal(d.action === 'stop' && d.reason, 'maxT');
    const top = s.brackets[0].rungs[0];
    assert.equal(top.milestone, 16);
    assert.equal(top.recorded.size, 0);
    s.onTrialComplete(1, r(16, 1));
    assert.deepEqual([...top.recorded.entries()], [[1, 1]]);
  });

  it('ignores results without the time attribute or the metric', () => {
    const s = new AshaScheduler(opts(), 'acc', 'max');
    s.onTrialAdd(1); s.onTrialAdd(2);
    s.onTrialResult(1, r(1, 100));
    assert.equal(s.onTrialResult(2, { training_iteration: 1 }).action, 'continue');
    assert.equal(s.onTrialResult(2, { acc: 0 }).action, 'continue');
    assert.equal(s.brackets[0].rungs[3].recorded.size, 1);
  });

  it('assigns brackets by softmax over their rung counts, the same for the same seed', () => {
    const s = new AshaScheduler(opts({ brackets: 3 }), 'acc', 'max', 42);
    assert.deepEqual(s.brackets.map((b) => b.rungs.length), [4, 3, 2]);
    const n = 6000;
    const counts = [0, 0, 0];
    for (let id = 1; id <= n; id++) { s.onTrialAdd(id); counts[s.bracketOf(id)]++; }
    const z = 1 + Math.exp(-1) + Math.exp(-2);
    [1, Math.exp(-1), Math.exp(-2)].forEach((p, i) => assert.ok(Math.abs(counts[i] / n - p / z) < 0.02, `bracket ${i}: ${counts[i] / n} vs ${p / z}`));
    const again = new AshaScheduler(opts({ brackets: 3 }), 'acc', 'max', 42);
    for (let id = 1; id <= 50; id++) { again.onTrialAdd(id); assert.equal(again.bracketOf(id), s.bracketOf(id)); }
  });

  it('FIFO never stops a trial', () => {
    const f = new FifoScheduler();
    f.onTrialAdd();
    assert.equal(f.onTrialResult().action, 'continue');
  });
});

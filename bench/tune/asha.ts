/**
 * ASHA against FIFO on a family of synthetic learning curves: the same trials (configs with a
 * final loss and a curve shape, some slow starters that end up good), run by 4 asynchronous
 * workers. Prints the total iterations each spends, as a ratio to FIFO (the anchor), and the true
 * final loss of the trial each would pick as best.
 *
 *   npx tsc -p . && node out/bench/tune/asha.js [trials=64] [seeds=20]
 */
import { AshaScheduler, FifoScheduler, type Scheduler } from '../../src/tuning/asha';
import { Rng } from '../../src/tuning/rng';

const trials = Number(process.argv[2] ?? 64);
const seeds = Number(process.argv[3] ?? 20);
const maxT = 81;

interface Curve { final: number; at(t: number, rng: Rng): number }

function family(seed: number): Curve[] {
  const rng = new Rng(seed, 99);
  return Array.from({ length: trials }, () => {
    const final = 0.1 + 0.9 * rng.next();
    const amp = 0.5 + 2 * rng.next();
    const rate = 0.2 + 1.3 * rng.next(); // small: a slow starter
    return { final, at: (t, r) => final + amp * t ** -rate + 0.01 * r.normal() };
  });
}

function simulate(curves: Curve[], scheduler: Scheduler, seed: number): { iterations: number; pickedFinal: number } {
  const rng = new Rng(seed, 7);
  const workers = 4;
  const state = curves.map(() => ({ t: 0, last: Infinity, done: false }));
  let next = 0, iterations = 0;
  const running: number[] = [];
  const admit = (): void => {
    while (running.length < workers && next < curves.length) { scheduler.onTrialAdd(next); running.push(next++); }
  };
  admit();
  while (running.length) {
    // Workers progress at slightly different speeds: pick one at random to report next.
    const k = rng.int(0, running.length);
    const id = running[k];
    const s = state[id];
    s.t++; iterations++;
    s.last = curves[id].at(s.t, rng);
    const result = { training_iteration: s.t, loss: s.last };
    const d = scheduler.onTrialResult(id, result);
    if (d.action === 'stop' || s.t >= maxT) {
      scheduler.onTrialComplete(id, result);
      running.splice(k, 1);
      admit();
    }
  }
  const best = state.reduce((b, s, i) => (s.last < state[b].last ? i : b), 0);
  return { iterations, pickedFinal: curves[best].final };
}

let fifoIt = 0, ashaIt = 0;
const fifoFinal: number[] = [], ashaFinal: number[] = [], oracle: number[] = [];
for (let seed = 0; seed < seeds; seed++) {
  const curves = family(seed);
  const f = simulate(curves, new FifoScheduler(), seed);
  const a = simulate(curves, new AshaScheduler({ type: 'asha', timeAttr: 'training_iteration', maxT, gracePeriod: 1, reductionFactor: 3, brackets: 1 }, 'loss', 'min', seed), seed);
  fifoIt += f.iterations; ashaIt += a.iterations;
  fifoFinal.push(f.pickedFinal); ashaFinal.push(a.pickedFinal);
  oracle.push(Math.min(...curves.map((c) => c.final)));
}
const mean = (xs: number[]): number => xs.reduce((x, y) => x + y, 0) / xs.length;
console.log(`${trials} trials, maxT ${maxT}, 4 workers, ${seeds} seeds (ASHA: grace 1, rf 3)`);
console.log('scheduler  iterations (mean)   ÷ FIFO   final loss of the picked trial (mean)   best possible');
console.log(`fifo       ${(fifoIt / seeds).toFixed(0).padStart(17)}   ${(1).toFixed(3)}   ${mean(fifoFinal).toFixed(4).padStart(37)}   ${mean(oracle).toFixed(4).padStart(13)}`);
console.log(`asha       ${(ashaIt / seeds).toFixed(0).padStart(17)}   ${(ashaIt / fifoIt).toFixed(3)}   ${mean(ashaFinal).toFixed(4).padStart(37)}   ${mean(oracle).toFixed(4).padStart(13)}`);

/**
 * Random search, TPE and GP side by side on Branin (minimum 0.397887) and Hartmann6 (−3.32237):
 * the median best value after N evaluations over S seeds, its gap to the minimum as a ratio to
 * random search's gap (the anchor, measured in the same run), and how many seeds got within 1e-2
 * of the minimum and after how many evaluations (median over those that did).
 *
 *   npx tsc -p . && node out/bench/tune/search.js [evaluations=100] [seeds=20] [functions=branin,hartmann6]
 *
 * Published anchors to read the numbers against: scikit-optimize's GP reaches Branin's minimum in
 * about 33 evaluations on average; Optuna's TPE gets within 1e-2 in 16 of 20 seeds (median 99
 * evaluations) by the account; random search needs about 5,000. Measured here instead,
 * Debian's Optuna 3.1.0 default TPESampler through this same loop got within 1e-2 in 8 of 20 seeds
 * by 100 evaluations and 19 of 20 by 250 (median 163): compare our TPE with that.
 */
import { GpSearcher } from '../../src/tuning/gp';
import { VariantSearcher, type Observation, type Searcher } from '../../src/tuning/search';
import { Space, type Params } from '../../src/tuning/space';
import { TpeSearcher } from '../../src/tuning/tpe';

interface Problem { name: string; min: number; space: Space; f: (p: Params) => number }

function branin(p: Params): number {
  const { x1, x2 } = p;
  const b = 5.1 / (4 * Math.PI ** 2), c = 5 / Math.PI, t = 1 / (8 * Math.PI);
  return (x2 - b * x1 * x1 + c * x1 - 6) ** 2 + 10 * (1 - t) * Math.cos(x1) + 10;
}

const hA = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]];
const hP = [[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991], [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]].map((r) => r.map((v) => v * 1e-4));
const hAlpha = [1, 1.2, 3, 3.2];
function hartmann6(p: Params): number {
  const x = [p.x1, p.x2, p.x3, p.x4, p.x5, p.x6];
  let s = 0;
  for (let i = 0; i < 4; i++) {
    let inner = 0;
    for (let j = 0; j < 6; j++) inner += hA[i][j] * (x[j] - hP[i][j]) ** 2;
    s += hAlpha[i] * Math.exp(-inner);
  }
  return -s;
}

const problems: Problem[] = [
  { name: 'branin', min: 0.397887, space: Space.parse({ x1: { uniform: [-5, 10] }, x2: { uniform: [0, 15] } }), f: branin },
  { name: 'hartmann6', min: -3.32237, space: Space.parse(Object.fromEntries([1, 2, 3, 4, 5, 6].map((i) => [`x${i}`, { uniform: [0, 1] }]))), f: hartmann6 },
];

const evaluations = Number(process.argv[2] ?? 100);
const seeds = Number(process.argv[3] ?? 20);
const wanted = (process.argv[4] ?? 'branin,hartmann6').split(',');

function run(s: Searcher, f: (p: Params) => number, n: number): number[] {
  const h: Observation[] = [];
  const bestSoFar: number[] = [];
  for (let i = 0; i < n; i++) {
    const params = s.suggest(i, h);
    const loss = f(params);
    h.push({ index: i, params, state: 'done', loss, step: 1 });
    bestSoFar.push(Math.min(loss, bestSoFar[i - 1] ?? Infinity));
  }
  return bestSoFar;
}

const median = (xs: number[]): number => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };

for (const p of problems.filter((x) => wanted.includes(x.name))) {
  console.log(`\n${p.name} (minimum ${p.min}), ${seeds} seeds, ${evaluations} evaluations`);
  console.log('algorithm  median best   median gap   gap ÷ random   within 1e-2: seeds, median evals   seconds');
  let randomGap = NaN;
  for (const algo of ['random', 'tpe', 'gp'] as const) {
    const t0 = process.hrtime.bigint();
    const curves = Array.from({ length: seeds }, (_, seed) => {
      const s = algo === 'random' ? new VariantSearcher(p.space, seed, evaluations)
        : algo === 'tpe' ? new TpeSearcher(p.space, { seed, total: evaluations })
          : new GpSearcher(p.space, { seed, total: evaluations });
      return run(s, p.f, evaluations);
    });
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    const best = curves.map((c) => c[c.length - 1]);
    const gap = median(best.map((b) => b - p.min));
    if (algo === 'random') randomGap = gap;
    const hits = curves.map((c) => c.findIndex((v) => v - p.min <= 1e-2)).filter((i) => i >= 0).map((i) => i + 1);
    console.log(`${algo.padEnd(9)}  ${median(best).toFixed(5).padStart(11)}  ${gap.toExponential(2).padStart(11)}  ${(gap / randomGap).toFixed(3).padStart(13)}   ${String(hits.length).padStart(2)}/${seeds}, ${hits.length ? String(median(hits)).padStart(5) : '    -'}${' '.repeat(17)}${secs.toFixed(1).padStart(7)}`);
  }
}

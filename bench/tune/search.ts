/**
 * Random search, TPE and GP side by side on Branin (minimum 0.397887) and Hartmann6 (−3.32237),
 * over S seeds: the median best value after 25, 50, 100 and 250 evaluations, the gap to the
 * minimum after 100 as a ratio to random search's (the anchor, measured in the same run), and
 * how many seeds got within 1e-2 of the minimum within each searcher's budget, and after how many
 * evaluations (median over those that did).
 *
 *   npx tsc -p . && node out/bench/tune/search.js [seeds=20] [functions=branin,hartmann6]
 *
 * Seeds run in parallel, one worker thread (or Optuna process) per core ($BENCH_JOBS to change):
 * the GP's fits are most of the time, about 10 minutes of one core for the whole bench.
 *
 * Budgets: random 5,000 evaluations (it is cheap, and the published anchor says it needs about
 * that many), TPE 250, GP 100 (its fit grows as n³; it gets there long before). When
 * `/usr/bin/python3` (or $BENCH_PYTHON) has Optuna, Optuna's default TPESampler runs the same
 * functions with the same seeds (bench/tune/optunaTpe.py) and is printed beside our TPE.
 * Published anchors: scikit-optimize's GP reaches Branin's minimum in about 33 evaluations on
 * average; Optuna's TPE gets within 1e-2 in 16 of 20 seeds, median 99 evaluations; random search
 * needs about 5,000.
 */
import { spawn } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { GpSearcher } from '../../src/tuning/gp';
import type { Observation, Searcher } from '../../src/tuning/searcher';
import { VariantSearcher } from '../../src/tuning/variant';
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

const seeds = Number(process.argv[2] ?? 20);
const wanted = (process.argv[3] ?? 'branin,hartmann6').split(',');
const checkpoints = [25, 50, 100, 250];
const budgets = { random: 5000, tpe: 250, optuna: 250, gp: 100 } as const;
type Algorithm = keyof typeof budgets;
const python = process.env.BENCH_PYTHON ?? '/usr/bin/python3';

/** The best value so far after each evaluation. */
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

const jobs = Math.max(1, Number(process.env.BENCH_JOBS ?? availableParallelism()));

/** Runs `tasks` with at most `jobs` at a time, results in order. */
async function pool<T, R>(tasks: readonly T[], work: (t: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(tasks.length);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(jobs, tasks.length) }, async () => {
    while (next < tasks.length) {
      const i = next++;
      out[i] = await work(tasks[i]);
    }
  }));
  return out;
}

interface SeedTask { readonly problem: string; readonly algo: 'random' | 'tpe' | 'gp'; readonly seed: number; readonly n: number }

function runSeed(t: SeedTask): number[] {
  const p = problems.find((x) => x.name === t.problem) as Problem;
  const s = t.algo === 'random' ? new VariantSearcher(p.space, t.seed, t.n)
    : t.algo === 'tpe' ? new TpeSearcher(p.space, { seed: t.seed, total: t.n })
      : new GpSearcher(p.space, { seed: t.seed, total: t.n });
  return run(s, p.f, t.n);
}

/** One seed's curve in a worker thread (this same file). */
function seedInWorker(t: SeedTask): Promise<number[]> {
  return new Promise((resolve, reject) => {
    const w = new Worker(__filename, { workerData: t });
    w.once('message', (curve: number[]) => resolve(curve));
    w.once('error', reject);
    w.once('exit', (code) => { if (code !== 0) reject(new Error(`seed ${t.seed} of ${t.algo} exited with ${code}`)); });
  });
}

/** Optuna's curves for some seeds, or why there are none. */
function optunaChunk(p: Problem, first: number, count: number): Promise<number[][] | string> {
  return new Promise((resolve) => {
    const child = spawn(python, [join(__dirname, '..', '..', '..', 'bench', 'tune', 'optunaTpe.py'), p.name, String(budgets.optuna), String(count), String(first)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '', stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => { stdout += d; });
    child.stderr.setEncoding('utf8').on('data', (d: string) => { stderr += d; });
    child.on('error', (err) => resolve(`${python} cannot run (${err.message})`));
    child.on('close', (code) => {
      if (code !== 0) resolve(/No module named .?optuna/.test(stderr) ? `${python} has no optuna module` : `optunaTpe.py exited with ${code}: ${stderr.trim().split('\n').slice(-1)[0]}`);
      else resolve(stdout.trim().split('\n').map((l) => JSON.parse(l) as number[]));
    });
  });
}

async function optunaCurves(p: Problem): Promise<number[][] | string> {
  const chunk = Math.ceil(seeds / jobs);
  const firsts = Array.from({ length: Math.ceil(seeds / chunk) }, (_, i) => i * chunk);
  const parts = await Promise.all(firsts.map((f) => optunaChunk(p, f, Math.min(chunk, seeds - f))));
  const failed = parts.find((x): x is string => typeof x === 'string');
  return failed ?? parts.flatMap((x) => x as number[][]);
}

const median = (xs: number[]): number => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };

async function main(): Promise<void> {
  console.log(`${jobs} seed${jobs === 1 ? '' : 's'} at a time; seconds are wall time`);
  for (const p of problems.filter((x) => wanted.includes(x.name))) {
    console.log(`\n${p.name} (minimum ${p.min}), ${seeds} seeds: median best value after N evaluations`);
    console.log(`algorithm     budget${checkpoints.map((n) => `   N=${String(n).padEnd(5)}`).join('')}   gap÷random@100   within 1e-2: seeds, median evals   seconds`);
    let randomGap = NaN;
    for (const algo of ['random', 'tpe', 'optuna', 'gp'] as const satisfies readonly Algorithm[]) {
      const n = budgets[algo];
      const t0 = process.hrtime.bigint();
      let curves: number[][];
      if (algo === 'optuna') {
        const c = await optunaCurves(p);
        if (typeof c === 'string') {
          console.log(`optuna-tpe    skipped: ${c}`);
          continue;
        }
        curves = c;
      } else {
        const tasks = Array.from({ length: seeds }, (_, seed): SeedTask => ({ problem: p.name, algo, seed, n }));
        curves = algo === 'random' ? tasks.map(runSeed) : await pool(tasks, seedInWorker);
      }
      const secs = Number(process.hrtime.bigint() - t0) / 1e9;
      const at = (k: number): string => (k <= n ? median(curves.map((c) => c[k - 1])).toFixed(5) : '-');
      const gap = median(curves.map((c) => c[Math.min(n, 100) - 1] - p.min));
      if (algo === 'random') randomGap = gap;
      const hits = curves.map((c) => c.findIndex((v) => v - p.min <= 1e-2)).filter((i) => i >= 0).map((i) => i + 1);
      const name = algo === 'optuna' ? 'optuna-tpe' : algo;
      console.log(`${name.padEnd(10)}  ${String(n).padStart(6)}${checkpoints.map((k) => `  ${at(k).padStart(9)}`).join('')}   ${(gap / randomGap).toFixed(3).padStart(14)}   ${`${hits.length}/${seeds}`.padStart(11)}, ${hits.length ? String(median(hits)).padStart(5) : '    -'}${' '.repeat(14)}${secs.toFixed(1).padStart(8)}`);
    }
  }
}

if (isMainThread) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
} else {
  parentPort?.postMessage(runSeed(workerData as SeedTask));
}

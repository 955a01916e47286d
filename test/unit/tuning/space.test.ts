import * as assert from 'node:assert/strict';
import { Rng } from '../../../src/tuning/rng';
import { fromUnit, Space, SpaceError, toUnit, type Params } from '../../../src/tuning/space';

function draws(spec: unknown, n = 20000, seed = 7): number[] {
  const space = Space.parse({ x: spec });
  const rng = new Rng(seed);
  return Array.from({ length: n }, () => space.sample(rng).x);
}
const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
const sd = (xs: number[]): number => { const m = mean(xs); return Math.sqrt(mean(xs.map((x) => (x - m) ** 2))); };
function counts(xs: number[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const x of xs) m.set(x, (m.get(x) ?? 0) + 1);
  return m;
}

describe('tuning space: sampling each primitive (seeded, statistical checks)', () => {
  it('uniform stays in [lo, hi] with the mean and spread of a uniform', () => {
    const xs = draws({ uniform: [2, 6] });
    assert.ok(xs.every((x) => x >= 2 && x <= 6));
    assert.ok(Math.abs(mean(xs) - 4) < 0.05, `mean ${mean(xs)}`);
    assert.ok(Math.abs(sd(xs) - 4 / Math.sqrt(12)) < 0.03);
  });

  it('quniform gives multiples of q inside the range, clean decimals', () => {
    const xs = draws({ quniform: [0, 1, 0.1] });
    const values = [...counts(xs).keys()].sort((a, b) => a - b);
    assert.deepEqual(values, [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1]);
  });

  it('loguniform is uniform in log space', () => {
    const xs = draws({ loguniform: [1e-4, 1e-1] });
    assert.ok(xs.every((x) => x >= 1e-4 && x <= 1e-1));
    const logs = xs.map(Math.log10);
    assert.ok(Math.abs(mean(logs) - -2.5) < 0.03, `mean log ${mean(logs)}`);
    // A quarter of the draws in each decade-and-a-half quarter: P(x < 10^-3.25) = 0.25.
    const below = xs.filter((x) => x < 10 ** -3.25).length / xs.length;
    assert.ok(Math.abs(below - 0.25) < 0.015);
  });

  it('qloguniform quantizes a log-uniform draw', () => {
    const xs = draws({ qloguniform: [1, 1000, 5] });
    assert.ok(xs.every((x) => x >= 5 && x <= 1000 && Number.isInteger(x / 5)));
    assert.ok(xs.filter((x) => x <= 30).length > xs.filter((x) => x >= 970).length * 5, 'log scale favours small values');
  });

  it('randint excludes hi (as Ray) and is uniform', () => {
    const c = counts(draws({ randint: [3, 7] }));
    assert.deepEqual([...c.keys()].sort(), [3, 4, 5, 6]);
    for (const n of c.values()) assert.ok(Math.abs(n / 20000 - 0.25) < 0.015);
  });

  it('qrandint includes hi and keeps to multiples of q', () => {
    const c = counts(draws({ qrandint: [0, 12, 3] }));
    assert.deepEqual([...c.keys()].sort((a, b) => a - b), [0, 3, 6, 9, 12]);
    for (const n of c.values()) assert.ok(Math.abs(n / 20000 - 0.2) < 0.015);
  });

  it('lograndint excludes hi and favours small values', () => {
    const c = counts(draws({ lograndint: [1, 100] }));
    assert.ok([...c.keys()].every((k) => Number.isInteger(k) && k >= 1 && k <= 99));
    assert.ok(c.has(99) || c.has(98));
    // P(x = 1) = log(2)/log(100) ≈ 0.1505 under floor(exp(U(log 1, log 100))).
    assert.ok(Math.abs((c.get(1) ?? 0) / 20000 - Math.log(2) / Math.log(100)) < 0.01);
  });

  it('randn has the given mean and sd', () => {
    const xs = draws({ randn: [10, 2] });
    assert.ok(Math.abs(mean(xs) - 10) < 0.05);
    assert.ok(Math.abs(sd(xs) - 2) < 0.05);
  });

  it('choice picks each option equally often and builds the option value', () => {
    const space = Space.parse({ opt: { choice: ['sgd', 'adam', 'rmsprop'] } });
    const rng = new Rng(1);
    const c = new Map<unknown, number>();
    for (let i = 0; i < 9000; i++) {
      const v = space.build(space.sample(rng)).opt;
      c.set(v, (c.get(v) ?? 0) + 1);
    }
    assert.deepEqual([...c.keys()].sort(), ['adam', 'rmsprop', 'sgd']);
    for (const n of c.values()) assert.ok(Math.abs(n / 9000 - 1 / 3) < 0.02);
  });

  it('is the same for the same seed and different for another', () => {
    assert.deepEqual(draws({ uniform: [0, 1] }, 5, 3), draws({ uniform: [0, 1] }, 5, 3));
    assert.notDeepEqual(draws({ uniform: [0, 1] }, 5, 3), draws({ uniform: [0, 1] }, 5, 4));
  });
});

describe('tuning space: groups, conditionals, grid', () => {
  const space = Space.parse({
    lr: { loguniform: [1e-4, 1e-1] },
    model: { depth: { randint: [2, 5] }, act: 'relu' },
    optimizer: { choice: [{ name: 'sgd', momentum: { uniform: [0, 0.99] } }, { name: 'adam' }] },
    epochs: 3,
  });

  it('builds nested configs with fixed values, and conditional parameters only when chosen', () => {
    const rng = new Rng(5);
    let sawSgd = false, sawAdam = false;
    for (let i = 0; i < 50; i++) {
      const p = space.sample(rng);
      const c = space.build(p);
      assert.equal(c.epochs, 3);
      assert.equal((c.model as Record<string, unknown>).act, 'relu');
      const opt = c.optimizer as Record<string, unknown>;
      if (opt.name === 'sgd') {
        sawSgd = true;
        assert.equal(typeof opt.momentum, 'number');
        assert.ok('optimizer[0].momentum' in p);
      } else {
        sawAdam = true;
        assert.deepEqual(opt, { name: 'adam' });
        assert.ok(!('optimizer[0].momentum' in p), 'an inactive parameter is not sampled');
      }
    }
    assert.ok(sawSgd && sawAdam);
  });

  it('names dimensions by path, parents first', () => {
    assert.deepEqual(space.dims.map((d) => d.path), ['lr', 'model.depth', 'optimizer', 'optimizer[0].momentum']);
  });

  it('crosses grid values, first parameter by path fastest (as Ray), others sampled per point', () => {
    const g = Space.parse({ b: { grid: ['x', 'y', 'z'] }, a: { grid: [1, 2] }, c: { uniform: [0, 1] } });
    assert.equal(g.gridSize, 6);
    const points = Array.from({ length: 6 }, (_, k) => g.build(g.gridPoint(k)));
    assert.deepEqual(points.map((p) => [p.a, p.b]), [[1, 'x'], [2, 'x'], [1, 'y'], [2, 'y'], [1, 'z'], [2, 'z']]);
    const rng = new Rng(0);
    const sampled = g.build(g.sample(rng, g.gridPoint(3)));
    assert.deepEqual([sampled.a, sampled.b], [2, 'y']);
    assert.equal(typeof sampled.c, 'number');
  });

  it('maps every primitive to the unit interval and back', () => {
    const s = Space.parse({
      u: { uniform: [-1, 3] }, q: { quniform: [0, 10, 2.5] }, l: { loguniform: [1e-3, 1] }, ql: { qloguniform: [1, 100, 1] },
      r: { randint: [0, 10] }, qr: { qrandint: [2, 20, 2] }, lr: { lograndint: [1, 512] }, n: { randn: [0, 1] }, c: { choice: [1, 2, 3] },
    });
    const rng = new Rng(11);
    for (let i = 0; i < 200; i++) {
      const p: Params = s.sample(rng);
      for (const d of s.dims) {
        const u = toUnit(d, p[d.path]);
        assert.ok(u >= 0 && u <= 1, `${d.path}: ${u}`);
        const back = fromUnit(d, u);
        // randn goes through an erf approximation good to ~1e-7.
        const tol = d.kind === 'normal' ? 1e-5 : 1e-9;
        assert.ok(Math.abs(back - p[d.path]) <= tol * Math.max(1, Math.abs(back)), `${d.path}: ${p[d.path]} -> ${u} -> ${back}`);
      }
    }
    for (const d of s.dims) {
      for (const u of [0, 0.3, 1]) {
        const v = fromUnit(d, u);
        assert.ok(Number.isFinite(v));
      }
    }
  });

  it('rejects bounds out of order, log of zero, grid in a conditional group, with the field path', () => {
    const cases: Array<[unknown, string, RegExp]> = [
      [{ a: { uniform: [2, 1] } }, '/space/a/uniform', /below the upper bound/],
      [{ a: { loguniform: [0, 1] } }, '/space/a/loguniform', /greater than 0/],
      [{ a: { choice: [{ b: { grid: [1, 2] } }] } }, '/space/a/choice/0/b/grid', /grid may not sit inside a choice/],
      [{ a: { randint: [1.5, 3] } }, '/space/a/randint', /integers/],
    ];
    for (const [raw, path, re] of cases) {
      assert.throws(() => Space.parse(raw), (e: unknown) => e instanceof SpaceError && e.path === path && re.test(e.message));
    }
  });
});

/**
 * The curves a run record keeps (`RunRecord.curves`): every metric the run reported, point by
 * point, so that the Curves page can draw a finished run, or one of another window or of the CLI,
 * from its record alone.
 *
 * A record is rewritten whole while the run goes (runRecorder.ts), so it must stay small however
 * long the run: each curve keeps at most `maxCurvePoints` points. When it is full, every other point
 * is dropped and from then on only every 2nd (4th, …) point is kept, so the kept points stay evenly
 * spread over the run; the latest point is always kept too, so the curve ends where the run is.
 * A run keeps at most `maxCurves` curves (further metric names are not drawn).
 */

/** What a curve's x is: the global step (training jobs, or the step a script reported), the epoch, or the n-th report of that metric. */
export type CurveAxis = 'step' | 'epoch' | 'report';
export type CurvePoint = readonly [x: number, y: number];

export interface RunCurve {
  readonly axis: CurveAxis;
  /** In the order seen, x ascending for a well-behaved script. */
  readonly points: readonly CurvePoint[];
  /** How many points the run reported for it (more than `points.length` once thinned). */
  readonly seen: number;
}

export const maxCurvePoints = 300;
export const maxCurves = 24;

const axes: readonly CurveAxis[] = ['step', 'epoch', 'report'];

/** Six significant digits: enough for a chart, and a short record. */
const round = (v: number): number => Number(v.toPrecision(6));

/**
 * At most `max` points of `points`, evenly spread, the first and the last always among them: for
 * a curve of a record written by another tool or version, and for the page, so nothing draws
 * more than it can show.
 */
export function thinPoints(points: readonly CurvePoint[], max: number): CurvePoint[] {
  if (points.length <= max) return [...points];
  if (max <= 1) return [points[points.length - 1]];
  const out: CurvePoint[] = [];
  const step = (points.length - 1) / (max - 1);
  for (let i = 0; i < max; i++) out.push(points[Math.round(i * step)]);
  return out;
}

/** One curve being recorded: thins itself as it grows (see the top of this file). */
export class CurveBuilder {
  private kept: CurvePoint[] = [];
  private latest: CurvePoint | undefined;
  private stride = 1;
  private count = 0;

  constructor(readonly axis: CurveAxis, private readonly max = maxCurvePoints) {
    if (max < 4) throw new Error(`a curve keeps at least 4 points (got ${max})`);
  }

  add(x: number, y: number): void {
    if (!Number.isFinite(x) || !Number.isFinite(y)) return;
    const p: CurvePoint = [round(x), round(y)];
    if (this.count % this.stride === 0) {
      this.kept.push(p);
      this.latest = undefined;
      // Full (the latest point needs a place too): keep every other point, and from now on every 2nd as many.
      if (this.kept.length >= this.max) {
        this.kept = this.kept.filter((_, i) => i % 2 === 0);
        // The points kept were those at multiples of the stride; now those at multiples of twice it.
        this.stride *= 2;
      }
    } else {
      this.latest = p;
    }
    this.count++;
  }

  curve(): RunCurve {
    return { axis: this.axis, points: this.latest ? [...this.kept, this.latest] : [...this.kept], seen: this.count };
  }
}

/** The curves of one run as its events come: a builder per metric name. */
export class RunCurves {
  private readonly curves = new Map<string, CurveBuilder>();
  private readonly reports = new Map<string, number>();

  constructor(private readonly maxPoints = maxCurvePoints) {}

  /** A point of `name` on `axis`; a metric first seen on one axis stays on it. */
  add(name: string, axis: CurveAxis, x: number, y: number): void {
    let c = this.curves.get(name);
    if (!c) {
      if (this.curves.size >= maxCurves || !Number.isFinite(y)) return;
      c = new CurveBuilder(axis, this.maxPoints);
      this.curves.set(name, c);
    }
    if (c.axis === axis) c.add(x, y);
  }

  /**
   * A script's report (`job/report`): each metric at the reported step, or, without one, at its
   * own count of reports (a script that prints `Epoch 3 … Loss 0.12` many times an epoch has no
   * x of its own that would not repeat).
   */
  report(metrics: Readonly<Record<string, number>>, step: number | undefined): void {
    for (const [name, y] of Object.entries(metrics)) {
      if (!Number.isFinite(y)) continue;
      const n = (this.reports.get(name) ?? 0) + 1;
      this.reports.set(name, n);
      const existing = this.curves.get(name);
      const axis: CurveAxis = existing ? existing.axis : step !== undefined ? 'step' : 'report';
      if (axis === 'step' && step === undefined) continue;
      this.add(name, axis, axis === 'step' ? (step as number) : n, y);
    }
  }

  get size(): number {
    return this.curves.size;
  }

  toRecord(): Record<string, RunCurve> {
    const out: Record<string, RunCurve> = {};
    for (const [name, c] of this.curves) out[name] = c.curve();
    return out;
  }
}

/** Whether `value` is a record's `curves` field: names to `{axis, points: [[x, y], …], seen}`. */
export function isRunCurves(value: unknown): value is Readonly<Record<string, RunCurve>> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  return Object.values(value).every((c: unknown) => {
    if (typeof c !== 'object' || c === null) return false;
    const r = c as Record<string, unknown>;
    return axes.includes(r.axis as CurveAxis) && typeof r.seen === 'number' && Array.isArray(r.points)
      && r.points.every((p: unknown) => Array.isArray(p) && p.length === 2 && typeof p[0] === 'number' && typeof p[1] === 'number');
  });
}

/**
 * What the Curves page shows for a set of runs (pure, no `vscode`): one chart per metric any of
 * them recorded, a line per run, from the records' `curves` (runCurves.ts). The known metrics come
 * first in a fixed order (a training job's loss by step, then train loss, test loss, test accuracy,
 * throughput by epoch), then a script's own names in alphabetical order.
 */
import type { CurvesMetric, CurvesRun } from '../../common/curvesProtocol';
import { maxCurvePoints, thinPoints } from '../../training/job/runCurves';
import type { RunRecord } from '../../training/job/runRecord';

const known: ReadonlyArray<readonly [key: string, title: string]> = [
  ['loss', 'Training loss'],
  ['trainLoss', 'Train loss'],
  ['testLoss', 'Test loss'],
  ['testAccuracy', 'Test accuracy'],
  ['samplesPerSecond', 'Samples per second'],
];

/** A metric whose values are a fraction shown as a percentage. */
const isAccuracy = (key: string): boolean => /acc|accuracy/i.test(key);

/** What an accuracy's values cannot leave, by what they are: 0..1 (a fraction), 0..100 (in percent); none for other metrics. */
function accuracyBounds(key: string, values: readonly number[]): readonly [number, number] | undefined {
  if (!isAccuracy(key)) return undefined;
  if (values.every((y) => y >= 0 && y <= 1)) return [0, 1];
  return values.every((y) => y >= 0 && y <= 100) ? [0, 100] : undefined;
}

/** `HH:MM:SS` of an ISO time, in this machine's time zone. */
export function localTime(iso: string): string {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
}

export interface CurvesView {
  readonly runs: CurvesRun[];
  readonly metrics: CurvesMetric[];
  /** Whether one of the runs is still running (the page follows it). */
  readonly live: boolean;
}

/**
 * The page's data for `records` (in the order given: the legend's and the colours' order).
 * `running` tells whether a record's run is still going (a `running` record whose process died is not).
 */
export function curvesView(records: readonly RunRecord[], running: (r: RunRecord) => boolean = (r) => r.status === 'running', time: (iso: string) => string = localTime): CurvesView {
  const names = new Map<string, number>();
  for (const r of records) names.set(r.name, (names.get(r.name) ?? 0) + 1);
  const runs: CurvesRun[] = records.map((r, i) => {
    const drawn = r.curves && Object.values(r.curves).some((c) => c.points.length > 0);
    return {
      id: r.id,
      label: (names.get(r.name) ?? 0) > 1 ? `${r.name} · ${time(r.startedAt)}` : r.name,
      status: r.status === 'running' && !running(r) ? 'interrupted' : r.status,
      colour: i,
      ...(drawn ? {} : { note: r.curves ? 'no metrics reported yet' : 'no curves in its record (recorded before curves were kept)' }),
    };
  });
  const keys = new Set<string>();
  for (const r of records) for (const [k, c] of Object.entries(r.curves ?? {})) if (c.points.length) keys.add(k);
  const order = (k: string): number => { const i = known.findIndex(([key]) => key === k); return i < 0 ? known.length : i; };
  const sorted = [...keys].sort((a, b) => order(a) - order(b) || a.localeCompare(b));
  const metrics: CurvesMetric[] = sorted.map((key) => {
    const series = records.flatMap((r) => {
      const c = r.curves?.[key];
      // A foreign record may hold more points than ours would: never more than the chart can show.
      return c && c.points.length ? [{ runId: r.id, axis: c.axis, points: thinPoints(c.points, maxCurvePoints) }] : [];
    });
    // Two runs may record one name on different axes (a script reporting steps, another not): the axis of most runs wins.
    const counts = new Map<string, number>();
    for (const s of series) counts.set(s.axis, (counts.get(s.axis) ?? 0) + 1);
    const axis = [...counts].sort((a, b) => b[1] - a[1])[0][0] as CurvesMetric['axis'];
    const title = known.find(([k]) => k === key)?.[1] ?? key;
    const bounds = accuracyBounds(key, series.flatMap((s) => s.points.map(([, y]) => y)));
    return {
      key, title: `${title} by ${axis}`, axis, percent: bounds?.[1] === 1,
      ...(bounds ? { bounds } : {}),
      series: series.filter((s) => s.axis === axis).map(({ runId, points }) => ({ runId, points })),
    };
  });
  return { runs, metrics, live: records.some((r) => r.status === 'running' && running(r)) };
}

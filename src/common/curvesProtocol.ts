/**
 * Messages between the extension and the Curves page (webview-ui/curves): the metrics of one or
 * several runs, one chart per metric, each run a line of its own colour. Shared by both sides, so
 * no imports of Node or `vscode`.
 */

/** What a curve's x is (runCurves.ts's CurveAxis). */
export type CurvesAxis = 'step' | 'epoch' | 'report';

export interface CurvesRun {
  /** The run record's id. */
  readonly id: string;
  /** What the legend and tooltips call it: the job's name, with its start time when two runs share a name. */
  readonly label: string;
  readonly status: string;
  /** Its colour: the n-th of the page's palette (the same in every chart). */
  readonly colour: number;
  /** Said beside its legend entry when it has nothing to draw (a record written before curves were kept). */
  readonly note?: string;
}

export interface CurvesSeries {
  readonly runId: string;
  readonly points: ReadonlyArray<readonly [number, number]>;
}

export interface CurvesMetric {
  /** The metric's name in the records (`loss`, `testAccuracy`, `test_acc`, …). */
  readonly key: string;
  /** The chart's caption: `Test accuracy by epoch`. */
  readonly title: string;
  readonly axis: CurvesAxis;
  /** Values in 0..1 shown as percentages. */
  readonly percent: boolean;
  /** What the values cannot leave (an accuracy: 0..1 as a fraction, 0..100 in percent): the y axis stays within it. */
  readonly bounds?: readonly [number, number];
  readonly series: readonly CurvesSeries[];
}

export type HostToCurvesMessage =
  /** Everything the page shows, sent whole on each change (a few thousand points at most). `live`: a run is still going, the page follows it. */
  | { readonly type: 'curves/data'; readonly runs: readonly CurvesRun[]; readonly metrics: readonly CurvesMetric[]; readonly live: boolean };

export type CurvesToHostMessage =
  | { readonly type: 'curves/ready' }
  | { readonly type: 'curves/openLog'; readonly runId: string };

/** Validates a message from the page; undefined for anything malformed. */
export function parseCurvesMessage(value: unknown): CurvesToHostMessage | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const m = value as { type?: unknown; runId?: unknown };
  if (m.type === 'curves/ready') return { type: 'curves/ready' };
  if (m.type === 'curves/openLog' && typeof m.runId === 'string' && m.runId !== '') return { type: 'curves/openLog', runId: m.runId };
  return undefined;
}

/** Validates a message from the host (the page's side); undefined for anything else on the window. */
export function asCurvesHostMessage(value: unknown): HostToCurvesMessage | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const m = value as { type?: unknown; runs?: unknown; metrics?: unknown };
  if (m.type !== 'curves/data' || !Array.isArray(m.runs) || !Array.isArray(m.metrics)) return undefined;
  const okRun = (r: unknown): boolean => typeof r === 'object' && r !== null && typeof (r as CurvesRun).id === 'string' && typeof (r as CurvesRun).label === 'string' && typeof (r as CurvesRun).colour === 'number';
  const okMetric = (x: unknown): boolean => typeof x === 'object' && x !== null && typeof (x as CurvesMetric).key === 'string' && Array.isArray((x as CurvesMetric).series)
    && (x as CurvesMetric).series.every((s) => typeof s === 'object' && s !== null && typeof s.runId === 'string' && Array.isArray(s.points));
  return m.runs.every(okRun) && m.metrics.every(okMetric) ? value as HostToCurvesMessage : undefined;
}

/** The words of an axis for captions and tooltips. */
export function axisWord(axis: CurvesAxis): string {
  return axis === 'report' ? 'report' : axis;
}

import uPlot from 'uplot';
import { compactNumber, compactValue, formatMetric, type ResultsExperiment, type ResultsTrial } from '../../src/common/tuningProtocol';
import { FittedChart } from '../chartFit';
import { alignLines, chartBase } from '../chartPage';
import { LineFocus } from '../lineFocus';
import { cssVar, readChartColors, type ChartColors } from '../theme';

const chartHeight = 260;

/** The chart colours: uPlot draws on a canvas, which cannot use CSS variables, so they are read from the theme. */
export interface Palette extends ChartColors {
  readonly best: string;
  readonly stopped: string;
  readonly failed: string;
  readonly other: string;
}

export function readPalette(): Palette {
  const c = readChartColors();
  return {
    ...c,
    best: cssVar('--vscode-charts-green', c.line),
    stopped: cssVar('--vscode-charts-orange', c.line),
    failed: cssVar('--vscode-charts-red', c.line),
    other: cssVar('--vscode-charts-foreground', c.axis),
  };
}

function axes(axis: uPlot.Axis, xLabel: (v: number) => string, xSpace = 60): uPlot.Axis[] {
  return [
    { ...axis, space: xSpace, size: 28, values: (_u, splits) => splits.map((v) => (v == null ? '' : xLabel(v))) },
    { ...axis, size: 56, space: 30, values: (_u, splits) => splits.map((v) => formatMetric(v)) },
  ];
}

function stopWords(t: ResultsTrial, e: ResultsExperiment): string {
  const last = t.curve[t.curve.length - 1];
  const where = last ? ` at ${e.timeAttr} ${compactNumber(last[0])} (${e.metric} ${formatMetric(last[1])})` : '';
  return `Trial ${t.trialId} stopped by ASHA${where}${t.stopMessage ? `: ${t.stopMessage}` : ''}`;
}

/**
 * Every trial's learning curve (metric by the time attribute), the best trial's thick in green,
 * the selected one in blue; a diamond marks the last point of each trial ASHA stopped. The
 * markers are elements over the plot (not canvas pixels), so they carry a tooltip and can be found.
 */
export class CurvesChart extends FittedChart {
  private trials: readonly ResultsTrial[] = [];
  private experiment: ResultsExperiment | undefined;
  private selected: number | null = null;
  /** The trials in the plot's series order. */
  private ordered: readonly ResultsTrial[] = [];
  /** The tooltip and click-to-highlight, shared with the Curves page (lineFocus.ts). */
  private readonly focus: LineFocus;

  /** `onPick`: a click on a trial's curve (its id), or on the selected one again or away from every curve (null). */
  constructor(private readonly host: HTMLElement, private palette: Palette, onPick: (trialId: number | null) => void = () => undefined) {
    super(host, chartHeight);
    host.classList.add('chart', 'curves');
    host.setAttribute('role', 'img');
    this.focus = new LineFocus(host, {
      keyOf: (i) => (this.ordered[i - 1] ? String(this.ordered[i - 1].trialId) : undefined),
      describe: (i, x, y) => {
        const e = this.experiment;
        return `Trial ${this.ordered[i - 1]?.trialId} · ${e?.timeAttr ?? 'x'} ${compactNumber(x)}: ${e?.metric ?? 'metric'} ${formatMetric(y)}`;
      },
      onPick: (key) => onPick(key === null ? null : Number(key)),
    });
  }

  setPalette(p: Palette): void {
    this.palette = p;
    this.redraw();
  }

  update(experiment: ResultsExperiment, trials: readonly ResultsTrial[], selected: number | null): void {
    this.experiment = experiment;
    this.trials = trials.filter((t) => t.curve.length > 0);
    this.selected = selected;
    // The selected trial (a row or a curve clicked) is highlighted, the others dimmed.
    this.focus.highlight(selected !== null && this.trials.some((t) => t.trialId === selected) ? String(selected) : null);
    this.draw();
  }

  private colour(t: ResultsTrial): { stroke: string; width: number; alpha: number } {
    const p = this.palette;
    if (t.trialId === this.experiment?.best?.trialId) return { stroke: p.best, width: 3, alpha: 1 };
    if (t.trialId === this.selected) return { stroke: p.line, width: 2.5, alpha: 1 };
    if (t.status === 'running') return { stroke: p.line, width: 1.5, alpha: 0.9 };
    if (t.status === 'stopped' && t.stopReason === 'asha') return { stroke: p.stopped, width: 1, alpha: 0.8 };
    if (t.status === 'failed') return { stroke: p.failed, width: 1, alpha: 0.8 };
    return { stroke: p.other, width: 1, alpha: 0.6 };
  }

  protected draw(): void {
    const e = this.experiment;
    if (!e) return;
    this.host.dataset.trials = String(this.trials.length);
    this.host.setAttribute('aria-label', `Learning curves: ${e.metric} by ${e.timeAttr} for ${this.trials.length} trial${this.trials.length === 1 ? '' : 's'}`);
    // Draw the highlighted curves last, on top: the plot's series are the trials in that order.
    const order = (t: ResultsTrial): number => (t.trialId === e.best?.trialId ? 2 : t.trialId === this.selected ? 1 : 0);
    const ordered = this.trials.map((t, i) => ({ t, i, o: order(t) })).sort((a, b) => a.o - b.o || a.i - b.i).map((s) => s.t);
    const data = alignLines(ordered.map((t) => t.curve));
    // The series (their number and colours) change only when a trial starts, ends or is picked; reports only add points.
    const key = JSON.stringify([this.trials.map((t) => [t.trialId, this.colour(t)]), e.metric, e.timeAttr]);
    this.showKeyed(key, data, (width) => {
      this.ordered = ordered;
      const series: uPlot.Series[] = [{ label: e.timeAttr }];
      for (const t of ordered) {
        const c = this.colour(t);
        series.push({ label: `Trial ${t.trialId}`, stroke: c.stroke, width: c.width, alpha: c.alpha, spanGaps: true, points: { show: t.curve.length === 1, size: 5 } });
      }
      const { axis, options } = chartBase(this.palette, width, chartHeight);
      const focus = this.focus.options();
      return new uPlot({
        ...options,
        cursor: focus.cursor,
        series,
        axes: axes(axis, compactNumber, 50),
        hooks: { ...focus.hooks, draw: [(u) => this.placeMarkers(u, ordered)] },
      }, data, this.host);
    });
  }

  /** A diamond on the last point of each trial ASHA stopped. */
  private placeMarkers(u: uPlot, ordered: readonly ResultsTrial[]): void {
    const e = this.experiment;
    if (!e) return;
    for (const m of [...u.over.querySelectorAll('.stop-marker')]) m.remove();
    const byId = new Map(this.trials.map((t) => [t.trialId, t]));
    for (const o of ordered) {
      const t = byId.get(o.trialId);
      if (!t || t.status !== 'stopped' || t.stopReason !== 'asha' || !t.curve.length) continue;
      const [x, y] = t.curve[t.curve.length - 1];
      const marker = document.createElement('span');
      marker.className = `stop-marker${t.trialId === this.selected ? ' selected' : ''}`;
      marker.dataset.trialId = String(t.trialId);
      marker.title = stopWords(t, e);
      marker.setAttribute('role', 'img');
      marker.setAttribute('aria-label', marker.title);
      marker.style.left = `${u.valToPos(x, 'x')}px`;
      marker.style.top = `${u.valToPos(y, 'y')}px`;
      u.over.append(marker);
    }
  }
}

/** Where a parameter's values go on the x axis: numbers as they are, other values by category. */
function xOf(values: readonly unknown[]): { x: (v: unknown) => number | null; label: (x: number) => string; categories: string[] | null } {
  const present = values.filter((v) => v !== undefined);
  if (present.every((v) => typeof v === 'number')) return { x: (v) => (typeof v === 'number' ? v : null), label: compactNumber, categories: null };
  const categories = [...new Set(present.map((v) => compactValue(v)))];
  return {
    x: (v) => (v === undefined ? null : categories.indexOf(compactValue(v))),
    label: (x) => (Number.isInteger(x) && x >= 0 && x < categories.length ? categories[x] : ''),
    categories,
  };
}

/** The metric against one parameter, a point per trial that reported it, the best trial's larger and green. */
export class ScatterChart extends FittedChart {
  private experiment: ResultsExperiment | undefined;
  private trials: readonly ResultsTrial[] = [];
  private param: string | null = null;

  constructor(private readonly host: HTMLElement, private palette: Palette) {
    super(host, chartHeight);
    host.classList.add('chart', 'scatter');
    host.setAttribute('role', 'img');
  }

  setPalette(p: Palette): void {
    this.palette = p;
    this.redraw();
  }

  update(experiment: ResultsExperiment, trials: readonly ResultsTrial[], param: string | null): void {
    this.experiment = experiment;
    this.trials = trials;
    this.param = param;
    this.draw();
  }

  protected draw(): void {
    const e = this.experiment;
    const name = this.param;
    if (!e || !name) return;
    const withMetric = this.trials.filter((t) => t.metric !== null && name in t.values);
    const place = xOf(withMetric.map((t) => t.values[name]));
    const points = withMetric
      .map((t) => ({ t, x: place.x(t.values[name]), y: t.metric as number }))
      .filter((p): p is { t: ResultsTrial; x: number; y: number } => p.x !== null && Number.isFinite(p.x))
      .sort((a, b) => a.x - b.x);
    const scale = e.params.find((p) => p.name === name)?.scale ?? 'linear';
    const log = scale === 'log' && !place.categories && points.length > 0 && points.every((p) => p.x > 0);
    const data: uPlot.AlignedData = [
      points.map((p) => p.x),
      points.map((p) => p.y),
      points.map((p) => (p.t.trialId === e.best?.trialId ? p.y : null)),
    ];
    this.host.dataset.param = name;
    this.host.dataset.points = String(points.length);
    this.host.dataset.categories = place.categories?.join(',') ?? '';
    this.host.setAttribute('aria-label', `${e.metric} against ${name}: ${points.length} trial${points.length === 1 ? '' : 's'}${e.best ? `, best trial ${e.best.trialId}` : ''}`);
    const key = JSON.stringify([name, log, place.categories, e.metric]);
    this.showKeyed(key, data, (width) => {
      const p = this.palette;
      const noLine = (): null => null;
      const categories = place.categories;
      const base = chartBase(p, width, chartHeight);
      const [x, y] = axes(base.axis, place.label);
      // A log axis: ticks, grid and labels at the powers of ten only (uPlot also splits at 2..9 × 10^k).
      const decades = (_u: uPlot, splits: number[]): Array<number | null> => splits.map((v) => (v != null && Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9 ? v : null));
      return new uPlot({
        ...base.options,
        scales: {
          x: {
            time: false,
            ...(log ? { distr: 3 } : {}),
            ...(categories ? { range: (): uPlot.Range.MinMax => [-0.5, categories.length - 0.5] } : {}),
          },
        },
        series: [
          { label: name },
          { label: e.metric, stroke: p.line, paths: noLine, points: { show: true, size: 7, width: 1, fill: p.fill, stroke: p.line } },
          { label: 'best', stroke: p.best, paths: noLine, points: { show: true, size: 12, width: 2, fill: p.best, stroke: p.best } },
        ],
        axes: categories ? [{ ...x, splits: () => categories.map((_, i) => i) }, y]
          : [log ? { ...x, filter: decades, grid: { ...x.grid, filter: decades }, ticks: { ...x.ticks, filter: decades } } : x, y],
      }, data, this.host);
    });
  }
}

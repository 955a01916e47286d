import uPlot from 'uplot';
import { axisWord, type CurvesMetric, type CurvesRun } from '../../src/common/curvesProtocol';
import { compactNumber, formatMetric } from '../../src/common/tuningProtocol';
import { FittedChart } from '../chartFit';
import { alignLines, chartBase } from '../chartPage';
import { LineFocus } from '../lineFocus';
import { cssVar, readChartColors, type ChartColors } from '../theme';

const chartHeight = 240;
/** Steps, epochs and reports are whole numbers: ticks only at whole ones. */
const wholeIncrs = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 1e4, 2e4, 2.5e4, 5e4, 1e5, 2e5, 2.5e5, 5e5, 1e6, 2e6, 5e6, 1e7];

/** The theme's chart colours for runs, in order; a run past them repeats them dashed. */
export const runColourVars = ['--vscode-charts-blue', '--vscode-charts-orange', '--vscode-charts-green', '--vscode-charts-purple', '--vscode-charts-red', '--vscode-charts-yellow'] as const;

export interface RunPalette extends ChartColors {
  readonly runs: readonly string[];
}

export function readRunPalette(): RunPalette {
  const c = readChartColors();
  return { ...c, runs: runColourVars.map((v) => cssVar(v, c.line)) };
}

/** uPlot's range for a scale, kept within `bounds` (the whole of them where nothing of it is left). */
export function withinBounds(range: uPlot.Range.MinMax, bounds: readonly [number, number]): uPlot.Range.MinMax {
  const lo = Math.max(range[0] ?? bounds[0], bounds[0]);
  const hi = Math.min(range[1] ?? bounds[1], bounds[1]);
  return hi > lo ? [lo, hi] : [bounds[0], bounds[1]];
}

/** A value as the chart's axis and tooltip show it: a percentage for an accuracy. */
export function valueText(m: CurvesMetric, y: number): string {
  return m.percent ? `${(100 * y).toFixed(2)}%` : formatMetric(y);
}

/**
 * One metric's chart: a line per run in the run's colour (dashed past the sixth), with LineFocus's
 * tooltip ("run, step N: metric value") and click-to-highlight. The page owns the highlight, the
 * same in every chart and the legend.
 */
export class MetricChart extends FittedChart {
  private metric: CurvesMetric | undefined;
  private runs = new Map<string, CurvesRun>();
  private order: string[] = [];
  private readonly focus: LineFocus;

  constructor(readonly host: HTMLElement, private palette: RunPalette, onPick: (runId: string | null) => void) {
    super(host, chartHeight);
    host.classList.add('chart', 'metric-chart');
    host.setAttribute('role', 'img');
    this.focus = new LineFocus(host, {
      keyOf: (i) => this.order[i - 1],
      describe: (i, x, y) => {
        const m = this.metric as CurvesMetric;
        return `${this.runs.get(this.order[i - 1])?.label ?? '?'} · ${axisWord(m.axis)} ${compactNumber(x)}: ${m.key} ${valueText(m, y)}`;
      },
      onPick,
    });
  }

  setPalette(p: RunPalette): void {
    this.palette = p;
    this.redraw();
  }

  highlight(runId: string | null): void {
    this.focus.highlight(runId);
  }

  update(metric: CurvesMetric, runs: readonly CurvesRun[]): void {
    this.metric = metric;
    this.runs = new Map(runs.map((r) => [r.id, r]));
    this.draw();
  }

  protected draw(): void {
    const m = this.metric;
    if (!m) return;
    const series = m.series.filter((s) => this.runs.has(s.runId) && s.points.length);
    const data = alignLines(series.map((s) => s.points));
    const xs = data[0];
    this.host.dataset.metric = m.key;
    this.host.dataset.runs = String(series.length);
    this.host.setAttribute('aria-label', `${m.title}: ${series.map((s) => this.runs.get(s.runId)?.label).join(', ')}`);
    const key = JSON.stringify([series.map((s) => [s.runId, this.runs.get(s.runId)?.colour, s.points.length === 1]), m.key, m.axis, m.percent, m.bounds]);
    this.showKeyed(key, data, (width) => {
      this.order = series.map((s) => s.runId);
      const p = this.palette;
      const { axis, options } = chartBase(p, width, chartHeight);
      const focus = this.focus.options();
      const bounds = m.bounds;
      return new uPlot({
        ...options,
        cursor: focus.cursor,
        // An accuracy's axis stays within what an accuracy can be (uPlot pads a lone point's range past it: 95 % gave 0..190 %).
        ...(bounds ? { scales: { ...options.scales, y: { range: (_u, min, max) => withinBounds(uPlot.rangeNum(min, max, 0.1, true), bounds) } } } : {}),
        series: [
          { label: axisWord(m.axis) },
          ...series.map((s): uPlot.Series => {
            const colour = this.runs.get(s.runId)?.colour ?? 0;
            return {
              label: this.runs.get(s.runId)?.label, stroke: p.runs[colour % p.runs.length], width: 2, spanGaps: true,
              ...(colour >= p.runs.length ? { dash: [6, 4] } : {}),
              points: { show: s.points.length === 1, size: 6 },
            };
          }),
        ],
        axes: [
          { ...axis, space: 50, size: 28, ...(xs.every(Number.isInteger) ? { incrs: wholeIncrs } : {}), values: (_u, splits) => splits.map((v) => (v == null ? '' : compactNumber(v))) },
          { ...axis, size: 60, space: 30, values: (_u, splits) => splits.map((v) => (v == null ? '' : valueText(m, v))) },
        ],
        // The y axis's extent, for the tests (the axis's labels are canvas pixels).
        hooks: { ...focus.hooks, setScale: [(u, scale) => { if (scale === 'y') this.host.dataset.yRange = `${u.scales.y.min},${u.scales.y.max}`; }] },
      }, data, this.host);
    });
  }
}

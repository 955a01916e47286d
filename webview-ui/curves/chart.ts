import uPlot from 'uplot';
import { axisWord, type CurvesMetric, type CurvesRun } from '../../src/common/curvesProtocol';
import { compactNumber, formatMetric } from '../../src/common/tuningProtocol';
import { FittedChart } from '../chartFit';
import { LineFocus } from '../lineFocus';
import { readChartColors, type ChartColors } from '../theme';

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
  const style = getComputedStyle(document.documentElement);
  return { ...c, runs: runColourVars.map((v) => style.getPropertyValue(v).trim() || c.line) };
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
  private key = '';
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
    const xs = [...new Set(series.flatMap((s) => s.points.map(([x]) => x)))].sort((a, b) => a - b);
    const index = new Map(xs.map((x, i) => [x, i]));
    const ys = series.map((s) => {
      const col = new Array<number | null>(xs.length).fill(null);
      for (const [x, y] of s.points) col[index.get(x) as number] = y;
      return col;
    });
    const data = [xs, ...ys] as uPlot.AlignedData;
    this.host.dataset.metric = m.key;
    this.host.dataset.runs = String(series.length);
    this.host.setAttribute('aria-label', `${m.title}: ${series.map((s) => this.runs.get(s.runId)?.label).join(', ')}`);
    const key = JSON.stringify([series.map((s) => [s.runId, this.runs.get(s.runId)?.colour, s.points.length === 1]), m.key, m.axis, m.percent]);
    if (this.plot && key === this.key) {
      this.plot.setData(data);
      return;
    }
    const width = this.fit.measure();
    if (width <= 0) return;
    this.plot?.destroy();
    this.key = key;
    this.order = series.map((s) => s.runId);
    const p = this.palette;
    const axis: uPlot.Axis = { stroke: p.axis, font: p.font, grid: { stroke: p.grid, width: 1 }, ticks: { stroke: p.grid, width: 1, size: 4 } };
    const metric = m;
    const focus = this.focus.options();
    this.plot = new uPlot({
      width,
      height: chartHeight,
      legend: { show: false },
      ...focus,
      select: { show: false, left: 0, top: 0, width: 0, height: 0 },
      scales: { x: { time: false } },
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
        { ...axis, size: 60, space: 30, values: (_u, splits) => splits.map((v) => (v == null ? '' : valueText(metric, v))) },
      ],
    }, data, this.host);
  }
}

import uPlot from 'uplot';
import { FittedChart } from './chartFit';
import { gib } from './format';
import { chartFrame, type ChartColors } from './theme';

const chartHeight = 110;

/** Axis labels as the sidebar has room for: 24-hour "14:25". */
function hhmm(seconds: number): string {
  const d = new Date(seconds * 1000);
  return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
}

/**
 * Memory used on one device over the last `windowMinutes`, drawn by uPlot.
 * Keeps its own ring of samples (seeded from `gpu/init` history, then one point per snapshot)
 * and pushes it to uPlot with `setData`, which redraws only the canvas.
 */
export class MemoryChart extends FittedChart {
  /** Seconds since the epoch (uPlot's time unit). */
  private readonly t: number[] = [];
  /** GiB, `null` where the tool did not report memory (a gap in the line, not a drop to 0). */
  private readonly used: (number | null)[] = [];
  private totalGiB: number | null = null;
  private readonly caption: HTMLElement;
  private readonly host: HTMLElement;

  constructor(
    container: HTMLElement,
    private readonly label: string,
    private windowMinutes: number,
    private colors: ChartColors,
  ) {
    super(container, chartHeight);
    this.host = document.createElement('div');
    this.host.className = 'chart';
    this.host.setAttribute('role', 'img');
    this.caption = document.createElement('div');
    this.caption.className = 'chart-caption';
    container.append(this.host, this.caption);
  }

  /** Replace everything (after `gpu/init`). */
  reset(t: readonly number[], usedMiB: readonly (number | null)[], totalMiB: number | null, windowMinutes: number): void {
    this.windowMinutes = windowMinutes;
    this.t.length = 0;
    this.used.length = 0;
    const n = Math.min(t.length, usedMiB.length);
    for (let i = 0; i < n; i++) this.push(t[i], usedMiB[i]);
    this.totalGiB = totalMiB == null ? null : totalMiB / 1024;
    this.trimAndDraw();
  }

  /** One new sample; older and duplicate timestamps are ignored. */
  append(takenAtMs: number, usedMiB: number | null, totalMiB: number | null): void {
    const last = this.t.length ? this.t[this.t.length - 1] : -Infinity;
    if (takenAtMs / 1000 <= last) return;
    this.push(takenAtMs, usedMiB);
    if (totalMiB != null) this.totalGiB = totalMiB / 1024;
    this.trimAndDraw();
  }

  setColors(colors: ChartColors): void {
    this.colors = colors;
    this.redraw();
  }

  private push(tMs: number, usedMiB: number | null): void {
    this.t.push(tMs / 1000);
    this.used.push(usedMiB == null ? null : usedMiB / 1024);
  }

  private trimAndDraw(): void {
    if (this.t.length) {
      const oldest = this.t[this.t.length - 1] - this.windowMinutes * 60;
      let drop = 0;
      while (drop < this.t.length && this.t[drop] < oldest) drop++;
      if (drop) {
        this.t.splice(0, drop);
        this.used.splice(0, drop);
      }
    }
    this.describe();
    this.draw();
  }

  /** What the chart shows, in words: the caption for everyone, the label for screen readers. */
  private describe(): void {
    let peak: number | null = null;
    for (const v of this.used) if (v != null && (peak == null || v > peak)) peak = v;
    const minutes = `${this.windowMinutes} min`;
    this.caption.textContent = peak == null
      ? `Memory over the last ${minutes}: no samples yet`
      : `Memory over the last ${minutes} · peak ${gib(peak * 1024)} GiB`;
    this.host.setAttribute('aria-label', `${this.label}: memory used over the last ${minutes}, ${this.t.length} samples`);
    this.host.dataset.samples = String(this.t.length);
  }

  protected draw(): void {
    this.show([this.t, this.used], (width) => this.create(width));
  }

  private create(width: number): uPlot {
    const c = this.colors;
    const { axis, options } = chartFrame(c);
    return new uPlot({
      ...options,
      width,
      height: chartHeight,
      scales: {
        // The window ends a little after the newest sample, so that the newest point is not drawn
        // on the plot's edge (where the border hides it).
        x: { time: true, range: (_u, _min, max) => [max - this.windowMinutes * 60, max + this.windowMinutes * 0.6] },
        y: { range: (_u, _min, max) => [0, Math.max(this.totalGiB ?? max, 0.1)] },
      },
      // Points only while there are few samples, so that a chart with its first one is not empty.
      series: [
        {},
        { label: 'Used', stroke: c.line, fill: c.fill, width: 1.5, spanGaps: false, points: { show: (u) => u.data[0].length < 5, size: 5 }, value: (_u, v) => (v == null ? '—' : `${v.toFixed(1)} GiB`) },
      ],
      axes: [
        { ...axis, space: 60, size: 24, values: (_u, splits) => splits.map(hhmm) },
        { ...axis, size: 48, space: 24, values: (_u, splits) => splits.map((v) => (v === 0 ? '0' : `${Number.isInteger(v) ? v : v.toFixed(1)} GiB`)) },
      ],
    }, [this.t, this.used], this.host);
  }
}

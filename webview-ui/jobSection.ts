import uPlot from 'uplot';
import type { PanelJob } from '../src/common/protocol';
import { FittedChart } from './chartFit';
import { chartFrame, type ChartColors } from './theme';

const chartHeight = 90;

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text != null) e.textContent = text;
  return e;
}

function setText(e: HTMLElement, text: string): void {
  if (e.textContent !== text) e.textContent = text;
}

/** "training: mnist-ddp, rank 0": how a device card says which job runs on it. */
export function jobMark(job: PanelJob | null, gpuIndex: number): string | null {
  if (!job || (job.state !== 'running' && job.state !== 'starting')) return null;
  const ranks = job.workers.filter((w) => w.gpuIndex === gpuIndex).map((w) => w.rank);
  if (ranks.length === 0) return null;
  return `training: ${job.name}, rank${ranks.length > 1 ? 's' : ''} ${ranks.join(', ')}`;
}

/** "rank 0 · GPU 0, rank 1 · GPU 1" or "2 CPU workers". */
function workersText(job: PanelJob): string {
  if (job.workers.length === 0) return '';
  if (job.workers.every((w) => w.gpuIndex == null)) return `${job.workers.length} CPU worker${job.workers.length === 1 ? '' : 's'}`;
  return job.workers.map((w) => `rank ${w.rank} · ${w.gpuIndex == null ? 'CPU' : `GPU ${w.gpuIndex}`}`).join(', ');
}

/**
 * The training job started from "Start Training…": its name, state, progress line, workers and
 * loss curve (uPlot, loss over global steps). Built once, updated in place per message.
 */
export class JobSection extends FittedChart {
  readonly root = el('section', 'job');
  private readonly title = el('h2', 'job-title');
  private readonly state = el('vscode-badge', 'job-state');
  private readonly status = el('p', 'job-status');
  private readonly workers = el('p', 'job-workers');
  private readonly metrics = el('p', 'job-metrics');
  private readonly chartBox: HTMLDivElement;
  private readonly caption = el('div', 'chart-caption');
  private data: uPlot.AlignedData = [[], []];

  constructor(private colors: ChartColors) {
    // Fitted to the chart's own box, not the section: the section's padding is no room for the plot.
    const chartBox = el('div', 'job-chart');
    super(chartBox, chartHeight);
    this.chartBox = chartBox;
    this.root.hidden = true;
    this.root.setAttribute('aria-label', 'Training job');
    const head = el('div', 'job-head');
    head.append(this.title, this.state);
    this.chartBox.setAttribute('role', 'img');
    this.root.append(head, this.status, this.workers, this.metrics, this.chartBox, this.caption);
  }

  update(job: PanelJob | null): void {
    this.root.hidden = job === null;
    if (!job) return;
    this.root.dataset.state = job.state;
    setText(this.title, `Training ${job.name} (${job.strategy})`);
    setText(this.state, job.state);
    setText(this.status, job.status);
    setText(this.workers, workersText(job));
    this.workers.hidden = job.workers.length === 0;
    setText(this.metrics, job.metrics ? `Last metrics: ${job.metrics}` : '');
    this.metrics.hidden = !job.metrics;
    const n = Math.min(job.lossSteps.length, job.loss.length);
    this.data = [job.lossSteps.slice(0, n), job.loss.slice(0, n)];
    const last = n ? job.loss[n - 1] : null;
    const unit = job.lossAxis === 'report' ? 'report' : 'step';
    setText(this.caption, last == null ? `Training loss: no ${unit}s yet` : `Training loss · last ${last.toFixed(3)} at ${unit} ${job.lossSteps[n - 1]}`);
    this.chartBox.setAttribute('aria-label', `Training loss of ${job.name} over ${n} steps`);
    this.chartBox.dataset.points = String(n);
    this.chartBox.hidden = n === 0;
    this.draw();
  }

  setColors(colors: ChartColors): void {
    this.colors = colors;
    this.redraw();
  }

  protected draw(): void {
    if (!this.plot && (this.root.hidden || this.data[0].length === 0)) return;
    this.show(this.data, (width) => this.create(width));
  }

  private create(width: number): uPlot {
    const c = this.colors;
    const { axis, options } = chartFrame(c);
    return new uPlot({
      ...options,
      width,
      height: chartHeight,
      scales: { x: { time: false }, y: { range: (_u, _min, max) => [0, Math.max(max, 1e-3) * 1.05] } },
      series: [{}, { label: 'Loss', stroke: c.loss, width: 1.5, points: { show: (u) => u.data[0].length < 5, size: 5 } }],
      axes: [
        { ...axis, space: 50, size: 22 },
        { ...axis, size: 40, space: 20, values: (_u, splits) => splits.map((v) => (v === 0 ? '0' : v.toFixed(v < 1 ? 2 : 1))) },
      ],
    }, this.data, this.chartBox);
  }
}

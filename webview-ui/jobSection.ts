import uPlot from 'uplot';
import type { PanelFinding, PanelGrowthHint, PanelJob } from '../src/common/protocol';
import { bytesText, rankLegend, trackedWord, type PanelRank } from '../src/common/rankMemory';
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

const svgNs = 'http://www.w3.org/2000/svg';
const curveWidth = 100;
const curveHeight = 24;

/** A rank's curve as an SVG polyline's points (x 0..100 over its steps, y over its own range of at least 1 MiB). */
export function curvePoints(steps: readonly number[], bytes: readonly number[]): string {
  const n = Math.min(steps.length, bytes.length);
  if (n === 0) return '';
  const s0 = steps[0];
  const sSpan = Math.max(1, steps[n - 1] - s0);
  let lo = Infinity;
  let hi = -Infinity;
  for (let i = 0; i < n; i++) {
    lo = Math.min(lo, bytes[i]);
    hi = Math.max(hi, bytes[i]);
  }
  const span = Math.max(hi - lo, 2 ** 20);
  const pts: string[] = [];
  for (let i = 0; i < n; i++) {
    const x = n === 1 ? curveWidth / 2 : ((steps[i] - s0) / sSpan) * curveWidth;
    const y = curveHeight - 2 - ((bytes[i] - lo) / span) * (curveHeight - 4);
    pts.push(`${x.toFixed(1)},${y.toFixed(1)}`);
  }
  return pts.join(' ');
}

/** One rank's row in the job's section: its latest numbers and a small curve of them per step. */
class RankRow {
  readonly root = el('div', 'rank-row');
  private readonly label = el('span', 'rank-label');
  private readonly value = el('span', 'rank-value');
  private readonly svg = document.createElementNS(svgNs, 'svg');
  private readonly line = document.createElementNS(svgNs, 'polyline');

  constructor(key: string) {
    this.root.dataset.key = key;
    this.svg.setAttribute('class', 'rank-curve');
    this.svg.setAttribute('viewBox', `0 0 ${curveWidth} ${curveHeight}`);
    this.svg.setAttribute('preserveAspectRatio', 'none');
    this.svg.setAttribute('role', 'img');
    this.line.setAttribute('vector-effect', 'non-scaling-stroke');
    this.svg.append(this.line);
    this.root.append(this.label, this.svg, this.value);
  }

  update(r: PanelRank, growing: boolean): void {
    const m = r.latest;
    setText(this.label, `rank ${r.rank}${m.kind === 'cuda' ? ` · ${m.device}` : ' · CPU'}`);
    setText(this.value, `${rankLegend(m)} · step ${m.step}`);
    this.root.title = m.kind === 'cuda'
      ? `rank ${r.rank}${r.pid == null ? '' : ` (PID ${r.pid})`} on ${m.device}: allocated (live tensors) per optimizer step; reserved is what the caching allocator holds. Step peak ${bytesText(m.peakAllocatedBytes)}.`
      : `rank ${r.rank}${r.pid == null ? '' : ` (PID ${r.pid})`} on the CPU: RSS (the process's resident memory) per optimizer step; ${m.peakSinceStart ? 'peak since start' : 'step peak'} ${bytesText(m.peakRssBytes)}.`;
    this.root.classList.toggle('growing', growing);
    this.line.setAttribute('points', curvePoints(r.steps, r.bytes));
    this.svg.dataset.points = String(Math.min(r.steps.length, r.bytes.length));
    this.svg.setAttribute('aria-label', `rank ${r.rank}: ${trackedWord(m.kind)} over ${r.steps.length} optimizer steps, ${bytesText(r.bytes[0] ?? 0)} to ${bytesText(r.bytes[r.bytes.length - 1] ?? 0)}`);
  }
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
  private readonly growth = el('p', 'job-growth');
  private readonly growthText = el('span', 'job-growth-text');
  private readonly finding = el('a', 'job-finding');
  private readonly ranks = el('div', 'job-ranks');
  private readonly rankRows = new Map<string, RankRow>();
  /** Where the link under the growth hint leads: the finding, or the script at its top. */
  private shownFinding: PanelFinding | undefined;
  private data: uPlot.AlignedData = [[], []];

  constructor(private colors: ChartColors, private readonly openFinding: (finding: PanelFinding) => void = () => undefined) {
    // Fitted to the chart's own box, not the section: the section's padding is no room for the plot.
    const chartBox = el('div', 'job-chart');
    super(chartBox, chartHeight);
    this.chartBox = chartBox;
    this.root.hidden = true;
    this.root.setAttribute('aria-label', 'Training job');
    const head = el('div', 'job-head');
    head.append(this.title, this.state);
    this.chartBox.setAttribute('role', 'img');
    this.finding.href = '#';
    this.finding.addEventListener('click', (e) => {
      e.preventDefault();
      if (this.shownFinding) this.openFinding(this.shownFinding);
    });
    this.growth.append(this.growthText, ' ', this.finding);
    this.growth.hidden = true;
    this.ranks.hidden = true;
    this.ranks.setAttribute('aria-label', 'Memory per rank');
    this.root.append(head, this.status, this.workers, this.metrics, this.growth, this.ranks, this.chartBox, this.caption);
  }

  /** Each rank's memory per optimizer step (torchrun jobs under the companion), in place. */
  private updateRanks(ranks: readonly PanelRank[], growing: ReadonlySet<number>): void {
    this.ranks.hidden = ranks.length === 0;
    const seen = new Set<string>();
    const rows: HTMLElement[] = [];
    for (const r of ranks) {
      const key = `${r.rank}:${r.device}`;
      seen.add(key);
      let row = this.rankRows.get(key);
      if (!row) {
        row = new RankRow(key);
        this.rankRows.set(key, row);
      }
      row.update(r, growing.has(r.rank));
      rows.push(row.root);
    }
    for (const key of [...this.rankRows.keys()]) if (!seen.has(key)) this.rankRows.delete(key);
    const current = this.ranks.children;
    if (current.length !== rows.length || rows.some((row, i) => current[i] !== row)) this.ranks.replaceChildren(...rows);
  }

  /** "Memory grows every optimizer step on rank 1 (…)", and the linter's finding that explains it, as a link. */
  private updateGrowth(growth: PanelGrowthHint | null | undefined): void {
    this.growth.hidden = !growth;
    const message = growth?.message ?? '';
    if (this.growthText.dataset.message !== message) {
      this.growthText.dataset.message = message;
      // The hint quotes code in `backticks`, as the course notes do.
      this.growthText.replaceChildren(...message.split('`').map((part, i) => (i % 2 === 1 ? el('code', undefined, part) : part)));
    }
    const f = growth?.finding;
    const script = growth?.script;
    const base = (path: string) => path.split(/[\\/]/).pop() ?? path;
    this.shownFinding = f ?? (script ? { file: script, line: 0, code: '', message: '' } : undefined);
    this.finding.hidden = !this.shownFinding;
    this.finding.classList.toggle('open-script', !f && !!script);
    setText(this.finding, f ? `${f.code} at ${base(f.file)}:${f.line + 1}` : script ? `Open ${base(script)} to check it for the cause` : '');
    this.finding.title = f ? `Open ${f.file} at line ${f.line + 1}: ${f.message}` : script ? `Open ${script}: the OOM hints check the files shown in editors, and link their finding here` : '';
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
    this.updateGrowth(job.growth);
    this.updateRanks(job.ranks ?? [], new Set(job.growth?.ranks ?? []));
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

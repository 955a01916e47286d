import type { PanelJob } from '../src/common/protocol';
import { bytesText, rankBarSegments, rankBarTooltip, rankLegend, ranksByPid, recordForCard, type PanelRank } from '../src/common/rankMemory';
import type { GpuDevice, GpuProcess } from '../src/gpu/types';
import { celsius, gib, memoryText, memoryTooltip, mib, missing, percent, power } from './format';
import { MemoryChart } from './memoryChart';
import type { ChartColors } from './theme';

/** How a device is recognised from one sample to the next: its UUID, else its index. */
export function deviceKey(d: { readonly uuid: string | null; readonly index?: number; readonly gpuIndex?: number }): string {
  return d.uuid ?? `#${d.index ?? d.gpuIndex ?? '?'}`;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text != null) e.textContent = text;
  return e;
}

/** Writes only when the text changed, so a steady sample costs no layout. */
function setText(e: HTMLElement, text: string): void {
  if (e.textContent !== text) e.textContent = text;
}

function setTitle(e: HTMLElement, title: string): void {
  if (e.title !== title) e.title = title;
}

function share(part: number | null, total: number | null): number {
  if (part == null || total == null || total <= 0) return 0;
  return Math.min(100, Math.max(0, (part / total) * 100));
}

interface ProcessRow {
  readonly row: HTMLTableRowElement;
  readonly name: HTMLTableCellElement;
  readonly memory: HTMLTableCellElement;
  /** nvidia-smi's figure for the process. */
  readonly total: HTMLSpanElement;
  /** For a worker of our running job: what TF.js holds on the device by its own count. */
  readonly held: HTMLSpanElement;
  /** For a rank of our torchrun job: a row under the process's, with its bar split into allocated, cache and the rest, and their sizes. */
  readonly detail: HTMLTableRowElement;
  readonly rankBar: HTMLDivElement;
  readonly rankLegend: HTMLSpanElement;
}

/** A worker of the running job, by pid: its rank, and the device bytes its backend reported. */
interface JobWorkerMark {
  readonly job: string;
  readonly rank: number;
  readonly deviceBytes: number | null;
  /** torchrun jobs: the process's memory records from the Python companion (one per device it uses). */
  readonly ranks?: readonly PanelRank[];
  /** The job's CUDA_VISIBLE_DEVICES, to tell which record belongs on which card. */
  readonly visible: readonly number[] | null;
}

/** The workers of a running job, by pid, to mark their rows among a GPU's processes. */
export function jobWorkersByPid(job: PanelJob | null): Map<number, JobWorkerMark> {
  const out = new Map<number, JobWorkerMark>();
  if (!job || (job.state !== 'running' && job.state !== 'starting')) return out;
  const visible = job.cudaVisibleDevices ?? null;
  for (const w of job.workers) if (w.pid !== undefined) out.set(w.pid, { job: job.name, rank: w.rank, deviceBytes: w.deviceBytes ?? null, visible });
  // Ranks the companion reported, by the pid each memory message carries.
  for (const [pid, ranks] of ranksByPid(job.ranks ?? [])) out.set(pid, { job: job.name, rank: ranks[0].rank, deviceBytes: out.get(pid)?.deviceBytes ?? null, ranks, visible });
  return out;
}

/**
 * One GPU: a collapsible card with its memory bar and numbers, utilisation, temperature,
 * power, a memory chart and its processes. Built once, then updated in place per sample.
 */
export class DeviceCard {
  readonly root: HTMLElementTagNameMap['vscode-collapsible'];
  private readonly summary = el('span', 'summary');
  private readonly jobMark = el('p', 'job-mark');
  private readonly numbers = el('span', 'memory-numbers');
  private readonly reserved = el('span', 'memory-reserved');
  private readonly bar = el('div', 'bar');
  private readonly barUsed = el('div', 'bar-used');
  private readonly barReserved = el('div', 'bar-reserved');
  private readonly util = el('dd');
  private readonly temp = el('dd');
  private readonly power = el('dd');
  private readonly processBody = el('tbody');
  private readonly noProcesses: HTMLTableRowElement;
  private readonly rows = new Map<number, ProcessRow>();
  private processes: readonly GpuProcess[] = [];
  private jobWorkers = new Map<number, JobWorkerMark>();
  readonly chart: MemoryChart;
  /** The tool's device index, as of the last update (a training job names its GPUs by it). */
  index: number;

  constructor(readonly key: string, device: GpuDevice, open: boolean, windowMinutes: number, colors: ChartColors, onToggle: (key: string, open: boolean) => void) {
    this.index = device.index;
    const root = document.createElement('vscode-collapsible');
    this.root = root;
    root.className = 'device';
    root.dataset.key = key;
    root.open = open;
    root.addEventListener('vsc-collapsible-toggle', (e) => onToggle(key, e.detail.open));

    this.summary.slot = 'decorations';

    const body = el('div', 'device-body');

    const memory = el('div', 'memory');
    const memoryLine = el('div', 'memory-line');
    memoryLine.append(el('span', 'label', 'Memory'), this.numbers);
    this.bar.setAttribute('role', 'meter');
    this.bar.setAttribute('aria-valuemin', '0');
    this.bar.append(this.barUsed, this.barReserved);
    memory.append(memoryLine, this.bar, this.reserved);

    const stats = el('dl', 'stats');
    const stat = (label: string, value: HTMLElement): HTMLElement => {
      const d = el('div', 'stat');
      d.append(el('dt', undefined, label), value);
      return d;
    };
    stats.append(stat('Utilisation', this.util), stat('Temperature', this.temp), stat('Power', this.power));

    const chartBox = el('div', 'chart-box');

    const table = el('table', 'processes');
    const head = el('thead');
    const hr = el('tr');
    hr.append(el('th', 'pid', 'PID'), el('th', 'name', 'Process'), el('th', 'mem', 'Memory'));
    head.append(hr);
    this.noProcesses = el('tr', 'empty');
    const none = el('td', undefined, 'No compute processes');
    none.colSpan = 3;
    this.noProcesses.append(none);
    table.append(head, this.processBody);

    this.jobMark.hidden = true;
    body.append(this.jobMark, memory, stats, chartBox, table);
    root.append(this.summary, body);

    this.chart = new MemoryChart(chartBox, `GPU ${device.index}`, windowMinutes, colors);
    this.update(device, []);
  }

  update(d: GpuDevice, processes: readonly GpuProcess[]): void {
    this.index = d.index;
    const heading = `GPU ${d.index}`;
    if (this.root.heading !== heading) this.root.heading = heading;
    const name = d.name ?? missing;
    if (this.root.description !== name) this.root.description = name;

    const text = memoryText(d.memoryUsedMiB, d.memoryTotalMiB);
    const tip = memoryTooltip(d.memoryUsedMiB, d.memoryReservedMiB, d.memoryTotalMiB);
    setText(this.summary, text);
    setText(this.numbers, text);
    setTitle(this.numbers, tip);
    setTitle(this.summary, tip);
    setTitle(this.bar, tip);
    setText(this.reserved, d.memoryReservedMiB == null ? `Reserved by the driver: ${missing}` : `Reserved by the driver: ${gib(d.memoryReservedMiB)} GiB`);
    setTitle(this.reserved, mib(d.memoryReservedMiB));
    this.barUsed.style.width = `${share(d.memoryUsedMiB, d.memoryTotalMiB)}%`;
    this.barReserved.style.width = `${share(d.memoryReservedMiB, d.memoryTotalMiB)}%`;
    this.bar.classList.toggle('unknown', d.memoryUsedMiB == null || d.memoryTotalMiB == null);
    this.bar.setAttribute('aria-label', `GPU ${d.index} memory used: ${text}`);
    if (d.memoryTotalMiB != null) this.bar.setAttribute('aria-valuemax', String(d.memoryTotalMiB));
    if (d.memoryUsedMiB != null) this.bar.setAttribute('aria-valuenow', String(d.memoryUsedMiB));
    else this.bar.removeAttribute('aria-valuenow');

    setText(this.util, percent(d.utilizationPercent));
    setText(this.temp, celsius(d.temperatureC));
    setText(this.power, power(d.powerW, d.powerLimitW));

    this.updateProcesses(processes);
  }

  /** The running job's workers: their process rows say so, with what TF.js holds on the device beside nvidia-smi's figure. */
  setJobWorkers(workers: Map<number, JobWorkerMark>): void {
    const same = workers.size === this.jobWorkers.size && [...workers].every(([pid, w]) => {
      const had = this.jobWorkers.get(pid);
      return had?.rank === w.rank && had.deviceBytes === w.deviceBytes && had.job === w.job && had.ranks === w.ranks;
    });
    if (same) return;
    this.jobWorkers = workers;
    this.updateProcesses(this.processes);
  }

  private updateProcesses(processes: readonly GpuProcess[]): void {
    this.processes = processes;
    const sorted = [...processes].sort((a, b) => (b.memoryMiB ?? -1) - (a.memoryMiB ?? -1) || a.pid - b.pid);
    const seen = new Set<number>();
    for (const p of sorted) {
      seen.add(p.pid);
      let r = this.rows.get(p.pid);
      if (!r) {
        const row = el('tr', 'process');
        row.dataset.pid = String(p.pid);
        const name = el('td', 'name');
        const memory = el('td', 'mem');
        const total = el('span', 'total');
        const held = el('span', 'held');
        const rankBar = el('div', 'rank-bar');
        rankBar.setAttribute('role', 'img');
        rankBar.append(el('span', 'seg seg-allocated'), el('span', 'seg seg-cached'), el('span', 'seg seg-other'));
        const legend = el('span', 'rank-legend');
        memory.append(total, held);
        row.append(el('td', 'pid', String(p.pid)), name, memory);
        const detail = el('tr', 'rank-detail');
        detail.dataset.pid = String(p.pid);
        const cell = el('td');
        cell.colSpan = 3;
        cell.append(rankBar, legend);
        detail.append(cell);
        r = { row, name, memory, total, held, detail, rankBar, rankLegend: legend };
        this.rows.set(p.pid, r);
      }
      // Paths can be long (/opt/conda/envs/…/python): show the file name, the path on hover.
      setText(r.name, p.name.split('/').pop() || p.name);
      setTitle(r.name, p.name);
      setText(r.total, p.memoryMiB == null ? missing : `${Math.round(p.memoryMiB)} MiB`);
      const worker = this.jobWorkers.get(p.pid);
      r.row.classList.toggle('job-worker', worker !== undefined);
      r.held.hidden = worker?.deviceBytes == null;
      setText(r.held, worker?.deviceBytes == null ? '' : `TF.js ${Math.round(worker.deviceBytes / 2 ** 20)} MiB`);
      const record = recordForCard(worker?.ranks, this.index, worker?.visible ?? null);
      r.detail.hidden = record === undefined;
      if (worker && record && record.latest.kind === 'cuda') {
        const m = record.latest;
        const segments = rankBarSegments(p.memoryMiB, m.allocatedBytes, m.reservedBytes);
        const spans = r.rankBar.children;
        segments.forEach((seg, i) => {
          (spans[i] as HTMLElement).style.width = `${seg.percent.toFixed(2)}%`;
          (spans[i] as HTMLElement).dataset.bytes = String(seg.bytes);
        });
        r.rankBar.dataset.allocated = String(m.allocatedBytes);
        r.rankBar.dataset.reserved = String(m.reservedBytes);
        r.rankBar.setAttribute('aria-label', `rank ${worker.rank}: ${rankLegend(m)}${p.memoryMiB == null ? '' : ` of ${Math.round(p.memoryMiB)} MiB by nvidia-smi`}`);
        setText(r.rankLegend, `rank ${worker.rank} · ${rankLegend(m)}${p.memoryMiB == null ? '' : ` · context/other ${bytesText(segments[2].bytes)}`}`);
        const tip = rankBarTooltip(worker.rank, worker.job, m, p.memoryMiB);
        setTitle(r.memory, tip);
        setTitle(r.detail, tip);
      } else {
        setText(r.rankLegend, '');
        setTitle(r.detail, '');
        setTitle(r.memory, worker === undefined ? ''
          : `rank ${worker.rank} of ${worker.job}. nvidia-smi: the whole process (its driver context included)${worker.deviceBytes == null ? '' : `; TF.js: the device buffers its backend holds, by its own count (${Math.round(worker.deviceBytes / 2 ** 20)} MiB)`}.`);
      }
    }
    for (const [pid, r] of this.rows) {
      if (!seen.has(pid)) {
        r.row.remove();
        r.detail.remove();
        this.rows.delete(pid);
      }
    }
    // A rank's bar goes in its own row right under its process's.
    const wanted: HTMLTableRowElement[] = sorted.length ? sorted.flatMap((p) => {
      const r = this.rows.get(p.pid)!;
      return r.detail.hidden ? [r.row] : [r.row, r.detail];
    }) : [this.noProcesses];
    const current = this.processBody.children;
    let inOrder = current.length === wanted.length;
    for (let i = 0; inOrder && i < wanted.length; i++) inOrder = current[i] === wanted[i];
    if (!inOrder) this.processBody.replaceChildren(...wanted);
  }

  /** "training: mnist-ddp, rank 0" while a job started from the editor runs on this GPU. */
  setJob(mark: string | null): void {
    this.jobMark.hidden = mark === null;
    setText(this.jobMark, mark ?? '');
    this.root.classList.toggle('in-job', mark !== null);
    this.summary.classList.toggle('in-job', mark !== null);
  }

  setStale(stale: boolean): void {
    this.root.classList.toggle('stale', stale);
  }

  dispose(): void {
    this.chart.dispose();
    this.root.remove();
  }
}

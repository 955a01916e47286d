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

  private updateProcesses(processes: readonly GpuProcess[]): void {
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
        row.append(el('td', 'pid', String(p.pid)), name, memory);
        r = { row, name, memory };
        this.rows.set(p.pid, r);
      }
      // Paths can be long (/opt/conda/envs/…/python): show the file name, the path on hover.
      setText(r.name, p.name.split('/').pop() || p.name);
      setTitle(r.name, p.name);
      setText(r.memory, p.memoryMiB == null ? missing : `${Math.round(p.memoryMiB)} MiB`);
    }
    for (const [pid, r] of this.rows) {
      if (!seen.has(pid)) {
        r.row.remove();
        this.rows.delete(pid);
      }
    }
    const wanted: HTMLTableRowElement[] = sorted.length ? sorted.map((p) => this.rows.get(p.pid)!.row) : [this.noProcesses];
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

import type { HostToPanelMessage, PanelJob, PanelSlurmNode, PanelSlurmNodes } from '../src/common/protocol';
import type { GpuHint, GpuInventoryEntry, GpuSnapshot, MemorySeries } from '../src/gpu/types';
import { DeviceCard, deviceKey, jobWorkersByPid } from './deviceCard';
import { clock } from './format';
import { JobSection, jobMark } from './jobSection';
import { SlurmNodesSection } from './slurmNodesSection';
import { onThemeChange, readChartColors } from './theme';
import type { PanelState, VsCodeApi } from './vscodeApi';

type Mode = 'waiting' | 'problem' | 'noGpu' | 'devices';

/** The setting the no-GPU state links to. */
export const nvidiaSmiSetting = 'gpuWorkbench.gpuMonitor.nvidiaSmiPath';

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text != null) e.textContent = text;
  return e;
}

/** Accepts only the two messages the host sends; anything else is ignored. */
export function asHostMessage(data: unknown): HostToPanelMessage | undefined {
  if (typeof data !== 'object' || data === null) return undefined;
  const m = data as { type?: unknown; snapshot?: unknown; history?: unknown; hints?: unknown };
  const snapshotOk = (s: unknown): boolean => typeof s === 'object' && s !== null && Array.isArray((s as GpuSnapshot).devices) && Array.isArray((s as GpuSnapshot).processes);
  switch (m.type) {
    case 'gpu/init':
      return (m.snapshot === null || snapshotOk(m.snapshot)) && Array.isArray(m.history) && Array.isArray(m.hints) ? (data as HostToPanelMessage) : undefined;
    case 'gpu/snapshot':
      return snapshotOk(m.snapshot) && Array.isArray(m.hints) ? (data as HostToPanelMessage) : undefined;
    case 'gpu/job':
      return jobOk((data as { job?: unknown }).job) ? (data as HostToPanelMessage) : undefined;
    default:
      return undefined;
  }
}

function jobOk(j: unknown): boolean {
  if (j === null) return true;
  if (typeof j !== 'object' || j === undefined) return false;
  const job = j as Partial<PanelJob>;
  return typeof job.name === 'string' && typeof job.status === 'string' && typeof job.state === 'string' && Array.isArray(job.workers) && Array.isArray(job.lossSteps) && Array.isArray(job.loss);
}

/** A running Slurm job's nodes, as the host sends them (anything else draws no section). */
function slurmNodesOk(n: unknown): n is PanelSlurmNodes {
  if (typeof n !== 'object' || n === null) return false;
  const s = n as Partial<PanelSlurmNodes>;
  return typeof s.jobId === 'string' && typeof s.nodeList === 'string' && typeof s.takenAt === 'number' && Array.isArray(s.unavailable) && Array.isArray(s.nodes)
    && (s.nodes as unknown[]).every((x) => {
      const node = x as Partial<PanelSlurmNode> | null;
      return typeof node === 'object' && node !== null && typeof node.node === 'string' && Array.isArray(node.devices) && Array.isArray(node.processes) && Array.isArray(node.idle);
    });
}

/** Hint texts quote code in `backticks`, as the course notes do: show those parts as code. */
function withCode(target: HTMLElement, text: string): HTMLElement {
  text.split('`').forEach((part, i) => {
    if (part) target.append(i % 2 === 1 ? el('code', undefined, part) : part);
  });
  return target;
}

function describeInventory(inventory: readonly GpuInventoryEntry[]): string {
  const parts = inventory
    .filter((g) => g.model || g.vendor)
    .map((g) => {
      const facts = [g.vramMiB != null ? `${(g.vramMiB / 1024).toFixed(1)} GiB` : null, g.driverVersion ? `driver ${g.driverVersion}` : null].filter(Boolean);
      const name = [g.vendor, g.model].filter(Boolean).join(' ');
      return facts.length ? `${name} (${facts.join(', ')})` : name;
    });
  return parts.length ? `Graphics hardware the system reports: ${parts.join('; ')}.` : '';
}

/**
 * The whole page: a status line, hints, and one card per device; or, before the first sample
 * and when the tool fails, a message in words with the tool's own error and a Retry button.
 */
export class Panel {
  private mode: Mode | undefined;
  private readonly cards = new Map<string, DeviceCard>();
  private collapsed: Set<string>;
  private historyMinutes = 10;
  private inventory: readonly GpuInventoryEntry[] = [];
  private colors = readChartColors();
  private hintsKey = '';
  private firstSampleTimer: ReturnType<typeof setTimeout> | undefined;

  private readonly statusLine = el('header', 'status-line');
  private readonly sourceText = el('span', 'source');
  private readonly staleBadge = el('vscode-badge', 'stale-badge', 'stale');
  private readonly notice = el('p', 'notice');
  private readonly waiting = el('section', 'waiting');
  private readonly waitingText = el('span', undefined, 'Waiting for the first sample…');
  private readonly problem = el('section', 'problem');
  private readonly problemTitle = el('h2');
  private readonly problemText = el('p');
  private readonly problemError = el('pre', 'tool-error');
  private readonly problemRetryNote = el('p', 'retry-note');
  private readonly problemInventory = el('p', 'inventory');
  private readonly problemSetting = el('p', 'fix-setting');
  private readonly retry = el('vscode-button', 'retry', 'Retry');
  private readonly noGpu = el('section', 'no-gpu');
  private readonly noGpuLooked = el('p', 'looked');
  private readonly noGpuInventory = el('p', 'inventory');
  private readonly hints = el('ul', 'hints');
  private readonly devices = el('div', 'devices');
  private job: PanelJob | null = null;
  private readonly slurmNodes = new SlurmNodesSection();
  private readonly jobSection = new JobSection(readChartColors(), (f) => this.api.postMessage({ type: 'panel/openFinding', file: f.file, line: f.line }));

  constructor(private readonly root: HTMLElement, private readonly api: VsCodeApi, private readonly firstSampleTimeoutMs: number) {
    this.collapsed = new Set(api.getState()?.collapsed ?? []);

    this.statusLine.append(this.sourceText, this.staleBadge);
    this.staleBadge.hidden = true;
    const ring = el('vscode-progress-ring');
    ring.ariaLabel = 'Waiting for the first sample';
    this.waiting.append(ring, this.waitingText);
    this.retry.addEventListener('click', () => this.onRetry());
    const fix = el('a', 'open-setting', 'fix the path of nvidia-smi');
    fix.href = '#';
    fix.title = nvidiaSmiSetting;
    fix.addEventListener('click', (e) => {
      e.preventDefault();
      this.api.postMessage({ type: 'panel/openSetting', id: nvidiaSmiSetting });
    });
    this.problemSetting.append('Nothing runs at the path you set: ', fix, ' (setting ', el('code', undefined, nvidiaSmiSetting), '); the panel looks again when the setting changes.');
    this.problemSetting.hidden = true;
    this.problem.append(this.problemTitle, this.problemText, this.problemError, this.problemSetting, this.problemRetryNote, this.problemInventory, this.retry);
    this.buildNoGpu();
    this.notice.hidden = true;
    this.hints.hidden = true;
    this.hints.addEventListener('click', (e) => {
      const a = (e.target as Element | null)?.closest('a');
      if (!a) return;
      e.preventDefault();
      const url = a.getAttribute('href') ?? '';
      if (/^https:\/\//.test(url)) this.api.postMessage({ type: 'panel/openLink', url });
    });
    this.root.replaceChildren(this.statusLine, this.notice, this.waiting, this.problem, this.noGpu, this.hints, this.jobSection.root, this.slurmNodes.root, this.devices);
    this.setMode('waiting');
    this.startFirstSampleTimer();

    onThemeChange(() => {
      this.colors = readChartColors();
      for (const card of this.cards.values()) card.chart.setColors(this.colors);
      this.jobSection.setColors(this.colors);
    });
  }

  handle(message: HostToPanelMessage): void {
    switch (message.type) {
      case 'gpu/init':
        this.init(message.snapshot, message.history, message.inventory, message.hints, message.historyMinutes);
        break;
      case 'gpu/snapshot':
        this.show(message.snapshot, message.hints, true);
        break;
      case 'gpu/job':
        this.showJob(message.job);
        break;
      default: {
        const unreachable: never = message;
        throw new Error(`unhandled message ${JSON.stringify(unreachable)}`);
      }
    }
  }

  /** The job's section, and a mark on each device card it trains on. */
  private showJob(job: PanelJob | null): void {
    this.job = job;
    this.jobSection.update(job);
    this.slurmNodes.update(job && (job.state === 'running' || job.state === 'starting') && slurmNodesOk(job.slurmNodes) ? job.slurmNodes : undefined);
    const workers = jobWorkersByPid(job);
    for (const card of this.cards.values()) {
      card.setJob(jobMark(job, card.index));
      card.setJobWorkers(workers);
    }
  }

  private init(snapshot: GpuSnapshot | null, history: readonly MemorySeries[], inventory: readonly GpuInventoryEntry[], hints: readonly GpuHint[], historyMinutes: number): void {
    this.historyMinutes = historyMinutes > 0 ? historyMinutes : 10;
    this.inventory = inventory;
    if (snapshot) this.show(snapshot, hints, false);
    else this.setHints(hints);
    const byKey = new Map(history.map((s) => [deviceKey(s), s]));
    for (const [key, card] of this.cards) {
      const s = byKey.get(key);
      const device = snapshot?.devices.find((d) => deviceKey(d) === key);
      card.chart.reset(s?.t ?? [], s?.usedMiB ?? [], s?.totalMiB ?? device?.memoryTotalMiB ?? null, this.historyMinutes);
      if (device && !s) card.chart.append(snapshot!.takenAt, device.memoryUsedMiB, device.memoryTotalMiB);
    }
  }

  private show(snapshot: GpuSnapshot, hints: readonly GpuHint[], appendToChart: boolean): void {
    this.clearFirstSampleTimer();
    const stale = snapshot.stale === true;
    this.staleBadge.hidden = !stale;
    this.staleBadge.title = stale ? `No new sample since ${clock(snapshot.takenAt)}: the numbers shown are old.` : '';
    const count = snapshot.devices.length;
    const source = snapshot.source === 'none' ? 'no GPU tool' : snapshot.source === 'amd' ? 'AMD (sysfs)' : snapshot.source;
    this.sourceText.textContent = count === 0
      ? `${source} · checked ${clock(snapshot.takenAt)}`
      : `${source} · ${count} GPU${count === 1 ? '' : 's'} · ${stale ? 'last sample' : 'updated'} ${clock(snapshot.takenAt)}`;

    if (count === 0 && (snapshot.noGpu === true || (snapshot.source === 'none' && !snapshot.error))) {
      this.showNoGpu(snapshot);
    } else if (count === 0) {
      this.showProblem(snapshot);
    } else {
      this.setMode('devices');
      // Devices can report and the tool still complain (e.g. the process query failed).
      this.notice.hidden = !snapshot.error;
      this.notice.textContent = snapshot.error ? `The GPU tool reported: ${snapshot.error}` : '';
    }
    this.setHints(hints);
    this.updateCards(snapshot, appendToChart);
  }

  private updateCards(snapshot: GpuSnapshot, appendToChart: boolean): void {
    const seen = new Set<string>();
    let previous: Element | null = null;
    const workers = jobWorkersByPid(this.job);
    for (const d of snapshot.devices) {
      const key = deviceKey(d);
      seen.add(key);
      let card = this.cards.get(key);
      if (!card) {
        card = new DeviceCard(key, d, !this.collapsed.has(key), this.historyMinutes, this.colors, (k, open) => this.onToggle(k, open));
        this.cards.set(key, card);
      }
      // Keep the tool's device order without moving nodes that are already in place.
      const expected: Element | null = previous ? previous.nextElementSibling : this.devices.firstElementChild;
      if (expected !== card.root) this.devices.insertBefore(card.root, expected);
      previous = card.root;
      card.setJobWorkers(workers);
      card.update(d, snapshot.processes.filter((p) => p.gpuIndex === d.index));
      card.setJob(jobMark(this.job, d.index));
      card.setStale(snapshot.stale === true);
      if (appendToChart) card.chart.append(snapshot.takenAt, d.memoryUsedMiB, d.memoryTotalMiB);
    }
    for (const [key, card] of this.cards) {
      if (!seen.has(key)) {
        card.dispose();
        this.cards.delete(key);
      }
    }
  }

  /**
   * No GPU tool and no AMD card on this machine: not an error (a laptop without a GPU). Says what
   * works without one and where to point the panel at an nvidia-smi that is not on PATH.
   */
  private buildNoGpu(): void {
    const title = el('h2', undefined, 'No GPU found');
    const works = el('p', 'works', 'That is fine on a machine without a GPU. What works here without one: the PyTorch OOM hints in the editor, hyperparameter tuning (Tune Hyperparameters…), and training on the CPU (Start Training… runs the job on CPU workers).');
    const setting = el('a', 'open-setting', 'set the path of nvidia-smi');
    setting.href = '#';
    setting.title = nvidiaSmiSetting;
    setting.addEventListener('click', (e) => {
      e.preventDefault();
      this.api.postMessage({ type: 'panel/openSetting', id: nvidiaSmiSetting });
    });
    const where = el('p', 'where');
    where.append('Have an NVIDIA GPU? Install its driver (it brings nvidia-smi), or ', setting, ' (setting ', el('code', undefined, nvidiaSmiSetting), ') if it is not on PATH; the panel looks again when the setting changes.');
    const again = el('vscode-button', 'check-again', 'Check again');
    again.toggleAttribute('secondary', true);
    again.addEventListener('click', () => this.onRetry('Looking again…'));
    this.noGpu.append(title, works, this.noGpuLooked, where, this.noGpuInventory, again);
  }

  private showNoGpu(snapshot: GpuSnapshot): void {
    this.setMode('noGpu');
    this.noGpuLooked.textContent = snapshot.error ? `Looked for: ${snapshot.error}.` : 'Neither nvidia-smi (NVIDIA) nor sysfs, amd-smi or rocm-smi (AMD) reported a GPU on this machine.';
    this.noGpuInventory.textContent = describeInventory(this.inventory);
    this.noGpuInventory.hidden = this.noGpuInventory.textContent === '';
  }

  private showProblem(snapshot: GpuSnapshot): void {
    this.setMode('problem');
    // The nvidia-smi the user set cannot be run: an error to fix in the setting, not "no GPU".
    this.problemSetting.hidden = snapshot.badNvidiaSmiPath === undefined;
    if (snapshot.badNvidiaSmiPath !== undefined) {
      this.problemTitle.textContent = 'nvidia-smi not found';
      this.problemText.textContent = 'The GPU monitor reported:';
      this.problemError.textContent = snapshot.error ?? `nvidia-smi not found at ${snapshot.badNvidiaSmiPath}`;
      this.problemError.hidden = false;
    } else if (snapshot.error) {
      this.problemTitle.textContent = snapshot.stale ? 'The GPU tool stopped answering' : 'Could not read the GPUs';
      this.problemText.textContent = `${snapshot.source === 'none' ? 'The GPU tool' : snapshot.source} reported:`;
      this.problemError.textContent = snapshot.error;
      this.problemError.hidden = false;
    } else {
      this.problemTitle.textContent = 'No GPU found';
      this.problemText.textContent = `${snapshot.source} listed no device.`;
      this.problemError.hidden = true;
    }
    this.problemRetryNote.textContent = snapshot.retryInMs != null ? `It is started again automatically (next try in ${Math.max(1, Math.round(snapshot.retryInMs / 1000))} s), or now with Retry.` : '';
    this.problemRetryNote.hidden = this.problemRetryNote.textContent === '';
    this.problemInventory.textContent = describeInventory(this.inventory);
    this.problemInventory.hidden = this.problemInventory.textContent === '';
  }

  private setHints(hints: readonly GpuHint[]): void {
    const key = JSON.stringify(hints);
    if (key === this.hintsKey) return;
    this.hintsKey = key;
    this.hints.replaceChildren(...hints.map((h) => {
      const li = el('li', `hint hint-${h.kind}`);
      if (h.gpuIndex != null) li.append(el('span', 'hint-gpu', `GPU ${h.gpuIndex}`), ' ');
      li.append(withCode(el('span', 'hint-message'), h.message));
      if (h.docsUrl && /^https:\/\//.test(h.docsUrl)) {
        const a = el('a', 'hint-link', 'Learn more');
        a.href = h.docsUrl;
        li.append(' ', a);
      }
      return li;
    }));
    this.hints.hidden = hints.length === 0 || this.mode === 'waiting';
  }

  private setMode(mode: Mode): void {
    if (mode === this.mode) return;
    this.mode = mode;
    this.waiting.hidden = mode !== 'waiting';
    this.problem.hidden = mode !== 'problem';
    this.noGpu.hidden = mode !== 'noGpu';
    this.devices.hidden = mode !== 'devices';
    this.statusLine.hidden = mode === 'waiting';
    if (mode !== 'devices') this.notice.hidden = true;
    this.hints.hidden = mode === 'waiting' || this.hints.childElementCount === 0;
  }

  private startFirstSampleTimer(): void {
    this.clearFirstSampleTimer();
    this.firstSampleTimer = setTimeout(() => {
      this.firstSampleTimer = undefined;
      if (this.mode !== 'waiting') return;
      this.setMode('problem');
      this.problemTitle.textContent = 'No reading arrived';
      this.problemText.textContent = `The GPU monitor sent no sample within ${Math.round(this.firstSampleTimeoutMs / 1000)} s. The GPU tool may be hanging, or sampling is turned off (setting gpuWorkbench.gpuMonitor.enabled).`;
      this.problemError.hidden = true;
      this.problemSetting.hidden = true;
      this.problemRetryNote.hidden = true;
      this.problemInventory.hidden = true;
    }, this.firstSampleTimeoutMs);
  }

  private clearFirstSampleTimer(): void {
    if (this.firstSampleTimer !== undefined) clearTimeout(this.firstSampleTimer);
    this.firstSampleTimer = undefined;
  }

  private onRetry(text = 'Retrying…'): void {
    this.waitingText.textContent = text;
    this.setMode('waiting');
    this.startFirstSampleTimer();
    this.api.postMessage({ type: 'panel/refresh' });
  }

  private onToggle(key: string, open: boolean): void {
    if (open) this.collapsed.delete(key);
    else this.collapsed.add(key);
    const state: PanelState = { collapsed: [...this.collapsed] };
    this.api.setState(state);
  }
}

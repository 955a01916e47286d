import type { PanelSlurmNode, PanelSlurmNodes, PanelSlurmNodeState } from '../src/common/protocol';
import type { GpuDevice, GpuProcess } from '../src/gpu/types';
import { clock, memoryText, percent } from './format';

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text != null) e.textContent = text;
  return e;
}

/** "drained: bad gpu", or the state alone without a reason. */
export function nodeStateText(s: PanelSlurmNodeState): string {
  return s.reason ? `${s.state}: ${s.reason}` : s.state;
}

/** "2 allocated GPUs of the job sit idle (...): n1 GPU 1, n2 GPU 0", or '' when none does. */
export function idleSummary(nodes: PanelSlurmNodes): string {
  const idle = nodes.nodes.flatMap((n) => n.idle.map((i) => `${n.node} GPU ${i}`));
  if (idle.length === 0) return '';
  const one = idle.length === 1;
  return `${idle.length} allocated GPU${one ? '' : 's'} of the job sit${one ? 's' : ''} idle (no process, under 5 % utilisation): ${idle.join(', ')}`;
}

/** The job's nodes in drawing order: the probed ones, then the down or drained ones that did not answer. */
function allNodes(nodes: PanelSlurmNodes): PanelSlurmNode[] {
  const probed = nodes.nodes.map((n) => (n.slurm ? n : { ...n, slurm: nodes.unavailable.find((u) => u.node === n.node) }));
  const silent = nodes.unavailable.filter((u) => !probed.some((n) => n.node === u.node)).map((u): PanelSlurmNode => ({ node: u.node, devices: [], processes: [], idle: [], slurm: u }));
  return [...probed, ...silent];
}

function gpuBlock(d: GpuDevice, processes: readonly GpuProcess[], idle: boolean): HTMLElement {
  const block = el('div', 'slurm-gpu');
  block.dataset.gpu = String(d.index);
  if (idle) block.dataset.idle = '';
  const head = el('div', 'slurm-gpu-head');
  head.append(el('span', 'slurm-gpu-name', `GPU ${d.index}${d.name ? ` · ${d.name}` : ''}`), el('span', 'slurm-gpu-util', `util ${percent(d.utilizationPercent)}`));
  const bar = el('div', 'slurm-mem');
  const fill = el('span', 'slurm-mem-fill');
  const share = d.memoryUsedMiB != null && d.memoryTotalMiB ? Math.min(100, (d.memoryUsedMiB / d.memoryTotalMiB) * 100) : 0;
  fill.style.width = `${share.toFixed(1)}%`;
  bar.append(fill);
  bar.setAttribute('role', 'meter');
  bar.setAttribute('aria-valuemin', '0');
  bar.setAttribute('aria-valuemax', '100');
  bar.setAttribute('aria-valuenow', share.toFixed(0));
  bar.setAttribute('aria-label', `GPU ${d.index} memory ${memoryText(d.memoryUsedMiB, d.memoryTotalMiB)}`);
  block.append(head, bar, el('span', 'slurm-mem-text', memoryText(d.memoryUsedMiB, d.memoryTotalMiB)));
  if (idle) block.append(el('p', 'slurm-idle', 'Idle: allocated to the job, yet no process runs on it'));
  if (processes.length) {
    const list = el('ul', 'slurm-procs');
    for (const p of processes) list.append(el('li', 'slurm-proc', `PID ${p.pid} · ${p.name} · ${p.memoryMiB == null ? '—' : `${Math.round(p.memoryMiB)} MiB`}`));
    block.append(list);
  }
  return block;
}

function nodeBlock(n: PanelSlurmNode): HTMLElement {
  const block = el('div', 'slurm-node');
  block.dataset.node = n.node;
  const head = el('div', 'slurm-node-head');
  head.append(el('span', 'slurm-node-name', n.node));
  if (n.slurm) {
    block.dataset.state = n.slurm.state;
    const badge = el('span', 'slurm-node-state', n.slurm.state);
    head.append(badge);
  }
  block.append(head);
  if (n.slurm?.unavailable) {
    block.dataset.unavailable = '';
    block.append(el('p', 'slurm-node-down', `Slurm marks this node ${nodeStateText(n.slurm)}`));
  }
  if (n.error) block.append(el('p', 'slurm-node-error', `nvidia-smi on ${n.node}: ${n.error}`));
  else if (n.devices.length === 0 && n.slurm?.unavailable) block.append(el('p', 'slurm-node-error', 'It did not answer the probe.'));
  for (const d of n.devices) block.append(gpuBlock(d, n.processes.filter((p) => p.gpuIndex === d.index), n.idle.includes(d.index)));
  return block;
}

/** "Slurm job J": one block per node of the running job (its state, GPUs, processes), idle GPUs pointed out. */
export class SlurmNodesSection {
  readonly root = el('section', 'slurm-nodes');

  constructor() {
    this.root.hidden = true;
  }

  update(nodes: PanelSlurmNodes | undefined): void {
    this.root.hidden = nodes === undefined;
    if (!nodes) {
      this.root.replaceChildren();
      return;
    }
    this.root.dataset.job = nodes.jobId;
    this.root.setAttribute('aria-label', `Slurm job ${nodes.jobId}`);
    const title = el('h2', 'slurm-title', `Slurm job ${nodes.jobId}`);
    const meta = el('p', 'slurm-meta', `${nodes.nodeList} · read ${clock(nodes.takenAt)} with srun --overlap`);
    const parts: HTMLElement[] = [title, meta];
    if (nodes.error) parts.push(el('p', 'slurm-error', `The probe failed: ${nodes.error}`));
    const idle = idleSummary(nodes);
    if (idle) parts.push(el('p', 'slurm-idle-summary', idle));
    parts.push(...allNodes(nodes).map(nodeBlock));
    this.root.replaceChildren(...parts);
  }
}

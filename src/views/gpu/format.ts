/**
 * Text for the status bar item, as pure functions of a snapshot (no `vscode` import, so they are
 * unit-tested in Node). A value the tool did not report reads "—", never 0.
 */
import type { GpuDevice, GpuSnapshot } from '../../gpu/types';

const missing = '—';
/** More devices than this and the one-liner sums them instead of listing each. */
const listedDevices = 4;

/** Used memory: GiB with one decimal ("7.1"). */
function usedGiB(mib: number | null): string {
  return mib == null ? missing : (mib / 1024).toFixed(1);
}

/** Capacity: whole GiB when it is one ("24"), else one decimal ("79.6"). */
function totalGiB(mib: number | null): string {
  if (mib == null) return missing;
  const text = (mib / 1024).toFixed(1);
  return text.endsWith('.0') ? text.slice(0, -2) : text;
}

function sum(values: readonly (number | null)[]): number | null {
  const known = values.filter((v): v is number => v != null);
  return known.length ? known.reduce((a, b) => a + b, 0) : null;
}

/**
 * The status bar's one line: `GPU 0: 7.1/24 GiB · GPU 1: 3.0/24 GiB`; `8 GPUs: 57.0/192 GiB`
 * past four devices; `No GPU` when no tool reports one.
 */
export function formatStatusSummary(snapshot: GpuSnapshot): string {
  const devices = snapshot.devices;
  if (devices.length === 0) return 'No GPU';
  if (devices.length > listedDevices) {
    const used = sum(devices.map((d) => d.memoryUsedMiB));
    const total = sum(devices.map((d) => d.memoryTotalMiB));
    return `${devices.length} GPUs: ${usedGiB(used)}/${totalGiB(total)} GiB`;
  }
  return devices.map((d) => `GPU ${d.index}: ${usedGiB(d.memoryUsedMiB)}/${totalGiB(d.memoryTotalMiB)} GiB`).join(' · ');
}

/** Escapes text for a MarkdownString (process names and tool errors are not ours). */
export function escapeMarkdown(text: string): string {
  return text.replace(/[\\`*_{}[\]()#+\-.!|<>~]/g, '\\$&');
}

function mib(value: number | null): string {
  return value == null ? `${missing} MiB` : `${Math.round(value)} MiB`;
}

function deviceLines(d: GpuDevice, snapshot: GpuSnapshot): string {
  const power = d.powerW == null && d.powerLimitW == null
    ? missing
    : `${d.powerW == null ? missing : Math.round(d.powerW)}${d.powerLimitW == null ? '' : ` / ${Math.round(d.powerLimitW)}`} W`;
  const lines = [
    `**GPU ${d.index}** ${escapeMarkdown(d.name ?? missing)}`,
    `Memory ${usedGiB(d.memoryUsedMiB)} / ${usedGiB(d.memoryTotalMiB)} GiB (${mib(d.memoryUsedMiB)} used, ${mib(d.memoryReservedMiB)} reserved, ${mib(d.memoryTotalMiB)} total)`,
    `Utilisation ${d.utilizationPercent == null ? missing : `${Math.round(d.utilizationPercent)} %`} · ${d.temperatureC == null ? missing : `${Math.round(d.temperatureC)} °C`} · ${power}`,
  ];
  const procs = snapshot.processes.filter((p) => p.gpuIndex === d.index);
  if (procs.length) {
    lines.push(procs.map((p) => `${escapeMarkdown(p.name.split('/').pop() || p.name)} (PID ${p.pid}) ${p.memoryMiB == null ? missing : `${Math.round(p.memoryMiB)} MiB`}`).join(' · '));
  }
  return lines.join('  \n');
}

function clock(ms: number): string {
  return new Date(ms).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
}

/** The status bar item's tooltip (Markdown): every device in detail, or why there is none. */
export function formatStatusTooltip(snapshot: GpuSnapshot): string {
  const parts: string[] = [];
  if (snapshot.devices.length === 0) {
    parts.push('**No GPU**');
    // No tool ran when nothing here can report a GPU: where it looked, in the panel's words.
    const said = snapshot.noGpu ? `Looked for: ${snapshot.error ?? ''}`.replace(/\.?$/, '.') : `The GPU tool reported: ${snapshot.error ?? ''}`;
    parts.push(snapshot.error ? escapeMarkdown(said) : 'Neither nvidia-smi (NVIDIA) nor sysfs, amd-smi or rocm-smi (AMD) reported a GPU on this machine.');
  } else {
    for (const d of snapshot.devices) parts.push(deviceLines(d, snapshot));
    if (snapshot.error) parts.push(`The GPU tool reported: ${escapeMarkdown(snapshot.error)}`);
  }
  if (snapshot.stale) parts.push(`**Stale:** no new sample since ${clock(snapshot.takenAt)}; the numbers are old.`);
  const source = snapshot.source === 'none' ? 'no GPU tool' : snapshot.source;
  parts.push('---', `${escapeMarkdown(source)}, as of ${clock(snapshot.takenAt)}. Click for the GPU panel with live numbers.`);
  return parts.join('\n\n');
}

/**
 * AMD readings. First the amdgpu driver's sysfs files, which cost a few small reads and no
 * process: `/sys/class/drm/card<N>/device/mem_info_vram_used`, `mem_info_vram_total` (bytes),
 * `gpu_busy_percent`, and the card's hwmon (`temp1_input` in millidegrees C, `power1_average` or
 * `power1_input` and `power1_cap` in microwatts). Where sysfs has no data (old kernels,
 * containers without /sys), `amd-smi` (see amdSmi.ts), then `rocm-smi --showmeminfo vram --showuse --json`.
 */
import { execFile } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readAmdSmi } from './amdSmi';
import type { GpuDevice, GpuProcess } from './types';

const mib = 1024 * 1024;

async function readText(path: string): Promise<string | null> {
  try {
    return (await readFile(path, 'utf8')).trim();
  } catch {
    return null;
  }
}

async function readNumber(path: string): Promise<number | null> {
  const t = await readText(path);
  if (t === null || !/^-?\d+(\.\d+)?$/.test(t)) return null;
  return Number(t);
}

/** The `cardN` entries (not the `cardN-DP-1` connectors), in card order. */
async function cards(sysfsRoot: string): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(join(sysfsRoot, 'class', 'drm'));
  } catch {
    return [];
  }
  return names.filter((n) => /^card\d+$/.test(n)).sort((a, b) => Number(a.slice(4)) - Number(b.slice(4)));
}

async function hwmonDir(deviceDir: string): Promise<string | null> {
  try {
    const names = (await readdir(join(deviceDir, 'hwmon'))).filter((n) => /^hwmon\d+$/.test(n)).sort();
    return names.length ? join(deviceDir, 'hwmon', names[0]) : null;
  } catch {
    return null;
  }
}

export interface AmdSysfsResult {
  readonly devices: GpuDevice[];
  /** Why nothing was found, for the "No GPU found" message. */
  readonly reason?: string;
  /** An AMD card is there but reports no VRAM numbers (so "no GPU" would be wrong). */
  readonly unreadableCard?: boolean;
}

/** Reads every AMD card under `<sysfsRoot>/class/drm` that reports VRAM. */
export async function readAmdSysfs(sysfsRoot = '/sys'): Promise<AmdSysfsResult> {
  const found = await cards(sysfsRoot);
  const devices: GpuDevice[] = [];
  let amdCards = 0;
  for (const card of found) {
    const dev = join(sysfsRoot, 'class', 'drm', card, 'device');
    const vendor = await readText(join(dev, 'vendor'));
    if (vendor !== null && vendor.toLowerCase() !== '0x1002') continue; // not AMD
    const total = await readNumber(join(dev, 'mem_info_vram_total'));
    const used = await readNumber(join(dev, 'mem_info_vram_used'));
    if (vendor === null && total === null) continue;
    amdCards++;
    if (total === null && used === null) continue;
    const hw = await hwmonDir(dev);
    const temp = hw ? await readNumber(join(hw, 'temp1_input')) : null;
    const power = hw ? (await readNumber(join(hw, 'power1_average'))) ?? (await readNumber(join(hw, 'power1_input'))) : null;
    const cap = hw ? await readNumber(join(hw, 'power1_cap')) : null;
    const productName = await readText(join(dev, 'product_name'));
    const deviceId = await readText(join(dev, 'device'));
    const uniqueId = await readText(join(dev, 'unique_id'));
    devices.push({
      index: devices.length,
      uuid: uniqueId || null,
      name: productName || (deviceId ? `AMD GPU ${deviceId}` : 'AMD GPU'),
      memoryUsedMiB: used === null ? null : Math.round(used / mib),
      memoryReservedMiB: null,
      memoryTotalMiB: total === null ? null : Math.round(total / mib),
      utilizationPercent: await readNumber(join(dev, 'gpu_busy_percent')),
      temperatureC: temp === null ? null : temp / 1000,
      powerW: power === null ? null : power / 1e6,
      powerLimitW: cap === null ? null : cap / 1e6,
    });
  }
  if (devices.length) return { devices };
  if (amdCards) return { devices, reason: `AMD GPU found in ${join(sysfsRoot, 'class/drm')} but it reports no VRAM numbers`, unreadableCard: true };
  return { devices, reason: `no AMD GPU in ${join(sysfsRoot, 'class/drm')}` };
}

/**
 * `rocm-smi --showmeminfo vram --showuse --json`: one object per card, `{"card0": {"VRAM Total
 * Memory (B)": "...", "VRAM Total Used Memory (B)": "...", "GPU use (%)": "..."}}`, values as
 * strings. Keys are matched loosely because they changed wording across ROCm releases.
 */
export function parseRocmSmiJson(text: string): GpuDevice[] {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    return [];
  }
  if (typeof data !== 'object' || data === null) return [];
  const out: GpuDevice[] = [];
  const entries = Object.entries(data as Record<string, unknown>)
    .filter(([k, v]) => /^card\d+$/.test(k) && typeof v === 'object' && v !== null)
    .sort(([a], [b]) => Number(a.slice(4)) - Number(b.slice(4)));
  for (const [card, value] of entries) {
    const fields = value as Record<string, unknown>;
    const pick = (re: RegExp): number | null => {
      for (const [k, v] of Object.entries(fields)) {
        if (!re.test(k)) continue;
        const n = typeof v === 'number' ? v : typeof v === 'string' && /^-?\d+(\.\d+)?$/.test(v.trim()) ? Number(v) : NaN;
        if (Number.isFinite(n)) return n;
      }
      return null;
    };
    const total = pick(/^VRAM Total Memory \(B\)$/i);
    const used = pick(/^VRAM Total Used Memory \(B\)$/i);
    const name = Object.entries(fields).find(([k]) => /^Card (series|model)$/i.test(k))?.[1];
    out.push({
      index: Number(card.slice(4)),
      uuid: typeof fields['Unique ID'] === 'string' ? fields['Unique ID'] : null,
      name: typeof name === 'string' ? name : `AMD GPU (${card})`,
      memoryUsedMiB: used === null ? null : Math.round(used / mib),
      memoryReservedMiB: null,
      memoryTotalMiB: total === null ? null : Math.round(total / mib),
      utilizationPercent: pick(/^GPU use \(%\)$/i),
      temperatureC: pick(/^Temperature \(Sensor (edge|junction)\) \(C\)$/i),
      powerW: pick(/Graphics Package Power \(W\)$/i),
      powerLimitW: pick(/^Max Graphics Package Power \(W\)$/i),
    });
  }
  return out;
}

export type RocmSmiResult = { readonly devices: GpuDevice[]; readonly error?: string; readonly missing?: boolean };

/** One `rocm-smi` reading (asynchronous, bounded by `timeoutMs`). */
export function readRocmSmi(env: NodeJS.ProcessEnv | undefined, timeoutMs: number, path = 'rocm-smi'): Promise<RocmSmiResult> {
  return new Promise((resolve) => {
    execFile(path, ['--showmeminfo', 'vram', '--showuse', '--json'], { env, timeout: timeoutMs, killSignal: 'SIGKILL', windowsHide: true }, (err, stdout, stderr) => {
      if (err && (err as { code?: unknown }).code === 'ENOENT') return resolve({ devices: [], missing: true, error: `${path} not found on PATH` });
      const devices = parseRocmSmiJson(String(stdout));
      if (devices.length) return resolve({ devices });
      const text = `${String(stderr)}\n${String(stdout)}`.trim().split(/\r?\n/).filter(Boolean).pop();
      resolve({ devices: [], error: `${path} reported no GPU${text ? `: ${text}` : ''}` });
    });
  });
}

export interface AmdToolResult {
  readonly devices: GpuDevice[];
  readonly processes: GpuProcess[];
  /** Which tool answered; null when neither did. */
  readonly tool: 'amd-smi' | 'rocm-smi' | null;
  /** Why each tool gave nothing, in the order tried (for the 'none' message). */
  readonly reasons: string[];
  /** Neither tool is installed (both ENOENT), as opposed to one that ran and failed or listed nothing. */
  readonly allMissing: boolean;
}

/** Where sysfs has no data: `amd-smi` first (AMD's current tool), then `rocm-smi`. */
export async function readAmdTools(env: NodeJS.ProcessEnv | undefined, timeoutMs: number, paths: { amdSmi?: string; rocmSmi?: string } = {}): Promise<AmdToolResult> {
  const reasons: string[] = [];
  const amd = await readAmdSmi(env, timeoutMs, paths.amdSmi);
  if (amd.devices.length) return { devices: amd.devices, processes: amd.processes, tool: 'amd-smi', reasons, allMissing: false };
  if (amd.error) reasons.push(amd.error);
  const rocm = await readRocmSmi(env, timeoutMs, paths.rocmSmi);
  if (rocm.devices.length) return { devices: rocm.devices, processes: [], tool: 'rocm-smi', reasons, allMissing: false };
  if (rocm.error) reasons.push(rocm.error);
  return { devices: [], processes: [], tool: null, reasons, allMissing: amd.missing === true && rocm.missing === true };
}

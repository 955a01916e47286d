/**
 * `gpu-workbench gpus`: memory, utilisation, temperature, power and processes per GPU, as a
 * table like gpustat, as JSON for machines (`--json`), or redrawn live (`--watch`).
 */
import { GpuMonitor, sampleOnce } from '../gpu/monitor';
import type { GpuSnapshot } from '../gpu/types';
import { commandLineArgs, parseCommandLine, UsageError, wholeNumber } from './args';

const help = `usage: gpu-workbench gpus [--json] [--watch [--interval MS] [--count N]] [--nvidia-smi PATH]

Shows memory used / total, utilisation, temperature, power and the compute processes
(PID, name, MiB) of every GPU, read from nvidia-smi (NVIDIA) or sysfs / rocm-smi (AMD).

options:
  --json             print JSON: {"source","devices":[...],"processes":[...],"error"?,"noGpu"?,
                     "badNvidiaSmiPath"?};
                     a value the tool reports as [N/A] is null; "noGpu": true when no
                     GPU tool is installed here (not an error); "badNvidiaSmiPath" when the
                     --nvidia-smi PATH given cannot be run (an error, exit code 1)
  --watch            keep sampling and redraw (with --json: one JSON line per sample)
  --interval MS      sampling interval for --watch in milliseconds (default 1000, at least 50)
  --count N          with --watch: stop after N samples
  --nvidia-smi PATH  the nvidia-smi to run (default: nvidia-smi on PATH)
  -h, --help         show this help

Exit code 0 when it ran (also when no GPU was found), 1 when the --nvidia-smi PATH given
cannot be run, 2 for bad options.`;

interface Options {
  json: boolean;
  watch: boolean;
  intervalMs: number;
  count: number | null;
  nvidiaSmiPath: string | undefined;
}

function parseArgs(argv: string[]): Options | 'help' {
  const o: Options = { json: false, watch: false, intervalMs: 1000, count: null, nvidiaSmiPath: undefined };
  for (const { arg, name, value } of commandLineArgs(argv)) {
    switch (name) {
      case '-h': case '--help': return 'help';
      case '--json': o.json = true; break;
      case '--watch': o.watch = true; break;
      case '--interval': o.intervalMs = wholeNumber(value(), name, 50); break;
      case '--count': o.count = wholeNumber(value(), name, 1); break;
      case '--nvidia-smi': o.nvidiaSmiPath = value(); break;
      default: throw new UsageError(`unknown option '${arg}'`);
    }
  }
  if (o.count !== null && !o.watch) throw new UsageError('--count only makes sense with --watch');
  return o;
}

/** The `--json` shape: the snapshot's fields the issue promises, nulls kept. */
export function toJson(s: GpuSnapshot): object {
  return {
    source: s.source,
    devices: s.devices.map((d) => ({ ...d })),
    processes: s.processes.map((p) => ({ gpuIndex: p.gpuIndex, pid: p.pid, name: p.name, memoryMiB: p.memoryMiB })),
    takenAt: new Date(s.takenAt).toISOString(),
    ...(s.stale ? { stale: true } : {}),
    ...(s.error !== undefined ? { error: s.error } : {}),
    ...(s.noGpu ? { noGpu: true } : {}),
    ...(s.badNvidiaSmiPath !== undefined ? { badNvidiaSmiPath: s.badNvidiaSmiPath } : {}),
  };
}

function n(v: number | null, digits = 0): string {
  return v === null ? 'N/A' : v.toFixed(digits);
}

function bar(used: number | null, total: number | null, width = 20): string {
  if (used === null || !total) return `[${'?'.repeat(width)}]`;
  const filled = Math.max(0, Math.min(width, Math.round((used / total) * width)));
  return `[${'█'.repeat(filled)}${'░'.repeat(width - filled)}]`;
}

/** The table, like gpustat: one line per GPU, its processes under it. */
export function renderTable(s: GpuSnapshot): string {
  if (s.devices.length === 0) return renderNoDevice(s);
  const when = new Date(s.takenAt).toLocaleString();
  const lines = [`${s.source}  ${when}${s.stale ? '  (stale)' : ''}`];
  const nameWidth = Math.max(...s.devices.map((d) => (d.name ?? 'unknown').length));
  for (const d of s.devices) {
    const temp = d.temperatureC === null ? ' N/A' : `${n(d.temperatureC).padStart(3)}°C`;
    const util = d.utilizationPercent === null ? 'N/A' : `${n(d.utilizationPercent).padStart(3)} %`;
    const mem = `${n(d.memoryUsedMiB).padStart(6)} / ${n(d.memoryTotalMiB).padStart(6)} MiB`;
    const power = `${n(d.powerW).padStart(4)} / ${n(d.powerLimitW)} W`;
    lines.push(`[${d.index}] ${(d.name ?? 'unknown').padEnd(nameWidth)} | ${temp}, ${util.padStart(5)} | ${bar(d.memoryUsedMiB, d.memoryTotalMiB)} ${mem} | ${power}`);
    for (const p of s.processes.filter((q) => q.gpuIndex === d.index)) {
      lines.push(`      ${String(p.pid).padStart(7)}  ${p.name}  ${p.memoryMiB === null ? 'N/A' : `${p.memoryMiB} MiB`}`);
    }
  }
  if (s.error) lines.push(`warning: ${s.error}`);
  return lines.join('\n');
}

/**
 * No device to list. No source at all (no tool installed, no AMD card) is not an error: say where
 * it looked and what to do if a GPU is there. A tool that ran and failed: its own words.
 */
function renderNoDevice(s: GpuSnapshot): string {
  if (s.noGpu) {
    return [
      `No GPU found: ${s.error ?? 'no GPU tool reported a device'}`.replace(/\.?$/, '.'),
      'If this machine has an NVIDIA GPU, install its driver (it brings nvidia-smi) or pass --nvidia-smi PATH.',
    ].join('\n');
  }
  const lines = s.source === 'none' ? [] : [`${s.source}  ${new Date(s.takenAt).toLocaleString()}${s.stale ? '  (stale)' : ''}`];
  lines.push(s.error ? `Could not read the GPUs: ${s.error}` : `No GPU found: ${s.source === 'none' ? 'no GPU tool' : s.source} listed no device`);
  return lines.join('\n');
}

function print(s: GpuSnapshot, o: Options, redraw: boolean): void {
  if (o.json) {
    process.stdout.write(`${JSON.stringify(toJson(s))}\n`);
    return;
  }
  process.stdout.write(`${redraw ? '\x1b[H\x1b[2J' : ''}${renderTable(s)}\n${o.watch && !redraw ? '\n' : ''}`);
}

function watch(o: Options): Promise<number> {
  const monitor = new GpuMonitor({ intervalMs: o.intervalMs, nvidiaSmiPath: o.nvidiaSmiPath });
  const redraw = process.stdout.isTTY === true;
  return new Promise((resolve) => {
    let seen = 0;
    const stop = (code = 0): void => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      monitor.dispose();
      resolve(code);
    };
    const onSignal = (): void => stop();
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    monitor.onSnapshot((s) => {
      print(s, o, redraw);
      // Nothing to watch until the path is fixed: say so once and fail.
      if (s.badNvidiaSmiPath !== undefined) return stop(1);
      seen++;
      if (o.count !== null && seen >= o.count) stop();
    });
    monitor.acquire('gpu-workbench gpus --watch');
  });
}

export async function run(argv: string[]): Promise<number> {
  const o = parseCommandLine('gpus', help, () => parseArgs(argv));
  if (typeof o === 'number') return o;
  if (o.watch) return watch(o);
  const s = await sampleOnce({ nvidiaSmiPath: o.nvidiaSmiPath });
  print(s, o, false);
  return s.badNvidiaSmiPath !== undefined ? 1 : 0;
}

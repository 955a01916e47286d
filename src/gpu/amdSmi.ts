/**
 * `amd-smi`, AMD's current command-line tool (the successor of `rocm-smi`), as a source of AMD
 * readings where sysfs has none. Formats as the tool's Python CLI writes them with `--json`
 * (ROCm/amdsmi `amdsmi_cli/amdsmi_commands.py`, `amdsmi_helpers.unit_format`, and the examples in
 * its CHANGELOG): a JSON array with one object per GPU, `{"gpu": 0, ...}`; a measured value is
 * `{"value": 1234, "unit": "MB"}`, an unknown one the plain string `"N/A"` (which we keep as
 * `null`, never 0). amd-smi's "MB" is `bytes // (1024*1024)`, i.e. MiB.
 *
 *   amd-smi metric --mem-usage --usage --power --temperature --json
 *     mem_usage.{total_vram,used_vram}, usage.gfx_activity, power.socket_power,
 *     temperature.{edge,hotspot}
 *   amd-smi process --json
 *     [{"gpu": 0, "process_list": [{"process_info": {"name", "pid", "mem_usage",
 *       "memory_usage": {"vram_mem", ...}}}]}], or "process_info": "No running processes detected"
 *   amd-smi static --asic --limit --json   (once: names and power caps do not change)
 *     asic.market_name, limit.socket_power
 *
 * Every call is spawned without a shell and killed after `timeoutMs`, so a hung tool never blocks.
 */
import { execFile } from 'node:child_process';
import type { GpuDevice, GpuProcess } from './types';

type Json = unknown;

function isObject(v: Json): v is Record<string, Json> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** MiB per unit. amd-smi counts in powers of 1024 whatever it calls them. */
const unitMiB: Record<string, number> = {
  b: 1 / (1024 * 1024), kb: 1 / 1024, kib: 1 / 1024, mb: 1, mib: 1, gb: 1024, gib: 1024, tb: 1024 * 1024, tib: 1024 * 1024,
};

/** A number from `{"value": n, "unit": u}`, a bare number or a numeric string; "N/A" and anything else is null. */
function numberOf(v: Json): number | null {
  if (isObject(v)) return numberOf(v.value);
  if (typeof v === 'number') return Number.isFinite(v) ? v : null;
  if (typeof v === 'string' && /^\s*-?\d+(\.\d+)?\s*$/.test(v)) return Number(v);
  return null;
}

function unitOf(v: Json): string | null {
  return isObject(v) && typeof v.unit === 'string' ? v.unit.trim().toLowerCase() : null;
}

/** Memory in MiB; a value without a unit is taken as amd-smi's default for that field (`defaultUnit`). */
function mibOf(v: Json, defaultUnit: string): number | null {
  const n = numberOf(v);
  if (n === null) return null;
  const factor = unitMiB[unitOf(v) ?? defaultUnit];
  return factor === undefined ? null : Math.round(n * factor);
}

/** The per-GPU objects: a JSON array (documented), or `{"gpu_data": [...]}` as some newer releases wrap it. */
function gpuEntries(text: string): Record<string, Json>[] | null {
  let data: Json;
  try {
    data = JSON.parse(text);
  } catch {
    return null;
  }
  if (isObject(data) && Array.isArray(data.gpu_data)) data = data.gpu_data;
  if (!Array.isArray(data)) return null;
  return data.filter((e): e is Record<string, Json> => isObject(e) && numberOf(e.gpu) !== null);
}

export interface AmdSmiStatic {
  readonly name: string | null;
  readonly uuid: string | null;
  readonly powerLimitW: number | null;
}

/** `amd-smi static --asic --limit --json`, by GPU index. */
export function parseAmdSmiStaticJson(text: string): Map<number, AmdSmiStatic> {
  const out = new Map<number, AmdSmiStatic>();
  for (const e of gpuEntries(text) ?? []) {
    const asic = isObject(e.asic) ? e.asic : {};
    const limit = isObject(e.limit) ? e.limit : {};
    const name = typeof asic.market_name === 'string' && asic.market_name !== 'N/A' ? asic.market_name : null;
    const uuid = typeof e.uuid === 'string' && e.uuid !== 'N/A' ? e.uuid : null;
    out.set(numberOf(e.gpu) as number, { name, uuid, powerLimitW: numberOf(limit.socket_power) });
  }
  return out;
}

/** `amd-smi metric --mem-usage --usage --power --temperature --json`; null when the text is not that JSON. */
export function parseAmdSmiMetricJson(text: string, statics: ReadonlyMap<number, AmdSmiStatic> = new Map()): GpuDevice[] | null {
  const entries = gpuEntries(text);
  if (entries === null) return null;
  return entries
    .map((e): GpuDevice => {
      const index = numberOf(e.gpu) as number;
      const mem = isObject(e.mem_usage) ? e.mem_usage : {};
      const usage = isObject(e.usage) ? e.usage : {};
      const power = isObject(e.power) ? e.power : {};
      const temp = isObject(e.temperature) ? e.temperature : {};
      const s = statics.get(index);
      return {
        index,
        uuid: s?.uuid ?? null,
        name: s?.name ?? null,
        memoryUsedMiB: mibOf(mem.used_vram, 'mb'),
        memoryReservedMiB: null,
        memoryTotalMiB: mibOf(mem.total_vram, 'mb'),
        utilizationPercent: numberOf(usage.gfx_activity),
        temperatureC: numberOf(temp.edge) ?? numberOf(temp.hotspot),
        powerW: numberOf(power.socket_power),
        powerLimitW: s?.powerLimitW ?? null,
      };
    })
    .sort((a, b) => a.index - b.index);
}

/** `amd-smi process --json`: one row per process per GPU; memory from `memory_usage.vram_mem`, else `mem_usage`. */
export function parseAmdSmiProcessJson(text: string): GpuProcess[] | null {
  const entries = gpuEntries(text);
  if (entries === null) return null;
  const out: GpuProcess[] = [];
  for (const e of entries) {
    const gpuIndex = numberOf(e.gpu) as number;
    const list = Array.isArray(e.process_list) ? e.process_list : [];
    for (const item of list) {
      const info = isObject(item) ? item.process_info : null;
      if (!isObject(info)) continue; // "No running processes detected"
      const pid = numberOf(info.pid);
      if (pid === null) continue;
      const memoryUsage = isObject(info.memory_usage) ? info.memory_usage : {};
      const memoryMiB = mibOf(memoryUsage.vram_mem, 'b') ?? mibOf(info.mem_usage, 'b');
      out.push({ gpuIndex, pid, name: typeof info.name === 'string' ? info.name : 'N/A', memoryMiB });
    }
  }
  return out;
}

interface RunResult { readonly stdout: string; readonly error?: string; readonly missing?: boolean }

function run(path: string, args: string[], env: NodeJS.ProcessEnv | undefined, timeoutMs: number): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(path, args, { env, timeout: timeoutMs, killSignal: 'SIGKILL', windowsHide: true, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      const out = String(stdout);
      if (!err) return resolve({ stdout: out });
      const e = err as NodeJS.ErrnoException & { killed?: boolean; signal?: string | null };
      if (e.code === 'ENOENT') return resolve({ stdout: '', missing: true, error: `${path} not found on PATH` });
      if (e.code === 'EACCES') return resolve({ stdout: '', error: `${path} is not executable` });
      if (e.killed || e.signal === 'SIGKILL') return resolve({ stdout: out, error: `${path} ${args[0]} gave no answer within ${(timeoutMs / 1000).toFixed(1)} s` });
      const text = lastLine(`${String(stderr)}\n${out}`);
      resolve({ stdout: out, error: `${path} ${args[0]} failed (exit ${String(e.code ?? e.signal)})${text ? `: ${text}` : ''}` });
    });
  });
}

/** The tool's own words: the last non-empty line (a Python traceback ends with its message). */
function lastLine(text: string): string | undefined {
  return text.trim().split(/\r?\n/).map((l) => l.trim()).filter(Boolean).pop();
}

export interface AmdSmiResult {
  readonly devices: GpuDevice[];
  readonly processes: GpuProcess[];
  readonly error?: string;
  /** amd-smi is not installed (ENOENT): try the next source. */
  readonly missing?: boolean;
}

/** Static facts per tool path: asked once, since `amd-smi` itself takes a good part of a second to start. */
const staticCache = new Map<string, Promise<Map<number, AmdSmiStatic>>>();

/** Forget cached names and power caps (for tests and Retry). */
export function clearAmdSmiCache(): void {
  staticCache.clear();
}

/** One `amd-smi` reading: metrics and processes (and, the first time, names), bounded by `timeoutMs`. */
export async function readAmdSmi(env: NodeJS.ProcessEnv | undefined, timeoutMs: number, path = 'amd-smi'): Promise<AmdSmiResult> {
  const key = JSON.stringify([path, env?.PATH ?? null]);
  let statics = staticCache.get(key);
  const firstTime = statics === undefined;
  if (!statics) {
    statics = run(path, ['static', '--asic', '--limit', '--json'], env, timeoutMs).then((r) => parseAmdSmiStaticJson(r.stdout));
    staticCache.set(key, statics);
  }
  const [metric, processes, names] = await Promise.all([
    run(path, ['metric', '--mem-usage', '--usage', '--power', '--temperature', '--json'], env, timeoutMs),
    run(path, ['process', '--json'], env, timeoutMs),
    statics,
  ]);
  if (metric.missing) {
    staticCache.delete(key);
    return { devices: [], processes: [], missing: true, error: metric.error };
  }
  if (firstTime && names.size === 0) staticCache.delete(key); // ask again next time
  const devices = parseAmdSmiMetricJson(metric.stdout, names);
  if (metric.error) return { devices: [], processes: [], error: metric.error };
  if (devices === null) {
    const text = lastLine(metric.stdout);
    return { devices: [], processes: [], error: `${path} metric printed no JSON${text ? `: ${text}` : ''}` };
  }
  if (!devices.length) return { devices, processes: [], error: `${path} reported no GPU` };
  // Processes are a bonus: a failure there leaves the device numbers standing.
  return { devices, processes: processes.error ? [] : parseAmdSmiProcessJson(processes.stdout) ?? [] };
}

/**
 * Parsing what `nvidia-smi` prints: `--query-gpu` rows (by field name), `--query-compute-apps`
 * rows, `--help-query-gpu`, and the tool's own error messages. Pure functions, no I/O.
 *
 * Format notes (nvidia-smi(1), `--help-query-gpu`): `--format=csv` is comma separated values
 * joined by ", " and NOT quoted, so a product or process name may itself contain commas; a value
 * the device cannot give is `[N/A]` or `[Not Supported]` (older drivers: `N/A`); timestamps read
 * `YYYY/MM/DD HH:MM:SS.msec`. In loop mode (`-l`/`-lms`) each iteration prints one row per GPU in
 * index order, and on Linux Xid/ECC event lines may be printed between iterations.
 */
import type { GpuDevice, GpuProcess } from './types';

/** The `--query-gpu` fields the engine asks for, in this order. */
export const gpuQueryFields = [
  'timestamp', 'index', 'uuid', 'name', 'memory.used', 'memory.reserved', 'memory.total',
  'utilization.gpu', 'temperature.gpu', 'power.draw', 'power.limit',
] as const;
export type GpuQueryField = (typeof gpuQueryFields)[number];

/** Fields we cannot do without: a row without them is not a GPU row. */
const requiredGpuFields: readonly string[] = ['index'];

export const computeAppsFields = ['gpu_uuid', 'pid', 'process_name', 'used_gpu_memory'] as const;

export function gpuQueryArgs(fields: readonly string[], intervalMs?: number): string[] {
  const args = [`--query-gpu=${fields.join(',')}`, '--format=csv,noheader,nounits'];
  if (intervalMs !== undefined) args.push('-lms', String(Math.max(1, Math.round(intervalMs))));
  return args;
}

export function computeAppsArgs(): string[] {
  return [`--query-compute-apps=${computeAppsFields.join(',')}`, '--format=csv,noheader,nounits'];
}

/**
 * `[N/A]`, `[Not Supported]`, `N/A`, `[Unknown Error]`, `[Insufficient Permissions]`,
 * `[GPU is lost]`, `[Requested functionality has been deprecated]`: every bracketed value is a
 * reason, not a number.
 */
function isUnknown(value: string): boolean {
  return value === '' || /^\[.*\]$/.test(value) || /^(n\/a|not supported|unknown error)$/i.test(value);
}

/** The text of one CSV value, or null where the tool reports it unknown. */
export function textValue(raw: string | undefined): string | null {
  if (raw === undefined) return null;
  let v = raw.trim();
  if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) v = v.slice(1, -1).replace(/""/g, '"').trim();
  return isUnknown(v) ? null : v;
}

/** A number from one CSV value (units such as " MiB" tolerated), or null: never 0 for unknown. */
export function numberValue(raw: string | undefined): number | null {
  const v = textValue(raw);
  if (v === null) return null;
  const m = /^[-+]?\d+(\.\d+)?/.exec(v);
  if (!m) return null;
  const n = Number(m[0]);
  return Number.isFinite(n) ? n : null;
}

/**
 * Splits one line into exactly `count` values. Values are separated by commas; a value in double
 * quotes may hold commas (in case a tool ever quotes). nvidia-smi does not quote, so when a line
 * has more commas than fields, the extra pieces belong to the free-text field (`freeText`, e.g.
 * `name` or `process_name`) and are joined back into it. Returns null for a line with too few values.
 */
export function splitRow(line: string, count: number, freeText: number): string[] | null {
  const parts: string[] = [];
  let cur = '';
  let quoted = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === '"') {
      if (quoted && line[i + 1] === '"') { cur += '"'; i++; continue; }
      if (quoted || cur.trim() === '') { quoted = !quoted; cur += c; continue; }
    }
    if (c === ',' && !quoted) { parts.push(cur); cur = ''; continue; }
    cur += c;
  }
  parts.push(cur);
  if (parts.length < count) return null;
  if (parts.length > count) {
    if (freeText < 0) return null;
    const extra = parts.length - count;
    const merged = parts.slice(freeText, freeText + extra + 1).join(',');
    parts.splice(freeText, extra + 1, merged);
  }
  return parts.map((p) => p.trim());
}

const timestampRe = /^(\d{4})\/(\d{2})\/(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?$/;

/** nvidia-smi's local-time timestamp as ms since the epoch, or null. */
export function parseTimestamp(text: string | null): number | null {
  if (text === null) return null;
  const m = timestampRe.exec(text);
  if (!m) return null;
  const [, y, mo, d, h, mi, s, ms] = m;
  const t = new Date(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s), Number((ms ?? '0').padEnd(3, '0'))).getTime();
  return Number.isFinite(t) ? t : null;
}

export interface GpuRow {
  /** The tool's timestamp (ms since the epoch) when asked for, else null. */
  readonly timestamp: number | null;
  readonly device: GpuDevice;
}

/**
 * One `--query-gpu` row, read by field name: `fields` is the list that was asked for (with any
 * fields an old driver rejected left out). Returns null for a line that is not a GPU row (an Xid
 * event, a blank line, a message): those are skipped, never fatal.
 */
export function parseGpuRow(line: string, fields: readonly string[]): GpuRow | null {
  if (line.trim() === '') return null;
  const parts = splitRow(line, fields.length, fields.indexOf('name'));
  if (!parts) return null;
  const byName = new Map<string, string>();
  fields.forEach((f, i) => byName.set(f, parts[i]));
  for (const f of requiredGpuFields) if (!byName.has(f)) return null;

  const indexText = textValue(byName.get('index'));
  if (indexText === null || !/^\d+$/.test(indexText)) return null;
  let timestamp: number | null = null;
  if (byName.has('timestamp')) {
    timestamp = parseTimestamp(textValue(byName.get('timestamp')));
    if (timestamp === null) return null; // a row whose first column is not a timestamp is not a row
  }
  const uuid = textValue(byName.get('uuid'));
  if (uuid !== null && !/^(GPU|MIG)-[0-9a-fA-F-]+$/.test(uuid)) return null;
  const num = (f: string): number | null => numberValue(byName.get(f));
  return {
    timestamp,
    device: {
      index: Number(indexText),
      uuid,
      name: textValue(byName.get('name')),
      memoryUsedMiB: num('memory.used'),
      memoryReservedMiB: num('memory.reserved'),
      memoryTotalMiB: num('memory.total'),
      utilizationPercent: num('utilization.gpu'),
      temperatureC: num('temperature.gpu'),
      powerW: num('power.draw'),
      powerLimitW: num('power.limit'),
    },
  };
}

/** A compute process as reported, before it is joined to a device index. */
export interface ComputeApp {
  readonly gpuUuid: string;
  readonly pid: number;
  readonly name: string;
  readonly memoryMiB: number | null;
}

/** `--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory` output; other lines skipped. */
export function parseComputeApps(text: string): ComputeApp[] {
  const apps: ComputeApp[] = [];
  for (const line of text.split(/\r?\n/)) {
    const parts = splitRow(line, computeAppsFields.length, 2);
    if (!parts) continue;
    const uuid = textValue(parts[0]);
    const pid = textValue(parts[1]);
    if (uuid === null || !/^(GPU|MIG)-/.test(uuid) || pid === null || !/^\d+$/.test(pid)) continue;
    apps.push({ gpuUuid: uuid, pid: Number(pid), name: textValue(parts[2]) ?? '?', memoryMiB: numberValue(parts[3]) });
  }
  return apps;
}

/**
 * Joins processes to device indexes on the UUID. Under MIG a process may report the MIG device's
 * UUID; it is attached to no index then unless the device list has it.
 */
export function joinProcesses(apps: readonly ComputeApp[], devices: readonly GpuDevice[]): GpuProcess[] {
  const byUuid = new Map<string, number>();
  for (const d of devices) if (d.uuid) byUuid.set(d.uuid, d.index);
  const out: GpuProcess[] = [];
  for (const a of apps) {
    const gpuIndex = byUuid.get(a.gpuUuid);
    if (gpuIndex === undefined) continue;
    out.push({ gpuIndex, pid: a.pid, name: a.name, memoryMiB: a.memoryMiB });
  }
  return out;
}

/** The field names `--help-query-gpu` lists (each alias included). */
export function parseHelpQueryGpu(text: string): Set<string> {
  const names = new Set<string>();
  for (const line of text.split(/\r?\n/)) {
    if (!line.startsWith('"')) continue;
    // `"name" or "gpu_name"`, `"clocks.current.sm" or "clocks.sm"`
    const m = /^"[^"]+"(\s+or\s+"[^"]+")*\s*$/.exec(line.trim());
    if (!m) continue;
    for (const q of line.matchAll(/"([^"]+)"/g)) names.add(q[1]);
  }
  return names;
}

export type ToolErrorKind = 'no-driver' | 'invalid-field' | 'no-devices' | 'nvml' | 'other';
export interface ToolError {
  readonly kind: ToolErrorKind;
  /** The tool's own text, trimmed to the line(s) that say what went wrong. */
  readonly message: string;
  /** For `invalid-field`: the field the tool rejected. */
  readonly field?: string;
}

/** Recognises nvidia-smi's error messages in a line (or a whole output); null when there is none. */
export function detectToolError(text: string): ToolError | null {
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line) continue;
    if (/^NVIDIA-SMI has failed because/i.test(line)) return { kind: 'no-driver', message: line };
    const field = /^Field "([^"]*)" is not a valid field to query\.?/.exec(line);
    if (field) return { kind: 'invalid-field', message: line, field: field[1] };
    if (/^No devices were found/i.test(line)) return { kind: 'no-devices', message: line };
    if (/^(Failed to initialize NVML|NVML library version mismatch|Driver\/library version mismatch)/i.test(line)) return { kind: 'nvml', message: line };
    if (/^Unable to determine the device handle/i.test(line)) return { kind: 'other', message: line };
  }
  return null;
}

/**
 * Groups a stream of `--query-gpu` rows into samples: the rows of one loop iteration (one per
 * GPU, in index order) form one sample. A new sample begins when an index repeats or goes back,
 * or when the timestamp moves by more than `toleranceMs` from the sample's first row. A sample is
 * complete (emitted at once) when it holds as many devices as the largest sample seen so far;
 * otherwise the caller flushes it (after a short quiet period, or at the end of the output).
 */
export class SampleAssembler {
  private rows: GpuRow[] = [];
  private expected = 0;

  constructor(
    private fields: readonly string[],
    private readonly toleranceMs = 0,
  ) {}

  setFields(fields: readonly string[]): void {
    this.fields = fields;
    this.rows = [];
  }

  /** Feeds one line; returns the samples it completed (0, 1 or 2 of them). */
  push(line: string): GpuRow[][] {
    const row = parseGpuRow(line, this.fields);
    if (!row) return [];
    const done: GpuRow[][] = [];
    const first = this.rows[0];
    const last = this.rows[this.rows.length - 1];
    if (first && last && (row.device.index <= last.device.index || this.timestampMoved(first, row))) {
      done.push(this.take());
    }
    this.rows.push(row);
    if (this.expected > 0 && this.rows.length >= this.expected) done.push(this.take());
    return done;
  }

  /** Rows waiting for the rest of their sample. */
  get pending(): number {
    return this.rows.length;
  }

  /** Ends the current sample (after a quiet period or at the end of output). */
  flush(): GpuRow[] | null {
    return this.rows.length ? this.take() : null;
  }

  private timestampMoved(first: GpuRow, row: GpuRow): boolean {
    if (first.timestamp === null || row.timestamp === null) return false;
    return Math.abs(row.timestamp - first.timestamp) > this.toleranceMs;
  }

  private take(): GpuRow[] {
    const rows = this.rows;
    this.rows = [];
    this.expected = Math.max(this.expected, rows.length);
    return rows;
  }
}

/** Parses a whole recorded `--query-gpu` output into samples (tests, one-shot reads). */
export function parseGpuSamples(text: string, fields: readonly string[] = gpuQueryFields, toleranceMs = 0): GpuDevice[][] {
  const asm = new SampleAssembler(fields, toleranceMs);
  const samples: GpuRow[][] = [];
  for (const line of text.split(/\r?\n/)) samples.push(...asm.push(line));
  const rest = asm.flush();
  if (rest) samples.push(rest);
  return samples.map((rows) => rows.map((r) => r.device));
}

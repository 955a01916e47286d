/**
 * Run records: one small JSON file per training or torchrun run in `<workspace>/.gpu-workbench/runs/`
 * (`<id>.json`, the run's log beside it as `<id>.log`), written by the engine that runs the job
 * (`runJob`, `runTorchrun`), so a run started from the CLI is recorded exactly as one started in
 * the editor, and the editor's Runs view lists both, after a reload too.
 *
 * A record is replaced whole: written aside under a dot name and renamed over the old one, so a
 * reader never sees half a record from us. Other files may still land in the folder (a copy cut
 * off, a file of another tool, a record of a newer version): reading skips each with the reason,
 * never throws.
 */
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { stripBom } from '../../common/jsonFile';
import { isRunCurves, type RunCurve } from './runCurves';
import type { JobOverrides } from './spec';

export const runRecordVersion = 1;

export type RunKind = 'training' | 'torchrun';
/** `running` is what the record says while its process lives; a reader tells a dead one apart with `pid` and `host`. */
export type RunStatus = 'running' | 'done' | 'failed' | 'cancelled';

export interface RunRecord {
  readonly version: typeof runRecordVersion;
  /** Also the file names: `<id>.json`, `<id>.log`. */
  readonly id: string;
  readonly kind: RunKind;
  /** The job's name. */
  readonly name: string;
  /** The job file, absolute. */
  readonly file: string;
  readonly status: RunStatus;
  /** ISO times. */
  readonly startedAt: string;
  readonly endedAt?: string;
  /** The process that runs the job's engine (the CLI, the editor's training host, the extension host for a torchrun task). */
  readonly pid: number;
  readonly host: string;
  /** What the run was started with, to run it again the same way. */
  readonly overrides?: JobOverrides;
  readonly resumed?: boolean;
  /** Where it really ran, from `job/started` (training) or the torchrun command (torchrun). */
  readonly strategy?: string;
  readonly backend?: string;
  readonly devices?: readonly string[];
  readonly description?: string;
  readonly epochs?: number;
  readonly epochsDone?: number;
  /** The job's checkpoint folder, and the epoch of its last checkpoint this run wrote. */
  readonly checkpointDir?: string;
  readonly checkpointEpoch?: number;
  /** The last value of each metric: trainLoss, testLoss, testAccuracy, samplesPerSecond, or what a script reported / printed. */
  readonly metrics: Readonly<Record<string, number>>;
  /**
   * Every metric point by point, for the Curves page (runCurves.ts): a training job's loss by step
   * and its epoch metrics by epoch, a script's reports by step or by report. Bounded (thinned as
   * the run grows). Absent in records written before curves were kept.
   */
  readonly curves?: Readonly<Record<string, RunCurve>>;
  /** failed / cancelled: why. */
  readonly reason?: string;
  readonly hint?: string;
}

/** `<workspace>/.gpu-workbench/runs`. */
export const runsFolder = (workspace: string): string => join(workspace, '.gpu-workbench', 'runs');

export const recordFile = (dir: string, id: string): string => join(dir, `${id}.json`);
export const logFile = (dir: string, id: string): string => join(dir, `${id}.log`);

/** A new run's id: its start time (sorts as it should), the job's name and the pid, file-name safe. */
export function newRunId(name: string, now: Date, pid = process.pid): string {
  const stamp = now.toISOString().replace(/:/g, '-');
  const safe = name.replace(/[^\w.-]+/g, '_').slice(0, 60) || 'run';
  return `${stamp}-${safe}-${pid}`;
}

/** Writes `record` whole: aside under a dot name, then renamed over `<id>.json`. */
export function writeRunRecord(dir: string, record: RunRecord): void {
  mkdirSync(dir, { recursive: true });
  const tmp = join(dir, `.${record.id}.json.tmp-${process.pid}`);
  writeFileSync(tmp, `${recordText(record)}\n`);
  renameSync(tmp, recordFile(dir, record.id));
}

/** The record as JSON, indented, with each curve point `[x,y]` on one line (not three): a third of the size. */
export function recordText(record: RunRecord): string {
  return JSON.stringify(record, null, 2).replace(/\[\n\s*(-?[\d.eE+-]+),\n\s*(-?[\d.eE+-]+)\n\s*\]/g, '[$1,$2]');
}

/** Removes a run's record and log. */
export function deleteRun(dir: string, id: string): void {
  rmSync(recordFile(dir, id), { force: true });
  rmSync(logFile(dir, id), { force: true });
}

export interface SkippedFile {
  readonly file: string;
  readonly reason: string;
}

export interface RunRecords {
  /** Newest first. */
  readonly records: readonly RunRecord[];
  readonly skipped: readonly SkippedFile[];
}

const statuses: readonly RunStatus[] = ['running', 'done', 'failed', 'cancelled'];
const kinds: readonly RunKind[] = ['training', 'torchrun'];

/** The record in `text`, or why it is none (torn, foreign, newer). */
export function parseRunRecord(text: string): RunRecord | { readonly problem: string } {
  let value: unknown;
  try {
    value = JSON.parse(stripBom(text));
  } catch {
    return { problem: text.trim() === '' ? 'it is empty' : 'it is not JSON (a write cut off?)' };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return { problem: 'it is not a run record (not a JSON object)' };
  const r = value as Record<string, unknown>;
  if (r.version !== runRecordVersion) {
    return { problem: typeof r.version === 'number' && r.version > runRecordVersion ? `it is a run record of version ${r.version}, newer than this version of GPU Workbench reads (${runRecordVersion})` : `it is not a run record (no "version": ${runRecordVersion})` };
  }
  const wrong: string[] = [];
  const str = (k: string, optional = false) => { if (!(optional && r[k] === undefined) && typeof r[k] !== 'string') wrong.push(k); };
  const num = (k: string, optional = false) => { if (!(optional && r[k] === undefined) && typeof r[k] !== 'number') wrong.push(k); };
  str('id'); str('name'); str('file'); str('startedAt'); str('host'); num('pid');
  str('endedAt', true); str('strategy', true); str('backend', true); str('description', true); str('checkpointDir', true); str('reason', true); str('hint', true);
  num('epochs', true); num('epochsDone', true); num('checkpointEpoch', true);
  if (!kinds.includes(r.kind as RunKind)) wrong.push('kind');
  if (!statuses.includes(r.status as RunStatus)) wrong.push('status');
  if (r.devices !== undefined && !(Array.isArray(r.devices) && r.devices.every((d) => typeof d === 'string'))) wrong.push('devices');
  const m = r.metrics;
  if (typeof m !== 'object' || m === null || Array.isArray(m) || Object.values(m).some((v) => typeof v !== 'number')) wrong.push('metrics');
  if (r.overrides !== undefined && (typeof r.overrides !== 'object' || r.overrides === null)) wrong.push('overrides');
  if (r.curves !== undefined && !isRunCurves(r.curves)) wrong.push('curves');
  if (wrong.length) return { problem: `its ${wrong.join(', ')} ${wrong.length === 1 ? 'is' : 'are'} missing or of the wrong type` };
  return value as RunRecord;
}

/** Every record in `dir`, newest first, and the files skipped with why; a missing folder holds none. */
export function readRunRecords(dir: string): RunRecords {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return { records: [], skipped: [] };
  }
  const records: RunRecord[] = [];
  const skipped: SkippedFile[] = [];
  for (const name of names) {
    if (!name.endsWith('.json') || name.startsWith('.')) continue;
    const file = join(dir, name);
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      // A folder named *.json, a file removed meanwhile.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') skipped.push({ file, reason: `it cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})` });
      continue;
    }
    const r = parseRunRecord(text);
    if ('problem' in r) skipped.push({ file, reason: r.problem });
    else if (`${r.id}.json` !== name) skipped.push({ file, reason: `its id (${r.id}) is not its file name` });
    else records.push(r);
  }
  records.sort((a, b) => (a.startedAt < b.startedAt ? 1 : a.startedAt > b.startedAt ? -1 : b.id.localeCompare(a.id)));
  return { records, skipped };
}

/** Whether the process a `running` record names is gone (on another host: assumed alive, as that cannot be checked). */
export function runProcessGone(r: Pick<RunRecord, 'pid' | 'host'>): boolean {
  if (r.host !== hostname()) return false;
  try {
    process.kill(r.pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

/**
 * The experiment journal: `.gpu-workbench/experiments/<name>/journal.jsonl`, append-only, one JSON
 * record per line. Each record is written whole by a single write call and fsync'ed before the
 * experiment acts on it, so a crash leaves at most one torn line at the end; reading drops that
 * line (and only that line), and reopening cuts it off so the next record starts on a line of its own.
 */
import { closeSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import type { TuneEvent } from './events';

/** The first record: the spec as written, to refuse resuming with a different search. */
export interface JournalHeader { readonly type: 'journal/header'; readonly version: 1; readonly name: string; readonly spec: Readonly<Record<string, unknown>>; readonly at: number }
export type JournalRecord = JournalHeader | TuneEvent;

export interface JournalContents {
  readonly records: JournalRecord[];
  /** Bytes of whole, parsed lines: where appending resumes. */
  readonly validBytes: number;
  /** Lines that could not be read (the torn last line, or a damaged one in the middle), for a warning. */
  readonly dropped: Array<{ readonly line: number; readonly text: string }>;
}

export function readJournal(path: string): JournalContents {
  const buf = readFileSync(path);
  const records: JournalRecord[] = [];
  const dropped: Array<{ line: number; text: string }> = [];
  let start = 0, line = 0, validBytes = 0;
  while (start < buf.length) {
    const nl = buf.indexOf(0x0a, start);
    const end = nl === -1 ? buf.length : nl;
    line++;
    const text = buf.subarray(start, end).toString('utf8');
    let ok = false;
    if (nl !== -1 && text.trim()) {
      try {
        const rec = JSON.parse(text) as JournalRecord;
        if (typeof rec === 'object' && rec !== null && typeof rec.type === 'string') {
          records.push(rec);
          ok = true;
        }
      } catch {
        // reported through `dropped`
      }
    }
    if (!ok && text.trim()) dropped.push({ line, text: text.length > 80 ? `${text.slice(0, 80)}…` : text });
    if (nl === -1) break;
    start = nl + 1;
    validBytes = start;
  }
  return { records, validBytes, dropped };
}

export class JournalWriter {
  private fd: number | null;

  /** Opens for appending; `truncateTo` cuts a torn tail first (from `readJournal().validBytes`). */
  constructor(readonly path: string, truncateTo?: number) {
    mkdirSync(dirname(path), { recursive: true });
    this.fd = openSync(path, 'a');
    if (truncateTo !== undefined) ftruncateSync(this.fd, truncateTo);
  }

  append(record: JournalRecord): void {
    if (this.fd === null) throw new Error(`journal ${this.path} is closed`);
    writeSync(this.fd, `${JSON.stringify(record)}\n`);
    fsyncSync(this.fd);
  }

  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }
}

/**
 * Job and tune files as JSON. A file saved by Notepad and some other Windows tools starts with a
 * UTF-8 byte order mark, which `readFileSync(…, 'utf8')` keeps and `JSON.parse` refuses, while
 * the editor drops it (so its squiggles say nothing): read such files with these instead.
 */
import { readFileSync } from 'node:fs';

/** `text` without a leading byte order mark (U+FEFF). */
export function stripBom(text: string): string {
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

/** The JSON in `file`, a leading byte order mark ignored; throws as readFileSync / JSON.parse do. */
export function readJsonFile(file: string): unknown {
  return JSON.parse(stripBom(readFileSync(file, 'utf8')));
}

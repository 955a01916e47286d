/**
 * Which experiment a "Tuning Results" tab shows again after a window reload. VS Code hands the
 * panel serializer the state the page saved (`experimentKey`: the experiment's folder); the folder
 * must still be an experiment of one of the window's workspace folders, with its journal, for the
 * results to be read back. No vscode here, so the lookup is unit-tested.
 */
import { statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';

/** An experiment's journal in a workspace folder. */
export interface JournalEntry {
  readonly dir: string;
  readonly name: string;
  /** The workspace folder's name. */
  readonly folder: string;
  /** When the journal was last written (ms). */
  readonly mtime: number;
}

export interface WorkspaceFolderPath { readonly name: string; readonly fsPath: string }

/** The experiment a restored panel's state names, or why it cannot be shown. */
export function restoreTarget(state: unknown, folders: readonly WorkspaceFolderPath[]): { entry: JournalEntry } | { problem: string } {
  const key = typeof state === 'object' && state !== null ? (state as { experimentKey?: unknown }).experimentKey : undefined;
  if (typeof key !== 'string' || key === '') return { problem: 'the tab saved no experiment (it was opened by an older version)' };
  const dir = resolve(key);
  const folder = folders.find((f) => resolve(f.fsPath, '.gpu-workbench', 'experiments') === dirname(dir));
  if (!folder) return { problem: `${dir} is not an experiment of this window's workspace folders` };
  const journal = join(dir, 'journal.jsonl');
  try {
    return { entry: { dir, name: basename(dir), folder: folder.name, mtime: statSync(journal).mtimeMs } };
  } catch {
    return { problem: `${journal} is gone` };
  }
}

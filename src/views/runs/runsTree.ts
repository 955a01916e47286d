/**
 * The Runs view's tree without `vscode`: reads the workspace folders' run records and experiment
 * journals into rows (runsModel.ts) and says what a redraw has to change, so that a write of one
 * run's record redraws that row alone.
 *
 * - Each run keeps one node object for as long as it is listed (VS Code finds a row by its
 *   element), updated in place; `changed` gets the nodes whose row reads differently, or
 *   `undefined` (the whole tree) only when rows were added, removed or reordered, and is not
 *   called when nothing changed. A whole-tree redraw closes a context menu the user has open on
 *   any row; a row's redraw leaves the others alone.
 * - Reads are coalesced: the first change after a quiet second is read after `delayMs` (150 ms:
 *   a run writes several files at once), later ones at most once per `minGapMs` (1 s), so a run
 *   with 0.25 s epochs redraws its row about once a second, not four times.
 * - While a row is running it is read again every `tickMs` (5 s) without any write: its duration
 *   grows, and a run whose process died shows as interrupted.
 */
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { readRunRecords, runProcessGone, runsFolder, type RunRecord } from '../../training/job/runRecord';
import { readExperiments, runRows, type RunRow } from './runsModel';

/** A row of the view: the same object for a run's key from reload to reload, its fields replaced. */
export interface RowNode<F> {
  row: RunRow;
  folder: F;
}

/** One line of a row's details, a child of the row. */
export interface DetailNode {
  readonly detail: string;
  readonly parent: string;
}

/** The clock and timers the tree reads and reloads by (a test drives its own). */
export interface Scheduler {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const systemScheduler: Scheduler = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

export interface RunsTreeOptions<F> {
  /** The workspace folders to read (`fsPath`: the folder on disk). */
  folders(): readonly { readonly folder: F; readonly fsPath: string }[];
  /** The nodes to redraw (the same objects `roots` holds), or `undefined`: the whole tree. */
  changed(nodes: readonly RowNode<F>[] | undefined): void;
  /** A file that is no readable record or journal: called once per file and reason. */
  skipped(file: string, reason: string): void;
  processGone?: (r: RunRecord) => boolean;
  scheduler?: Scheduler;
  /** The least time between two reads for writes (default 1000 ms). */
  minGapMs?: number;
  /** How often a running row is read again without writes (default 5000 ms). */
  tickMs?: number;
}

export class RunsTree<F> {
  private nodes = new Map<string, RowNode<F>>();
  private rootNodes: RowNode<F>[] = [];
  private entries = new Map<string, { record: RunRecord; dir: string }>();
  private readonly told = new Set<string>();
  private readonly scheduler: Scheduler;
  private timer: unknown;
  private due = Infinity;
  private lastRead = -Infinity;
  private disposed = false;

  constructor(private readonly o: RunsTreeOptions<F>) {
    this.scheduler = o.scheduler ?? systemScheduler;
  }

  /** The rows, newest first. */
  get roots(): readonly RowNode<F>[] {
    return this.rootNodes;
  }

  /** A row's details after its first line (the row's own text), as its children. */
  children(node: RowNode<F>): DetailNode[] {
    return node.row.details.slice(1).map((detail) => ({ detail, parent: node.row.key }));
  }

  record(key: string): { record: RunRecord; dir: string } | undefined {
    return this.entries.get(key);
  }

  /** Every run's record, newest first. */
  allRecords(): { record: RunRecord; dir: string }[] {
    return [...this.entries.values()].sort((a, b) => (a.record.startedAt < b.record.startedAt ? 1 : -1));
  }

  /** Whether a read is waiting for its time (a write coalesced, or a running row's tick). */
  get pending(): boolean {
    return this.timer !== undefined;
  }

  /**
   * Reads the folders again after `delayMs`, and not sooner than `minGapMs` after the last read;
   * a read already waiting is kept (several writes, one read), or brought forward.
   */
  refresh(delayMs = 150): void {
    const now = this.scheduler.now();
    this.schedule(Math.max(now + delayMs, this.lastRead + (this.o.minGapMs ?? 1000)));
  }

  /** Reads every folder's records and journals now and tells what changed. */
  reload(): void {
    if (this.disposed) return;
    this.cancel();
    const now = this.scheduler.now();
    this.lastRead = now;
    const read: { row: RunRow; folder: F }[] = [];
    const entries = new Map<string, { record: RunRecord; dir: string }>();
    for (const { folder, fsPath } of this.o.folders()) {
      const dir = runsFolder(fsPath);
      const records = readRunRecords(dir);
      const exps = readExperiments(join(fsPath, '.gpu-workbench', 'experiments'));
      for (const s of [...records.skipped, ...exps.skipped]) {
        const key = `${s.file}\0${s.reason}`;
        if (this.told.has(key)) continue;
        this.told.add(key);
        this.o.skipped(s.file, s.reason);
      }
      for (const r of records.records) entries.set(r.id, { record: r, dir });
      for (const row of runRows(records.records, exps.experiments, now, this.o.processGone ?? runProcessGone)) read.push({ row, folder });
    }
    read.sort((a, b) => b.row.startedAt - a.row.startedAt);
    this.entries = entries;

    const sameOrder = read.length === this.rootNodes.length && read.every((r, i) => this.rootNodes[i].row.key === r.row.key);
    const changed: RowNode<F>[] = [];
    const nodes = new Map<string, RowNode<F>>();
    const roots = read.map(({ row, folder }) => {
      let node = this.nodes.get(row.key);
      if (!node) {
        node = { row, folder };
      } else if (node.folder !== folder || !isDeepStrictEqual(node.row, row)) {
        node.row = row;
        node.folder = folder;
        changed.push(node);
      }
      nodes.set(row.key, node);
      return node;
    });
    this.nodes = nodes;
    this.rootNodes = roots;
    if (read.some((r) => r.row.status === 'running')) this.schedule(now + (this.o.tickMs ?? 5000));
    if (!sameOrder) this.o.changed(undefined);
    else if (changed.length) this.o.changed(changed);
  }

  dispose(): void {
    this.disposed = true;
    this.cancel();
  }

  private schedule(at: number): void {
    if (this.disposed || (this.timer !== undefined && this.due <= at)) return;
    this.cancel();
    this.due = at;
    this.timer = this.scheduler.setTimeout(() => {
      this.timer = undefined;
      this.due = Infinity;
      this.reload();
    }, Math.max(0, at - this.scheduler.now()));
  }

  private cancel(): void {
    if (this.timer !== undefined) this.scheduler.clearTimeout(this.timer);
    this.timer = undefined;
    this.due = Infinity;
  }
}

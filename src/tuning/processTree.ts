/**
 * A trial's process tree, for the kill that must leave nothing behind. A trial runs in its own
 * process group, but what it starts may make a group of its own: the training CLI puts torchrun
 * and its workers in one, so that cancelling a job takes them all. Killing the trial's group
 * alone would orphan that group when the CLI dies before it has cancelled torchrun (a grace
 * period shorter than the CLI's own). So the final SIGKILL first finds every descendant's group
 * (while the tree still hangs together: an orphan is re-parented and lost) and kills those too.
 * A trial that exits on SIGTERM at once is reaped before that SIGKILL, and its children in other
 * groups are orphans by then: so stopping a trial takes a `snapshot` of its tree BEFORE the
 * SIGTERM, sends the SIGTERM to every group in it, and the SIGKILL takes the snapshot's groups
 * and processes as well as what a fresh look finds.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

interface Proc { readonly pid: number; readonly ppid: number; readonly pgid: number; readonly start?: string }

/** A process (or the group it leads) as seen once: its start time tells a reused pid apart (Linux). */
export interface ProcessId { readonly id: number; readonly start?: string }

/** A trial's tree as seen before signalling it: the groups its descendants made, and the descendants. */
export interface TreeSnapshot { readonly groups: readonly ProcessId[]; readonly pids: readonly ProcessId[] }

/**
 * The fields of /proc/PID/stat after `pid (comm)`: [0] state, [1] ppid, [2] pgrp, ..., [19] start
 * time in clock ticks since boot. comm may hold spaces and parentheses, so the split is after the
 * last ')'. Undefined where not Linux or the process is gone.
 */
function statFields(pid: number | string): string[] | undefined {
  if (process.platform !== 'linux') return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** Every process as (pid, ppid, pgid): /proc on Linux, `ps` elsewhere; empty when neither answers. */
function processTable(): Proc[] {
  if (process.platform === 'linux') {
    const out: Proc[] = [];
    for (const name of readdirSync('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      const fields = statFields(name);
      if (fields) out.push({ pid: Number(name), ppid: Number(fields[1]), pgid: Number(fields[2]), start: fields[19] }); // else it exited while we looked
    }
    return out;
  }
  try {
    return execFileSync('ps', ['-A', '-o', 'pid=,ppid=,pgid='], { encoding: 'utf8', timeout: 5000 })
      .trim().split('\n').map((l) => l.trim().split(/\s+/).map(Number)).filter((r) => r.length === 3 && r.every(Number.isFinite))
      .map(([pid, ppid, pgid]) => ({ pid, ppid, pgid }));
  } catch {
    return [];
  }
}

/** `root`'s descendants and the groups they are in other than `root`'s own (`root` leads its group). */
export function snapshot(root: number): TreeSnapshot {
  const table = processTable();
  const byPid = new Map<number, Proc>();
  const children = new Map<number, Proc[]>();
  for (const p of table) {
    byPid.set(p.pid, p);
    const list = children.get(p.ppid);
    if (list) list.push(p);
    else children.set(p.ppid, [p]);
  }
  const groups = new Map<number, ProcessId>();
  const pids: ProcessId[] = [];
  const stack = [root];
  const seen = new Set<number>(stack);
  while (stack.length) {
    for (const c of children.get(stack.pop() as number) ?? []) {
      if (seen.has(c.pid)) continue;
      seen.add(c.pid);
      pids.push({ id: c.pid, start: c.start });
      if (c.pgid !== root && c.pgid > 1 && !groups.has(c.pgid)) groups.set(c.pgid, { id: c.pgid, start: byPid.get(c.pgid)?.start });
      stack.push(c.pid);
    }
  }
  return { groups: [...groups.values()], pids };
}

/** The process groups of `root`'s descendants other than `root`'s own group (`root` leads its group). */
export function descendantGroups(root: number): number[] {
  return snapshot(root).groups.map((g) => g.id);
}

/**
 * Whether `p.id` still names what the snapshot saw: the pid is gone (a group id stays taken while
 * the group has members, so a leaderless group is still the one seen) or runs with the same start time.
 */
function stillSame(p: ProcessId): boolean {
  if (p.start === undefined) return true;
  const now = statFields(p.id)?.[19];
  return now === undefined || now === p.start;
}

/** Sends `signal` to every group and process of a snapshot that is still the one seen. */
export function signalSnapshot(snap: TreeSnapshot, signal: NodeJS.Signals): void {
  for (const g of snap.groups) if (stillSame(g)) signalGroup(g.id, signal);
  for (const p of snap.pids) {
    if (!stillSame(p)) continue;
    try {
      process.kill(p.id, signal);
    } catch {
      // gone already
    }
  }
}

/** Whether any process of a snapshot still runs (zombies count as gone). */
export function snapshotAlive(snap: TreeSnapshot): boolean {
  return snap.pids.some((p) => {
    if (p.start !== undefined) {
      const fields = statFields(p.id);
      return fields !== undefined && fields[19] === p.start && fields[0] !== 'Z';
    }
    try {
      process.kill(p.id, 0);
      return true;
    } catch {
      return false;
    }
  });
}

/** Sends `signal` to a process group; false when it is gone. */
export function signalGroup(pgid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false; // ESRCH: gone already
  }
}

/** SIGKILL for the trial's group, every group its descendants made, and what `saved` saw before. */
export function killTree(root: number, saved?: TreeSnapshot): void {
  const groups = descendantGroups(root);
  signalGroup(root, 'SIGKILL');
  for (const g of groups) signalGroup(g, 'SIGKILL');
  if (saved) signalSnapshot(saved, 'SIGKILL');
}

/**
 * A trial's process tree, for the kill that must leave nothing behind. A trial runs in its own
 * process group, but what it starts may make a group of its own: the training CLI puts torchrun
 * and its workers in one, so that cancelling a job takes them all. Killing the trial's group
 * alone would orphan that group when the CLI dies before it has cancelled torchrun (a grace
 * period shorter than the CLI's own). So the final SIGKILL first finds every descendant's group
 * (while the tree still hangs together: an orphan is re-parented and lost) and kills those too.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

interface Proc { readonly pid: number; readonly ppid: number; readonly pgid: number }

/** Every process as (pid, ppid, pgid): /proc on Linux, `ps` elsewhere; empty when neither answers. */
function processTable(): Proc[] {
  if (process.platform === 'linux') {
    const out: Proc[] = [];
    for (const name of readdirSync('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      try {
        // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ')'.
        const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
        const [, ppid, pgid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        out.push({ pid: Number(name), ppid: Number(ppid), pgid: Number(pgid) });
      } catch {
        // it exited while we looked
      }
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

/** The process groups of `root`'s descendants other than `root`'s own group (`root` leads its group). */
export function descendantGroups(root: number): number[] {
  const table = processTable();
  const children = new Map<number, Proc[]>();
  for (const p of table) {
    const list = children.get(p.ppid);
    if (list) list.push(p);
    else children.set(p.ppid, [p]);
  }
  const groups = new Set<number>();
  const stack = [root];
  const seen = new Set<number>(stack);
  while (stack.length) {
    for (const c of children.get(stack.pop() as number) ?? []) {
      if (seen.has(c.pid)) continue;
      seen.add(c.pid);
      if (c.pgid !== root && c.pgid > 1) groups.add(c.pgid);
      stack.push(c.pid);
    }
  }
  return [...groups];
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

/** SIGKILL for the trial's group and every group its descendants made. */
export function killTree(root: number): void {
  const groups = descendantGroups(root);
  signalGroup(root, 'SIGKILL');
  for (const g of groups) signalGroup(g, 'SIGKILL');
}

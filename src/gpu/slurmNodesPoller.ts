/**
 * Reads a running Slurm job's nodes at a modest interval for the GPU panel (issue #16 item 4):
 * starts when squeue first says RUNNING (with the job's nodes), probes again `intervalMs` after
 * the last probe ended (never two at once: a slow srun delays the next one), and stops when
 * the job leaves RUNNING (it ended, or is completing) or `stop()` is called; a probe still
 * running then is let finish and its result dropped.
 */
import type { PanelSlurmNodes } from '../common/protocol';
import type { SlurmJobInfo } from '../training/launchers/slurm';
import type { JobNodes } from './slurmNodes';

/** One reading of the job's nodes: `readJobNodes` in the extension, a fake in tests. */
export type ReadJobNodes = (jobId: string, nodeList: string, nodeCount: number) => Promise<JobNodes>;

/** The timer the poller waits with (a fake in tests: no sleeps). */
export interface PollTimer {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  now(): number;
}

const realTimer: PollTimer = {
  setTimeout: (fn, ms) => {
    const t = setTimeout(fn, ms);
    t.unref?.();
    return t;
  },
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
  now: () => Date.now(),
};

/** How many nodes Slurm's host list names: `n[1-3,7],gpu01` is 5. */
export function hostListCount(list: string): number {
  let count = 0;
  for (const m of list.matchAll(/[^,[\]]*(?:\[([^\]]*)\])?[^,[\]]*/g)) {
    if (!m[0]) continue;
    if (m[1] === undefined) {
      count++;
      continue;
    }
    for (const part of m[1].split(',')) {
      const [a, b] = part.split('-');
      count += b === undefined ? 1 : Math.max(1, Number(b) - Number(a) + 1);
    }
  }
  return count;
}

export class SlurmNodesPoller {
  private job: { id: string; nodeList: string; nodeCount: number } | undefined;
  private timer: unknown;
  private inFlight = false;
  private stopped = false;
  private last: PanelSlurmNodes | undefined;

  constructor(
    private readonly read: ReadJobNodes,
    private readonly onNodes: (nodes: PanelSlurmNodes | undefined) => void,
    readonly intervalMs = 8000,
    private readonly timer_: PollTimer = realTimer,
  ) {}

  /** Whether a probe runs or is due (the job is followed). */
  get active(): boolean {
    return this.job !== undefined;
  }

  /** What squeue said of the job (SlurmJob's `info` event): RUNNING on nodes starts (or retargets) the probes, anything else stops them. */
  update(info: SlurmJobInfo): void {
    if (this.stopped) return;
    if (info.state !== 'RUNNING' || !info.nodes) {
      if (info.state !== 'PENDING' && info.state !== 'CONFIGURING') this.end();
      return;
    }
    const nodeCount = info.nodeCount ?? hostListCount(info.nodes);
    const was = this.job;
    this.job = { id: info.id, nodeList: info.nodes, nodeCount };
    if (!was && !this.inFlight) this.probe();
  }

  /** The job ended (or the run was stopped): no more probes, the section goes. */
  stop(): void {
    this.end();
  }

  private end(): void {
    const had = this.job !== undefined || this.last !== undefined;
    this.stopped = true;
    this.job = undefined;
    if (this.timer !== undefined) this.timer_.clearTimeout(this.timer);
    this.timer = undefined;
    this.last = undefined;
    if (had) this.onNodes(undefined);
  }

  private probe(): void {
    this.timer = undefined;
    const job = this.job;
    if (!job || this.stopped) return;
    this.inFlight = true;
    const done = (nodes: PanelSlurmNodes | undefined): void => {
      this.inFlight = false;
      if (this.stopped || !this.job) return;
      if (nodes) {
        this.last = nodes;
        this.onNodes(nodes);
      }
      this.timer = this.timer_.setTimeout(() => this.probe(), this.intervalMs);
    };
    let reading: Promise<JobNodes>;
    try {
      reading = this.read(job.id, job.nodeList, job.nodeCount);
    } catch (err) {
      reading = Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    reading.then(
      (r) => done({ jobId: r.jobId, nodeList: job.nodeList, nodes: r.nodes, unavailable: r.unavailable, takenAt: this.timer_.now() }),
      (err: unknown) => {
        const error = err instanceof Error ? err.message : String(err);
        // Keep the last nodes shown, marked with what srun said.
        done({ jobId: job.id, nodeList: job.nodeList, nodes: this.last?.nodes ?? [], unavailable: this.last?.unavailable ?? [], takenAt: this.last?.takenAt ?? this.timer_.now(), error });
      },
    );
  }
}

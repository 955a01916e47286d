/**
 * The running (or last) training job as the GPU panel shows it, shared between the training
 * commands (which write it) and the panel provider (which posts it to its page). Steps arrive
 * many times a second; listeners hear at most one change per `intervalMs`, and every change of
 * state (started, done, failed) at once.
 */
import type { PanelJob } from '../../common/protocol';

export class JobFeed {
  private job: PanelJob | null = null;
  private readonly listeners = new Set<(job: PanelJob | null) => void>();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private lastEmit = 0;

  constructor(private readonly intervalMs = 250) {}

  current(): PanelJob | null {
    return this.job;
  }

  set(job: PanelJob | null): void {
    const stateChanged = (job?.state ?? null) !== (this.job?.state ?? null) || job?.workers.length !== this.job?.workers.length;
    this.job = job;
    const wait = this.lastEmit + this.intervalMs - Date.now();
    if (stateChanged || wait <= 0) this.emit();
    else this.timer ??= setTimeout(() => this.emit(), wait);
  }

  onChange(listener: (job: PanelJob | null) => void): { dispose(): void } {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.listeners.clear();
  }

  private emit(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.lastEmit = Date.now();
    for (const l of [...this.listeners]) l(this.job);
  }
}

/** The one feed of this extension host: written by `training.ts`, read by `gpuPanel.ts`. */
export const trainingJobFeed = new JobFeed();

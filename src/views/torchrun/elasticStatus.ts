/**
 * A multi-node torchrun job's elastic state for its card in the GPU panel, from the agent's events
 * (multinode.ts's AgentLog): which node this machine is, the world, and the restarts so far, so that
 * a restart reads as a restart of the same job (`node 0 of 1 · world 2 · restart 1 of 3`), never as a new one.
 */
import type { ElasticEvent } from '../../training/launchers/multinode';

export class ElasticStatus {
  private groupRank?: number;
  private nodes?: number;
  private worldSize?: number;
  private restarts = 0;
  private maxRestarts?: number;
  /** A restart announced whose rendezvous round has not completed yet. */
  private restarting?: 'failed' | 'membership';

  onEvent(e: ElasticEvent): void {
    if (e.kind === 'rendezvous') {
      this.groupRank = e.groupRank;
      this.nodes = e.nodes;
      this.worldSize = e.worldSize;
      this.restarts = Math.max(this.restarts, e.restart);
      this.restarting = undefined;
    } else {
      this.restarting = e.why;
      if (e.why === 'failed' && e.attempt !== undefined) this.restarts = Math.max(this.restarts, e.attempt);
      if (e.maxRestarts !== undefined) this.maxRestarts = e.maxRestarts;
    }
  }

  /** Undefined before the first event. */
  text(): string | undefined {
    const parts: string[] = [];
    if (this.groupRank !== undefined && this.nodes !== undefined) parts.push(`node ${this.groupRank} of ${this.nodes}`);
    if (this.worldSize !== undefined) parts.push(`world ${this.worldSize}`);
    if (this.restarts > 0) parts.push(`restart ${this.restarts}${this.maxRestarts !== undefined ? ` of ${this.maxRestarts}` : ''}`);
    if (this.restarting === 'failed') parts.push('workers failed: restarting them in a new round');
    else if (this.restarting === 'membership') parts.push('nodes joined: restarting the workers with them');
    return parts.length ? parts.join(' · ') : undefined;
  }

  /** For the job's end message: `after 1 restart` (the same job throughout), or undefined with none. */
  restartsText(): string | undefined {
    return this.restarts > 0 ? `after ${this.restarts} restart${this.restarts === 1 ? '' : 's'} of its workers` : undefined;
  }
}

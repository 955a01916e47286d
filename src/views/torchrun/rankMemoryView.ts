/**
 * A torchrun task's per-rank memory for the GPU panel: collects the companion's `job/rankMemory`
 * events, gives the job's workers their process ids (the panel finds each rank among nvidia-smi's
 * processes by it), the ranks' curves, and the "grows every iteration" hint naming the ranks,
 * linked to the OOM-hints language server's finding in the running script when it has one.
 *
 * The language server's diagnostics exist only for files shown in editors (they are pulled for
 * visible documents): while the script is not shown, the hint offers to open it instead, and the
 * finding is linked as soon as its diagnostics arrive (`onDidChangeDiagnostics`).
 */
import * as vscode from 'vscode';
import type { PanelFinding, PanelGrowthHint, PanelJob, PanelJobWorker } from '../../common/protocol';
import { RankMemoryTracker } from '../../common/rankMemory';
import type { JobEvent } from '../../training/job/events';
import { growthHint, pickGrowthFinding, rankWorkers } from './rankMemoryFormat';

export class RankMemoryView implements vscode.Disposable {
  private readonly tracker = new RankMemoryTracker();
  private readonly uri: vscode.Uri;
  private readonly subscription: vscode.Disposable;
  private finding: PanelFinding | undefined;
  private growth: PanelGrowthHint | null = null;

  constructor(
    script: string,
    private readonly planned: readonly PanelJobWorker[],
    private readonly visible: readonly number[] | undefined,
    /** Merges a change into the job the panel shows. */
    private readonly update: (change: Partial<PanelJob>) => void,
  ) {
    this.uri = vscode.Uri.file(script);
    this.subscription = vscode.languages.onDidChangeDiagnostics((e) => {
      if (!e.uris.some((u) => u.toString() === this.uri.toString())) return;
      this.readFinding();
      if (this.growth) this.publish();
    });
    this.readFinding();
  }

  onEvent(e: JobEvent): void {
    if (e.type !== 'job/rankMemory') return;
    this.tracker.add(e);
    this.publish();
  }

  /** What the panel keeps showing after the job ended (curves and hint; no process bars then). */
  current(): Partial<PanelJob> {
    if (!this.tracker.size) return {};
    const ranks = this.tracker.ranks();
    return { ranks, growth: this.growth, workers: rankWorkers(this.planned, ranks, this.visible), ...(this.visible ? { cudaVisibleDevices: this.visible } : {}) };
  }

  dispose(): void {
    this.subscription.dispose();
  }

  private publish(): void {
    this.growth = growthHint(this.tracker.growth(), this.finding, this.uri.fsPath);
    this.update(this.current());
  }

  private readFinding(): void {
    const diagnostics = vscode.languages.getDiagnostics(this.uri).map((d) => ({
      source: d.source,
      code: typeof d.code === 'object' ? { value: d.code.value } : d.code,
      line: d.range.start.line,
      message: d.message,
    }));
    this.finding = pickGrowthFinding(this.uri.fsPath, diagnostics);
  }
}

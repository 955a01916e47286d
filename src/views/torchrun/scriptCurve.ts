/**
 * A torchrun job's card in the GPU panel from the metrics its script printed or reported
 * (`job/report` events): the training loss as a curve, over the steps the script named or else
 * over its loss lines in order, and the last value of every metric as a line.
 */
import type { PanelJob } from '../../common/protocol';
import type { JobEvent } from '../../training/job/events';
import { metricsText } from '../../training/launchers/scriptMetrics';
import { appendLoss } from '../training/trainingFormat';

/** The training loss among a report's metrics: loss, train_loss, or another loss that is no test / validation one. */
export function trainingLossOf(metrics: Readonly<Record<string, number>>): number | undefined {
  if (metrics.loss !== undefined) return metrics.loss;
  if (metrics.train_loss !== undefined) return metrics.train_loss;
  const key = Object.keys(metrics).find((k) => /loss/i.test(k) && !/^(?:test|val|valid|eval|final)/i.test(k));
  return key === undefined ? undefined : metrics[key];
}

export class ScriptCurve {
  private readonly steps: number[] = [];
  private readonly loss: number[] = [];
  private readonly last: Record<string, number> = {};
  private points = 0;
  private allStepped = true;

  /** Takes a report in; true when the card shows something new. */
  add(e: Extract<JobEvent, { type: 'job/report' }>): boolean {
    Object.assign(this.last, e.metrics);
    const loss = trainingLossOf(e.metrics);
    if (loss !== undefined) {
      this.points++;
      this.allStepped &&= e.step !== undefined;
      appendLoss(this.steps, this.loss, e.step ?? this.points, loss);
    }
    return true;
  }

  panel(): Pick<PanelJob, 'lossSteps' | 'loss' | 'lossAxis'> & { metrics?: string } {
    return {
      lossSteps: [...this.steps],
      loss: [...this.loss],
      lossAxis: this.allStepped && this.points > 0 ? 'step' : 'report',
      ...(Object.keys(this.last).length ? { metrics: metricsText(this.last) } : {}),
    };
  }
}

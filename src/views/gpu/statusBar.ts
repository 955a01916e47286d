/**
 * The status bar item: one line of memory per GPU (`GPU 0: 7.1/24 GiB · GPU 1: 3.0/24 GiB`),
 * details in its tooltip, a click opens the panel. It follows every snapshot the monitor takes
 * (while the panel is visible or a job runs) and, so that it is filled before anyone opens the
 * panel, takes one reading of its own shortly after start, off the activation path.
 */
import * as vscode from 'vscode';
import { gpuMonitorSettings, statusBarEnabled } from '../../config';
import { sampleOnce, type GpuMonitor } from '../../gpu/monitor';
import type { GpuSnapshot } from '../../gpu/types';
import { log } from '../../log';
import { formatStatusSummary, formatStatusTooltip } from './format';

/** Long enough for activation and the first editors to settle before we spawn a tool. */
const firstReadingDelayMs = 1500;

export function registerGpuStatusBar(context: vscode.ExtensionContext, monitor: GpuMonitor): void {
  const item = vscode.window.createStatusBarItem('gpuWorkbench.status', vscode.StatusBarAlignment.Right, 100);
  item.name = 'GPU Workbench: GPU memory';
  item.command = 'gpuWorkbench.showPanel';
  item.text = 'GPU …';
  item.tooltip = 'Reading the GPUs…';
  context.subscriptions.push(item);

  let shownTakenAt = -Infinity;
  let reading = false;
  let disposed = false;

  const render = (snapshot: GpuSnapshot): void => {
    // A deferred one-off reading must not overwrite a newer live one.
    if (snapshot.takenAt < shownTakenAt) return;
    shownTakenAt = snapshot.takenAt;
    const summary = formatStatusSummary(snapshot);
    item.text = snapshot.stale ? `$(warning) ${summary}` : summary;
    const tooltip = new vscode.MarkdownString(formatStatusTooltip(snapshot));
    tooltip.supportThemeIcons = false;
    item.tooltip = tooltip;
    item.backgroundColor = snapshot.stale ? new vscode.ThemeColor('statusBarItem.warningBackground') : undefined;
    item.accessibilityInformation = { label: `GPU memory: ${summary}. Open the GPU panel.` };
  };

  const takeOneReading = (): void => {
    const latest = monitor.latest();
    if (latest) return render(latest);
    const { enabled, ...options } = gpuMonitorSettings();
    if (!enabled) {
      item.text = 'GPU';
      item.tooltip = 'GPU sampling is turned off (setting gpuWorkbench.gpuMonitor.enabled).';
      return;
    }
    if (reading) return;
    reading = true;
    void sampleOnce(options).then(
      (snapshot) => {
        if (!disposed) render(snapshot);
      },
      (err: unknown) => {
        log.warn(`status bar: one GPU reading failed: ${String(err)}`);
        if (!disposed && shownTakenAt === -Infinity) {
          item.text = 'No GPU';
          item.tooltip = `Could not read the GPUs: ${String(err)}`;
        }
      },
    ).finally(() => {
      reading = false;
    });
  };

  const apply = (): void => {
    if (statusBarEnabled()) {
      item.show();
      if (shownTakenAt === -Infinity) takeOneReading();
    } else {
      item.hide();
    }
  };

  const timer = setTimeout(apply, firstReadingDelayMs);
  const snapshots = monitor.onSnapshot((snapshot) => render(snapshot));
  context.subscriptions.push(
    { dispose: () => { disposed = true; clearTimeout(timer); snapshots.dispose(); } },
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('gpuWorkbench.statusBar.enabled') || e.affectsConfiguration('gpuWorkbench.gpuMonitor.enabled')) apply();
    }),
  );
}

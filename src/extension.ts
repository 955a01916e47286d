/**
 * Entry point: wires each feature and nothing else. Heavy work (sampling, parsing) starts
 * only when a feature needs it: the panel samples while visible, the status bar takes one
 * deferred reading.
 */
import * as vscode from 'vscode';
import { performance } from 'node:perf_hooks';
import { initLog, log } from './log';
import { gpuMonitorOptions } from './config';
import { GpuMonitor } from './gpu/monitor';
import { registerGpuPanel } from './views/gpu/gpuPanel';
import { registerGpuStatusBar } from './views/gpu/statusBar';
import { registerTraining } from './views/training/training';
import { registerFindBatchSize } from './views/batchSize/batchSize';
import { registerTuning, stopAllTuning } from './views/tuning/tuning';
import { registerLintClient } from './client/lintClient';
import { registerSpecDiagnostics } from './views/jobFiles/specDiagnostics';
import { registerCheckGpuSetup } from './views/doctor/doctor';
import { registerRunsView } from './views/runs/runsView';
import { registerCopyLaunchCommands } from './views/torchrun/launchCommands';

export function activate(context: vscode.ExtensionContext): void {
  const started = performance.now();
  initLog(context);

  const monitor = new GpuMonitor(gpuMonitorOptions());
  context.subscriptions.push({ dispose: () => monitor.dispose() });
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('gpuWorkbench.gpuMonitor')) monitor.configure(gpuMonitorOptions());
    }),
  );

  registerGpuPanel(context, monitor);
  registerGpuStatusBar(context, monitor);
  registerTraining(context, monitor);
  registerRunsView(context);
  registerFindBatchSize(context);
  registerTuning(context, monitor);
  registerLintClient(context);
  registerSpecDiagnostics(context);
  registerCheckGpuSetup(context);
  registerCopyLaunchCommands(context);

  log.info(`GPU Workbench activated in ${(performance.now() - started).toFixed(1)} ms`);
}

/**
 * VS Code awaits this promise (for a few seconds), not the disposables: running experiments end
 * here, SIGKILL included for trials that ignore SIGTERM. The disposables end the rest.
 */
export function deactivate(): Promise<void> {
  return stopAllTuning();
}

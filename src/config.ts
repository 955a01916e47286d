/** Typed access to the extension's settings (package.json `contributes.configuration`). */
import * as vscode from 'vscode';
import type { GpuMonitorOptions } from './gpu/monitor';

export function gpuMonitorSettings(): GpuMonitorOptions & { enabled: boolean } {
  const c = vscode.workspace.getConfiguration('gpuWorkbench.gpuMonitor');
  return {
    enabled: c.get<boolean>('enabled', true),
    intervalMs: c.get<number>('intervalMs', 1000),
    nvidiaSmiPath: c.get<string>('nvidiaSmiPath', 'nvidia-smi') || 'nvidia-smi',
    historyMinutes: c.get<number>('historyMinutes', 10),
  };
}

/** The monitor's options alone (whether sampling is enabled is the panel's business). */
export function gpuMonitorOptions(): GpuMonitorOptions {
  const { enabled: _enabled, ...options } = gpuMonitorSettings();
  return options;
}

export function statusBarEnabled(): boolean {
  return vscode.workspace.getConfiguration('gpuWorkbench.statusBar').get<boolean>('enabled', true);
}

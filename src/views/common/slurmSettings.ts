/** The settings gpuWorkbench.slurm.* (partition, time, account): what a slurm job asks of sbatch when its job file does not say. */
import * as vscode from 'vscode';
import type { SlurmOptions } from '../../training/launchers/slurm';

export function slurmSettings(scope?: vscode.Uri): SlurmOptions {
  const c = vscode.workspace.getConfiguration('gpuWorkbench.slurm', scope);
  const get = (k: string) => c.get<string>(k, '').trim();
  const [partition, time, account] = [get('partition'), get('time'), get('account')];
  return { ...(partition ? { partition } : {}), ...(time ? { time } : {}), ...(account ? { account } : {}) };
}

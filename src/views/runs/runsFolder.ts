/** Where the editor's runs are recorded: `.gpu-workbench/runs/` of the job file's workspace folder (of the first one for a file outside them). */
import * as vscode from 'vscode';
import { runsFolder } from '../../training/job/runRecord';

export function workspaceRunsDir(file: string): string | undefined {
  const folder = vscode.workspace.getWorkspaceFolder(vscode.Uri.file(file)) ?? vscode.workspace.workspaceFolders?.[0];
  return folder?.uri.scheme === 'file' ? runsFolder(folder.uri.fsPath) : undefined;
}

/** `{ runsDir }` for the engine's options, or nothing without a workspace folder. */
export function runsOption(file: string): { runsDir?: string } {
  const dir = workspaceRunsDir(file);
  return dir ? { runsDir: dir } : {};
}

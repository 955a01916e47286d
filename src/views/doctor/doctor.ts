/**
 * "GPU Workbench: Check GPU Setup": `gpu-workbench doctor` from the command palette. The CLI runs
 * in a forked process (native backends are loaded in its own probe processes, the training runs
 * in its workers, so nothing of it can take the editor down), its report streams into an output
 * channel as each check ends, and its verdict comes back as a notification.
 *
 * It runs none of the workspace's code (the checks use our own job in a temporary folder, and
 * Python from the temporary folder too), so it is offered in untrusted workspaces as well; the
 * nvidia-smi path and the Python interpreter are restricted settings, which a workspace that is
 * not trusted cannot set.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { tmpdir } from 'node:os';
import * as vscode from 'vscode';
import { gpuMonitorSettings } from '../../config';

export interface DoctorEnding {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  /** The CLI's last line: the verdict. */
  readonly verdict: string;
  readonly cancelled: boolean;
}

/** Runs `cli.js doctor` and hands each line of its report to `onLine`; `cancel` ends it. */
export function runDoctor(cli: string, args: readonly string[], onLine: (line: string) => void): { ended: Promise<DoctorEnding>; cancel(): void } {
  let cancelled = false;
  let child: ChildProcess;
  const ended = new Promise<DoctorEnding>((resolve) => {
    // With an IPC channel: the CLI's training workers end when it goes away.
    child = fork(cli, ['doctor', ...args], { cwd: tmpdir(), stdio: ['ignore', 'pipe', 'pipe', 'ipc'], execArgv: [] });
    let last = '';
    let pending = '';
    const lines = (d: Buffer) => {
      pending += d.toString();
      const parts = pending.split('\n');
      pending = parts.pop() ?? '';
      for (const line of parts) {
        onLine(line);
        if (line.trim()) last = line.trim();
      }
    };
    child.stdout?.on('data', lines);
    child.stderr?.on('data', lines);
    child.on('error', (err) => resolve({ code: null, signal: null, verdict: `the check could not be started (${err.message}). Is the extension built (dist/cli.js)?`, cancelled }));
    child.on('close', (code, signal) => {
      if (pending.trim()) { onLine(pending); last = pending.trim(); }
      resolve({ code, signal, verdict: last, cancelled });
    });
  });
  return {
    ended,
    cancel: () => {
      cancelled = true;
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    },
  };
}

export function registerCheckGpuSetup(context: vscode.ExtensionContext): void {
  const channel = vscode.window.createOutputChannel('GPU Workbench: GPU Setup');
  let busy = false;
  let current: { cancel(): void } | undefined;
  context.subscriptions.push(channel, { dispose: () => current?.cancel() }, vscode.commands.registerCommand('gpuWorkbench.checkGpuSetup', async () => {
    channel.show(true);
    if (busy) return;
    busy = true;
    channel.clear();
    try {
      const cli = context.asAbsolutePath('dist/cli.js');
      const ending = await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: 'Checking GPU setup', cancellable: true }, (progress, token) => {
        // The interpreter torchrun jobs use, when set (a restricted setting: a workspace it does not trust cannot set it).
        const python = vscode.workspace.getConfiguration('gpuWorkbench.training').get<string>('python', '');
        const run = runDoctor(cli, ['--nvidia-smi', gpuMonitorSettings().nvidiaSmiPath ?? 'nvidia-smi', ...(python ? ['--python', python] : [])], (line) => {
          channel.appendLine(line);
          const title = /^\[(?:ok {2}|WARN|FAIL|info|skip)\] ([^:]+):/.exec(line);
          if (title) progress.report({ message: `${title[1]}…` });
        });
        current = run;
        const sub = token.onCancellationRequested(() => run.cancel());
        return run.ended.finally(() => { sub.dispose(); current = undefined; });
      });
      if (ending.cancelled) return;
      const show = 'Show Report';
      const answer = ending.code === 0
        ? await vscode.window.showInformationMessage(`GPU setup: ${ending.verdict}`, show)
        : await vscode.window.showWarningMessage(`GPU setup: ${ending.code === 1 ? ending.verdict : `the check ended without a verdict (${ending.signal ?? `exit ${ending.code}`}): ${ending.verdict}`}`, show);
      if (answer === show) channel.show(false);
    } finally {
      busy = false;
    }
  }));
}

/**
 * Starts the OOM-hints language server (dist/server.js) for Python files and untitled
 * Python buffers. The server runs in its own Node process over IPC, with a debug twin
 * that listens for an inspector, and logs to a LogOutputChannel.
 */
import * as vscode from 'vscode';
import { LanguageClient, TransportKind, type LanguageClientOptions, type ServerOptions } from 'vscode-languageclient/node';

export function registerLintClient(context: vscode.ExtensionContext): void {
  const module = context.asAbsolutePath('dist/server.js');
  const serverOptions: ServerOptions = {
    run: { module, transport: TransportKind.ipc },
    debug: { module, transport: TransportKind.ipc, options: { execArgv: ['--nolazy', '--inspect=6012'] } },
  };
  const outputChannel = vscode.window.createOutputChannel('GPU Workbench: OOM hints', { log: true });
  const watcher = vscode.workspace.createFileSystemWatcher('**/*.py');
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { scheme: 'file', language: 'python' },
      { scheme: 'untitled', language: 'python' },
    ],
    outputChannel,
    synchronize: { fileEvents: watcher, configurationSection: 'gpuWorkbench.lint' },
  };
  const client = new LanguageClient('gpuWorkbench.lint', 'GPU Workbench: OOM hints', serverOptions, clientOptions);
  context.subscriptions.push(outputChannel, watcher, { dispose: () => void client.stop().catch(() => undefined) });
  // Start the server only once a Python file is open: a workspace without Python never pays
  // for it, and activate() stays short.
  const start = (): void => {
    opened.dispose();
    client.start().catch((err: unknown) => outputChannel.error(`The OOM-hints server did not start: ${err instanceof Error ? err.message : String(err)}`));
  };
  const isPython = (d: vscode.TextDocument): boolean => d.languageId === 'python';
  const opened = vscode.workspace.onDidOpenTextDocument((d) => { if (isPython(d)) start(); });
  context.subscriptions.push(opened);
  if (vscode.workspace.textDocuments.some(isPython)) start();
}

/**
 * The extension's one log: a LogOutputChannel ("GPU Workbench" in the Output panel) behind a
 * tiny module so that features log without passing the channel around. Echoes to the console
 * when CI=true, so that end-to-end runs show it in the extension host's log.
 */
import * as vscode from 'vscode';

let channel: vscode.LogOutputChannel | undefined;
const echo = process.env.CI === 'true';

export function initLog(context: vscode.ExtensionContext): vscode.LogOutputChannel {
  channel = vscode.window.createOutputChannel('GPU Workbench', { log: true });
  context.subscriptions.push(channel);
  return channel;
}

function write(level: 'trace' | 'debug' | 'info' | 'warn' | 'error', message: string): void {
  channel?.[level](message);
  if (echo) console.log(`[GPU Workbench ${level}] ${message}`);
}

export const log = {
  trace: (m: string): void => write('trace', m),
  debug: (m: string): void => write('debug', m),
  info: (m: string): void => write('info', m),
  warn: (m: string): void => write('warn', m),
  error: (m: string): void => write('error', m),
};

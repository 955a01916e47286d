/**
 * A minimal LSP client for the server tests: spawns the built server on stdio and plays
 * VS Code's part (configuration requests, refreshes, incremental edits) over real JSON-RPC.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  CodeActionRequest,
  ConfigurationRequest,
  DiagnosticRefreshRequest,
  DidChangeTextDocumentNotification,
  DidCloseTextDocumentNotification,
  DidOpenTextDocumentNotification,
  DocumentDiagnosticRequest,
  ExitNotification,
  InitializedNotification,
  InitializeRequest,
  PublishDiagnosticsNotification,
  ShutdownRequest,
  createProtocolConnection,
  type ClientCapabilities,
  type CodeAction,
  type Diagnostic,
  type ProtocolConnection,
  type PublishDiagnosticsParams,
  type TextEdit,
} from 'vscode-languageserver-protocol/node';
import { repoRoot } from '../../paths';

const serverPath = join(repoRoot, 'out', 'src', 'server', 'server.js');

/** Resolves when `check` returns a value, polling every event; rejects at the deadline. */
export function waitFor<T>(what: string, check: () => T | undefined, ms = 10_000): Promise<T> {
  return new Promise((resolve, reject) => {
    const deadline = Date.now() + ms;
    const tick = () => {
      const v = check();
      if (v !== undefined) return resolve(v);
      if (Date.now() > deadline) return reject(new Error(`timed out waiting for ${what}`));
      setTimeout(tick, 10);
    };
    tick();
  });
}

export class Client {
  readonly published: PublishDiagnosticsParams[] = [];
  refreshes = 0;
  settings: unknown = { enabled: true, rules: {} };
  readonly configurationScopes: string[] = [];
  /** While set, configuration requests are answered only once it resolves (to hold a lint mid-way). */
  configurationGate: Promise<void> | undefined;
  configurationAnswers = 0;
  private constructor(readonly proc: ChildProcess, readonly rpc: ProtocolConnection) {}

  static async start(capabilities: ClientCapabilities, workspaceFolder?: string): Promise<Client> {
    const proc = spawn(process.execPath, [serverPath, '--stdio'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const rpc = createProtocolConnection(proc.stdout as NodeJS.ReadableStream, proc.stdin as NodeJS.WritableStream);
    const client = new Client(proc, rpc);
    rpc.onNotification(PublishDiagnosticsNotification.type, (p) => {
      client.published.push(p);
    });
    rpc.onRequest(ConfigurationRequest.type, async (p) => {
      for (const item of p.items) client.configurationScopes.push(item.scopeUri ?? '');
      if (client.configurationGate) await client.configurationGate;
      client.configurationAnswers++;
      return p.items.map(() => client.settings);
    });
    rpc.onRequest(DiagnosticRefreshRequest.type, () => {
      client.refreshes++;
    });
    rpc.listen();
    const folder = workspaceFolder ? [{ uri: pathToFileURL(workspaceFolder).href, name: 'ws' }] : null;
    const init = await rpc.sendRequest(InitializeRequest.type, { processId: process.pid, rootUri: folder?.[0].uri ?? null, capabilities, workspaceFolders: folder });
    assert.ok(init.capabilities.hoverProvider);
    await rpc.sendNotification(InitializedNotification.type, {});
    return client;
  }

  async open(uri: string, text: string, version = 1): Promise<void> {
    await this.rpc.sendNotification(DidOpenTextDocumentNotification.type, { textDocument: { uri, languageId: 'python', version, text } });
  }

  async close(uri: string): Promise<void> {
    await this.rpc.sendNotification(DidCloseTextDocumentNotification.type, { textDocument: { uri } });
  }

  async replace(uri: string, text: string, version: number): Promise<void> {
    await this.rpc.sendNotification(DidChangeTextDocumentNotification.type, { textDocument: { uri, version }, contentChanges: [{ text }] });
  }

  /** Applies a workspace edit's text edits as VS Code sends them: incremental changes, last first. */
  async edit(uri: string, edits: readonly TextEdit[], version: number): Promise<void> {
    const contentChanges = [...edits]
      .sort((a, b) => b.range.start.line - a.range.start.line || b.range.start.character - a.range.start.character)
      .map((e) => ({ range: e.range, text: e.newText }));
    await this.rpc.sendNotification(DidChangeTextDocumentNotification.type, { textDocument: { uri, version }, contentChanges });
  }

  /** Whether the server process is still running (it must survive any input). */
  get alive(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  async pull(uri: string): Promise<Diagnostic[]> {
    const report = await this.rpc.sendRequest(DocumentDiagnosticRequest.type, { textDocument: { uri } });
    assert.equal(report.kind, 'full');
    return 'items' in report ? report.items : [];
  }

  async actions(uri: string, diagnostics: Diagnostic[], only?: string[]): Promise<CodeAction[]> {
    const range = diagnostics[0]?.range ?? { start: { line: 0, character: 0 }, end: { line: 0, character: 0 } };
    const result = await this.rpc.sendRequest(CodeActionRequest.type, { textDocument: { uri }, range, context: { diagnostics, ...(only ? { only } : {}) } });
    return (result ?? []) as CodeAction[];
  }

  async stop(): Promise<void> {
    const exited = new Promise<void>((resolve) => this.proc.once('exit', () => resolve()));
    try {
      await this.rpc.sendRequest(ShutdownRequest.type);
      await this.rpc.sendNotification(ExitNotification.type);
    } catch {
      // already gone
    }
    await Promise.race([exited, new Promise((r) => setTimeout(r, 3000))]);
    this.proc.kill();
    this.rpc.dispose();
  }
}

export function editsOf(action: CodeAction, uri: string): TextEdit[] {
  return action.edit?.changes?.[uri] ?? [];
}

export const pullCapabilities: ClientCapabilities = {
  textDocument: { diagnostic: { dynamicRegistration: false }, hover: { contentFormat: ['markdown'] }, codeAction: { codeActionLiteralSupport: { codeActionKind: { valueSet: ['quickfix', 'source.fixAll'] } } } },
  workspace: { configuration: true, didChangeConfiguration: { dynamicRegistration: false } },
};

/**
 * The language server over real JSON-RPC, with no VS Code: spawn the built server on stdio,
 * play the client, and check what a user would see (squiggles, hovers, quick fixes).
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  CodeActionRequest,
  ConfigurationRequest,
  DidChangeConfigurationNotification,
  DidChangeTextDocumentNotification,
  DidOpenTextDocumentNotification,
  DocumentDiagnosticRequest,
  ExitNotification,
  HoverRequest,
  InitializedNotification,
  InitializeRequest,
  PublishDiagnosticsNotification,
  ShutdownRequest,
  DiagnosticRefreshRequest,
  createProtocolConnection,
  type ClientCapabilities,
  type CodeAction,
  type Diagnostic,
  type MarkupContent,
  type ProtocolConnection,
  type PublishDiagnosticsParams,
  type TextEdit,
} from 'vscode-languageserver-protocol/node';
import { applyEdits } from '../../../src/lint/fixes';
import { fixtures, repoRoot } from '../../paths';

const serverPath = join(repoRoot, 'out', 'src', 'server', 'server.js');
const leak = readFileSync(join(fixtures, 'lint', 'bad', 'total_loss.py'), 'utf8');

/** Resolves when `check` returns a value, polling every event; rejects at the deadline. */
function waitFor<T>(what: string, check: () => T | undefined, ms = 10_000): Promise<T> {
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

class Client {
  readonly published: PublishDiagnosticsParams[] = [];
  refreshes = 0;
  settings: unknown = { enabled: true, rules: {} };
  readonly configurationScopes: string[] = [];
  private constructor(readonly proc: ChildProcess, readonly rpc: ProtocolConnection) {}

  static async start(capabilities: ClientCapabilities, workspaceFolder?: string): Promise<Client> {
    const proc = spawn(process.execPath, [serverPath, '--stdio'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const rpc = createProtocolConnection(proc.stdout as NodeJS.ReadableStream, proc.stdin as NodeJS.WritableStream);
    const client = new Client(proc, rpc);
    rpc.onNotification(PublishDiagnosticsNotification.type, (p) => {
      client.published.push(p);
    });
    rpc.onRequest(ConfigurationRequest.type, (p) => {
      for (const item of p.items) client.configurationScopes.push(item.scopeUri ?? '');
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

  async replace(uri: string, text: string, version: number): Promise<void> {
    await this.rpc.sendNotification(DidChangeTextDocumentNotification.type, { textDocument: { uri, version }, contentChanges: [{ text }] });
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

function editsOf(action: CodeAction, uri: string): TextEdit[] {
  return action.edit?.changes?.[uri] ?? [];
}

const pullCapabilities: ClientCapabilities = {
  textDocument: { diagnostic: { dynamicRegistration: false }, hover: { contentFormat: ['markdown'] }, codeAction: { codeActionLiteralSupport: { codeActionKind: { valueSet: ['quickfix', 'source.fixAll'] } } } },
  workspace: { configuration: true, didChangeConfiguration: { dynamicRegistration: false } },
};

describe('language server over JSON-RPC', function () {
  this.timeout(30_000);
  let client: Client | undefined;
  afterEach(async () => {
    await client?.stop();
    client = undefined;
  });

  it('pushes debounced diagnostics to a client without pull support, and a quick fix clears them', async () => {
    client = await Client.start({});
    const c = client;
    const uri = 'file:///project/train.py';
    await c.open(uri, leak);
    const first = await waitFor('diagnostics', () => c.published.find((p) => p.uri === uri && p.diagnostics.length > 0));
    const [d] = first.diagnostics;
    assert.equal(d.code, 'accumulated-loss');
    assert.equal(d.range.start.line, 14);
    assert.equal(d.source, 'GPU Workbench');
    assert.equal(d.codeDescription?.href, 'https://github.com/gpu-workbench/gpu-workbench/blob/main/docs/rules/accumulated-loss.md');
    const [fix] = await c.actions(uri, [d]);
    assert.equal(fix.kind, 'quickfix');
    assert.equal(fix.isPreferred, true);
    const fixed = applyEdits(leak, editsOf(fix, uri));
    assert.match(fixed, /total_loss \+= loss\.item\(\)/);
    const before = c.published.length;
    await c.replace(uri, fixed, 2);
    await waitFor('cleared diagnostics', () => c.published.slice(before).find((p) => p.uri === uri && p.version === 2 && p.diagnostics.length === 0));
  });

  it('answers pull diagnostics, hovers with the memory effect and docs, and fix-all', async () => {
    client = await Client.start(pullCapabilities);
    const c = client;
    const uri = 'untitled:Untitled-1';
    const text = readFileSync(join(fixtures, 'lint', 'bad', 'eval_section.py'), 'utf8') + '\n' + leak.split('\n').slice(1).join('\n');
    await c.open(uri, text);
    const diags = await c.pull(uri);
    assert.deepEqual(diags.map((d) => d.code).sort(), ['accumulated-loss', 'missing-no-grad']);
    const ng = diags.find((d) => d.code === 'missing-no-grad') as Diagnostic;
    const hover = await c.rpc.sendRequest(HoverRequest.type, { textDocument: { uri }, position: ng.range.start });
    const markdown = (hover?.contents as MarkupContent).value;
    assert.match(markdown, /missing-no-grad/);
    assert.match(markdown, /activations/);
    assert.match(markdown, /\(https:\/\/github\.com\/gpu-workbench\/gpu-workbench\/blob\/main\/docs\/rules\/missing-no-grad\.md\)/);
    const [fixAll] = await c.actions(uri, [], ['source.fixAll.gpuWorkbench']);
    assert.equal(fixAll.kind, 'source.fixAll.gpuWorkbench');
    const fixed = applyEdits(text, editsOf(fixAll, uri));
    assert.match(fixed, /with torch\.no_grad\(\):\n {12}for x, y in holdout:\n {16}pred = model\(x\)/);
    await c.replace(uri, fixed, 2);
    assert.deepEqual(await c.pull(uri), []);
  });

  it('reads settings per document, and re-reads them when they change', async () => {
    client = await Client.start(pullCapabilities);
    const c = client;
    const uri = 'file:///project/a.py';
    c.settings = { enabled: true, rules: { 'accumulated-loss': 'error' } };
    await c.open(uri, leak);
    const [d] = await c.pull(uri);
    assert.equal(d.severity, 1);
    assert.ok(c.configurationScopes.includes(uri));
    c.settings = { enabled: true, rules: { 'accumulated-loss': 'off' } };
    const refreshes = c.refreshes;
    await c.rpc.sendNotification(DidChangeConfigurationNotification.type, { settings: null });
    await waitFor('a diagnostics refresh', () => (c.refreshes > refreshes ? true : undefined));
    assert.deepEqual(await c.pull(uri), []);
    c.settings = { enabled: false };
    await c.rpc.sendNotification(DidChangeConfigurationNotification.type, { settings: null });
    await waitFor('a second refresh', () => (c.refreshes > refreshes + 1 ? true : undefined));
    assert.deepEqual(await c.pull(uri), []);
  });

  it('survives binary and truncated input and keeps answering', async () => {
    client = await Client.start(pullCapabilities);
    const c = client;
    const junk = Array.from({ length: 4000 }, (_, i) => String.fromCharCode((i * 7919) % 0xd7ff)).join('');
    await c.open('file:///project/junk.py', junk);
    assert.deepEqual(await c.pull('file:///project/junk.py'), []);
    await c.open('file:///project/cut.py', leak.slice(0, leak.indexOf('loss.backward')));
    assert.ok(Array.isArray(await c.pull('file:///project/cut.py')));
    await c.open('file:///project/ok.py', leak);
    assert.equal((await c.pull('file:///project/ok.py')).length, 1);
  });

  it('indexes the workspace folder so a guard in a caller in another file counts', async () => {
    for (const [dir, expected] of [['guarded', []], ['unguarded', ['missing-no-grad', 'accumulated-loss']]] as const) {
      client = await Client.start(pullCapabilities, join(fixtures, 'lint', 'workspace', dir));
      const c = client;
      const path = join(fixtures, 'lint', 'workspace', dir, 'engine.py');
      const uri = pathToFileURL(path).href;
      // Wait until the background index of the folder is in (the server asks for a refresh).
      await waitFor('the workspace index', () => (c.refreshes > 0 ? true : undefined));
      await c.open(uri, readFileSync(path, 'utf8'));
      assert.deepEqual((await c.pull(uri)).map((d) => d.code), expected, dir);
      await c.stop();
      client = undefined;
    }
  });
});

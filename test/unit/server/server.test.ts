/**
 * The language server over real JSON-RPC, with no VS Code: spawn the built server on stdio,
 * play the client, and check what a user would see (squiggles, hovers, quick fixes).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { DidChangeConfigurationNotification, HoverRequest, type Diagnostic, type MarkupContent } from 'vscode-languageserver-protocol/node';
import { TextDocument } from 'vscode-languageserver-textdocument';
import { applyEdits } from '../../../src/lint/fixes';
import { walkPython } from '../../../src/lint/files';
import { createLinter } from '../../../src/lint/linter';
import { fixtures } from '../../paths';
import { Client, editsOf, pullCapabilities, waitFor } from './client';

const leak = readFileSync(join(fixtures, 'lint', 'bad', 'total_loss.py'), 'utf8');

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

  it('publishes nothing for a document closed while its push was still linting (no hints left for a closed file)', async () => {
    client = await Client.start({ workspace: { configuration: true } });
    const c = client;
    // The linter is ready: another document's push arrives.
    const other = 'file:///project/other.py';
    await c.open(other, leak);
    await waitFor('diagnostics of the other file', () => c.published.find((p) => p.uri === other && p.diagnostics.length > 0));
    // Hold the settings request of the next push: its lint waits for the answer.
    let release = (): void => undefined;
    c.configurationGate = new Promise<void>((r) => { release = r; });
    const uri = 'file:///project/closed.py';
    await c.open(uri, leak);
    await waitFor('the push to ask for its settings', () => (c.configurationScopes.includes(uri) ? true : undefined));
    await c.close(uri);
    await waitFor('the empty publish on close', () => (c.published.some((p) => p.uri === uri && p.diagnostics.length === 0) ? true : undefined));
    const answered = c.configurationAnswers;
    release();
    c.configurationGate = undefined;
    await waitFor('the settings answer to go out', () => (c.configurationAnswers > answered ? true : undefined));
    // The server handles messages in order, and the held lint finishes in the same turn as the
    // settings answer: by the time a later request is answered, any publish it made has arrived.
    await c.rpc.sendRequest(HoverRequest.type, { textDocument: { uri: other }, position: { line: 0, character: 0 } });
    const afterClose = c.published.slice(c.published.findIndex((p) => p.uri === uri && p.diagnostics.length === 0) + 1);
    assert.deepEqual(afterClose.filter((p) => p.uri === uri), [], 'no hints published for the closed file');
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

  it('puts squiggles and quick fixes on the editor\'s lines when line breaks are \\r, \\r\\n or mixed', async () => {
    client = await Client.start(pullCapabilities);
    const c = client;
    const lines = leak.split('\n');
    const variants: Record<string, string> = {
      cr: leak.replace(/\n/g, '\r'),
      crlf: leak.replace(/\n/g, '\r\n'),
      mixed: lines.map((l, i) => (i < lines.length - 1 ? l + ['\r', '\r\n', '\n'][i % 3] : l)).join(''),
    };
    for (const [name, text] of Object.entries(variants)) {
      const uri = `file:///project/${name}.py`;
      await c.open(uri, text);
      const [d, ...rest] = await c.pull(uri);
      assert.deepEqual(rest, [], name);
      // Where VS Code's own TextDocument puts `total_loss += loss` (line 15 of the file, 0-based 14).
      const doc = TextDocument.create(uri, 'python', 1, text);
      const at = text.indexOf('total_loss += loss');
      assert.deepEqual(d.range, { start: doc.positionAt(at), end: doc.positionAt(at + 'total_loss += loss'.length) }, name);
      assert.equal(d.range.start.line, 14, name);
      const [fix] = await c.actions(uri, [d]);
      const fixed = TextDocument.applyEdits(doc, editsOf(fix, uri));
      assert.equal(fixed, text.replace('total_loss += loss', 'total_loss += loss.item()'), name);
      // Typed in place (an incremental change over JSON-RPC): the squiggle goes away.
      await c.edit(uri, editsOf(fix, uri), 2);
      assert.deepEqual(await c.pull(uri), [], `${name} after the fix`);
    }
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

  it('says it skipped a document over gpuWorkbench.lint.maxFileSize, naming the size and the limit, and checks it once the limit is raised', async () => {
    client = await Client.start(pullCapabilities);
    const c = client;
    const uri = 'file:///project/big.py';
    c.settings = { enabled: true, rules: {}, maxFileSize: 1 };
    const text = `${leak}\n${'# padding\n'.repeat(200)}`;
    await c.open(uri, text);
    const [note, ...rest] = await c.pull(uri);
    assert.deepEqual(rest, []);
    assert.equal(note.code, 'file-skipped');
    assert.equal(note.severity, 3);
    assert.equal(note.range.start.line, 0);
    assert.match(note.message as string, new RegExp(`skipped this file: ${text.length.toLocaleString('en-US')} characters .*over the limit of 1,024 \\(1 KB\\); raise \`gpuWorkbench\\.lint\\.maxFileSize\``));
    c.settings = { enabled: true, rules: {}, maxFileSize: 2048 };
    const refreshes = c.refreshes;
    await c.rpc.sendNotification(DidChangeConfigurationNotification.type, { settings: null });
    await waitFor('a diagnostics refresh', () => (c.refreshes > refreshes ? true : undefined));
    assert.deepEqual((await c.pull(uri)).map((d) => d.code), ['accumulated-loss']);
  });

  describe('a large document', () => {
    // ~3,000 lines of the fixture corpus: linting it takes far longer than one slice of the server's
    // asynchronous lint, so a request that arrives meanwhile is answered between its slices.
    const big = (() => {
      const files: string[] = [];
      walkPython(join(fixtures, 'lint'), files);
      const texts = files.filter((f) => !f.includes('malformed')).sort().map((f) => readFileSync(f, 'utf8'));
      let out = '';
      for (let i = 0; out.split('\n').length < 3000; i++) out += `${texts[i % texts.length]}\n`;
      return out;
    })();
    // Without `workspace/configuration` the server starts a lint as soon as a pull arrives (no
    // settings round trip first), so the requests below reach it while that lint is under way.
    const noConfiguration = { textDocument: pullCapabilities.textDocument };

    it('answers another request while it is being linted, and its pull gets the same findings as a lint in one go', async () => {
      client = await Client.start(noConfiguration);
      const c = client;
      const small = 'file:///project/small.py';
      await c.open(small, leak);
      assert.deepEqual((await c.pull(small)).map((d) => d.code), ['accumulated-loss']);
      const uri = 'file:///project/big.py';
      await c.open(uri, big);
      const answered: string[] = [];
      const pulled = c.pull(uri).then((d) => {
        answered.push('pull of the large document');
        return d;
      });
      const hover = c.rpc.sendRequest(HoverRequest.type, { textDocument: { uri: small }, position: { line: 14, character: 8 } }).then((h) => {
        answered.push('hover on the small one');
        return h;
      });
      const [diagnostics, hovered] = await Promise.all([pulled, hover]);
      assert.deepEqual(answered, ['hover on the small one', 'pull of the large document'], 'the hover waited for the whole lint of the large document');
      assert.match((hovered?.contents as MarkupContent).value, /accumulated-loss/);
      const linter = await createLinter({ incremental: true });
      const expected = linter.lintFile('/project/big.py', big).map((f) => `${f.range.start.line}:${f.range.start.character} ${f.ruleId}`);
      linter.dispose();
      assert.ok(expected.length > 20, `the large document has findings (${expected.length})`);
      assert.deepEqual(diagnostics.map((d) => `${d.range.start.line}:${d.range.start.character} ${d.code}`), expected);
    });
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

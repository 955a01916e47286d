/**
 * Every rule over real JSON-RPC, as issue #3 asks: spawn the built server, open a hazard
 * from the fixture corpus, pull its diagnostics, ask for the quick fix, apply the edit the
 * way VS Code does (incremental changes), and see the diagnostic gone. Then what the server
 * must survive: parse errors, a 5,000-line file, binary input.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { HoverRequest, type Diagnostic, type MarkupContent, type TextEdit } from 'vscode-languageserver-protocol/node';
import { applyEdits } from '../../../src/lint/fixes';
import { rules } from '../../../src/lint/linter';
import { fixtures, repoRoot } from '../../paths';
import { expectations } from '../lint/corpus';
import { Client, editsOf, pullCapabilities } from './client';

/** One hazard fixture per rule id; the table must name every rule the engine has. */
const roundTrips: Readonly<Record<string, string>> = {
  'accumulated-loss': 'total_loss.py',
  'missing-no-grad': 'eval_section.py',
  'sampler-shuffle': 'sampler_shuffle.py',
  'missing-set-epoch': 'set_epoch_missing.py',
  'data-parallel': 'data_parallel.py',
  'empty-cache-in-loop': 'empty_cache.py',
  'model-to-device-in-loop': 'model_to_device_loop.py',
  'tensors-kept-for-logging': 'eval_outputs_kept.py',
  'carried-hidden-state': 'rnn_lm_hidden.py',
  'volatile-variable': 'volatile.py',
};

const keyOf = (d: Diagnostic): string => `${d.range.start.line + 1}:${String(d.code)}`;
const countOf = (ds: readonly Diagnostic[], rule: string): number => ds.filter((d) => d.code === rule).length;

/**
 * A deadline for an answer: generous (a loaded 2-core CI machine), so that it only fails
 * when the server hangs or stalls for seconds, never on ordinary jitter. Speed is measured
 * in bench/lint, not here.
 */
async function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

describe('language server over JSON-RPC: every rule, and what it must survive', function () {
  this.timeout(60_000);
  let client: Client;
  before(async () => {
    client = await Client.start(pullCapabilities);
  });
  after(async () => {
    await client.stop();
  });

  describe('a quick-fix round trip for every rule', () => {
    it('has a round trip for each rule id the engine registers', () => {
      assert.deepEqual(Object.keys(roundTrips).sort(), rules.map((r) => r.id).sort());
    });

    for (const [rule, name] of Object.entries(roundTrips)) {
      it(`${rule} (${name})`, async () => {
        const path = join(fixtures, 'lint', 'bad', name);
        const text = readFileSync(path, 'utf8');
        const uri = pathToFileURL(path).href;
        await client.open(uri, text);
        const before = await client.pull(uri);
        // The squiggles are exactly the corpus's `# expect:` lines, as the engine reports them.
        assert.deepEqual(before.map(keyOf).sort(), expectations(text));
        const d = before.find((x) => x.code === rule);
        assert.ok(d, `no ${rule} diagnostic`);
        assert.equal(d.source, 'GPU Workbench');
        assert.ok(d.codeDescription?.href.endsWith(`/docs/rules/${rule}.md`), d.codeDescription?.href);
        const hover = await client.rpc.sendRequest(HoverRequest.type, { textDocument: { uri }, position: d.range.start });
        assert.match((hover?.contents as MarkupContent).value, new RegExp(`\\[Read more about ${rule}\\]`));

        const quickFixes = (await client.actions(uri, [d])).filter((a) => a.kind === 'quickfix');
        let edits: TextEdit[];
        if (rule === 'data-parallel') {
          // Advice only: no mechanical rewrite is offered; the user's move to DDP clears it.
          assert.deepEqual(quickFixes, []);
          const call = text.split('\n')[d.range.start.line].indexOf('nn.DataParallel');
          assert.ok(call >= 0);
          edits = [{ range: { start: { line: d.range.start.line, character: call }, end: { line: d.range.start.line, character: call + 'nn.DataParallel'.length } }, newText: 'nn.parallel.DistributedDataParallel' }];
        } else {
          const fix = quickFixes.find((a) => a.isPreferred);
          assert.ok(fix, `no preferred quick fix for ${rule}: ${JSON.stringify(quickFixes)}`);
          assert.deepEqual(fix.diagnostics, [d]);
          edits = editsOf(fix, uri);
          assert.ok(edits.length > 0);
          // With one hazard in the file, the quick fix over the wire is the reviewed fixed text.
          if (before.length === 1) assert.equal(applyEdits(text, edits), readFileSync(path.replace(/\.py$/, '.fixed.py'), 'utf8'));
        }
        await client.edit(uri, edits, 2);
        const after = await client.pull(uri);
        assert.equal(countOf(after, rule), countOf(before, rule) - 1, `after the fix: ${after.map(keyOf).join(', ')}`);
        for (const other of new Set(after.map((x) => String(x.code)))) {
          if (other !== rule) assert.ok(countOf(after, other) <= countOf(before, other), `the fix for ${rule} caused ${other}`);
        }
      });
    }
  });

  describe('what it must survive', () => {
    it('reports no finding for a parse error, and still reports a hazard next to one', async () => {
      const broken = 'import torch\n\ndef train(model, loader, opt\n    for x in loader:\n        loss = model(x).sum(\n';
      await client.open('file:///project/broken.py', broken);
      assert.deepEqual(await client.pull('file:///project/broken.py'), []);
      const malformedGood = readFileSync(join(fixtures, 'lint', 'good', 'malformed.py'), 'utf8');
      await client.open('file:///project/malformed.py', malformedGood);
      assert.deepEqual(await client.pull('file:///project/malformed.py'), []);
      const malformedBad = readFileSync(join(fixtures, 'lint', 'bad', 'malformed_hazard.py'), 'utf8');
      await client.open('file:///project/malformed_hazard.py', malformedBad);
      assert.deepEqual((await client.pull('file:///project/malformed_hazard.py')).map(keyOf), expectations(malformedBad));
    });

    it('answers on a 5,000-line file, before and after an edit, within its deadline', async () => {
      // 250 copies of a 20-line training function, each with one accumulated loss.
      const unit = (i: number) =>
        [
          `def train_${i}(model, loader, optimizer, criterion):`,
          '    model.train()',
          '    total = 0',
          '    seen = 0',
          '    for x, y in loader:',
          '        x = x.cuda(non_blocking=True)',
          '        y = y.cuda(non_blocking=True)',
          '        optimizer.zero_grad()',
          '        out = model(x)',
          '        loss = criterion(out, y)',
          '        loss.backward()',
          '        optimizer.step()',
          '        total += loss',
          '        seen += x.size(0)',
          '        if seen % 1000 == 0:',
          '            print(seen)',
          '    print("done")',
          '    return total / max(seen, 1)',
          '',
          '',
        ].join('\n');
      const copies = 250;
      const text = ['import torch', '', ...Array.from({ length: copies }, (_, i) => unit(i))].join('\n');
      assert.ok(text.split('\n').length >= 5000);
      const uri = 'file:///project/big.py';
      await client.open(uri, text);
      const first = await within(10_000, 'pull on a 5,000-line file', client.pull(uri));
      assert.equal(countOf(first, 'accumulated-loss'), copies);
      // The user fixes one leak in the middle of the file: one incremental change.
      const line = first.filter((d) => d.code === 'accumulated-loss')[copies / 2].range.start.line;
      await client.edit(uri, [{ range: { start: { line, character: 21 }, end: { line, character: 21 } }, newText: '.item()' }], 2);
      const second = await within(10_000, 'pull after an edit', client.pull(uri));
      assert.equal(countOf(second, 'accumulated-loss'), copies - 1);
      assert.ok(!second.some((d) => d.range.start.line === line));
    });

    it('survives binary and truncated input (a wasm file, NUL bytes, random bytes, a file cut mid-loop) and keeps answering', async () => {
      const leak = readFileSync(join(fixtures, 'lint', 'bad', 'total_loss.py'), 'utf8');
      const wasm = readFileSync(join(repoRoot, 'node_modules', 'tree-sitter-python', 'tree-sitter-python.wasm'));
      // A seeded byte stream, so a failure can be replayed.
      let seed = 0x9e3779b9;
      const random = Buffer.from(Array.from({ length: 64 * 1024 }, () => {
        seed = (seed * 1103515245 + 12345) >>> 0;
        return seed >>> 24;
      }));
      const inputs: [string, string][] = [
        ['wasm-utf8', wasm.toString('utf8')],
        ['wasm-latin1', wasm.toString('latin1')],
        ['nul', 'import torch\n\0\0\0def f(:\n\0'],
        ['random', random.toString('latin1')],
        ['torch-then-binary', `import torch\n${random.subarray(0, 4096).toString('utf8')}`],
        ['cut', leak.slice(0, leak.indexOf('loss.backward'))],
        ['lone-surrogates', `import torch\n${Array.from({ length: 4000 }, (_, i) => String.fromCharCode((i * 7919) % 0xffff)).join('')}`],
      ];
      for (const [name, text] of inputs) {
        const uri = `file:///project/${name}.py`;
        await client.open(uri, text);
        // Not Python: nothing to report, and no seconds-long parse of binary (it took 5 s on the wasm).
        assert.deepEqual(await within(3_000, name, client.pull(uri)), [], name);
        assert.ok(client.alive, `the server died on ${name}`);
      }
      await client.open('file:///project/after.py', leak);
      assert.deepEqual((await client.pull('file:///project/after.py')).map(keyOf), expectations(leak));
    });
  });
});

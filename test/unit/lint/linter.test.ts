import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLinter, defaultLimits, oversize, oversizeAfterEdit, type Linter } from '../../../src/lint/linter';
import { locateWasm } from '../../../src/lint/parser';
import { repoRoot } from '../../paths';
import { keyOf, lintFixtures, readFixtures } from './corpus';
import { mulberry32 } from '../../../src/common/random';
import type { Rule } from '../../../src/lint/rule';


const hazard = `import torch

def train(model, loader, optimizer, criterion):
    total = 0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss
    return total
`;

describe('Linter', () => {
  let linter: Linter;
  before(async () => {
    linter = await createLinter({ incremental: true });
  });
  after(() => linter.dispose());

  it('gives each finding its id, severity, docs link, explanation and a 0-based range', () => {
    const [f] = linter.lintFile('/ws/a.py', hazard);
    assert.equal(f.ruleId, 'accumulated-loss');
    assert.equal(f.severity, 'warning');
    assert.equal(f.docsUrl, 'https://github.com/gpu-workbench/gpu-workbench/blob/main/docs/rules/accumulated-loss.md');
    assert.match(f.explanation, /graph/);
    assert.deepEqual(f.range, { start: { line: 8, character: 8 }, end: { line: 8, character: 21 } });
  });

  it('applies severity overrides, turns rules off, and honours enabled=false and select', () => {
    assert.equal(linter.lintFile('/ws/a.py', hazard, { rules: { 'accumulated-loss': 'error' } })[0].severity, 'error');
    assert.deepEqual(linter.lintFile('/ws/a.py', hazard, { rules: { 'accumulated-loss': 'off' } }), []);
    assert.deepEqual(linter.lintFile('/ws/a.py', hazard, { enabled: false }), []);
    assert.deepEqual(linter.lintFile('/ws/a.py', hazard, { select: ['missing-no-grad'] }), []);
  });

  it('honours # noqa with the rule id, and a bare # noqa, but not another id', () => {
    const withNoqa = (comment: string) => hazard.replace('total += loss', `total += loss  ${comment}`);
    assert.equal(linter.lintFile('/ws/n.py', withNoqa('# noqa: accumulated-loss')).length, 0);
    assert.equal(linter.lintFile('/ws/n.py', withNoqa('# noqa')).length, 0);
    assert.equal(linter.lintFile('/ws/n.py', withNoqa('# noqa: E501, accumulated-loss')).length, 0);
    assert.equal(linter.lintFile('/ws/n.py', withNoqa('# noqa: missing-no-grad')).length, 1);
  });

  it('lets every rule be switched off, selected alone, or silenced with # noqa on its line', function () {
    this.timeout(60_000); // lints the hazard corpus four times per rule
    const bad = readFixtures(join(lintFixtures, 'bad'), (n) => !n.endsWith('.fixed.py') && !n.startsWith('malformed'));
    const seen = new Set<string>();
    for (const f of bad) {
      const findings = linter.lintFile(f.path, f.text);
      for (const id of new Set(findings.map((x) => x.ruleId))) {
        seen.add(id);
        const others = findings.filter((x) => x.ruleId !== id).map(keyOf);
        assert.deepEqual(linter.lintFile(f.path, f.text, { rules: { [id]: 'off' } }).map(keyOf), others, `${f.name}: ${id} off`);
        assert.deepEqual(linter.lintFile(f.path, f.text, { select: [id] }).map((x) => x.ruleId), findings.filter((x) => x.ruleId === id).map((x) => x.ruleId), `${f.name}: --select ${id}`);
        const lines = f.text.split('\n');
        for (const x of findings.filter((y) => y.ruleId === id)) lines[x.range.start.line] = lines[x.range.start.line].replace(/\s*# expect:.*$/, '') + `  # noqa: ${id}`;
        assert.deepEqual(linter.lintFile(`${f.path}#noqa`, lines.join('\n')).map(keyOf), others, `${f.name}: # noqa: ${id}`);
      }
    }
    assert.deepEqual([...seen].sort(), linter.rules.map((r) => r.id).sort());
  });

  it('reports nothing for a file that does not import torch', () => {
    assert.deepEqual(linter.lintFile('/ws/plain.py', hazard.replace('import torch', 'import numpy')), []);
  });

  it('counts \\r\\n, \\n and a lone \\r as line breaks, as Python and the editor do', () => {
    const lines = hazard.split('\n');
    const joined = (breaks: string[]) => lines.map((l, i) => (i < lines.length - 1 ? l + breaks[i % breaks.length] : l)).join('');
    const at9 = { start: { line: 8, character: 8 }, end: { line: 8, character: 21 } };
    for (const breaks of [['\r'], ['\r\n'], ['\n', '\r', '\r\n'], ['\r', '\r\n', '\n']]) {
      const text = joined(breaks);
      assert.deepEqual(linter.lintFile('/ws/breaks.py', text).map((f) => f.range), [at9], JSON.stringify(breaks));
      assert.deepEqual(linter.lintFile('/ws/breaks.py', text.replace('total += loss', 'total += loss  # noqa')), [], `# noqa with ${JSON.stringify(breaks)}`);
    }
    // The report's case: one `\r\r` after the first line put the finding on line 7 instead of 9.
    assert.deepEqual(linter.lintFile('/ws/crcr.py', hazard.replace('\n\n', '\r\r')).map((f) => f.range), [at9]);
    // Edited in place (the server's incremental path): lines typed above with `\r` move the finding down.
    const cr = joined(['\r']);
    linter.lintFile('/ws/typed.py', cr);
    const typed = cr.replace('def train', '# a\r# b\rdef train');
    assert.deepEqual(linter.lintFile('/ws/typed.py', typed).map((f) => f.range.start), [{ line: 10, character: 8 }]);
  });

  it('fixes files with \\r or \\r\\n line breaks at the right place and keeps their line breaks', () => {
    const text = readFileSync(join(lintFixtures, 'bad', 'eval_section.py'), 'utf8');
    const fixed = readFileSync(join(lintFixtures, 'bad', 'eval_section.fixed.py'), 'utf8');
    assert.equal(linter.fixFile('/ws/fix-lf.py', text), fixed);
    for (const eol of ['\r', '\r\n']) {
      assert.equal(linter.fixFile(`/ws/fix${JSON.stringify(eol)}.py`, text.replace(/\n/g, eol)), fixed.replace(/\n/g, eol), JSON.stringify(eol));
    }
  });

  it('re-parses incrementally to the same findings as a fresh parse, edit after edit', async function () {
    // 150 edits, each linted twice: a deadline for a loaded machine, not a speed check (that is bench/lint).
    this.timeout(60_000);
    const fresh = await createLinter();
    // Its own workspace: the shared linter holds the fixtures other tests linted, whose functions
    // and classes are facts across files (a method `pi` defined there) that `fresh` does not have.
    const edited = await createLinter({ incremental: true });
    try {
      const random = mulberry32(7);
      const corpus = readFixtures(join(lintFixtures, 'bad'), (n) => !n.endsWith('.fixed.py'));
      let text = corpus[0].text;
      const pieces = corpus.map((c) => c.text);
      for (let i = 0; i < 150; i++) {
        const at = Math.floor(random() * (text.length + 1));
        const len = Math.floor(random() * 12);
        const donor = pieces[Math.floor(random() * pieces.length)];
        const from = Math.floor(random() * donor.length);
        const insert = random() < 0.5 ? donor.slice(from, from + Math.floor(random() * 40)) : '';
        text = text.slice(0, at) + insert + text.slice(at + len);
        if (i % 10 === 0) text = pieces[Math.floor(random() * pieces.length)];
        const incremental = edited.lintFile('/ws/edited.py', text).map((f) => `${keyOf(f)} ${f.range.start.character}`);
        const reference = fresh.lintFile(`/ws/fresh${i}.py`, text).map((f) => `${keyOf(f)} ${f.range.start.character}`);
        assert.deepEqual(incremental, reference, `after edit ${i}`);
        fresh.removeFile(`/ws/fresh${i}.py`);
      }
    } finally {
      fresh.dispose();
      edited.dispose();
    }
  });

  it('never throws on truncated, mutated or binary input (2,000 seeded cases)', async function () {
    this.timeout(120_000);
    const random = mulberry32(42);
    const corpus = [...readFixtures(join(lintFixtures, 'good')), ...readFixtures(join(lintFixtures, 'bad'))].map((f) => f.text);
    const errors: string[] = [];
    const robust = await createLinter({ onError: (p, e) => errors.push(`${p}: ${String(e)}`) });
    const noise = '()[]{}:=+.,\'"\\#\n\t    @lambda def class for with torch.no_grad() .backward() += loss model( \u00e9\u{1F600}\0';
    for (let i = 0; i < 2000; i++) {
      const base = corpus[i % corpus.length];
      let text: string;
      switch (i % 4) {
        case 0:
          text = base.slice(0, Math.floor(random() * base.length));
          break;
        case 1: {
          const chars = [...base];
          for (let k = 0; k < 1 + Math.floor(random() * 20); k++) chars[Math.floor(random() * chars.length)] = noise[Math.floor(random() * noise.length)];
          text = chars.join('');
          break;
        }
        case 2:
          text = Array.from({ length: 200 + Math.floor(random() * 2000) }, () => String.fromCharCode(Math.floor(random() * 0x3000))).join('');
          break;
        default:
          text = `import torch\n${'('.repeat(500 + Math.floor(random() * 3000))}loss${')'.repeat(Math.floor(random() * 10))}\n` + base;
      }
      const findings = robust.lintFile(`/fuzz/${i % 50}.py`, text);
      assert.ok(Array.isArray(findings));
    }
    robust.dispose();
    assert.deepEqual(errors, []);
  });

  it('finds the wasm files beside the bundle first, then in node_modules', () => {
    const dist = mkdtempSync(join(tmpdir(), 'gpuwb-dist-'));
    try {
      copyFileSync(join(repoRoot, 'node_modules', 'tree-sitter-python', 'tree-sitter-python.wasm'), join(dist, 'tree-sitter-python.wasm'));
      assert.equal(locateWasm('tree-sitter-python.wasm', 'tree-sitter-python', dist), join(dist, 'tree-sitter-python.wasm'));
      assert.equal(locateWasm('web-tree-sitter.wasm', 'web-tree-sitter', join(repoRoot, 'out', 'src', 'lint')), join(repoRoot, 'node_modules', 'web-tree-sitter', 'web-tree-sitter.wasm'));
      assert.throws(() => locateWasm('nope.wasm', 'nope', dist), /cannot find nope\.wasm/);
    } finally {
      rmSync(dist, { recursive: true, force: true });
    }
  });
});

describe('Linter size limits and ranges', () => {
  it('skips a file over the size, line-length or nesting limits and says why, naming the size and the limit', async () => {
    const errors: unknown[] = [];
    const l = await createLinter({ incremental: true, limits: { maxChars: 8000, maxLineChars: 300, maxDepth: 60 }, onError: (_, e) => errors.push(e) });
    try {
      const cases: [string, string, RegExp][] = [
        ['/big.py', `${hazard}${'# padding\n'.repeat(800)}`, /^8,\d{3} characters \(0\.0 MB\), over the limit of 8,000 \(8 KB\)$/],
        ['/line.py', `${hazard}x = [${'1, '.repeat(120)}]\n`, /^line 11 has 366 characters, over the limit of 300 per line \(generated data, not code to lint\)$/],
        ['/indent.py', `import torch\n${Array.from({ length: 102 }, (_, i) => `${'\t'.repeat(i)}if x:\n`).join('')}${'\t'.repeat(102)}pass\n`, /^line 103 is indented more than 100 levels deep, which CPython refuses/],
        ['/brackets.py', `${hazard}x = ${'('.repeat(80)}loss${')'.repeat(80)}\n`, /^the statement on line 11 nests \d+ levels deep, over the limit of 60/],
      ];
      for (const [path, text, why] of cases) {
        assert.deepEqual(l.lintFile(path, text), [], path);
        assert.match(l.skipReason(path) ?? '', why, path);
        assert.equal(l.hasFile(path), false, path);
        // Within the limits again (an edit took the excess out): analysed, and no longer skipped.
        assert.equal(l.lintFile(path, hazard).length, 1, path);
        assert.equal(l.skipReason(path), undefined, path);
      }
      // Lowering a limit skips a file already indexed; raising it lets the next lint check it.
      l.setLimits({ maxChars: 100 });
      assert.match(l.skipReason('/big.py') ?? '', /over the limit of 100 \(0 KB\)/);
      assert.deepEqual(l.lintFile('/big.py', hazard), []);
      l.setLimits({ maxChars: 8000 });
      assert.equal(l.lintFile('/big.py', hazard).length, 1);
      assert.deepEqual(errors, []);
    } finally {
      l.dispose();
    }
  });

  it('skips a file an edit makes too long in a line or too deeply indented, reading only the edited lines, with the whole-text check\'s reason', async () => {
    const limits = { ...defaultLimits, maxLineChars: 60 };
    const r = mulberry32(23);
    const pieces = ['x', '\n', '\t', ' '.repeat(30), '\t'.repeat(13), `\n${' '.repeat(101)}y`, 'z'.repeat(70), '    ', '\r\n'];
    let text = readFixtures(join(lintFixtures, 'bad'), (n) => !n.endsWith('.fixed.py')).slice(0, 6).map((f) => f.text.replace(/^.{61,}$/gm, '')).join('\n');
    let checked = 0;
    for (let i = 0; i < 400; i++) {
      const at = Math.floor(r() * (text.length + 1));
      const next = r() < 0.6 ? text.slice(0, at) + pieces[Math.floor(r() * pieces.length)] + text.slice(at) : text.slice(0, at) + text.slice(at + 1 + Math.floor(r() * 80));
      const whole = oversize(next, limits);
      assert.equal(oversizeAfterEdit(text, next, limits).why, whole, `edit ${i + 1}`);
      checked++;
      // Only from a text within the limits and without deep indentation, as the linter asks it.
      if (whole === undefined && !/(?:^|\n)(?:[ \f]{101}|(?:[ \f]*\t){13})/.test(next)) text = next;
    }
    assert.equal(checked, 400);
    const l = await createLinter({ incremental: true, limits: { maxLineChars: 300 } });
    try {
      assert.equal(l.lintFile('/edited.py', hazard).length, 1);
      const long = hazard.replace('import torch', `import torch${' '.repeat(300)}`);
      assert.deepEqual(l.lintFile('/edited.py', long), []);
      assert.match(l.skipReason('/edited.py') ?? '', /^line 1 has 312 characters, over the limit of 300 per line/);
      assert.equal(l.lintFile('/edited.py', hazard).length, 1);
      const deep = `${hazard}${Array.from({ length: 102 }, (_, i) => `${'\t'.repeat(i)}if x:\n`).join('')}${'\t'.repeat(102)}pass\n`;
      assert.equal(l.lintFile('/edited.py', `${hazard}x = 1\n`).length, 1);
      assert.deepEqual(l.lintFile('/edited.py', deep), []);
      assert.match(l.skipReason('/edited.py') ?? '', /is indented more than 100 levels deep/);
    } finally {
      l.dispose();
    }
  });

  it('clamps a range a rule puts outside the document to the text, and reports it as an internal error', async () => {
    const errors: string[] = [];
    const l = await createLinter({ onError: (_, e) => errors.push(e instanceof Error ? e.message : String(e)) });
    try {
      const outside: Rule = {
        id: 'outside',
        defaultSeverity: 'warning',
        summary: '',
        explanation: '',
        docsUrl: '',
        check: (model) => (model.focus === model.root.children[0] ? [{ message: 'm', range: { start: { line: 2, character: 40 }, end: { line: 99, character: 3 } }, fixes: [{ title: 't', edits: [{ range: { start: { line: 0, character: 12 }, end: { line: 0, character: 80 } }, newText: '' }] }] }] : []),
      };
      (l as unknown as { rules: Rule[] }).rules = [outside];
      const text = 'import torch\r\n\r\ndef train(model):\r\n    return model\r\n';
      const [f] = l.lintFile('/outside.py', text);
      // Lines as the editor counts them: 'def train(model):' has 17 characters, the last line is line 4 (empty).
      assert.deepEqual(f.range, { start: { line: 2, character: 17 }, end: { line: 4, character: 0 } });
      assert.deepEqual(f.fixes[0].edits[0].range, { start: { line: 0, character: 12 }, end: { line: 0, character: 12 } });
      assert.equal(errors.length, 3);
      assert.match(errors[0], /^outside gave a range outside the document \(2:40 in 5 lines, that line has 17 characters\); clamped$/);
    } finally {
      l.dispose();
    }
  });

  describe('lintFileAsync (the language server\'s lint, which gives way to other requests)', () => {
    // Fixture code concatenated to ~2,000 lines: many slices of analysis at a 1 ms slice.
    const big = (): string => {
      let out = '';
      const texts = [...readFixtures(join(lintFixtures, 'bad'), (n) => !n.startsWith('malformed')), ...readFixtures(join(lintFixtures, 'good'))].map((f) => f.text);
      for (let i = 0; out.split('\n').length < 2000; i++) out += `${texts[i % texts.length]}\n`;
      return out;
    };
    const shown = (fs: readonly { ruleId: string; range: { start: { line: number; character: number } }; message: string }[] | undefined): string[] | undefined =>
      fs?.map((f) => `${f.range.start.line}:${f.range.start.character} ${f.ruleId} ${f.message}`);

    it('pauses between statements and gives the same findings as a lint in one go', async () => {
      const text = big();
      const sync = await createLinter();
      const l = await createLinter({ incremental: true });
      try {
        let pauses = 0;
        const found = await l.lintFileAsync('/big.py', text, {}, () => (pauses++, false), 1);
        assert.ok(pauses > 1, `it paused (${pauses} times)`);
        const expected = shown(sync.lintFile('/big.py', text));
        assert.ok((expected?.length ?? 0) > 10);
        assert.deepEqual(shown(found), expected);
      } finally {
        sync.dispose();
        l.dispose();
      }
    });

    it('stops when cancelled or when the file changes during a pause, and the next lint is right', async () => {
      const text = big();
      const l = await createLinter({ incremental: true });
      const fresh = await createLinter();
      try {
        // Cancelled at its first pause: no findings; the statements it analysed stay cached and the next lint completes them.
        assert.equal(await l.lintFileAsync('/big.py', text, {}, () => true, 1), undefined);
        assert.deepEqual(shown(await l.lintFileAsync('/big.py', undefined, {}, () => false, 1)), shown(fresh.lintFile('/big.py', text)));
        // An edit arrives while it is paused (the editor's next keystroke): that lint stops, the next one sees the edit.
        const edited = `${text}\n${hazard.replace('def train', 'def train_more')}`;
        let edits = 0;
        const stale = await l.lintFileAsync('/edited.py', text, {}, () => {
          if (edits++ === 0) l.setFile('/edited.py', edited);
          return false;
        }, 1);
        assert.equal(stale, undefined, 'a lint of the text before the edit gave findings');
        assert.deepEqual(shown(l.lintFile('/edited.py')), shown(fresh.lintFile('/edited.py', edited)));
        // Another file set during the pause changes what this one's findings may depend on: it stops too.
        let others = 0;
        const other = await l.lintFileAsync('/third.py', text, {}, () => {
          if (others++ === 0) l.setFile('/other.py', hazard);
          return false;
        }, 1);
        assert.equal(other, undefined);
      } finally {
        l.dispose();
        fresh.dispose();
      }
    });
  });
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { createLinter } from '../../../src/lint/linter';

interface Probe {
  base: number;
  afterTyping: number;
  afterEdits: number;
  afterCloses: number;
  afterAll: number;
  docBytes: number;
  keystrokes: number;
  edits: number;
  closes: number;
  index: { files: number; functions: number; classes: number; sites: number };
}

const mib = (n: number): string => `${(n / 2 ** 20).toFixed(1)} MiB`;

describe('lint engine memory (the language server while a user types)', function () {
  this.timeout(180_000);

  it('forgets what a removed file defined: the index is empty once every file is removed', async () => {
    const linter = await createLinter({ incremental: true });
    try {
      for (let f = 0; f < 400; f++) {
        const text = `import torch\n\ndef function_number_${f}(x):\n    return x\n\nclass ClassNumber${f}:\n    def method_${f}(self):\n        call_number_${f}(self)\n`;
        linter.lintFile(`/ws/f${f}.py`, text);
        // Changed: the old names go, the new ones come.
        linter.lintFile(`/ws/f${f}.py`, text.replace(/_number_/g, '_renamed_'));
      }
      const full = linter.indexSize();
      assert.deepEqual(full, { files: 400, functions: 800, classes: 400, sites: 400 }, 'one name per definition and call, none left from before the change');
      for (let f = 0; f < 400; f++) linter.removeFile(`/ws/f${f}.py`);
      assert.deepEqual(linter.indexSize(), { files: 0, functions: 0, classes: 0, sites: 0 });
    } finally {
      linter.dispose();
    }
  });

  it('returns the heap to its level after many keystrokes, edits and closed documents', () => {
    const probe = join(__dirname, 'memoryProbe.js');
    const r = spawnSync(process.execPath, ['--expose-gc', probe, '200', '300'], { encoding: 'utf8', timeout: 170_000 });
    assert.equal(r.status, 0, r.stderr);
    const p = JSON.parse(r.stdout) as Probe;
    const seen = `live heap after GC: base ${mib(p.base)}, after ${p.keystrokes} keystrokes ${mib(p.afterTyping)}, after ${p.edits} edits ${mib(p.afterEdits)}, after ${p.closes} closed documents ${mib(p.afterCloses)}, all removed ${mib(p.afterAll)} (document ${(p.docBytes / 1024).toFixed(0)} KiB)`;
    // Keeping each version of the text would cost a document per keystroke or edit: 16 MiB for
    // 200 keystrokes, more than the baseline. A quarter of the baseline is a generous bound for
    // caches that legitimately fill up.
    assert.ok(p.afterTyping - p.base < p.base / 4, `typing kept memory: ${seen}`);
    assert.ok(p.afterEdits - p.base < p.base / 4, `editing kept memory: ${seen}`);
    assert.ok(p.afterCloses - p.base < p.base / 4, `closed documents kept memory: ${seen}`);
    assert.ok((p.afterTyping - p.base) / p.keystrokes < p.docBytes / 20, `more than 5% of the document kept per keystroke: ${seen}`);
    assert.ok(p.afterAll < p.base, `removing every file did not go below the level with the document open: ${seen}`);
    assert.deepEqual(p.index, { files: 0, functions: 0, classes: 0, sites: 0 });
  });
});

/**
 * Seeded mutations of the real-code fixtures, each given to the incremental linter the way
 * the language server gives an edit (bench/lint/fuzz.ts runs the same with 100,000 and times
 * them). After every step: nothing thrown, no rule's internal error, every range (a finding's
 * and its fixes') inside the current text; after each chain, the same findings as a linter
 * that analyses the last text from scratch. No timing here: the bench measures cost.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { createLinter, type Linter } from '../../../src/lint/linter';
import type { Finding } from '../../../src/lint/types';
import { mulberry32 } from '../../../src/common/random';
import { lintFixtures, readFixtures } from './corpus';
import { lineLengths, mutate, rangeProblem } from './mutations';

const describeAll = (fs: readonly Finding[]): string[] => fs.map((f) => `${f.range.start.line}:${f.range.start.character}-${f.range.end.line}:${f.range.end.character} ${f.ruleId} ${f.message}`);

describe('lint engine under seeded mutations of real files', function () {
  this.timeout(600_000);
  const errors: string[] = [];
  let incremental: Linter;
  let fresh: Linter;
  before(async () => {
    const onError = (path: string, err: unknown) => errors.push(`${path}: ${err instanceof Error ? err.message : String(err)}`);
    incremental = await createLinter({ incremental: true, onError });
    fresh = await createLinter({ onError });
  });
  after(() => {
    incremental.dispose();
    fresh.dispose();
  });

  const corpus = [...readFixtures(join(lintFixtures, 'bad'), (n) => !n.endsWith('.fixed.py')), ...readFixtures(join(lintFixtures, 'good'))];

  for (const seed of [1, 2, 3, 4]) {
    it(`keeps every range inside the text and agrees with a fresh analysis through 12 chains of 15 edits (seed ${seed})`, () => {
      const r = mulberry32(seed);
      for (let c = 0; c < 12; c++) {
        const source = corpus[Math.floor(r() * corpus.length)];
        const path = `/fuzz/${seed}/${source.name}`;
        let text = source.text;
        const kinds: string[] = [];
        incremental.lintFile(path, text);
        for (let k = 0; k < 15; k++) {
          const m = mutate(text, r);
          text = m.text;
          kinds.push(m.kind);
          // As the server does: the change indexes the text, the pull lints what is indexed.
          incremental.setFile(path, text);
          const found = incremental.lintFile(path, text);
          const where = `${source.name} after ${kinds.join(', ')}`;
          assert.deepEqual(errors, [], where);
          const lengths = lineLengths(text);
          for (const f of found) {
            for (const range of [f.range, ...f.fixes.flatMap((x) => x.edits.map((e) => e.range))]) {
              assert.equal(rangeProblem(text, range, lengths), undefined, `${where}: ${f.ruleId} ${JSON.stringify(range)}`);
            }
          }
        }
        fresh.removeFile(path);
        assert.deepEqual(describeAll(incremental.lintFile(path)), describeAll(fresh.lintFile(path, text)), `${source.name} after ${kinds.join(', ')}`);
        assert.deepEqual(errors, []);
        incremental.removeFile(path);
        fresh.removeFile(path);
      }
    });
  }
});

/**
 * The real-code corpus (docs/lint-corpus.md). Validating every project file always runs (CI);
 * the rest needs the fetched files (`node scripts/lint-corpus.mjs fetch`, in
 * ${LINT_CORPUS_DIR:-<repo>/.lint-corpus}) and skips, saying so, without them.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { corpusLib } from '../../../bench/lint/_realMatch';
import { runCorpus } from '../../../bench/lint/real';
import { repoRoot } from '../../paths';

const folder = corpusLib.corpusFolder(repoRoot);
const cache = corpusLib.cacheFolder(repoRoot);
const noCache = `no corpus cache at ${cache}: run node scripts/lint-corpus.mjs fetch [--mirror DIR] (LINT_CORPUS_DIR picks the folder)`;

describe('real-code lint corpus', () => {
  it('every project file is valid (ids, commit, files, rule ids, verdicts, lines, paths)', () => {
    const { projects, problems } = corpusLib.readCorpus(folder);
    assert.deepEqual(problems, []);
    assert.ok(projects.length > 0, `no project files in ${folder}`);
  });

  it('every cached file is the blob its project names', function () {
    if (!existsSync(cache)) this.skip();
    const { projects } = corpusLib.readCorpus(folder);
    const wrong: string[] = [];
    let checked = 0;
    for (const p of projects) {
      for (const [path, sha] of Object.entries(p.files)) {
        const at = join(cache, p.id, path);
        if (!existsSync(at)) continue;
        checked++;
        const actual = corpusLib.blobSha(readFileSync(at));
        if (actual !== sha) wrong.push(`${p.id}/${path}: ${actual}, expected ${sha}`);
      }
    }
    assert.deepEqual(wrong, [], 'fetch again: node scripts/lint-corpus.mjs fetch');
    assert.ok(checked > 0, `the cache ${cache} holds none of the corpus's files`);
  });

  it('the bench lints every cached project and reports per-rule numbers', async function () {
    if (!existsSync(cache)) this.skip();
    this.timeout(120_000);
    const run = await runCorpus(cache);
    assert.ok(run, 'the cache exists, so the bench must run');
    assert.ok(run.projects > 0, `no project fully cached (${run.skipped.join('; ')})`);
    const labelled = run.report.rows.filter((r) => r.hazards + r.safe > 0);
    assert.ok(labelled.length > 0, 'no rule has labels');
    for (const r of run.report.rows) {
      assert.ok(r.tp <= r.hazards && r.fp <= r.safe && r.unlabelled <= r.findings, `${r.rule}: inconsistent counts ${JSON.stringify(r)}`);
      if (r.hazards > 0) assert.equal(typeof r.recall, 'number', `${r.rule}: hazards labelled but no recall`);
    }
    assert.equal(run.report.total.hazards, run.report.rows.filter((r) => r.counted).reduce((n, r) => n + r.hazards, 0));
    // ---- GOALS (issue #13), measured on the labelled real code:
    const row = (rule: string) => run.report.rows.find((r) => r.rule === rule);
    const unlabelled = run.report.rows.reduce((n, r) => n + r.unlabelled, 0);
    assert.equal(unlabelled, 0, 'every finding on the corpus is labelled (bench/lint/real.js lists the unlabelled ones)');
    // The goal, 0.95, for every rule but one. tensors-kept-for-logging measured 0.80 (4 of 5) since held-out round 20:
    // its false alarm keeps a model's outputs that are one float per sample (Multimodal-Transformer's regression
    // head, whose width comes from a dict in the run's configuration), which the rule cannot see. A floor against
    // regressions for it, not the goal met (README: the false positives left, and why).
    const precisionFloor: Record<string, number> = { 'tensors-kept-for-logging': 0.8 };
    for (const r of run.report.rows.filter((x) => x.counted && x.precision !== undefined)) {
      const floor = precisionFloor[r.rule] ?? 0.95;
      assert.ok(r.precision! >= floor, `${r.rule}: precision ${r.precision} < ${floor}`);
    }
    assert.ok(row('missing-no-grad')!.recall! >= 0.8, `missing-no-grad: recall ${row('missing-no-grad')!.recall} < 0.80`);
    // The goal is 0.80; measured 0.91 (10 of 11): losses inferred from the value they are the only source of, and a loss object reached through an attribute.
    assert.ok(row('accumulated-loss')!.recall! >= 0.9, `accumulated-loss: recall ${row('accumulated-loss')!.recall} fell below the measured 0.91`);
    // Measured 1.00 (4 of 4) with device checks and accelerator aliases: a floor against regressions.
    assert.ok(row('empty-cache-in-loop')!.recall! >= 0.99, `empty-cache-in-loop: recall ${row('empty-cache-in-loop')!.recall} fell below the measured 1.00`);
    // Measured 0.38 (3 of 8) and 1.00 (1 of 1) with outputs and states followed through definitions, helpers and copies (test/unit/lint/keptRecall.test.ts): floors against regressions.
    assert.ok(row('tensors-kept-for-logging')!.recall! >= 0.37, `tensors-kept-for-logging: recall ${row('tensors-kept-for-logging')!.recall} fell below the measured 0.38`);
    assert.ok(row('carried-hidden-state')!.recall! >= 0.99, `carried-hidden-state: recall ${row('carried-hidden-state')!.recall} fell below the measured 1.00`);
    // ---- end of goals
  });
});

// Mocha's `this.skip()` gives no reason; say it once where the cache is missing.
if (!existsSync(cache)) console.log(`  (real-code corpus: cached tests skipped: ${noCache})`);

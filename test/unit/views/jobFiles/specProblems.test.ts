import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { JobFileError, loadJobFile } from '../../../../src/training/job/spec';
import { loadSpec, SpecError } from '../../../../src/tuning/spec';
import { documentSpecKind, problemRange, specProblems, type SpecProblem } from '../../../../src/views/jobFiles/specProblems';
import { templateJobText } from '../../../../src/views/training/trainingFormat';
import { repoRoot } from '../../../paths';

const example = (rel: string): string => readFileSync(join(repoRoot, rel), 'utf8');

/** Writes `text` as a copied example would be: a file of its own in a fresh folder (not under the repo). */
function copied(name: string, text: string): string {
  const file = join(mkdtempSync(join(tmpdir(), 'gpu-workbench-spec-')), name);
  writeFileSync(file, text);
  return file;
}

/** What a problem underlines. */
const underlined = (text: string, p: SpecProblem): string => text.slice(p.offset, p.offset + p.length);

/** Every problem, as the refusal (Start Training / Run Experiment) words them for that file on disk. */
function refusal(file: string): string[] {
  try {
    if (file.endsWith('.tune.json')) loadSpec(file);
    else loadJobFile(file);
    return [];
  } catch (err) {
    if (err instanceof JobFileError) return [...err.problems];
    if (err instanceof SpecError) return [`${err.path || '/'}: ${err.detail}`];
    throw err;
  }
}

function check(name: string, text: string): { problems: SpecProblem[]; file: string } {
  const file = copied(name, text);
  const problems = specProblems(text, file);
  // The squiggles say what the refusal says, no more, no less.
  assert.deepEqual(problems.map((p) => p.message), refusal(file));
  return { problems, file };
}

describe('job file and tune spec problems in the editor (specProblems)', () => {
  const mnist = example('examples/mnist/mnist-ddp.job.json');

  it('a copied example with the typo "epoch": the unknown name is underlined, and the missing "epochs" at the top', () => {
    const text = mnist.replace('"epochs":', '"epoch":');
    const { problems } = check('mnist-ddp.job.json', text);
    const unknown = problems.find((p) => /unknown field "epoch"/.test(p.message));
    assert.ok(unknown, JSON.stringify(problems));
    assert.equal(underlined(text, unknown), '"epoch"');
    assert.match(unknown.message, /expected one of .*"epochs"/);
    const missing = problems.find((p) => /missing the required field "epochs"/.test(p.message));
    assert.ok(missing, JSON.stringify(problems));
    assert.deepEqual([missing.offset, underlined(text, missing)], [text.indexOf('{'), '{']);
  });

  it('a value of the wrong type: the value is underlined', () => {
    const text = mnist.replace(/"batchSize": \d+/, '"batchSize": "64"');
    const { problems } = check('wrong-type.job.json', text);
    assert.equal(problems.length, 1, JSON.stringify(problems));
    assert.equal(underlined(text, problems[0]), '"64"');
    assert.match(problems[0].message, /^\/batchSize must be an integer/);
  });

  it('a value outside the enum, nested: the value is underlined', () => {
    const text = mnist.replace(/"name": "adam"/, '"name": "adamw"');
    assert.notEqual(text, mnist, 'the example has an adam optimizer');
    const { problems } = check('bad-enum.job.json', text);
    assert.equal(problems.length, 1, JSON.stringify(problems));
    assert.equal(underlined(text, problems[0]), '"adamw"');
    assert.match(problems[0].message, /^\/optimizer\/name must be one of "sgd"/);
  });

  it('a missing nested field: the object that lacks it is underlined by its name', () => {
    const text = JSON.stringify({ model: 'mlp', data: { csv: {} }, batchSize: 8, epochs: 1 }, null, 2);
    const { problems } = check('missing.job.json', text);
    const p = problems.find((q) => /missing the required field "path"/.test(q.message));
    assert.ok(p, JSON.stringify(problems));
    assert.equal(underlined(text, p), '"csv"');
  });

  it('what only Start Training checks (a model file that is not there) is a problem too, on its field', () => {
    const text = mnist.replace(/"model": \{[^}]*\}/, '"model": "./missing-model.json"');
    assert.notEqual(text, mnist);
    const { problems } = check('no-model.job.json', text);
    assert.equal(problems.length, 1, JSON.stringify(problems));
    assert.equal(underlined(text, problems[0]), '"./missing-model.json"');
    assert.match(problems[0].message, /missing-model\.json does not exist/);
  });

  it('a re-check after the missing model file is created (what the file watcher runs) clears the problem, and a delete brings it back', () => {
    const text = mnist.replace(/"model": \{[^}]*\}/, '"model": "./later-model.json"');
    const { problems, file } = check('later.job.json', text);
    assert.equal(problems.length, 1, JSON.stringify(problems));
    const model = join(dirname(file), 'later-model.json');
    writeFileSync(model, '{}');
    assert.deepEqual(specProblems(text, file), []);
    rmSync(model);
    assert.match(specProblems(text, file)[0]?.message ?? '', /later-model\.json does not exist/);
  });

  it('only job and tune files on disk are checked or scheduled (no timer for a Python file or an output channel)', () => {
    assert.equal(documentSpecKind({ scheme: 'file', fsPath: '/ws/a.job.json' }), 'job');
    assert.equal(documentSpecKind({ scheme: 'file', fsPath: '/ws/a.tune.json' }), 'tune');
    assert.equal(documentSpecKind({ scheme: 'file', fsPath: '/ws/train.py' }), undefined);
    assert.equal(documentSpecKind({ scheme: 'output', fsPath: 'extension-output-gpu-workbench.job.json' }), undefined);
    assert.equal(documentSpecKind({ scheme: 'git', fsPath: '/ws/a.job.json' }), undefined);
  });

  it('a torchrun job is checked by its schema branch', () => {
    const ddp = example('examples/torchrun/ddp.job.json');
    const text = ddp.replace('"script":', '"scrpt":');
    const file = copied('ddp.job.json', text);
    const problems = specProblems(text, file);
    const unknown = problems.find((p) => /unknown field "scrpt"/.test(p.message));
    assert.ok(unknown, JSON.stringify(problems));
    assert.equal(underlined(text, unknown), '"scrpt"');
  });

  it('a tune spec: an unknown key is underlined by name, a bad enum by value, in the words of Run Experiment', () => {
    const quadratic = example('examples/tuning/quadratic.tune.json');
    const typo = quadratic.replace('"numSamples":', '"numSample":');
    assert.notEqual(typo, quadratic);
    const a = check('typo.tune.json', typo).problems;
    assert.equal(a.length, 1, JSON.stringify(a));
    assert.equal(underlined(typo, a[0]), '"numSample"');
    assert.match(a[0].message, /^\/numSample: is not a known field/);

    const mode = quadratic.replace(/"mode": "(min|max)"/, '"mode": "minimize"');
    assert.notEqual(mode, quadratic);
    const b = check('mode.tune.json', mode).problems;
    assert.equal(b.length, 1, JSON.stringify(b));
    assert.equal(underlined(mode, b[0]), '"minimize"');
    assert.match(b[0].message, /^\/mode: must be one of "min", "max"/);
  });

  it('env and search-space keys with "/", "~", a space, ":" or only digits: the bad value itself is underlined, not its parent', () => {
    const ddp = JSON.parse(example('examples/torchrun/ddp.job.json')) as Record<string, unknown>;
    const keys = ['A/B', 'a~b', 'X Y', 'k:v', '7'];
    // Each key's value is a number, where env takes strings; each value is distinct so the underline says whose it is.
    const job = JSON.stringify({ ...ddp, env: Object.fromEntries(keys.map((k, i) => [k, 100 + i])) }, null, 2);
    const { problems } = check('env.job.json', job);
    assert.deepEqual(problems.map((p) => underlined(job, p)).sort(), keys.map((_, i) => String(100 + i)).sort(), JSON.stringify(problems));
    // Start Training's "Open File" selects the same range as the squiggle.
    for (const p of problems) assert.deepEqual(problemRange(job, p.message), { offset: p.offset, length: p.length });
    // The path's numbers are array indices only inside arrays: /args/1 is the second argument.
    const args = JSON.stringify({ ...ddp, args: ['--epochs', 2] }, null, 2);
    const a = check('args.job.json', args).problems;
    assert.deepEqual(a.map((p) => underlined(args, p)), ['2'], JSON.stringify(a));

    const quadratic = JSON.parse(example('examples/tuning/quadratic.tune.json')) as { space: Record<string, unknown> };
    for (const k of [...keys, 'a b']) {
      const tune = JSON.stringify({ ...quadratic, space: { ...quadratic.space, [k]: { uniform: [2, 1] } } }, null, 2);
      const t = check(`space-${keys.indexOf(k)}.tune.json`, tune).problems;
      assert.equal(t.length, 1, JSON.stringify(t));
      assert.deepEqual(JSON.parse(underlined(tune, t[0])), [2, 1], k);
    }
    // A name refused for its '.' is named by an escaped pointer too (a raw "/" would point elsewhere).
    const dotted = JSON.stringify({ ...quadratic, space: { ...quadratic.space, 'a.b/c': { uniform: [0, 1] } } }, null, 2);
    const d = check('dotted.tune.json', dotted).problems;
    assert.equal(d.length, 1, JSON.stringify(d));
    assert.match(d[0].message, /^\/space\/a\.b~1c: parameter names may not contain/);
    assert.deepEqual(JSON.parse(underlined(dotted, d[0])), { uniform: [0, 1] });
  });

  it('no problems for the examples as they are, nor for text that is not JSON (the editor reports syntax) or other files', () => {
    for (const rel of ['examples/mnist/mnist-ddp.job.json', 'examples/torchrun/ddp.job.json', 'examples/torchrun/recorded-cuda-oom.job.json', 'examples/tuning/quadratic.tune.json', 'examples/tuning/mnist.tune.json']) {
      assert.deepEqual(specProblems(example(rel), join(repoRoot, rel)), [], rel);
    }
    assert.deepEqual(specProblems('{ "epoch": ', '/tmp/x.job.json'), []);
    assert.deepEqual(specProblems('{ "epoch": 1 }', '/tmp/package.json'), []);
  });
});

describe('examples and templates validate wherever they are copied', () => {
  /** Every JSON file a user may copy: examples/, bench/, and the New Job template. */
  function jsonFiles(dir: string): string[] {
    return readdirSync(dir).flatMap((name) => {
      const p = join(dir, name);
      return statSync(p).isDirectory() ? jsonFiles(p) : p.endsWith('.json') ? [p] : [];
    });
  }

  it('carry no "$schema" (a relative one breaks once copied and hides the extension\'s jsonValidation)', () => {
    const files = [...jsonFiles(join(repoRoot, 'examples')), ...jsonFiles(join(repoRoot, 'bench'))];
    assert.ok(files.some((f) => f.endsWith('.job.json')) && files.some((f) => f.endsWith('.tune.json')), 'found the examples');
    for (const f of files) assert.doesNotMatch(readFileSync(f, 'utf8'), /"\$schema"/, f);
    assert.doesNotMatch(templateJobText('mnist.job.json'), /"\$schema"/);
    assert.doesNotMatch(readFileSync(join(repoRoot, 'README.md'), 'utf8'), /"\$schema":\s*"\.\.?\//);
  });

  it('the extension validates *.job.json and *.tune.json by name (package.json jsonValidation)', () => {
    const pkg = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { contributes: { jsonValidation: { fileMatch: string; url: string }[] } };
    const byMatch = new Map(pkg.contributes.jsonValidation.map((v) => [v.fileMatch, v.url]));
    assert.equal(byMatch.get('*.job.json'), './schemas/job.schema.json');
    assert.equal(byMatch.get('*.tune.json'), './schemas/tune.schema.json');
  });
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from '../../paths';

const script = join(repoRoot, 'scripts', 'lint-corpus.mjs');
const git = (cwd: string, ...args: string[]): string => {
  const r = spawnSync('git', args, { cwd, encoding: 'utf8', env: { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' } });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
};

describe('scripts/lint-corpus.mjs', () => {
  let tmp: string;
  let corpus: string;
  let cache: string;
  let mirror: string;
  let commit: string;
  let blob: string;
  const source = 'import torch\n\ntotal = 0\n';

  const run = (...args: string[]) => {
    const r = spawnSync(process.execPath, [script, ...args, '--corpus', corpus], { encoding: 'utf8', env: { ...process.env, LINT_CORPUS_DIR: cache, LINT_CORPUS_RAW_BASE: 'http://127.0.0.1:9' }, timeout: 60_000 });
    return { code: r.status, stdout: r.stdout, stderr: r.stderr };
  };
  const project = (sha = blob, extra: Record<string, unknown> = {}) => ({ id: 'demo', repo: 'someone/demo', commit, license: 'MIT', files: { 'src/train.py': sha }, labels: [{ path: 'src/train.py', line: 3, rule: 'accumulated-loss', verdict: 'safe', reason: 'a number' }], ...extra });
  const writeProject = (value: unknown, name = 'demo.json'): void => writeFileSync(join(corpus, name), typeof value === 'string' ? value : JSON.stringify(value));

  beforeEach(() => {
    tmp = mkdtempSync(join(tmpdir(), 'lint-corpus-'));
    corpus = join(tmp, 'real');
    cache = join(tmp, 'cache');
    mirror = join(tmp, 'mirror');
    mkdirSync(corpus);
    // A bare mirror one folder down, as /work/.mirror/<owner>+<name>/repo.
    const work = join(tmp, 'work');
    mkdirSync(join(work, 'src'), { recursive: true });
    git(work, 'init', '-q');
    writeFileSync(join(work, 'src', 'train.py'), source);
    git(work, 'add', '.');
    git(work, 'commit', '-qm', 'x');
    commit = git(work, 'rev-parse', 'HEAD');
    blob = git(work, 'rev-parse', 'HEAD:src/train.py');
    mkdirSync(join(mirror, 'someone+demo'), { recursive: true });
    git(tmp, 'clone', '-q', '--bare', work, join(mirror, 'someone+demo', 'repo'));
  });
  afterEach(() => rmSync(tmp, { recursive: true, force: true }));

  it('fetches each file from the mirror into <cache>/<id>/<path> and keeps it on the next run', () => {
    writeProject(project());
    const r = run('fetch', '--mirror', mirror);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(readFileSync(join(cache, 'demo', 'src', 'train.py'), 'utf8'), source);
    assert.match(r.stdout, /1 fetched, 0 already there/);
    assert.match(run('fetch', '--mirror', mirror).stdout, /0 fetched, 1 already there/);
  });

  it('refuses a file whose blob sha1 differs, naming it, and keeps nothing', () => {
    writeProject(project('0'.repeat(40)));
    const r = run('fetch', '--mirror', mirror);
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`demo: src/train\\.py at ${commit.slice(0, 12)} has blob sha1 ${blob}, but demo\\.json says 0{40}; not kept`));
    assert.equal(existsSync(join(cache, 'demo', 'src', 'train.py')), false);
  });

  it('says which mirror is missing', () => {
    writeProject(project(blob, { repo: 'other/thing' }));
    const r = run('fetch', '--mirror', mirror);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /no mirror of other\/thing: .*other\+thing does not exist/);
    const gone = run('fetch', '--mirror', join(tmp, 'nowhere'));
    assert.equal(gone.code, 2);
    assert.match(gone.stderr, /mirror folder .*nowhere does not exist/);
  });

  it('says a commit the mirror lacks', () => {
    writeProject(project(blob, { commit: 'f'.repeat(40) }));
    const r = run('fetch', '--mirror', mirror);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /git show ffffffffffff:src\/train\.py in .* failed/);
  });

  it('reports a download that fails, naming the URL', () => {
    writeProject(project());
    const r = run('fetch');
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`cannot download http://127\\.0\\.0\\.1:9/someone/demo/${commit}/src/train\\.py: `));
  });

  it('refuses a corpus file that is not JSON, naming it, and fetches nothing', () => {
    writeProject(project());
    writeProject('{ "id": "broken", ', 'broken.json');
    const r = run('fetch', '--mirror', mirror);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /broken\.json: not valid JSON/);
    assert.equal(existsSync(join(cache, 'demo')), false);
    // --only another project still works.
    assert.equal(run('fetch', '--mirror', mirror, '--only', 'demo').code, 0);
    assert.match(run('fetch', '--only', 'nope').stderr, /unknown project id in --only: nope/);
  });

  it('check reports problems and the cache state', () => {
    writeProject(project(blob, { labels: [{ path: 'src/train.py', line: 0, rule: 'x', verdict: 'safe', reason: 'r' }] }));
    const bad = run('check');
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /demo\.json: labels\[0\]: "line" must be a whole number of at least 1/);
    assert.match(bad.stderr, /demo\.json: labels\[0\]: unknown rule "x"/);
    writeProject(project());
    assert.equal(run('fetch', '--mirror', mirror).code, 0);
    const ok = run('check');
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /1 valid project, 1 labels \(0 hazards\); 1 of 1 files cached/);
  });
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from '../../paths';

const cli = join(repoRoot, 'out', 'src', 'cli.js');
const leak = `import torch\n\ndef train(model, loader, opt, crit):\n    total = 0\n    for x, y in loader:\n        loss = crit(model(x), y)\n        loss.backward()\n        opt.step()\n        total += loss\n    return total\n`;
const clean = leak.replace('total += loss', 'total += loss.item()');
/** Only an info finding (data-parallel): still a finding, exit 1, unless the rule is ignored. */
const dataParallel = `import torch\n\nmodel = torch.nn.DataParallel(torch.nn.Linear(4, 2))\n`;

function lint(cwd: string, ...args: string[]) {
  // The deadline only turns "blocked forever" (a FIFO) into a failure instead of a hung suite.
  const r = spawnSync(process.execPath, [cli, 'lint', ...args], { cwd, encoding: 'utf8', timeout: 25_000 });
  assert.equal(r.signal, null, `the CLI did not finish: ${r.stderr}`);
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const hasTool = (tool: string, ...args: string[]): boolean => spawnSync(tool, args, { stdio: 'ignore' }).status === 0;

/**
 * The CLI as a user that file permissions apply to. Root reads any folder, so as root (CI
 * containers) it runs as `nobody` through setpriv; undefined when that is not possible.
 */
function lintDenied(cwd: string, ...args: string[]): { code: number | null; stdout: string; stderr: string } | undefined {
  if (process.getuid?.() !== 0) return lint(cwd, ...args);
  if (!hasTool('setpriv', '--version')) return undefined;
  const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, cli, 'lint', ...args], { cwd, encoding: 'utf8', timeout: 25_000 });
  assert.equal(r.signal, null, `the CLI did not finish: ${r.stderr}`);
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('gpu-workbench lint', function () {
  // Each test spawns the CLI (Node start-up plus wasm load): on a loaded machine that alone can pass mocha's 2 s default.
  this.timeout(30_000);
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'gpuwb-lint-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('prints `path:line:col: rule-id message` lines and exits 1 when it finds a hazard', () => {
    writeFileSync(join(dir, 'train.py'), leak);
    const r = lint(dir);
    assert.equal(r.code, 1);
    const lines = r.stdout.trimEnd().split('\n');
    assert.equal(lines.length, 1);
    assert.match(lines[0], /^train\.py:9:9: accumulated-loss `loss` is stored in `total`[^\n]+$/);
  });

  it('skips a file over --max-file-size, or generated code nested deeper than CPython accepts, with a warning naming the size and the limit', () => {
    const big = `${leak}${'# padding\n'.repeat(200)}`;
    writeFileSync(join(dir, 'train.py'), big);
    let deep = 'import torch\n';
    for (let i = 0; i < 150; i++) deep += `${' '.repeat(i)}for x${i} in loader:\n`;
    writeFileSync(join(dir, 'deep.py'), `${deep}${' '.repeat(150)}total += model(x).sum()\n`);
    const r = lint(dir, '--max-file-size', '1', 'train.py');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, '');
    assert.match(r.stderr, new RegExp(`warning: skipped train\\.py: ${big.length.toLocaleString('en-US')} characters \\(0\\.0 MB\\), over the limit of 1,024 \\(1 KB\\) \\(raise it with --max-file-size KB\\)`));
    assert.match(lint(dir, 'deep.py').stderr, /warning: skipped deep\.py: line 103 is indented more than 100 levels deep, which CPython refuses/);
    // Within the limit, the same file is linted.
    assert.equal(lint(dir, 'train.py').code, 1);
    assert.match(lint(dir, '--max-file-size=0').stderr, /--max-file-size expects a positive number of kilobytes, got '0'/);
  });

  it('exits 1 on an info finding too, and --ignore turns that rule off (warnings only in CI)', () => {
    writeFileSync(join(dir, 'model.py'), dataParallel);
    writeFileSync(join(dir, 'train.py'), leak);
    const all = lint(dir);
    assert.equal(all.code, 1);
    assert.deepEqual(all.stdout.trimEnd().split('\n').map((l) => l.split(' ')[1]), ['data-parallel', 'accumulated-loss']);
    const warningsOnly = lint(dir, '--ignore', 'data-parallel');
    assert.equal(warningsOnly.code, 1);
    assert.deepEqual(warningsOnly.stdout.trimEnd().split('\n').map((l) => l.split(' ')[1]), ['accumulated-loss']);
    const ignored = lint(dir, '--ignore=data-parallel,accumulated-loss', 'model.py', 'train.py');
    assert.deepEqual([ignored.code, ignored.stdout], [0, '']);
    // --select and --ignore combine as in ruff: selected, then minus the ignored.
    const both = lint(dir, '--select', 'data-parallel,accumulated-loss', '--ignore', 'accumulated-loss');
    assert.deepEqual(both.stdout.trimEnd().split('\n').map((l) => l.split(' ')[1]), ['data-parallel']);
  });

  it('exits 0 on clean code', () => {
    writeFileSync(join(dir, 'train.py'), clean);
    const r = lint(dir, '.');
    assert.equal(r.stdout, '');
    assert.equal(r.code, 0);
  });

  it('walks folders but skips .git, node_modules, virtual environments and .gitignored paths', () => {
    for (const sub of ['.git', 'node_modules/pkg', 'env', 'build', 'src']) mkdirSync(join(dir, sub), { recursive: true });
    writeFileSync(join(dir, 'env', 'pyvenv.cfg'), 'home = /usr/bin\n');
    for (const sub of ['.git', 'node_modules/pkg', 'env', 'build']) writeFileSync(join(dir, sub, 'x.py'), leak);
    writeFileSync(join(dir, 'generated.py'), leak);
    writeFileSync(join(dir, '.gitignore'), '# outputs\nbuild/\ngenerated.py\n');
    writeFileSync(join(dir, 'src', 'train.py'), leak);
    const r = lint(dir);
    assert.deepEqual(r.stdout.trim().split('\n').map((l) => l.split(':')[0]), ['src/train.py']);
  });

  it('writes a JSON array with 1-based positions, --json being --format json', () => {
    writeFileSync(join(dir, 'train.py'), leak);
    const r = lint(dir, '--format', 'json', 'train.py');
    assert.equal(r.code, 1);
    const [f, ...rest] = JSON.parse(r.stdout) as Record<string, unknown>[];
    assert.deepEqual(rest, []);
    assert.deepEqual({ path: f.path, line: f.line, column: f.column, endLine: f.endLine, endColumn: f.endColumn, rule: f.rule, severity: f.severity }, { path: 'train.py', line: 9, column: 9, endLine: 9, endColumn: 22, rule: 'accumulated-loss', severity: 'warning' });
    assert.match(f.message as string, /^`loss` is stored in `total`/);
    assert.deepEqual(JSON.parse(lint(dir, '--format=json', 'train.py').stdout), JSON.parse(lint(dir, '--json', 'train.py').stdout));
    const none = lint(dir, '--json', '--select', 'missing-no-grad');
    assert.deepEqual([none.code, JSON.parse(none.stdout)], [0, []]);
  });

  it('--fix rewrites the file and exits 0 when nothing is left', () => {
    writeFileSync(join(dir, 'train.py'), leak);
    const r = lint(dir, '--fix');
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.equal(readFileSync(join(dir, 'train.py'), 'utf8'), clean);
  });

  it('counts lines as Python does: a lone \\r is a line break, in the report and for --fix', () => {
    // One `\r\r` after the first line: the finding is still on line 9 (it was reported on line 7).
    writeFileSync(join(dir, 'mac.py'), leak.replace('\n\n', '\r\r'));
    writeFileSync(join(dir, 'mixed.py'), leak.replace(/\n/g, (_, i: number) => (i % 3 === 0 ? '\r' : i % 3 === 1 ? '\r\n' : '\n')));
    const r = lint(dir, '--format', 'json', 'mac.py', 'mixed.py');
    assert.deepEqual((JSON.parse(r.stdout) as { path: string; line: number; column: number }[]).map((f) => `${f.path}:${f.line}:${f.column}`), ['mac.py:9:9', 'mixed.py:9:9']);
    writeFileSync(join(dir, 'old.py'), leak.replace(/\n/g, '\r'));
    assert.equal(lint(dir, '--fix', 'old.py').code, 0);
    assert.equal(readFileSync(join(dir, 'old.py'), 'utf8'), clean.replace(/\n/g, '\r'));
  });

  it('exits 2 with a clear message on a bad option, an unknown rule, a missing path or an unreadable file', () => {
    assert.equal(lint(dir, '--frobnicate').code, 2);
    const format = lint(dir, '--format', 'xml');
    assert.equal(format.code, 2);
    assert.match(format.stderr, /--format expects text or json, got 'xml'/);
    const unknown = lint(dir, '--select', 'no-such-rule');
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown rule id in --select: no-such-rule/);
    const ignore = lint(dir, '--ignore', 'data-parallel,nope');
    assert.equal(ignore.code, 2);
    assert.match(ignore.stderr, /unknown rule id in --ignore: nope/);
    assert.match(lint(dir, '--ignore').stderr, /--ignore expects a comma-separated list of rule ids/);
    const missing = lint(dir, 'nope.py');
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /no such file or folder: nope\.py/);
    symlinkSync(join(dir, 'gone.py'), join(dir, 'dangling.py'));
    writeFileSync(join(dir, 'train.py'), leak);
    const unreadable = lint(dir);
    assert.equal(unreadable.code, 2);
    assert.match(unreadable.stderr, /cannot read dangling\.py: ENOENT/);
    assert.match(unreadable.stdout, /train\.py:9:9/, 'the readable files are still linted');
  });

  it('never blocks on a FIFO: a named one is an error (exit 2), one found in a folder is a warning', function () {
    if (!hasTool('mkfifo', '--version')) this.skip(); // no mkfifo (Windows): nothing to test
    writeFileSync(join(dir, 'train.py'), leak);
    mkdirSync(join(dir, 'src'));
    spawnSync('mkfifo', [join(dir, 'x.py')]);
    spawnSync('mkfifo', [join(dir, 'src', 'pipe.py')]);
    symlinkSync(join(dir, 'x.py'), join(dir, 'src', 'link.py'));
    const named = lint(dir, 'x.py', 'train.py');
    assert.equal(named.code, 2);
    assert.match(named.stderr, /cannot read x\.py: it is a named pipe \(FIFO\), not a file; skipped/);
    assert.match(named.stdout, /^train\.py:9:9/, 'the other file is still linted');
    const walked = lint(dir, 'src', 'train.py');
    assert.equal(walked.code, 1, walked.stderr);
    assert.match(walked.stderr, /warning: skipped src\/link\.py: a named pipe \(FIFO\), not a file/);
    assert.match(walked.stderr, /warning: skipped src\/pipe\.py: a named pipe \(FIFO\), not a file/);
  });

  it('says why a named path cannot be read: a symlink loop is ELOOP, not "no such file"', () => {
    symlinkSync('loop.py', join(dir, 'loop.py'));
    writeFileSync(join(dir, 'train.py'), leak);
    const r = lint(dir, 'loop.py', 'train.py');
    assert.equal(r.code, 2);
    assert.match(r.stderr, /cannot read loop\.py: ELOOP \(too many levels of symbolic links/);
    assert.doesNotMatch(r.stderr, /no such file/);
    const walked = lint(dir);
    assert.equal(walked.code, 2);
    assert.match(walked.stderr, /cannot read loop\.py: ELOOP/);
  });

  it('exits 2 naming the folder when a named folder cannot be read, and warns about unreadable subfolders', function () {
    chmodSync(dir, 0o755); // mkdtemp's folder is private; the other user must get in
    mkdirSync(join(dir, 'locked'));
    writeFileSync(join(dir, 'locked', 'hidden.py'), leak);
    mkdirSync(join(dir, 'src', 'private'), { recursive: true });
    writeFileSync(join(dir, 'src', 'train.py'), leak);
    writeFileSync(join(dir, 'src', 'private', 'x.py'), leak);
    chmodSync(join(dir, 'locked'), 0o000);
    chmodSync(join(dir, 'src', 'private'), 0o000);
    try {
      const named = lintDenied(dir, '--json', 'locked');
      if (!named) return this.skip(); // root without setpriv: nothing here can deny a read
      assert.equal(named.code, 2);
      assert.match(named.stderr, /cannot read folder locked: EACCES \(permission denied\)/);
      const walked = lintDenied(dir, 'src');
      assert.equal(walked?.code, 1, walked?.stderr);
      assert.match(walked?.stderr ?? '', /warning: skipped src\/private: EACCES \(permission denied\)/);
      assert.match(walked?.stdout ?? '', /^src\/train\.py:9:9/);
    } finally {
      chmodSync(join(dir, 'locked'), 0o755);
      chmodSync(join(dir, 'src', 'private'), 0o755);
    }
  });

  it('skips a binary *.py (a NUL byte: not Python) at once with a message naming it, and lints the rest', () => {
    const bin = Buffer.alloc(600_000);
    for (let i = 0; i < bin.length; i++) bin[i] = (i * 7919) & 0xff;
    writeFileSync(join(dir, 'weights.py'), bin);
    writeFileSync(join(dir, 'train.py'), leak);
    const r = lint(dir);
    rmSync(join(dir, 'weights.py'));
    assert.equal(r.code, 2);
    assert.match(r.stderr, /weights\.py is not Python source: it contains a NUL byte/);
    assert.match(r.stdout, /train\.py:9:9/);
  });
});

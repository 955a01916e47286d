#!/usr/bin/env node
// The real-code lint corpus (docs/lint-corpus.md): test/fixtures/lint/real/<id>.json name each
// project's commit, files and their git blob ids; this fetches those exact files into a cache
// that git ignores, and checks the JSON.
//
//   node scripts/lint-corpus.mjs fetch [--mirror DIR] [--only id,...]
//   node scripts/lint-corpus.mjs check
//   (both take --corpus DIR: the project files, default test/fixtures/lint/real)
//
// fetch: writes each file to ${LINT_CORPUS_DIR:-<repo>/.lint-corpus}/<id>/<path>, taken from a
// local git mirror (DIR/<owner>+<name>/ holds a git dir somewhere beneath) when --mirror is given,
// else from https://raw.githubusercontent.com/<repo>/<commit>/<path>. A file is kept only when
// its git blob sha1 is the one in the JSON; one already cached with the right sha is not fetched
// again. Exit status: 0 all fetched, 1 some file could not be fetched or did not match, 2 usage
// or an invalid corpus file.
// check: validates every corpus file (ids, commit, rule ids, verdicts, lines, paths) and says how
// much of it is cached. Exit 0 valid, 1 problems.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const { blobSha, cacheFolder, corpusFolder, readCorpus } = require('./lint-corpus/corpus.cjs');

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
// Tests point this at a port nobody listens on to see the network error.
const rawBase = (process.env.LINT_CORPUS_RAW_BASE ?? 'https://raw.githubusercontent.com').replace(/\/$/, '');
const usage = `usage: node scripts/lint-corpus.mjs fetch [--mirror DIR] [--only id,...]
       node scripts/lint-corpus.mjs check

fetch  writes every file of every project in test/fixtures/lint/real/*.json into
       \${LINT_CORPUS_DIR:-<repo>/.lint-corpus}/<id>/<path>, checking its git blob sha1
       --mirror DIR  take files from local git mirrors DIR/<owner>+<name>/ instead of GitHub
       --only ids    only these projects (comma-separated ids)
check  validates the corpus files and reports how much of the corpus is cached
both   --corpus DIR  read the project files from DIR (default test/fixtures/lint/real)`;

function fail(message, status = 2) {
  process.stderr.write(`lint-corpus: ${message}\n`);
  process.exit(status);
}

function parseArgs(argv) {
  const [command, ...rest] = argv;
  if (command === '-h' || command === '--help') {
    process.stdout.write(`${usage}\n`);
    process.exit(0);
  }
  if (command !== 'fetch' && command !== 'check') fail(`${command ? `unknown command '${command}'` : 'no command given'}\n\n${usage}`);
  const args = { command, mirror: undefined, only: undefined, corpus: corpusFolder(root) };
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i];
    const value = () => {
      const v = a.includes('=') ? a.slice(a.indexOf('=') + 1) : rest[++i];
      if (v === undefined || v === '') fail(`${a.split('=')[0]} expects a value\n\n${usage}`);
      return v;
    };
    if (command === 'fetch' && (a === '--mirror' || a.startsWith('--mirror='))) args.mirror = value();
    else if (command === 'fetch' && (a === '--only' || a.startsWith('--only='))) args.only = value().split(',').map((s) => s.trim()).filter(Boolean);
    else if (a === '--corpus' || a.startsWith('--corpus=')) args.corpus = value();
    else fail(`unknown argument '${a}' for ${command}\n\n${usage}`);
  }
  return args;
}

/** The git dir of owner/name's mirror under `mirror`: the first folder beneath with HEAD and objects/. */
function mirrorGitDir(mirror, repo) {
  const top = join(mirror, repo.replace('/', '+'));
  if (!existsSync(top)) return { error: `no mirror of ${repo}: ${top} does not exist (fetch it into the mirror, or leave out --mirror to download from GitHub)` };
  const queue = [{ dir: top, depth: 0 }];
  while (queue.length) {
    const { dir, depth } = queue.shift();
    if (existsSync(join(dir, 'HEAD')) && existsSync(join(dir, 'objects'))) return { gitDir: dir };
    if (depth >= 3) continue;
    let entries = [];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      continue;
    }
    for (const e of entries) if (e.isDirectory()) queue.push({ dir: join(dir, e.name), depth: depth + 1 });
  }
  return { error: `no git dir found under ${top} (looked for a folder with HEAD and objects/, 3 levels deep)` };
}

function fromMirror(gitDir, commit, path) {
  const r = spawnSync('git', [`--git-dir=${gitDir}`, 'show', `${commit}:${path}`], { maxBuffer: 256 << 20 });
  if (r.error) return { error: `cannot run git: ${r.error.message}` };
  if (r.status !== 0) return { error: `git show ${commit.slice(0, 12)}:${path} in ${gitDir} failed: ${r.stderr.toString().trim() || `exit ${r.status}`}` };
  return { bytes: r.stdout };
}

async function fromGitHub(repo, commit, path) {
  const url = `${rawBase}/${repo}/${commit}/${path.split('/').map(encodeURIComponent).join('/')}`;
  let res;
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(60_000) });
  } catch (err) {
    const cause = err.cause?.code ?? err.cause?.message ?? err.message;
    return { error: `cannot download ${url}: ${cause} (no network? try --mirror DIR with a local git mirror)` };
  }
  if (!res.ok) return { error: `cannot download ${url}: HTTP ${res.status} ${res.statusText}` };
  return { bytes: Buffer.from(await res.arrayBuffer()) };
}

function cachedSha(path) {
  try {
    return statSync(path).isFile() ? blobSha(readFileSync(path)) : undefined;
  } catch {
    return undefined;
  }
}

async function fetchAll(projects, args) {
  const cache = cacheFolder(root);
  if (args.mirror && !existsSync(args.mirror)) fail(`mirror folder ${args.mirror} does not exist`);
  let fetched = 0;
  let kept = 0;
  const errors = [];
  for (const p of projects) {
    let gitDir;
    if (args.mirror) {
      const m = mirrorGitDir(args.mirror, p.repo);
      if (m.error) {
        errors.push(`${p.id}: ${m.error}`);
        continue;
      }
      gitDir = m.gitDir;
    }
    for (const [path, sha] of Object.entries(p.files)) {
      const target = join(cache, p.id, path);
      if (cachedSha(target) === sha) {
        kept++;
        continue;
      }
      const got = gitDir ? fromMirror(gitDir, p.commit, path) : await fromGitHub(p.repo, p.commit, path);
      if (got.error) {
        errors.push(`${p.id}: ${got.error}`);
        continue;
      }
      const actual = blobSha(got.bytes);
      if (actual !== sha) {
        errors.push(`${p.id}: ${path} at ${p.commit.slice(0, 12)} has blob sha1 ${actual}, but ${p.id}.json says ${sha}; not kept`);
        continue;
      }
      mkdirSync(dirname(target), { recursive: true });
      writeFileSync(`${target}.part`, got.bytes);
      renameSync(`${target}.part`, target);
      fetched++;
    }
  }
  const files = projects.reduce((n, p) => n + Object.keys(p.files).length, 0);
  process.stdout.write(`lint-corpus: ${projects.length} project${projects.length === 1 ? '' : 's'}, ${files} files in ${cache}: ${fetched} fetched, ${kept} already there${errors.length ? `, ${errors.length} failed` : ''}\n`);
  for (const e of errors) process.stderr.write(`lint-corpus: ${e}\n`);
  return errors.length ? 1 : 0;
}

function check(projects, problems) {
  for (const p of problems) process.stderr.write(`lint-corpus: ${p}\n`);
  const cache = cacheFolder(root);
  let cached = 0;
  let files = 0;
  const mismatched = [];
  for (const p of projects) {
    for (const [path, sha] of Object.entries(p.files)) {
      files++;
      const actual = cachedSha(join(cache, p.id, path));
      if (actual === sha) cached++;
      else if (actual !== undefined) mismatched.push(`${p.id}/${path}`);
    }
  }
  const labels = projects.reduce((n, p) => n + p.labels.length, 0);
  const hazards = projects.reduce((n, p) => n + p.labels.filter((l) => l.verdict === 'hazard').length, 0);
  process.stdout.write(`lint-corpus: ${projects.length} valid project${projects.length === 1 ? '' : 's'}, ${labels} labels (${hazards} hazards); ${cached} of ${files} files cached in ${cache}\n`);
  for (const m of mismatched) process.stderr.write(`lint-corpus: cached ${m} differs from its blob sha1 (fetch again)\n`);
  return problems.length || mismatched.length ? 1 : 0;
}

const args = parseArgs(process.argv.slice(2));
const { projects, problems } = readCorpus(args.corpus);
if (args.command === 'check') process.exit(check(projects, problems));
let chosen = projects;
if (args.only) {
  const ids = new Set(projects.map((p) => p.id));
  const unknown = args.only.filter((id) => !ids.has(id) && !problems.some((pr) => pr.startsWith(`${id}.json:`)));
  if (unknown.length) fail(`unknown project id${unknown.length > 1 ? 's' : ''} in --only: ${unknown.join(', ')} (known: ${[...ids].join(', ') || 'none'})`);
  chosen = projects.filter((p) => args.only.includes(p.id));
}
const relevant = args.only ? problems.filter((pr) => args.only.some((id) => pr.startsWith(`${id}.json:`))) : problems;
if (relevant.length) {
  for (const p of relevant) process.stderr.write(`lint-corpus: ${p}\n`);
  fail(`the corpus has ${relevant.length} problem${relevant.length === 1 ? '' : 's'}; fix ${relevant.length === 1 ? 'it' : 'them'} first (nothing fetched)`);
}
process.exit(await fetchAll(chosen, args));

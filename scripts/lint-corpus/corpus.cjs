// The real-code lint corpus (test/fixtures/lint/real/<id>.json, described in docs/lint-corpus.md):
// reading, validating, blob ids and cache paths. Plain CommonJS so that scripts/lint-corpus.mjs
// runs it without a build and the compiled bench and tests load it by path (types: corpus.d.cts).
'use strict';
const { createHash } = require('node:crypto');
const { readdirSync, readFileSync } = require('node:fs');
const { join, resolve } = require('node:path');

/** Our rule ids (src/lint/linter.ts `rules`; a unit test keeps the two lists equal). */
const ruleIds = Object.freeze([
  'missing-no-grad',
  'accumulated-loss',
  'carried-hidden-state',
  'tensors-kept-for-logging',
  'sampler-shuffle',
  'missing-set-epoch',
  'model-to-device-in-loop',
  'volatile-variable',
  'empty-cache-in-loop',
  'data-parallel',
]);

const verdicts = Object.freeze(['hazard', 'safe', 'ambiguous']);
const projectKeys = new Set(['id', 'repo', 'commit', 'license', 'files', 'labels']);
const labelKeys = new Set(['path', 'line', 'endLine', 'rule', 'verdict', 'reason', 'fix']);
const hex40 = /^[0-9a-f]{40}$/;
const idPattern = /^[a-z0-9]+(?:-[a-z0-9]+)*$/;
const repoPattern = /^[A-Za-z0-9][A-Za-z0-9-]{0,38}\/[A-Za-z0-9._-]{1,100}$/;

/** The git blob id of these bytes, as `git hash-object` prints it. */
function blobSha(bytes) {
  return createHash('sha1').update(`blob ${bytes.length}\0`).update(bytes).digest('hex');
}

/** Why `path` is not a plain relative path inside a repository, or undefined when it is. */
function badPath(path) {
  if (typeof path !== 'string' || path === '') return 'is empty';
  if (path.includes('\\')) return 'contains a backslash (use /)';
  if (path.startsWith('/')) return 'is absolute (give it relative to the repository root)';
  if (path.split('/').some((p) => p === '' || p === '.' || p === '..')) return "has an empty, '.' or '..' part";
  return undefined;
}

const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);
const isLine = (v) => Number.isInteger(v) && v >= 1;

/**
 * Every problem with one project file's parsed JSON, each a sentence naming the file and the
 * field; an empty list when it is valid. `fileName` is the file's base name (`<id>.json`).
 */
function validateProject(value, fileName) {
  const problems = [];
  const say = (what) => problems.push(`${fileName}: ${what}`);
  if (!isObject(value)) {
    say('expected a JSON object with id, repo, commit, license, files, labels');
    return problems;
  }
  for (const k of Object.keys(value)) if (!projectKeys.has(k)) say(`unknown field "${k}" (known: ${[...projectKeys].join(', ')})`);
  const expectedId = fileName.replace(/\.json$/, '');
  if (typeof value.id !== 'string' || !idPattern.test(value.id)) say(`"id" must be lower-case letters, digits and single hyphens, got ${JSON.stringify(value.id)}`);
  else if (value.id !== expectedId) say(`"id" is "${value.id}" but the file is named ${fileName} (they must agree)`);
  if (typeof value.repo !== 'string' || !repoPattern.test(value.repo)) say(`"repo" must be a GitHub owner/name, got ${JSON.stringify(value.repo)}`);
  if (typeof value.commit !== 'string' || !hex40.test(value.commit)) say(`"commit" must be 40 lower-case hex digits, got ${JSON.stringify(value.commit)}`);
  if (typeof value.license !== 'string' || value.license.trim() === '') say('"license" must be an SPDX id or "none found"');
  const files = isObject(value.files) ? value.files : undefined;
  if (!files) say('"files" must be an object of path: git blob sha1');
  else {
    if (Object.keys(files).length === 0) say('"files" is empty');
    for (const [path, sha] of Object.entries(files)) {
      const why = badPath(path);
      if (why) say(`files: path ${JSON.stringify(path)} ${why}`);
      if (typeof sha !== 'string' || !hex40.test(sha)) say(`files["${path}"] must be a git blob sha1 (40 lower-case hex digits), got ${JSON.stringify(sha)}`);
    }
  }
  if (!Array.isArray(value.labels)) {
    say('"labels" must be an array');
    return problems;
  }
  const seen = new Map();
  value.labels.forEach((label, i) => {
    const at = `labels[${i}]`;
    if (!isObject(label)) {
      say(`${at} must be an object`);
      return;
    }
    for (const k of Object.keys(label)) if (!labelKeys.has(k)) say(`${at}: unknown field "${k}" (known: ${[...labelKeys].join(', ')})`);
    if (typeof label.path !== 'string' || !files || !Object.prototype.hasOwnProperty.call(files, label.path)) say(`${at}: path ${JSON.stringify(label.path)} is not listed in "files"`);
    if (!isLine(label.line)) say(`${at}: "line" must be a whole number of at least 1, got ${JSON.stringify(label.line)}`);
    if (label.endLine !== undefined && (!isLine(label.endLine) || !isLine(label.line) || label.endLine < label.line)) say(`${at}: "endLine" must be a whole number not before "line", got ${JSON.stringify(label.endLine)}`);
    if (!ruleIds.includes(label.rule)) say(`${at}: unknown rule ${JSON.stringify(label.rule)} (known: ${ruleIds.join(', ')})`);
    if (!verdicts.includes(label.verdict)) say(`${at}: "verdict" must be "hazard", "safe" or "ambiguous", got ${JSON.stringify(label.verdict)}`);
    if (typeof label.reason !== 'string' || label.reason.trim() === '') say(`${at}: "reason" must say why, in a sentence`);
    if (label.fix !== undefined && (typeof label.fix !== 'string' || !/^https:\/\/\S+$/.test(label.fix))) say(`${at}: "fix" must be an https:// link to the project's fix, got ${JSON.stringify(label.fix)}`);
    if (typeof label.path === 'string' && isLine(label.line) && typeof label.rule === 'string') {
      // Two labels of one rule whose line ranges overlap would both claim the same finding.
      const end = isLine(label.endLine) ? label.endLine : label.line;
      const key = `${label.path}\0${label.rule}`;
      for (const other of seen.get(key) ?? []) {
        if (label.line <= other.end && other.line <= end) say(`${at}: ${label.path}:${label.line} ${label.rule} overlaps labels[${other.index}] (${label.path}:${other.line}); one finding would match both`);
      }
      seen.set(key, [...(seen.get(key) ?? []), { line: label.line, end, index: i }]);
    }
  });
  return problems;
}

/**
 * Reads and validates every `<id>.json` in `dir`. A file that is not JSON is a problem naming
 * it (and its project is left out); so is anything else wrong in it.
 */
function readCorpus(dir) {
  const projects = [];
  const problems = [];
  let names;
  try {
    names = readdirSync(dir).filter((n) => n.endsWith('.json')).sort();
  } catch (err) {
    return { projects, problems: [`cannot read the corpus folder ${dir}: ${err.message}`] };
  }
  for (const name of names) {
    let value;
    try {
      value = JSON.parse(readFileSync(join(dir, name), 'utf8'));
    } catch (err) {
      problems.push(`${name}: not valid JSON: ${err.message}`);
      continue;
    }
    const found = validateProject(value, name);
    problems.push(...found);
    if (found.length === 0) projects.push(value);
  }
  return { projects, problems };
}

/** Where the committed project files are. */
const corpusFolder = (repoRoot) => join(repoRoot, 'test', 'fixtures', 'lint', 'real');

/** The cache of fetched files: $LINT_CORPUS_DIR, else <repo>/.lint-corpus. */
const cacheFolder = (repoRoot, env = process.env) => (env.LINT_CORPUS_DIR ? resolve(env.LINT_CORPUS_DIR) : join(repoRoot, '.lint-corpus'));

module.exports = { ruleIds, verdicts, blobSha, badPath, validateProject, readCorpus, corpusFolder, cacheFolder };

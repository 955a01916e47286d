#!/usr/bin/env node
// The whole test suite, one command (`npm test`), or one layer (`npm test -- unit|browser|e2e`).
// Builds once, type-checks and lints, then runs each layer with mocha and prints one closing
// line `N passed, N failed` summed over the layers. Exit code 1 if anything failed.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
process.chdir(root);
const layers = ['unit', 'browser', 'e2e'];
const wanted = process.argv.slice(2).filter((a) => layers.includes(a));
const run = wanted.length ? wanted : layers;

function sh(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: 'inherit', ...opts });
  return r.status ?? 1;
}
function step(name, cmd, args) {
  console.log(`\n== ${name}`);
  const code = sh(cmd, args);
  if (code !== 0) {
    console.error(`\n${name} failed (exit ${code})`);
    console.log('0 passed, 1 failed');
    process.exit(1);
  }
}
function testFiles(dir) {
  if (!existsSync(dir)) return [];
  const out = [];
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) out.push(...testFiles(p));
    else if (e.endsWith('.test.js')) out.push(p);
  }
  return out.sort();
}

step('build (webpack)', 'npm', ['run', '--silent', 'build']);
step('type-check and compile tests (tsc)', 'npm', ['run', '--silent', 'compile']);
step('lint (eslint)', 'npm', ['run', '--silent', 'lint']);
if (run.some((l) => l !== 'unit')) step('test dependencies (chromium, code-server)', 'bash', ['scripts/setup-test-deps.sh', ...run.filter((l) => l !== 'unit')]);

let passed = 0, failed = 0, pending = 0;
for (const layer of run) {
  const files = testFiles(join('out', 'test', layer));
  console.log(`\n== ${layer} tests (${files.length} files)`);
  if (files.length === 0) continue;
  const r = spawnSync(process.execPath, [join('node_modules', 'mocha', 'bin', 'mocha.js'), '--reporter', 'spec', '--no-color', '--timeout', layer === 'unit' ? '20000' : '180000', ...files], {
    stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8', maxBuffer: 1 << 28, env: { ...process.env, FORCE_COLOR: '0', E2E_SKIP_BUILD: '1' },
  });
  process.stdout.write(r.stdout ?? '');
  // mocha's summary comes last; take the last match so a test's own log line cannot fool the count.
  const num = (re) => Number([...(r.stdout ?? '').matchAll(new RegExp(re.source, re.flags + 'g'))].at(-1)?.[1] ?? 0);
  const p = num(/^ {2}(\d+) passing/m), f = num(/^ {2}(\d+) failing/m), s = num(/^ {2}(\d+) pending/m);
  passed += p; failed += f; pending += s;
  if (r.status !== 0 && f === 0) { console.error(`${layer}: mocha exited ${r.status} without a failing count`); failed += 1; }
}
console.log(`\n${passed} passed, ${failed} failed${pending ? `, ${pending} skipped` : ''}`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);

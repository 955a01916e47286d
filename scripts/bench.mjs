#!/usr/bin/env node
// `npm run bench [-- name...]`: compiles, then runs every benchmark under bench/<name>/ (each
// prints its results as ratios against an anchor measured in the same run). Benchmarks are
// never part of `npm test`: they measure, they don't pass or fail.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
process.chdir(root);
const wanted = process.argv.slice(2);
const c = spawnSync('npx', ['tsc', '-p', '.'], { stdio: 'inherit' });
if (c.status !== 0) process.exit(c.status ?? 1);
let failed = 0;
for (const dir of readdirSync('bench', { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name).sort()) {
  if (wanted.length && !wanted.includes(dir)) continue;
  for (const file of readdirSync(join('bench', dir)).filter((f) => /\.(ts|mjs)$/.test(f) && !f.startsWith('_')).sort()) {
    const target = file.endsWith('.ts') ? join('out', 'bench', dir, file.replace(/\.ts$/, '.js')) : join('bench', dir, file);
    if (!existsSync(target)) continue;
    console.log(`\n== bench/${dir}/${file}`);
    const r = spawnSync(process.execPath, [target], { stdio: 'inherit' });
    if (r.status !== 0) failed++;
  }
}
process.exit(failed ? 1 : 0);

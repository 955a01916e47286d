/**
 * Robustness of the lint engine under seeded mutations of real files.
 *
 *   npx tsc -p . && node out/bench/lint/fuzz.js [--mutations N] [--seed S] [--chain K] [--top T] [--no-torch]
 *
 * Sources: the lint fixtures, and the `.py` files of Debian's python3-torch under
 * /usr/lib/python3/dist-packages/torch when present. N mutations (default 100,000) in chains
 * of K (default 25): each chain starts from a real file picked by the seed and applies K
 * mutations one after another (test/unit/lint/mutations.ts: spans deleted, inserted,
 * duplicated, moved; brackets and strings left open; deep nesting; long lines), each given
 * to the linter the way the language server does (`setFile` on the change, incremental
 * re-parse and re-analysis, then `lintFile`). Reports:
 * - crashes: an exception out of the linter, or a rule's internal error (onError);
 * - ranges outside the document: a finding's or fix's range past a line's end or the last line;
 * - mismatches: a chain's last text linted from scratch gives other findings than incrementally;
 * - skipped files (over the size limits) and the slowest steps, each re-measured against a
 *   plain tree-sitter parse of the same text in the same run (CPU time, so that other
 *   processes on a shared machine count less), with what the mutation was.
 * Exit status 1 when there was a crash, a range outside or a mismatch.
 */
import { readFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { walkPython } from '../../src/lint/files';
import { createLinter } from '../../src/lint/linter';
import { loadPython, PythonParser } from '../../src/lint/parser';
import type { Finding } from '../../src/lint/types';
import { mulberry32 } from '../../src/common/random';
import { fixtures, repoRoot } from '../../test/paths';
import { lineLengths, mutate, rangeProblem } from '../../test/unit/lint/mutations';

const torchDir = '/usr/lib/python3/dist-packages/torch';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  if (i === -1) return fallback;
  const v = Number(process.argv[i + 1]);
  if (!Number.isFinite(v) || v < 0) throw new Error(`--${name} wants a number, got ${process.argv[i + 1]}`);
  return v;
}

function cpuMs(fn: () => void): number {
  const t = process.cpuUsage();
  fn();
  const d = process.cpuUsage(t);
  return (d.user + d.system) / 1000;
}

interface Slow {
  readonly ms: number;
  readonly source: string;
  readonly kinds: string;
  readonly text: string;
  readonly chars: number;
  readonly lines: number;
  readonly longestLine: number;
}

const describe = (fs: readonly Finding[]): string => fs.map((f) => `${f.range.start.line}:${f.range.start.character}-${f.range.end.line}:${f.range.end.character} ${f.ruleId} ${f.message}`).join('\n');

async function main(): Promise<void> {
  const total = arg('mutations', 100_000);
  const seed = arg('seed', 1);
  const chain = Math.max(1, arg('chain', 25));
  const top = arg('top', 10);
  const files: string[] = [];
  walkPython(join(fixtures, 'lint'), files);
  const fixtureCount = files.length;
  if (!process.argv.includes('--no-torch') && existsSync(torchDir)) walkPython(torchDir, files, 100_000);
  const sources = files.map((path) => ({ path, text: readFileSync(path, 'utf8') }));
  console.log(`sources: ${fixtureCount} fixtures, ${sources.length - fixtureCount} torch files; ${total} mutations in chains of ${chain}, seed ${seed}`);

  const errors: string[] = [];
  const incremental = await createLinter({ incremental: true, onError: (path, err) => errors.push(`${path}: ${err instanceof Error ? err.stack ?? err.message : String(err)}`) });
  const fresh = await createLinter({ onError: (path, err) => errors.push(`(from scratch) ${path}: ${err instanceof Error ? err.message : String(err)}`) });
  const parser = new PythonParser(await loadPython());
  const r = mulberry32(seed);
  const crashes: string[] = [];
  const outside: string[] = [];
  const mismatches: string[] = [];
  const slow: Slow[] = [];
  const outDir = join(repoRoot, 'bench', 'results', 'lint-fuzz');
  let done = 0;
  let steps = 0;
  let skipped = 0;
  let lintMs = 0;
  const started = Date.now();
  const save = (what: string, text: string): string => {
    mkdirSync(outDir, { recursive: true });
    const file = join(outDir, `${what}-${seed}-${done}.py`);
    writeFileSync(file, text);
    return file;
  };
  // The fixtures are small and many mutations of them stay cheap; torch's files are half the chains.
  while (done < total) {
    const source = r() < 0.5 || sources.length === fixtureCount ? sources[Math.floor(r() * fixtureCount)] : sources[fixtureCount + Math.floor(r() * (sources.length - fixtureCount))];
    const path = `/fuzz/${source.path.replace(/[^\w.]+/g, '_')}`;
    let text = source.text;
    const kinds: string[] = [];
    try {
      incremental.lintFile(path, text);
      for (let k = 0; k < chain && done < total; k++, done++) {
        const m = mutate(text, r);
        text = m.text;
        kinds.push(m.kind);
        errors.length = 0;
        let found: Finding[] = [];
        const ms = cpuMs(() => {
          incremental.setFile(path, text);
          found = incremental.lintFile(path);
        });
        steps++;
        lintMs += ms;
        if (incremental.skipReason(path)) skipped++;
        if (errors.length) crashes.push(`${source.path} after ${kinds.join(', ')}: ${errors[0]} (text: ${save('crash', text)})`);
        const lengths = lineLengths(text);
        for (const f of found) {
          for (const range of [f.range, ...f.fixes.flatMap((x) => x.edits.map((e) => e.range))]) {
            const problem = rangeProblem(text, range, lengths);
            if (problem) outside.push(`${source.path} after ${kinds.join(', ')}: ${f.ruleId} ${problem} (text: ${save('outside', text)})`);
          }
        }
        if (slow.length < top || ms > slow[slow.length - 1].ms) {
          slow.push({ ms, source: source.path, kinds: kinds.slice(-3).join(', '), text, chars: text.length, lines: lengths.length, longestLine: Math.max(...lengths) });
          slow.sort((a, b) => b.ms - a.ms);
          slow.length = Math.min(slow.length, top);
        }
      }
      const got = incremental.lintFile(path);
      fresh.removeFile(path);
      const expected = fresh.lintFile(path, text);
      if (describe(got) !== describe(expected)) mismatches.push(`${source.path} after ${kinds.join(', ')}: incremental\n${describe(got)}\nfrom scratch\n${describe(expected)}\n(text: ${save('mismatch', text)})`);
    } catch (err) {
      crashes.push(`${source.path} after ${kinds.join(', ')}: threw ${err instanceof Error ? err.stack ?? err.message : String(err)} (text: ${save('crash', text)})`);
    } finally {
      incremental.removeFile(path);
      fresh.removeFile(path);
    }
    if (done % 5000 < chain) console.log(`  ${done} mutations, ${((Date.now() - started) / 1000).toFixed(0)} s`);
  }
  console.log(`${steps} incremental lints, ${(lintMs / 1000).toFixed(1)} s CPU (${(lintMs / steps).toFixed(2)} ms mean); ${skipped} skipped over the size limits`);
  console.log(`crashes: ${crashes.length}`);
  for (const c of crashes.slice(0, 10)) console.log(`  ${c}`);
  console.log(`ranges outside the document: ${outside.length}`);
  for (const c of outside.slice(0, 10)) console.log(`  ${c}`);
  console.log(`incremental != from scratch: ${mismatches.length}`);
  for (const c of mismatches.slice(0, 5)) console.log(`  ${c}`);
  console.log(`slowest ${slow.length} steps (CPU ms of the incremental step; then a from-scratch lint and a plain parse of the same text, the anchor):`);
  for (const [i, s] of slow.entries()) {
    const parse = Math.min(cpuMs(() => parser.parse(s.text).delete()), cpuMs(() => parser.parse(s.text).delete()));
    fresh.removeFile('/fuzz/slow.py');
    const full = cpuMs(() => fresh.lintFile('/fuzz/slow.py', s.text));
    fresh.removeFile('/fuzz/slow.py');
    console.log(`  ${s.ms.toFixed(0)} ms step, ${full.toFixed(0)} ms from scratch = ${(full / Math.max(parse, 0.01)).toFixed(1)}x parse (${parse.toFixed(0)} ms); ${s.chars} chars, ${s.lines} lines, longest ${s.longestLine}; ${s.source} after ${s.kinds}; text: ${save(`slow${i + 1}`, s.text)}`);
  }
  parser.delete();
  incremental.dispose();
  fresh.dispose();
  process.exitCode = crashes.length || outside.length || mismatches.length ? 1 : 0;
}

void main();

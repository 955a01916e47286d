/**
 * What linting costs against its anchor, a plain tree-sitter parse of the same text.
 *
 *   npx tsc -p . && node out/bench/lint/lint.js [corpus-folder]
 *
 * Builds ~1,000- and ~5,000-line files from the fixture corpus (real training-script code),
 * then times, as medians: a plain parse (the anchor), a full lint (parse, model, all rules),
 * and a re-lint after a one-character edit (incremental re-parse and re-analysis), median
 * and p95, for one identifier edited back and forth and for characters typed at 41 seeded
 * places through the file. The target: under 20 ms median at 5,000 lines. With a folder argument
 * (e.g. the Python sources of Debian's python3-torch), it also lints every .py file in it
 * and prints lines per second and every finding, for review.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { walkPython } from '../../src/lint/files';
import { createLinter, Linter } from '../../src/lint/linter';
import { loadPython, PythonParser } from '../../src/lint/parser';
import { fixtures } from '../../test/paths';
import { mulberry32 } from '../../src/common/random';

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function p95(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.95))];
}

function times(fn: (i: number) => void, runs: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t = process.hrtime.bigint();
    fn(i);
    out.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  return out;
}

function time(fn: (i: number) => void, runs: number): number {
  return median(times(fn, runs));
}


function corpusOf(lines: number): string {
  const files: string[] = [];
  walkPython(join(fixtures, 'lint'), files);
  const texts = files.filter((f) => !f.includes('malformed')).map((f) => readFileSync(f, 'utf8'));
  let out = '';
  for (let i = 0; out.split('\n').length < lines; i++) out += `${texts[i % texts.length]}\n`;
  return out;
}

async function main(): Promise<void> {
  const language = await loadPython();
  const parser = new PythonParser(language);
  const linter = await createLinter({ incremental: true });
  for (const lines of [1000, 5000]) {
    const text = corpusOf(lines);
    const n = text.split('\n').length;
    const parse = time(() => parser.parse(text).delete(), 15);
    // A fresh workspace each run: the full cost of a file opened for the first time.
    const runs: number[] = [];
    for (let i = 0; i < 15; i++) {
      const fresh = new Linter(new PythonParser(language));
      runs.push(time(() => fresh.lintFile('/bench/full.py', text), 1));
      fresh.dispose();
    }
    const full = median(runs);
    linter.lintFile('/bench/edit.py', text);
    const at = text.indexOf('total');
    let flip = false;
    const edit = times(() => {
      flip = !flip;
      linter.lintFile('/bench/edit.py', text.slice(0, at) + (flip ? 'x' : '') + text.slice(at));
    }, 41);
    // Typing: one character typed into an identifier, then the next one, at 41 seeded places
    // through the file (each edit builds on the previous text, as in an editor).
    const r = mulberry32(lines);
    let typed = text;
    linter.lintFile('/bench/typed.py', typed);
    const typing = times(() => {
      const ids = /[A-Za-z_][A-Za-z_0-9]*/g;
      ids.lastIndex = Math.floor(r() * typed.length);
      const m = ids.exec(typed) ?? ids.exec(typed);
      const pos = m ? m.index + 1 : 0;
      typed = `${typed.slice(0, pos)}q${typed.slice(pos)}`;
      linter.lintFile('/bench/typed.py', typed);
    }, 41);
    const ms = (xs: number[]) => `median ${median(xs).toFixed(1)} ms = ${(median(xs) / parse).toFixed(2)}x parse, p95 ${p95(xs).toFixed(1)} ms`;
    console.log(`${n} lines: parse ${parse.toFixed(1)} ms (anchor) | full lint ${full.toFixed(1)} ms = ${(full / parse).toFixed(1)}x parse`);
    console.log(`  re-lint after one edit (the same identifier, changed back and forth): ${ms(edit)}`);
    console.log(`  re-lint after one edit (a character typed into an identifier at 41 places): ${ms(typing)}`);
  }
  const folder = process.argv[2];
  if (folder) {
    const files: string[] = [];
    walkPython(folder, files);
    const sources = files.map((path) => ({ path, text: readFileSync(path, 'utf8') }));
    const lines = sources.reduce((a, s) => a + s.text.split('\n').length, 0);
    const corpusLinter = await createLinter();
    const t = process.hrtime.bigint();
    const results = corpusLinter.lintWorkspace(sources);
    const ms = Number(process.hrtime.bigint() - t) / 1e6;
    console.log(`${folder}: ${files.length} files, ${lines} lines in ${ms.toFixed(0)} ms = ${Math.round(lines / (ms / 1000))} lines/s`);
    for (const [path, findings] of results) for (const f of findings) console.log(`  ${path}:${f.range.start.line + 1}:${f.range.start.character + 1}: ${f.ruleId} ${f.message}`);
  }
  parser.delete();
  linter.dispose();
}

void main();

/**
 * What linting costs against its anchor, a plain tree-sitter parse of the same text.
 *
 *   npx tsc -p . && node out/bench/lint/lint.js [corpus-folder]
 *
 * Builds ~1,000- and ~5,000-line files from the fixture corpus (real training-script code),
 * then times, as medians: a plain parse (the anchor), a full lint (parse, model, all rules),
 * and a re-lint after a one-character edit (incremental re-parse). With a folder argument
 * (e.g. the Python sources of Debian's python3-torch), it also lints every .py file in it
 * and prints lines per second and every finding, for review.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { walkPython } from '../../src/lint/files';
import { createLinter, Linter } from '../../src/lint/linter';
import { loadPython, PythonParser } from '../../src/lint/parser';
import { fixtures } from '../../test/paths';

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function time(fn: () => void, runs: number): number {
  const out: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t = process.hrtime.bigint();
    fn();
    out.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  return median(out);
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
    const edit = time(() => {
      flip = !flip;
      linter.lintFile('/bench/edit.py', text.slice(0, at) + (flip ? 'x' : '') + text.slice(at));
    }, 41);
    console.log(`${n} lines: parse ${parse.toFixed(1)} ms (anchor) | full lint ${full.toFixed(1)} ms = ${(full / parse).toFixed(1)}x parse | re-lint after one edit ${edit.toFixed(1)} ms = ${(edit / parse).toFixed(1)}x parse`);
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

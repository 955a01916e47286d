/**
 * How the linter's cost grows with pathological inputs, against a plain tree-sitter parse of
 * the same text measured in the same run (CPU time of this process, so that other processes on
 * a shared machine count less than in wall-clock time).
 *
 *   npx tsc -p . && node out/bench/lint/scale.js [--quick]
 *
 * Each input at two sizes, 4x apart: a linear cost shows the same ratio to the parse at both.
 * Inputs: the fixture corpus concatenated (up to 50,000 lines, 1.6 MB), the same with every
 * definition renamed apart, all of it inside one function, fixture code flattened to module
 * level (many samplers and loops in one scope), one long line, deep nesting (blocks, brackets,
 * comprehensions) and an unclosed `(` early in a large file. A file over the engine's limits
 * (linter.ts defaultLimits) is skipped: then only the check is timed.
 */
import { Linter } from '../../src/lint/linter';
import { loadPython, PythonParser } from '../../src/lint/parser';
import { fixtureCorpus } from '../../test/unit/lint/corpus';


const inputs: Record<string, (n: number) => string> = {
  'fixture corpus, n lines': (n) => fixtureCorpus(n),
  'corpus, definitions renamed apart': (n) => fixtureCorpus(n, (t, i) => t.replace(/\bdef (\w+)/g, `def $1_${i}`).replace(/\bclass (\w+)/g, `class $1_${i}`)),
  'corpus inside one function': (n) => `import torch\n\ndef main():\n${fixtureCorpus(n).split('\n').map((l) => (/^\s*(import|from) /.test(l) ? '' : `    ${l}`)).join('\n')}`,
  'corpus at module level (defs dropped)': (n) => fixtureCorpus(n).split('\n').filter((l) => !/^\s*(def|class|@)/.test(l)).join('\n'),
  'corpus with every 7th line dedented': (n) => fixtureCorpus(n).split('\n').map((l, i) => (i % 7 === 3 ? l.trimStart() : l)).join('\n'),
  'one line of n/2 list items': (n) => `import torch\nx = [${'1, '.repeat(n / 2)}]\n`,
  'one line of n/16 statements': (n) => `import torch\nfor x in loader: ${'total += model(x); '.repeat(n / 16)}\n`,
  'n/50 nested loops': (n) => {
    let s = 'import torch\n';
    for (let i = 0; i < n / 50; i++) s += `${' '.repeat(i)}for x${i} in loader:\n`;
    return `${s}${' '.repeat(n / 50)}total += model(x).sum()\n`;
  },
  'n/50 nested brackets': (n) => `import torch\nx = ${'('.repeat(n / 50)}loss${')'.repeat(n / 50)}\n`,
  'n/500 nested comprehensions': (n) => `import torch\nx = ${'[model(x) for x in '.repeat(n / 500)}loader${']'.repeat(n / 500)}\n`,
  'corpus with an unclosed ( early': (n) => {
    const t = fixtureCorpus(n);
    const at = t.indexOf('\n', 1000);
    return `${t.slice(0, at)} (${t.slice(at)}`;
  },
};

const cpuMs = (fn: () => void): number => {
  const t = process.cpuUsage();
  fn();
  const d = process.cpuUsage(t);
  return (d.user + d.system) / 1000;
};

async function main(): Promise<void> {
  const language = await loadPython();
  const parser = new PythonParser(language);
  parser.parse('x = 1').delete();
  const sizes = process.argv.includes('--quick') ? [3125, 12500] : [12500, 50000];
  for (const [name, make] of Object.entries(inputs)) {
    const row: string[] = [];
    for (const n of sizes) {
      const text = make(n);
      const parse = Math.min(cpuMs(() => parser.parse(text).delete()), cpuMs(() => parser.parse(text).delete()));
      const linter = new Linter(new PythonParser(language), { incremental: true });
      let findings = 0;
      const lint = cpuMs(() => {
        findings = linter.lintFile('/bench/scale.py', text).length;
      });
      const skipped = linter.skipReason('/bench/scale.py');
      linter.dispose();
      row.push(`${(text.length / 1024).toFixed(0)} KB: parse ${parse.toFixed(0)} ms, lint ${lint.toFixed(0)} ms = ${(lint / Math.max(parse, 0.1)).toFixed(1)}x parse${skipped ? ` (skipped: ${skipped.split(',')[0]})` : `, ${findings} findings`}`);
    }
    console.log(`${name} (n = ${sizes.join(', ')})\n  ${row.join('\n  ')}`);
  }
  parser.delete();
}

void main();

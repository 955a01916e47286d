/** Reads the Python fixture corpus and its `# expect: rule-id[, rule-id]` markers. */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { walkPython } from '../../../src/lint/files';
import { fixtures } from '../../paths';

export const lintFixtures = join(fixtures, 'lint');

/**
 * The lint fixtures (the malformed ones left out) concatenated, in the order `walkPython` lists them, until
 * there are `lines` lines, each text passed through `map` (with its place in the sequence): the issue's
 * "50,000-line file" of bench/lint/scale.ts, ab.ts and pull.ts, and scale.test.ts's input. `dir` is another
 * checkout's fixtures for ab.ts.
 */
export function fixtureCorpus(lines: number, map: (text: string, i: number) => string = (t) => t, dir = lintFixtures): string {
  const files: string[] = [];
  walkPython(dir, files);
  const texts = files.filter((f) => !f.includes('malformed')).map((f) => readFileSync(f, 'utf8'));
  let out = '';
  for (let i = 0, n = 0; n < lines; i++) {
    const t = map(texts[i % texts.length], i);
    out += `${t}\n`;
    n += t.split('\n').length;
  }
  return out;
}

export interface Fixture {
  readonly name: string;
  readonly path: string;
  readonly text: string;
}

export function readFixtures(dir: string, filter: (name: string) => boolean = () => true): Fixture[] {
  return readdirSync(dir)
    .filter((n) => n.endsWith('.py') && filter(n))
    .sort()
    .map((name) => ({ name, path: join(dir, name), text: readFileSync(join(dir, name), 'utf8') }));
}

/** `line:rule` (1-based lines) for every marker in the text, sorted. */
export function expectations(text: string): string[] {
  const out: string[] = [];
  text.split('\n').forEach((line, i) => {
    const m = /#\s*expect:\s*([\w\-, ]+)$/.exec(line);
    if (m) for (const id of m[1].split(',').map((s) => s.trim()).filter(Boolean)) out.push(`${i + 1}:${id}`);
  });
  return out.sort();
}

export const keyOf = (f: { ruleId: string; range: { start: { line: number } } }): string => `${f.range.start.line + 1}:${f.ruleId}`;

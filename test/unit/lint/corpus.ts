/** Reads the Python fixture corpus and its `# expect: rule-id[, rule-id]` markers. */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fixtures } from '../../paths';

export const lintFixtures = join(fixtures, 'lint');

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

import * as assert from 'node:assert/strict';
import { diffEdit } from '../../../src/lint/parser';

/** The plain definition: longest common prefix, then longest common suffix of the rest, positions by counting lines. */
function naive(before: string, after: string): object {
  const max = Math.min(before.length, after.length);
  let start = 0;
  while (start < max && before[start] === after[start]) start++;
  let tail = 0;
  while (tail < max - start && before[before.length - 1 - tail] === after[after.length - 1 - tail]) tail++;
  const point = (text: string, index: number): { row: number; column: number } => {
    const lines = text.slice(0, index).split('\n');
    return { row: lines.length - 1, column: lines[lines.length - 1].length };
  };
  return { startIndex: start, oldEndIndex: before.length - tail, newEndIndex: after.length - tail, startPosition: point(before, start), oldEndPosition: point(before, before.length - tail), newEndPosition: point(after, after.length - tail) };
}

describe('diffEdit', () => {
  it('finds the one changed span and its rows and columns, for seeded random edits of short and long texts', () => {
    let seed = 7;
    const random = (): number => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    const alphabet = 'ab\n\nc';
    const pick = (): string => alphabet[Math.floor(random() * alphabet.length)];
    for (let k = 0; k < 3000; k++) {
      const n = Math.floor(random() * (random() < 0.3 ? 3000 : 40));
      let before = '';
      for (let i = 0; i < n; i++) before += pick();
      const from = Math.floor(random() * (before.length + 1));
      const to = from + Math.floor(random() * Math.min(5, before.length - from + 1));
      let inserted = '';
      for (let i = Math.floor(random() * 4); i > 0; i--) inserted += pick();
      const after = before.slice(0, from) + inserted + before.slice(to);
      const e = diffEdit(before, after);
      const got = { startIndex: e.startIndex, oldEndIndex: e.oldEndIndex, newEndIndex: e.newEndIndex, startPosition: { ...e.startPosition }, oldEndPosition: { ...e.oldEndPosition }, newEndPosition: { ...e.newEndPosition } };
      assert.deepEqual(got, naive(before, after), `edit ${k}: ${JSON.stringify(before.slice(0, 60))} -> ${JSON.stringify(after.slice(0, 60))}`);
    }
  });
});

/**
 * Run by memory.test.ts in a child `node --expose-gc`: plays what the language server does
 * while a user types (incremental re-lints of one document, edits all over it, documents
 * opened and closed) and prints the live heap after a full GC at each stage, as JSON.
 */
import { getHeapSpaceStatistics } from 'node:v8';
import { createLinter } from '../../../src/lint/linter';

/**
 * The live heap after a full GC, without V8's compiled code: what the engine keeps is data, and the
 * code space grows and shrinks with what V8 chose to optimise meanwhile (300 KiB over 200 keystrokes
 * in a heap snapshot, the same before and after a change of the engine's data), so counted in, it
 * made the per-keystroke bound pass or fail with the JIT's timing.
 */
const live = (): number => {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with node --expose-gc');
  gc();
  gc();
  const code = getHeapSpaceStatistics()
    .filter((s) => s.space_name === 'code_space' || s.space_name === 'code_large_object_space')
    .reduce((sum, s) => sum + s.space_used_size, 0);
  return process.memoryUsage().heapUsed - code;
};

/** A top-level function with long names (13+ characters: V8 slices those as views into the text). */
const block = (i: number, value: number): string =>
  `def helper_function_number_${i}(model, training_loader):\n    running_total_value = ${value}\n    for inputs, targets in training_loader:\n        running_total_value += model(inputs).sum().item()\n    return running_total_value\n\n`;

async function main(): Promise<void> {
  const keystrokes = Number(process.argv[2] ?? 200);
  const closes = Number(process.argv[3] ?? 300);
  const linter = await createLinter({ incremental: true });
  const values: number[] = [];
  while (values.length * block(0, 0).length < 80_000) values.push(0);
  const doc = (tail = ''): string => `import torch\n\n${values.map((v, i) => block(i, v)).join('')}${tail}`;
  // Warm up: the document open, a few edits, one other document opened and closed.
  linter.lintFile('/ws/doc.py', doc());
  for (let k = 0; k < 5; k++) linter.lintFile('/ws/doc.py', doc(`def w${k}():\n    pass\n`));
  linter.lintFile('/ws/other.py', `import torch\n\n${block(0, 1)}`);
  linter.removeFile('/ws/other.py');
  const base = live();
  // Typing a new long function name at the end, one keystroke at a time.
  let typed = '';
  for (let k = 0; k < keystrokes; k++) {
    typed += String.fromCharCode(97 + (k % 26));
    linter.lintFile('/ws/doc.py', doc(`def a_long_function_name_being_typed_${typed}():\n    pass\n`));
  }
  const afterTyping = live();
  // One edit in each statement in turn: each re-indexes that statement from a new version of the text.
  for (let i = 0; i < values.length; i++) {
    values[i]++;
    linter.lintFile('/ws/doc.py', doc());
  }
  const afterEdits = live();
  // Documents opened and closed, each defining names no other defines.
  for (let f = 0; f < closes; f++) {
    const text = `import torch\n\n${block(f + 100_000, 0)}${block(f + 200_000, 0)}class UniqueClassNumber${f}(torch.nn.Module):\n    pass\n\nunique_call_number_${f}(1)\n`;
    linter.lintFile(`/ws/closed${f}.py`, text);
    linter.removeFile(`/ws/closed${f}.py`);
  }
  const afterCloses = live();
  const docBytes = doc().length;
  linter.removeFile('/ws/doc.py');
  const index = linter.indexSize();
  const afterAll = live();
  linter.dispose();
  process.stdout.write(`${JSON.stringify({ base, afterTyping, afterEdits, afterCloses, afterAll, docBytes, keystrokes, edits: values.length, closes, index })}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});

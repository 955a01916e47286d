/**
 * The autocast quick fix of an out-of-memory problem: the forward pass and the loss of the training step
 * run under `torch.autocast(device_type="cuda", dtype=torch.bfloat16)` (activations about half; bf16 needs
 * no GradScaler, fp16 would). Offered only where the training step is unambiguous: the file calls
 * `.backward()` exactly once, on a plain name (`loss.backward()`), and that name is assigned in the same
 * block right before it; the statements wrapped are that assignment and the assignments just before it
 * whose names it uses (`output = model(x)`, `loss = criterion(output, y)`). Nothing is offered in a file
 * that already uses autocast or does not `import torch`.
 */
import type { FileModel } from './model';
import { indentUnit, leadingWhitespace } from './fixes';
import { descendants, statementOf, type SyntaxNode } from './syntax';
import type { TextEdit } from './types';

export const autocastHeader = 'with torch.autocast(device_type="cuda", dtype=torch.bfloat16):';

/** The names a statement `a = ...` / `a, b = ...` assigns; empty for any other statement. */
function assigned(model: FileModel, stmt: SyntaxNode): string[] {
  const a = stmt.type === 'expression_statement' ? stmt.children.find((c) => c.type === 'assignment') : undefined;
  const left = a?.children.find((c) => c.field === 'left');
  if (!left) return [];
  if (left.type === 'identifier') return [model.src(left)];
  return left.children.filter((c) => c.type === 'identifier').map((c) => model.src(c));
}

function uses(model: FileModel, stmt: SyntaxNode, names: readonly string[]): boolean {
  const a = stmt.children.find((c) => c.type === 'assignment');
  const right = a?.children.find((c) => c.field === 'right');
  if (!right) return false;
  return [right, ...descendants(right)].some((n) => n.type === 'identifier' && names.includes(model.src(n)));
}

/** The edit that runs the training step's forward and loss under autocast, or undefined when the step is not unambiguous. */
export function autocastEdit(model: FileModel): TextEdit | undefined {
  if (!/^\s*import torch\s*$/m.test(model.text) || /\bautocast\b/.test(model.text)) return undefined;
  const backward = [...descendants(model.root)].filter((n) => n.type === 'call' && model.methodCall(n)?.method === 'backward');
  if (backward.length !== 1) return undefined;
  const mc = model.methodCall(backward[0]);
  if (!mc || mc.receiver.type !== 'identifier') return undefined;
  const name = model.src(mc.receiver);
  const stmt = statementOf(backward[0]);
  const block = stmt?.parent;
  if (!stmt || !block) return undefined;
  const siblings = block.children.filter((c) => c.named && c.type !== 'comment');
  const at = siblings.indexOf(stmt);
  const loss = siblings[at - 1];
  if (!loss || !assigned(model, loss).includes(name)) return undefined;
  let first = at - 1;
  while (first > 0 && assigned(model, siblings[first - 1]).length && uses(model, siblings[first], assigned(model, siblings[first - 1]))) first--;
  const top = siblings[first];
  const unit = indentUnit(model);
  const indent = leadingWhitespace(model.line(top.startRow));
  // Lines inside a multi-line string keep their text.
  const insideString = new Set<number>();
  for (const s of siblings.slice(first, at)) {
    for (const d of descendants(s)) if (d.type === 'string' && d.endRow > d.startRow) for (let r = d.startRow + 1; r <= d.endRow; r++) insideString.add(r);
  }
  const lines: string[] = [];
  for (let r = top.startRow; r <= loss.endRow; r++) {
    const line = model.line(r).replace(/\r$/, '');
    lines.push(line.trim() === '' || insideString.has(r) ? line : unit + line);
  }
  const lastLine = model.line(loss.endRow).replace(/\r$/, '');
  return {
    range: { start: { line: top.startRow, character: 0 }, end: { line: loss.endRow, character: lastLine.length } },
    newText: `${indent}${autocastHeader}\n${lines.join('\n')}`,
  };
}

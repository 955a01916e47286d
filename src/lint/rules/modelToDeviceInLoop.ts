/**
 * model-to-device-in-loop: `model.to(device)` / `model.cuda()` of a module on every
 * iteration of the batch loop, where it belongs once, before the loop.
 *
 * Only modules: a receiver built from an `nn` class or a workspace `nn.Module`, one whose
 * `.parameters()` / `.eval()` / `.train()` is called, or one with a model's name (`model`,
 * `net`, `encoder`…). Batch tensors (`x.to(device)`) are what a loop is for and never match.
 */
import { rangeOf, removeStatement } from '../fixes';
import { lastName, type FileModel } from '../model';
import { optimizerLike } from '../model/types';
import type { Rule } from '../rule';
import { ancestors, child, contains, descendants, isScopeNode, loopTypes, namedChildren, unparen, type SyntaxNode } from '../syntax';
import { docsUrlFor, type Fix, type RawFinding, type TextEdit } from '../types';

const id = 'model-to-device-in-loop';
const strictModelName = /^(model|net|network|backbone|encoder|decoder|classifier|generator|discriminator|teacher|student|unet|vae|ema_model)$/i;
const loaderText = /loader|dataloader|\bdl\b|_dl\b/i;
/** Statements that make a move conditional: it is then not every iteration. */
const conditional = new Set(['if_statement', 'elif_clause', 'else_clause', 'except_clause', 'finally_clause', 'conditional_expression', 'boolean_operator', 'lambda']);

export const rule: Rule = {
  id,
  // Info, not warning: what it reports (a model already on the device, moved again) cost nothing measurable
  // on an H200 and about 2 ms a step for a 288-tensor transformer (docs/rules/model-to-device-in-loop.md).
  defaultSeverity: 'info',
  summary: 'model.to(device) / model.cuda() runs on every iteration of the training loop instead of once before it.',
  explanation:
    'Moving a module is not free even when it is already on the device: `Module.to()` walks every parameter, buffer and gradient and checks each one, every step ' +
    '(about 2 ms for a 288-tensor transformer; nothing measurable for a small CNN on an H200). Memory is not affected while the model stays on the device; ' +
    'a loop that also moves it away (`model.cpu()`), where each iteration would copy every weight back and fragment the caching allocator, is deliberate offloading and not reported. ' +
    'Move the model once, before the loop (and before building the optimizer).',
  docsUrl: docsUrlFor(id),
  check,
};

function check(model: FileModel): RawFinding[] {
  const findings: RawFinding[] = [];
  for (const call of model.targetCalls()) {
    const mc = model.methodCall(call);
    if (!mc || (mc.method !== 'to' && mc.method !== 'cuda')) continue;
    const receiver = unparen(mc.receiver);
    if ((receiver.type !== 'identifier' && receiver.type !== 'attribute') || model.src(receiver) === 'self') continue;
    if (mc.method === 'to' && !movesToDevice(model, call)) continue;
    if (!isModule(model, receiver, call)) continue;
    const moving = movingStatement(model, call);
    if (!moving) continue;
    const { stmt } = moving;
    const loop = batchLoopOf(model, stmt);
    if (!loop) continue;
    const key = model.src(receiver);
    const names = moving.assigned ? [key, moving.assigned] : [key];
    if (boundIn(model, loop, stmt, names) || movedAwayIn(model, loop, key)) continue;
    const right = child(loop, 'right') ?? child(loop, 'condition');
    const fix = fixFor(model, stmt, loop);
    findings.push({
      message: `\`${model.src(call)}\` moves the model on every iteration of the loop${right ? ` over \`${model.src(right).split('\n')[0]}\`` : ''}: move it once, before the loop.`,
      range: rangeOf(call),
      fixes: fix ? [fix] : [],
    });
  }
  return findings;
}

/** `.to(device)`, `.to("cuda")`, `.to(rank)`: not a dtype-only or memory-format-only conversion. */
function movesToDevice(model: FileModel, call: SyntaxNode): boolean {
  if (model.keywordArg(call, 'device')) return true;
  const first = model.positionalArgs(call)[0];
  if (!first) return false;
  const q = model.qualify(first) ?? '';
  return !/^torch\.(float|double|half|bfloat16|float16|float32|float64|int|long|bool|uint8|int8|int16|int32|int64|complex64|complex128|channels_last|contiguous_format)$/.test(q) && !/dtype/i.test(model.src(first));
}

function isModule(model: FileModel, receiver: SyntaxNode, at: SyntaxNode): boolean {
  if (model.isKnownModule(receiver, at)) return true;
  return strictModelName.test(lastName(model.src(receiver))) && model.isModelExpr(receiver, at);
}

/** `model.to(device)` or `model = model.to(device)` (any plain name on the left) as a statement of its own; other shapes are not reported. */
function movingStatement(model: FileModel, call: SyntaxNode): { stmt: SyntaxNode; assigned: string | undefined } | undefined {
  const parent = call.parent;
  if (parent?.type === 'expression_statement') return { stmt: parent, assigned: undefined };
  if (parent?.type === 'assignment' && call.field === 'right') {
    const left = child(parent, 'left');
    if ((left?.type === 'identifier' || left?.type === 'attribute') && parent.parent?.type === 'expression_statement') return { stmt: parent.parent, assigned: model.src(left) };
  }
  return undefined;
}

/** The innermost loop around `stmt` that runs once per batch, with nothing conditional in between; undefined otherwise. */
function batchLoopOf(model: FileModel, stmt: SyntaxNode): SyntaxNode | undefined {
  for (const a of ancestors(stmt)) {
    if (isScopeNode(a) || conditional.has(a.type)) return undefined;
    if (loopTypes.has(a.type) && isBatchLoop(model, a)) return a;
  }
  return undefined;
}

/** It iterates a loader, or its own body (not a nested loop's) runs backward or an optimizer step. */
function isBatchLoop(model: FileModel, loop: SyntaxNode): boolean {
  const right = child(loop, 'right');
  if (loop.type === 'for_statement' && right && loaderText.test(model.src(right))) return true;
  for (const d of descendants(loop, (n) => isScopeNode(n) || (n !== loop && loopTypes.has(n.type)))) {
    if (d.type !== 'call') continue;
    const mc = model.methodCall(d);
    if (!mc) continue;
    if (mc.method === 'backward' || mc.method === 'manual_backward' || (mc.method === 'step' && optimizerLike.test(model.src(mc.receiver)))) return true;
  }
  return false;
}

/** Is any of these names bound inside `loop` (other than by `stmt` itself)? */
function boundIn(model: FileModel, loop: SyntaxNode, stmt: SyntaxNode, names: readonly string[]): boolean {
  const scope = model.scopeOf(stmt);
  return names.some((n) => model.bindingsIn(scope, n).some((b) => contains(loop, b.target) && !contains(stmt, b.target)));
}

/** Deliberate offloading: the loop also moves the same module to the CPU. */
function movedAwayIn(model: FileModel, loop: SyntaxNode, key: string): boolean {
  for (const d of descendants(loop)) {
    if (d.type !== 'call') continue;
    const mc = model.methodCall(d);
    if (!mc || model.src(unparen(mc.receiver)) !== key) continue;
    if (mc.method === 'cpu') return true;
    if (mc.method === 'to' && /cpu/.test(model.src(child(d, 'arguments') ?? d))) return true;
  }
  return false;
}

/** Root names the statement reads (`device`, `args` of `args.device`), which must exist before the loop. */
function namesRead(model: FileModel, stmt: SyntaxNode): string[] {
  const out = new Set<string>();
  for (const d of descendants(stmt)) {
    if (d.type !== 'identifier') continue;
    const p = d.parent;
    if (p?.type === 'attribute' && d.field === 'attribute') continue;
    if (p?.type === 'keyword_argument' && d.field === 'name') continue;
    out.add(model.src(d));
  }
  return [...out];
}

/** Moves the statement above the outermost loop (within the batch loop's scope) whose body binds none of the names it reads. */
function fixFor(model: FileModel, stmt: SyntaxNode, batchLoop: SyntaxNode): Fix | undefined {
  const names = namesRead(model, stmt);
  if (boundIn(model, batchLoop, stmt, names)) return undefined;
  let target = batchLoop;
  for (const a of ancestors(batchLoop)) {
    if (isScopeNode(a)) break;
    if (loopTypes.has(a.type)) {
      if (boundIn(model, a, stmt, names)) break;
      target = a;
    }
  }
  const text = model.src(stmt);
  const remove = removeStatement(model, stmt);
  // Already done before the loop: removing the copy inside is enough.
  const before = target.parent ? namedChildren(target.parent).filter((s) => s.order < target.order && s.end - s.start === text.length && model.src(s) === text) : [];
  if (before.length > 0) return { title: `Remove \`${text}\` (already done before the loop)`, edits: [remove] };
  const indent = /^[ \t]*/.exec(model.line(target.startRow))?.[0] ?? '';
  const at = { line: target.startRow, character: 0 };
  const insert: TextEdit = { range: { start: at, end: at }, newText: `${indent}${text}\n` };
  return { title: `Move \`${text}\` before the loop`, edits: [insert, remove] };
}

/**
 * tensors-kept-for-logging: a model's outputs (logits, probabilities, features), with no
 * autograd history, appended batch after batch to a list that lives for the whole loop,
 * so they stay on the GPU until the epoch ends: an evaluation loop under `no_grad`, or
 * `.detach()`ed outputs kept for an epoch metric.
 *
 * Values that do carry history are `accumulated-loss`'s (the same line is never reported
 * twice). Reductions (`argmax`, comparisons, `.sum()`) are small and not reported;
 * see docs/rules/tensors-kept-for-logging.md for why.
 */
import { appendToExpression, rangeOf } from '../fixes';
import type { FileModel } from '../model';
import type { Rule } from '../rule';
import { baseOf, child, contains, descendants, isScopeNode, unparen, type SyntaxNode } from '../syntax';
import { docsUrlFor, type RawFinding } from '../types';

const id = 'tensors-kept-for-logging';
/** Methods whose result has the size of their receiver and stays on its device. */
const sizeKeeping = new Set(['detach', 'float', 'half', 'double', 'bfloat16', 'squeeze', 'unsqueeze', 'view', 'view_as', 'reshape', 'reshape_as', 'flatten', 'contiguous', 'clone', 'softmax', 'log_softmax', 'sigmoid', 'exp', 'tanh', 'relu', 'permute', 'transpose', 't', 'type', 'to', 'cuda', 'data']);
const sizeKeepingTorch = /^torch\.(softmax|log_softmax|sigmoid|tanh|exp|relu|flatten|squeeze|unsqueeze|clone|nn\.functional\.(softmax|log_softmax|sigmoid|tanh|relu|gelu|normalize))$/;
const notTensor = /^(shape|dtype|device|requires_grad|is_cuda|ndim|grad_fn|is_leaf)$/;
/** Evidence that the file runs on a GPU at all; a CPU-only script keeps nothing on a GPU (the loop must also move its batches). */
const gpuEvidence = /cuda|accelerator|local_rank|\bgpu/i;
const gpuEvidenceOf = new WeakMap<FileModel, boolean>();

/**
 * Whether the file's text shows it runs on a GPU, read once per file version: the rule runs
 * once per top-level statement, and scanning the whole text each time was 6% of linting
 * torch's sources. A fact of the whole file, so the incremental linter compares it after
 * each edit (sharedSignature): a `"cuda"` typed anywhere can turn findings on in every statement.
 */
export function showsGpu(model: FileModel): boolean {
  let v = gpuEvidenceOf.get(model);
  if (v === undefined) gpuEvidenceOf.set(model, (v = gpuEvidence.test(model.text)));
  return v;
}

export const rule: Rule = {
  id,
  defaultSeverity: 'warning',
  summary: 'Model outputs are appended to a list that lives for the whole loop, so they stay on the GPU until it ends.',
  explanation:
    'Each appended output keeps its GPU memory (and, for a slice such as `out[:, -1]`, the whole tensor it views) until the list is dropped. ' +
    'Collecting logits or features for an epoch metric therefore grows GPU memory by one batch of outputs per step: with a large evaluation set or vocabulary that is gigabytes, ' +
    'and the out-of-memory error comes at the end of validation, after the training epoch is spent. ' +
    'Move each batch to the CPU as it is collected (`.cpu()`, or `.detach().cpu()` outside `no_grad`), or keep only what the metric needs (`argmax`, a running sum).',
  docsUrl: docsUrlFor(id),
  check,
};

function check(model: FileModel): RawFinding[] {
  if (!showsGpu(model)) return [];
  const findings: RawFinding[] = [];
  for (const stmt of model.targetNodes((n) => n.type === 'ERROR')) {
    if (stmt.type !== 'expression_statement') continue;
    const acc = model.accumulation(stmt);
    if (!acc || acc.kind !== 'list') continue;
    if (!isFullOutput(model, acc.value, 0) || model.carriesHistory(acc.value)) continue;
    const base = baseOf(acc.target);
    if (base.type !== 'identifier' && base.type !== 'attribute') continue;
    const key = model.src(base);
    if (model.reachesBackward(key, stmt)) continue;
    const loop = model.stepLoopOf(stmt);
    if (!loop || sampled(model, stmt, loop) || !movesToDevice(model, loop) || !keptAcross(model, base, stmt, loop)) continue;
    const suffix = model.gradState(stmt) === 'off' || /\.detach\(\)$/.test(model.src(acc.value)) ? '.cpu()' : '.detach().cpu()';
    const valueText = model.src(acc.value);
    const right = child(loop, 'right');
    findings.push({
      message: `\`${valueText}\` is kept in \`${model.src(acc.target)}\` on the GPU for the whole loop${right ? ` over \`${model.src(right).split('\n')[0]}\`` : ''}: memory grows by one batch of outputs per step; collect \`${valueText}${suffix}\`.`,
      range: rangeOf(stmt),
      // Moving one list to the CPU while a sibling (the labels) stays on the GPU would break the metric that compares them.
      fixes: gpuSiblings(model, loop, stmt) ? [] : [{ title: `Collect \`${valueText}${suffix}\` instead`, edits: [appendToExpression(model, acc.value, suffix)] }],
    });
  }
  return findings;
}

/** The loop moves something to a device (`x.cuda()`, `x.to(device)`): its outputs are on the GPU, not a CPU model's. */
function movesToDevice(model: FileModel, loop: SyntaxNode): boolean {
  for (const d of descendants(loop, isScopeNode)) {
    if (d.type !== 'call') continue;
    const mc = model.methodCall(d);
    if (mc?.method === 'cuda') return true;
    const args = child(d, 'arguments');
    if (mc?.method === 'to' && args && model.positionalArgs(d).length + (model.keywordArg(d, 'device') ? 1 : 0) > 0 && !/cpu/.test(model.src(args))) return true;
  }
  return false;
}

/**
 * Another list kept across the same loop collects something that may be a GPU tensor (not
 * visibly moved to the CPU, not a Python number, and not itself a finding of this rule).
 */
function gpuSiblings(model: FileModel, loop: SyntaxNode, stmt: SyntaxNode): boolean {
  for (const d of descendants(loop, isScopeNode)) {
    if (d === stmt || d.type !== 'expression_statement') continue;
    const acc = model.accumulation(d);
    if (!acc || acc.kind !== 'list') continue;
    const base = baseOf(acc.target);
    if ((base.type !== 'identifier' && base.type !== 'attribute') || !keptAcross(model, base, d, loop)) continue;
    const value = unparen(acc.value);
    if (/\.(cpu|numpy|item|tolist)\(\)$/.test(model.src(value)) || value.type === 'string' || value.type === 'integer' || value.type === 'float') continue;
    if (value.type === 'call' && /^(float|int|str|len|bool|round)$/.test(model.src(model.callee(value) ?? value))) continue;
    if (isFullOutput(model, value, 0) && !model.carriesHistory(value)) continue;
    return true;
  }
  return false;
}

/** Kept only every N steps (`if step % 100 == 0:`): a handful of batches, not the epoch. */
function sampled(model: FileModel, stmt: SyntaxNode, loop: SyntaxNode): boolean {
  for (let a = stmt.parent; a && a !== loop; a = a.parent) {
    if (a.type === 'if_statement' || a.type === 'elif_clause') {
      const cond = child(a, 'condition');
      if (cond && /%|==/.test(model.src(cond))) return true;
    }
  }
  return false;
}

/**
 * Is this a model's output, or something of the same size on the same device (a softmax,
 * a slice, a `.detach()`)? Anything that moves to the CPU, reduces, or is of unknown
 * provenance is not.
 */
function isFullOutput(model: FileModel, expr: SyntaxNode, depth: number): boolean {
  const n = unparen(expr);
  if (depth > 12) return false;
  switch (n.type) {
    case 'identifier':
    case 'attribute': {
      if (n.type === 'attribute') {
        const attr = child(n, 'attribute');
        if (attr && notTensor.test(model.src(attr))) return false;
      }
      const b = model.binding(model.src(n), n);
      if (b?.value) return isFullOutput(model, b.value, depth + 1);
      if (b) return false;
      const object = n.type === 'attribute' ? child(n, 'object') : undefined;
      return !!object && model.src(object) !== 'self' && isFullOutput(model, object, depth + 1);
    }
    case 'subscript': {
      const v = child(n, 'value');
      return !!v && isFullOutput(model, v, depth + 1);
    }
    case 'call': {
      if (model.isModelCall(n)) return true;
      const mc = model.methodCall(n);
      const q = model.qualify(model.callee(n)) ?? '';
      if (mc && sizeKeeping.has(mc.method) && !q.startsWith('torch.')) {
        if (mc.method === 'to' && /cpu|numpy/.test(model.src(child(n, 'arguments') ?? n))) return false;
        return isFullOutput(model, mc.receiver, depth + 1);
      }
      if (sizeKeepingTorch.test(q)) {
        const first = model.positionalArgs(n)[0];
        return !!first && isFullOutput(model, first, depth + 1);
      }
      return false;
    }
    default:
      return false;
  }
}

/** The list outlives one iteration of `loop`: bound before it (or an attribute, a parameter, a global), never rebound or cleared inside it. */
function keptAcross(model: FileModel, base: SyntaxNode, stmt: SyntaxNode, loop: SyntaxNode): boolean {
  const key = model.src(base);
  const scope = model.scopeOf(stmt);
  for (const d of descendants(loop, isScopeNode)) {
    if (d.type === 'call') {
      const mc = model.methodCall(d);
      if (mc && model.src(unparen(mc.receiver)) === key && (mc.method === 'clear' || mc.method === 'pop')) return false;
    }
    if (d.type === 'delete_statement' && model.src(d).includes(key)) return false;
  }
  if (base.type === 'attribute') return true;
  const bindings = model.bindingsIn(scope, key);
  if (bindings.some((b) => contains(loop, b.target))) return false;
  if (bindings.length > 0) return true;
  if (scope !== model.root && (model.isParam(scope, key) || model.isGlobalIn(scope, key))) return true;
  return scope !== model.root && model.bindingsIn(model.root, key).length > 0;
}

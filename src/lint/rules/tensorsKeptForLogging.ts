/**
 * tensors-kept-for-logging: a model's outputs (logits, probabilities, features), with no
 * autograd history, appended batch after batch to a list that lives for the whole loop,
 * so they stay on the GPU until the epoch ends: an evaluation loop under `no_grad`, or
 * `.detach()`ed outputs kept for an epoch metric.
 *
 * An output is followed through every definition that reaches the append, rows, arithmetic,
 * and what the project's own functions return; the loop is the batch loop, or one that moves
 * its batch to the device (itself or through a helper). Values that do carry history are
 * `accumulated-loss`'s (the same line is never reported twice). Reductions (`argmax`, comparisons, `.sum()`) are small and not reported;
 * see docs/rules/tensors-kept-for-logging.md for why.
 */
import { appendToExpression, rangeOf } from '../fixes';
import type { FileModel } from '../model';
import type { Rule } from '../rule';
import { ancestors, baseOf, child, contains, descendants, isScopeNode, loopTypes, namedChildren, unparen, type SyntaxNode } from '../syntax';
import { docsUrlFor, type RawFinding } from '../types';
import { resolveCall, returnsOf } from '../model/summaries';
import { lastName, type Binding, type ClassInfo, type FunctionInfo } from '../model/types';

const id = 'tensors-kept-for-logging';
/** Methods whose result has the size of their receiver and stays on its device. */
const sizeKeeping = new Set(['detach', 'float', 'half', 'double', 'bfloat16', 'squeeze', 'unsqueeze', 'view', 'view_as', 'reshape', 'reshape_as', 'flatten', 'contiguous', 'clone', 'softmax', 'log_softmax', 'sigmoid', 'exp', 'tanh', 'relu', 'permute', 'transpose', 't', 'type', 'to', 'cuda', 'data']);
/**
 * Functions whose result is their first argument's values rearranged or transformed, or a
 * model layer applied to them (a pooling layer keeps a feature vector per sample: the
 * features of an Inception network are its last pooling), so a model's output still.
 */
const sizeKeepingTorch = /^(torch\.(softmax|log_softmax|sigmoid|tanh|exp|relu|flatten|squeeze|unsqueeze|clone|nn\.functional\.(softmax|log_softmax|sigmoid|tanh|relu|gelu|normalize|(adaptive_)?(avg|max)_pool[123]d))|einops\.(rearrange|repeat))$/;
const notTensor = /^(shape|dtype|device|requires_grad|is_cuda|ndim|grad_fn|is_leaf)$/;
/** Evidence that the file runs on a GPU at all; a CPU-only script keeps nothing on a GPU (the loop must also move its batches). */
const gpuEvidence = /cuda|accelerator|local_rank|\bgpu/gi;
const gpuEvidenceOf = new WeakMap<FileModel, boolean>();

/**
 * Whether the file's text shows it runs on a GPU, read once per file version: the rule runs
 * once per top-level statement, and scanning the whole text each time was 6% of linting
 * torch's sources. A fact of the whole file, so the incremental linter compares it after
 * each edit (sharedSignature): a `"cuda"` typed anywhere can turn findings on in every statement.
 */
export function showsGpu(model: FileModel): boolean {
  let v = gpuEvidenceOf.get(model);
  if (v === undefined) gpuEvidenceOf.set(model, (v = gpuEvidenceIn(model.text)));
  return v;
}

/**
 * A mention of a GPU in the code, not in a comment (`# device = torch.device("cuda")`, commented out) and not
 * `torch.cuda.manual_seed(seed)`, which a CPU-only script's seed helper calls as well (PyTorch_Practice's lenet
 * lesson was told its activations stay "on the GPU": held-out round 23).
 */
function gpuEvidenceIn(text: string): boolean {
  // Where the line of the last match was read up to, in which quote, and whether a comment had begun: matches on one
  // line are read on from there, so a long line of them is read once.
  let lineEnd = -1;
  let at = 0;
  let quote = '';
  let comment = false;
  gpuEvidence.lastIndex = 0;
  for (let m = gpuEvidence.exec(text); m; m = gpuEvidence.exec(text)) {
    if (m.index >= lineEnd) {
      at = text.lastIndexOf('\n', m.index) + 1;
      const end = text.indexOf('\n', m.index);
      [lineEnd, quote, comment] = [end === -1 ? text.length : end, '', false];
    }
    // A `#` outside quotes earlier on the line starts a comment (strings over several lines are not followed).
    for (; at < m.index && !comment; at++) {
      const c = text[at];
      if (quote) {
        if (c === '\\') at++;
        else if (c === quote) quote = '';
      } else if (c === '"' || c === "'") quote = c;
      else if (c === '#') comment = true;
    }
    if (comment) continue;
    if (/^cuda\.manual_seed(_all)?\b/.test(text.slice(m.index, m.index + 24))) continue;
    return true;
  }
  return false;
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
    // A validation loop inside the loop that trains (an epoch loop whose list is made anew every epoch)
    // is the loop the list is kept across. Not a loop inside a loader loop that trains nothing (StarGAN
    // v2's ten outputs per input, a working set for LPIPS right after).
    const stepLoop = model.stepLoopOf(stmt);
    const loadingLoop = loadingLoopOf(model, stmt);
    const loop = stepLoop && loadingLoop && contains(stepLoop, loadingLoop) && trainsOutside(model, stepLoop, loadingLoop) ? loadingLoop : (stepLoop ?? loadingLoop);
    if (!loop || sampled(model, stmt, loop) || !movesToDevice(model, loop) || !keptAcross(model, base, stmt, loop) || usedInLaterLoop(model, key, loop)) continue;
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

/**
 * The innermost loop around `stmt` (in its scope) that loads a batch onto a device each
 * iteration: a loop over a `range`, a progress bar or an iterator, which the step-loop test
 * (a loader, a backward pass) does not recognise, but whose body moves its input with
 * `.to(device)` / `.cuda()`, itself or through a project helper (`batch = self._get_batch(it)`).
 */
function loadingLoopOf(model: FileModel, stmt: SyntaxNode): SyntaxNode | undefined {
  for (const a of ancestors(stmt)) {
    if (a.type === 'function_definition' || a.type === 'class_definition' || a.type === 'lambda') return undefined;
    if (loopTypes.has(a.type) && movesToDevice(model, a)) return a;
  }
  return undefined;
}

/** Does `loop` run a backward pass or an optimizer step outside `inner` (its training, beside a validation loop)? */
function trainsOutside(model: FileModel, loop: SyntaxNode, inner: SyntaxNode): boolean {
  for (const d of descendants(loop, isScopeNode)) {
    if (d.type !== 'call' || contains(inner, d)) continue;
    const mc = model.methodCall(d);
    if (mc?.method === 'backward' || mc?.method === 'manual_backward' || model.isOptimizerStep(d)) return true;
  }
  return false;
}

/** The loop (or function body) moves something to a device (`x.cuda()`, `x.to(device)`), itself or in a project function it calls: its outputs are on the GPU, not a CPU model's. */
function movesToDevice(model: FileModel, body: SyntaxNode, level = 0): boolean {
  for (const d of descendants(body, isScopeNode)) {
    if (d.type !== 'call') continue;
    const mc = model.methodCall(d);
    if (mc?.method === 'cuda') return true;
    const args = child(d, 'arguments');
    if (mc?.method === 'to' && args && model.positionalArgs(d).length + (model.keywordArg(d, 'device') ? 1 : 0) > 0 && !/cpu/.test(model.src(args))) return true;
    if (level >= 2 || mc?.method === 'to' || mc?.method === 'cuda') continue;
    const target = resolveCall(model, d);
    const fn = target && !target.cls ? target.fn : undefined;
    if (fn?.body && fn.model.fact(`tkl:moves:${fn.node.order}:${level + 1}`, () => movesToDevice(fn.model, fn.body as SyntaxNode, level + 1))) return true;
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

/**
 * Is what the list collects read again inside a later loop of the scope, itself or the tensor made from it
 * (`bank = torch.cat(bank).t()`)? Then it is a working set the later steps compute with on the GPU (SimCLR's kNN
 * feature bank, `torch.mm(feature, feature_bank)` per test batch; MelGAN's test spectrograms fed to the generator
 * at every evaluation), not outputs kept for a log: moving it to the CPU would break that computation.
 */
function usedInLaterLoop(model: FileModel, key: string, loop: SyntaxNode): boolean {
  const scope = model.scopeOf(loop);
  const body = scope === model.root ? scope : child(scope, 'body');
  if (!body) return false;
  const names = new Set([key]);
  for (const d of descendants(body, isScopeNode)) {
    if (d.start < loop.end) continue;
    // `bank2 = torch.cat(bank)` after the loop: the new name holds the same values.
    if (d.type === 'assignment') {
      const left = child(d, 'left');
      const right = child(d, 'right');
      if (left && right && (left.type === 'identifier' || left.type === 'attribute') && [...descendants(right)].some((n) => (n.type === 'identifier' || n.type === 'attribute') && names.has(model.src(n)))) names.add(model.src(left));
      continue;
    }
    if ((d.type !== 'identifier' && d.type !== 'attribute') || !names.has(model.src(d))) continue;
    for (const a of ancestors(d)) {
      if (a === body || a === loop) break;
      if (loopTypes.has(a.type) && a.start >= loop.end) return true;
    }
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
 * a slice, a `.detach()`, arithmetic with it, a row of it, what a project function returns
 * from one)? Must, not may: a name is one when every definition of it that reaches here is
 * one (a definition being answered already, through a loop's back edge, neither adds nor
 * vetoes). Anything that moves to the CPU, reduces, or is of unknown provenance is not.
 */
function isFullOutput(model: FileModel, expr: SyntaxNode, depth: number, seen: Set<SyntaxNode> = new Set()): boolean {
  const n = unparen(expr);
  if (depth > 12 || seen.size > 64) return false;
  switch (n.type) {
    case 'identifier':
    case 'attribute': {
      if (n.type === 'attribute') {
        const attr = child(n, 'attribute');
        if (attr && notTensor.test(model.src(attr))) return false;
      }
      const key = model.src(n);
      const r = model.reachingDefs(key, n);
      if (r && r.defs.length > 0) {
        if (r.entry) return false;
        let found = false;
        for (const d of r.defs) {
          if (seen.has(d.target)) continue;
          seen.add(d.target);
          try {
            if (!definitionIsFullOutput(model, d, depth + 1, seen)) return false;
          } finally {
            seen.delete(d.target);
          }
          found = true;
        }
        return found;
      }
      const b = model.binding(key, n);
      if (b?.value && !b.unpacked) return isFullOutput(model, b.value, depth + 1, seen);
      if (b) return false;
      const object = n.type === 'attribute' ? child(n, 'object') : undefined;
      return !!object && model.src(object) !== 'self' && isFullOutput(model, object, depth + 1, seen);
    }
    case 'subscript': {
      const v = child(n, 'value');
      return !!v && isFullOutput(model, v, depth + 1, seen);
    }
    case 'binary_operator': {
      // Broadcasting: the result is at least as large as either operand (`emb * mask`, `mean + std * noise`).
      const op = child(n, 'operator');
      if (!op || !/^(\+|-|\*|\/|\/\/|%|\*\*)$/.test(model.src(op))) return false;
      const l = child(n, 'left');
      const r = child(n, 'right');
      return (!!l && isFullOutput(model, l, depth + 1, seen)) || (!!r && isFullOutput(model, r, depth + 1, seen));
    }
    case 'call': {
      if (model.isModelCall(n)) return true;
      const mc = model.methodCall(n);
      const q = model.qualify(model.callee(n)) ?? '';
      if (mc && sizeKeeping.has(mc.method) && !q.startsWith('torch.')) {
        if (mc.method === 'to' && /cpu|numpy/.test(model.src(child(n, 'arguments') ?? n))) return false;
        return isFullOutput(model, mc.receiver, depth + 1, seen);
      }
      if (sizeKeepingTorch.test(q)) {
        const first = model.positionalArgs(n)[0];
        return !!first && isFullOutput(model, first, depth + 1, seen);
      }
      return returnsFullOutput(model, n, undefined);
    }
    default:
      return false;
  }
}

/** Does a definition bind a full output: its value, the element of a model's or a project function's result it unpacks, a row of one (`for emb in embeddings`)? */
function definitionIsFullOutput(model: FileModel, d: Binding, depth: number, seen: Set<SyntaxNode>): boolean {
  if (!d.value) {
    // `for emb in embeddings`: iterating a tensor gives its rows, views of it.
    if (d.at.type !== 'for_statement' || child(d.at, 'left') !== d.target) return false;
    const right = child(d.at, 'right');
    return !!right && unparen(right).type === 'identifier' && isFullOutput(model, right, depth, seen);
  }
  if (!d.unpacked) return isFullOutput(model, d.value, depth, seen);
  const value = unparen(d.value);
  if (value.type !== 'call') return false;
  const left = d.at.type === 'assignment' ? child(d.at, 'left') : undefined;
  const items = left && d.target.parent === left ? namedChildren(left) : [];
  const index = items.indexOf(d.target);
  if (index < 0 || items.some((i) => i.type === 'list_splat_pattern')) return false;
  // `out, _, _ = model(x)`: a model returning a tuple returns its outputs; the first is the prediction.
  if (model.isModelCall(value)) return index === 0;
  return returnsFullOutput(model, value, index);
}

/**
 * Does this call of a project function return a full output (element `index` of its result,
 * the whole when undefined): every value its own body returns is one, by the function's own
 * definitions (`return features` after `features = self.inception(x)[0]`).
 */
function returnsFullOutput(model: FileModel, call: SyntaxNode, index: number | undefined): boolean {
  if (callLevel >= maxCallLevel) return false;
  const target = resolveCall(model, call);
  const fn = target?.fn;
  if (!fn || target.cls || fn.name === '__init__') return false;
  return functionReturnsFullOutput(fn, index, callLevel + 1);
}

function functionReturnsFullOutput(fn: FunctionInfo, index: number | undefined, level: number): boolean {
  return fn.model.fact(`tkl:returns:${fn.node.order}:${index ?? ''}:${level}`, () => {
    const outer = callLevel;
    callLevel = level;
    try {
      const returns = returnsOf(fn);
      // An abstract method (`raise NotImplementedError`): what the subclasses' overrides return, every one of them.
      if (returns.length === 0) {
        const overrides = abstract(fn) ? overridesOf(fn) : [];
        return overrides.length > 0 && overrides.every((o) => functionReturnsFullOutput(o, index, level));
      }
      return returns.every((r) => {
        let v = unparen(r);
        if (index !== undefined) {
          if (v.type !== 'expression_list' && v.type !== 'tuple') return false;
          const items = namedChildren(v);
          const item = items[index];
          if (!item || items.some((i) => i.type === 'list_splat')) return false;
          v = item;
        }
        return isFullOutput(fn.model, v, 0);
      });
    } finally {
      callLevel = outer;
    }
  }) ?? false;
}

/** A method whose body only raises `NotImplementedError` (after a docstring). */
function abstract(fn: FunctionInfo): boolean {
  if (!fn.cls || !fn.body) return false;
  const stmts = namedChildren(fn.body).filter((c) => c.type !== 'comment' && !(c.type === 'expression_statement' && namedChildren(c)[0]?.type === 'string'));
  return stmts.length === 1 && stmts[0].type === 'raise_statement' && /NotImplementedError/.test(fn.model.src(stmts[0]));
}

/** The methods of the same name in the workspace's direct subclasses of `fn`'s class. */
function overridesOf(fn: FunctionInfo): FunctionInfo[] {
  const cls = fn.cls as ClassInfo;
  const all = new Set([...fn.model.functionsHere(fn.name), ...fn.model.facts.functionsNamed(fn.name)]);
  return [...all].filter((f) => f !== fn && f.cls && f.cls.bases.some((b) => lastName(f.model.src(b)) === cls.name));
}

/** How many project-function calls deep `returnsFullOutput` is looking (the statement's own call is level 0). */
let callLevel = 0;
const maxCallLevel = 3;

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

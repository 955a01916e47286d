/**
 * carried-hidden-state: a recurrent state is fed back into the model on the next batch
 * with its autograd graph (`out, hidden = rnn(x, hidden)` in a training loop, `hidden`
 * bound before the loop and never detached or re-initialised inside it).
 *
 * Reported only when the loop trains (a backward pass or an optimizer step inside it) and
 * nothing in the loop rebinds the state or hands it to a call made for its effect: a
 * `hidden = repackage_hidden(hidden)`, `hidden = tuple(h.detach() for h in hidden)`, a
 * `hidden = None` on a new sequence, `hidden.detach_()` or a `detach_hidden(hidden)`
 * statement all count as handled.
 */
import { track, unrecorded } from '../deps';
import { indentUnit, insertAtBodyTop, rangeOf } from '../fixes';
import { lastName, type FileModel, type FunctionInfo } from '../model';
import type { Rule } from '../rule';
import { ancestors, child, contains, descendants, isScopeNode, loopTypes, namedChildren, unparen, type SyntaxNode } from '../syntax';
import { docsUrlFor, type Fix, type RawFinding } from '../types';

const id = 'carried-hidden-state';
const recurrentName = /(^|_)(rnn|lstm|gru|cell)$/i;
const optimizerLike = /optim|(^|\.)opt$|scaler/i;
const backwardOwners = /(^|\.)(accelerator|fabric|engine|model_engine|trainer)$/;
/** Modules whose state is a `(h, c)` tuple, and those whose state is one tensor. */
const tupleState = /^torch\.nn\.(LSTM|LSTMCell)$/;
const tensorState = /^torch\.nn\.(GRU|RNN|GRUCell|RNNCell)$/;

export const rule: Rule = {
  id,
  defaultSeverity: 'warning',
  summary: 'A recurrent hidden state is carried into the next batch without .detach(): the graph of every previous batch stays reachable.',
  explanation:
    'The hidden state returned by an RNN carries the autograd graph of the batch that produced it. Fed into the next batch as is, it links the new graph to the old one: ' +
    'a plain `backward()` fails on the second batch ("backward through the graph a second time"), `retain_graph=True` fails once the optimizer has updated the weights in place, ' +
    'and where neither error stops it (weights updated through `.data`) no batch\'s graph is ever freed: every batch\'s activations stay in memory and each backward pass runs through the whole history, ' +
    'so memory and step time grow until CUDA runs out of memory. ' +
    'Detach the state at the start of each batch (truncated backpropagation through time): `hidden = hidden.detach()`, or `tuple(h.detach() for h in hidden)` for an LSTM.',
  docsUrl: docsUrlFor(id),
  check,
};

function check(model: FileModel): RawFinding[] {
  const findings: RawFinding[] = [];
  for (const call of model.targetCalls()) {
    const assignment = call.parent;
    if (assignment?.type !== 'assignment' || call.field !== 'right' || assignment.parent?.type !== 'expression_statement') continue;
    if (!isRecurrentCall(model, call) || model.gradState(call) === 'off' || forwardDetaches(model, call)) continue;
    const left = child(assignment, 'left');
    if (!left) continue;
    const targets = new Set(flatten(left).map((n) => model.src(n)));
    const fed = stateArgs(model, call).filter((a) => targets.has(model.src(a.node)));
    if (fed.length === 0) continue;
    const loop = trainingLoopOf(model, assignment);
    if (!loop) continue;
    const carried = fed.filter((a) => isCarried(model, a.node, assignment, call, loop));
    if (carried.length === 0 || carried.length < fed.length) continue;
    const names = carried.map((a) => model.src(a.node));
    const fix = fixFor(model, call, loop, carried);
    findings.push({
      message: `\`${names.join('`, `')}\` ${names.length > 1 ? 'are' : 'is'} fed back into \`${model.src(model.callee(call) ?? call)}\` on the next batch with ${names.length > 1 ? 'their' : 'its'} autograd graph: each backward pass reaches into the previous batch; detach at the top of the loop.`,
      range: rangeOf(assignment.parent),
      fixes: fix ? [fix] : [],
    });
  }
  return findings;
}

/** A module call (`self.rnn(...)`, `model(...)`), or a callee named like a recurrent layer. */
function isRecurrentCall(model: FileModel, call: SyntaxNode): boolean {
  if (model.isModelCall(call)) return true;
  const callee = model.callee(call);
  if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return false;
  const q = model.qualify(callee) ?? '';
  return !q.startsWith('torch.') && recurrentName.test(lastName(model.src(callee)));
}

/** The callee is a workspace module whose `forward` detaches something itself (a stateful model that returns a detached state). */
function forwardDetaches(model: FileModel, call: SyntaxNode): boolean {
  const callee = model.callee(call);
  if (!callee) return false;
  const built = model.constructedClass(model.src(callee));
  const cls = built ? lastName(built) : undefined;
  if (!cls) return false;
  // Only the `forward` methods of classes named `cls` matter: a lookup of that class, not of every `forward`.
  track(`cls:${cls}`);
  const forwards = unrecorded(() => model.facts.functionsNamed('forward'));
  return (forwardsByClass(forwards).get(cls) ?? []).some((fn) => !!fn.body && [...descendants(fn.body)].some((d) => d.type === 'call' && /^detach_?$/.test(fn.model.methodCall(d)?.method ?? '')));
}

/** The workspace's `forward` methods by class name, once per list (the workspace's lists are per version). */
const forwardsByClassCache = new WeakMap<readonly FunctionInfo[], Map<string, FunctionInfo[]>>();

/** Asked per recurrent call, a scan of every `forward` grew with calls × modules (a large file of many models). */
function forwardsByClass(forwards: readonly FunctionInfo[]): Map<string, FunctionInfo[]> {
  let byClass = forwardsByClassCache.get(forwards);
  if (!byClass) {
    byClass = new Map();
    for (const fn of forwards) {
      if (!fn.cls) continue;
      const list = byClass.get(fn.cls.name);
      if (list) list.push(fn);
      else byClass.set(fn.cls.name, [fn]);
    }
    forwardsByClassCache.set(forwards, byClass);
  }
  return byClass;
}

/** The names a target binds: `out, hidden`, `out, (h, c)`. */
function flatten(node: SyntaxNode): SyntaxNode[] {
  const n = unparen(node);
  if (n.type === 'identifier' || n.type === 'attribute') return [n];
  if (['pattern_list', 'tuple_pattern', 'list_pattern', 'tuple', 'list'].includes(n.type)) return namedChildren(n).flatMap(flatten);
  return [];
}

interface StateArg {
  readonly node: SyntaxNode;
  /** Part of a literal tuple `(h, c)` passed as one argument. */
  readonly inTuple: boolean;
}

/** Arguments that can be a state: names and attributes, and the names inside a tuple argument. Not the first (the input). */
function stateArgs(model: FileModel, call: SyntaxNode): StateArg[] {
  const args = child(call, 'arguments');
  if (!args || args.type !== 'argument_list') return [];
  const out: StateArg[] = [];
  namedChildren(args).forEach((a, i) => {
    const v = unparen(a.type === 'keyword_argument' ? (child(a, 'value') ?? a) : a);
    if (i === 0 && a.type !== 'keyword_argument') return;
    if (v.type === 'identifier' || v.type === 'attribute') out.push({ node: v, inTuple: false });
    else if (v.type === 'tuple' || v.type === 'list') for (const e of namedChildren(v)) if (e.type === 'identifier' || e.type === 'attribute') out.push({ node: e, inTuple: true });
  });
  void model;
  return out;
}

/** The innermost loop around `stmt` (in its scope) that iterates batches and trains: the state must be detached there. */
function trainingLoopOf(model: FileModel, stmt: SyntaxNode): SyntaxNode | undefined {
  for (const a of ancestors(stmt)) {
    if (isScopeNode(a)) return undefined;
    if (!loopTypes.has(a.type) || !model.isStepLoop(a)) continue;
    return trains(model, a) ? a : undefined;
  }
  return undefined;
}

function trains(model: FileModel, loop: SyntaxNode): boolean {
  for (const d of descendants(loop, isScopeNode)) {
    if (d.type !== 'call') continue;
    const mc = model.methodCall(d);
    if (!mc) continue;
    if (mc.method === 'backward' || mc.method === 'manual_backward') return true;
    if (mc.method === 'step' && optimizerLike.test(model.src(mc.receiver))) return true;
    if (mc.method === 'backward' && backwardOwners.test(model.src(mc.receiver))) return true;
  }
  return false;
}

/** The root name of `a.b[0]`: `a`. */
function rootName(model: FileModel, node: SyntaxNode): string {
  let n = unparen(node);
  for (;;) {
    if (n.type === 'attribute' || n.type === 'subscript') {
      const inner = child(n, n.type === 'attribute' ? 'object' : 'value');
      if (!inner) break;
      if (n.type === 'attribute' && model.src(inner) === 'self') break;
      n = unparen(inner);
      continue;
    }
    break;
  }
  return model.src(n);
}

/**
 * Does the state outlive one iteration of `loop` untouched: bound before the loop (or an
 * attribute, a parameter), and inside the loop neither rebound (except by `assignment`)
 * nor passed to anything but the model call?
 */
function isCarried(model: FileModel, state: SyntaxNode, assignment: SyntaxNode, call: SyntaxNode, loop: SyntaxNode): boolean {
  const key = model.src(state);
  const scope = model.scopeOf(assignment);
  const bindings = model.bindingsIn(scope, key);
  if (bindings.some((b) => contains(loop, b.target) && !contains(assignment, b.target))) return false;
  const outside = bindings.some((b) => !contains(loop, b.target)) || state.type === 'attribute' || model.isParam(scope, key) || model.isGlobalIn(scope, key);
  if (!outside) return false;
  for (const d of descendants(loop, isScopeNode)) {
    // Only a call that is a statement of its own can be handling the state (`hidden.detach_()`,
    // `detach_state(hidden)`); one whose value is used (`head(hidden)`, a loss) only reads it.
    if (d.type !== 'call' || d === call || d.parent?.type !== 'expression_statement') continue;
    const mc = model.methodCall(d);
    // `hidden.detach_()`, `hidden[0].detach_()`, `self.hidden.zero_()`
    if (mc && rootName(model, mc.receiver) === key && mc.method !== 'size' && mc.method !== 'dim') return false;
    const args = child(d, 'arguments');
    if (!args) continue;
    for (const a of namedChildren(args)) {
      const v = a.type === 'keyword_argument' ? child(a, 'value') : a;
      if (!v) continue;
      const nodes = [v, ...descendants(v)];
      if (nodes.some((n) => (n.type === 'identifier' || n.type === 'attribute') && model.src(n) === key)) return false;
    }
  }
  // `for h in hidden: h.detach_()`
  for (const d of descendants(loop, isScopeNode)) {
    if (d.type === 'for_statement' && d !== loop) {
      const right = child(d, 'right');
      if (right && model.src(unparen(right)) === key) return false;
    }
  }
  return true;
}

/** The class the recurrent callee was built from, when the file shows it. */
function stateShape(model: FileModel, call: SyntaxNode): 'tuple' | 'tensor' | undefined {
  const callee = model.callee(call);
  const q = callee ? model.constructedClass(model.src(callee)) : undefined;
  if (!q) return undefined;
  if (tupleState.test(q)) return 'tuple';
  if (tensorState.test(q)) return 'tensor';
  return undefined;
}

function fixFor(model: FileModel, call: SyntaxNode, loop: SyntaxNode, carried: readonly StateArg[]): Fix | undefined {
  const lines: string[] = [];
  const scope = model.scopeOf(call);
  // An attribute may be set to None in `__init__` or a reset method, anywhere in the file.
  const mayBeNone = (key: string) => model.attributeSetToNone(key) || model.bindingsIn(scope, key).some((b) => !contains(loop, b.target) && b.value && model.src(b.value) === 'None');
  const tupled = carried.filter((a) => a.inTuple).map((a) => model.src(a.node));
  if (tupled.length) {
    if (tupled.some(mayBeNone)) return undefined;
    lines.push(`${tupled.join(', ')} = ${tupled.map((k) => `${k}.detach()`).join(', ')}`);
  }
  const shape = stateShape(model, call);
  for (const a of carried.filter((x) => !x.inTuple)) {
    const k = model.src(a.node);
    let line: string;
    if (shape === 'tuple') line = `${k} = tuple(h.detach() for h in ${k})`;
    else if (shape === 'tensor') line = `${k} = ${k}.detach()`;
    else {
      const tensor = [...model.aliases].find(([, q]) => q === 'torch');
      if (!tensor) return undefined;
      line = `${k} = ${k}.detach() if isinstance(${k}, ${tensor[0]}.Tensor) else tuple(h.detach() for h in ${k})`;
    }
    if (mayBeNone(k)) lines.push(`if ${k} is not None:`, `${indentUnit(model)}${line}`);
    else lines.push(line);
  }
  if (lines.length === 0) return undefined;
  const edit = insertAtBodyTop(model, loop, lines);
  return edit ? { title: `Detach the state at the start of each batch: \`${lines[lines.length - 1].trim()}\``, edits: [edit] } : undefined;
}

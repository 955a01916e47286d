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
import { backwardOwners, optimizerLike } from '../model/types';
import { docsUrlFor, type Fix, type RawFinding } from '../types';
import { classOfValue, methodOf, resolveCall, runsTrainingStep } from '../model/summaries';

const id = 'carried-hidden-state';
const recurrentName = /(^|_)(rnn|lstm|gru|cell)$/i;
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
    // The syntax first (most calls pass no state), then what needs the analysis.
    const args = stateArgs(model, call);
    const left = child(assignment, 'left');
    if (!left || args.length === 0) continue;
    if (!isRecurrentCall(model, call) || model.gradState(call) === 'off' || forwardDetaches(model, call)) continue;
    const targets = new Set(flatten(left).map((n) => model.src(n)));
    // `h_in = h_out` before `prob, h_out = model.pi(x, h_in)`: the state is fed back through a copy.
    const fed = args.map((a) => (targets.has(model.src(a.node)) ? a : viaCopy(model, a, targets))).filter((a): a is StateArg => !!a);
    if (fed.length === 0) continue;
    const loop = trainingLoopOf(model, assignment);
    if (!loop) continue;
    const carried = fed.filter((a) => isCarried(model, a.node, assignment, call, loop, a.copy));
    if (carried.length === 0 || carried.length < fed.length) continue;
    const names = carried.map((a) => `\`${model.src(a.node)}\`` + (a.copy ? ` (passed as \`${model.src(a.copy)}\`)` : ''));
    const fix = fixFor(model, call, loop, carried);
    findings.push({
      message: `${names.join(', ')} ${names.length > 1 ? 'are' : 'is'} fed back into \`${model.src(model.callee(call) ?? call)}\` on the next batch with ${names.length > 1 ? 'their' : 'its'} autograd graph: each backward pass reaches into the previous batch; detach at the top of the loop.`,
      range: rangeOf(assignment.parent),
      fixes: fix ? [fix] : [],
    });
  }
  return findings;
}

/** A module call (`self.rnn(...)`, `model(...)`), or a callee named like a recurrent layer. */
function isRecurrentCall(model: FileModel, call: SyntaxNode, level = 0): boolean {
  if (model.isModelCall(call)) return true;
  const callee = model.callee(call);
  if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return false;
  const q = model.qualify(callee) ?? '';
  if (!q.startsWith('torch.') && recurrentName.test(lastName(model.src(callee)))) return true;
  return level < 2 && !!wrappedRecurrence(model, call, level);
}

/**
 * The project function a call reaches when it runs a recurrent call itself and detaches
 * nothing (`def pi(self, x, hidden): ... x, h = self.lstm(x, hidden) ... return prob, h`): a
 * policy's or a model's method that takes the state and hands back the new one.
 */
function wrappedRecurrence(model: FileModel, call: SyntaxNode, level: number): FunctionInfo | undefined {
  const t = resolveCall(model, call);
  const fn = t?.fn && !t.cls ? t.fn : undefined;
  if (!fn?.body || fn.name === 'forward' || fn.name === '__init__') return undefined;
  const body = fn.body;
  const runs = fn.model.fact(`chs:wraps:${fn.node.order}:${level + 1}`, () => {
    const calls = [...descendants(body, isScopeNode)].filter((d) => d.type === 'call');
    if (calls.some((d) => isDetach(fn.model, d))) return false;
    return calls.some((d) => {
      const inner = d.parent?.type === 'assignment' && d.field === 'right' ? child(d.parent, 'left') : undefined;
      const args = stateArgs(fn.model, d).map((x) => fn.model.src(x.node));
      // The recurrent call takes a parameter as its state and binds a new one (from a model that does not detach it).
      return !!inner && args.some((x) => fn.params.includes(x)) && isRecurrentCall(fn.model, d, level + 1) && !forwardDetaches(fn.model, d);
    });
  });
  return runs ? fn : undefined;
}

/** The callee is a workspace module whose `forward` detaches something itself (a stateful model that returns a detached state). */
function forwardDetaches(model: FileModel, call: SyntaxNode): boolean {
  const callee = model.callee(call);
  if (!callee) return false;
  const built = model.constructedClass(model.src(callee));
  // A model handed in as a parameter: the class every caller passes (adaptive-span's `_train_step(model, X, Y, h_cache,
  // ...)`, whose Transformer-XL-style model returns its cache detached: held-out round 24).
  const passed = built ? undefined : classOfValue(model, callee, call);
  if (passed) {
    // Its own forward or one it inherits, from whichever file defines it.
    const forward = methodOf(passed, 'forward');
    return !!forward && detachesIn(forward);
  }
  const cls = built ? lastName(built) : undefined;
  if (!cls) return false;
  // Only the `forward` methods of classes named `cls` matter: a lookup of that class, not of every `forward`.
  track(`cls:${cls}`);
  const forwards = unrecorded(() => model.facts.functionsNamed('forward'));
  return (forwardsByClass(forwards).get(cls) ?? []).some(detachesIn);
}

/** A call of `.detach()` / `.detach_()`. */
function isDetach(model: FileModel, n: SyntaxNode): boolean {
  return n.type === 'call' && /^detach_?$/.test(model.methodCall(n)?.method ?? '');
}

/** Does the function's body call `.detach()` / `.detach_()`? */
function detachesIn(fn: FunctionInfo): boolean {
  return !!fn.body && descendants(fn.body).some((d) => isDetach(fn.model, d));
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
  /** The state: the name the call's result is bound to. */
  readonly node: SyntaxNode;
  /** Part of a literal tuple `(h, c)` passed as one argument. */
  readonly inTuple: boolean;
  /** The argument, when it is a copy of the state made in the loop (`h_in = h_out`). */
  readonly copy?: SyntaxNode;
}

/**
 * The state an argument copies: every definition of it that reaches the call is `arg = name`
 * with `name` a target of the call's assignment (`h_in = h_out`, then `_, h_out = rnn(x, h_in)`).
 */
function viaCopy(model: FileModel, a: StateArg, targets: ReadonlySet<string>): StateArg | undefined {
  if (a.node.type !== 'identifier') return undefined;
  const r = model.reachingDefs(model.src(a.node), a.node);
  if (!r || r.entry || r.defs.length !== 1) return undefined;
  const d = r.defs[0];
  const v = d.value && !d.unpacked ? unparen(d.value) : undefined;
  if (!v || (v.type !== 'identifier' && v.type !== 'attribute') || !targets.has(model.src(v))) return undefined;
  return { node: v, inTuple: a.inTuple, copy: a.node };
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
    if (!loopTypes.has(a.type)) continue;
    if (model.isStepLoop(a)) return trains(model, a) ? a : undefined;
    // A rollout loop that calls the project's own training step (`agent.train_net()`) every so often.
    if (callsTrainingStep(model, a)) return a;
  }
  return undefined;
}

/** Does the loop call a project function that runs backward or an optimizer step (its summary)? */
function callsTrainingStep(model: FileModel, loop: SyntaxNode): boolean {
  for (const d of descendants(loop, isScopeNode)) {
    if (d.type !== 'call') continue;
    const t = resolveCall(model, d);
    if (t?.fn && !t.cls && runsTrainingStep(t.fn, 1)) return true;
  }
  return false;
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
function isCarried(model: FileModel, state: SyntaxNode, assignment: SyntaxNode, call: SyntaxNode, loop: SyntaxNode, copy?: SyntaxNode): boolean {
  const key = model.src(state);
  // The copy made in the loop (`h_in = h_out`) is the only other binding allowed, and a call that hands the copy on handles it too.
  const copyKey = copy ? model.src(copy) : undefined;
  const copyDef = copy ? model.reachingDefs(model.src(copy), copy)?.defs[0] : undefined;
  const scope = model.scopeOf(assignment);
  const bindings = model.bindingsIn(scope, key);
  if (bindings.some((b) => contains(loop, b.target) && !contains(assignment, b.target))) return false;
  if (copyKey && model.bindingsIn(scope, copyKey).some((b) => contains(loop, b.target) && b !== copyDef)) return false;
  const outside = bindings.some((b) => !contains(loop, b.target)) || state.type === 'attribute' || model.isParam(scope, key) || model.isGlobalIn(scope, key);
  if (!outside) return false;
  for (const d of descendants(loop, isScopeNode)) {
    // Only a call that is a statement of its own can be handling the state (`hidden.detach_()`,
    // `detach_state(hidden)`); one whose value is used (`head(hidden)`, a loss) only reads it.
    if (d.type !== 'call' || d === call || d.parent?.type !== 'expression_statement') continue;
    const mc = model.methodCall(d);
    // `hidden.detach_()`, `hidden[0].detach_()`, `self.hidden.zero_()`
    if (mc && (rootName(model, mc.receiver) === key || rootName(model, mc.receiver) === copyKey) && mc.method !== 'size' && mc.method !== 'dim') return false;
    const args = child(d, 'arguments');
    if (!args) continue;
    for (const a of namedChildren(args)) {
      const v = a.type === 'keyword_argument' ? child(a, 'value') : a;
      if (!v) continue;
      const nodes = [v, ...descendants(v)];
      if (nodes.some((n) => (n.type === 'identifier' || n.type === 'attribute') && (model.src(n) === key || model.src(n) === copyKey)) && !onlyStores(model, d, v)) return false;
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

/**
 * Does the project function this call reaches only store the argument `arg` (`def
 * put_data(self, transition): self.data.append(transition)`): every use of its parameter is
 * appended to a container? Such a call keeps the state; it does not detach or reset it.
 */
function onlyStores(model: FileModel, call: SyntaxNode, arg: SyntaxNode): boolean {
  const t = resolveCall(model, call);
  const fn = t?.fn && !t.cls ? t.fn : undefined;
  if (!fn?.body) return false;
  const param = fnParamFor(model, call, fn, t?.bound ?? false, arg);
  if (!param) return false;
  const uses = [...descendants(fn.body)].filter((n) => n.type === 'identifier' && fn.model.src(n) === param && n.parent?.type !== 'keyword_argument');
  return uses.length > 0 && uses.every((u) => {
    const args = u.parent;
    const c = args?.type === 'argument_list' ? args.parent : undefined;
    const mc = c?.type === 'call' ? fn.model.methodCall(c) : undefined;
    return !!mc && /^(append|extend|insert)$/.test(mc.method) && c?.parent?.type === 'expression_statement';
  });
}

/** The parameter of `fn` that `arg` (an argument of `call`) is passed to. */
function fnParamFor(model: FileModel, call: SyntaxNode, fn: FunctionInfo, bound: boolean, arg: SyntaxNode): string | undefined {
  if (arg.parent?.type === 'keyword_argument') {
    const name = child(arg.parent, 'name');
    return name ? model.src(name) : undefined;
  }
  const i = model.positionalArgs(call).indexOf(arg);
  if (i < 0) return undefined;
  const self = bound && fn.cls && (fn.params[0] === 'self' || fn.params[0] === 'cls') ? 1 : 0;
  return fn.params[i + self];
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

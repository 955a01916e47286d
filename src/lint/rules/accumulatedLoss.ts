/**
 * accumulated-loss: a value with autograd history is stored somewhere that outlives the
 * training step (`total += loss`, `history.append(loss)`, a meter's `update`), so every
 * step's graph, with its activations, stays alive.
 */
import { appendToExpression, rangeOf } from '../fixes';
import { callSitesOf, lastName, type Accumulation, type FileModel, type FunctionInfo } from '../model';
import { track } from '../deps';
import { readsOfName } from './inferenceEvidence';
import { accumulateMutators, historyFreeMethods } from '../model/types';
import type { Rule } from '../rule';
import { baseOf, child, contains, descendants, isScopeNode, namedChildren, statementOf, unparen, type SyntaxNode } from '../syntax';
import { accumulatedParams, argumentFor, carrierIn, parameterDefault, resolveCall, returnsState } from '../model/summaries';
import { feedsBackward, leavesForBackward, meterTakesContainer, meterUsesAsTensor, usedAsTensorAfter } from '../trainingPath';
import { docsUrlFor, type RawFinding } from '../types';

const id = 'accumulated-loss';

export const rule: Rule = {
  id,
  defaultSeverity: 'warning',
  summary: 'A tensor with autograd history is accumulated into something that outlives the training step.',
  explanation:
    'The accumulated tensor keeps a reference to its autograd graph. Where the step\'s loss was never backpropagated (an evaluation loop without a grad guard, a loss that is only logged), ' +
    'that graph still holds every activation its forward pass saved, so GPU memory grows by a step\'s activations every iteration until the epoch ends or CUDA runs out of memory. ' +
    'Where it was backpropagated first, `backward()` freed the saved activations, but the accumulator keeps every step\'s chain of autograd nodes (and a list every step\'s tensor) until it is freed: a slower leak, of host memory for a running sum, and the accumulator can no longer be backpropagated. ' +
    'Store a Python number (`.item()`) or a detached tensor (`.detach()`) instead.',
  docsUrl: docsUrlFor(id),
  check,
};

function check(model: FileModel): RawFinding[] {
  const findings: RawFinding[] = [];
  for (const stmt of model.targetNodes((n) => n.type === 'ERROR')) {
    if (stmt.type !== 'expression_statement') continue;
    const acc = model.accumulation(stmt) ?? keyedStore(model, stmt);
    if (acc) {
      const f = checkAccumulation(model, acc);
      if (f) findings.push(f);
    }
  }
  for (const call of model.targetCalls()) {
    const f = checkMeterCall(model, call) ?? checkHelperCall(model, call);
    if (f) findings.push(f);
  }
  return findings;
}

/**
 * Does the storage named by `base` live longer than one training step at `stmt`? A local
 * does when its value at `stmt` can come from an earlier iteration of the batch loop (flow.ts):
 * bound before the loop, or reset only on some iterations (`if i % 100 == 0: running = 0`).
 * One reset at the top of every step bounds it to that step, and a loop over micro-batches
 * or loss heads inside the step is not the batch loop (`batchLoopOf`).
 */
function outlivesStep(model: FileModel, base: SyntaxNode, stmt: SyntaxNode, mutation: boolean): boolean {
  if (base.type === 'attribute') return attributeOutlivesCall(model, base, stmt);
  if (base.type !== 'identifier') return false;
  const name = model.src(base);
  const scope = model.scopeOf(stmt);
  if (scope !== model.root && model.isGlobalIn(scope, name)) return true;
  const loop = model.stepOrEpochLoopOf(stmt);
  const bindings = model.bindingsIn(scope, name);
  if (bindings.length === 0) {
    if (scope !== model.root && model.isParam(scope, name)) return !!loop;
    // A list at module level mutated from a function.
    return mutation && scope !== model.root && model.bindingsIn(model.root, name).length > 0;
  }
  if (!loop) return false;
  // `loss_d_sum = 0.0` in the batch loop, then `loss_d_sum += loss_d` in `for _ in range(rep_discriminator):` that
  // steps the discriminator several times per batch (seungwonpark's MelGAN): reset every batch, it holds those few
  // updates, not the run.
  const outer = model.loaderLoopAround(loop);
  if (outer && !model.carriedAcross(name, stmt, outer)) return false;
  // `metrics = []` in the branch that steps the optimizer (gradient accumulation: `if (i + 1) % k == 0:
  // optimizer.step(); ...; metrics = []`, torchdrug's engine): it holds one optimizer step's micro-batches.
  // (A reset: a value that does not read the accumulator, unlike `smoothed = smoothed + 0.1 * loss`.)
  const reads = new RegExp(`\\b${name}\\b`);
  if (bindings.some((b) => contains(loop, b.at) && b.value && !reads.test(model.src(b.value)) && resetsWithStep(model, b.at))) return false;
  return model.carriedAcross(name, stmt, loop);
}

/** Is the binding statement `at` in a block whose own statements also step the optimizer? */
function resetsWithStep(model: FileModel, at: SyntaxNode): boolean {
  const block = statementOf(at)?.parent;
  if (block?.type !== 'block') return false;
  return model.callsIn(model.scopeOf(at)).some((c) => c.parent?.type === 'expression_statement' && c.parent.parent === block && model.isOptimizerStep(c));
}

/**
 * `log[step] = loss` in a batch loop: a store under a key that changes (not a literal), so
 * each step adds an entry to the container rather than replacing one. Outside a batch loop a
 * keyed store is a cache (by module, by name), not a leak per step.
 */
function keyedStore(model: FileModel, stmt: SyntaxNode): Accumulation | undefined {
  const expr = stmt.children.find((c) => c.named);
  if (expr?.type !== 'assignment') return undefined;
  const left = child(expr, 'left');
  const right = child(expr, 'right');
  if (left?.type !== 'subscript' || !right || right.type === 'assignment') return undefined;
  const index = child(left, 'subscript');
  if (!index || /^(integer|float|string|true|false|none|unary_operator)$/.test(index.type) || !model.batchLoopOf(stmt)) return undefined;
  return { stmt, kind: 'list', target: left, value: right };
}

/**
 * An attribute lives as long as its object, across calls, unless every path from the
 * function's entry to `stmt` binds it first (flow.ts): a module's `forward` that sets
 * `self.h = self.encoder(x)` and then adds a residual `self.h += self.block(self.h)` makes the
 * value anew in every call, and holds one forward's graph until the next call replaces it.
 * Within the call, a batch loop that carries it from step to step still keeps every step's.
 */
function attributeOutlivesCall(model: FileModel, base: SyntaxNode, stmt: SyntaxNode): boolean {
  const key = model.src(base);
  const r = model.reachingDefs(key, stmt);
  if (!r || r.entry || r.defs.length === 0) return true;
  const loop = model.stepOrEpochLoopOf(stmt);
  return !!loop && model.carriedAcross(key, stmt, loop);
}

/**
 * A buffer attribute that another function of the file reads into a backward pass
 * (REINFORCE's `policy.saved_log_probs`, summed into the episode loss in `finish_episode`):
 * the accumulator is the loss, not a leak. Matched by attribute name, in a scope that runs
 * backward, where the read flows into a backpropagated value directly, through an
 * assignment, or through a loop over it that accumulates into one.
 */
function backpropagatedElsewhere(model: FileModel, base: SyntaxNode, stmt: SyntaxNode): boolean {
  const attr = child(base, 'attribute');
  if (!attr) return false;
  const name = model.src(attr);
  track(`attr:${name}`);
  // The functions that read the attribute into a backward pass, once per file version.
  const readers = model.fact(`backpropagates:${name}`, () => {
    const out: SyntaxNode[] = [];
    for (const { fn, reads } of attributeReads(model).get(name) ?? []) {
      if (reads.some((n) => readFlowsIntoBackward(model, n))) out.push(fn);
    }
    return out;
  }) ?? [];
  return readers.some((fn) => !contains(fn, stmt));
}

/**
 * The outermost attribute reads (`self.saved_log_probs`, not its `self`) in the bodies of the
 * file's functions that run backward, by attribute name, each function's in document order: one
 * walk per file version, where each name asked walked every such body again.
 */
function attributeReads(model: FileModel): ReadonlyMap<string, readonly { fn: SyntaxNode; reads: SyntaxNode[] }[]> {
  return model.fact('attributeReadsInTraining', () => {
    const byName = new Map<string, { fn: SyntaxNode; reads: SyntaxNode[] }[]>();
    for (const fn of model.functions) {
      if (!fn.body || !model.hasTrainingSignal(fn.node)) continue;
      for (const n of descendants(fn.body, (x) => x.type === 'function_definition')) {
        if (n.type !== 'attribute' || n.parent?.type === 'attribute') continue;
        const a = child(n, 'attribute');
        if (!a) continue;
        const name = model.src(a);
        let list = byName.get(name);
        if (!list) byName.set(name, (list = []));
        const last = list[list.length - 1];
        if (last?.fn === fn.node) last.reads.push(n);
        else list.push({ fn: fn.node, reads: [n] });
      }
    }
    return byName;
  }) ?? new Map();
}

function readFlowsIntoBackward(model: FileModel, read: SyntaxNode): boolean {
  for (let n: SyntaxNode | null = read; n && n.type !== 'block' && n.type !== 'function_definition'; n = n.parent) {
    const p: SyntaxNode | null = n.parent;
    if (!p) break;
    if (p.type === 'call' && n.field === 'function') {
      const mc = model.methodCall(p);
      if (mc?.method === 'backward') return true;
    }
    // `probs.extend(self.saved_log_probs[k])`: the read goes on through the local list.
    if (p.type === 'argument_list' && p.parent?.type === 'call' && p.parent.parent?.type === 'expression_statement') {
      const mc = model.methodCall(p.parent);
      if (mc && /^(extend|append|insert)$/.test(mc.method) && mc.receiver.type === 'identifier') return localFlowsIntoBackward(model, mc.receiver, p.parent);
    }
    if ((p.type === 'assignment' || p.type === 'augmented_assignment') && n.field === 'right') {
      const left = child(p, 'left');
      return !!left && model.reachesBackward(model.src(left), p);
    }
    if (p.type === 'for_statement' && n.field === 'right') return loopFeedsBackward(model, p);
  }
  return false;
}

/** Does the local list `list` (filled at `at`) reach backward, directly or through a loop over it in the same function? */
function localFlowsIntoBackward(model: FileModel, list: SyntaxNode, at: SyntaxNode): boolean {
  const key = model.src(list);
  if (model.reachesBackward(key, at)) return true;
  const scope = model.scopeOf(at);
  const body = scope === model.root ? scope : child(scope, 'body');
  for (const loop of body ? descendants(body, (x) => x.type === 'function_definition' || x.type === 'class_definition') : []) {
    if (loop.type !== 'for_statement' || loop.start < at.end) continue;
    const right = child(loop, 'right');
    if (!right || ![right, ...descendants(right)].some((d) => d.type === 'identifier' && d.parent?.type !== 'attribute' && model.src(d) === key)) continue;
    if (loopFeedsBackward(model, loop)) return true;
  }
  return false;
}

/** `for log_prob, R in zip(probs, returns): policy_loss.append(-log_prob * R)` with `policy_loss` backpropagated. */
function loopFeedsBackward(model: FileModel, loop: SyntaxNode): boolean {
  const left = child(loop, 'left');
  const vars = new Set(left ? [left, ...descendants(left)].filter((d) => d.type === 'identifier').map((d) => model.src(d)) : []);
  const body = child(loop, 'body');
  for (const s of body ? descendants(body) : []) {
    if (s.type !== 'expression_statement') continue;
    const acc = model.accumulation(s);
    if (!acc || ![acc.value, ...descendants(acc.value)].some((d) => d.type === 'identifier' && vars.has(model.src(d)))) continue;
    if (model.reachesBackward(model.src(baseOf(acc.target)), s)) return true;
  }
  return false;
}

/**
 * What keeping `value` (stored at `stmt`) holds on to, as the end of a message: a value whose
 * history flows into a backward pass of the same scope (the step's loss, the output it was
 * computed from) has had its saved activations freed by that pass (unless `retain_graph`); any
 * other keeps its activations. A backpropagated value summed into one tensor (`kind` 'add':
 * `total += loss`) keeps neither its activations nor its own tensor (the sum's backward saves no
 * operand): only its chain of autograd nodes, in host memory. Measured on an NVIDIA H200
 * (test/fixtures/torchrun/cuda/h200/hints/): the sum's allocated CUDA bytes stay flat for 30 steps,
 * where a held-out loss that is never backpropagated adds its forward's two saved activations, 64 MiB,
 * every step. A list (or a meter, whose store is not seen here) keeps each step's tensor as well.
 */
function whatIsHeld(model: FileModel, value: SyntaxNode, stmt: SyntaxNode, kind?: Accumulation['kind']): string {
  if (!backpropagatedInScope(model, value, stmt)) return "every step's activations stay on the GPU";
  return kind === 'add'
    ? "backward() has freed each step's saved activations, but the sum keeps every step's chain of autograd nodes: host memory grows every step (GPU memory does not)"
    : "backward() has freed each step's saved activations, but every step's tensor and its chain of autograd nodes stay referenced, so memory still grows every step";
}

function backpropagatedInScope(model: FileModel, value: SyntaxNode, stmt: SyntaxNode): boolean {
  if (retainsGraph(model, model.scopeOf(stmt))) return false;
  const v = unparen(value);
  const names = [v, ...descendants(v)].filter((d) => (d.type === 'identifier' && d.parent?.type !== 'attribute' && d.parent?.type !== 'keyword_argument' && !(d.parent?.type === 'call' && d.field === 'function')) || (d.type === 'attribute' && d.parent?.type !== 'attribute' && !(d.parent?.type === 'call' && d.field === 'function')));
  const carriers = names.filter((n) => model.carriesHistory(n));
  if (carriers.length === 0) return false;
  // A Lightning `training_step` that returns what it keeps: the trainer backpropagates the returned loss.
  const fn = model.functionOf(stmt);
  if (fn?.name === 'training_step' && fn.cls && fn.body) {
    const returned = new Set([...descendants(fn.body, isScopeNode)].filter((d) => d.type === 'return_statement').map((r) => (namedChildren(r)[0] ? model.src(namedChildren(r)[0]) : '')));
    if (carriers.every((n) => returned.has(model.src(n)))) return true;
  }
  return carriers.every((n) => model.reachesBackward(model.src(n), n));
}

/** Does the scope call `backward(retain_graph=...)` (not False or None)? Once per scope and file version: asked per finding. */
function retainsGraph(model: FileModel, scope: SyntaxNode): boolean {
  return model.fact(`retainsGraph:${scope === model.root ? -1 : scope.order}`, () => {
    for (const call of model.callsIn(scope)) {
      const mc = model.methodCall(call);
      if (mc?.method !== 'backward' && mc?.method !== 'manual_backward') continue;
      const retain = model.keywordArg(call, 'retain_graph');
      if (retain && model.src(retain) !== 'False' && model.src(retain) !== 'None') return true;
    }
    return false;
  }) ?? false;
}

/**
 * Does the code test whether `value` is a tuple, list or dict (`sum(losses) if isinstance(losses,
 * tuple) else losses`)? Then it is one on some path, where `.item()` and `.detach()` both fail.
 */
function maybeContainer(model: FileModel, value: SyntaxNode, stmt: SyntaxNode): boolean {
  const v = unparen(value);
  if (v.type !== 'identifier') return false;
  return testedAsContainer(model, model.scopeOf(stmt)).has(model.src(v));
}

/**
 * The names a scope tests with `isinstance(name, tuple / list / dict ...)`, once per scope and
 * file version: asked per finding, a scan of the scope's calls each time grew with findings ×
 * calls (a module-level script).
 */
function testedAsContainer(model: FileModel, scope: SyntaxNode): ReadonlySet<string> {
  return model.fact(`containerTests:${scope === model.root ? -1 : scope.order}`, () => {
    const names = new Set<string>();
    for (const c of model.callsIn(scope)) {
      const callee = model.callee(c);
      if (!callee || callee.type !== 'identifier' || model.src(callee) !== 'isinstance') continue;
      const [subject, types] = model.positionalArgs(c);
      if (subject && types && /\b(tuple|list|dict|Sequence|Mapping)\b/.test(model.src(types))) names.add(model.src(subject));
    }
    return names;
  }) ?? new Set();
}

function suffixFor(model: FileModel, value: SyntaxNode, kind: Accumulation['kind']): string {
  if (model.isScalar(value)) return '.item()';
  return kind === 'list' && !model.src(value).endsWith('.cpu()') ? '.detach().cpu()' : '.detach()';
}

function checkAccumulation(model: FileModel, acc: Accumulation): RawFinding | undefined {
  if (!model.carriesHistory(acc.value)) return undefined;
  const base = baseOf(acc.target);
  // `meters.track("loss").add_(loss)`: a project method that hands back state kept on its object.
  if (base.type === 'call') return keptByCall(model, base) ? finding(model, acc) : undefined;
  if (base.type !== 'identifier' && base.type !== 'attribute') return undefined;
  const rollout = rolloutKept(model, base, acc.stmt);
  if (rollout) return finding(model, acc, rollout);
  // Gradient accumulation, truncated BPTT, summed loss heads: the accumulator is backpropagated.
  if (model.reachesBackward(model.src(base), acc.stmt) || model.reachesBackward(model.src(acc.target), acc.stmt)) return undefined;
  if (!outlivesStep(model, base, acc.stmt, acc.kind !== 'add' || model.src(acc.stmt).includes('.add_('))) return undefined;
  if (base.type === 'attribute' && backpropagatedElsewhere(model, base, acc.stmt)) return undefined;
  // Returned to a caller that backpropagates it: the accumulator is that caller's loss.
  if (leavesForBackward(model, acc.stmt)) return undefined;
  return finding(model, acc);
}

/**
 * A local filled across a loop inside the training step that trains nothing, and read after it only through
 * `.detach()` / `.item()` (uvipen's Super-mario PPO: `values.append(value)` for each of `num_local_steps` rollout
 * forwards, then `values = torch.cat(values).detach()`): reset every update, it still holds every forward's graph of
 * that loop, and none of them is ever backpropagated. The rollout loop, or undefined.
 */
function rolloutKept(model: FileModel, base: SyntaxNode, stmt: SyntaxNode): SyntaxNode | undefined {
  if (base.type !== 'identifier') return undefined;
  const step = model.stepOrEpochLoopOf(stmt);
  const rollout = step && model.untrainedLoopIn(stmt, step);
  const name = model.src(base);
  if (!rollout || !model.carriedAcross(name, stmt, rollout)) return undefined;
  const lists = new Set(model.reachingDefs(name, stmt)?.defs ?? []);
  if (lists.size === 0) return undefined;
  let read = false;
  const reads = readsOfName(model, model.scopeOf(stmt), name);
  if (!reads) return undefined;
  for (const use of reads) {
    if (!(model.reachingDefs(name, use)?.defs ?? []).some((d) => lists.has(d))) continue;
    const own = statementOf(use);
    if (own && contains(rollout, own)) {
      // Its own appends inside the rollout; any other use there (`len(values)`) is left alone.
      const call = own.type === 'expression_statement' ? own.children.find((c) => c.named) : undefined;
      const mc = call?.type === 'call' ? model.methodCall(call) : undefined;
      if (mc && mc.receiver === use && accumulateMutators.has(mc.method)) continue;
      return undefined;
    }
    if (!readDetached(model, use, own)) return undefined;
    read = true;
  }
  return read ? rollout : undefined;
}

/** Is `use` read only through a history-free method of an expression around it (`torch.cat(values).detach()`), within its statement? */
function readDetached(model: FileModel, use: SyntaxNode, stmt: SyntaxNode | undefined): boolean {
  for (let n = use; n.parent && n !== stmt; n = n.parent) {
    const p = n.parent;
    if (p.type === 'attribute' && n.field === 'object') {
      const attr = child(p, 'attribute');
      if (attr && historyFreeMethods.has(model.src(attr))) return true;
    }
  }
  return false;
}

/** Does this call (the accumulator) return state its object keeps: `self._meters.setdefault(name, ...)`? */
function keptByCall(model: FileModel, call: SyntaxNode): boolean {
  const target = resolveCall(model, call);
  return !!target?.fn && !target.cls && returnsState(target.fn);
}

function finding(model: FileModel, acc: Accumulation, rollout?: SyntaxNode): RawFinding {
  const base = baseOf(acc.target);
  const valueText = model.src(acc.value);
  const targetText = model.src(acc.target);
  // `StepRecord(step, loss)`: the record keeps what it is built from; the fix goes on that argument.
  const fixed = constructorArgument(model, acc.value) ?? acc.value;
  let suffix = suffixFor(model, fixed, fixed === acc.value ? acc.kind : 'add');
  // `total += loss.item()` makes `total` a number: `.detach()` where it is used as a tensor later.
  if (suffix === '.item()' && base.type !== 'call' && usedAsTensorAfter(model, model.src(base), acc.stmt)) suffix = '.detach()';
  const fixedText = model.src(fixed);
  if (rollout) {
    const header = model.src(rollout).split('\n')[0].replace(/:\s*$/, '').trim();
    return {
      message: `\`${valueText}\` is stored in \`${targetText}\` with its autograd graph on every iteration of \`${header}\`, which backpropagates nothing, and \`${targetText}\` is only read detached after it: every one of those forward passes keeps its activations on the GPU until the loop ends (run them under \`torch.no_grad()\`, or store \`.detach()\`).`,
      range: rangeOf(acc.stmt),
      // No quick fix: `.detach()` on each kept value would do, but the better fix, the rollout's forward under
      // `torch.no_grad()`, needs the reader to see what else the loop computes.
      fixes: [],
    };
  }
  if (maybeContainer(model, fixed, acc.stmt)) {
    return { message: `\`${valueText}\` is stored in \`${targetText}\` with its autograd graph, and \`${targetText}\` outlives the training step: ${whatIsHeld(model, acc.value, acc.stmt, acc.kind)}.`, range: rangeOf(acc.stmt), fixes: [] };
  }
  return {
    message: `\`${valueText}\` is stored in \`${targetText}\` with its autograd graph, and \`${targetText}\` outlives the training step: ${whatIsHeld(model, acc.value, acc.stmt, acc.kind)}.`,
    range: rangeOf(acc.stmt),
    fixes: [{ title: `Store \`${suffix === '.item()' ? `${fixedText}.item()` : `${fixedText}${suffix}`}\` instead`, edits: [appendToExpression(model, fixed, suffix)] }],
  };
}

/** For an object built by a project class's constructor, the argument that carries history. */
function constructorArgument(model: FileModel, value: SyntaxNode): SyntaxNode | undefined {
  const v = unparen(value);
  if (v.type !== 'call' || !resolveCall(model, v)?.cls) return undefined;
  const args = child(v, 'arguments');
  for (const a of args ? namedChildren(args) : []) {
    const found = carrierIn(model, a.type === 'keyword_argument' ? (child(a, 'value') ?? a) : a);
    if (found) return found;
  }
  return undefined;
}

/**
 * The class an instance was built from: `meter = AverageMeter()` -> `AverageMeter`. For a
 * parameter, the argument its callers pass (`train(meter=AverageMeter())`, two levels up).
 */
function classOfInstance(model: FileModel, receiver: SyntaxNode, at: SyntaxNode, depth = 0): string | undefined {
  if (receiver.type !== 'identifier' && receiver.type !== 'attribute') return undefined;
  const key = model.src(receiver);
  const fn = model.functionOf(at);
  if (fn && receiver.type === 'identifier' && model.isParam(fn.node, key) && model.bindingsIn(fn.node, key).length === 0) {
    return depth < 3 ? (classFromCallers(fn, key, depth) ?? classOfDefault(model, fn, key)) : undefined;
  }
  const b = model.binding(key, at) ?? model.bindingAnywhere(key);
  const value = b?.value && !b.unpacked ? unparen(b.value) : undefined;
  // `loss = self.loss`, `self.loss = loss`: the instance another name holds.
  if (b && value && (value.type === 'identifier' || value.type === 'attribute') && model.src(value) !== key) return depth < 3 ? classOfInstance(model, value, b.at, depth + 1) : undefined;
  if (value?.type !== 'call') return undefined;
  const callee = model.callee(value);
  const name = callee ? lastName(model.src(callee)) : '';
  return /^[A-Z]/.test(name) ? name : undefined;
}

/** `def __init__(self, loss=NLLLoss())`: the class a parameter's default value is built from. */
function classOfDefault(model: FileModel, fn: FunctionInfo, param: string): string | undefined {
  const value = parameterDefault(fn, param);
  if (!value) return undefined;
  const v = unparen(value);
  const callee = v.type === 'call' ? model.callee(v) : undefined;
  const cls = callee ? lastName(model.src(callee)) : '';
  return /^[A-Z]/.test(cls) ? cls : undefined;
}

function classFromCallers(fn: FunctionInfo, param: string, depth: number): string | undefined {
  const index = fn.params.indexOf(param);
  const offset = fn.cls && (fn.params[0] === 'self' || fn.params[0] === 'cls') ? 1 : 0;
  for (const site of callSitesOf(fn)) {
    const arg = site.model.keywordArg(site.call, param) ?? site.model.positionalArgs(site.call)[index - offset];
    if (!arg) continue;
    const cls = classOfInstance(site.model, unparen(arg), site.call, depth + 1);
    if (cls) return cls;
  }
  return undefined;
}

function checkMeterCall(model: FileModel, call: SyntaxNode): RawFinding | undefined {
  const mc = model.methodCall(call);
  if (!mc || mc.method.startsWith('_') || !model.facts.isAccumulatingMethod(mc.method)) return undefined;
  const cls = classOfInstance(model, mc.receiver, call);
  if (!cls) return undefined;
  const indexes = model.facts.accumulatingParams(cls, mc.method);
  if (!indexes) return undefined;
  // A buffer the class backpropagates from itself (REINFORCE's `put_data` then `train_net`): the rollout's graph is the loss's.
  if (model.facts.classesNamed(cls).some((c) => [...c.methods.values()].some((m) => c.model.hasTrainingSignal(m.node)))) return undefined;
  const args = model.positionalArgs(call);
  for (const i of indexes) {
    // `meter.update([loss], n)`: the element of a list literal that carries the graph.
    const arg = args[i] && carrierIn(model, args[i]);
    if (!arg) continue;
    const stmt = call.parent?.type === 'expression_statement' ? call.parent : call;
    if (!outlivesStep(model, baseOf(mc.receiver), stmt, true)) continue;
    const suffix = model.isScalar(arg) && !meterUsesAsTensor(model, cls, mc.method, i) ? '.item()' : '.detach()';
    const argText = model.src(arg);
    // `p = augment.tune(pred)` with `p` feeding the loss: what the call returns may carry `pred`'s graph.
    const resultUsed = call.parent?.type !== 'expression_statement';
    return {
      message: `\`${model.src(call).split('\n')[0]}\` keeps \`${argText}\` with its autograd graph: \`${cls}.${mc.method}\` accumulates it into the ${cls} that outlives the training step: ${whatIsHeld(model, arg, stmt)}.`,
      range: rangeOf(stmt),
      // A dict of stats (`run_stats.update(iter_stats)`, read with `.items()`) has no `.detach()`: the fix belongs where it is filled.
      fixes: (resultUsed && feedsBackward(model, call)) || leavesForBackward(model, stmt) || meterTakesContainer(model, cls, mc.method, i) ? [] : [{ title: `Pass \`${argText}${suffix}\` instead`, edits: [appendToExpression(model, arg, suffix)] }],
    };
  }
  return undefined;
}

/**
 * `accumulate(epoch_losses, losses)` where the project function adds its second parameter into
 * its first (`running[k] += v` for each item): the first argument outlives the step and the
 * second carries a graph.
 */
function checkHelperCall(model: FileModel, call: SyntaxNode): RawFinding | undefined {
  const args = child(call, 'arguments');
  if (call.parent?.type !== 'expression_statement' || !args || namedChildren(args).length < 2) return undefined;
  const target = resolveCall(model, call);
  if (!target?.fn || target.cls) return undefined;
  for (const { into, from } of accumulatedParams(target.fn)) {
    if (into === 'self') continue;
    const store = argumentFor(model, call, target, into);
    const given = argumentFor(model, call, target, from);
    const value = given && carrierIn(model, given);
    if (!store || !value) continue;
    const base = baseOf(unparen(store));
    if (base.type !== 'identifier' && base.type !== 'attribute') continue;
    const stmt = call.parent?.type === 'expression_statement' ? call.parent : call;
    if (model.reachesBackward(model.src(base), stmt)) continue;
    if (!outlivesStep(model, base, stmt, true)) continue;
    const suffix = model.isScalar(value) ? '.item()' : '.detach()';
    const valueText = model.src(value);
    return {
      message: `\`${model.src(call).split('\n')[0]}\` keeps \`${valueText}\` with its autograd graph: \`${target.fn.name}\` accumulates it into \`${model.src(store)}\`, which outlives the training step: ${whatIsHeld(model, value, stmt)}.`,
      range: rangeOf(stmt),
      fixes: value.type === 'identifier' || value.type === 'attribute' || value.type === 'call' ? [{ title: `Pass \`${valueText}${suffix}\` instead`, edits: [appendToExpression(model, value, suffix)] }] : [],
    };
  }
  return undefined;
}

/**
 * missing-set-epoch: a DataLoader over a shuffling `DistributedSampler` is iterated epoch
 * after epoch, but nothing calls `set_epoch(epoch)`, so every epoch sees the same order.
 *
 * Reported only when the whole chain is visible: the sampler is built from
 * `torch.utils.data.DistributedSampler`, the loader from that sampler, and the loader is
 * iterated (directly, or by a workspace function it is passed to) inside a loop that runs
 * more than once. A `set_epoch` call anywhere in that loop, or in a function the loop calls
 * (three levels down), on any receiver, is taken as the fix being in place.
 */
import { headerRange, indentUnit, insertAtBodyTop } from '../fixes';
import { lastName, type FileModel, type FunctionInfo } from '../model';
import type { Rule } from '../rule';
import { ancestors, child, contains, descendants, isScopeNode, loopTypes, namedChildren, unparen, type SyntaxNode } from '../syntax';
import { docsUrlFor, type Fix, type RawFinding } from '../types';

const id = 'missing-set-epoch';
const distributedSampler = /^torch\.utils\.data\.(distributed\.)?DistributedSampler$/;
/** Evaluation data: the order does not matter there. */
const evalName = /(^|_)(val|valid|validation|dev|test|eval|evaluation)(_|$|loader|sampler|set|data)/i;
const maxDepth = 3;

export const rule: Rule = {
  id,
  defaultSeverity: 'warning',
  summary: 'A DistributedSampler is iterated across epochs without sampler.set_epoch(epoch): every epoch repeats the same order.',
  explanation:
    '`DistributedSampler` seeds its shuffle with `seed + epoch`, and the epoch only changes when `set_epoch` is called. ' +
    'Without it every epoch visits the samples in the same order, and each rank always sees the same shard, which hurts convergence. ' +
    'There is no memory effect: GPU memory is the same either way. Call `sampler.set_epoch(epoch)` (or `loader.sampler.set_epoch(epoch)`) at the start of every epoch, before iterating the loader.',
  docsUrl: docsUrlFor(id),
  check,
};

interface Chain {
  readonly scope: SyntaxNode;
  /** How to reach the sampler in the fix: `sampler` or `loader.sampler`. */
  readonly samplerText: string;
  /** The sampler may be `None` (`... if distributed else None`): the fix guards the call. */
  readonly mayBeNone: boolean;
  readonly loaderKey: string;
  /** The loader's assignment target: a use of `loaderKey` counts only when this binding reaches it. */
  readonly loaderTarget: SyntaxNode;
  /** Statements that bind the sampler and the loader: they must be outside the epoch loop. */
  readonly bound: readonly SyntaxNode[];
}

function check(model: FileModel): RawFinding[] {
  const findings: RawFinding[] = [];
  const reported = new Set<SyntaxNode>();
  for (const call of model.targetCalls()) {
    if (!distributedSampler.test(model.qualify(model.callee(call)) ?? '')) continue;
    const shuffle = model.keywordArg(call, 'shuffle');
    if (shuffle && model.src(shuffle) === 'False') continue;
    for (const chain of chainsFrom(model, call)) {
      for (const loop of epochLoops(model, chain)) {
        if (reported.has(loop)) continue;
        if (chain.bound.some((b) => contains(loop, b))) continue;
        if (loopSetsEpoch(model, loop)) continue;
        reported.add(loop);
        const fix = fixFor(model, loop, chain);
        findings.push({
          message: `\`${chain.loaderKey}\` is iterated every epoch, but \`${chain.samplerText}.set_epoch(epoch)\` is never called: the DistributedSampler repeats the same order each epoch.`,
          range: headerRange(loop),
          fixes: fix ? [fix] : [],
        });
      }
    }
  }
  return findings;
}

/** The statement `x = <value>` (through a conditional and parentheses) that binds `node`, and its target. */
function assignedTo(node: SyntaxNode): { stmt: SyntaxNode; target: SyntaxNode; viaConditional: boolean } | undefined {
  let n = node;
  let viaConditional = false;
  while (n.parent && (n.parent.type === 'parenthesized_expression' || n.parent.type === 'conditional_expression')) {
    if (n.parent.type === 'conditional_expression') viaConditional = true;
    n = n.parent;
  }
  const a = n.parent;
  if (a?.type !== 'assignment' || n.field !== 'right') return undefined;
  const left = child(a, 'left');
  if (!left || (left.type !== 'identifier' && left.type !== 'attribute')) return undefined;
  return { stmt: a, target: left, viaConditional };
}

function samplerArg(model: FileModel, loaderCall: SyntaxNode): SyntaxNode | undefined {
  return model.keywordArg(loaderCall, 'sampler') ?? model.positionalArgs(loaderCall)[3];
}

const isDataLoader = (model: FileModel, call: SyntaxNode): boolean => /(^|\.)DataLoader$/.test(model.qualify(model.callee(call)) ?? '');

/** The loaders built from this sampler call, in the scope where it is built. */
function chainsFrom(model: FileModel, samplerCall: SyntaxNode): Chain[] {
  const scope = model.scopeOf(samplerCall);
  const chains: Chain[] = [];
  const loaderChain = (loaderCall: SyntaxNode, samplerText: string | undefined, mayBeNone: boolean, samplerStmt: SyntaxNode | undefined): void => {
    const bound = assignedTo(loaderCall);
    if (!bound || bound.viaConditional || model.scopeOf(loaderCall) !== scope) return;
    const loaderKey = model.src(bound.target);
    if (evalName.test(lastName(loaderKey)) || (samplerText && evalName.test(lastName(samplerText)))) return;
    chains.push({ scope, samplerText: samplerText ?? `${loaderKey}.sampler`, mayBeNone, loaderKey, loaderTarget: bound.target, bound: samplerStmt ? [samplerStmt, bound.stmt] : [bound.stmt] });
  };
  // `DataLoader(ds, sampler=DistributedSampler(ds))`
  const direct = samplerCall.parent?.type === 'keyword_argument' ? samplerCall.parent.parent?.parent : samplerCall.parent?.parent;
  if (direct?.type === 'call' && isDataLoader(model, direct) && samplerArg(model, direct) === samplerCall) {
    loaderChain(direct, undefined, false, undefined);
    return chains;
  }
  const bound = assignedTo(samplerCall);
  if (!bound) return chains;
  const samplerKey = model.src(bound.target);
  const mayBeNone = bound.viaConditional || model.bindingsIn(scope, samplerKey).some((b) => b.value && model.src(b.value) === 'None');
  for (const call of callsPassing(model, model.callsIn(scope), samplerKey)) {
    if (!isDataLoader(model, call)) continue;
    const arg = samplerArg(model, call);
    if (arg && model.src(unparen(arg)) === samplerKey) loaderChain(call, samplerKey, mayBeNone, bound.stmt);
  }
  return chains;
}

/**
 * Does `expr` (a for loop's iterable) iterate `key`: `loader`, `enumerate(loader)`,
 * `tqdm(enumerate(loader), ...)`, `zip(a, loader)`? With `target`, only when that
 * assignment is the binding of `key` in force there (not `loader = accelerator.prepare(loader)`).
 */
function iterates(model: FileModel, expr: SyntaxNode, key: string, target?: SyntaxNode, depth = 0): boolean {
  const n = unparen(expr);
  if ((n.type === 'identifier' || n.type === 'attribute') && model.src(n) === key) return !target || model.binding(key, n)?.target === target;
  if (n.type !== 'call' || depth > 4 || model.methodCall(n)) return false;
  return model.positionalArgs(n).some((a) => iterates(model, a, key, target, depth + 1));
}

/** Loops of the scope, outside nested functions and classes. */
function loopsIn(model: FileModel, scope: SyntaxNode): SyntaxNode[] {
  const body = scope === model.root ? scope : child(scope, 'body');
  if (!body) return [];
  return [...descendants(body, isScopeNode)].filter((n) => loopTypes.has(n.type));
}

/**
 * The `for` loops of a scope that may iterate `key` (an identifier or attribute that `iterates`
 * would reach in the iterable), from one walk per scope node: each sampler chain looked the
 * scope's loops up anew, so a module with many samplers cost samplers x module size. A
 * scope's nodes are kept across edits only when its text is unchanged, so the index stays right.
 */
const loopsByKey = new WeakMap<SyntaxNode, Map<string, SyntaxNode[]>>();

function loopsIterating(model: FileModel, scope: SyntaxNode, key: string): readonly SyntaxNode[] {
  let index = loopsByKey.get(scope);
  if (!index) {
    index = new Map();
    for (const loop of loopsIn(model, scope)) {
      const right = loop.type === 'for_statement' ? child(loop, 'right') : undefined;
      if (!right) continue;
      for (const k of new Set(iteratedKeys(model, right))) {
        let loops = index.get(k);
        if (!loops) index.set(k, (loops = []));
        loops.push(loop);
      }
    }
    loopsByKey.set(scope, index);
  }
  return index.get(key) ?? [];
}

/** The keys `iterates` can match in `expr`, with the same walk. */
function iteratedKeys(model: FileModel, expr: SyntaxNode, depth = 0, out: string[] = []): string[] {
  const n = unparen(expr);
  if (n.type === 'identifier' || n.type === 'attribute') out.push(model.src(n));
  else if (n.type === 'call' && depth <= 4 && !model.methodCall(n)) for (const a of model.positionalArgs(n)) iteratedKeys(model, a, depth + 1, out);
  return out;
}

/** A scope's calls by the text of each argument (positional or keyword value), built once per call list. */
const callsByArgument = new WeakMap<readonly SyntaxNode[], Map<string, SyntaxNode[]>>();

/** The calls that may pass `key` as an argument (what `passesToIterator` looks for first). */
function callsPassing(model: FileModel, calls: readonly SyntaxNode[], key: string): readonly SyntaxNode[] {
  let index = callsByArgument.get(calls);
  if (!index) {
    index = new Map();
    for (const call of calls) {
      const args = child(call, 'arguments');
      if (!args) continue;
      const texts = new Set<string>();
      for (const a of namedChildren(args)) {
        const value = a.type === 'keyword_argument' ? child(a, 'value') : a.type === 'dictionary_splat' || a.type === 'list_splat' ? undefined : a;
        if (value) texts.add(model.src(unparen(value)));
      }
      for (const t of texts) {
        let list = index.get(t);
        if (!list) index.set(t, (list = []));
        list.push(call);
      }
    }
    callsByArgument.set(calls, index);
  }
  return index.get(key) ?? [];
}

/** The nearest loop around `node` within its scope. */
function enclosingLoop(node: SyntaxNode): SyntaxNode | undefined {
  for (const a of ancestors(node)) {
    if (isScopeNode(a)) return undefined;
    if (loopTypes.has(a.type)) return a;
  }
  return undefined;
}

/** The loops in which the loader is iterated once per pass: around a `for ... in loader`, or around a call that hands the loader to a function that iterates it. */
function epochLoops(model: FileModel, chain: Chain): SyntaxNode[] {
  const out = new Set<SyntaxNode>();
  for (const loop of loopsIterating(model, chain.scope, chain.loaderKey)) {
    const right = loop.type === 'for_statement' ? child(loop, 'right') : undefined;
    if (!right || !iterates(model, right, chain.loaderKey, chain.loaderTarget)) continue;
    const outer = enclosingLoop(loop);
    if (outer) out.add(outer);
  }
  for (const call of callsPassing(model, model.callsIn(chain.scope), chain.loaderKey)) {
    if (!passesToIterator(model, call, chain.loaderKey, 0, chain.loaderTarget)) continue;
    const outer = enclosingLoop(call);
    if (outer) out.add(outer);
  }
  return [...out].sort((a, b) => a.order - b.order);
}

/** The workspace functions a call can reach, by name (a method call matches methods of that name). */
function targetsOf(model: FileModel, call: SyntaxNode): FunctionInfo[] {
  const callee = model.callee(call);
  if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return [];
  const q = model.qualify(callee) ?? '';
  if (/^(torch|lightning|pytorch_lightning|transformers|accelerate)\./.test(q)) return [];
  return [...model.facts.functionsNamed(lastName(model.src(callee)))];
}

/** Does this call hand `key` to a workspace function that iterates that parameter (or hands it on)? */
function passesToIterator(model: FileModel, call: SyntaxNode, key: string, depth: number, target?: SyntaxNode): boolean {
  if (depth > maxDepth) return false;
  const args = child(call, 'arguments');
  if (!args) return false;
  const items = namedChildren(args);
  const positional = items.filter((a) => a.type !== 'keyword_argument' && a.type !== 'dictionary_splat' && a.type !== 'list_splat');
  const index = positional.findIndex((a) => model.src(unparen(a)) === key);
  const keyword = items.find((a) => a.type === 'keyword_argument' && child(a, 'value') && model.src(unparen(child(a, 'value') as SyntaxNode)) === key);
  if (index === -1 && !keyword) return false;
  const use = keyword ? child(keyword, 'value') : positional[index];
  if (target && use && model.binding(key, unparen(use))?.target !== target) return false;
  const isMethod = model.methodCall(call) !== undefined;
  for (const fn of targetsOf(model, call)) {
    const offset = isMethod && fn.cls && (fn.params[0] === 'self' || fn.params[0] === 'cls') ? 1 : 0;
    const kwName = keyword ? child(keyword, 'name') : undefined;
    const param = kwName ? model.src(kwName) : fn.params[index + offset];
    if (!param || !fn.params.includes(param)) continue;
    if (fn.model.bindingsIn(fn.node, param).length > 0) continue;
    if (loopsIterating(fn.model, fn.node, param).some((l) => iterates(fn.model, child(l, 'right') as SyntaxNode, param))) return true;
    if (callsPassing(fn.model, fn.model.callsIn(fn.node), param).some((c) => passesToIterator(fn.model, c, param, depth + 1))) return true;
  }
  return false;
}

/** A `.set_epoch(...)` call in the loop, or in a workspace function called from it (three levels down). */
function loopSetsEpoch(model: FileModel, loop: SyntaxNode): boolean {
  for (const d of descendants(loop)) {
    if (d.type !== 'call') continue;
    if (model.methodCall(d)?.method === 'set_epoch') return true;
    if (targetsOf(model, d).some((fn) => functionSetsEpoch(fn, 1))) return true;
  }
  return false;
}

/** A function's calls, and whether one is `.set_epoch(...)`: its own text, kept while the function is. */
const callsOf = new WeakMap<FunctionInfo, { direct: boolean; calls: SyntaxNode[] }>();

function callsIn(fn: FunctionInfo): { direct: boolean; calls: SyntaxNode[] } {
  let known = callsOf.get(fn);
  if (!known) {
    known = { direct: false, calls: [] };
    for (const d of fn.body ? descendants(fn.body) : []) {
      if (d.type !== 'call') continue;
      if (fn.model.methodCall(d)?.method === 'set_epoch') known.direct = true;
      known.calls.push(d);
    }
    callsOf.set(fn, known);
  }
  return known;
}

/** Memoised per function and depth (the answer is cut off at `maxDepth`, so no cycle), shared by every loop and kept across edits. */
function functionSetsEpoch(fn: FunctionInfo, depth: number): boolean {
  return fn.model.functionFact(fn, `setsEpoch:${depth}`, () => {
    const { direct, calls } = callsIn(fn);
    return direct || (depth < maxDepth && calls.some((d) => targetsOf(fn.model, d).some((g) => functionSetsEpoch(g, depth + 1))));
  }) ?? false;
}

/** The epoch counter of the loop: `for epoch in ...`, `for epoch, x in ...`, or a `while` loop's `epoch += 1`. */
function epochVariable(model: FileModel, loop: SyntaxNode): string | undefined {
  if (loop.type === 'for_statement') {
    const left = child(loop, 'left');
    if (!left) return undefined;
    if (left.type === 'identifier') return model.src(left) === '_' ? undefined : model.src(left);
    const names = [...descendants(left)].filter((d) => d.type === 'identifier').map((d) => model.src(d));
    return names.find((n) => /epoch|^ep$|^e$/i.test(n));
  }
  for (const d of descendants(loop, isScopeNode)) {
    if (d.type !== 'augmented_assignment') continue;
    const left = child(d, 'left');
    if (left?.type === 'identifier' && /epoch/i.test(model.src(left))) return model.src(left);
  }
  return undefined;
}

function fixFor(model: FileModel, loop: SyntaxNode, chain: Chain): Fix | undefined {
  const epoch = epochVariable(model, loop);
  if (!epoch) return undefined;
  const call = `${chain.samplerText}.set_epoch(${epoch})`;
  const edit = insertAtBodyTop(model, loop, chain.mayBeNone ? [`if ${chain.samplerText} is not None:`, `${indentUnit(model)}${call}`] : [call]);
  return edit ? { title: `Call \`${call}\` at the start of each epoch`, edits: [edit] } : undefined;
}

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
import { lastName, type ClassInfo, type FileModel, type FunctionInfo } from '../model';
import { moduleOnlyMethods, type Binding } from '../model/types';
import type { Rule } from '../rule';
import { calleesOf, constructedClass, resolveCall } from '../model/summaries';
import { track } from '../deps';
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
  /** Only reached as `loader.sampler`, which is no DistributedSampler in a run that is not distributed: no fix is sure. */
  readonly unfixable?: boolean;
}

function check(model: FileModel): RawFinding[] {
  const findings: RawFinding[] = [];
  const reported = new Set<SyntaxNode>();
  for (const found of loopsOverLoaderAttributes(model)) {
    if (reported.has(found.loop)) continue;
    reported.add(found.loop);
    findings.push({
      message: `\`${found.key}\` is iterated every epoch, but \`${found.key}.sampler.set_epoch(epoch)\` is never called: the DistributedSampler (${found.origin}) repeats the same order each epoch.`,
      range: headerRange(found.loop),
      fixes: [],
    });
  }
  for (const call of model.targetCalls()) {
    let chains: Chain[];
    if (distributedSampler.test(model.qualify(model.callee(call)) ?? '')) {
      const shuffle = model.keywordArg(call, 'shuffle');
      if (shuffle && model.src(shuffle) === 'False') continue;
      chains = chainsFrom(model, call);
    } else if (pluginLoader(model, call)) {
      chains = pluginChains(model, call);
    } else {
      // `train_loader, sampler = build_loader(...)`: a project function that builds the loader.
      if (call.parent?.type !== 'assignment' || call.field !== 'right' || !mayReturnLoader(model, call)) continue;
      const target = resolveCall(model, call);
      const returned = target?.fn && !target.cls ? returnedLoader(target.fn) : undefined;
      const chain = returned && chainFromResult(model, call, returned);
      if (!chain) continue;
      chains = [chain];
    }
    for (const chain of chains) {
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

interface ReturnedLoader {
  /** The element of the result that is the loader (undefined: the result itself), and the sampler's. */
  readonly loader: number | undefined;
  readonly sampler: number | undefined;
  readonly mayBeNone: boolean;
}

/**
 * Can the function this call reaches (`resolveCall`: one named like its callee's last name, or a
 * `__call__`) return a loader (`returnedLoader`)? By names alone, before the call is resolved:
 * most assigned calls (`out = model(x)`) have no workspace function of their name that does.
 */
function mayReturnLoader(model: FileModel, call: SyntaxNode): boolean {
  const callee = model.callee(call);
  if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return false;
  const name = lastName(model.src(callee));
  const attr = callee.type === 'attribute' ? child(callee, 'attribute') : undefined;
  const method = attr ? model.src(attr) : name;
  return loaderNamed(model, name) || loaderNamed(model, '__call__') || (method !== name && loaderNamed(model, method));
}

/** Does some workspace function named `name` return a loader (`returnedLoader`)? Once per name and file version. */
function loaderNamed(model: FileModel, name: string): boolean {
  return model.fact(`loaderNamed:${name}`, () => model.facts.functionsNamed(name).some((fn) => returnedLoader(fn) !== undefined)) ?? false;
}

/** Does `fn` build a loader over a shuffling DistributedSampler and return it (alone or in a tuple)? */
function returnedLoader(fn: FunctionInfo): ReturnedLoader | undefined {
  return fn.model.fact(`returnedLoader:${fn.node.order}`, () => {
    const model = fn.model;
    for (const call of model.callsIn(fn.node)) {
      let chains: Chain[];
      if (pluginLoader(model, call)) {
        // `return self.plugin.prepare_dataloader(ds, batch_size=n, shuffle=True)`
        if (call.parent?.type === 'return_statement') return { loader: undefined, sampler: undefined, mayBeNone: false };
        chains = pluginChains(model, call);
      } else {
        if (!distributedSampler.test(model.qualify(model.callee(call)) ?? '')) continue;
        const shuffle = model.keywordArg(call, 'shuffle');
        if (shuffle && model.src(shuffle) === 'False') continue;
        // `return DataLoader(ds, ..., sampler=DistributedSampler(ds))`
        const loaderCall = call.parent?.type === 'keyword_argument' ? call.parent.parent?.parent : call.parent?.parent;
        if (loaderCall?.type === 'call' && isDataLoader(model, loaderCall) && samplerArg(model, loaderCall) === call && loaderCall.parent?.type === 'return_statement') {
          return { loader: undefined, sampler: undefined, mayBeNone: false };
        }
        chains = chainsFrom(model, call);
      }
      for (const chain of chains) {
        for (const ret of fn.body ? descendants(fn.body, isScopeNode) : []) {
          const value = ret.type === 'return_statement' ? namedChildren(ret)[0] : undefined;
          const v = value && unparen(value);
          if (!v) continue;
          if (model.src(v) === chain.loaderKey) return { loader: undefined, sampler: undefined, mayBeNone: chain.mayBeNone };
          if (v.type === 'expression_list' || v.type === 'tuple') {
            const items = namedChildren(v).map((i) => model.src(i));
            const loader = items.indexOf(chain.loaderKey);
            const sampler = items.indexOf(chain.samplerText);
            if (loader >= 0) return { loader, sampler: sampler >= 0 ? sampler : undefined, mayBeNone: chain.mayBeNone };
          }
        }
      }
    }
    return undefined;
  });
}

/**
 * ColossalAI's `plugin.prepare_dataloader(ds, batch_size, shuffle=True)` in a file that imports colossalai: a
 * DataLoader over a shuffling DistributedSampler that the plugin builds (colossalai/booster/plugin/dp_plugin_base.py),
 * whose epoch the script sets itself (`dataloader.sampler.set_epoch(epoch)`, as ColossalAI's own applications do).
 * `shuffle` defaults to False there; a variable's value is not known, and is not taken for True.
 */
function pluginLoader(model: FileModel, call: SyntaxNode): boolean {
  // Asked of every call of the file: the attribute's text first, without building the method call.
  const callee = model.callee(call);
  const attr = callee?.type === 'attribute' ? child(callee, 'attribute') : undefined;
  if (!attr || !model.textIs(attr, 'prepare_dataloader')) return false;
  const shuffle = model.keywordArg(call, 'shuffle') ?? model.positionalArgs(call)[2];
  if (!shuffle || model.src(shuffle) !== 'True') return false;
  for (const q of model.aliases.values()) if (q === 'colossalai' || q.startsWith('colossalai.')) return true;
  return false;
}

/** The loader a `pluginLoader` call is assigned to, as a chain (its sampler is `loader.sampler`). */
function pluginChains(model: FileModel, call: SyntaxNode): Chain[] {
  const bound = assignedTo(call);
  if (!bound || bound.viaConditional) return [];
  const loaderKey = model.src(bound.target);
  if (evalName.test(lastName(loaderKey))) return [];
  return [{ scope: model.scopeOf(call), samplerText: `${loaderKey}.sampler`, mayBeNone: false, loaderKey, loaderTarget: bound.target, bound: [bound.stmt] }];
}

/** The chain of a call of a loader-building function, in the caller's scope: `loader = build(...)`, `loader, sampler = build(...)`. */
function chainFromResult(model: FileModel, call: SyntaxNode, returned: ReturnedLoader): Chain | undefined {
  const assign = call.parent;
  const left = assign?.type === 'assignment' && call.field === 'right' ? child(assign, 'left') : undefined;
  if (!assign || !left) return undefined;
  const items = left.type === 'pattern_list' || left.type === 'tuple_pattern' ? namedChildren(left) : [left];
  const loaderTarget = returned.loader === undefined ? (items.length === 1 ? items[0] : undefined) : items.length > 1 ? items[returned.loader] : undefined;
  const samplerTarget = returned.sampler !== undefined && items.length > 1 ? items[returned.sampler] : undefined;
  if (!loaderTarget || (loaderTarget.type !== 'identifier' && loaderTarget.type !== 'attribute')) return undefined;
  // `sampler = DistributedSampler(ds) if distributed else None` in the helper: a call that leaves a
  // switch of the helper at its default False/None (or passes False) may build no distributed loader.
  const target = returned.mayBeNone ? resolveCall(model, call) : undefined;
  if (returned.mayBeNone && (!target?.fn || switchedOff(model, call, target.fn))) return undefined;
  const loaderKey = model.src(loaderTarget);
  if (evalName.test(lastName(loaderKey))) return undefined;
  const samplerText = samplerTarget && (samplerTarget.type === 'identifier' || samplerTarget.type === 'attribute') ? model.src(samplerTarget) : `${loaderKey}.sampler`;
  return { scope: model.scopeOf(call), samplerText, mayBeNone: returned.mayBeNone, loaderKey, loaderTarget, bound: [assign], unfixable: returned.mayBeNone && !samplerTarget };
}

/**
 * The expression that holds `node`'s value, through parentheses and the branches of conditionals (`x if c else None`,
 * not the condition), and whether a conditional picks it.
 */
function pickedFrom(node: SyntaxNode): { n: SyntaxNode; viaConditional: boolean } {
  let n = node;
  let viaConditional = false;
  while (n.parent && (n.parent.type === 'parenthesized_expression' || (n.parent.type === 'conditional_expression' && namedChildren(n.parent)[1] !== n))) {
    if (n.parent.type === 'conditional_expression') viaConditional = true;
    n = n.parent;
  }
  return { n, viaConditional };
}

/** The statement `x = <value>` (through a conditional and parentheses) that binds `node`, and its target. */
function assignedTo(node: SyntaxNode): { stmt: SyntaxNode; target: SyntaxNode; viaConditional: boolean } | undefined {
  const { n, viaConditional } = pickedFrom(node);
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

/** The loaders built from this sampler call, in the scope where it is built (through a `BatchSampler` too). */
function chainsFrom(model: FileModel, samplerCall: SyntaxNode): Chain[] {
  const scope = model.scopeOf(samplerCall);
  const chains: Chain[] = [];
  const loaderChain = (loaderCall: SyntaxNode, samplerText: string | undefined, mayBeNone: boolean, stmts: readonly SyntaxNode[], path = '.sampler'): void => {
    const bound = assignedTo(loaderCall);
    if (!bound || bound.viaConditional || model.scopeOf(loaderCall) !== scope) return;
    const loaderKey = model.src(bound.target);
    if (evalName.test(lastName(loaderKey)) || (samplerText && evalName.test(lastName(samplerText)))) return;
    chains.push({ scope, samplerText: samplerText ?? `${loaderKey}${path}`, mayBeNone, loaderKey, loaderTarget: bound.target, bound: [...stmts, bound.stmt] });
  };
  // `BatchSampler(sampler, batch_size, drop_last)` handed to a loader's `batch_sampler=` (deep_sort's
  // train_multiGPU.py): the loader draws its batches from the sampler all the same.
  const batchChains = (batchCall: SyntaxNode, samplerText: string | undefined, mayBeNone: boolean, stmts: readonly SyntaxNode[]): void => {
    const loader = loaderTakingBatches(model, batchCall);
    if (loader) return loaderChain(loader, samplerText, mayBeNone, stmts, '.batch_sampler.sampler');
    const bound = assignedTo(batchCall);
    if (!bound || bound.viaConditional || model.scopeOf(batchCall) !== scope) return;
    const key = model.src(bound.target);
    for (const call of callsPassing(model, model.callsIn(scope), key)) {
      const arg = isDataLoader(model, call) ? model.keywordArg(call, 'batch_sampler') : undefined;
      if (arg && model.src(unparen(arg)) === key) loaderChain(call, samplerText ?? `${key}.sampler`, mayBeNone, [...stmts, bound.stmt]);
    }
  };
  // `DataLoader(ds, sampler=DistributedSampler(ds))`, `BatchSampler(DistributedSampler(ds), ...)`; also picked by a
  // condition, `sampler=DistributedSampler(ds) if distributed else None` (diffwave: held-out round 24), reported
  // without a fix: where the condition gave None the loader's own sampler has no `set_epoch`.
  const { n: arg, viaConditional: picked } = pickedFrom(samplerCall);
  const direct = arg.parent?.type === 'keyword_argument' ? arg.parent.parent?.parent : arg.parent?.parent;
  if (direct?.type === 'call' && isDataLoader(model, direct) && samplerArg(model, direct) === arg) {
    const before = chains.length;
    loaderChain(direct, undefined, picked, []);
    if (picked) for (let i = before; i < chains.length; i++) chains[i] = { ...chains[i], unfixable: true };
    return chains;
  }
  if (direct?.type === 'call' && isBatchSampler(model, direct) && batchSamplerArg(model, direct) === samplerCall) {
    batchChains(direct, undefined, false, []);
    return chains;
  }
  const bound = assignedTo(samplerCall);
  if (!bound) return chains;
  const samplerKey = model.src(bound.target);
  const mayBeNone = bound.viaConditional || model.bindingsIn(scope, samplerKey).some((b) => b.value && model.src(b.value) === 'None');
  for (const call of callsPassing(model, model.callsIn(scope), samplerKey)) {
    const arg = isDataLoader(model, call) ? samplerArg(model, call) : isBatchSampler(model, call) ? batchSamplerArg(model, call) : undefined;
    if (!arg || model.src(unparen(arg)) !== samplerKey) continue;
    if (isDataLoader(model, call)) loaderChain(call, samplerKey, mayBeNone, [bound.stmt]);
    else batchChains(call, samplerKey, mayBeNone, [bound.stmt]);
  }
  return chains;
}

const isBatchSampler = (model: FileModel, call: SyntaxNode): boolean => /(^|\.)BatchSampler$/.test(model.qualify(model.callee(call)) ?? '');

/** The sampler a `BatchSampler(sampler, batch_size, drop_last)` batches. */
function batchSamplerArg(model: FileModel, call: SyntaxNode): SyntaxNode | undefined {
  return model.keywordArg(call, 'sampler') ?? model.positionalArgs(call)[0];
}

/** The loader call that takes `call` as its `batch_sampler=`, written in place. */
function loaderTakingBatches(model: FileModel, call: SyntaxNode): SyntaxNode | undefined {
  const kw = call.parent;
  const name = kw?.type === 'keyword_argument' ? child(kw, 'name') : undefined;
  const loader = name && model.src(name) === 'batch_sampler' ? kw?.parent?.parent : undefined;
  return loader?.type === 'call' && isDataLoader(model, loader) && model.keywordArg(loader, 'batch_sampler') === call ? loader : undefined;
}

/**
 * Does `expr` (a for loop's iterable) iterate `key`: `loader`, `enumerate(loader)`,
 * `tqdm(enumerate(loader), ...)`, `zip(a, loader)`? With `target`, only when that
 * assignment is the binding of `key` in force there (not `loader = accelerator.prepare(loader)`).
 */
function iterates(model: FileModel, expr: SyntaxNode, key: string, target?: SyntaxNode, depth = 0): boolean {
  const n = unparen(expr);
  if ((n.type === 'identifier' || n.type === 'attribute') && model.src(n) === key) return !target || model.binding(key, n)?.target === target;
  if (n.type === 'identifier' && depth <= 4) {
    const wrapped = wrappedIterable(model, n);
    return !!wrapped && iterates(model, wrapped, key, target, depth + 1);
  }
  if (n.type !== 'call' || depth > 4 || model.methodCall(n)) return false;
  return model.positionalArgs(n).some((a) => iterates(model, a, key, target, depth + 1));
}

/**
 * The call a loop's name was bound to when it wraps an iterable: `with tqdm(loader, desc=...) as pbar:` then
 * `for x in pbar:` (ColossalAI's ResNet example), or `pbar = tqdm(loader)`; not a method's result.
 */
function wrappedIterable(model: FileModel, name: SyntaxNode): SyntaxNode | undefined {
  const b = model.binding(model.src(name), name);
  const v = b?.value && !b.unpacked ? unparen(b.value) : undefined;
  return v?.type === 'call' && !model.methodCall(v) ? v : undefined;
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
  if (n.type === 'identifier' || n.type === 'attribute') {
    out.push(model.src(n));
    const wrapped = n.type === 'identifier' && depth <= 4 ? wrappedIterable(model, n) : undefined;
    if (wrapped) iteratedKeys(model, wrapped, depth + 1, out);
  } else if (n.type === 'call' && depth <= 4 && !model.methodCall(n)) for (const a of model.positionalArgs(n)) iteratedKeys(model, a, depth + 1, out);
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
  const { loops, calls } = usesByBinding(model, chain.scope, chain.loaderKey).get(chain.loaderTarget) ?? { loops: [], calls: [] };
  for (const loop of loops) {
    const outer = enclosingLoop(loop);
    if (outer) out.add(outer);
  }
  for (const call of calls) {
    if (!passesToIterator(model, call, chain.loaderKey, 0, chain.loaderTarget)) continue;
    const outer = enclosingLoop(call);
    if (outer) out.add(outer);
  }
  return [...out].sort((a, b) => a.order - b.order);
}

/**
 * The loops of a scope that iterate `key`, and the calls that pass it on, by the binding of
 * `key` in force at each use (`iterates` and `passesToIterator` with a target), in document
 * order: once per scope, key and file version. Each sampler's chain looked every same-named
 * loader's uses up through `binding()` again, so module-level code with many of them cost
 * samplers x uses (issue #13: 50,000 lines of module-level code).
 */
function usesByBinding(model: FileModel, scope: SyntaxNode, key: string): ReadonlyMap<SyntaxNode, { loops: SyntaxNode[]; calls: SyntaxNode[] }> {
  return model.fact(`loaderUses:${scope === model.root ? -1 : scope.order}:${key}`, () => {
    const byTarget = new Map<SyntaxNode, { loops: SyntaxNode[]; calls: SyntaxNode[] }>();
    const entry = (target: SyntaxNode): { loops: SyntaxNode[]; calls: SyntaxNode[] } => {
      let e = byTarget.get(target);
      if (!e) byTarget.set(target, (e = { loops: [], calls: [] }));
      return e;
    };
    for (const loop of loopsIterating(model, scope, key)) {
      const right = loop.type === 'for_statement' ? child(loop, 'right') : undefined;
      const targets = new Set<SyntaxNode>();
      if (right) boundTargetsIterated(model, right, key, targets);
      for (const t of targets) entry(t).loops.push(loop);
    }
    for (const call of callsPassing(model, model.callsIn(scope), key)) {
      const use = passedUse(model, call, key);
      const target = use && model.binding(key, unparen(use))?.target;
      if (target) entry(target).calls.push(call);
    }
    return byTarget;
  }) ?? new Map<SyntaxNode, { loops: SyntaxNode[]; calls: SyntaxNode[] }>();
}

/** The binding targets of `key` in force where `iterates` would match it in `expr` (the same walk). */
function boundTargetsIterated(model: FileModel, expr: SyntaxNode, key: string, out: Set<SyntaxNode>, depth = 0): void {
  const n = unparen(expr);
  if (n.type === 'identifier' || n.type === 'attribute') {
    if (model.src(n) !== key) {
      // `epoch_iterator = tqdm(train_loader)` then `for batch in epoch_iterator:` (ViT-pytorch), as `iteratedKeys` follows it.
      const wrapped = n.type === 'identifier' && depth <= 4 ? wrappedIterable(model, n) : undefined;
      if (wrapped) boundTargetsIterated(model, wrapped, key, out, depth + 1);
      return;
    }
    const target = model.binding(key, n)?.target;
    if (target) out.add(target);
    return;
  }
  if (n.type !== 'call' || depth > 4 || model.methodCall(n)) return;
  for (const a of model.positionalArgs(n)) boundTargetsIterated(model, a, key, out, depth + 1);
}

/** The argument by which `call` passes `key` (a keyword's value first, else the first positional one), as `passesToIterator` picks it. */
function passedUse(model: FileModel, call: SyntaxNode, key: string): SyntaxNode | undefined {
  const args = child(call, 'arguments');
  if (!args) return undefined;
  const items = namedChildren(args);
  const keyword = items.find((a) => a.type === 'keyword_argument' && child(a, 'value') && model.src(unparen(child(a, 'value') as SyntaxNode)) === key);
  if (keyword) return child(keyword, 'value');
  return items.filter((a) => a.type !== 'keyword_argument' && a.type !== 'dictionary_splat' && a.type !== 'list_splat').find((a) => model.src(unparen(a)) === key);
}

/** The workspace functions a call can reach, by name (a method call matches methods of that name). */
function targetsOf(model: FileModel, call: SyntaxNode): readonly FunctionInfo[] {
  const t = targetOrName(model, call);
  return typeof t === 'string' ? model.facts.functionsNamed(t) : t;
}

/** `targetsOf`, or the name whose workspace functions it is when the summaries cannot tell which one the call reaches. */
function targetOrName(model: FileModel, call: SyntaxNode): readonly FunctionInfo[] | string {
  const callee = model.callee(call);
  if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return [];
  const q = model.qualify(callee) ?? '';
  if (/^(torch|lightning|pytorch_lightning|transformers|accelerate)\./.test(q)) return [];
  // The function the call reaches, when the summaries can tell (the same name in another script is not it).
  const target = resolveCall(model, call);
  if (target?.fn && !target.cls) return [target.fn];
  // `model.train()` on a model is nn.Module's (or a module class's override), not a project's `def train(...)` that
  // calls `set_epoch` (a loop whose helper switches the model to train mode would be taken to reshuffle).
  const mc = model.methodCall(call);
  if (mc && moduleOnlyMethods.has(mc.method) && model.isModelExpr(mc.receiver, call)) return calleesOf(model, call);
  return lastName(model.src(callee));
}

/**
 * Does a function this call can reach set the epoch (`functionSetsEpoch` at `depth`)? For a call
 * matched by name, once per name, depth and file version: every `x.update(...)` of a file
 * otherwise asked the same question of every workspace function named `update`.
 */
function callSetsEpoch(model: FileModel, call: SyntaxNode, depth: number): boolean {
  // Most calls cannot reach a `set_epoch` by any name: that is known without resolving them.
  if (!mayReachSetEpoch(model, call, depth)) return false;
  const t = targetOrName(model, call);
  if (typeof t !== 'string') return t.some((fn) => functionSetsEpoch(fn, depth));
  // The depth only grows, so the fact never asks itself.
  return model.fact(`setsEpochNamed:${depth}:${t}`, () => model.facts.functionsNamed(t).some((fn) => functionSetsEpoch(fn, depth))) ?? false;
}

/**
 * Can `callSetsEpoch(model, call, depth)` be true, by names alone? Every function the call can
 * reach (`targetOrName`: the one `resolveCall` finds, or the workspace's functions of its last
 * name) is named like its callee's last name, or `__call__` (an instance called). So it is only
 * true when some workspace function of one of those names may set the epoch within the levels
 * left (`mayNamed`). Asked before `resolveCall`, which the epoch loops' calls otherwise asked of
 * nearly every call of the file, three levels down.
 */
function mayReachSetEpoch(model: FileModel, call: SyntaxNode, depth: number): boolean {
  const callee = model.callee(call);
  if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return false;
  const name = lastName(model.src(callee));
  if (mayNamed(model, name, depth) || mayNamed(model, '__call__', depth)) return true;
  // `x . m(...)`: the method's own name, when the text around the dot is not plain.
  const attr = callee.type === 'attribute' ? child(callee, 'attribute') : undefined;
  const method = attr ? model.src(attr) : name;
  return method !== name && mayNamed(model, method, depth);
}

/**
 * May a workspace function named `name` set the epoch at `depth` (`functionSetsEpoch`)? True when
 * one calls `.set_epoch(...)` itself, or (above the last level) makes a call that
 * `mayReachSetEpoch` lets through: a superset of the functions that do, found by names only.
 * Once per name, depth and file version; its lookups are the names it followed (`fn:<name>`),
 * so an edit that could change the answer marks it stale. The depth only grows: no cycle.
 */
function mayNamed(model: FileModel, name: string, depth: number): boolean {
  return model.fact(`mayEpoch:${depth}:${name}`, () => model.facts.functionsNamed(name).some((fn) => {
    const { direct, calls } = callsIn(fn);
    return direct || (depth < maxDepth && calls.some((c) => mayReachSetEpoch(fn.model, c, depth + 1)));
  })) ?? false;
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
    // A parameter rebound to something else is not the loader; `data_loader = tqdm(data_loader)` still iterates it (deep_sort).
    if (fn.model.bindingsIn(fn.node, param).some((b) => !rewraps(fn.model, b, param))) continue;
    if (loopsIterating(fn.model, fn.node, param).some((l) => iterates(fn.model, child(l, 'right') as SyntaxNode, param))) return true;
    if (callsPassing(fn.model, fn.model.callsIn(fn.node), param).some((c) => passesToIterator(fn.model, c, param, depth + 1))) return true;
  }
  return false;
}

/** `key = tqdm(key, ...)`: a binding that wraps the value it replaces, which iterating it still draws from. */
function rewraps(model: FileModel, b: Binding, key: string): boolean {
  const v = b.value && !b.unpacked ? unparen(b.value) : undefined;
  return v?.type === 'call' && !model.methodCall(v) && model.positionalArgs(v).some((a) => model.src(unparen(a)) === key);
}

/** A `.set_epoch(...)` call in the loop, or in a workspace function called from it (three levels down). */
function loopSetsEpoch(model: FileModel, loop: SyntaxNode): boolean {
  for (const d of descendants(loop)) {
    if (d.type !== 'call') continue;
    if (model.methodCall(d)?.method === 'set_epoch') return true;
    if (callSetsEpoch(model, d, 1)) return true;
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
    return direct || (depth < maxDepth && calls.some((d) => callSetsEpoch(fn.model, d, depth + 1)));
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
  if (chain.unfixable) return undefined;
  const epoch = epochVariable(model, loop);
  if (!epoch) return undefined;
  const call = `${chain.samplerText}.set_epoch(${epoch})`;
  const edit = insertAtBodyTop(model, loop, chain.mayBeNone ? [`if ${chain.samplerText} is not None:`, `${indentUnit(model)}${call}`] : [call]);
  return edit ? { title: `Call \`${call}\` at the start of each epoch`, edits: [edit] } : undefined;
}

/** Does the call leave a parameter of `fn` that defaults to False/None at its default, or pass it False/None? */
function switchedOff(model: FileModel, call: SyntaxNode, fn: FunctionInfo): boolean {
  const params = child(fn.node, 'parameters');
  const offset = model.methodCall(call) && fn.cls && (fn.params[0] === 'self' || fn.params[0] === 'cls') ? 1 : 0;
  const positional = model.positionalArgs(call);
  for (const p of params ? namedChildren(params) : []) {
    if (p.type !== 'default_parameter' && p.type !== 'typed_default_parameter') continue;
    const name = child(p, 'name');
    const value = child(p, 'value');
    if (!name || !value || !/^(False|None)$/.test(fn.model.src(value))) continue;
    const param = fn.model.src(name);
    const given = model.keywordArg(call, param) ?? positional[fn.params.indexOf(param) - offset];
    if (!given || /^(False|None)$/.test(model.src(given))) return true;
  }
  return false;
}

/**
 * Epoch loops of a class that iterate a loader kept in an attribute (`self.train_data`, set in
 * `__init__` from a parameter) through its methods, where the class is built with a loader over a
 * shuffling DistributedSampler from a project helper (`Trainer(model, prepare_dataloader(ds), ...)`).
 */
function loopsOverLoaderAttributes(model: FileModel): { loop: SyntaxNode; key: string; origin: string }[] {
  const out: { loop: SyntaxNode; key: string; origin: string }[] = [];
  const focus = model.focus;
  if (focus && focus.type !== 'class_definition' && focus.type !== 'decorated_definition') return out;
  const fns = focus ? [...descendants(focus, (n) => n.type === 'function_definition')].filter((n) => n.type === 'function_definition').map((n) => model.functionByNode.get(n)) : model.functions;
  for (const fn of fns) {
    if (!fn?.cls || !fn.body || !keepsLoader(fn.cls)) continue;
    for (const loop of loopsIn(model, fn.node)) {
      if (loop.type !== 'for_statement') continue;
      for (const key of attributesIteratedIn(model, loop, fn.cls, 0)) {
        const origin = distributedOrigin(fn.cls, key);
        if (!origin || loopSetsEpoch(model, loop)) continue;
        out.push({ loop, key, origin });
        break;
      }
    }
  }
  return out;
}

/** Does some `self.x` of the class hold a distributed loader (the cheap test before any loop is looked at)? */
function keepsLoader(cls: ClassInfo): boolean {
  // Reads another method of the class: compared whole, not by method (`signatureOf`).
  track(`cls:${cls.name}`);
  const init = cls.methods.get('__init__');
  if (!init?.body) return false;
  return cls.model.fact(`keepsLoader:${cls.node.order}`, () => {
    for (const n of descendants(init.body as SyntaxNode, isScopeNode)) {
      if (n.type !== 'assignment') continue;
      const left = child(n, 'left');
      if (left?.type === 'attribute' && /^self\.\w+$/.test(cls.model.src(left)) && distributedOrigin(cls, cls.model.src(left))) return true;
    }
    return false;
  }) ?? false;
}

/** The `self.x` that a loop's body iterates, directly or in a method of the class it calls (two levels). */
function attributesIteratedIn(model: FileModel, node: SyntaxNode, cls: ClassInfo, depth: number): string[] {
  const out: string[] = [];
  for (const d of descendants(node, isScopeNode)) {
    if (d === node) continue;
    if (d.type === 'for_statement') {
      const right = child(d, 'right');
      const r = right && unparen(right);
      if (r && r.type === 'attribute' && /^self\.\w+$/.test(model.src(r))) out.push(model.src(r));
    }
    if (d.type === 'call') {
      // `self._run_epoch(epoch, self.train_loader)`: handed to a function that iterates it.
      for (const a of model.positionalArgs(d)) {
        const key = model.src(unparen(a));
        if (/^self\.\w+$/.test(key) && passesToIterator(model, d, key, 1)) out.push(key);
      }
    }
    if (d.type === 'call' && depth < 2) {
      const mc = model.methodCall(d);
      if (!mc || model.src(mc.receiver) !== 'self') continue;
      track(`cls:${cls.name}`);
      const m = cls.methods.get(mc.method);
      if (m?.body) out.push(...attributesIteratedIn(model, m.body, cls, depth + 1));
    }
  }
  return out;
}

/** Where `self.x` of `cls` gets a shuffling distributed loader: `__init__` stores a parameter that a constructor call fills with a helper's loader. */
function distributedOrigin(cls: ClassInfo, key: string): string | undefined {
  track(`cls:${cls.name}`);
  const init = cls.methods.get('__init__');
  if (!init?.body) return undefined;
  const model = cls.model;
  if (evalName.test(lastName(key))) return undefined;
  const stored = model.bindingsIn(init.node, key).map((b) => (b.value ? unparen(b.value) : undefined));
  // `self.train_loader = self._prepare_dataloader(train_dataset)`
  if (stored.length === 1 && stored[0]?.type === 'call') {
    if (!mayReturnLoader(model, stored[0])) return undefined;
    const target = resolveCall(model, stored[0]);
    const returned = target?.fn && !target.cls ? returnedLoader(target.fn) : undefined;
    return returned && returned.loader === undefined && !returned.mayBeNone ? `built by \`${target?.fn?.name}()\`` : undefined;
  }
  const param = stored.length === 1 && stored[0]?.type === 'identifier' ? model.src(stored[0]) : undefined;
  if (!param || !init.params.includes(param)) return undefined;
  const index = init.params.indexOf(param) - 1;
  for (const site of model.facts.callSites(cls.name)) {
    // A call of another class of the same name (another project's `Trainer` in the workspace) passes nothing to this one.
    if (constructedClass(site.model, site.call) !== cls) continue;
    const arg = site.model.keywordArg(site.call, param) ?? site.model.positionalArgs(site.call)[index];
    if (!arg) continue;
    let value: SyntaxNode | undefined = unparen(arg);
    if (value.type === 'identifier') {
      const b = site.model.binding(site.model.src(value), site.call);
      value = b?.value && !b.unpacked ? unparen(b.value) : undefined;
    }
    if (value?.type !== 'call' || !mayReturnLoader(site.model, value)) continue;
    const target = resolveCall(site.model, value);
    const returned = target?.fn && !target.cls ? returnedLoader(target.fn) : undefined;
    if (returned && returned.loader === undefined && !returned.mayBeNone) return `built by \`${target?.fn?.name}()\`, passed to \`${cls.name}\``;
  }
  return undefined;
}
/**
 * Which code runs on a training path, for fixes that must not change what training computes.
 * A grad guard (`@torch.no_grad()` on a function, `with torch.no_grad():` around a statement)
 * is only safe where nothing it covers feeds a backward pass: a helper that the training step
 * also calls must keep recording its graph, so its guard belongs at the evaluation caller.
 *
 * Call graph by name over the workspace (plain names in their own file or where imported,
 * `self.m` in its class, `x.m` any method named `m`); every answer that is not known leans
 * towards "training", which only ever withholds a fix.
 */
import { callSitesOf, type CallSite, type FileModel, type FunctionInfo } from './model';
import { ancestors, baseOf, child, contains, descendants, isScopeNode, namedChildren, statementOf, type SyntaxNode } from './syntax';
import { optimizerLike } from './model/types';
import { topLevelNamed } from './model/summaries';

/** 'train': some caller's computation reaches a backward pass; 'unknown': callers unknown (a callback, a property); 'eval': every caller is known and evaluates. */
export type PathStatus = 'eval' | 'train' | 'unknown';

/** Decorators that leave the function called by name as written. */
const transparentDecorators = /^(staticmethod|classmethod|(abc\.)?abstractmethod|(typing\.)?(overload|override)|(typing_extensions\.)?override|(functools\.)?wraps|torch\.jit\.(unused|ignore|export))$/;
/** Hooks a training framework calls and backpropagates (Lightning, Hugging Face Trainer): no call sites, yet training. */
/** Names of evaluation entry points (as missing-no-grad reads a function's name). */
const inferenceEntry = /^_*(eval|valid|val_|test|predict|infer)/i;
const trainingHook = /^(training_step|train_step|compute_loss|training_step_end|forward|__call__|backward|step|closure)$|^_?(train|fit)($|_)|loss/i;

function combine(a: PathStatus, b: PathStatus): PathStatus {
  if (a === 'train' || b === 'train') return 'train';
  return a === 'unknown' || b === 'unknown' ? 'unknown' : 'eval';
}

/** The project functions a call can reach. */
export function resolveCallee(model: FileModel, call: SyntaxNode): FunctionInfo[] {
  const callee = model.callee(call);
  if (!callee) return [];
  if (callee.type === 'identifier') {
    const name = model.src(callee);
    if (model.aliases.has(name)) return model.facts.functionsNamed(name).filter((f) => f.model !== model && !f.cls);
    // A name bound to something else (a local, a parameter) is not the function.
    const scope = model.scopeOf(call);
    if (scope !== model.root && (model.isParam(scope, name) || model.bindingsIn(scope, name).length > 0)) return [];
    return topLevelNamed(model, name);
  }
  if (callee.type !== 'attribute') return [];
  const object = child(callee, 'object');
  const attr = child(callee, 'attribute');
  if (!object || !attr) return [];
  const name = model.src(attr);
  const receiver = model.src(object);
  const all = model.facts.functionsNamed(name);
  if (receiver === 'self' || receiver === 'cls') {
    const own = model.functionOf(call)?.cls;
    const mine = own?.methods.get(name);
    if (mine) return [mine];
    return all.filter((f) => !!f.cls);
  }
  const root = receiver.split('.')[0];
  if (model.aliases.has(root) && object.type !== 'call') return all.filter((f) => !f.cls && f.model !== model);
  return all.filter((f) => !!f.cls);
}

/** A call of `.backward()`, `autograd.grad`, `manual_backward` or an optimizer's `step`. */
export function isTrainingCall(model: FileModel, call: SyntaxNode): boolean {
  const mc = model.methodCall(call);
  if (mc?.method === 'backward' || mc?.method === 'manual_backward') return true;
  if (mc?.method === 'step' && optimizerLike.test(model.src(mc.receiver))) return true;
  return /^torch\.autograd\.(grad|backward)$/.test(model.qualify(model.callee(call)) ?? '');
}

/** Does `fn` run a backward pass or an optimizer step, itself or through the project functions it calls? */
export function trains(fn: FunctionInfo): boolean {
  if (fn.model.hasTrainingSignal(fn.node)) return true;
  // Memoised per file version; a cycle (f calls g calls f) sees `false` for the function in progress.
  return fn.model.fact(`trains:${fn.node.order}`, () => fn.model.callsIn(fn.node).some((c) => resolveCallee(fn.model, c).some((g) => g !== fn && trains(g)))) ?? false;
}

/**
 * Can `fn` be called from places the call sites do not show: named as a value (a callback, a
 * stored function), wrapped by a decorator, a property, a method Python calls implicitly?
 */
export function callersUnknown(fn: FunctionInfo): boolean {
  // `forward` runs through `model(x)`, a dunder through its operator.
  if ((/^__\w+__$/.test(fn.name) && fn.name !== '__init__') || (fn.cls && fn.name === 'forward')) return true;
  for (const d of fn.decorators) {
    const target = d.type === 'call' ? fn.model.callee(d) : d;
    // A framework's registration (`@app.route("/predict")`) of a function named for inference is an evaluation entry point.
    if (!target || !transparentDecorators.test(fn.model.qualify(target) ?? fn.model.src(target))) {
      if (!(inferenceEntry.test(fn.name) && fn.model.src(target ?? d) !== 'property')) return true;
    }
  }
  return fn.model.facts.valueReferences(fn.name).some((r) => {
    const n = r.node;
    if (!passedOrStored(n)) return false;
    if (n.type === 'attribute') {
      const object = child(n, 'object');
      if (!object) return false;
      // `self.predict` / `model.predict` for a method; `utils.predict` for a module's function.
      return fn.cls ? true : r.model.aliases.has(r.model.src(object).split('.')[0]);
    }
    // A bare name is a method only in its class's own body (`handlers = [predict]`).
    if (fn.cls) return r.model === fn.model && contains(fn.cls.node, n) && r.model.functionOf(n) === undefined;
    if (r.model !== fn.model && !r.model.aliases.has(fn.name)) return false;
    const scope = r.model.scopeOf(n);
    // A local of the same name is not the function.
    return !(scope !== r.model.root && (r.model.isParam(scope, fn.name) || r.model.bindingsIn(scope, fn.name).length > 0));
  });
}

/** Is this value handed on (an argument, an element, an assigned or returned value) rather than tested or read? */
function passedOrStored(n: SyntaxNode): boolean {
  const p = n.parent;
  if (!p) return false;
  if (p.type === 'keyword_argument') return n.field === 'value';
  if (p.type === 'assignment' || p.type === 'pair') return n.field === 'right' || n.field === 'value';
  return /^(argument_list|list|tuple|set|expression_list|return_statement|yield|lambda|conditional_expression)$/.test(p.type);
}

/**
 * Is the body of `fn` executed on a training path? For a function that does not itself train:
 * 'train' when some call site's computation reaches a backward pass (directly, or because the
 * caller is itself on a training path), 'unknown' when not all callers are known.
 */
export function functionStatus(fn: FunctionInfo): PathStatus {
  // Memoised per file version. A cycle (f calls g calls f) sees no contribution from itself: the other callers decide.
  return fn.model.fact(`path:${fn.node.order}`, () => {
    if (callersUnknown(fn)) return 'unknown';
    const sites = sitesOf(fn);
    if (sites.length === 0) return trainingHook.test(fn.name) ? 'unknown' : 'eval';
    let status: PathStatus = 'eval';
    for (const s of sites) {
      status = combine(status, siteStatus(s));
      if (status === 'train') break;
    }
    return status;
  }) ?? 'eval';
}

/**
 * The call sites that can reach `fn`: `callSitesOf`, less those that cannot name it: `self.f()`
 * or `obj.f()` for a module's function (only `module.f()` can), a bare `f()` for a method.
 */
export function sitesOf(fn: FunctionInfo): CallSite[] {
  return callSitesOf(fn).filter((s) => {
    const callee = s.model.callee(s.call);
    if (fn.cls) return callee?.type === 'attribute';
    if (callee?.type !== 'attribute') return true;
    const object = child(callee, 'object');
    return !!object && object.type !== 'call' && s.model.aliases.has(s.model.src(object).split('.')[0]);
  });
}

/** Is the computation of this call on a training path? */
export function siteStatus(site: CallSite): PathStatus {
  const { model, call } = site;
  const state = model.gradState(call);
  if (state === 'off') return 'eval';
  if (state === 'on') return 'train';
  const caller = model.functionOf(call);
  for (const a of ancestors(call)) {
    if (caller && a === caller.node) break;
    // A lambda runs wherever it is passed to.
    if (a.type === 'lambda') return 'unknown';
  }
  const scopeNode = caller?.node ?? model.root;
  if (caller ? trains(caller) : model.hasTrainingSignal(model.root)) {
    if (feedsBackward(model, call)) return 'train';
    if (resolveCallee(model, call).some((f) => storesWhatBackwardReads(f, model, call))) return 'train';
    return returnsFrom(model, call, scopeNode) && caller ? functionStatus(caller) : 'eval';
  }
  return caller ? functionStatus(caller) : 'eval';
}

/**
 * Does the value of `call` flow into a backward pass in its scope (as an argument, through
 * assignments, containers)? Unlike `callReachesBackward`, a call of a function that trains is not
 * enough: its value is what matters here.
 */
export function feedsBackward(model: FileModel, call: SyntaxNode): boolean {
  const stmt = statementOf(call);
  if (!stmt) return false;
  const acc = stmt.type === 'expression_statement' ? model.accumulation(stmt) : undefined;
  if (acc && (contains(acc.value, call) || acc.value === call)) {
    const base = baseOf(acc.target);
    if (model.reachesBackward(model.src(base), stmt) || model.reachesBackward(model.src(acc.target), stmt)) return true;
  }
  const expr = stmt.type === 'expression_statement' ? namedChildren(stmt)[0] : undefined;
  if (expr?.type === 'assignment' || expr?.type === 'augmented_assignment') {
    const left = child(expr, 'left');
    for (const t of left ? [left, ...descendants(left)] : []) {
      if (t.type !== 'identifier' && t.type !== 'attribute' && t.type !== 'subscript') continue;
      if (model.reachesBackward(model.src(t), stmt) || model.reachesBackward(model.src(baseOf(t)), stmt)) return true;
    }
  }
  // Inside a backward call's arguments or receiver; the value of a `return` in a scope that backpropagates it.
  for (const a of ancestors(call)) {
    if (a.type === 'call' && isTrainingCall(model, a)) return true;
    if (a.type === 'named_expression' || (a.type === 'assignment' && a !== expr)) {
      const left = child(a, a.type === 'named_expression' ? 'name' : 'left');
      if (left && model.reachesBackward(model.src(left), a)) return true;
    }
    if (a === stmt) break;
  }
  return false;
}

/** Does `fn` store a value in an attribute (`self.loss = ...`) that the caller at `at` backpropagates? */
function storesWhatBackwardReads(fn: FunctionInfo, model: FileModel, at: SyntaxNode): boolean {
  if (!fn.body) return false;
  for (const n of descendants(fn.body, isScopeNode)) {
    if (n.type !== 'assignment' && n.type !== 'augmented_assignment') continue;
    const left = child(n, 'left');
    if (left?.type === 'attribute' && model.reachesBackward(fn.model.src(left), at)) return true;
  }
  return false;
}

/** Does the value at `node` leave its function (returned, yielded), directly or through the names it is assigned to? */
export function returnsFrom(model: FileModel, node: SyntaxNode, scope: SyntaxNode): boolean {
  const names = new Set<string>();
  const stmt = statementOf(node);
  if (!stmt) return false;
  if (stmt.type === 'return_statement' || [...ancestors(node)].some((a) => a.type === 'yield' && contains(stmt, a))) return true;
  collectBound(model, stmt, names);
  return escapes(model, names, scope);
}

/** Names bound (or accumulated into) by `stmt`; attributes, subscripts and globals are kept as their text. */
function collectBound(model: FileModel, stmt: SyntaxNode, out: Set<string>): void {
  for (const n of [stmt, ...descendants(stmt, isScopeNode)]) {
    if (n.type === 'assignment' || n.type === 'augmented_assignment' || n.type === 'for_statement') {
      const left = child(n, 'left');
      for (const t of left ? [left, ...descendants(left)] : []) if (t.type === 'identifier' || t.type === 'attribute' || t.type === 'subscript') out.add(model.src(baseOf(t)));
    }
    if (n.type === 'named_expression') {
      const name = child(n, 'name');
      if (name) out.add(model.src(name));
    }
    if (n.type === 'expression_statement') {
      const acc = model.accumulation(n);
      if (acc) out.add(model.src(baseOf(acc.target)));
    }
  }
}

/**
 * Do values held under `names` leave the scope: an attribute or a global, or a name that flows
 * (through assignments and accumulations) into a `return`, a `yield`, an attribute or a global.
 */
function escapes(model: FileModel, names: Set<string>, scope: SyntaxNode): boolean {
  const body = scope.type === 'function_definition' ? child(scope, 'body') : scope;
  if (!body) return true;
  const mentions = (n: SyntaxNode): boolean => {
    for (const d of [n, ...descendants(n, isScopeNode)]) {
      if (d.type === 'identifier' && (d.parent?.type !== 'attribute' || d.field === 'object') && names.has(model.src(d))) return true;
      if (d.type === 'attribute' && names.has(model.src(d))) return true;
    }
    return false;
  };
  for (let changed = true, rounds = 0; changed && rounds < 20; rounds++) {
    changed = false;
    for (const name of names) {
      if (name.includes('.') || name.includes('[') || (scope !== model.root && model.isGlobalIn(scope, name))) return true;
    }
    for (const n of descendants(body, isScopeNode)) {
      if ((n.type === 'return_statement' || n.type === 'yield') && mentions(n)) return true;
      if (n.type !== 'expression_statement') continue;
      const expr = namedChildren(n)[0];
      const acc = model.accumulation(n);
      let from: SyntaxNode | undefined;
      let to: SyntaxNode[] = [];
      if (acc) {
        from = acc.value;
        to = [baseOf(acc.target)];
      } else if (expr?.type === 'assignment' || expr?.type === 'augmented_assignment') {
        from = child(expr, 'right');
        const left = child(expr, 'left');
        to = left ? [left, ...descendants(left)].filter((t) => t.type === 'identifier' || t.type === 'attribute' || t.type === 'subscript').map(baseOf) : [];
      }
      if (!from || !mentions(from)) continue;
      for (const t of to) {
        const key = model.src(t);
        if (!names.has(key)) {
          names.add(key);
          changed = true;
        }
      }
    }
  }
  return false;
}

/**
 * Can `with torch.no_grad():` go around `target` (a statement of `fn`, or of the module) without
 * changing what training computes? It must run no training step, nothing it computes may reach a
 * backward pass here, and what it computes may leave the function only to callers that all evaluate.
 */
export function wrapSafe(model: FileModel, target: SyntaxNode, fn: FunctionInfo | undefined): boolean {
  for (const d of [target, ...descendants(target, isScopeNode)]) {
    if (d.type !== 'call') continue;
    if (isTrainingCall(model, d)) return false;
    if (resolveCallee(model, d).some((g) => trains(g))) return false;
    if (feedsBackward(model, d)) return false;
  }
  const names = new Set<string>();
  collectBound(model, target, names);
  const scope = fn?.node ?? model.root;
  for (const n of names) if (model.reachesBackward(n, target) && readAfter(model, n, target, scope)) return false;
  const leaves = [target, ...descendants(target, isScopeNode)].some((d) => d.type === 'return_statement' || d.type === 'yield') || escapes(model, names, scope);
  return !leaves || !fn || functionStatus(fn) === 'eval';
}

/**
 * Is the value `target` binds to `name` read after it: later in the scope, or earlier in a loop
 * around it without being bound again first (the next iteration)? Names are reused (`x`, `loss`
 * in the training loop and the validation loop): only a read that can see this binding counts.
 */
function readAfter(model: FileModel, name: string, target: SyntaxNode, scope: SyntaxNode): boolean {
  const body = scope.type === 'function_definition' ? child(scope, 'body') : scope;
  if (!body) return true;
  const loops = [...ancestors(target)].filter((a) => contains(body, a) && (a.type === 'for_statement' || a.type === 'while_statement'));
  for (const d of descendants(body, isScopeNode)) {
    if (d.type !== 'identifier' || model.src(d) !== name || (d.parent?.type === 'attribute' && d.field !== 'object') || contains(target, d)) continue;
    if (isStored(d)) continue;
    if (d.start >= target.end) return true;
    const loop = loops.find((l) => contains(l, d));
    if (loop && !boundBefore(model, name, d, loop)) return true;
  }
  return false;
}

/** Is `name` bound inside `loop` before `read` is reached (a loop over it around the read, an assignment before it)? */
function boundBefore(model: FileModel, name: string, read: SyntaxNode, loop: SyntaxNode): boolean {
  for (const a of ancestors(read)) {
    if (a === loop) break;
    if (a.type === 'for_statement' || a.type === 'for_in_clause') {
      const left = child(a, 'left');
      if (left && [left, ...descendants(left)].some((t) => t.type === 'identifier' && model.src(t) === name)) return true;
    }
  }
  for (const d of descendants(loop, isScopeNode)) {
    if (d.start >= read.start) break;
    if (d.type === 'identifier' && model.src(d) === name && isStored(d)) return true;
  }
  return false;
}

function isStored(id: SyntaxNode): boolean {
  for (let a: SyntaxNode = id, p = id.parent; p; a = p, p = p.parent) {
    if ((p.type === 'assignment' || p.type === 'for_statement' || p.type === 'for_in_clause') && a.field === 'left') return true;
    if (p.type === 'named_expression' && a.field === 'name') return true;
    if (!/^(pattern_list|tuple_pattern|list_pattern|tuple|list|list_splat_pattern|parenthesized_expression)$/.test(p.type)) return false;
  }
  return false;
}

/** Can `@torch.no_grad()` go on `fn`: it trains nothing and every caller is known to evaluate? */
export function decorateSafe(fn: FunctionInfo): boolean {
  return !trains(fn) && functionStatus(fn) === 'eval';
}

/** Methods only a tensor has (a Python number has none of them). */
const tensorOnlyMethods = /^(item|backward|detach|detach_|cpu|cuda|to|numpy|tolist|size|dim|numel|mean|sum|float|half|double|clone|view|reshape|squeeze|unsqueeze|add_|div_|mul_|zero_|all_reduce)$/;

/**
 * Is `key` used as a tensor after `stmt` in its scope: a tensor-only method on it, or an
 * argument of a `torch.` function (`dist.all_reduce(loss)`)? Not when the scope binds it to a
 * tensor (`torch.zeros(...)`), which stays one after `+= x.item()`.
 */
export function usedAsTensorAfter(model: FileModel, key: string, stmt: SyntaxNode): boolean {
  const scope = model.scopeOf(stmt);
  const body = scope.type === 'function_definition' ? child(scope, 'body') : scope;
  if (!body) return false;
  for (const b of model.bindingsIn(scope, key)) {
    if (b.value && !b.unpacked && /^torch\.(zeros|ones|tensor|full|empty|as_tensor)/.test(model.qualify(b.value.type === 'call' ? model.callee(b.value) : undefined) ?? '')) return false;
  }
  for (const n of descendants(body, isScopeNode)) {
    if (n.type !== 'call' || n.start < stmt.end) continue;
    const mc = model.methodCall(n);
    if (mc && model.src(mc.receiver) === key && tensorOnlyMethods.test(mc.method)) return true;
    const q = model.qualify(model.callee(n)) ?? '';
    if (q.startsWith('torch.') && model.positionalArgs(n).some((a) => model.src(a) === key)) return true;
  }
  return false;
}

/**
 * Does the method `cls.method` use its `index`-th parameter (without `self`) as a tensor, or an
 * attribute it accumulates it into (`self.sum += val`, then `self.sum.item()`)?
 */
export function meterUsesAsTensor(model: FileModel, cls: string, method: string, index: number): boolean {
  for (const fn of model.facts.functionsNamed(method)) {
    if (fn.cls?.name !== cls || !fn.body) continue;
    const param = fn.params.slice(1)[index];
    if (!param) continue;
    const keys = new Set([param]);
    for (const n of descendants(fn.body, isScopeNode)) {
      if (n.type !== 'expression_statement') continue;
      const acc = fn.model.accumulation(n);
      if (acc && [acc.value, ...descendants(acc.value)].some((d) => d.type === 'identifier' && fn.model.src(d) === param)) keys.add(fn.model.src(acc.target));
    }
    for (const m of fn.cls.methods.values()) {
      for (const n of m.body ? descendants(m.body, isScopeNode) : []) {
        if (n.type !== 'call') continue;
        const mc = fn.model.methodCall(n);
        const q = fn.model.qualify(fn.model.callee(n)) ?? '';
        const receiverKey = mc ? fn.model.src(mc.receiver) : '';
        const mine = m === fn || receiverKey.startsWith('self.');
        if (mc && mine && keys.has(receiverKey) && tensorOnlyMethods.test(mc.method)) return true;
        if (q.startsWith('torch.') && fn.model.positionalArgs(n).some((a) => keys.has(fn.model.src(a)) && (m === fn || fn.model.src(a).startsWith('self.')))) return true;
      }
    }
  }
  return false;
}

/**
 * Does the value a statement accumulates leave its function (returned, yielded) for a caller on a
 * training path, one that backpropagates what it gets? Then it is a loss, and `.item()` or
 * `.detach()` on it would change the gradients.
 */
export function leavesForBackward(model: FileModel, stmt: SyntaxNode): boolean {
  const fn = model.functionOf(stmt);
  if (!fn || !returnsFrom(model, stmt, fn.node)) return false;
  return functionStatus(fn) === 'train';
}

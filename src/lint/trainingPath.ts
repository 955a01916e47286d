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
import { trackKey } from './model/types';
import { calleesOf } from './model/summaries';

/** 'train': some caller's computation reaches a backward pass; 'unknown': callers unknown (a callback, a property); 'eval': every caller is known and evaluates. */
export type PathStatus = 'eval' | 'train' | 'unknown';

/** Decorators that leave the function called by name as written. */
const transparentDecorators = /^(staticmethod|classmethod|(abc\.)?abstractmethod|(typing\.)?(overload|override)|(typing_extensions\.)?override|(functools\.)?wraps|torch\.jit\.(unused|ignore|export))$/;
/** Hooks a training framework calls and backpropagates (Lightning, Hugging Face Trainer): no call sites, yet training. */
/** Names of evaluation entry points (as missing-no-grad reads a function's name). */
const inferenceEntry = /^_*(eval|valid|val_|test|predict|infer)/i;
/** Entry points of a training run (`fit()`, `train_model()`), which a framework or a script may call. */
const trainingEntry = /^_?(train|fit)($|_)/i;
const frameworkHook = /^(training_step|train_step|compute_loss|training_step_end|forward|__call__|backward|step|closure)$|loss/i;
const trainingHook = (name: string): boolean => frameworkHook.test(name) || trainingEntry.test(name);

function combine(a: PathStatus, b: PathStatus): PathStatus {
  if (a === 'train' || b === 'train') return 'train';
  return a === 'unknown' || b === 'unknown' ? 'unknown' : 'eval';
}

/** The project functions a call can reach: every candidate, by name (summaries.ts `calleesOf`). */
export const resolveCallee = calleesOf;

/**
 * A call of `.backward()`, `autograd.grad`, `manual_backward`, an optimizer's `step`, a loss scaler given the loss
 * and the optimizer, a library gradient step: what makes a scope a training step (the model's `isTrainingSignal`,
 * one definition for the rules and the fixes).
 */
export function isTrainingCall(model: FileModel, call: SyntaxNode): boolean {
  return model.isTrainingSignal(call);
}

/** Does `fn` run a backward pass or an optimizer step, itself or through the project functions it calls? */
export function trains(fn: FunctionInfo): boolean {
  if (fn.model.hasTrainingSignal(fn.node)) return true;
  // Through a cycle (f calls g calls f) too: whether any function it reaches trains (`cyclicFact`), kept across edits.
  return fn.model.cyclicFact(fn, 'trains', () => fn.model.callsIn(fn.node).some((c) => resolveCallee(fn.model, c).some((g) => g !== fn && trains(g))), or, false);
}

const or = (a: boolean, b: boolean): boolean => a || b;

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
  // A cycle (f calls g calls f) adds nothing of its own: the callers from outside it decide, for
  // every function in it alike (`cyclicFact`: the least fixpoint, kept across edits).
  return fn.model.cyclicFact(fn, 'path', () => {
    if (callersUnknown(fn)) return 'unknown';
    const sites = sitesOf(fn);
    // A training entry (`fit()`, `train_model()`) with no callers here that runs the training itself: what it
    // returns (the best score, a history) is a result its caller reads, not a value it backpropagates.
    if (sites.length === 0) return trainingHook(fn.name) && !(trainingEntry.test(fn.name) && trains(fn)) ? 'unknown' : 'eval';
    let status: PathStatus = 'eval';
    for (const s of sites) {
      status = combine(status, siteStatus(s));
      if (status === 'train') break;
    }
    return status;
  }, combine, 'eval');
}

/**
 * The call sites that can reach `fn`: `callSitesOf`, less those that cannot name it: `self.f()`
 * or `obj.f()` for a module's function (only `module.f()` can), a bare `f()` for a method.
 */
export function sitesOf(fn: FunctionInfo): CallSite[] {
  // Once per function and file version, like `callSitesOf`: the list is shared, not to be changed.
  return fn.model.nodeMemo(fn, 'sitesOf', () => sitesNaming(fn)) ?? sitesNaming(fn);
}

function sitesNaming(fn: FunctionInfo): CallSite[] {
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
  // Every function of the call's name asks about each of its sites (`sitesOf`): what the site
  // itself shows is found once per call and file version, the callers' status (a fact of a
  // cycle, `cyclicFact`) asked each time.
  const local = site.model.nodeMemo(site.call, 'siteStatus', () => localStatus(site)) ?? localStatus(site);
  if (local !== 'caller') return local;
  const caller = site.model.functionOf(site.call);
  return caller ? functionStatus(caller) : 'eval';
}

/** `siteStatus` as far as the site shows it; 'caller': as its caller's status. */
function localStatus(site: CallSite): PathStatus | 'caller' {
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
    // At module level nothing is returned to a caller: no need to follow the value.
    return caller && returnsFrom(model, call, scopeNode) ? 'caller' : 'eval';
  }
  return caller ? 'caller' : 'eval';
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
  return !!fn.body && attributesStored(fn.model, fn.body).some((text) => model.reachesBackward(text, at));
}

/** The attributes a function body assigns (`self.loss = ...`), in order: its own text, listed once per body. */
const storedAttributes = new WeakMap<SyntaxNode, string[]>();

function attributesStored(model: FileModel, body: SyntaxNode): string[] {
  let texts = storedAttributes.get(body);
  if (!texts) {
    texts = [];
    for (const n of descendants(body, isScopeNode)) {
      if (n.type !== 'assignment' && n.type !== 'augmented_assignment') continue;
      const left = child(n, 'left');
      if (left?.type === 'attribute') texts.push(model.src(left));
    }
    storedAttributes.set(body, texts);
  }
  return texts;
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

/** How many rounds `escapes` follows names through a scope's statements before it gives up (answering "no"). */
const escapeRounds = 20;

/**
 * A scope's statements as `escapes` reads them, in document order (nested functions and classes
 * left out): each `return`/`yield` with the names and attributes it mentions, and each statement
 * that moves a value (an assignment, an accumulation) with the names its value mentions and the
 * names it binds. Built once per scope and file version: the syntax of a scope never changes
 * while its model lives.
 */
interface EscapeIndex {
  /** Per item: a `return`/`yield` (`to` undefined), or a statement moving a value into `to`. */
  readonly items: { readonly to: readonly string[] | undefined }[];
  /** The items whose `return`/`yield`, or whose moved value, mentions a name or attribute text. */
  readonly byKey: ReadonlyMap<string, readonly number[]>;
}

const escapeIndexes = new WeakMap<FileModel, Map<SyntaxNode, EscapeIndex>>();

function escapeIndex(model: FileModel, body: SyntaxNode): EscapeIndex {
  let perModel = escapeIndexes.get(model);
  if (!perModel) escapeIndexes.set(model, (perModel = new Map<SyntaxNode, EscapeIndex>()));
  const known = perModel.get(body);
  if (known) return known;
  const items: { to: string[] | undefined }[] = [];
  const byKey = new Map<string, number[]>();
  const mention = (n: SyntaxNode, item: number): void => {
    for (const d of [n, ...descendants(n, isScopeNode)]) {
      let key: string | undefined;
      if (d.type === 'identifier' && (d.parent?.type !== 'attribute' || d.field === 'object')) key = model.src(d);
      else if (d.type === 'attribute') key = model.src(d);
      if (key === undefined) continue;
      const list = byKey.get(key);
      if (!list) byKey.set(key, [item]);
      else if (list[list.length - 1] !== item) list.push(item);
    }
  };
  for (const n of descendants(body, isScopeNode)) {
    if (n.type === 'return_statement' || n.type === 'yield') {
      items.push({ to: undefined });
      mention(n, items.length - 1);
      continue;
    }
    if (n.type !== 'expression_statement') continue;
    const expr = namedChildren(n)[0];
    const acc = model.accumulation(n);
    let from: SyntaxNode | undefined;
    let to: string[] = [];
    if (acc) {
      from = acc.value;
      to = [model.src(baseOf(acc.target))];
    } else if (expr?.type === 'assignment' || expr?.type === 'augmented_assignment') {
      from = child(expr, 'right');
      const left = child(expr, 'left');
      to = left ? [left, ...descendants(left)].filter((t) => t.type === 'identifier' || t.type === 'attribute' || t.type === 'subscript').map((t) => model.src(baseOf(t))) : [];
    }
    if (!from) continue;
    items.push({ to });
    mention(from, items.length - 1);
  }
  const index = { items, byKey };
  perModel.set(body, index);
  return index;
}

/**
 * Do values held under `names` leave the scope: an attribute or a global, or a name that flows
 * (through assignments and accumulations) into a `return`, a `yield`, an attribute or a global.
 *
 * The answer is that of following the names round by round through the scope's statements in
 * document order (a name bound by one statement is seen by the later ones in the same round, by
 * the earlier ones in the next), for at most `escapeRounds` rounds. It is computed as the
 * earliest (round, statement) at which each reachable name is bound, from the statements that
 * mention the names already reached (a shortest-path search over `escapeIndex`): the cost
 * follows the names reached, not the size of the scope.
 */
function escapes(model: FileModel, names: Set<string>, scope: SyntaxNode): boolean {
  const body = scope.type === 'function_definition' ? child(scope, 'body') : scope;
  if (!body) return true;
  const leavesByName = (name: string): boolean => name.includes('.') || name.includes('[') || (scope !== model.root && model.isGlobalIn(scope, name));
  for (const name of names) if (leavesByName(name)) return true;
  const { items, byKey } = escapeIndex(model, body);
  // A time is round * width + position + 1; the names given are there from the start (time 0).
  const width = items.length + 1;
  const limit = escapeRounds * width;
  const reached = new Map<string, number>();
  const fired = new Map<number, number>();
  const queue = new MinQueue();
  for (const name of names) {
    reached.set(name, 0);
    queue.push(0, name);
  }
  for (let next = queue.pop(); next; next = queue.pop()) {
    const [time, name] = next;
    if (time > (reached.get(name) ?? Infinity)) continue;
    const round = Math.floor(time / width);
    const position = (time % width) - 1;
    for (const item of byKey.get(name) ?? []) {
      // Seen by the later statements of the round it was bound in, by the earlier ones in the next.
      const when = (item > position ? round : round + 1) * width + item + 1;
      if (when >= limit || when >= (fired.get(item) ?? Infinity)) continue;
      fired.set(item, when);
      const to = items[item].to;
      if (!to) return true;
      for (const t of to) {
        if (when >= (reached.get(t) ?? Infinity)) continue;
        reached.set(t, when);
        // A name that leaves by itself is seen at the start of the next round.
        if (leavesByName(t) && (Math.floor(when / width) + 1) < escapeRounds) return true;
        queue.push(when, t);
      }
    }
  }
  return false;
}

/** A binary heap of (time, name), smallest time first. */
class MinQueue {
  private readonly heap: [number, string][] = [];

  push(time: number, name: string): void {
    const h = this.heap;
    h.push([time, name]);
    for (let i = h.length - 1; i > 0;) {
      const parent = (i - 1) >> 1;
      if (h[parent][0] <= h[i][0]) break;
      [h[parent], h[i]] = [h[i], h[parent]];
      i = parent;
    }
  }

  pop(): [number, string] | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length && last) {
      h[0] = last;
      for (let i = 0; ;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && h[l][0] < h[m][0]) m = l;
        if (r < h.length && h[r][0] < h[m][0]) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i], h[m]];
        i = m;
      }
    }
    return top;
  }
}

/**
 * Can `with torch.no_grad():` go around `target` (a statement of `fn`, or of the module) without
 * changing what training computes? It must run no training step, nothing it computes may reach a
 * backward pass here, and what it computes may leave the function only to callers that all evaluate.
 * A call given as `switchedOff` may reach a function that trains: the caller has found it called
 * with that function's training turned off.
 */
export function wrapSafe(model: FileModel, target: SyntaxNode, fn: FunctionInfo | undefined, switchedOff?: SyntaxNode): boolean {
  for (const d of [target, ...descendants(target, isScopeNode)]) {
    if (d.type !== 'call') continue;
    if (isTrainingCall(model, d)) return false;
    // `switchedOff`: a call of a function that trains only under a flag, passed False (missing-no-grad's flagOffForward).
    if (d !== switchedOff && resolveCallee(model, d).some((g) => trains(g))) return false;
    if (feedsBackward(model, d)) return false;
  }
  const names = new Set<string>();
  collectBound(model, target, names);
  const scope = fn?.node ?? model.root;
  for (const n of names) if (model.reachesBackward(n, target) && readAfter(model, n, target, scope)) return false;
  // A module-level statement has no caller to leave for.
  if (!fn) return true;
  const leaves = [target, ...descendants(target, isScopeNode)].some((d) => d.type === 'return_statement' || d.type === 'yield') || escapes(model, names, fn.node);
  return !leaves || functionStatus(fn) === 'eval';
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
  return (tensorUsesIn(model, body).get(key) ?? -1) >= stmt.end;
}

const tensorUses = new WeakMap<FileModel, Map<SyntaxNode, Map<string, number>>>();

/**
 * Per text, where a scope last uses it as a tensor (the start of the last call that does): a
 * tensor-only method on it, or an argument of a `torch.` function. Once per scope and file
 * version (an accumulation at module level looked through the whole module each time).
 */
function tensorUsesIn(model: FileModel, body: SyntaxNode): Map<string, number> {
  let perModel = tensorUses.get(model);
  if (!perModel) tensorUses.set(model, (perModel = new Map<SyntaxNode, Map<string, number>>()));
  let last = perModel.get(body);
  if (last) return last;
  last = new Map();
  for (const n of descendants(body, isScopeNode)) {
    if (n.type !== 'call') continue;
    const mc = model.methodCall(n);
    if (mc && tensorOnlyMethods.test(mc.method)) last.set(model.src(mc.receiver), Math.max(n.start, last.get(model.src(mc.receiver)) ?? -1));
    const q = model.qualify(model.callee(n)) ?? '';
    if (q.startsWith('torch.')) for (const a of model.positionalArgs(n)) last.set(model.src(a), Math.max(n.start, last.get(model.src(a)) ?? -1));
  }
  perModel.set(body, last);
  return last;
}

/**
 * Does the method `cls.method` use its `index`-th parameter (without `self`) as a tensor, or an
 * attribute it accumulates it into (`self.sum += val`, then `self.sum.item()`)?
 */
/**
 * Does `cls.method` read its parameter at `index` as a container (`for k, v in vals.items()`, `vals[k]`,
 * `for v in vals`)? Then neither `.detach()` nor `.item()` on the argument is a fix: a dict has neither.
 */
export function meterTakesContainer(model: FileModel, cls: string, method: string, index: number): boolean {
  trackKey('cls:', cls);
  return model.facts.functionsNamed(method).some((fn) => {
    const param = fn.cls?.name === cls ? fn.params.slice(1)[index] : undefined;
    if (!param || !fn.body) return false;
    return descendants(fn.body, isScopeNode).some((n) => {
      if (n.type !== 'identifier' || fn.model.src(n) !== param) return false;
      const p = n.parent;
      if (p?.type === 'subscript' && n.field === 'value') return true;
      if (p?.type === 'for_statement' && n.field === 'right') return true;
      const mc = p?.type === 'attribute' && p.parent?.type === 'call' ? fn.model.methodCall(p.parent) : undefined;
      return !!mc && mc.receiver === n && /^(items|values|keys)$/.test(mc.method);
    });
  });
}

export function meterUsesAsTensor(model: FileModel, cls: string, method: string, index: number): boolean {
  // Reads every method of the class: compared whole, not by method (`signatureOf`).
  trackKey('cls:', cls);
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

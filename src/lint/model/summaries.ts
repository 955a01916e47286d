/**
 * Summaries of the project's own functions, for facts that cross a call (issue #13, cause 3):
 * which callee a call reaches, what its return value (and each tuple element or dict key of it)
 * carries, which parameters flow into that value, which parameters it accumulates into, whether
 * it runs a model's forward pass or a training step, whether it empties the CUDA cache, whether
 * it hands back state that outlives the call (`self._meters[name]`).
 *
 * A summary is a fact of one file version (`FileModel.fact`, recorded like every lookup) at a
 * given depth: a callee's summary is the one at the next depth, and nothing is looked at past
 * `maxDepth`, so recursion needs no cycle check and the answer does not depend on the order the
 * facts were asked in. Everything unknown answers "no": a call that reaches no project function,
 * or more than one that disagree, falls back to the name-based guesses of provenance.ts.
 */
import { ancestors, child, descendants, isScopeNode, loopTypes, namedChildren, unparen, type SyntaxNode } from '../syntax';
import { type Binding, callSitesOf, type ClassInfo, definedByModule, type FunctionInfo, historyFreeAttributes, historyFreeBuiltins, historyFreeMethods, historyFreeTorch, holdsModelOutput, lastName, moduleOnlyMethods, moduleSelfMethods, parameterDefault, torchFamily, trackKey } from './types';

/**
 * The whole model of a file. Named through FunctionInfo (whose `model` ../model.ts declares) rather
 * than imported from ../model.ts: that module's class is built on provenance.ts, which uses this one.
 */
type FileModel = FunctionInfo['model'];

/** How many calls deep a summary looks (the caller's call is depth 0). */
export const maxDepth = 3;

/** Method names too common to resolve by name alone (a library's `optimizer.step()` is not the project's `step`). */
const commonMethods = new Set(['step', 'update', 'forward', 'backward', 'add', 'add_', 'append', 'extend', 'insert', 'get', 'set', 'item', 'items', 'keys', 'values', 'pop', 'to', 'cuda', 'cpu', 'train', 'eval', 'zero_grad', 'reset', 'load', 'save', 'load_state_dict', 'state_dict', 'run', 'start', 'stop', 'close', 'open', 'read', 'write', 'log', 'format', 'copy', 'clear', 'sum', 'mean', 'view', 'reshape', 'size', '__init__', '__call__', 'call', 'apply', 'next', 'send', 'put', 'join', 'split', 'sample', 'predict', 'transform', 'fit', 'score', 'generate', 'encode', 'decode']);

/** What one value (a return value, one element of it) carries. */
export interface ValueInfo {
  /** It carries autograd history whatever the arguments. */
  readonly carries: boolean;
  /** The parameters (names) whose argument's history flows into it. */
  readonly params: ReadonlySet<string>;
}

/** What a function's return value carries: as a whole, and per tuple index or dict key when every return shows them. */
export interface ReturnInfo {
  readonly whole: ValueInfo;
  /** Per element (`"0"`, `"loss"`); undefined when some return's elements are unknown. */
  readonly elements: ReadonlyMap<string, ValueInfo> | undefined;
}

/** A project function or class a call reaches. */
export interface Callee {
  readonly fn: FunctionInfo | undefined;
  /** A constructor call (`Record(...)`): `fn` is the class's `__init__`, if it has one. */
  readonly cls: ClassInfo | undefined;
  /** The first parameter (`self`) is bound by the call, not passed. */
  readonly bound: boolean;
}

let depthNow = 0;

/** Runs `compute` as the analysis of a callee at `depth`. */
function at<T>(depth: number, compute: () => T): T {
  const outer = depthNow;
  depthNow = depth;
  try {
    return compute();
  } finally {
    depthNow = outer;
  }
}

/** The depth a call in the code being analysed now is at. */
export function currentDepth(): number {
  return depthNow;
}

const dunder = (fn: FunctionInfo): boolean => fn.cls !== undefined && (fn.params[0] === 'self' || fn.params[0] === 'cls');

/**
 * The one of `candidates` (defined elsewhere in the workspace) that `name`, as this file imports
 * it, refers to: the only one, or the only one in the module of the import (`from data import
 * build` -> `.../data.py`, `.../data/__init__.py`). Undefined when that leaves none or several.
 */
function imported<T extends { readonly model: FileModel }>(model: FileModel, name: string, candidates: readonly T[], qualified?: string): T | undefined {
  if (candidates.length <= 1) return candidates[0];
  const q = model.aliases.get(name) ?? qualified;
  return q ? definedByModule(name, q, candidates, model.path) : undefined;
}

/**
 * The class `name`, in this file or the workspace (the same name in several files: the one imported, else none).
 * `qualified`: how the code named it through a module it imported (`trainer.Trainer` for `train.Trainer` after
 * `import trainer as train`), which picks one of several classes of that name as an import of the name itself does.
 */
function classNamed(model: FileModel, name: string, qualified?: string): ClassInfo | undefined {
  trackKey('cls:', name);
  const own = model.classesHere(name);
  if (own.length) return own.length === 1 ? own[0] : undefined;
  return imported(model, name, model.facts.classesNamed(name), qualified);
}

/** A method of a class or of its workspace base classes (two levels). */
export function methodOf(cls: ClassInfo, name: string, depth = 0): FunctionInfo | undefined {
  trackKey('fn:', name);
  const own = cls.methods.get(name);
  if (own || depth > 2) return own;
  for (const b of cls.bases) {
    const q = cls.model.qualify(b) ?? cls.model.src(b);
    if (torchFamily.test(q)) continue;
    const base = classNamed(cls.model, lastName(q));
    const found = base && base !== cls ? methodOf(base, name, depth + 1) : undefined;
    if (found) return found;
  }
  return undefined;
}

/** The workspace class an expression's value was built from: `meter = Meter()`, `self.bank = MeterBank(...)`. */
export function classOfValue(model: FileModel, expr: SyntaxNode, atNode: SyntaxNode, depth = 0): ClassInfo | undefined {
  const n = unparen(expr);
  if (n.type !== 'identifier' && n.type !== 'attribute') return undefined;
  const key = model.src(n);
  if (key === 'self') {
    return model.functionOf(atNode)?.cls;
  }
  const b = model.binding(key, atNode) ?? (n.type === 'attribute' ? attributeBinding(model, key, atNode) : undefined);
  if (!b && n.type === 'identifier') return parameterClass(model, key, atNode);
  return b?.value && !b.unpacked ? valueClass(model, b.value, b.at, depth) : undefined;
}

/**
 * The class a bound value was built from: a constructor call, or `self.backbone_base if model == "base" else
 * self.backbone_small` (CutLER's predictor) where both branches hold instances of one class.
 */
function valueClass(model: FileModel, value: SyntaxNode, at: SyntaxNode, depth: number): ClassInfo | undefined {
  const v = unparen(value);
  if (v.type !== 'conditional_expression') return constructedClass(model, v);
  const [then, , otherwise] = namedChildren(v);
  if (!then || !otherwise || depth > 2) return undefined;
  const branch = (e: SyntaxNode): ClassInfo | undefined => (unparen(e).type === 'call' ? constructedClass(model, e) : classOfValue(model, e, at, depth + 1));
  const cls = branch(then);
  return cls && branch(otherwise) === cls ? cls : undefined;
}

/** The workspace class a constructor call builds (`Meter()`, `utils.MeterBank(n)`); not torch's classes. */
export function constructedClass(model: FileModel, value: SyntaxNode): ClassInfo | undefined {
  const v = unparen(value);
  if (v.type !== 'call') return undefined;
  // `Net(...).cuda()`, `Net(...).to(device)`: nn.Module's own methods that return the module itself.
  const mc = model.methodCall(v);
  if (mc && moduleSelfMethods.has(mc.method)) {
    const cls = constructedClass(model, mc.receiver);
    return cls && cls.model.isModuleClassInfo(cls) ? cls : undefined;
  }
  const callee = model.callee(v);
  if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return undefined;
  const name = lastName(model.src(callee));
  const q = model.qualify(callee);
  if (!/^[A-Z]/.test(name) || torchFamily.test(q ?? '')) return undefined;
  return classNamed(model, name, callee.type === 'attribute' ? q : undefined);
}

/**
 * `def train(loader, model, criterion): ... criterion(out, y)` where every call of `train` passes an
 * instance of one project class for `criterion` (`train(loader, model, SemiLoss())`, or a name bound
 * to one): that class. Once per function, parameter and file version; a parameter passed on from
 * another parameter is followed through that function's callers in turn.
 */
function parameterClass(model: FileModel, param: string, atNode: SyntaxNode): ClassInfo | undefined {
  const fn = model.functionOf(atNode);
  if (!fn) return undefined;
  const index = fn.params.indexOf(param);
  if (index < 0 || (index === 0 && dunder(fn))) return undefined;
  return model.fact(`parameterClass:${fn.node.order}:${param}`, () => {
    let found: ClassInfo | undefined;
    for (const s of callSitesOf(fn)) {
      const arg = argumentFor(s.model, s.call, { fn, cls: undefined, bound: s.model.callee(s.call)?.type === 'attribute' }, param);
      const cls = arg && (unparen(arg).type === 'call' ? constructedClass(s.model, arg) : classOfValue(s.model, arg, s.call));
      if (!cls || (found && found !== cls)) return undefined;
      found = cls;
    }
    return found;
  }) ?? undefined;
}

/** `self.meters = MeterBank()` in a method of the class whose method reads `self.meters`. */
function attributeBinding(model: FileModel, key: string, atNode: SyntaxNode): Binding | undefined {
  const cls = key.startsWith('self.') ? model.functionOf(atNode)?.cls : undefined;
  if (!cls) return undefined;
  // Reads the class's other methods: compared whole, not by method (`signatureOf`).
  trackKey('cls:', cls.name);
  for (const m of cls.methods.values()) {
    const list = model.bindingsIn(m.node, key);
    if (list.length) return list[list.length - 1];
  }
  return undefined;
}

/**
 * The project function (or class) a call reaches: `f(...)` defined here or imported,
 * `self.m(...)` in the class or its bases, `x.m(...)` for an `x` built from a workspace class,
 * `mod.f(...)` for an imported module, `Cls(...)`, `obj(...)` (its `__call__`), and, for a
 * receiver of unknown type, the one workspace method of a distinctive name.
 */
export function resolveCall(model: FileModel, call: SyntaxNode): Callee | undefined {
  // Once per call and file version: every rule asks about the same calls.
  return model.callFact(call, 'resolve', () => resolve(model, call) ?? null) ?? undefined;
}

/** A file version's module-level and nested functions (not methods) by name, built once (its function list never changes). */
const topLevelFunctions = new WeakMap<FileModel, Map<string, FunctionInfo[]>>();

export function topLevelNamed(model: FileModel, name: string): FunctionInfo[] {
  let byName = topLevelFunctions.get(model);
  if (!byName) {
    byName = new Map();
    for (const f of model.functions) {
      if (f.cls) continue;
      const list = byName.get(f.name);
      if (list) list.push(f);
      else byName.set(f.name, [f]);
    }
    topLevelFunctions.set(model, byName);
  }
  return byName.get(name) ?? [];
}

/**
 * Every project function a call may reach, by name: where `resolveCall` answers with the one
 * callee it can be sure of (or none), this answers with all it cannot rule out, for questions
 * where an unknown must lean towards "it may" (trainingPath.ts: does a training path run this?).
 * `f()`: the module's functions of that name (not when `f` is a local or parameter), or, for an
 * imported name, the workspace's from other files; `self.m()`: the class's own method, else any
 * method `m`; `mod.f()` for an imported module: other files' functions `f`; `x.m()`: any method
 * `m`. Once per call and file version.
 */
export function calleesOf(model: FileModel, call: SyntaxNode): FunctionInfo[] {
  return model.callFact(call, 'callees', () => callees(model, call)) ?? [];
}

function callees(model: FileModel, call: SyntaxNode): FunctionInfo[] {
  const callee = model.callee(call);
  if (!callee) return [];
  if (callee.type === 'identifier') {
    const name = model.src(callee);
    if (model.aliases.has(name)) return model.facts.functionsNamed(name).filter((f) => f.model !== model && !f.cls);
    // A name bound to something else (a local, a parameter) is not the function.
    const scope = model.scopeOf(call);
    if (scope !== model.root && (model.isParam(scope, name) || model.bindingsIn(scope, name).length > 0)) return [];
    trackKey('fn:', name);
    return topLevelNamed(model, name);
  }
  if (callee.type !== 'attribute') return [];
  const object = child(callee, 'object');
  const attr = child(callee, 'attribute');
  if (!object || !attr) return [];
  const name = model.src(attr);
  const receiver = model.src(object);
  // `self.feature.forward(x)`, `model.forward(x)`: some module's forward, the one of the class its receiver was built
  // from, else unknown; every module defines one, and following them all grew with calls x modules (a large file of many models).
  if (name === 'forward' && receiver !== 'self' && receiver !== 'cls') {
    // The class its receiver was built from, where that is known (`trainer = DecoderTrainer(...)`): its forward.
    const cls = classOfValue(model, object, call);
    const fwd = cls && methodOf(cls, 'forward');
    return fwd ? [fwd] : [];
  }
  const all = model.facts.functionsNamed(name);
  if (receiver === 'self' || receiver === 'cls') {
    const own = model.functionOf(call)?.cls;
    const mine = own?.methods.get(name);
    if (mine) return [mine];
    return all.filter((f) => !!f.cls);
  }
  const root = receiver.split('.')[0];
  if (model.aliases.has(root) && object.type !== 'call') return all.filter((f) => !f.cls && f.model !== model);
  // `model.train()` / `model.eval()` on a model: nn.Module's own method, or an override in a module class, not a
  // trainer's `train()` that runs training steps (which a name alone would reach).
  if (moduleOnlyMethods.has(name) && model.isModelExpr(object, call)) return all.filter((f) => !!f.cls && f.model.isModuleClassInfo(f.cls));
  if (holdsModelOutput(model, callee, call)) return [];
  return all.filter((f) => !!f.cls);
}

function resolve(model: FileModel, call: SyntaxNode): Callee | undefined {
  const callee = model.callee(call);
  if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return undefined;
  const q = model.qualify(callee) ?? '';
  if (torchFamily.test(q)) return undefined;
  if (callee.type === 'identifier') {
    const name = model.src(callee);
    if (historyFreeBuiltins.has(name)) return undefined;
    // A parameter or a variable of that name is not the function (`def train(model, ...)`: `model(x)`).
    const scope = model.scopeOf(call);
    if (model.isParam(scope, name) || model.binding(name, call)) {
      const cls = classOfValue(model, callee, call);
      const fn = cls && methodOf(cls, '__call__');
      return fn ? { fn, cls: undefined, bound: true } : undefined;
    }
    trackKey('fn:', name);
    const own = topLevelNamed(model, name);
    if (own.length) return own.length === 1 ? { fn: own[0], cls: undefined, bound: false } : undefined;
    if (/^[A-Z]/.test(name)) {
      const cls = classNamed(model, name);
      if (cls) return { fn: methodOf(cls, '__init__'), cls, bound: true };
    }
    if (model.aliases.has(name)) {
      const fn = imported(model, name, model.facts.functionsNamed(name).filter((f) => !f.cls));
      return fn ? { fn, cls: undefined, bound: false } : undefined;
    }
    // `cleaner()` for `cleaner = MemoryCleaner()`.
    const cls = classOfValue(model, callee, call);
    const fn = cls && methodOf(cls, '__call__');
    return fn ? { fn, cls: undefined, bound: true } : undefined;
  }
  const mc = model.methodCall(call);
  if (!mc) return undefined;
  const receiver = unparen(mc.receiver);
  // `utils.sum_losses(...)` through `import utils`.
  if (receiver.type === 'identifier' && model.aliases.has(model.src(receiver)) && !model.binding(model.src(receiver), call)) {
    const module = (model.aliases.get(model.src(receiver)) ?? '').replace(/^\.+/, '').split('.').join('/');
    const found = model.facts.functionsNamed(mc.method).filter((f) => {
      const p = f.model.path.replace(/\\/g, '/');
      return !f.cls && (p.endsWith(`/${module}.py`) || p === `${module}.py` || p.endsWith(`/${module}/__init__.py`));
    });
    return found.length === 1 ? { fn: found[0], cls: undefined, bound: false } : undefined;
  }
  const cls = classOfValue(model, receiver, call);
  if (cls) {
    const fn = methodOf(cls, mc.method);
    if (fn) return { fn, cls: undefined, bound: dunder(fn) };
    // `self.cleaner()` for `self.cleaner = MemoryCleaner()` is not a method call of `self`.
  }
  if (model.src(receiver) === 'self' || commonMethods.has(mc.method) || mc.method.startsWith('__')) return undefined;
  if (model.isModelExpr(callee, call) || holdsModelOutput(model, callee, call)) return undefined;
  const found = model.facts.functionsNamed(mc.method).filter((f) => f.cls);
  return found.length === 1 ? { fn: found[0], cls: undefined, bound: dunder(found[0]) } : undefined;
}

/** `self.cleaner()` where `self.cleaner = MemoryCleaner()`: the instance's `__call__`. */
export function resolveInstanceCall(model: FileModel, call: SyntaxNode): Callee | undefined {
  const callee = model.callee(call);
  if (!callee || callee.type !== 'attribute') return undefined;
  const cls = classOfValue(model, callee, call);
  const fn = cls && methodOf(cls, '__call__');
  return fn ? { fn, cls: undefined, bound: true } : undefined;
}

export { parameterDefault };

/** The argument a call passes for parameter `param` of `target`, if any. */
export function argumentFor(model: FileModel, call: SyntaxNode, target: Callee, param: string): SyntaxNode | undefined {
  const byName = model.keywordArg(call, param);
  if (byName) return byName;
  const fn = target.fn;
  if (!fn) return undefined;
  const index = fn.params.indexOf(param) - (target.bound && dunder(fn) ? 1 : 0);
  return index >= 0 ? model.positionalArgs(call)[index] : undefined;
}

// ---------------------------------------------------------------- values

const containerTypes = new Set(['list', 'tuple', 'expression_list', 'set', 'dictionary', 'list_comprehension', 'generator_expression', 'set_comprehension', 'dictionary_comprehension']);

/** The parts of a container literal that hold values (a dict's values, a comprehension's body). */
function partsOf(n: SyntaxNode): SyntaxNode[] {
  switch (n.type) {
    case 'dictionary':
      return namedChildren(n).map((p) => (p.type === 'pair' ? child(p, 'value') : p.type === 'dictionary_splat' ? namedChildren(p)[0] : undefined)).filter((v): v is SyntaxNode => !!v);
    case 'dictionary_comprehension': {
      const body = child(n, 'body');
      const value = body?.type === 'pair' ? child(body, 'value') : undefined;
      return value ? [value] : [];
    }
    case 'list_comprehension':
    case 'generator_expression':
    case 'set_comprehension': {
      const body = child(n, 'body');
      return body ? [body] : [];
    }
    default:
      return namedChildren(n).map((c) => (c.type === 'list_splat' ? namedChildren(c)[0] : c)).filter((v): v is SyntaxNode => !!v && v.type !== 'comment');
  }
}

/**
 * Does the value hold autograd history anywhere: itself (`carriesHistory`), or one of the
 * elements of a container literal, or of a local container filled with literals, appends
 * and `d[k] = v` in the same function?
 */
export function holdsHistory(model: FileModel, expr: SyntaxNode, depth = 0): boolean {
  return carrierIn(model, expr, depth) !== undefined;
}

/** The part of `expr` that carries history (the element of `[loss]`), or undefined. */
export function carrierIn(model: FileModel, expr: SyntaxNode, depth = 0): SyntaxNode | undefined {
  const n = unparen(expr);
  if (depth > 4) return undefined;
  if (containerTypes.has(n.type)) {
    for (const p of partsOf(n)) {
      const found = carrierIn(model, p, depth + 1);
      if (found) return found;
    }
    return undefined;
  }
  if (model.carriesHistory(n)) return n;
  if (n.type === 'identifier' && depth < 3) {
    const key = model.src(n);
    const b = model.binding(key, n);
    const v = b?.value && !b.unpacked ? unparen(b.value) : undefined;
    if (v && containerTypes.has(v.type)) {
      if (holdsHistory(model, v, depth + 1)) return n;
      if (filledWithHistory(model, key, model.scopeOf(n), depth)) return n;
    }
  }
  return undefined;
}

/** `parts[k] = v`, `parts.append(v)`, `parts.update(k=v)` with a `v` that carries history, in `scope`. */
function filledWithHistory(model: FileModel, key: string, scope: SyntaxNode, depth: number): boolean {
  const body = scope === model.root ? scope : child(scope, 'body');
  for (const n of body ? descendants(body, isScopeNode) : []) {
    if (n.type === 'assignment') {
      const left = child(n, 'left');
      const right = child(n, 'right');
      if (left?.type === 'subscript' && right && model.src(child(left, 'value') ?? left) === key && holdsHistory(model, right, depth + 1)) return true;
    } else if (n.type === 'call') {
      const mc = model.methodCall(n);
      if (!mc || model.src(mc.receiver) !== key || !/^(append|extend|insert|update|setdefault)$/.test(mc.method)) continue;
      const args = child(n, 'arguments');
      if (args && namedChildren(args).some((a) => holdsHistory(model, a.type === 'keyword_argument' ? (child(a, 'value') ?? a) : a, depth + 1))) return true;
    }
  }
  return false;
}

/**
 * The parameters of `fn` whose value flows into `expr` through operations that keep history
 * (arithmetic, indexing, method calls other than `.item()`, `.detach()` and the like, calls of
 * losses and project functions), through the function's local assignments and loops.
 */
export function paramsReaching(fn: FunctionInfo, expr: SyntaxNode): Set<string> {
  const model = fn.model;
  const params = new Set(fn.params.filter((_p, i) => !(i === 0 && dunder(fn))));
  const out = new Set<string>();
  const seen = new Set<number>();
  const visit = (e: SyntaxNode, budget: number): void => {
    const n = unparen(e);
    if (budget <= 0 || seen.has(n.order)) return;
    seen.add(n.order);
    switch (n.type) {
      case 'identifier': {
        const name = model.src(n);
        // Flow-sensitive where the flow graph can say: the parameter's value counts only where it
        // still reaches (`v = v.data.sum()` and then `self.sum += v` accumulates the number, not
        // the tensor passed in: clovaai's Averager.add), and only the bindings that reach it.
        const reaching = model.scopeOf(n) === fn.node ? model.reachingDefs(name, n) : undefined;
        if (reaching ? reaching.entry && params.has(name) : params.has(name)) out.add(name);
        for (const b of reaching ? reaching.defs : model.bindingsIn(fn.node, name)) {
          if (b.value) visit(b.value, budget - 1);
          else if (b.at.type === 'for_statement' || b.at.type === 'for_in_clause') {
            const right = child(b.at, 'right');
            if (right) visit(right, budget - 1);
          }
        }
        return;
      }
      case 'attribute': {
        const attr = child(n, 'attribute');
        if (attr && historyFreeAttributes.test(model.src(attr))) return;
        const object = child(n, 'object');
        if (object) visit(object, budget - 1);
        return;
      }
      case 'call': {
        const callee = model.callee(n);
        const q = model.qualify(callee) ?? '';
        const mc = model.methodCall(n);
        if (mc && historyFreeMethods.has(mc.method)) return;
        if (callee?.type === 'identifier' && historyFreeBuiltins.has(model.src(callee))) return;
        if (historyFreeTorch.test(q)) return;
        if (mc) visit(mc.receiver, budget - 1);
        const args = child(n, 'arguments');
        for (const a of args ? namedChildren(args) : []) visit(a.type === 'keyword_argument' ? (child(a, 'value') ?? a) : a, budget - 1);
        return;
      }
      case 'subscript': {
        const v = child(n, 'value');
        if (v) visit(v, budget - 1);
        return;
      }
      case 'binary_operator':
      case 'unary_operator':
      case 'conditional_expression':
      case 'list_splat':
      case 'dictionary_splat':
      case 'pair':
      case 'keyword_argument':
        for (const c of namedChildren(n)) if (c.field !== 'key' && c.field !== 'name') visit(c, budget - 1);
        return;
      default:
        if (containerTypes.has(n.type)) for (const p of partsOf(n)) visit(p, budget - 1);
    }
  };
  visit(expr, 40);
  return out;
}

// ---------------------------------------------------------------- function summaries

/** The return statements of a function's own body (not of nested functions). */
export function returnsOf(fn: FunctionInfo): SyntaxNode[] {
  const out: SyntaxNode[] = [];
  for (const n of fn.body ? descendants(fn.body, isScopeNode) : []) {
    if (n.type !== 'return_statement') continue;
    const v = namedChildren(n)[0];
    if (v && !(v.type === 'none')) out.push(v);
  }
  return out;
}

function info(fn: FunctionInfo, expr: SyntaxNode): ValueInfo {
  return { carries: holdsHistory(fn.model, expr), params: paramsReaching(fn, expr) };
}

/** A string literal's text without quotes (`"loss"` -> `loss`), or undefined. */
export function literalKey(model: FileModel, node: SyntaxNode | undefined): string | undefined {
  const n = node && unparen(node);
  if (!n) return undefined;
  if (n.type === 'integer') return model.src(n);
  if (n.type !== 'string') return undefined;
  const m = /^[a-zA-Z]*("|')(.*)\1$/s.exec(model.src(n));
  return m && !/[{}]/.test(m[2]) ? m[2] : undefined;
}

/** The elements of a returned tuple or dict (following a local name bound to one), or undefined. */
function elementsOf(fn: FunctionInfo, expr: SyntaxNode, follow = true): Map<string, ValueInfo> | undefined {
  const model = fn.model;
  const n = unparen(expr);
  if (n.type === 'expression_list' || n.type === 'tuple' || n.type === 'list') {
    const items = namedChildren(n);
    if (items.some((i) => i.type === 'list_splat')) return undefined;
    return new Map(items.map((item, i) => [String(i), info(fn, item)]));
  }
  if (n.type === 'dictionary') {
    const out = new Map<string, ValueInfo>();
    for (const p of namedChildren(n)) {
      const k = p.type === 'pair' ? literalKey(model, child(p, 'key')) : undefined;
      const v = p.type === 'pair' ? child(p, 'value') : undefined;
      if (k === undefined || !v) return undefined;
      out.set(k, info(fn, v));
    }
    return out;
  }
  if (n.type === 'identifier' && follow) {
    const name = model.src(n);
    const bindings = model.bindingsIn(fn.node, name);
    if (bindings.length !== 1 || !bindings[0].value || bindings[0].unpacked) return undefined;
    const base = elementsOf(fn, bindings[0].value, false);
    if (!base || unparen(bindings[0].value).type !== 'dictionary') return base;
    // `out = {}` ... `out["loss"] = loss`
    for (const d of fn.body ? descendants(fn.body, isScopeNode) : []) {
      if (d.type !== 'assignment') continue;
      const left = child(d, 'left');
      const right = child(d, 'right');
      if (left?.type !== 'subscript' || !right || model.src(child(left, 'value') ?? left) !== name) continue;
      const k = literalKey(model, child(left, 'subscript'));
      if (k === undefined) return undefined;
      const prev = base.get(k);
      const now = info(fn, right);
      base.set(k, prev ? { carries: prev.carries || now.carries, params: new Set([...prev.params, ...now.params]) } : now);
    }
    return base;
  }
  return undefined;
}

const union = (a: ValueInfo, b: ValueInfo): ValueInfo => ({ carries: a.carries || b.carries, params: new Set([...a.params, ...b.params]) });
const nothing: ValueInfo = { carries: false, params: new Set() };

/** What `fn` returns, at `depth`. */
export function returnInfo(fn: FunctionInfo, depth: number): ReturnInfo {
  return fn.model.fact(`summary:returns:${fn.node.order}:${depth}`, () => at(depth, () => {
    let whole = nothing;
    let elements: Map<string, ValueInfo> | undefined = new Map();
    const returns = returnsOf(fn);
    if (returns.length === 0) return { whole, elements: undefined };
    for (const r of returns) {
      const own = elementsOf(fn, r);
      const all = info(fn, r);
      whole = union(whole, own ? [...own.values()].reduce(union, all) : all);
      if (!own || !elements) elements = undefined;
      else for (const [k, v] of own) elements.set(k, elements.has(k) ? union(elements.get(k) as ValueInfo, v) : v);
    }
    return { whole, elements };
  })) ?? { whole: nothing, elements: undefined };
}

/**
 * Does element `index` of this call's result (the whole result when undefined) carry history,
 * by the summary of the project function it calls? Undefined when the call reaches none.
 */
export function summaryCarries(model: FileModel, call: SyntaxNode, index: number | string | undefined): boolean | undefined {
  const depth = depthNow + 1;
  if (depth > maxDepth) return undefined;
  const target = resolveCall(model, call) ?? resolveInstanceCall(model, call);
  if (!target) return index === undefined ? undefined : moduleElementPlain(model, call, String(index));
  // `x = f(x)` in a loop: the argument's history leads back to this call.
  if (asking.has(call)) return false;
  asking.add(call);
  try {
    return targetCarries(model, call, target, index, depth);
  } finally {
    asking.delete(call);
  }
}

/** The calls whose result is being asked about, for `x = f(x)`. */
const asking = new Set<SyntaxNode>();

function targetCarries(model: FileModel, call: SyntaxNode, target: Callee, index: number | string | undefined, depth: number): boolean | undefined {
  if (target.cls) {
    // An object built by a constructor carries what its arguments carry: `Record(loss.item(), n)` nothing.
    if (target.cls.model.isModuleClassInfo(target.cls)) return undefined;
    const args = child(call, 'arguments');
    return !!args && namedChildren(args).some((a) => holdsHistory(model, a.type === 'keyword_argument' ? (child(a, 'value') ?? a) : a));
  }
  const fn = target.fn as FunctionInfo;
  if (fn.name === 'forward' || (fn.cls && fn.model.isModuleClassInfo(fn.cls) && fn.name === '__call__')) return index !== undefined && fn.name === 'forward' && forwardElementPlain(fn, String(index)) ? false : undefined;
  const r = returnInfo(fn, depth);
  const key = index === undefined ? undefined : String(index);
  const v = key === undefined ? r.whole : r.elements ? (r.elements.get(key) ?? nothing) : r.whole;
  if (v.carries) return true;
  for (const p of v.params) {
    const arg = argumentFor(model, call, target, p);
    if (arg && holdsHistory(model, arg)) return true;
  }
  return false;
}

/**
 * `scores, caps, decode_lengths, alphas, idx = decoder(imgs, caps, lens)` with `decoder` an instance of
 * a project module: false (carries no history) for an element its `forward` returns as a plain value
 * in every return, `decode_lengths = (caption_lengths - 1).tolist()` (sgrvinod's image captioning);
 * undefined (unknown: the model's output) otherwise.
 */
function moduleElementPlain(model: FileModel, call: SyntaxNode, key: string): false | undefined {
  const callee = model.callee(call);
  if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return undefined;
  const cls = classOfValue(model, callee, call);
  if (cls) {
    if (!cls.model.isModuleClassInfo(cls)) return undefined;
    const fwd = methodOf(cls, 'forward');
    return fwd && forwardElementPlain(fwd, key) ? false : undefined;
  }
  // The instance came in as a parameter (`def train(loader, encoder, decoder, ...)`): the project's
  // modules whose forward returns a tuple that long are the candidates, and all must agree.
  if (!model.isModelCall(call)) return undefined;
  // Once per position and file version: every unpacked element of such a call asks.
  const plain = model.fact(`plainModuleElement:${key}`, () => {
    const index = Number(key);
    const candidates = model.facts.functionsNamed('forward').filter((f) => f.cls && f.model.isModuleClassInfo(f.cls) && returnsOf(f).some((r) => /^(expression_list|tuple)$/.test(unparen(r).type) && namedChildren(unparen(r)).length > index));
    return candidates.length > 0 && candidates.every((f) => forwardElementPlain(f, key));
  });
  return plain ? false : undefined;
}

/** Does every return of `fwd` give, at tuple position `key`, a value made without autograd history (`.tolist()`, `len(...)`, a literal)? Once per forward, position and file version. */
function forwardElementPlain(fwd: FunctionInfo, key: string): boolean {
  const index = Number(key);
  if (!Number.isInteger(index) || index < 0) return false;
  return fwd.model.fact(`plainReturnElement:${fwd.node.order}:${key}`, () => {
    const returns = returnsOf(fwd);
    return returns.length > 0 && returns.every((r) => {
      const v = unparen(r);
      if (v.type !== 'expression_list' && v.type !== 'tuple') return false;
      const e = namedChildren(v)[index];
      return !!e && plainValue(fwd.model, e, 0);
    });
  }) ?? false;
}

/**
 * `loss = trainer.forward(img, unet_number=1)` (or `trainer(img, ...)`) where `trainer` is a project module whose
 * `forward` returns a Python number on every path this call can take: `total_loss += loss.item()` then `return
 * total_loss`, the branch `if return_lowres_cond_image: return total_loss, torch.stack(images)` dead because the call
 * leaves that flag at its default (DALLE2's DecoderTrainer). A module's result is otherwise its model's output.
 */
export function moduleResultPlain(model: FileModel, call: SyntaxNode): boolean {
  const mc = model.methodCall(call);
  if (mc && mc.method !== 'forward') return false;
  const receiver = mc ? mc.receiver : model.callee(call);
  if (!receiver || (receiver.type !== 'identifier' && receiver.type !== 'attribute')) return false;
  const cls = classOfValue(model, receiver, call);
  if (!cls || !cls.model.isModuleClassInfo(cls)) return false;
  const fwd = methodOf(cls, 'forward');
  if (!fwd) return false;
  // Cheap first, once per forward: most return no plain value at all, and then the call's arguments need no reading.
  if (!fwd.model.fact(`plainReturnSome:${fwd.node.order}`, () => returnsOf(fwd).some((r) => plainValue(fwd.model, r, 0)))) return false;
  const target: Callee = { fn: fwd, cls: undefined, bound: true };
  const live = returnsOf(fwd).filter((r) => !deadForCall(model, call, target, r));
  return live.length > 0 && live.every((r) => plainValue(fwd.model, r, 0));
}

/**
 * Is `node` (in `target`'s body) in a branch this call cannot take: under `if flag:` (or the `else` of `if not
 * flag:`) where `flag` is a parameter defaulting to `False`/`None` (or the reverse for `True`) that the call leaves
 * at its default? A `**kwargs` argument may pass the flag unless it is a dict this scope builds with literal keys.
 */
function deadForCall(model: FileModel, call: SyntaxNode, target: Callee, node: SyntaxNode): boolean {
  const fn = target.fn as FunctionInfo;
  for (let cur = node, up = node.parent; up && up !== fn.body; cur = up, up = up.parent) {
    const branch = up.type === 'if_statement' ? (cur.field === 'consequence' ? true : cur.type === 'else_clause' ? false : undefined) : undefined;
    if (branch === undefined) continue;
    const cond = child(up, 'condition');
    if (!cond) continue;
    let c = unparen(cond);
    let negated = false;
    if (c.type === 'not_operator') {
      const arg = child(c, 'argument');
      if (!arg) continue;
      c = unparen(arg);
      negated = true;
    }
    if (c.type !== 'identifier') continue;
    const param = fn.model.src(c);
    if (!fn.params.includes(param)) continue;
    // Only the parameter's own value reaches the test (`flag = flag or self.training` before it: unknown); no
    // reaching definitions at all is a name the function never binds.
    const reaching = fn.model.reachingDefs(param, c);
    if (reaching && (!reaching.entry || reaching.defs.length)) continue;
    const def = parameterDefault(fn, param);
    const truth = def?.type === 'false' || def?.type === 'none' ? false : def?.type === 'true' ? true : undefined;
    if (truth === undefined || argumentFor(model, call, target, param) || mayPassKeyword(model, call, param)) continue;
    if ((truth !== negated) !== branch) return true;
  }
  return false;
}

/** May a `**splat` argument of `call` pass keyword `param`? No when each splat is a dict built in this scope with literal keys none of which is `param`. */
function mayPassKeyword(model: FileModel, call: SyntaxNode, param: string): boolean {
  const args = child(call, 'arguments');
  for (const a of args ? namedChildren(args) : []) {
    if (a.type !== 'dictionary_splat') continue;
    const v = namedChildren(a)[0];
    if (!v || v.type !== 'identifier') return true;
    const name = model.src(v);
    const scope = model.functionOf(call)?.node;
    if (!scope) return true;
    for (const d of descendants(scope, isScopeNode)) {
      if (d.type !== 'identifier' || model.src(d) !== name) continue;
      const p = d.parent;
      if (p?.type === 'dictionary_splat') continue;
      if (p?.type === 'assignment' && d.field === 'left') {
        const value = child(p, 'right');
        if (value?.type !== 'dictionary' || namedChildren(value).some((e) => e.type !== 'pair' || (literalKey(model, child(e, 'key')) ?? param) === param)) return true;
        continue;
      }
      if (p?.type === 'subscript' && d.field === 'value' && p.parent?.type === 'assignment' && p.field === 'left') {
        const key = literalKey(model, child(p, 'subscript'));
        if (key === undefined || key === param) return true;
        continue;
      }
      return true;
    }
  }
  return false;
}

/** A value with no autograd history by how it is made: a literal, a history-free method or builtin call, or a name every reaching definition of which is one. */
function plainValue(model: FileModel, expr: SyntaxNode, depth: number): boolean {
  const n = unparen(expr);
  if (/^(integer|float|string|true|false|none|comparison_operator)$/.test(n.type)) return true;
  if (n.type === 'call') {
    const mc = model.methodCall(n);
    if (mc && historyFreeMethods.has(mc.method)) return true;
    // `(pred == labels).float().mean()`: a method of a value without history, given nothing with history.
    if (mc) return depth <= 8 && plainValue(model, mc.receiver, depth + 1) && model.positionalArgs(n).every((a) => plainValue(model, a, depth + 1));
    const callee = model.callee(n);
    return callee?.type === 'identifier' && historyFreeBuiltins.has(model.src(callee));
  }
  if (n.type === 'binary_operator' || n.type === 'unary_operator') return depth <= 8 && namedChildren(n).every((e) => plainValue(model, e, depth + 1));
  if (n.type === 'tuple' || n.type === 'expression_list' || n.type === 'list') return depth <= 8 && namedChildren(n).every((e) => plainValue(model, e, depth + 1));
  if (n.type !== 'identifier' || depth > 3) return false;
  const key = model.src(n);
  const r = model.reachingDefs(key, n);
  // No reaching definitions at all: a name the function never binds (a parameter's value from the entry).
  if (plainDict(model, n, key, r ?? { defs: [], entry: true })) return true;
  if (!r || r.entry || r.defs.length === 0 || !r.defs.every((d) => !!d.value && !d.unpacked && plainValue(model, d.value, depth + 1))) return false;
  // `total = 0.` then `total += loss.item()` in a loop: what each update adds must be plain too.
  return model.updatesIn(model.scopeOf(n)).every((u) => {
    const left = child(u, 'left');
    const right = child(u, 'right');
    return !left || model.src(left) !== key || (!!right && plainValue(model, right, depth + 1));
  });
}

/**
 * A dict the function fills with values that carry no history: made empty here (`{}`, `dict()`, or a parameter
 * defaulting to `{}`), written only by `name[key] = value`, and otherwise only read by key or returned (contriever's
 * forward: `iter_stats[f"{prefix}loss"] = (loss.item(), bsz)`, an accuracy from an argmax, then `return loss,
 * iter_stats`). Passed to anything else (`.update()`, a helper), it may get anything.
 */
function plainDict(model: FileModel, n: SyntaxNode, key: string, r: { readonly defs: readonly Binding[]; readonly entry: boolean }): boolean {
  const fn = model.functionOf(n);
  if (!fn?.body) return false;
  const empty = (v: SyntaxNode): boolean => {
    const u = unparen(v);
    return (u.type === 'dictionary' && namedChildren(u).length === 0) || model.src(u) === 'dict()';
  };
  if (!r.defs.every((d) => !!d.value && !d.unpacked && empty(d.value))) return false;
  if (r.entry) {
    const def = fn.params.includes(key) ? parameterDefault(fn, key) : undefined;
    if (!def || !empty(def)) return false;
  }
  if (r.defs.length === 0 && !r.entry) return false;
  for (const d of descendants(fn.body, isScopeNode)) {
    if (d.type !== 'identifier' || model.src(d) !== key) continue;
    const p = d.parent;
    if (p?.type === 'subscript' && d.field === 'value') {
      const a = p.parent;
      if (a?.type === 'assignment' && p.field === 'left') {
        const v = child(a, 'right');
        // Plain by how it is made (`loss.item()`, `len(q)`), not merely not known to carry: an encoder passed in is a model too.
        if (!v || !plainValue(model, v, 1)) return false;
      } else if (a?.type === 'augmented_assignment' && p.field === 'left') return false;
      continue;
    }
    if (p?.type === 'return_statement' || (p?.type === 'expression_list' && p.parent?.type === 'return_statement')) continue;
    if (p?.type === 'assignment' && d.field === 'left') continue;
    return false;
  }
  return true;
}

/**
 * Does calling `fn` run a model's forward pass with autograd on (no guard inside), without a
 * backward or optimizer step of its own: an inference helper whose guard is the caller's job?
 */
export function runsForward(fn: FunctionInfo, depth: number): SyntaxNode | undefined {
  if (depth > maxDepth) return undefined;
  return fn.model.fact(`summary:forward:${fn.node.order}:${depth}`, () => at(depth, () => {
    const model = fn.model;
    if (model.hasTrainingSignal(fn.node)) return undefined;
    for (const call of model.callsIn(fn.node)) {
      if (model.gradState(call) !== 'default') continue;
      if (model.isModelCall(call)) {
        if (model.callReachesBackward(call)) continue;
        return call;
      }
      const target = resolveCall(model, call) ?? resolveInstanceCall(model, call);
      if (target?.fn && !target.cls && target.fn !== fn && runsForward(target.fn, depth + 1)) return call;
    }
    return undefined;
  }));
}

/** Does `fn` (or a project function it calls) run `.backward()` or an optimizer step? */
export function runsTrainingStep(fn: FunctionInfo, depth: number): boolean {
  if (depth > maxDepth) return false;
  return fn.model.fact(`summary:training:${fn.node.order}:${depth}`, () => at(depth, () => {
    if (fn.model.hasTrainingSignal(fn.node)) return true;
    return fn.model.callsIn(fn.node).some((c) => {
      const t = resolveCall(fn.model, c);
      return !!t?.fn && !t.cls && t.fn !== fn && runsTrainingStep(t.fn, depth + 1);
    });
  })) ?? false;
}

/** Is the call excused from running every iteration: in an `except`/`finally`, or under an `if` on the step count? */
export function excusedInLoop(model: FileModel, node: SyntaxNode, stop: SyntaxNode | undefined): boolean {
  for (const a of ancestors(node)) {
    if (a === stop || isScopeNode(a)) return false;
    if (a.type === 'except_clause' || a.type === 'finally_clause') return true;
    if (a.type === 'if_statement' || a.type === 'elif_clause') {
      const cond = child(a, 'condition');
      if (cond && /%|\bstep\b|==/.test(model.src(cond))) return true;
    }
  }
  return false;
}

/** The `torch.cuda.empty_cache()` call that every call of `fn` runs (not in its own loop, not excused), if any. */
export function emptiesCache(fn: FunctionInfo, depth: number): SyntaxNode | undefined {
  if (depth > maxDepth) return undefined;
  return fn.model.fact(`summary:emptyCache:${fn.node.order}:${depth}`, () => at(depth, () => {
    const model = fn.model;
    for (const call of model.callsIn(fn.node)) {
      const direct = model.qualify(model.callee(call)) === 'torch.cuda.empty_cache';
      const inner = !direct && depth < maxDepth ? (resolveCall(model, call) ?? resolveInstanceCall(model, call)) : undefined;
      if (!direct && !(inner?.fn && !inner.cls && inner.fn !== fn && emptiesCache(inner.fn, depth + 1))) continue;
      if ([...ancestors(call)].some((a) => a === fn.node) && !loopBetween(call, fn.node) && !excusedInLoop(model, call, fn.node)) return call;
    }
    return undefined;
  }));
}

function loopBetween(node: SyntaxNode, outer: SyntaxNode): boolean {
  for (const a of ancestors(node)) {
    if (a === outer) return false;
    if (loopTypes.has(a.type)) return true;
  }
  return false;
}

/**
 * Does `fn` return state that outlives the call: an attribute of `self` or something reached
 * from one (`self._meters[name]`, `self._meters.setdefault(name, Meter())`), or a module global?
 */
export function returnsState(fn: FunctionInfo): boolean {
  const returns = returnsOf(fn);
  if (returns.length === 0) return false;
  return returns.every((r) => {
    let n = unparen(r);
    for (let i = 0; i < 6; i++) {
      if (n.type === 'subscript') n = unparen(child(n, 'value') ?? n);
      else if (n.type === 'call' && fn.model.methodCall(n) && /^(setdefault|get|__getitem__)$/.test(fn.model.methodCall(n)?.method ?? '')) n = unparen(fn.model.methodCall(n)?.receiver ?? n);
      else break;
    }
    if (n.type === 'attribute') return fn.model.src(n).startsWith('self.');
    if (n.type === 'identifier') {
      const key = fn.model.src(n);
      if (fn.model.bindingsIn(fn.node, key).length === 0 && !fn.params.includes(key)) return fn.model.bindingsIn(fn.model.root, key).length > 0;
      // `meter = self._meters.setdefault(...)`; `return meter`
      const bs = fn.model.bindingsIn(fn.node, key);
      return bs.length === 1 && !!bs[0].value && !bs[0].unpacked && /^self\.\w/.test(fn.model.src(bs[0].value));
    }
    return false;
  });
}

/**
 * The parameters (by name) whose value `fn` accumulates into storage that outlives the call:
 * `self.total += value * n`, `for v in values: self.sum += v`, `running[k] += v` into a
 * parameter `running` (then the pair names both), at `depth`.
 */
export function accumulatedParams(fn: FunctionInfo): { into: string; from: string }[] {
  return fn.model.fact(`summary:accumulates:${fn.node.order}`, () => {
    const model = fn.model;
    const out: { into: string; from: string }[] = [];
    const params = fn.params.filter((_p, i) => !(i === 0 && dunder(fn)));
    for (const stmt of fn.body ? descendants(fn.body, (n) => n.type === 'function_definition') : []) {
      if (stmt.type !== 'expression_statement') continue;
      const acc = model.accumulation(stmt);
      if (!acc) continue;
      const target = model.src(acc.target);
      let into: string | undefined;
      if (target.startsWith('self.')) into = 'self';
      else {
        let base = unparen(acc.target);
        while (base.type === 'subscript' || base.type === 'attribute') base = unparen(child(base, base.type === 'subscript' ? 'value' : 'object') ?? base);
        const name = base.type === 'identifier' ? model.src(base) : '';
        if (params.includes(name) && model.bindingsIn(fn.node, name).length === 0) into = name;
      }
      if (!into) continue;
      for (const p of paramsReaching(fn, acc.value)) if (p !== into && !out.some((o) => o.into === into && o.from === p)) out.push({ into, from: p });
    }
    return out;
  }) ?? [];
}

/** Whether `fn` runs a forward pass, a training step, or calls torch: the project's torch code. */
export function touchesTorch(model: FileModel, node: SyntaxNode): boolean {
  for (const d of descendants(node)) {
    if (d.type === 'identifier' && d.parent?.type !== 'attribute') {
      const q = model.aliases.get(model.src(d));
      if (q && torchFamily.test(q)) return true;
    } else if (d.type === 'attribute' && d.parent?.type !== 'attribute') {
      const q = model.qualify(d);
      if (q && torchFamily.test(q)) return true;
    }
  }
  return false;
}

/**
 * A call that the names alone take for a model (`load_model(path)`, `build_net(cfg)`) but that
 * reaches a project function: the function, whose summary says what the call does.
 */
export function namedLikeModel(model: FileModel, call: SyntaxNode): FunctionInfo | undefined {
  const callee = model.callee(call);
  if (!callee || callee.type !== 'identifier' || model.isKnownModule(callee, call)) return undefined;
  const target = resolveCall(model, call);
  return target?.fn && !target.cls ? target.fn : undefined;
}

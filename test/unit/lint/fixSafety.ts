/**
 * A checker that the lint fixes never change what training computes. It applies every offered
 * fix of every finding (one at a time, all of a file's together, and fix-all), re-parses, and
 * checks the result against a training-path analysis of its own, written apart from the linter's
 * (src/lint/trainingPath.ts) so that the two check each other:
 *
 * - the fixed file parses (when the original did);
 * - no function on a training path got a `no_grad` / `inference_mode` guard, and no call on a
 *   training path ended up inside one;
 * - no value that reaches `backward()` got `.item()` / `.detach()`, and no value later used as a
 *   tensor became a Python number through `.item()`;
 * - no statement was removed but a cache flush or a device move done elsewhere too.
 *
 * Training path, over all files: a function that runs backward / an optimizer step (itself or
 * through the functions it calls); every call whose value flows (through names, containers,
 * returns) into a backward pass; every function such a call reaches, all of whose calls then are
 * on the path too. Calls resolve by name, loosely (`f()` any function `f`, `x.m()` any method
 * `m`): the checker errs towards "training", so a fix it passes is safe on every reading.
 */
import { applyEdits, combineFixes } from '../../../src/lint/fixes';
import type { Linter, SourceFile } from '../../../src/lint/linter';
import { loadPython, PythonParser } from '../../../src/lint/parser';
import { ancestors, child, contains, descendants, namedChildren, toSyntax, type SyntaxNode } from '../../../src/lint/syntax';
import { lineStarts } from '../../../src/lint/text';
import type { Finding, TextEdit } from '../../../src/lint/types';

export interface Violation {
  readonly path: string;
  /** The fix's title, or `all fixes` / `fix-all`. */
  readonly fix: string;
  readonly problem: string;
}

interface Fn {
  readonly file: Parsed;
  readonly node: SyntaxNode;
  readonly name: string;
  readonly cls: string | undefined;
  readonly key: string;
}

interface Parsed {
  readonly path: string;
  readonly text: string;
  readonly root: SyntaxNode;
  readonly hasError: boolean;
  readonly fns: Fn[];
  readonly fnByNode: Map<SyntaxNode, Fn>;
}

const guardText = /(no_grad|inference_mode)\b|set_grad_enabled\(\s*(False|mode\s*=\s*False)/;
const optimizerLike = /[Oo]ptim|OPTIM|[Ss]caler|SCALER|(^|[._])(opt|OPT)([._]|[A-Z0-9]|$)|(^|\.)(accelerator|fabric|engine|model_engine)$/;
const tensorOnlyMethods = /^(item|backward|detach|cpu|cuda|to|numpy|tolist|size|dim|mean|sum|float|half|clone|view|reshape|squeeze|unsqueeze)$/;
const isScope = (n: SyntaxNode): boolean => n.type === 'function_definition' || n.type === 'class_definition';

function src(file: { text: string }, n: SyntaxNode): string {
  return file.text.slice(n.start, n.end);
}

function parseFile(parser: PythonParser, path: string, text: string): Parsed {
  const tree = parser.parse(text);
  const root = toSyntax(tree, text);
  const hasError = tree.rootNode.hasError;
  tree.delete();
  const file: Parsed = { path, text, root, hasError, fns: [], fnByNode: new Map() };
  const seen = new Map<string, number>();
  for (const n of descendants(root)) {
    if (n.type !== 'function_definition') continue;
    const nameNode = child(n, 'name');
    const name = nameNode ? src(file, nameNode) : '';
    let cls: string | undefined;
    const owner = n.parent?.type === 'decorated_definition' ? n.parent.parent : n.parent;
    if (owner?.type === 'block' && owner.parent?.type === 'class_definition') {
      const c = child(owner.parent, 'name');
      cls = c ? src(file, c) : '';
    }
    const base = `${path}:${cls ?? ''}.${name}`;
    const i = seen.get(base) ?? 0;
    seen.set(base, i + 1);
    const fn: Fn = { file, node: n, name, cls, key: `${base}#${i}` };
    file.fns.push(fn);
    file.fnByNode.set(n, fn);
  }
  return file;
}

/** The function a node runs in (its nearest enclosing def), undefined at module level. */
function fnOf(file: Parsed, node: SyntaxNode): Fn | undefined {
  for (const a of ancestors(node)) if (a.type === 'function_definition') return file.fnByNode.get(a);
  return undefined;
}

function decoratorsOf(file: Parsed, fn: SyntaxNode): string[] {
  return fn.parent?.type === 'decorated_definition' ? fn.parent.children.filter((c) => c.type === 'decorator').map((d) => src(file, d)) : [];
}

/** Is `node` under a grad guard: a `with no_grad()` around it in its function, or a guard decorator on that function? */
function guarded(file: Parsed, node: SyntaxNode): boolean {
  let prev = node;
  for (const a of ancestors(node)) {
    if (a.type === 'with_statement' && prev.field === 'body') {
      const clause = a.children.find((c) => c.type === 'with_clause');
      if (clause && guardText.test(src(file, clause))) return true;
    }
    if (a.type === 'function_definition') return decoratorsOf(file, a).some((d) => guardText.test(d));
    prev = a;
  }
  return false;
}

/** Calls in a scope's own body (not in nested functions or classes), with the scope node. */
/** `self.gru.train()`, `model.train(training)`, `net.eval()`: a module's mode switch (which a trainer's `train()` of the same name is not, by what it is given). */
function modeSwitch(file: Parsed, call: SyntaxNode): boolean {
  const m = methodOf(file, call);
  const args = namedChildren(child(call, 'arguments') ?? call);
  return !!m && /^(train|eval)$/.test(m.method) && src(file, m.receiver) !== 'self' && args.length <= 1 && args.every((a) => a.type === 'identifier' || a.type === 'true' || a.type === 'false');
}

/** `modeSwitch` on a receiver not named for running training (`self.model.train()`, not `trainer.train()` / `self.engine.train()`). */
function moduleModeSwitch(file: Parsed, call: SyntaxNode): boolean {
  const m = methodOf(file, call);
  return !!m && modeSwitch(file, call) && !/(trainer|engine|runner|learner|agent|solver|workspace|experiment|task)s?$/i.test(src(file, m.receiver).split('.').pop() ?? '');
}

function leafMaker(file: Parsed, call: SyntaxNode): boolean {
  return /(^|\.)(Variable|tensor|as_tensor|from_numpy|zeros|ones|empty|full|rand|randn|randint|arange)$/.test(src(file, child(call, 'function') ?? call));
}

function callsOf(scope: SyntaxNode): SyntaxNode[] {
  const body = scope.type === 'function_definition' ? child(scope, 'body') : scope;
  return body ? [...(body.type === 'call' ? [body] : []), ...descendants(body, isScope)].filter((n) => n.type === 'call') : [];
}

/** Methods and attributes whose result carries no gradient back to their receiver. */
const cutsGradient = /^(detach|detach_|item|tolist|numpy|argmax|argmin|argsort|size|dim|numel|long|int|bool|shape|dtype|device|data|requires_grad|grad)$/;

/** Does the value at `d` pass through `.detach()` (or another method with no gradient) before reaching `top`? */
function cut(file: Parsed, d: SyntaxNode, top: SyntaxNode): boolean {
  for (let n: SyntaxNode | null = d; n && n !== top; n = n.parent) {
    const p = n.parent;
    if (p?.type === 'attribute' && n.field === 'object') {
      const attr = child(p, 'attribute');
      if (attr && cutsGradient.test(src(file, attr))) return true;
    }
  }
  return false;
}

/** Text keys (identifiers and attributes) an expression reads, except through `.detach()` and the like. */
function keysOf(file: Parsed, n: SyntaxNode): string[] {
  const out: string[] = [];
  for (const d of [n, ...descendants(n, isScope)]) {
    if ((d.type === 'identifier' || d.type === 'attribute') && cut(file, d, n)) continue;
    if (d.type === 'identifier' && (d.parent?.type !== 'attribute' || d.field === 'object') && d.parent?.type !== 'keyword_argument') out.push(src(file, d));
    else if (d.type === 'identifier' && d.parent?.type === 'keyword_argument' && d.field === 'value') out.push(src(file, d));
    else if (d.type === 'attribute') out.push(src(file, d));
  }
  return out;
}

/**
 * Is every path from the assignment `def` to the reader `use` through another assignment of `key`?
 * Structured code only, and only by unconditional statements: walking up from `use`, an earlier
 * statement of the same block that assigns `key` (in a block that does not hold `def`; in the one
 * that does, one between them, or before `use` when `def` comes after it, through a loop's back edge).
 */
function rebound(file: Parsed, def: SyntaxNode, use: SyntaxNode, key: string): boolean {
  const assigns = (stmt: SyntaxNode): boolean => {
    // `try: x, _ = it.next()` / `except: it = iter(loader); x, _ = it.next()`: bound whether or not it raised.
    if (stmt.type === 'try_statement') {
      const blockAssigns = (b: SyntaxNode | null | undefined): boolean => !!b && namedChildren(b).some(assigns);
      const handlers = namedChildren(stmt).filter((c) => c.type === 'except_clause');
      return handlers.length > 0 && blockAssigns(child(stmt, 'body')) && handlers.every((h) => blockAssigns(namedChildren(h).find((c) => c.type === 'block')));
    }
    const e = stmt.type === 'expression_statement' ? namedChildren(stmt)[0] : undefined;
    const left = e?.type === 'assignment' ? child(e, 'left') : undefined;
    return !!left && !contains(stmt, def) && [left, ...descendants(left)].some((t) => (t.type === 'identifier' || t.type === 'attribute') && src(file, t) === key && t.parent?.type !== 'attribute');
  };
  for (let x: SyntaxNode | null = use; x && x.type !== 'function_definition' && x.type !== 'module'; x = x.parent) {
    // `for images, labels in loader:` binds its targets before every run of its body.
    const body = x.type === 'for_statement' ? child(x, 'body') : undefined;
    const targets = x.type === 'for_statement' ? child(x, 'left') : undefined;
    if (body && targets && contains(body, use) && !contains(x, def) && [targets, ...descendants(targets)].some((t) => t.type === 'identifier' && src(file, t) === key)) return true;
    const block = x.parent;
    if (!block || (block.type !== 'block' && block.type !== 'module')) continue;
    const siblings = namedChildren(block);
    const here = x;
    const at = siblings.findIndex((y) => y.order === here.order);
    const defAt = siblings.findIndex((y) => y.order === def.order || contains(y, def));
    if (defAt < 0) {
      if (siblings.slice(0, at).some(assigns)) return true;
      continue;
    }
    const between = defAt < at ? siblings.slice(defAt + 1, at) : siblings.slice(0, at);
    return between.some(assigns);
  }
  return false;
}

/** The storage an assignment target writes: `x`, `self.total`, `d` for `d[k]`. */
function baseKey(file: Parsed, n: SyntaxNode): string {
  let t = n;
  while (t.type === 'subscript' || t.type === 'parenthesized_expression') {
    const v = t.type === 'subscript' ? child(t, 'value') : namedChildren(t)[0];
    if (!v) break;
    t = v;
  }
  return src(file, t);
}

function targetKeys(file: Parsed, left: SyntaxNode): string[] {
  return [left, ...descendants(left)].filter((t) => t.type === 'identifier' || t.type === 'attribute' || t.type === 'subscript').map((t) => baseKey(file, t));
}

/** `name == 'train'` or `name == Phase.TRAIN` (parenthesized or not): the flag `"name eq:train"` / `"name eq:Phase.TRAIN"`. */
function stringTest(file: Parsed, expr: SyntaxNode): string | undefined {
  const text = src(file, expr);
  const m = /^\(?\s*(\w+)\s*==\s*(['"])(\w*)\2\s*\)?$/.exec(text);
  if (m) return `${m[1]} eq:${m[3]}`;
  const e = /^\(?\s*(\w+)\s*==\s*([A-Za-z_][\w.]*\.[A-Za-z_]\w*)\s*\)?$/.exec(text);
  return e ? `${e[1]} eq:${e[2]}` : undefined;
}

function methodOf(file: Parsed, call: SyntaxNode): { receiver: SyntaxNode; method: string } | undefined {
  const f = child(call, 'function');
  if (f?.type !== 'attribute') return undefined;
  const receiver = child(f, 'object');
  const attr = child(f, 'attribute');
  return receiver && attr ? { receiver, method: src(file, attr) } : undefined;
}

/** The training-path analysis of a set of files. */
export class TrainingPaths {
  private readonly byName = new Map<string, Fn[]>();
  /** Text keys that reach backward, per scope (a function node or a module root). */
  readonly reaches = new Map<SyntaxNode, Set<string>>();
  /** Functions that run backward / a step, themselves or through callees. */
  readonly trains = new Set<Fn>();
  /** Functions reached by a call on a training path. */
  readonly reached = new Set<Fn>();
  /** Calls on a training path, by their key (see `callKey`). */
  readonly trainingCalls = new Set<string>();
  /** Functions whose return value flows into a backward pass at some call site. */
  private readonly returnsToBackward = new Set<Fn>();
  /** Where each key is read on its way to a backward pass, per scope: the seed or right-hand side that reads it. */
  private readonly readers = new Map<SyntaxNode, Map<string, SyntaxNode[]>>();

  constructor(readonly files: readonly Parsed[]) {
    for (const f of files) for (const fn of f.fns) this.byName.set(fn.name, [...(this.byName.get(fn.name) ?? []), fn]);
    this.solve();
  }

  resolve(file: Parsed, call: SyntaxNode): Fn[] {
    const f = child(call, 'function');
    if (f?.type === 'identifier') return (this.byName.get(src(file, f)) ?? []).filter((g) => !g.cls);
    const m = methodOf(file, call);
    if (!m) return [];
    const receiver = src(file, m.receiver);
    // `self.m()`: the enclosing class's own method where it has one.
    if (receiver === 'self') {
      const cls = [...ancestors(call)].find((a) => a.type === 'class_definition');
      const name = cls && child(cls, 'name');
      const own = name && (this.byName.get(m.method) ?? []).find((g) => g.file === file && g.cls === src(file, name));
      if (own) return [own];
    }
    // `x.forward(...)` runs x's own module's forward, as `x(...)` does, which is not resolved either: by its name it would be
    // every module's forward in the workspace, and one that takes gradients (an attack) would make every loop that runs
    // a submodule's `.forward` a training loop.
    if (m.method === 'forward') return [];
    // `utils.train(...)` may be a module's function; `net.train()` / `net.eval()` are nn.Module's own methods.
    const moduleMethod = /^(train|eval|to|cuda|cpu|forward|parameters|zero_grad|step|apply|state_dict|load_state_dict|half|float|double)$/.test(m.method);
    return (this.byName.get(m.method) ?? []).filter((g) => !!g.cls || (m.receiver.type === 'identifier' && receiver !== 'self' && !moduleMethod));
  }

  private isTrainingCall(file: Parsed, call: SyntaxNode): boolean {
    const m = methodOf(file, call);
    if (m?.method === 'backward' || m?.method === 'manual_backward') return true;
    if (m?.method === 'step' && optimizerLike.test(src(file, m.receiver))) return true;
    return /(^|\.)autograd\.(grad|backward)$/.test(src(file, child(call, 'function') ?? call));
  }

  /** The expressions whose values a training call backpropagates. */
  private seeds(file: Parsed, call: SyntaxNode): SyntaxNode[] {
    const m = methodOf(file, call);
    const args = namedChildren(child(call, 'arguments') ?? call).map((a) => (a.type === 'keyword_argument' ? child(a, 'value') : a)).filter((a): a is SyntaxNode => !!a);
    if (m?.method === 'backward' && !/(^|\.)(accelerator|fabric|engine|model_engine|trainer)$/.test(src(file, m.receiver))) return [m.receiver, ...args];
    if (m?.method === 'step') return [];
    return args;
  }

  private solve(): void {
    const scopes: { file: Parsed; scope: SyntaxNode; fn: Fn | undefined }[] = [];
    for (const file of this.files) {
      scopes.push({ file, scope: file.root, fn: undefined });
      for (const fn of file.fns) scopes.push({ file, scope: fn.node, fn });
    }
    for (let changed = true, rounds = 0; changed && rounds < 50; rounds++) {
      changed = false;
      const add = <T>(set: Set<T>, v: T): void => {
        if (!set.has(v)) {
          set.add(v);
          changed = true;
        }
      };
      for (const { file, scope, fn } of scopes) {
        let reach = this.reaches.get(scope);
        if (!reach) this.reaches.set(scope, (reach = new Set()));
        let readers = this.readers.get(scope);
        if (!readers) this.readers.set(scope, (readers = new Map<string, SyntaxNode[]>()));
        const addKeys = (n: SyntaxNode): void => {
          for (const k of keysOf(file, n)) {
            add(reach, k);
            const list = readers.get(k) ?? [];
            if (!list.includes(n)) readers.set(k, [...list, n]);
          }
        };
        const calls = callsOf(scope);
        for (const c of calls) {
          if (guarded(file, c)) continue;
          if (this.isTrainingCall(file, c)) {
            if (fn) add(this.trains, fn);
            for (const s of this.seeds(file, c)) addKeys(s);
          }
          // `self.model.train()` back to training mode is nn.Module's switch, not a trainer's train() of that name
          // (`trainer.train()` is kept: its receiver is named for running training).
          if (fn && !moduleModeSwitch(file, c) && this.resolve(file, c).some((g) => g !== fn && this.trains.has(g))) add(this.trains, fn);
        }
        // Flow backwards through assignments, accumulations and returns.
        const body = scope.type === 'function_definition' ? child(scope, 'body') : scope;
        for (const n of body ? descendants(body, isScope) : []) {
          if (n.type === 'assignment' || n.type === 'augmented_assignment') {
            const left = child(n, 'left');
            const right = child(n, 'right');
            if (left && right && targetKeys(file, left).some((k) => reach.has(k) && (readers.get(k) ?? []).some((r) => !rebound(file, n, r, k)))) addKeys(right);
          } else if (n.type === 'call') {
            const m = methodOf(file, n);
            if (m && /^(append|extend|insert|add_|update|put|setdefault|__setitem__)$/.test(m.method) && reach.has(baseKey(file, m.receiver))) addKeys(child(n, 'arguments') ?? n);
          } else if ((n.type === 'return_statement' || n.type === 'yield') && fn && this.returnsToBackward.has(fn)) {
            addKeys(n);
          }
        }
        // Calls whose value lands in a backpropagated key are on the path; so are all calls of a reached function.
        for (const c of calls) {
          if (guarded(file, c)) continue;
          // A call of a function that trains is on the path itself; that function's own calls are judged by their flow.
          // Not one that passes False for the flag its callee trains under (`run_epoch(loader, train=False)`).
          if (!moduleModeSwitch(file, c) && this.resolve(file, c).some((g) => this.trains.has(g) && !this.switchedOff(file, c, g))) add(this.trainingCalls, callKey(file, c));
          const byValue = (fn && this.reached.has(fn)) || this.valueReaches(file, c, reach, fn, scope) || this.storesBackpropagated(file, c, reach);
          // `Variable(netG(z).data)`, `torch.zeros(n)`: makes a leaf, the same under a grad guard (its arguments are judged apart).
          if (!byValue || leafMaker(file, c)) continue;
          add(this.trainingCalls, callKey(file, c));
          for (const g of this.resolve(file, c)) {
            add(this.reached, g);
            add(this.returnsToBackward, g);
          }
        }
      }
    }
  }

  /**
   * Does `call` turn off a parameter of `g` under whose `if <param>:` (or `if <param> is not None:`)
   * every unguarded call of `g` that trains lies (a training call, or a call of a function that
   * trains)? Off: a literal False (for `if <param>:`) or None, passed or left as the default.
   * Then this call of `g` runs no training step.
   */
  private switchedOff(file: Parsed, call: SyntaxNode, g: Fn): boolean {
    const flags = new Set<string>();
    // Every call that trains (a training call, or one of a function that trains), unless guarded, must be under the flag.
    for (const c of callsOf(g.node)) {
      if (guarded(g.file, c) || modeSwitch(g.file, c) || !(this.isTrainingCall(g.file, c) || this.resolve(g.file, c).some((h) => h !== g && this.trains.has(h)))) continue;
      let flag: string | undefined;
      let prev = c;
      for (const a of ancestors(c)) {
        if (a === g.node) break;
        // `if not cross_valid: <train>`, or `if validating: ... else: <train>`: trains while the flag is false.
        const negated = a.type === 'if_statement' && prev.field === 'consequence' ? child(a, 'condition') : undefined;
        if (negated?.type === 'not_operator' && child(negated, 'argument')?.type === 'identifier') {
          flag = `${src(g.file, child(negated, 'argument')!)} falsy`;
          break;
        }
        const otherwise = a.type === 'if_statement' && prev.type === 'else_clause' && !a.children.some((x) => x.type === 'elif_clause') ? child(a, 'condition') : undefined;
        if (otherwise?.type === 'identifier') {
          flag = `${src(g.file, otherwise)} falsy`;
          break;
        }
        const cond = a.type === 'if_statement' && prev.field === 'consequence' ? child(a, 'condition') : undefined;
        if (cond?.type === 'identifier') {
          // `is_train = (loop_type == 'train')` bound once in `g`, then `if is_train:`: the string test it stands for.
          const defs = descendants(g.node).filter((d) => d.type === 'assignment' && src(g.file, child(d, 'left') ?? d) === src(g.file, cond));
          const value = defs.length === 1 ? child(defs[0], 'right') : undefined;
          flag = (value && stringTest(g.file, value)) ?? `${src(g.file, cond)} truthy`;
          break;
        }
        const eq = cond && stringTest(g.file, cond);
        if (eq) {
          flag = eq;
          break;
        }
        const m = cond?.type === 'comparison_operator' ? /^(\w+)\s+is\s+not\s+None$/.exec(src(g.file, cond)) : null;
        if (m) {
          flag = `${m[1]} notNone`;
          break;
        }
        prev = a;
      }
      if (!flag) return false;
      flags.add(flag);
    }
    if (flags.size !== 1) return false;
    const [name, test] = [...flags][0].split(' ');
    const declared = namedChildren(child(g.node, 'parameters') ?? g.node);
    const params = declared.map((p) => src(g.file, p.type === 'identifier' ? p : (child(p, 'name') ?? p)));
    const args = namedChildren(child(call, 'arguments') ?? call);
    const keyword = args.find((a) => a.type === 'keyword_argument' && src(file, child(a, 'name') ?? a) === name);
    const positional = args.filter((a) => a.type !== 'keyword_argument');
    const index = params.indexOf(name) - (g.cls && params[0] === 'self' ? 1 : 0);
    let arg = keyword ? child(keyword, 'value') : index >= 0 ? positional[index] : undefined;
    let argFile = file;
    // Not passed, and no splat could pass it: the parameter's default.
    if (!arg && !args.some((a) => a.type === 'list_splat' || a.type === 'dictionary_splat')) {
      arg = declared.find((p) => p.type.endsWith('default_parameter') && child(p, 'name') && src(g.file, child(p, 'name')!) === name)?.children.find((c) => c.field === 'value');
      argFile = g.file;
    }
    const off = arg ? src(argFile, arg) : undefined;
    // `if loop_type == 'train':` is off for any other string literal passed; `if phase == Phase.TRAIN:` for another member of `Phase`.
    const value = test.slice(3);
    if (test.startsWith('eq:') && value.includes('.')) return !!off && off !== value && off.slice(0, off.lastIndexOf('.') + 1) === value.slice(0, value.lastIndexOf('.') + 1) && /^[\w.]+$/.test(off);
    if (test.startsWith('eq:')) return !!off && /^(['"])\w*\1$/.test(off) && off.slice(1, -1) !== value;
    return off === 'None' || (off === 'False' && test === 'truthy') || (off === 'True' && test === 'falsy');
  }

  /** Does the value of `call` flow into a key that reaches backward (or into a training call, or out of a function whose result does)? */
  private valueReaches(file: Parsed, call: SyntaxNode, reach: Set<string>, fn: Fn | undefined, scope: SyntaxNode): boolean {
    let prev = call;
    for (const a of ancestors(call)) {
      // `netG(z).data`, `.detach()`, `.item()`: what goes on carries none of this call's graph.
      if (a.type === 'attribute' && prev.field === 'object' && cutsGradient.test(src(file, child(a, 'attribute') ?? a))) return false;
      if (a.type === 'call' && this.isTrainingCall(file, a)) return true;
      if (a.type === 'call' && prev.field === 'arguments') {
        const m = methodOf(file, a);
        if (m && /^(append|extend|insert|add_|update|put|setdefault)$/.test(m.method) && reach.has(baseKey(file, m.receiver))) return true;
      }
      if ((a.type === 'assignment' || a.type === 'augmented_assignment') && prev.field === 'right') {
        let left = child(a, 'left');
        // `_, idx = q.max(1)`: of (values, indices), only the values carry the graph.
        const m = prev.type === 'call' ? methodOf(file, prev) : undefined;
        if (left && m && /^(max|min|topk|sort|kthvalue|median|mode)$/.test(m.method) && (left.type === 'pattern_list' || left.type === 'tuple_pattern')) left = namedChildren(left)[0];
        // A reader of the key that another assignment always rebinds it before (the training loop's `loss`,
        // not the validation loop's that reuses the name) does not see this value.
        return !!left && targetKeys(file, left).some((k) => reach.has(k) && (this.readers.get(scope)?.get(k) ?? []).some((r) => !rebound(file, a, r, k)));
      }
      if (a.type === 'return_statement' || a.type === 'yield') return !!fn && this.returnsToBackward.has(fn);
      if (a.type === 'block' || a.type === 'module' || a.type === 'function_definition' || a.type === 'expression_statement' && a.parent?.type === 'block') break;
      prev = a;
    }
    return false;
  }

  /** A bare call of a function that stores into an attribute the caller backpropagates (`self.loss = ...`). */
  private storesBackpropagated(file: Parsed, call: SyntaxNode, reach: Set<string>): boolean {
    if (call.parent?.type !== 'expression_statement') return false;
    const attrs = [...reach].filter((k) => k.includes('.'));
    if (attrs.length === 0) return false;
    return this.resolve(file, call).some((g) => [...descendants(g.node, isScope)].some((n) => (n.type === 'assignment' || n.type === 'augmented_assignment') && attrs.includes(src(g.file, child(n, 'left') ?? n))));
  }
}

const normalCondition = (text: string): string => text.replace(/^\(|\)$/g, '').replace(/\s+/g, ' ').replace(/"/g, "'").trim();

/** `loss.backward()`, `opt.step()`: a call that makes its function a training step (the checker's own reading). */
function trainingSignal(file: Parsed, call: SyntaxNode): boolean {
  const m = methodOf(file, call);
  return !!m && (m.method === 'backward' || (m.method === 'step' && optimizerLike.test(src(file, m.receiver))));
}

/** Is `node` in the body of an `if <cond>:` (that very condition) within `scope`? */
function underCondition(file: Parsed, node: SyntaxNode, cond: string, scope: SyntaxNode): boolean {
  let prev = node;
  for (const a of ancestors(node)) {
    if (a === scope) return false;
    if (a.type === 'if_statement' && prev.field === 'consequence') {
      const c = child(a, 'condition');
      if (c && normalCondition(src(file, c)) === cond) return true;
    }
    prev = a;
  }
  return false;
}

/** A call's identity across a fix: its function, its text without whitespace, and its occurrence among equal ones. */
function callKey(file: Parsed, call: SyntaxNode): string {
  const fn = fnOf(file, call);
  const text = src(file, call).replace(/\s+/g, '');
  const scope = fn?.node ?? file.root;
  let i = 0;
  for (const c of scope.type === 'function_definition' ? callsOf(scope) : [...descendants(scope)].filter((n) => n.type === 'call')) {
    if (c === call) break;
    if (fnOf(file, c) === fn && src(file, c).replace(/\s+/g, '') === text) i++;
  }
  return `${fn?.key ?? `${file.path}:<module>`}:${text}#${i}`;
}

export class FixSafetyChecker {
  private constructor(private readonly parser: PythonParser) {}

  static async create(): Promise<FixSafetyChecker> {
    return new FixSafetyChecker(new PythonParser(await loadPython()));
  }

  dispose(): void {
    this.parser.delete();
  }

  analyse(files: readonly SourceFile[]): TrainingPaths {
    return new TrainingPaths(files.map((f) => parseFile(this.parser, f.path, f.text)));
  }

  /**
   * Lints `files` as one workspace with `linter` and checks every offered fix of every finding,
   * one at a time, all of a file's fixes together, and the linter's fix-all.
   */
  check(linter: Linter, files: readonly SourceFile[]): { violations: Violation[]; fixesChecked: number } {
    const paths = this.analyse(files);
    const byPath = new Map(paths.files.map((f) => [f.path, f]));
    const results = linter.lintWorkspace(files);
    const violations: Violation[] = [];
    let fixesChecked = 0;
    for (const f of files) {
      const findings: Finding[] = results.get(f.path) ?? [];
      const old = byPath.get(f.path) as Parsed;
      for (const finding of findings) {
        for (const fix of finding.fixes) {
          fixesChecked++;
          violations.push(...this.checkEdits(paths, old, fix.edits, `${fix.title} (${finding.ruleId} at line ${finding.range.start.line + 1})`));
        }
      }
      const all = combineFixes(findings.flatMap((x) => x.fixes));
      if (all.length) violations.push(...this.checkEdits(paths, old, all, 'all fixes'));
      if (findings.some((x) => x.fixes.length)) {
        const fixed = linter.fixFile(f.path, f.text);
        linter.setFile(f.path, f.text);
        if (fixed !== f.text) violations.push(...this.checkText(paths, old, fixed, [], 'fix-all'));
      }
    }
    return { violations, fixesChecked };
  }

  /** Checks one fix (its edits) to `file` against an analysis of the workspace it belongs to. */
  checkFix(paths: TrainingPaths, file: SourceFile, edits: readonly TextEdit[], label: string): Violation[] {
    const old = paths.files.find((f) => f.path === file.path);
    if (!old) throw new Error(`${file.path} is not one of the analysed files`);
    return this.checkEdits(paths, old, edits, label);
  }

  private checkEdits(paths: TrainingPaths, old: Parsed, edits: readonly TextEdit[], label: string): Violation[] {
    return this.checkText(paths, old, applyEdits(old.text, edits), edits, label);
  }

  private checkText(paths: TrainingPaths, old: Parsed, text: string, edits: readonly TextEdit[], label: string): Violation[] {
    const out: Violation[] = [];
    const bad = (problem: string): void => {
      out.push({ path: old.path, fix: label, problem });
    };
    const now = parseFile(this.parser, old.path, text);
    if (now.hasError && !old.hasError) bad('the fixed file does not parse');
    // Guards: functions and calls on a training path must not be under a new one.
    const oldFns = new Map(old.fns.map((fn) => [fn.key, fn]));
    for (const fn of now.fns) {
      const before = oldFns.get(fn.key);
      if (!before || !(paths.trains.has(before) || paths.reached.has(before))) continue;
      const was = decoratorsOf(old, before.node).some((d) => guardText.test(d));
      if (!was && decoratorsOf(now, fn.node).some((d) => guardText.test(d))) bad(`\`${fn.name}\` is on a training path (${paths.trains.has(before) ? 'it trains' : 'a training step calls it'}) and got a grad guard`);
    }
    const oldGuarded = new Map<string, boolean>();
    for (const c of descendants(old.root)) if (c.type === 'call') oldGuarded.set(callKey(old, c), guarded(old, c));
    for (const c of descendants(now.root)) {
      if (c.type !== 'call') continue;
      const key = callKey(now, c);
      if (!paths.trainingCalls.has(key) || oldGuarded.get(key) !== false) continue;
      if (guarded(now, c)) bad(`\`${src(now, c).split('\n')[0]}\` is on a training path and now runs under a grad guard`);
    }
    // `with set_grad_enabled(<cond>):` around a training-path call keeps it recording only where every
    // backward pass of its function runs under `if <cond>:` (the step's training phase).
    for (const w of descendants(now.root)) {
      const clause = w.type === 'with_statement' ? w.children.find((c) => c.type === 'with_clause') : undefined;
      const m = clause && /set_grad_enabled\(\s*(.+?)\s*\)$/s.exec(src(now, clause));
      if (!m || /^(True|False|mode\s*=)/.test(m[1])) continue;
      const inside = descendants(w).filter((c) => c.type === 'call' && paths.trainingCalls.has(callKey(now, c)) && oldGuarded.get(callKey(now, c)) === false);
      if (inside.length === 0) continue;
      const scope = fnOf(now, w)?.node ?? now.root;
      const cond = normalCondition(m[1]);
      for (const c of descendants(scope, isScope)) {
        if (c.type !== 'call' || !trainingSignal(now, c)) continue;
        if (!underCondition(now, c, cond, scope)) bad(`\`${src(now, inside[0]).split('\n')[0]}\` is on a training path and now runs under \`set_grad_enabled(${m[1]})\`, but \`${src(now, c)}\` does not run only \`if ${m[1]}\``);
      }
    }
    // Values: no `.item()` / `.detach()` on what is backpropagated; no `.item()` on what is used as a tensor later.
    for (const e of edits) {
      const m = /\.(item|detach)\(\)/.exec(e.newText);
      if (!m) continue;
      const expr = expressionAt(old, e);
      if (!expr) continue;
      const scope = fnOf(old, expr)?.node ?? old.root;
      const reach = paths.reaches.get(scope) ?? new Set();
      const target = storedInto(old, expr);
      if (target && (reach.has(target) || (target.includes('.') && [...paths.reaches.values()].some((r) => r.has(target))))) bad(`\`${src(old, expr)}\` gets \`.${m[1]}()\` but \`${target}\` reaches backward()`);
      if (m[1] === 'item' && target && usedAsTensor(old, target, expr, scope)) bad(`\`${src(old, expr)}\` gets \`.item()\`, making \`${target}\` a Python number, but \`${target}\` is used as a tensor later`);
    }
    // Removals: a statement may go only when it is a cache flush or a device move done elsewhere too.
    for (const e of edits) {
      if (e.newText.trim() !== '' && e.newText.trim() !== 'pass') continue;
      for (const stmt of statementsIn(old, e)) {
        const t = src(old, stmt);
        if (/^(torch\.)?cuda\.empty_cache\(\)$|^torch\.cuda\.empty_cache\(\)$|^gc\.collect\(\)$/.test(t.trim())) continue;
        // `accel.empty_cache()` for `accel = getattr(torch, device_type, torch.cuda)` or `accel = torch.cuda`: the same flush.
        const alias = /^(\w+)\.empty_cache\(\)$/.exec(t.trim());
        if (alias && new RegExp(`^\\s*${alias[1]}\\s*=\\s*(getattr\\(\\s*torch\\s*,|torch\\.cuda\\s*$)`, 'm').test(old.text)) continue;
        const move = /^(?:(\w[\w.]*)\s*=\s*)?(\w[\w.]*)\.(to\(.*\)|cuda\(.*\))$/s.exec(t.trim());
        if (move && !undoneInLoop(old, stmt, move[2])) continue;
        bad(`removes \`${t.split('\n')[0]}\``);
      }
    }
    return out;
  }
}

/** The expression an edit appends to (`loss` in `loss` -> `loss.item()`), or the one it replaces. */
function expressionAt(file: Parsed, e: TextEdit): SyntaxNode | undefined {
  const starts = lineStarts(file.text);
  const offset = (p: { line: number; character: number }): number => (starts[p.line] ?? file.text.length) + p.character;
  const start = offset(e.range.start);
  const end = offset(e.range.end);
  let best: SyntaxNode | undefined;
  for (const n of descendants(file.root)) {
    if (!n.named) continue;
    // An insertion attaches to the largest primary expression ending there (`b.c` in `a + b.c`).
    const fits = start === end ? n.end === end && /^(identifier|attribute|call|subscript|parenthesized_expression)$/.test(n.type) : n.start === start && n.end === end;
    if (fits && (!best || n.end - n.start > best.end - best.start)) best = n;
  }
  return best;
}

/** Where the value of `expr` is stored: an assignment's target, an accumulator, a meter's receiver. */
function storedInto(file: Parsed, expr: SyntaxNode): string | undefined {
  let prev = expr;
  for (const a of ancestors(expr)) {
    if ((a.type === 'assignment' || a.type === 'augmented_assignment') && prev.field === 'right') {
      const left = child(a, 'left');
      return left ? baseKey(file, left) : undefined;
    }
    if (a.type === 'call' && prev.field === 'arguments') {
      const m = methodOf(file, a);
      if (m) return baseKey(file, m.receiver);
    }
    if (a.type === 'expression_statement' || a.type === 'block') break;
    prev = a;
  }
  return undefined;
}

/** Is `key` used as a tensor (a tensor-only method, a `torch.` function's argument) after `at`, in its scope? */
function usedAsTensor(file: Parsed, key: string, at: SyntaxNode, scope: SyntaxNode): boolean {
  const body = scope.type === 'function_definition' ? child(scope, 'body') : scope;
  // Initialised as a tensor, it stays one after `+= x.item()`.
  for (const n of body ? descendants(body, isScope) : []) {
    if (n.type !== 'assignment') continue;
    const left = child(n, 'left');
    const right = child(n, 'right');
    if (left && right && src(file, left) === key && /^torch\.(zeros|ones|tensor|full|empty)/.test(src(file, right))) return false;
  }
  for (const n of body ? descendants(body, isScope) : []) {
    if (n.start < at.end || n.type !== 'call') continue;
    const m = methodOf(file, n);
    if (m && src(file, m.receiver) === key && tensorOnlyMethods.test(m.method)) return true;
    const callee = src(file, child(n, 'function') ?? n);
    if (/^torch\./.test(callee) && namedChildren(child(n, 'arguments') ?? n).some((a) => src(file, a) === key)) return true;
  }
  return false;
}

/** The statements an edit's range covers entirely. */
function statementsIn(file: Parsed, e: TextEdit): SyntaxNode[] {
  const out: SyntaxNode[] = [];
  for (const n of descendants(file.root)) {
    if (n.parent?.type !== 'block' && n.parent?.type !== 'module') continue;
    if (!n.named || n.type === 'comment') continue;
    const inside = (n.startRow > e.range.start.line || (n.startRow === e.range.start.line && n.startCol >= e.range.start.character)) && (n.endRow < e.range.end.line || (n.endRow === e.range.end.line && n.endCol <= e.range.end.character));
    if (inside) out.push(n);
  }
  return out;
}

/** Does the loop around a removed `x.to(device)` also move `x` elsewhere (`x.cpu()` to save it), so that the move is needed? */
function undoneInLoop(file: Parsed, stmt: SyntaxNode, receiver: string): boolean {
  const loop = [...ancestors(stmt)].find((a) => a.type === 'for_statement' || a.type === 'while_statement');
  if (!loop) return false;
  return [...descendants(loop, isScope)].some((n) => n.type === 'call' && !(n.start >= stmt.start && n.end <= stmt.end) && /^(cpu|to|cuda|half|float)$/.test(methodOf(file, n)?.method ?? '') && src(file, methodOf(file, n)?.receiver ?? n) === receiver);
}

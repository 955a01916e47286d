/** Grad guards of a file's model (../model.ts): `no_grad`, `inference_mode`, `set_grad_enabled`, guard wrappers. */
import { ancestors, child, contains, descendants, namedChildren, unparen, type SyntaxNode } from '../syntax';
import { type ClassInfo, type Contribution, enableGradNames, type FunctionInfo, type GradState, inferenceModeNames, lastName, noGradNames, setGradNames, torchFamily } from './types';
import { ModelScopes } from './scopes';

/** The names of an attribute callee that may switch grad mode: `setGradNames`' last names (`set_grad_enabled`), `enter_context`. */
const switchMethodNames = new Set([...[...setGradNames].map(lastName), 'enter_context']);

/**
 * The calls of a top-level statement that may switch grad mode (`togglesOf`), in document
 * order: a call of a bare name (its alias may name `set_grad_enabled`), or of an attribute
 * named `set_grad_enabled` or `enter_context`. Syntax only, so listed once per statement node
 * (reused statements keep theirs across edits), where `togglesOf` walked each compound
 * statement of each block asked about, again at each level of nesting.
 */
interface SwitchCalls {
  /** Every candidate, in document order. */
  readonly all: SyntaxNode[];
  /** The attribute calls among them (`torch.set_grad_enabled(...)`, `stack.enter_context(...)`), in document order. */
  readonly attributes: SyntaxNode[];
}

const switchCalls = new WeakMap<SyntaxNode, SwitchCalls>();

function switchCallsOf(top: SyntaxNode, src: (n: SyntaxNode) => string): SwitchCalls {
  let list = switchCalls.get(top);
  if (!list) {
    list = { all: [], attributes: [] };
    for (const n of descendants(top)) {
      if (n.type !== 'call') continue;
      const f = child(n, 'function');
      const callee = f && unparen(f);
      if (callee?.type === 'identifier') list.all.push(n);
      else if (callee?.type === 'attribute') {
        const attr = child(callee, 'attribute');
        if (attr && switchMethodNames.has(src(attr))) {
          list.all.push(n);
          list.attributes.push(n);
        }
      }
    }
    switchCalls.set(top, list);
  }
  return list;
}

/**
 * The calls under `stmt` (not in a function nested in it) that `switchCallsOf` lists: what
 * `descendants(stmt, function_definition)` gives of them, in order. Without `bare`, only the
 * attribute calls: a call of a bare name switches grad mode only through an import alias of
 * `set_grad_enabled`, and most files have none.
 */
function switchCallsWithin(stmt: SyntaxNode, src: (n: SyntaxNode) => string, bare: boolean, mentions: (start: number, end: number) => boolean): SyntaxNode[] {
  // An attribute call `x.set_grad_enabled(...)` / `x.enter_context(...)` names its method in the statement's text.
  if (!bare && !mentions(stmt.start, stmt.end)) return [];
  let top = stmt;
  while (top.parent?.parent) top = top.parent;
  const lists = switchCallsOf(top, src);
  const all = bare ? lists.all : lists.attributes;
  if (all.length === 0) return all;
  const start = stmt.start;
  let lo = 0;
  for (let hi = all.length; lo < hi; ) {
    const mid = (lo + hi) >> 1;
    if (all[mid].start < start) lo = mid + 1;
    else hi = mid;
  }
  const out: SyntaxNode[] = [];
  for (let i = lo; i < all.length && all[i].start <= stmt.end; i++) {
    let p = all[i].parent;
    while (p && p !== stmt && p.type !== 'function_definition') p = p.parent;
    if (p === stmt) out.push(all[i]);
  }
  return out;
}

/** The methods of a LightningModule its trainer calls inside an evaluation loop (run under `torch.no_grad()`). */
const lightningEvaluationHook = /^((validation|test|predict)_step|(validation|test)_epoch_end|on_(validation|test|predict)_(start|end|epoch_start|epoch_end|batch_start|batch_end))$/;

/**
 * May `cls` be a LightningModule, whose trainer runs `validation_step` / `predict_step` under no_grad: its file
 * imports Lightning, or a base does (qualified, or a workspace class whose lineage does)? d2l's `Module(d2l.nn_Module,
 * d2l.HyperParameters)` mimics Lightning's method names in a file that never imports it, and its `predict_step`
 * decodes wherever its caller runs it.
 */
function lightningClass(cls: ClassInfo, depth = 0): boolean {
  const m = cls.model;
  if ([...m.aliases.values()].some((q) => lightningName.test(q))) return true;
  if (depth > 4) return false;
  return cls.bases.some((b) => {
    const q = m.qualify(b) ?? m.src(b);
    if (lightningName.test(q)) return true;
    return m.facts.classesNamed(lastName(q)).some((c) => c !== cls && lightningClass(c, depth + 1));
  });
}

const lightningName = /^(pytorch_lightning|lightning)(\.|$)/;

export abstract class ModelGuards extends ModelScopes {
  // ---------------------------------------------------------------- grad guards

  /**
   * Classifies an expression used as a context manager or decorator:
   * 'off' for a grad guard (or a grad mode that is not literally on), 'on' for an explicit
   * `enable_grad`, undefined for anything else.
   */
  classifyGuard(expr: SyntaxNode, depth = 0): 'off' | 'on' | undefined {
    const n = unparen(expr);
    if (depth > 4) return undefined;
    if (n.type === 'conditional_expression') {
      const parts = namedChildren(n).map((c) => this.classifyGuard(c, depth + 1));
      return parts.includes('off') ? 'off' : undefined;
    }
    if (n.type === 'call') {
      const callee = this.callee(n);
      if (!callee) return undefined;
      const q = this.qualify(callee);
      const firstArg = this.positionalArgs(n)[0] ?? this.keywordArg(n, 'mode');
      if (q && noGradNames.has(q)) return 'off';
      if (q && inferenceModeNames.has(q)) return firstArg && this.src(firstArg) === 'False' ? undefined : 'off';
      if (q && setGradNames.has(q)) return firstArg && this.src(firstArg) === 'True' ? 'on' : 'off';
      if (q && enableGradNames.has(q)) return 'on';
      // `torch.no_grad()(fn)` and the like: the callee itself is a guard; so is one picked by a
      // condition, `(torch.inference_mode if new_torch else torch.no_grad)()` (yolov5's decorator).
      if (callee.type === 'call' || callee.type === 'conditional_expression') return this.classifyGuard(callee, depth + 1);
      if ((callee.type === 'identifier' || callee.type === 'attribute') && !(q && torchFamily.test(q)) && this.facts.isGuardWrapper(lastName(this.src(callee)))) return 'off';
      if (callee.type === 'identifier') {
        // `ng = torch.no_grad` ... `with ng():`
        const b = this.binding(this.src(callee), n);
        if (b?.value && !b.unpacked && b.value.type !== 'call') return this.classifyGuard(b.value, depth + 1);
      }
      return undefined;
    }
    if (n.type === 'identifier' || n.type === 'attribute') {
      const q = this.qualify(n);
      if (q && (noGradNames.has(q) || inferenceModeNames.has(q))) return 'off';
      if (q && enableGradNames.has(q)) return 'on';
      if (!(q && torchFamily.test(q)) && this.facts.isGuardWrapper(lastName(this.src(n)))) return 'off';
      if (n.type === 'identifier') {
        const b = this.binding(this.src(n), n);
        if (b?.value && !b.unpacked && b.value !== n) return this.classifyGuard(b.value, depth + 1);
      }
    }
    return undefined;
  }

  /**
   * The grad mode in force at `node` as far as this file shows: 'off' under a guard,
   * 'on' under an explicit enable_grad, 'default' when only the callers can tell.
   */
  gradState(node: SyntaxNode): GradState {
    let prev: SyntaxNode = node;
    for (const a of ancestors(node)) {
      if (a.type === 'with_statement' && prev.field === 'body') {
        const clause = a.children.find((c) => c.type === 'with_clause');
        const g = clause && this.innermostItemGuard(clause.children.filter((c) => c.type === 'with_item'));
        if (g) return g;
      }
      // `with torch.no_grad(), model_eval_mode(model):`: Python enters the items in order, so the earlier ones guard a later one's call.
      if (a.type === 'with_clause') {
        const g = this.innermostItemGuard(a.children.filter((c) => c.type === 'with_item' && c.end <= node.start));
        if (g) return g;
      }
      if (a.type === 'block' || a.type === 'module') {
        const g = this.toggleBefore(a, prev);
        if (g) return g;
      }
      if (a.type === 'function_definition') {
        const info = this.functionByNode.get(a);
        if (info) {
          for (let i = info.decorators.length - 1; i >= 0; i--) {
            const g = this.classifyGuard(info.decorators[i]);
            if (g) return g;
          }
          // Lightning runs its evaluation loops, hooks included (`on_validation_end`, `validation_epoch_end`), under no_grad.
          if (info.cls && lightningEvaluationHook.test(info.name) && this.fact(`lightningClass:${info.cls.node.order}`, () => lightningClass(info.cls as ClassInfo)) !== false) return 'off';
          if (!info.cls && a.scope) return this.closureEntryState(a, info.name) ?? 'default';
        }
        return 'default';
      }
      if (a.type === 'class_definition') return 'default';
      prev = a;
    }
    return 'default';
  }

  /**
   * A function defined inside another and only called there (`def evaluate_subset(loader)` inside a
   * `@torch.no_grad()` `evaluate_model`, ColossalAI's BERT example): its body runs in the grad mode of those
   * calls. 'off' when every use of its name in the enclosing function, outside itself, is a call under a guard;
   * undefined when one is not, or the name escapes (returned, passed, stored).
   */
  protected closureEntryState(fnNode: SyntaxNode, name: string): 'off' | undefined {
    const outer = fnNode.scope;
    if (!outer) return undefined;
    return this.nodeMemo(fnNode, 'closureEntry', () => {
      let calls = 0;
      for (const d of descendants(outer)) {
        if (d.type !== 'identifier' || this.src(d) !== name || contains(fnNode, d)) continue;
        const call = d.parent;
        if (call?.type !== 'call' || d.field !== 'function') return undefined;
        if (this.gradState(call) !== 'off') return undefined;
        calls++;
      }
      return calls > 0 ? ('off' as const) : undefined;
    }) ?? undefined;
  }

  /** A statement before `stmt` in `block` that switches grad mode: `set_grad_enabled(False)`, `stack.enter_context(no_grad())`. */
  protected toggleBefore(block: SyntaxNode, stmt: SyntaxNode): 'off' | 'on' | undefined {
    let found: 'off' | 'on' | undefined;
    for (const t of this.togglesIn(block)) {
      if (t.start >= stmt.start) break;
      found = t.state;
    }
    return found;
  }

  /** The grad-mode switches among a block's statements, in order, computed once per block. */
  protected togglesIn(block: SyntaxNode): { start: number; state: 'off' | 'on' }[] {
    // The module's switches are shared by every statement: compared by value (sharedFacts), not recorded.
    if (block === this.root) {
      return this.shared('toggles', () => {
        const aliases = this.aliasSignature();
        const out: { start: number; state: 'off' | 'on' }[] = [];
        for (const top of this.root.children) for (const state of this.contribution(top, aliases).toggles) out.push({ start: top.start, state });
        return out;
      });
    }
    return this.nodeMemo(block, 'toggles', () => this.togglesOf(block.children)) ?? [];
  }

  protected togglesOfStatement(top: SyntaxNode): ('off' | 'on')[] {
    return this.togglesOf([top]).map((t) => t.state);
  }

  /**
   * Does an import alias name `set_grad_enabled` (`from torch import set_grad_enabled`)? Only then
   * can a call of a bare name switch grad mode (`togglesOf`): its callee qualifies to itself
   * otherwise, which no grad switch is. From the aliases, which the shared facts compare.
   */
  private bareGradSwitches(): boolean {
    return this.shared('bareGradSwitches', () => {
      for (const q of this.aliases.values()) if (setGradNames.has(q)) return true;
      return false;
    });
  }

  protected togglesOf(statements: readonly SyntaxNode[]): { start: number; state: 'off' | 'on' }[] {
    {
      const out: { start: number; state: 'off' | 'on' }[] = [];
      let bare: boolean | undefined;
      for (const s of statements) {
        if (s.type === 'function_definition' || s.type === 'class_definition' || s.type === 'decorated_definition' || !s.named) continue;
        const calls = s.type === 'expression_statement' ? [unparen(namedChildren(s)[0] ?? s)] : switchCallsWithin(s, (n) => this.src(n), (bare ??= this.bareGradSwitches()), (start, end) => this.mentionsSwitchMethod(start, end));
        for (const c of calls) {
          if (c.type !== 'call') continue;
          const q = this.qualify(this.callee(c));
          if (q && setGradNames.has(q)) {
            const arg = this.positionalArgs(c)[0];
            out.push({ start: s.start, state: arg && this.src(arg) === 'True' ? 'on' : 'off' });
          } else {
            const mc = this.methodCall(c);
            if (mc?.method === 'enter_context') {
              const arg = this.positionalArgs(c)[0];
              const g = arg && this.classifyGuard(arg);
              if (g) out.push({ start: s.start, state: g });
            }
          }
        }
      }
      return out;
    }
  }

  /**
   * The offsets of `switchMethodNames` in the text, in order: found once per file version by
   * `indexOf`, so that a statement that names none (most) is not walked for its calls
   * (`switchCallsOf` walked every node of nearly every top-level statement of the 50,000-line
   * file, 60-90 ms of a warm lint, to find the few that do).
   */
  private switchMethodOffsets: number[] | undefined;

  /** Does the text from `start` to `end` name a method that may switch grad mode (`switchMethodNames`)? */
  private mentionsSwitchMethod(start: number, end: number): boolean {
    let at = this.switchMethodOffsets;
    if (!at) {
      at = [];
      for (const name of switchMethodNames) for (let i = this.text.indexOf(name); i !== -1; i = this.text.indexOf(name, i + 1)) at.push(i);
      at.sort((a, b) => a - b);
      this.switchMethodOffsets = at;
    }
    let lo = 0;
    for (let hi = at.length; lo < hi; ) {
      const mid = (lo + hi) >> 1;
      if (at[mid] < start) lo = mid + 1;
      else hi = mid;
    }
    return lo < at.length && at[lo] < end;
  }

  /**
   * This function is a `@contextmanager` that yields under a guard, a decorator that calls its
   * argument under one, or a decorator factory that returns such a decorator, defined inside it
   * (`def smart_inference_mode(new_torch=...): def decorate(fn): ...; return decorate`, used as
   * `@smart_inference_mode()`).
   */
  isGuardWrapper(fn: FunctionInfo): boolean {
    return this.memo(`wrapper:${fn.node.order}`, () => {
      const body = fn.body;
      if (!body) return false;
      const isCm = fn.decorators.some((d) => /(^|\.)(contextmanager|asynccontextmanager)$/.test(this.qualify(d) ?? ''));
      if (isCm) {
        for (const n of descendants(body, (x) => x.type === 'function_definition')) {
          if (n.type === 'yield' && this.gradStateWithin(n, fn.node) === 'off') return true;
        }
        return false;
      }
      if (this.returnsGuard(fn)) return true;
      const wrapped = fn.params[0];
      if (!wrapped) return false;
      for (const n of descendants(body)) {
        if (n.type === 'call') {
          const callee = this.callee(n);
          // A nested wrapper that calls the wrapped function under a guard.
          if (callee?.type === 'identifier' && this.src(callee) === wrapped && this.scopeOf(n) !== fn.node) {
            if (this.gradStateWithin(n, fn.node) === 'off') return true;
          }
          // `return torch.no_grad()(fn)`
          if (n.parent?.type === 'return_statement' && this.positionalArgs(n).some((a) => this.src(a) === wrapped) && callee && this.classifyGuard(callee) === 'off') return true;
        }
      }
      return this.returnsGuardWrapper(fn);
    });
  }

  /**
   * `def _get_no_grad_ctx_mgr(): return torch.no_grad() if new_torch else contextlib.suppress()` (ENAS-pytorch): every
   * value `fn` returns is a grad guard or a no-op context kept for old PyTorch versions, and one is a guard; `with
   * _get_no_grad_ctx_mgr():` then guards what it runs.
   */
  private returnsGuard(fn: FunctionInfo): boolean {
    let guard = false;
    for (const n of descendants(fn.body ?? fn.node, (x) => x.type === 'function_definition' || x.type === 'lambda' || x.type === 'class_definition')) {
      if (n.type !== 'return_statement') continue;
      const value = namedChildren(n)[0];
      if (!value) return false;
      // torch's own guard, called (`return torch.no_grad()`): a returned wrapper of the project is a factory's (returnsGuardWrapper).
      if (value.type === 'call' && torchFamily.test(this.qualify(this.callee(value)) ?? '') && this.classifyGuard(value) === 'off') guard = true;
      else if (!(value.type === 'call' && /^contextlib\.(suppress|nullcontext)$/.test(this.qualify(this.callee(value)) ?? ''))) return false;
    }
    return guard;
  }

  /** A factory: `fn` returns, by name, a function defined in its own body that is a guard wrapper. */
  private returnsGuardWrapper(fn: FunctionInfo): boolean {
    const body = fn.body;
    if (!body) return false;
    const nested = new Map<string, FunctionInfo>();
    const returned: string[] = [];
    for (const n of descendants(body, (x) => x.type === 'function_definition' || x.type === 'lambda' || x.type === 'class_definition')) {
      if (n.type === 'function_definition') {
        const info = this.functionByNode.get(n);
        if (info) nested.set(info.name, info);
      } else if (n.type === 'return_statement') {
        const value = namedChildren(n)[0];
        if (value?.type === 'identifier') returned.push(this.src(value));
      }
    }
    return returned.some((name) => {
      const inner = nested.get(name);
      return !!inner && this.isGuardWrapper(inner);
    });
  }

  /** The guard of the last of a `with` statement's items that is one (entered last, so innermost), if any. */
  private innermostItemGuard(items: readonly SyntaxNode[]): 'off' | 'on' | undefined {
    for (let i = items.length - 1; i >= 0; i--) {
      const value = child(items[i], 'value');
      const expr = value?.type === 'as_pattern' ? namedChildren(value)[0] : value;
      const g = expr && this.classifyGuard(expr);
      if (g) return g;
    }
    return undefined;
  }

  /** Like gradState, but stops at `outer` (inclusive of functions nested in it). */
  protected gradStateWithin(node: SyntaxNode, outer: SyntaxNode): GradState {
    let prev: SyntaxNode = node;
    for (const a of ancestors(node)) {
      if (a === outer) return 'default';
      if (a.type === 'with_statement' && prev.field === 'body') {
        const clause = a.children.find((c) => c.type === 'with_clause');
        for (const item of clause ? clause.children.filter((c) => c.type === 'with_item') : []) {
          const value = child(item, 'value');
          const expr = value?.type === 'as_pattern' ? namedChildren(value)[0] : value;
          const g = expr && this.classifyGuard(expr);
          if (g) return g;
        }
      }
      if (a.type === 'block') {
        const g = this.toggleBefore(a, prev);
        if (g) return g;
      }
      if (a.type === 'function_definition') {
        const info = this.functionByNode.get(a);
        for (const d of info?.decorators ?? []) {
          const g = this.classifyGuard(d);
          if (g) return g;
        }
      }
      prev = a;
    }
    return 'default';
  }

  // Defined by models.ts, used by the guards of module-level statements.
  protected abstract contribution(top: SyntaxNode, aliases?: string): Contribution;
}

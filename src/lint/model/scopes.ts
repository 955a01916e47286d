/**
 * Scopes and assignments of a file's model (../model.ts): names qualified through the imports,
 * calls and their arguments, bindings per scope, and the caches of facts derived from them.
 */
import { recorded, recordingNow, replay, track, unrecorded } from '../deps';
import { child, unparen, type SyntaxNode } from '../syntax';
import { ScopeFlow, statementsOf } from './flow';
import { type Binding, type Flow, type FunctionInfo, type KeptFact, lastBindingIn, type Reaching, type ScopeData, trackKey } from './types';
import { checkStale, logStale, ModelImports } from './imports';

/**
 * A scope's bindings of one name sorted by where their targets start (`bindingsStartingIn`). A
 * list does not change once its statement is indexed, and the nodes of one statement move
 * together across edits, so the order stays.
 */
const byTargetStart = new WeakMap<readonly Binding[], Binding[]>();

/** A scope's bindings of one name sorted by the order of their statements, stably (`nearestBefore`); see `byTargetStart`. */
const byOrder = new WeakMap<readonly Binding[], Binding[]>();

/**
 * The binding of the list whose statement comes last before `order` (the first such in the
 * list on a tie); undefined when none does. Long lists (a name bound all over a module-level
 * script, asked at each use) by a binary search over them sorted once.
 */
function nearestBefore(list: readonly Binding[], order: number): Binding | undefined {
  if (list.length <= 8) {
    let best: Binding | undefined;
    for (const b of list) if (b.at.order < order && (!best || b.at.order > best.at.order)) best = b;
    return best;
  }
  let sorted = byOrder.get(list);
  if (!sorted) {
    sorted = [...list].sort((a, b) => a.at.order - b.at.order);
    byOrder.set(list, sorted);
  }
  let lo = 0;
  for (let hi = sorted.length; lo < hi; ) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid].at.order < order) lo = mid + 1;
    else hi = mid;
  }
  if (lo === 0) return undefined;
  // The first of those at the same statement, as a scan in list order keeps (the sort is stable).
  let i = lo - 1;
  while (i > 0 && sorted[i - 1].at.order === sorted[lo - 1].at.order) i--;
  return sorted[i];
}

/** The binding of the list nearest before `order` (`nearestBefore`), else its last; undefined for none. */
function nearestOrLast(list: readonly Binding[] | undefined, order: number): Binding | undefined {
  return list?.length ? (nearestBefore(list, order) ?? list[list.length - 1]) : undefined;
}

/**
 * `callFact`s being computed (a cycle guard: the calls and keys in progress, innermost last; as
 * deep as the facts nest, so a scan costs less than a map of sets made and dropped per
 * question), and how many cycles were cut so far.
 */
const callFacts = { calls: [] as SyntaxNode[], keys: [] as string[], cycles: 0 };

/** The model names a kept fact looked up, when it looked up none (`kept`): shared. */
const noModuleKeys: readonly string[] = Object.freeze([]);

/** The deps of a fact in progress (`nodeMemo`, `memo`): none to replay, but set, so that a cycle sees the answer as made. */
const inProgress: ReadonlySet<string> = new Set<string>();

/** A per-version fact of a node or function (`nodeMemo`): its value and the lookups it made. */
interface VersionFact {
  v: unknown;
  deps: ReadonlySet<string> | undefined;
}

/** A `cyclicFact` in progress: its place in Tarjan's search, and what its `compute` gave. */
interface PendingFact {
  readonly fn: FunctionInfo;
  readonly family: string;
  readonly index: number;
  low: number;
  local: unknown;
  /** Asked while recording: kept across edits (else per file version). */
  readonly persisted: boolean;
}

/** Tarjan's search state, shared by every file's `cyclicFact`s (a component may cross files). */
const components = {
  next: 0,
  stack: [] as PendingFact[],
  /** Weak: a function asked about once must not keep its file's model alive (an entry stays, empty, once its fact is done). */
  pending: new WeakMap<FunctionInfo, Map<string, PendingFact>>(),
  /** The fact whose `compute` is running. */
  current: undefined as PendingFact | undefined,
};

export abstract class ModelScopes extends ModelImports {
  // ---------------------------------------------------------------- names

  /**
   * The dotted name an expression refers to, with import aliases expanded. An attribute's is
   * kept per node for this version (its aliases are fixed): the rules and the file-wide facts
   * ask the same callees many times, and each answer was a string built link by link.
   */
  qualify(node: SyntaxNode | undefined): string | undefined {
    if (!node) return undefined;
    const n = unparen(node);
    if (n.type === 'identifier') {
      const name = this.src(n);
      return this.aliases.get(name) ?? name;
    }
    if (n.type === 'attribute') {
      const qualified = (this.qualified ??= new Map<SyntaxNode, string | undefined>());
      const known = qualified.get(n);
      if (known !== undefined || qualified.has(n)) return known;
      const object = child(n, 'object');
      const attr = child(n, 'attribute');
      const base = this.qualify(object);
      const q = base && attr ? `${base}.${this.src(attr)}` : undefined;
      qualified.set(n, q);
      return q;
    }
    return undefined;
  }

  /** `qualify`'s answers for attributes in this version (made when first asked). */
  private qualified: Map<SyntaxNode, string | undefined> | undefined;

  positionalArgs(call: SyntaxNode): SyntaxNode[] {
    const args = child(call, 'arguments');
    if (!args || args.type !== 'argument_list') return [];
    // `namedChildren` less keywords and splats, in one pass (asked for most calls, many times).
    const out: SyntaxNode[] = [];
    for (const a of args.children) {
      if (!a.named) continue;
      const t = a.type;
      if (t !== 'comment' && t !== 'line_continuation' && t !== 'keyword_argument' && t !== 'dictionary_splat' && t !== 'list_splat') out.push(a);
    }
    return out;
  }

  keywordArg(call: SyntaxNode, name: string): SyntaxNode | undefined {
    const args = child(call, 'arguments');
    if (!args) return undefined;
    for (const a of args.children) {
      if (a.type === 'keyword_argument' && a.named) {
        const k = child(a, 'name');
        // Its text compared in place: no copy of each keyword's name.
        if (k && k.end - k.start === name.length && this.text.startsWith(name, k.start)) return child(a, 'value');
      }
    }
    return undefined;
  }

  callee(call: SyntaxNode): SyntaxNode | undefined {
    const f = child(call, 'function');
    return f ? unparen(f) : undefined;
  }

  /** For `recv.method(...)`: the receiver and method name. */
  methodCall(call: SyntaxNode): { receiver: SyntaxNode; method: string } | undefined {
    const f = this.callee(call);
    if (f?.type !== 'attribute') return undefined;
    const receiver = child(f, 'object');
    const attr = child(f, 'attribute');
    return receiver && attr ? { receiver, method: this.src(attr) } : undefined;
  }

  /**
   * The closest binding of `key` visible at `at`: of the definitions in its scope that reach it
   * (flow.ts), the nearest one before it, else the latest (through a loop's back edge); when
   * none reaches, the nearest one before it in its scope, else any, else the module's.
   */
  binding(key: string, at: SyntaxNode): Binding | undefined {
    const scope = this.scopeOf(at);
    if (scope === this.root) trackKey('root:', key);
    const data = this.scopeData(scope);
    const own = data.bindings.get(key);
    // With one binding the flow gives the same answer as the scan below: it, whether it reaches or not.
    if (own && own.length > 1) {
      const defs = this.flowOf(scope, data).reaching(key, at)?.defs;
      if (defs?.length) {
        let best: Binding | undefined;
        for (const b of defs) if (b.at.order < at.order && (!best || b.at.order > best.at.order)) best = b;
        return best ?? defs[defs.length - 1];
      }
    }
    const found = nearestOrLast(own, at.order);
    if (found || scope === this.root || this.scopeData(scope).params.has(key)) return found;
    trackKey('root:', key);
    return nearestOrLast(this.scopeData(this.root).bindings.get(key), at.order);
  }

  /**
   * The definitions of `key` in the scope of `at` that reach it (flow.ts); undefined when that
   * scope binds no `key` (a parameter, a global, an attribute set elsewhere) or `at` is in none
   * of its statements.
   */
  reachingDefs(key: string, at: SyntaxNode): Reaching | undefined {
    const scope = this.scopeOf(at);
    if (scope === this.root) trackKey('root:', key);
    const data = this.scopeData(scope);
    if (!data.bindings.get(key)?.length) return undefined;
    return this.flowOf(scope, data).reaching(key, at);
  }

  /**
   * Can the value of `key` at `at` come from an earlier iteration of `loop` (or from before it)?
   * False when every path from the loop's head to `at` binds `key` first: a fresh value each
   * iteration (an accumulator reset at the top of the step).
   */
  carriedAcross(key: string, at: SyntaxNode, loop: SyntaxNode): boolean {
    const scope = this.scopeOf(at);
    if (scope === this.root) trackKey('root:', key);
    const data = this.scopeData(scope);
    if (!data.bindings.get(key)?.length) return true;
    return this.flowOf(scope, data).carriedAcross(key, at, loop);
  }

  /** The scope's flow graph, built on first use. */
  protected flowOf(scope: SyntaxNode, data: ScopeData): Flow {
    return (data.flow ??= new ScopeFlow(statementsOf(scope), data.bindings, scope === this.root, (n) => this.src(n)));
  }

  /**
   * A binding of `key` in any scope of the file (for `self.meter`, bound in `__init__`): the
   * last one of the first scope that has one. Callers may read the binding's text, not its
   * context: after an edit, a statement answers `any:<key>` only if its own answer's text
   * changed (`signatureOf`).
   */
  bindingAnywhere(key: string): Binding | undefined {
    trackKey('any:', key);
    return lastBindingIn(this.scopesBinding(key), key);
  }

  /**
   * The scopes of the file that bind `key`, in the order of `scopes`: from an index of every
   * scope's names built once per file version, since asked per use a scan of every scope grew
   * with uses × scopes.
   */
  protected scopesBinding(key: string): readonly ScopeData[] {
    if (!this.bindingScopes) {
      this.bindingScopes = new Map();
      for (const data of this.scopes.values()) {
        for (const [k, list] of data.bindings) {
          if (list.length === 0) continue;
          const scopes = this.bindingScopes.get(k);
          if (scopes) scopes.push(data);
          else this.bindingScopes.set(k, [data]);
        }
      }
    }
    return this.bindingScopes.get(key) ?? [];
  }

  /** `self.x = None`: the binding `attributeSetToNone` looks for, and that makes a statement answer `none:<key>`. */
  protected setsAttributeToNone(b: Binding): boolean {
    return b.target.type === 'attribute' && b.value !== undefined && this.src(b.value) === 'None';
  }

  /** Is the attribute `key` (`self.hidden`) assigned `None` anywhere in the file? */
  attributeSetToNone(key: string): boolean {
    // Only a statement that sets an attribute to None answers this (`exportsOf`).
    trackKey('none:', key);
    for (const data of this.scopesBinding(key)) {
      if ((data.bindings.get(key) ?? []).some((b) => this.setsAttributeToNone(b))) return true;
    }
    return false;
  }

  bindingsIn(scope: SyntaxNode, key: string): readonly Binding[] {
    if (scope === this.root) trackKey('root:', key);
    return this.scopeData(scope).bindings.get(key) ?? [];
  }

  /**
   * The bindings of `key` in `scope` whose target starts within `start`..`end` (offsets), by a
   * binary search over them sorted once: asked per statement, a scan of every binding of a name
   * grew with its bindings × statements (`loss` at module level).
   */
  bindingsStartingIn(scope: SyntaxNode, key: string, start: number, end: number): Binding[] {
    const list = this.bindingsIn(scope, key);
    if (list.length <= 8) return list.filter((b) => b.target.start >= start && b.target.start <= end);
    let sorted = byTargetStart.get(list);
    if (!sorted) {
      sorted = [...list].sort((a, b) => a.target.start - b.target.start);
      byTargetStart.set(list, sorted);
    }
    let lo = 0;
    for (let hi = sorted.length; lo < hi; ) {
      const mid = (lo + hi) >> 1;
      if (sorted[mid].target.start < start) lo = mid + 1;
      else hi = mid;
    }
    const out: Binding[] = [];
    for (let i = lo; i < sorted.length && sorted[i].target.start <= end; i++) out.push(sorted[i]);
    return out;
  }

  isParam(scope: SyntaxNode, name: string): boolean {
    if (scope === this.root) trackKey('root:', name);
    return this.scopeData(scope).params.has(name);
  }

  isGlobalIn(scope: SyntaxNode, name: string): boolean {
    if (scope === this.root) trackKey('root:', name);
    return this.scopeData(scope).globals.has(name);
  }

  callsIn(scope: SyntaxNode): readonly SyntaxNode[] {
    if (scope === this.root) track('root*');
    return this.scopeData(scope).calls;
  }

  // ---------------------------------------------------------------- facts cache

  protected memo<T>(key: string, compute: () => T): T {
    this.freshCaches();
    const hit = this.factsCache.get(key);
    // A fact computed outside any recording has no keys to replay: compute it again inside one.
    if (hit && (hit.deps || !recordingNow())) {
      replay(hit.deps);
      return hit.v as T;
    }
    // A cycle sees the in-progress answer (undefined) and stops.
    this.factsCache.set(key, { v: undefined, deps: inProgress });
    const r = recorded(compute);
    this.factsCache.set(key, { v: r.value, deps: r.deps });
    return r.value;
  }

  /**
   * A fact of one function that a rule computes once and the incremental linter keeps across
   * edits: while the function's statement is reused, the imports are the same, no other file
   * changed, and no lookup it recorded is answered by a statement changed since. Only for facts
   * of the function's own text and recorded lookups (not the file-wide shared facts) that
   * cannot see themselves in a cycle. Without a recording (the CLI) it is an ordinary `fact`.
   */
  functionFact<T>(fn: FunctionInfo, key: string, compute: () => T): T | undefined {
    if (!recordingNow()) return this.fact(`fn${fn.node.order}:${key}`, compute);
    const hit = this.keptFact(fn, key);
    if (hit) {
      replay(hit.deps);
      return hit.v as T;
    }
    const r = recorded(compute);
    this.keepFact(fn, key, r.value, r.deps ?? new Set());
    return r.value;
  }

  /**
   * A fact of one function that depends on the same fact of other functions, possibly in a
   * cycle (`trains`: f calls g calls f), answered as the least fixpoint of `compute` over the
   * order `join` (from `bottom`), so that the answer never depends on which function was asked
   * first. Computed by Tarjan's strongly connected components over the facts' own calls: while
   * a fact is in progress, asking it again gives `bottom` and marks the cycle; each member's
   * `compute` gives a value from what it could see, and when its component is complete every
   * member gets the join of them all (in a component each member reaches every other, so that
   * is the fixpoint). A value given to a caller inside an unfinished component is provisional
   * and is not kept. `compute` must be monotone in the facts it asks (a larger answer of a
   * callee never gives a smaller answer), and facts of one `family` must not ask facts of
   * another family that ask them back.
   *
   * Kept across edits like `functionFact` while recording (the incremental linter), with the
   * lookups of its whole component as its keys; per file version otherwise.
   */
  cyclicFact<T>(fn: FunctionInfo, family: string, compute: () => T, join: (a: T, b: T) => T, bottom: T): T {
    const persisted = recordingNow();
    const hit = persisted ? this.keptFact(fn, family) : this.versionFact(fn, family);
    if (hit) {
      replay(hit.deps);
      return hit.v as T;
    }
    const onStack = components.pending.get(fn)?.get(family);
    if (onStack) {
      const caller = components.current;
      if (caller) caller.low = Math.min(caller.low, onStack.index);
      return bottom;
    }
    const node: PendingFact = { fn, family, index: components.next, low: components.next, local: bottom, persisted };
    components.next++;
    components.stack.push(node);
    let perFn = components.pending.get(fn);
    if (!perFn) components.pending.set(fn, (perFn = new Map<string, PendingFact>()));
    perFn.set(family, node);
    const caller = components.current;
    components.current = node;
    let r: { value: T; deps: Set<string> | undefined };
    try {
      r = recorded(compute);
    } catch (err) {
      // Unwind: this fact and everything above it on the stack stay unanswered.
      for (const m of components.stack.splice(components.stack.indexOf(node))) components.pending.get(m.fn)?.delete(m.family);
      throw err;
    } finally {
      components.current = caller;
    }
    node.local = r.value;
    if (node.low < node.index) {
      if (caller) caller.low = Math.min(caller.low, node.low);
      return r.value;
    }
    const members = components.stack.splice(components.stack.indexOf(node));
    let value = bottom;
    for (const m of members) value = join(value, m.local as T);
    for (const m of members) {
      components.pending.get(m.fn)?.delete(m.family);
      const model = m.fn.model as unknown as ModelScopes;
      if (m.persisted) model.keepFact(m.fn, m.family, value, r.deps ?? new Set());
      else model.keepVersionFact(m.fn, m.family, { v: value, deps: r.deps });
    }
    return value;
  }

  /**
   * A kept `cyclicFact`/`functionFact` of `fn`, if still valid: made under the same shared
   * facts, the same names bound to models among those it looked up, and no other file changed
   * since, and no lookup it made is answered by a statement changed since (`checkStale`).
   */
  private keptFact(fn: FunctionInfo, key: string): KeptFact | undefined {
    return this.stillValid(this.functionFacts.get(fn)?.get(key));
  }

  private stillValid(hit: KeptFact | undefined): KeptFact | undefined {
    if (!hit || !checkStale(this.staleLog, hit) || hit.shared !== this.sharedFacts() || hit.outside !== this.facts.changedOutside(this.path)) return undefined;
    const modules = this.moduleNames();
    if (hit.modules !== modules) {
      const then = hit.modules as ReturnType<ModelScopes['moduleNames']>;
      for (const k of hit.moduleKeys) {
        const name = k.slice(3);
        for (const kind of ['models', 'losses', 'remotes'] as const) if (then[kind].has(name) !== modules[kind].has(name)) return undefined;
      }
      hit.modules = modules;
    }
    return hit;
  }

  private keepFact(fn: FunctionInfo, key: string, v: unknown, deps: Set<string>): void {
    let facts = this.functionFacts.get(fn);
    if (!facts) this.functionFacts.set(fn, (facts = new Map<string, KeptFact>()));
    facts.set(key, this.kept(v, deps));
  }

  private kept(v: unknown, deps: Set<string>): KeptFact {
    // Most facts look up no model name: they share one empty list.
    let moduleKeys: string[] | undefined;
    if (deps.size) for (const k of deps) if (k.startsWith('mt:')) (moduleKeys ??= []).push(k);
    return { v, deps, shared: this.sharedFacts(), outside: this.facts.changedOutside(this.path), modules: this.moduleNames(), moduleKeys: moduleKeys ?? noModuleKeys, checked: this.staleLog.seq };
  }

  /**
   * A fact of one call (which function it reaches) that the incremental linter keeps across
   * edits with the call's top-level statement, under the same conditions as `functionFact`: the
   * statement is reused, no lookup it recorded is answered by a statement changed since, and
   * the shared facts, the model names it looked up and the other files are the same. Without a
   * recording (the CLI) it is an ordinary `fact`, once per file version. Only for facts that
   * cannot see themselves in a cycle.
   */
  callFact<T>(call: SyntaxNode, key: string, compute: () => T): T | undefined {
    if (!recordingNow()) return this.nodeMemo<T | undefined>(call, key, compute);
    let top = call;
    while (top.parent?.parent) top = top.parent;
    const chunk = this.chunks.get(top);
    if (!chunk) return this.nodeMemo<T | undefined>(call, key, compute);
    const hit = this.stillValid(chunk.kept?.get(call)?.get(key));
    if (hit) {
      replay(hit.deps);
      return hit.v as T;
    }
    // A fact that asks itself (through other calls' facts) gets the per-version memo's answer
    // to a cycle (undefined), and what was computed while a cycle was cut is not kept.
    const { calls, keys } = callFacts;
    for (let i = calls.length - 1; i >= 0; i--) {
      if (calls[i] === call && keys[i] === key) {
        callFacts.cycles++;
        return undefined;
      }
    }
    const depth = calls.length;
    calls.push(call);
    keys.push(key);
    const cyclesBefore = callFacts.cycles;
    let r: { value: T; deps: Set<string> | undefined };
    try {
      r = recorded(compute);
    } finally {
      calls.length = depth;
      keys.length = depth;
    }
    if (callFacts.cycles !== cyclesBefore) return r.value;
    chunk.kept ??= new Map();
    let facts = chunk.kept.get(call);
    if (!facts) chunk.kept.set(call, (facts = new Map<string, KeptFact>()));
    facts.set(key, this.kept(r.value, r.deps ?? new Set()));
    return r.value;
  }

  /** A `cyclicFact` computed for this file version outside a recording. */
  private versionFact(fn: FunctionInfo, family: string): VersionFact | undefined {
    this.freshCaches();
    return this.cyclicFacts?.get(fn)?.get(family);
  }

  /** Keeps a `cyclicFact` for this file version (`versionFact`). */
  private keepVersionFact(fn: FunctionInfo, family: string, fact: VersionFact): void {
    this.cyclicFacts ??= new Map();
    let facts = this.cyclicFacts.get(fn);
    if (!facts) this.cyclicFacts.set(fn, (facts = new Map<string, VersionFact>()));
    facts.set(family, fact);
  }

  /**
   * A fact of one node or function per file version, like `fact` (undefined while it is being
   * computed: a cycle), by the node and a literal family name: the questions asked per call or
   * per block (`callFact` outside a recording, `togglesIn`, `siteStatus`) would otherwise build
   * a string key each time they are asked.
   */
  nodeMemo<T>(node: object, family: string, compute: () => T): T | undefined {
    this.freshCaches();
    this.nodeFacts ??= new Map();
    let facts = this.nodeFacts.get(node);
    const hit = facts?.get(family);
    // As `memo`: a fact computed outside any recording is computed again inside one.
    if (hit && (hit.deps || !recordingNow())) {
      replay(hit.deps);
      return hit.v as T;
    }
    if (!facts) this.nodeFacts.set(node, (facts = new Map<string, VersionFact>()));
    // A cycle sees the in-progress answer (undefined) and stops.
    facts.set(family, { v: undefined, deps: inProgress });
    const r = recorded(compute);
    facts.set(family, { v: r.value, deps: r.deps });
    return r.value;
  }

  /** This version's `cyclicFact`s outside a recording, and `nodeMemo`'s facts: per file version, like `factsCache`. */
  private cyclicFacts: Map<FunctionInfo, Map<string, VersionFact>> | undefined;
  private nodeFacts: Map<object, Map<string, VersionFact>> | undefined;

  /**
   * Drops the kept facts (`functionFact`, `cyclicFact`) that made a lookup of one of `keys`, or
   * all of them: the incremental linter's findings were made under file-wide facts (the
   * module-level grad switches, the names bound to models) that it compares by value, and when
   * those change, the facts kept with them go as its findings do.
   */
  dropKeptFacts(keys: readonly string[] | 'all'): void {
    if (keys === 'all') {
      this.functionFacts.clear();
      for (const chunk of this.chunks.values()) chunk.kept = undefined;
      this.staleLog.seq++;
      this.staleLog.allBefore = this.staleLog.seq;
      return;
    }
    // Each kept fact checks these keys when it is next asked (`checkStale`).
    logStale(this.staleLog, keys);
  }

  /** A fact a rule computes once per file version (undefined while it is being computed: a cycle). */
  fact<T>(key: string, compute: () => T): T | undefined {
    return this.memo<T | undefined>(`rule:${key}`, compute);
  }

  /**
   * A fact of the whole file that every statement's analysis shares (the module-level grad
   * switches, which names hold models): not recorded as a dependency, because the incremental
   * linter compares it by value after each edit (`sharedFacts`) and starts over when it changed.
   */
  protected shared<T>(key: string, compute: () => T): T {
    this.freshCaches();
    // Asked thousands of times per lint (every kept fact compares them): a small map of literal keys.
    const hit = this.sharedCache.get(key);
    if (hit) return hit.v as T;
    this.sharedCache.set(key, { v: undefined });
    const v = unrecorded(compute);
    this.sharedCache.set(key, { v });
    return v;
  }

  /** Starts the per-version caches over when the workspace changed since they were filled. */
  private freshCaches(): void {
    if (this.factsGeneration === this.facts.generation) return;
    this.factsCache = new Map();
    this.sharedCache = new Map();
    this.cyclicFacts = undefined;
    this.nodeFacts = undefined;
    this.factsGeneration = this.facts.generation;
  }

  /**
   * The file-wide facts every statement's findings may depend on, as one comparable string.
   * The names bound to models, losses and RemoteModules are not in it: a lookup of one records
   * `mt:<name>`, and the linter compares the sets (`moduleNames`) name by name.
   */
  sharedFacts(): string {
    return this.shared('sharedFacts', () => this.sharedFactsNow());
  }

  private sharedFactsNow(): string {
    const switches = this.togglesIn(this.root);
    let toggles: string[] = [];
    if (switches.length) {
      const tops = new Map(this.root.children.map((c, i) => [c.start, i]));
      toggles = switches.map((t) => `${tops.get(t.start) ?? -1}:${t.state}`);
    }
    return `${this.aliasSignature()}|${JSON.stringify([this.usesTorch, toggles])}`;
  }

  // Defined by the later layers (guards.ts, models.ts), used by the shared facts.
  abstract aliasSignature(): string;
  abstract moduleNames(): { readonly models: ReadonlySet<string>; readonly losses: ReadonlySet<string>; readonly remotes: ReadonlySet<string> };
  protected abstract togglesIn(block: SyntaxNode): { start: number; state: 'off' | 'on' }[];
}

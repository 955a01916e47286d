/**
 * Reaching definitions in one scope (a function's body, or the module's statements) over
 * Python's structured control flow: if/elif/else, for/while with their back edges and `else`,
 * break/continue, return/raise, try/except/else/finally, with, match. A comprehension's `for`
 * targets are its own scope: they are visible inside it and nowhere else.
 *
 * The scope's statements become a small graph of flow nodes (as in Pyright's code-flow
 * analysis): an `Assign` node per statement that binds names, a `Label` where paths join
 * (after an `if`, at a loop's head, at an `except`), and `start` / `unreachable`. Each
 * statement remembers the node in force before it. A question "which definitions of `key`
 * reach this node" walks the graph backwards from there until each path meets a definition
 * of `key` or the scope's entry; the answer is cached per (statement, key).
 *
 * What counts as a definition is what the file's index records as a binding (`x = ...`,
 * `a, b = ...`, `for x in ...`, `with ... as x`, `x := ...`, `self.x = ...`); augmented
 * assignments (`x += v`) update a value in place and are not definitions here. An assignment to
 * `x` also ends every attribute key on it (`x.y`), which is then "from the entry": unknown.
 *
 * Built from syntax alone, once per scope and syntax tree: a function's graph is kept with its
 * statement's index across edits (the statement's subtree and its bindings are reused with it).
 */
import { child, namedChildren, type SyntaxNode } from '../syntax';
import type { Binding, Flow, Reaching } from './types';

const START = { kind: 0 } as const;
const UNREACHABLE = { kind: 3 } as const;

interface Assign {
  readonly kind: 1;
  readonly defs: Map<string, Binding[]>;
  readonly prev: FlowNode;
}

interface Label {
  readonly kind: 2;
  readonly preds: FlowNode[];
}

type FlowNode = typeof START | Assign | Label | typeof UNREACHABLE;

const comprehensions = new Set(['list_comprehension', 'set_comprehension', 'dictionary_comprehension', 'generator_expression']);
const NONE: Reaching = { defs: [], entry: true };

/** What reaches a node for one key (`solve`): the definitions, unsorted, and whether the entry does. */
interface Reached {
  readonly defs: readonly Binding[];
  readonly entry: boolean;
}

const NOTHING: Reached = { defs: [], entry: false };
const ENTRY: Reached = { defs: [], entry: true };

/** See `ScopeFlow.shape`. */
interface Shape {
  readonly position: ReadonlyMap<FlowNode, number>;
  readonly horizon: readonly number[];
  readonly entry: readonly boolean[];
  /** By key: the first place of a node that defines it. */
  readonly firstDefs: ReadonlyMap<string, number>;
}

/** Walks of one key in one scope before `solve` answers it for all nodes at once. */
const solveAfter = 16;

function union(a: Reached, b: Reached): Reached {
  if (a === b || (b.defs.length === 0 && (!b.entry || a.entry))) return a;
  if (a.defs.length === 0 && (!a.entry || b.entry)) return b;
  const defs = [...a.defs];
  for (const d of b.defs) if (!defs.includes(d)) defs.push(d);
  return { defs, entry: a.entry || b.entry };
}

interface LoopFrame {
  readonly breaks: FlowNode[];
  readonly continues: FlowNode[];
}

export class ScopeFlow implements Flow {
  /** The flow node in force before each statement (a `while`: at its head, where the condition runs). */
  private readonly before = new Map<SyntaxNode, FlowNode>();
  /** The head of each loop, where an iteration begins. */
  private readonly heads = new Map<SyntaxNode, Label>();
  /** The definitions each statement makes, from the scope's bindings, by the statement (or the compound statement whose header makes them). */
  private readonly owned = new Map<SyntaxNode, [string, Binding][]>();
  /** The bindings of comprehension targets, by their `for_in_clause`. */
  private readonly clauses = new Map<SyntaxNode, [string, Binding][]>();
  private readonly cache = new Map<FlowNode, Map<string, Reaching>>();
  /** How often each key was walked for; past `solveAfter`, `solve` answers it for every node. */
  private readonly walks = new Map<string, number>();
  private readonly solved = new Map<string, Map<FlowNode, Reached>>();
  private nodes: FlowNode[] | undefined;
  private shaped: Shape | undefined;
  private readonly loops: LoopFrame[] = [];
  private src: ((n: SyntaxNode) => string) | undefined;
  private readonly tries: FlowNode[][] = [];

  /**
   * @param statements the scope's statements in order (a function's body block's children, or the module's)
   * @param bindings every binding of the scope, as the index records them
   * @param module whether this is the module's scope (see `raise_statement` below)
   * @param src a node's text, read while building only (the graph outlives the model that built it)
   */
  constructor(statements: readonly SyntaxNode[], bindings: ReadonlyMap<string, readonly Binding[]>, private readonly module: boolean, src: (n: SyntaxNode) => string) {
    this.src = src;
    for (const [key, list] of bindings) {
      for (const b of list) {
        if (b.at.type === 'for_in_clause') {
          push(this.clauses, b.at, [key, b]);
          continue;
        }
        const owner = ownerOf(b.at);
        if (owner) push(this.owned, owner, [key, b]);
      }
    }
    this.block(statements, START);
    this.src = undefined;
  }

  /**
   * The definitions of `key` that reach `at` (a node of this scope), or undefined when `at` is
   * not in a statement of the scope (then the caller's old answer holds).
   */
  reaching(key: string, at: SyntaxNode): Reaching | undefined {
    let node: FlowNode | undefined;
    for (let a: SyntaxNode | null = at; a; a = a.parent) {
      if (comprehensions.has(a.type)) {
        const own: Binding[] = [];
        for (const c of a.children) if (c.type === 'for_in_clause') for (const [k, b] of this.clauses.get(c) ?? []) if (k === key) own.push(b);
        if (own.length) return { defs: own, entry: false };
      }
      node = this.before.get(a);
      if (node) break;
    }
    return node ? this.walk(node, key) : undefined;
  }

  /**
   * Can the value of `key` at `at` come from an earlier iteration of `loop` (or from before
   * it)? False when every path from the loop's head to `at` binds `key` first: the value is
   * made anew in each iteration.
   */
  carriedAcross(key: string, at: SyntaxNode, loop: SyntaxNode): boolean {
    const head = this.heads.get(loop);
    let node: FlowNode | undefined;
    for (let a: SyntaxNode | null = at; a && !node; a = a.parent) node = this.before.get(a);
    if (!head || !node) return true;
    const seen = new Set<FlowNode>();
    const stack: FlowNode[] = [node];
    while (stack.length) {
      const n = stack.pop() as FlowNode;
      if (n === head) return true;
      if (seen.has(n)) continue;
      seen.add(n);
      if (n.kind === 1) {
        if (n.defs.has(key)) continue;
        stack.push(n.prev);
      } else if (n.kind === 2) {
        for (const p of n.preds) stack.push(p);
      } else if (n.kind === 0) {
        return true;
      }
    }
    return false;
  }

  private walk(from: FlowNode, key: string): Reaching {
    let byKey = this.cache.get(from);
    const hit = byKey?.get(key);
    if (hit) return hit;
    // A key asked at many places (`model`, `loss` all over a module-level script): each walk
    // could go back to the scope's entry, so the answer for every node is computed at once.
    const asked = (this.walks.get(key) ?? 0) + 1;
    this.walks.set(key, asked);
    if (asked > solveAfter) {
      const v = this.solve(key).get(from);
      const r = !v || (v.defs.length === 0 && v.entry) ? (v ? NONE : { defs: [], entry: false }) : { defs: [...v.defs].sort((a, b) => a.at.order - b.at.order), entry: v.entry };
      if (!byKey) this.cache.set(from, (byKey = new Map<string, Reaching>()));
      byKey.set(key, r);
      return r;
    }
    const prefixes: string[] = [];
    for (let i = key.indexOf('.'); i !== -1; i = key.indexOf('.', i + 1)) prefixes.push(key.slice(0, i));
    const defs: Binding[] = [];
    let entry = false;
    const seen = new Set<FlowNode>();
    const stack: FlowNode[] = [from];
    const shape = this.shape();
    const first = this.firstDefinition(key, prefixes);
    while (stack.length) {
      const n = stack.pop() as FlowNode;
      if (seen.has(n)) continue;
      seen.add(n);
      // Nothing before this node defines the key (all its definitions come later in the scope,
      // and it is in no loop around them): only whether the entry reaches it matters. A name
      // first bound in a loop, asked at the loop's head, walked back to the entry each time.
      const at = shape.position.get(n);
      if (at !== undefined && shape.horizon[at] < first) {
        if (shape.entry[at]) entry = true;
        continue;
      }
      // What reaches a node asked about before is what reaches it: its answer, not another walk
      // (a module-level script asks at each statement, and each walk went back to the first).
      const known = n === from ? undefined : this.cache.get(n)?.get(key);
      if (known) {
        for (const b of known.defs) if (!defs.includes(b)) defs.push(b);
        if (known.entry) entry = true;
        continue;
      }
      switch (n.kind) {
        case 0:
          entry = true;
          break;
        case 1: {
          const d = n.defs.get(key);
          if (d) {
            for (const b of d) if (!defs.includes(b)) defs.push(b);
          } else if (prefixes.some((p) => n.defs.has(p))) {
            // `out = model(x)` ends what `out.logits` held: from here on it is unknown.
            entry = true;
          } else {
            stack.push(n.prev);
          }
          break;
        }
        case 2:
          for (const p of n.preds) stack.push(p);
          break;
      }
    }
    defs.sort((a, b) => a.at.order - b.at.order);
    const r = defs.length === 0 && entry ? NONE : { defs, entry };
    if (!byKey) this.cache.set(from, (byKey = new Map<string, Reaching>()));
    byKey.set(key, r);
    return r;
  }

  /**
   * What reaches each node of the graph for one key: the walk's answer (the definitions met
   * first on each path back, and whether a path reaches the entry without one) for all nodes at
   * once, as the least fixpoint of the usual reaching-definitions equations, iterated over the
   * nodes in an order where predecessors mostly come first.
   */
  private solve(key: string): Map<FlowNode, Reached> {
    const known = this.solved.get(key);
    if (known) return known;
    const prefixes: string[] = [];
    for (let i = key.indexOf('.'); i !== -1; i = key.indexOf('.', i + 1)) prefixes.push(key.slice(0, i));
    const nodes = (this.nodes ??= this.allNodes());
    const value = new Map<FlowNode, Reached>();
    const own = new Map<FlowNode, Reached>();
    const get = (n: FlowNode): Reached => value.get(n) ?? NOTHING;
    for (let changed = true; changed; ) {
      changed = false;
      for (const n of nodes) {
        let v: Reached;
        if (n.kind === 0) v = ENTRY;
        else if (n.kind === 3) v = NOTHING;
        else if (n.kind === 1) {
          const d = n.defs.get(key);
          if (d) {
            v = own.get(n) ?? { defs: [...new Set(d)], entry: false };
            own.set(n, v);
          } else if (prefixes.some((p) => n.defs.has(p))) v = ENTRY;
          else v = get(n.prev);
        } else {
          v = get(n.preds[0] ?? UNREACHABLE);
          for (let i = 1; i < n.preds.length; i++) v = union(v, get(n.preds[i]));
        }
        const old = value.get(n);
        // Values only grow: the same size is the same value.
        if (!old || old.entry !== v.entry || old.defs.length !== v.defs.length) {
          value.set(n, v);
          changed = true;
        }
      }
    }
    this.solved.set(key, value);
    return value;
  }

  /**
   * Key-independent facts of the graph, once: each node's place in `allNodes`, the latest place
   * of any node a walk back from it can meet (`horizon`: past its own place only through a
   * loop around it), and whether the entry reaches it.
   */
  private shape(): Shape {
    if (this.shaped) return this.shaped;
    const nodes = (this.nodes ??= this.allNodes());
    const position = new Map<FlowNode, number>(nodes.map((n, i) => [n, i]));
    const horizon = nodes.map((_, i) => i);
    const entry = nodes.map((n) => n.kind === 0);
    for (let changed = true; changed; ) {
      changed = false;
      nodes.forEach((n, i) => {
        const preds = n.kind === 1 ? [n.prev] : n.kind === 2 ? n.preds : [];
        for (const p of preds) {
          const j = position.get(p) as number;
          if (horizon[j] > horizon[i]) {
            horizon[i] = horizon[j];
            changed = true;
          }
          if (entry[j] && !entry[i]) {
            entry[i] = true;
            changed = true;
          }
        }
      });
    }
    const firstDefs = new Map<string, number>();
    nodes.forEach((n, i) => {
      if (n.kind !== 1) return;
      for (const k of n.defs.keys()) if (!firstDefs.has(k)) firstDefs.set(k, i);
    });
    return (this.shaped = { position, horizon, entry, firstDefs });
  }

  /** The first place (`allNodes`) of a node that defines the key or a name it is an attribute of (`out` for `out.logits`). */
  private firstDefinition(key: string, prefixes: readonly string[]): number {
    const { firstDefs } = this.shape();
    let first = firstDefs.get(key) ?? Infinity;
    for (const p of prefixes) first = Math.min(first, firstDefs.get(p) ?? Infinity);
    return first;
  }

  /** Every node a statement's walk can meet, predecessors before their successors (but for back edges). */
  private allNodes(): FlowNode[] {
    const order: FlowNode[] = [];
    const seen = new Set<FlowNode>();
    for (const start of [...this.before.values(), ...this.heads.values()]) {
      if (seen.has(start)) continue;
      seen.add(start);
      const stack: [FlowNode, number][] = [[start, 0]];
      while (stack.length) {
        const top = stack[stack.length - 1];
        const n = top[0];
        const preds = n.kind === 1 ? [n.prev] : n.kind === 2 ? n.preds : [];
        if (top[1] < preds.length) {
          const p = preds[top[1]++];
          if (!seen.has(p)) {
            seen.add(p);
            stack.push([p, 0]);
          }
        } else {
          stack.pop();
          order.push(n);
        }
      }
    }
    return order;
  }

  // ---------------------------------------------------------------- building

  private join(preds: FlowNode[]): FlowNode {
    const live = preds.filter((p, i) => p !== UNREACHABLE && preds.indexOf(p) === i);
    if (live.length === 0) return UNREACHABLE;
    if (live.length === 1) return live[0];
    return { kind: 2, preds: live };
  }

  /** A node after `prev` with the definitions `stmt` makes, if any. */
  private define(stmt: SyntaxNode, prev: FlowNode): FlowNode {
    const list = this.owned.get(stmt);
    if (!list || prev === UNREACHABLE) return prev;
    const defs = new Map<string, Binding[]>();
    for (const [k, b] of list) push(defs, k, b);
    const n: Assign = { kind: 1, defs, prev };
    for (const t of this.tries) t.push(n);
    return n;
  }

  private block(statements: readonly SyntaxNode[], entry: FlowNode): FlowNode {
    let current = entry;
    for (const s of statements) if (s.named) current = this.statement(s, current);
    return current;
  }

  private body(node: SyntaxNode | undefined, entry: FlowNode): FlowNode {
    return node ? this.block(node.type === 'block' ? node.children : [node], entry) : entry;
  }

  private statement(s: SyntaxNode, current: FlowNode): FlowNode {
    this.before.set(s, current);
    switch (s.type) {
      case 'if_statement': {
        const after = this.define(s, current);
        const ends: FlowNode[] = [this.body(child(s, 'consequence'), after)];
        let fallThrough: FlowNode = after;
        for (const alt of s.children) {
          if (alt.type === 'elif_clause') {
            this.before.set(alt, fallThrough);
            ends.push(this.body(child(alt, 'consequence'), fallThrough));
          } else if (alt.type === 'else_clause') {
            this.before.set(alt, fallThrough);
            ends.push(this.body(child(alt, 'body'), fallThrough));
            fallThrough = UNREACHABLE;
          }
        }
        ends.push(fallThrough);
        return this.join(ends);
      }
      case 'for_statement':
      case 'while_statement': {
        const head: Label = { kind: 2, preds: [current] };
        this.heads.set(s, head);
        if (s.type === 'while_statement') this.before.set(s, head);
        const frame: LoopFrame = { breaks: [], continues: [] };
        this.loops.push(frame);
        const bodyEnd = this.body(child(s, 'body'), this.define(s, head));
        this.loops.pop();
        for (const p of [bodyEnd, ...frame.continues]) if (p !== UNREACHABLE) head.preds.push(p);
        const condition = child(s, 'condition');
        // `while True:` ends only through a `break` (or return/raise).
        const endless = s.type === 'while_statement' && !!condition && /^(True|1)$/.test(this.src?.(condition) ?? '');
        const exhausted: FlowNode = endless ? UNREACHABLE : head;
        const alt = child(s, 'alternative');
        const normal = alt ? this.body(child(alt, 'body'), exhausted) : exhausted;
        if (alt) this.before.set(alt, exhausted);
        return this.join([normal, ...frame.breaks]);
      }
      case 'try_statement': {
        const collected: FlowNode[] = [current];
        this.tries.push(collected);
        let end = this.body(child(s, 'body'), current);
        this.tries.pop();
        collected.push(end);
        const raised = this.join(collected);
        const ends: FlowNode[] = [];
        let fin: SyntaxNode | undefined;
        for (const c of s.children) {
          if (c.type === 'except_clause' || c.type === 'except_group_clause') {
            this.before.set(c, raised);
            ends.push(this.block(c.children.filter((x) => x.type === 'block').flatMap((b) => b.children), this.define(c, raised)));
          } else if (c.type === 'else_clause') {
            end = this.body(child(c, 'body'), end);
          } else if (c.type === 'finally_clause') {
            fin = c;
          }
        }
        const normal = this.join([end, ...ends]);
        if (!fin) return normal;
        const finEntry = normal === UNREACHABLE ? raised : normal;
        this.before.set(fin, finEntry);
        const finEnd = this.block(fin.children.filter((x) => x.type === 'block').flatMap((b) => b.children), finEntry);
        return normal === UNREACHABLE ? UNREACHABLE : finEnd;
      }
      case 'with_statement':
        return this.body(child(s, 'body'), this.define(s, current));
      case 'match_statement': {
        const after = this.define(s, current);
        const ends: FlowNode[] = [after];
        const cases = child(s, 'body');
        for (const c of cases ? cases.children : []) {
          if (c.type !== 'case_clause') continue;
          this.before.set(c, after);
          ends.push(this.body(child(c, 'consequence'), after));
        }
        return this.join(ends);
      }
      case 'decorated_definition': {
        const def = child(s, 'definition');
        return def ? this.statement(def, current) : current;
      }
      case 'class_definition':
        // A class body runs once, in order, where it stands; its bindings are in this scope's index.
        return this.body(child(s, 'body'), current);
      case 'function_definition':
        return current;
      case 'return_statement':
        return UNREACHABLE;
      case 'raise_statement':
        // At the module's top level a `raise` would make every later statement unreachable, and
        // a statement's findings would then depend on a statement that binds none of its names:
        // the incremental linter could not tell. It is rare enough to read past.
        return this.module && s.parent?.type === 'module' ? current : UNREACHABLE;
      case 'break_statement':
      case 'continue_statement': {
        const frame = this.loops[this.loops.length - 1];
        if (!frame) return current;
        (s.type === 'break_statement' ? frame.breaks : frame.continues).push(current);
        return UNREACHABLE;
      }
      default:
        return this.define(s, current);
    }
  }
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

/**
 * The statement whose execution makes a binding: the nearest ancestor that is a statement of
 * a block (or the module), or the clause of a compound statement (`except`, `case`) it is in.
 */
function ownerOf(at: SyntaxNode): SyntaxNode | undefined {
  for (let n: SyntaxNode | null = at; n; n = n.parent) {
    const p = n.parent;
    if (!p) return undefined;
    if (p.type === 'block' || p.type === 'module') return n;
    if (n.type === 'elif_clause' || n.type === 'except_clause' || n.type === 'except_group_clause' || n.type === 'case_clause') return n.type === 'elif_clause' ? p : n;
    if (comprehensions.has(n.type)) {
      // A walrus in a comprehension binds in the enclosing scope; anything else there is the comprehension's own.
      if (at.type !== 'named_expression') return undefined;
    }
  }
  return undefined;
}

export function statementsOf(scope: SyntaxNode): readonly SyntaxNode[] {
  if (scope.type === 'module') return scope.children;
  const body = child(scope, 'body');
  return body ? (body.type === 'block' ? body.children : namedChildren(body)) : [];
}

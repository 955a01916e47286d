/**
 * The first layer of a file's model (../model.ts): the source text and, per top-level statement,
 * its imports and aliases, functions, classes, calls and references, kept across edits for every
 * statement whose syntax tree was reused.
 */
import { child, childrenOf, contains, descendants, namedChildren, unparen, type SyntaxNode } from '../syntax';
import { flatCopy } from '../text';
import { type Binding, type ChunkIndex, type ClassInfo, type FunctionInfo, hasAny, type KeptFact, lastBindingIn, lastName, moduleMethodArgsFit, type ScopeData, type StaleLog, staleLogLength, torchFamily, type WorkspaceFacts } from './types';

export abstract class ModelImports {
  readonly aliases = new Map<string, string>();
  readonly functions: FunctionInfo[] = [];
  readonly classes: ClassInfo[] = [];
  /** `functions` by name (methods too), in the same order: a lookup per call was a scan of every function. */
  private readonly functionsByName = new Map<string, FunctionInfo[]>();
  /** `classes` by name, in the same order. */
  private readonly classesByName = new Map<string, ClassInfo[]>();
  protected allCalls: SyntaxNode[] | undefined;
  protected allReferences: SyntaxNode[] | undefined;
  readonly functionByNode = new Map<SyntaxNode, FunctionInfo>();
  /** True when the file imports torch or a library built on it: the rules only run then. */
  usesTorch = false;
  /**
   * The top-level statement the rules look at (the incremental linter analyses one at a time);
   * undefined: the whole file.
   */
  focus: SyntaxNode | undefined;
  protected readonly scopes = new Map<SyntaxNode, ScopeData>();
  /** The scopes that bind each name, in the order of `scopes` (`scopesBinding`); built when first asked. */
  protected bindingScopes: Map<string, ScopeData[]> | undefined;
  protected readonly chunks = new Map<SyntaxNode, ChunkIndex>();
  /** The text's lines, split when first asked (most files are never asked: only findings and fixes read lines). */
  private splitLines: string[] | undefined;
  protected factsCache = new Map<string, { v: unknown; deps: ReadonlySet<string> | undefined }>();
  /** The shared facts (`shared`) of this version, by their own key. */
  protected sharedCache = new Map<string, { v: unknown }>();
  /** `functionFact`s, kept across edits while their function's statement is reused and no lookup they made is stale. */
  protected functionFacts = new Map<FunctionInfo, Map<string, KeptFact>>();
  /** The stale keys of this file's versions, for the kept facts (`functionFacts`, the statements' `kept`) to check when asked. */
  protected staleLog: StaleLog = { seq: 0, allBefore: 0, batches: [] };
  protected factsGeneration = -1;
  /** The statements replaced since the version this one was made from, until the workspace takes them (`takeChangesSince`). */
  private changes: { readonly from: ModelImports; readonly removed: ChunkIndex[]; readonly added: ChunkIndex[] } | undefined;

  constructor(
    readonly path: string,
    readonly text: string,
    readonly root: SyntaxNode,
    readonly facts: WorkspaceFacts & { readonly generation: number; changedOutside(path: string): number },
    previous?: ModelImports,
  ) {
    this.index(previous);
    if (previous) this.carryFunctionFacts(previous);
  }

  /** The node's text, as a copy: a slice would keep this version of the file alive wherever it is kept (text.ts). */
  src(node: SyntaxNode): string {
    return flatCopy(this.text.slice(node.start, node.end));
  }

  /** Whether the node's text is `s`, compared in place (no copy of the text). */
  textIs(node: SyntaxNode, s: string): boolean {
    return node.end - node.start === s.length && this.text.startsWith(s, node.start);
  }

  line(row: number): string {
    return this.lines[row] ?? '';
  }

  get lineCount(): number {
    return this.lines.length;
  }

  protected get lines(): string[] {
    return (this.splitLines ??= this.text.split('\n'));
  }

  // ---------------------------------------------------------------- indexing

  /** Builds the index from each top-level statement's, reusing those of `previous` whose subtree was reused. */
  protected index(previous: ModelImports | undefined): void {
    const rootData = this.newScope();
    this.scopes.set(this.root, rootData);
    for (const node of this.root.children) {
      let chunk = previous?.chunks.get(node);
      if (chunk) this.adopt(chunk);
      else chunk = this.indexChunk(node);
      this.chunks.set(node, chunk);
      // Each list looked at only when it has something: most statements define, import and bind little, and a loop's iterator per empty list per statement added up.
      if (chunk.aliases.length) for (const [k, v] of chunk.aliases) this.aliases.set(k, v);
      if (chunk.functions.length) for (const f of chunk.functions) {
        this.functions.push(f);
        this.functionByNode.set(f.node, f);
        const same = this.functionsByName.get(f.name);
        if (same) same.push(f);
        else this.functionsByName.set(f.name, [f]);
      }
      if (chunk.classes.length) for (const c of chunk.classes) {
        this.classes.push(c);
        const same = this.classesByName.get(c.name);
        if (same) same.push(c);
        else this.classesByName.set(c.name, [c]);
      }
      if (chunk.scopes.size) for (const [k, v] of chunk.scopes) this.scopes.set(k, v);
      const top = chunk.root;
      if (top.calls.length) for (const c of top.calls) rootData.calls.push(c);
      if (top.bindings.size) {
        for (const [key, list] of top.bindings) {
          const all = rootData.bindings.get(key);
          if (all) all.push(...list);
          else rootData.bindings.set(key, [...list]);
        }
      }
      if (top.globals.size) for (const g of top.globals) rootData.globals.add(g);
      if (top.modeEvents.length) for (const e of top.modeEvents) rootData.modeEvents.push(e);
      if (top.updates.length) for (const u of top.updates) rootData.updates.push(u);
    }
    this.usesTorch = [...this.aliases.values()].some((q) => torchFamily.test(q)) || this.torchThroughStarImport();
  }

  /**
   * `from modeling.deeplab import *` and then `torch.nn.DataParallel(...)`: the project's module
   * re-exports `torch`, and the file uses it without importing it itself.
   */
  protected torchThroughStarImport(): boolean {
    if (!this.root.children.some((s) => s.type === 'import_from_statement' && s.children.some((c) => c.type === 'wildcard_import'))) return false;
    return this.calls.some((c) => {
      const callee = child(c, 'function');
      return !!callee && /^torch\./.test(this.src(callee));
    });
  }

  /** Takes over a previous model's statement index: its facts were computed in that model. */
  protected adopt(chunk: ChunkIndex): void {
    type Owned = { model: ModelImports };
    for (const f of chunk.functions) (f as unknown as Owned).model = this;
    for (const c of chunk.classes) (c as unknown as Owned).model = this;
    for (const d of chunk.scopes.values()) {
      // Provenance may read other statements; the flow graph (syntax only) stays.
      d.backward = undefined;
      d.backwardDeps = undefined;
      // Which calls are `torch.autograd.grad` depends on the imports, which may have changed.
      d.training = undefined;
    }
  }

  protected indexChunk(top: SyntaxNode): ChunkIndex {
    if (top.children.length === 0) return this.indexLeaf(top);
    const chunk: ChunkIndex = { node: top, aliases: [], functions: [], classes: [], calls: [], references: [], scopes: new Map(), root: this.newScope() };
    const dataOf = (scope: SyntaxNode): ScopeData => {
      if (scope === this.root) return chunk.root;
      let d = chunk.scopes.get(scope);
      if (!d) chunk.scopes.set(scope, (d = this.newScope()));
      return d;
    };
    const bind = (scope: SyntaxNode, target: SyntaxNode, value: SyntaxNode | undefined, at: SyntaxNode, unpacked: boolean): void => {
      const key = this.src(target);
      const data = dataOf(scope);
      const list = data.bindings.get(key) ?? [];
      list.push({ target, value, at, unpacked });
      data.bindings.set(key, list);
    };
    const classStack: { node: SyntaxNode; info: ClassInfo }[] = [];
    // Nodes inside an ERROR are tree-sitter's best guess (a `def f(:` can come out as a call
    // `f(...)`); they are not linted and not indexed.
    let broken: Set<SyntaxNode> | undefined;
    // `valueReferenceNames`' keyword-argument values and attributes, gathered in the same walk (ERROR subtrees too).
    const valueNodes: SyntaxNode[] = [];
    // The statement and its descendants in document order (as `descendants`), walked with a
    // stack instead of listing them first: no array of every node of the file per version.
    const stack: SyntaxNode[] = [top];
    while (stack.length > 0) {
      const node = stack.pop() as SyntaxNode;
      const kids = node.children;
      for (let j = kids.length - 1; j >= 0; j--) stack.push(kids[j]);
      const parent = node.parent as SyntaxNode;
      if (node !== top && (node.type === 'attribute' || (node.type === 'identifier' && node.field === 'value' && parent.type === 'keyword_argument'))) valueNodes.push(node);
      if (node.type === 'ERROR' || broken?.has(parent)) {
        node.scope = undefined;
        (broken ??= new Set()).add(node);
        continue;
      }
      const scope = parent.type === 'function_definition' ? parent : (parent.scope ?? this.root);
      // The module's scope is left unset: a reused statement moves to a new root node.
      node.scope = scope === this.root ? undefined : scope;
      switch (node.type) {
        case 'import_statement':
        case 'import_from_statement':
          this.addImport(node, chunk.aliases);
          break;
        case 'function_definition': {
          dataOf(node);
          while (classStack.length && !contains(classStack[classStack.length - 1].node, node)) classStack.pop();
          const enclosingClass = classStack.length && this.isDirectMethod(node, classStack[classStack.length - 1].node) ? classStack[classStack.length - 1].info : undefined;
          const info = this.functionInfo(node, enclosingClass);
          chunk.functions.push(info);
          if (enclosingClass) enclosingClass.methods.set(info.name, info);
          const data = dataOf(node);
          for (const p of info.params) data.params.add(p);
          break;
        }
        case 'class_definition': {
          const nameNode = child(node, 'name');
          const superclasses = child(node, 'superclasses');
          const info: ClassInfo = { node, name: nameNode ? this.src(nameNode) : '', bases: superclasses ? namedChildren(superclasses).filter((b) => b.type !== 'keyword_argument') : [], methods: new Map(), model: this as ModelImports as FunctionInfo['model'] };
          chunk.classes.push(info);
          while (classStack.length && !contains(classStack[classStack.length - 1].node, node)) classStack.pop();
          classStack.push({ node, info });
          break;
        }
        case 'call': {
          chunk.calls.push(node);
          dataOf(scope).calls.push(node);
          const callee = child(node, 'function');
          if (callee?.type === 'attribute') {
            const method = child(callee, 'attribute');
            const receiver = child(callee, 'object');
            if (method && receiver) {
              const name = this.src(method);
              if ((name === 'eval' || name === 'train') && moduleMethodArgsFit(name, node)) {
                const args = this.positionalArgs(node);
                const inference = name === 'eval' || (args.length === 1 && this.src(args[0]) === 'False');
                dataOf(scope).modeEvents.push({ at: node, receiver: this.src(receiver), inference });
              }
            }
          }
          break;
        }
        case 'identifier':
          if (node.field !== 'function' && parent.type !== 'attribute' && parent.type !== 'function_definition' && parent.type !== 'keyword_argument') chunk.references.push(node);
          break;
        case 'assignment':
        case 'augmented_assignment': {
          const left = child(node, 'left');
          const right = child(node, 'right');
          const unpacked = left?.type === 'pattern_list' || left?.type === 'tuple_pattern' || left?.type === 'list_pattern';
          if (left && node.type === 'assignment') for (const t of this.targets(left)) bind(scope, t, right, node, unpacked);
          else if (node.type === 'augmented_assignment') dataOf(scope).updates.push(node);
          // `self.training = False`: the module's own mode switched by hand, as eval() / train() would (MorvanZhou's A3C).
          if (node.type === 'assignment' && left?.type === 'attribute' && right && (right.type === 'false' || right.type === 'true')) {
            const receiver = child(left, 'object');
            if (receiver && this.src(child(left, 'attribute') ?? left) === 'training') dataOf(scope).modeEvents.push({ at: node, receiver: this.src(receiver), inference: right.type === 'false' });
          }
          break;
        }
        case 'for_statement':
        case 'for_in_clause': {
          const left = child(node, 'left');
          if (left) for (const t of this.targets(left)) bind(scope, t, undefined, node, false);
          break;
        }
        case 'with_item': {
          const value = child(node, 'value');
          if (value?.type === 'as_pattern') {
            const expr = namedChildren(value)[0];
            const alias = child(value, 'alias');
            if (alias) for (const t of this.targets(alias)) bind(scope, t, expr, node, false);
          }
          break;
        }
        case 'named_expression': {
          const name = child(node, 'name');
          if (name) bind(scope, name, child(node, 'value'), node, false);
          break;
        }
        case 'global_statement':
        case 'nonlocal_statement':
          for (const id of namedChildren(node)) dataOf(scope).globals.add(this.src(id));
          break;
      }
    }
    chunk.valueRefs = this.valueRefsOf(chunk, valueNodes);
    return chunk;
  }

  /**
   * `indexChunk` of a statement that is one token (error debris under the module after an
   * unclosed bracket: thousands of bare names and brackets; `pass`; a lone name): it defines,
   * calls and binds nothing, so its lists are shared empty ones; a name is a reference.
   */
  private indexLeaf(top: SyntaxNode): ChunkIndex {
    top.scope = undefined;
    const chunk: ChunkIndex = { node: top, aliases: none, functions: none, classes: none, calls: none, references: top.type === 'identifier' ? [top] : none, scopes: noScopes, root: emptyScope };
    chunk.valueRefs = this.valueRefsOf(chunk, none);
    return chunk;
  }

  /**
   * The keys a top-level statement answers lookups for (see deps.ts): the functions, classes
   * and call sites it defines by name, the bindings it makes by key, the attribute names it
   * reads, and `root*` when it adds anything to the module's own scope. Other statements'
   * cached findings that looked any of these up are stale once it changes.
   */
  exportsOf(top: SyntaxNode): Set<string> {
    const chunk = this.chunks.get(top);
    if (!chunk) return new Set(['*']);
    if (chunk.exports) return chunk.exports;
    const out = new Set<string>();
    for (const f of chunk.functions) out.add(`fn:${f.name}`);
    for (const c of chunk.classes) {
      out.add(`cls:${c.name}`);
      for (const m of c.methods.keys()) out.add(`method:${m}`);
    }
    for (const call of chunk.calls) {
      const callee = this.callee(call);
      if (callee && (callee.type === 'identifier' || callee.type === 'attribute')) out.add(`site:${lastName(this.src(callee))}`);
    }
    for (const r of this.valueReferenceNamesIn(chunk)) out.add(`ref:${r.name}`);
    for (const n of [top, ...descendants(top)]) {
      if (n.type === 'attribute') {
        const a = child(n, 'attribute');
        if (a) out.add(`attr:${this.src(a)}`);
      }
    }
    for (const data of [chunk.root, ...chunk.scopes.values()]) {
      for (const [key, list] of data.bindings) {
        out.add(`any:${key}`);
        out.add(`ctor:${key}`);
        if (list.some((b) => this.setsAttributeToNone(b))) out.add(`none:${key}`);
      }
    }
    for (const key of chunk.root.bindings.keys()) out.add(`root:${key}`);
    for (const key of chunk.root.globals) out.add(`root:${key}`);
    if (chunk.root.calls.length || chunk.root.bindings.size || chunk.root.globals.size || chunk.root.modeEvents.length || chunk.root.updates.length) out.add('root*');
    chunk.exports = out;
    return out;
  }

  /**
   * For a key whose lookup is compared by value: what this top-level statement contributes to
   * the answer, as a string; two versions of a statement in the same place with the same
   * signature give every lookup of the key the same answer. Undefined for other keys.
   * The module's scope comes first in lookups that walk all scopes, then the functions' in
   * document order; a statement's share of each is compared separately.
   */
  signatureOf(top: SyntaxNode, key: string): string | undefined {
    const chunk = this.chunks.get(top);
    if (!chunk) return undefined;
    const functions = [...chunk.scopes.values()];
    if (key.startsWith('ctor:')) {
      const text = key.slice(5);
      return JSON.stringify([this.constructedIn([chunk.root], text) ?? null, this.constructedIn(functions, text) ?? null]);
    }
    if (key.startsWith('any:')) {
      const text = key.slice(4);
      const show = (b: Binding | undefined): string | null => (b ? `${b.target.type} ${b.unpacked} ${b.value ? this.src(b.value) : ''}` : null);
      return JSON.stringify([show(lastBindingIn([chunk.root], text)), show(lastBindingIn(functions, text))]);
    }
    if (key.startsWith('fn:') || key.startsWith('method:')) return this.methodSignature(chunk, key.slice(key.indexOf(':') + 1));
    return undefined;
  }

  /**
   * `signatureOf` for `fn:<name>` and `method:<name>` of a top-level class: the text of each of
   * its methods named so, each with the class's header (decorators, name, bases). A lookup by
   * name gives the methods, and what is read of a method without a lookup key of its own is its
   * own text and its class's header: what the analysis reads of the other methods of the class
   * records `cls:<class>` (`attributeBinding`, `meterUsesAsTensor`), which is compared whole.
   * So an edit in one method leaves the other methods' keys clean (an early cutoff). Undefined
   * (compared whole) when a function of that name is not a direct method of the statement's
   * class: a module-level function, a nested one, a method of a nested class.
   */
  private methodSignature(chunk: ChunkIndex, name: string): string | undefined {
    const top = chunk.node;
    const cls = top.type === 'decorated_definition' ? top.children.find((c) => c.type === 'class_definition') : top;
    if (cls?.type !== 'class_definition') return undefined;
    const body = child(cls, 'body');
    if (!body) return undefined;
    const header = this.text.slice(top.start, body.start);
    const parts: string[] = [];
    for (const f of chunk.functions) {
      if (f.name !== name) continue;
      if (f.cls?.node !== cls || !this.isDirectMethod(f.node, cls)) return undefined;
      const def = f.node.parent?.type === 'decorated_definition' ? f.node.parent : f.node;
      parts.push(this.text.slice(def.start, def.end));
    }
    return JSON.stringify([header, parts]);
  }

  /** Every call in the file, in document order (gathered from the statements on first use). */
  get calls(): readonly SyntaxNode[] {
    this.allCalls ??= [...this.chunks.values()].flatMap((c) => c.calls);
    return this.allCalls;
  }

  /** All nodes of type `identifier` that are not call targets, for references to functions. */
  get references(): readonly SyntaxNode[] {
    this.allReferences ??= [...this.chunks.values()].flatMap((c) => c.references);
    return this.allReferences;
  }

  /** Calls by the last name of their callee (`f(...)`, `x.f(...)`), for the workspace's call-site index. */
  *callSiteNames(): Generator<{ name: string; call: SyntaxNode }> {
    for (const chunk of this.chunks.values()) yield* this.callSiteNamesIn(chunk);
  }

  /** `callSiteNames` of one statement, computed once per statement. */
  callSiteNamesIn(chunk: ChunkIndex): readonly { name: string; call: SyntaxNode }[] {
    if (!chunk.sites) {
      chunk.sites = chunk.calls.length ? [] : none;
      for (const call of chunk.calls) {
        const callee = this.callee(call);
        if (callee && (callee.type === 'identifier' || callee.type === 'attribute')) chunk.sites.push({ name: lastName(this.src(callee)), call });
      }
    }
    return chunk.sites;
  }

  /** The statements' indexes in document order: the workspace updates its index per statement. */
  chunkList(): ChunkIndex[] {
    return [...this.chunks.values()];
  }

  /**
   * The statements' indexes replaced since `previous`, when this version was made from it (else
   * undefined), for the workspace to update only their names; given once, and then forgotten:
   * the removed ones hold the previous version, which must not stay alive with this one.
   */
  takeChangesSince(previous: ModelImports): { readonly removed: readonly ChunkIndex[]; readonly added: readonly ChunkIndex[] } | undefined {
    const changes = this.changes;
    this.changes = undefined;
    return changes?.from === previous ? changes : undefined;
  }

  /**
   * Names used as values rather than called, for the workspace's reference index: an identifier
   * read (not bound, not imported, not a parameter) and `x.name` read without a call
   * (`callbacks=[evaluate]`, `hook(self.predict)`). A function named so may be called from anywhere.
   */
  *valueReferenceNames(): Generator<{ name: string; node: SyntaxNode }> {
    for (const chunk of this.chunks.values()) yield* this.valueReferenceNamesIn(chunk);
  }

  /** `valueReferenceNames` of one statement, computed once per statement. */
  valueReferenceNamesIn(chunk: ChunkIndex): readonly { name: string; node: SyntaxNode }[] {
    return (chunk.valueRefs ??= this.valueRefsOf(chunk, descendants(chunk.node).filter((n) => n.type === 'attribute' || (n.type === 'identifier' && n.field === 'value' && n.parent?.type === 'keyword_argument'))));
  }

  /** `valueReferenceNamesIn`, from the statement's references and its attributes and keyword-argument identifiers (`candidates`, in document order). */
  private valueRefsOf(chunk: ChunkIndex, candidates: readonly SyntaxNode[]): { name: string; node: SyntaxNode }[] {
    const out: { name: string; node: SyntaxNode }[] = [];
    for (const id of chunk.references) if (!isStored(id)) out.push({ name: this.src(id), node: id });
    for (const n of candidates) {
      // `forward_fn=predict`: the index of references leaves keyword arguments out.
      if (n.type === 'identifier') {
        out.push({ name: this.src(n), node: n });
        continue;
      }
      if (n.field === 'function' || n.parent?.type === 'attribute' || isStored(n)) continue;
      const a = child(n, 'attribute');
      if (a) out.push({ name: this.src(a), node: n });
    }
    return out;
  }

  /** The calls the rules look at: those of the focused statement, or all. */
  targetCalls(): readonly SyntaxNode[] {
    return this.focus ? (this.chunks.get(this.focus)?.calls ?? []) : this.calls;
  }

  /**
   * The nodes the rules look at, in document order: the focused statement and its descendants,
   * or the whole file's. An array: a generator made one result object per node of the file per
   * rule that asks (the most a whole-file lint allocated in one place).
   */
  targetNodes(skip?: (n: SyntaxNode) => boolean): SyntaxNode[] {
    if (!this.focus) return descendants(this.root, skip);
    const out = [this.focus];
    return skip?.(this.focus) ? out : descendants(this.focus, skip, out);
  }

  protected newScope(): ScopeData {
    return { calls: [], bindings: new Map(), globals: new Set(), params: new Set(), modeEvents: [], updates: [] };
  }

  protected isDirectMethod(fn: SyntaxNode, cls: SyntaxNode): boolean {
    // function_definition -> (decorated_definition) -> block -> class_definition
    let p = fn.parent;
    if (p?.type === 'decorated_definition') p = p.parent;
    return p?.type === 'block' && p.parent === cls;
  }

  protected functionInfo(node: SyntaxNode, cls: ClassInfo | undefined): FunctionInfo {
    const nameNode = child(node, 'name');
    const paramsNode = child(node, 'parameters');
    const params: string[] = [];
    for (const p of paramsNode ? namedChildren(paramsNode) : []) {
      const id = p.type === 'identifier' ? p : (child(p, 'name') ?? namedChildren(p).find((c) => c.type === 'identifier'));
      if (id?.type === 'identifier') params.push(this.src(id));
    }
    const decorators = node.parent?.type === 'decorated_definition' ? node.parent.children.filter((c) => c.type === 'decorator') : [];
    return { node, name: nameNode ? this.src(nameNode) : '', params, decorators: decorators.map((d) => namedChildren(d)[0]).filter((d): d is SyntaxNode => !!d), cls, body: child(node, 'body'), model: this as ModelImports as FunctionInfo['model'] };
  }

  protected addImport(node: SyntaxNode, aliases: [string, string][]): void {
    const set = (alias: string, q: string): void => {
      aliases.push([alias, q]);
    };
    if (node.type === 'import_statement') {
      for (const n of childrenOf(node, 'name')) {
        if (n.type === 'dotted_name') {
          const full = this.src(n);
          const head = full.split('.')[0];
          set(head, head);
        } else if (n.type === 'aliased_import') {
          const name = child(n, 'name');
          const alias = child(n, 'alias');
          if (name && alias) set(this.src(alias), this.src(name));
        }
      }
      return;
    }
    const moduleNode = child(node, 'module_name');
    if (!moduleNode) return;
    const module = this.src(moduleNode);
    for (const n of childrenOf(node, 'name')) {
      if (n.type === 'dotted_name') set(this.src(n), `${module}.${this.src(n)}`);
      else if (n.type === 'aliased_import') {
        const name = child(n, 'name');
        const alias = child(n, 'alias');
        if (name && alias) set(this.src(alias), `${module}.${this.src(name)}`);
      }
    }
  }

  /** Names bound by an assignment target (`a`, `a, (b, c)`, `self.x`, `*rest`). */
  protected targets(node: SyntaxNode): SyntaxNode[] {
    const n = unparen(node);
    switch (n.type) {
      case 'identifier':
      case 'attribute':
        return [n];
      case 'pattern_list':
      case 'tuple_pattern':
      case 'list_pattern':
      case 'tuple':
      case 'list':
      case 'as_pattern_target':
        return namedChildren(n).flatMap((c) => this.targets(c));
      case 'list_splat_pattern':
      case 'list_splat':
        return namedChildren(n).flatMap((c) => this.targets(c));
      default:
        return [];
    }
  }

  scopeOf(node: SyntaxNode): SyntaxNode {
    return node.scope ?? this.root;
  }

  /** The augmented assignments (`total += x`) directly in `scope`: they are no definitions (flow.ts). */
  updatesIn(scope: SyntaxNode): readonly SyntaxNode[] {
    return this.scopes.get(scope)?.updates ?? [];
  }

  protected scopeData(scope: SyntaxNode): ScopeData {
    let d = this.scopes.get(scope);
    if (!d) {
      d = this.newScope();
      this.scopes.set(scope, d);
    }
    return d;
  }

  /** This file's functions and methods named `name`, in document order (`functions.filter(f => f.name === name)`). */
  functionsHere(name: string): readonly FunctionInfo[] {
    return this.functionsByName.get(name) ?? [];
  }

  /** Does this file define a class named `name`? */
  definesClass(name: string): boolean {
    return this.classesByName.has(name);
  }

  /** This file's classes named `name`, in document order (`classes.filter(c => c.name === name)`). */
  classesHere(name: string): readonly ClassInfo[] {
    return this.classesByName.get(name) ?? [];
  }

  functionOf(node: SyntaxNode): FunctionInfo | undefined {
    return this.functionByNode.get(this.scopeOf(node));
  }

  /** Takes over the previous version's function facts that are still valid (see `functionFact`). */
  protected carryFunctionFacts(previous: ModelImports): void {
    const stale = new Set<string>();
    const removed: ChunkIndex[] = [];
    const added: ChunkIndex[] = [];
    for (const [node, chunk] of previous.chunks) {
      if (this.chunks.get(node) === chunk) continue;
      removed.push(chunk);
      for (const k of previous.exportsOf(node)) stale.add(k);
    }
    for (const [node, chunk] of this.chunks) {
      if (previous.chunks.get(node) === chunk) continue;
      added.push(chunk);
      for (const k of this.exportsOf(node)) stale.add(k);
    }
    this.changes = { from: previous, removed, added };
    // Taken over in place: the previous version is not linted again. Facts whose lookups the
    // changed statements answer are found stale when asked (`staleLog`).
    for (const [fn, facts] of previous.functionFacts) if (this.functionByNode.get(fn.node) === fn) this.functionFacts.set(fn, facts);
    previous.functionFacts = new Map();
    this.staleLog = previous.staleLog;
    logStale(this.staleLog, [...stale]);
  }

  // Defined by the later layers (scopes.ts, models.ts), used by the index.
  abstract positionalArgs(call: SyntaxNode): SyntaxNode[];
  abstract callee(call: SyntaxNode): SyntaxNode | undefined;
  protected abstract setsAttributeToNone(b: Binding): boolean;
  protected abstract constructedIn(scopes: Iterable<ScopeData>, text: string): string | undefined;
}

/** The lists of a statement that has none (`indexLeaf`): one shared frozen array, so that a push would throw. */
const none = Object.freeze([]) as unknown as never[];

/** A map or set shared by every one-token statement's index (`indexLeaf`), which nothing may add to. */
class NoScopes extends Map<SyntaxNode, ScopeData> {
  override set(): this {
    throw new Error('the shared empty scope map of a one-token statement cannot take a scope');
  }
}
class NoBindings extends Map<string, Binding[]> {
  override set(): this {
    throw new Error('the shared empty scope of a one-token statement cannot take a binding');
  }
}
class NoNames extends Set<string> {
  override add(): this {
    throw new Error('the shared empty scope of a one-token statement cannot take a name');
  }
}
const noScopes = new NoScopes();
/** The module-scope share of a one-token statement (`indexLeaf`): frozen, with empty lists that refuse additions. */
const emptyScope: ScopeData = Object.freeze({ calls: none, bindings: new NoBindings(), globals: new NoNames(), params: new NoNames(), modeEvents: none, updates: none });

/** Parents under which a node is bound, imported or declared, not read (`valueRefsOf`). */
const storingParents = new Set(['import_statement', 'import_from_statement', 'future_import_statement', 'parameters', 'lambda_parameters', 'global_statement', 'nonlocal_statement', 'as_pattern_target', 'aliased_import']);
/** Parents through which a target is looked for further up (`a, (b, c) = …`, `def f(x=…)`). */
const targetParents = new Set(['pattern_list', 'tuple_pattern', 'list_pattern', 'tuple', 'list', 'list_splat_pattern', 'parenthesized_expression', 'dotted_name', 'default_parameter', 'typed_parameter', 'typed_default_parameter']);

/** Whether the node is a name being bound (an assignment or loop target, an import, a parameter…) rather than read. */
function isStored(n: SyntaxNode): boolean {
  for (let a: SyntaxNode = n, p = n.parent; p; a = p, p = p.parent) {
    const type = p.type;
    if ((type === 'assignment' || type === 'augmented_assignment' || type === 'for_statement' || type === 'for_in_clause') && a.field === 'left') return true;
    if (storingParents.has(type)) return true;
    if (type === 'as_pattern' && a.field === 'alias') return true;
    if (!targetParents.has(type)) return false;
  }
  return false;
}

/** Notes a batch of stale keys in the log. */
export function logStale(log: StaleLog, keys: readonly string[]): void {
  if (keys.length === 0) return;
  log.seq++;
  log.batches.push({ seq: log.seq, keys });
  if (log.batches.length > staleLogLength) log.batches.splice(0, log.batches.length - staleLogLength);
}

/** Whether a kept fact is still free of stale lookups; marks it checked up to now when it is. */
export function checkStale(log: StaleLog, fact: KeptFact): boolean {
  if (fact.checked === log.seq) return true;
  if (fact.checked < log.allBefore) return false;
  const first = log.batches[0];
  if (!first || first.seq > fact.checked + 1) return false;
  for (let i = log.batches.length - 1; i >= 0 && log.batches[i].seq > fact.checked; i--) if (hasAny(fact.deps, log.batches[i].keys)) return false;
  fact.checked = log.seq;
  return true;
}

/**
 * What the rules know about one Python file: imports and aliases, functions and classes,
 * scopes with their assignments, grad guards, which callees are models, and which values
 * carry autograd history. Facts that need other files (a guard in a caller, a project's own
 * `@contextmanager` around `no_grad`, an `nn.Module` subclass defined elsewhere, a meter
 * whose `update` appends) come from the workspace through `WorkspaceFacts`.
 *
 * Everything here leans towards silence: when provenance or a guard is unknown, the answer
 * is the one that produces no finding.
 */
import { recorded, recordingNow, recordRoot, replay, track, unrecorded } from './deps';
import { ancestors, child, childrenOf, contains, descendants, loopTypes, namedChildren, unparen, type SyntaxNode } from './syntax';
import { flatCopy } from './text';

export interface FunctionInfo {
  readonly node: SyntaxNode;
  readonly name: string;
  readonly params: readonly string[];
  readonly decorators: readonly SyntaxNode[];
  readonly cls: ClassInfo | undefined;
  readonly body: SyntaxNode | undefined;
  readonly model: FileModel;
}

export interface ClassInfo {
  readonly node: SyntaxNode;
  readonly name: string;
  readonly bases: readonly SyntaxNode[];
  readonly methods: Map<string, FunctionInfo>;
  readonly model: FileModel;
  /** Which methods accumulate which parameters (the workspace's cache, valid for these imports). */
  accumulating?: { aliases: string; params: Map<string, readonly number[] | undefined> };
}

export interface CallSite {
  readonly model: FileModel;
  readonly call: SyntaxNode;
}

/** Cross-file facts, answered by the workspace index. */
export interface WorkspaceFacts {
  /** A function by that name wraps a grad guard (a `@contextmanager` or a decorator). */
  isGuardWrapper(name: string): boolean;
  /** A class by that name subclasses `nn.Module` (directly or through workspace classes). */
  isModuleClass(name: string): boolean;
  /** Indexes of the parameters (without `self`) that `className.method` accumulates into `self`. */
  accumulatingParams(className: string, method: string): readonly number[] | undefined;
  /** Whether any workspace class has a method by that name that accumulates a parameter. */
  isAccumulatingMethod(method: string): boolean;
  /** Calls of functions or methods named `name`, across the workspace. */
  callSites(name: string): readonly CallSite[];
  /** Functions and methods named `name`, across the workspace. */
  functionsNamed(name: string): readonly FunctionInfo[];
}

export type GradState = 'off' | 'on' | 'default';

interface Binding {
  /** The node being bound (identifier, attribute, or parameter name). */
  readonly target: SyntaxNode;
  /** The value, when the binding is `target = value` (or `with value as target`). */
  readonly value: SyntaxNode | undefined;
  /** `a, b = value`: the target holds a part of the value. */
  readonly unpacked: boolean;
  /** The binding statement or clause; its `order` places the binding in the document. */
  readonly at: SyntaxNode;
}

interface ModeEvent {
  readonly at: SyntaxNode;
  readonly receiver: string;
  readonly inference: boolean;
}

interface ScopeData {
  readonly calls: SyntaxNode[];
  readonly bindings: Map<string, Binding[]>;
  readonly globals: Set<string>;
  readonly params: Set<string>;
  /** `x.eval()` / `x.train()` calls in document order. */
  readonly modeEvents: ModeEvent[];
  /** Text keys (`loss`, `self.total`) of values that flow into `.backward()` or `autograd.grad`. */
  reachesBackward?: Set<string>;
  /** Names on which `.backward()` is called without arguments: scalars with history. */
  scalarBackward?: Set<string>;
  trainingSignal?: boolean;
  backwardDeps?: Set<string>;
}

/**
 * What one top-level statement of a file contributes to the file's index. A statement whose
 * syntax tree was reused after an edit (see `toSyntax`) keeps its index too.
 */
interface Contribution {
  readonly models: readonly string[];
  readonly losses: readonly string[];
  readonly remotes: readonly string[];
  /** The module-level grad switches this statement makes, in order. */
  readonly toggles: readonly ('off' | 'on')[];
  readonly deps: Set<string>;
  /** The file's imports when computed: names qualify through them. */
  readonly aliases: string;
}

interface ChunkIndex {
  readonly node: SyntaxNode;
  readonly aliases: [string, string][];
  readonly functions: FunctionInfo[];
  readonly classes: ClassInfo[];
  readonly calls: SyntaxNode[];
  readonly references: SyntaxNode[];
  /** Scopes of the functions defined in the statement. */
  readonly scopes: Map<SyntaxNode, ScopeData>;
  /** What the statement adds to the module's scope. */
  readonly root: ScopeData;
  exports?: Set<string>;
  contribution?: Contribution;
  sites?: { name: string; call: SyntaxNode }[];
}

const noGradNames = new Set(['torch.no_grad', 'torch.autograd.no_grad', 'torch.autograd.grad_mode.no_grad']);
const inferenceModeNames = new Set(['torch.inference_mode', 'torch.autograd.inference_mode', 'torch.autograd.grad_mode.inference_mode']);
const setGradNames = new Set(['torch.set_grad_enabled', 'torch.autograd.set_grad_enabled', 'torch.autograd.grad_mode.set_grad_enabled']);
const enableGradNames = new Set(['torch.enable_grad', 'torch.autograd.enable_grad', 'torch.autograd.grad_mode.enable_grad']);
const torchFamily = /^(torch|torchvision|torchaudio|torchtext|pytorch_lightning|lightning|transformers|timm|accelerate|torchmetrics)(\.|$)/;
const moduleBases = /^(torch\.nn\.(modules\.module\.)?Module|(pytorch_lightning|lightning|lightning\.pytorch)(\.core)?(\.module)?\.LightningModule|transformers\.(modeling_utils\.)?PreTrainedModel)$/;
/** Methods that only exist on `nn.Module`s: their receiver is a model. */
const moduleOnlyMethods = new Set(['eval', 'train', 'parameters', 'named_parameters', 'modules', 'named_modules', 'requires_grad_', 'buffers', 'named_buffers']);
/** Wrappers that return a model: `.to(device)`, `DDP(model)`, `torch.compile(model)`. */
const passThroughMethods = new Set(['to', 'cuda', 'cpu', 'half', 'float', 'double', 'bfloat16', 'eval', 'train', 'requires_grad_', 'share_memory']);
const modelNamePattern = /^(model|net|network|backbone|encoder|decoder|classifier|generator|discriminator|teacher|student|unet|vae|ema_model)$|_model$|^model_|_net$|^net_/i;
const lossNamePattern = /loss|criterion|^crit$/i;
/** Results that carry no autograd history whatever their input. */
const historyFreeMethods = new Set(['item', 'tolist', 'detach', 'detach_', 'numpy', 'argmax', 'argmin', 'argsort', 'eq', 'ne', 'lt', 'le', 'gt', 'ge', 'isnan', 'isinf', 'isfinite', 'size', 'dim', 'numel', 'nelement', 'long', 'int', 'bool', 'byte', 'backward', 'nonzero', 'count_nonzero', 'sign', 'round', 'floor', 'ceil', 'topk_indices', 'data_ptr', 'element_size', 'all', 'any', 'zero_']);
const historyFreeTorch = /^torch\.(argmax|argmin|argsort|eq|ne|lt|le|gt|ge|isnan|isinf|isfinite|zeros|ones|zeros_like|ones_like|empty|empty_like|full|full_like|tensor|as_tensor|from_numpy|arange|linspace|randn|rand|randint|randperm|no_grad|is_tensor|numel|count_nonzero|sign|round|floor|ceil|manual_seed)$/;
const historyFreeBuiltins = new Set(['float', 'int', 'bool', 'len', 'str', 'repr', 'round', 'isinstance', 'type', 'id', 'hash', 'print', 'format']);
const lossFunction = /^torch\.nn\.functional\.([a-z_]*loss|cross_entropy|nll_loss|kl_div|binary_cross_entropy(_with_logits)?|mse_loss|l1_loss|smooth_l1_loss|huber_loss|cosine_embedding_loss|margin_ranking_loss|triplet_margin_loss|ctc_loss|poisson_nll_loss|gaussian_nll_loss|hinge_embedding_loss|multi_margin_loss|soft_margin_loss|multilabel_soft_margin_loss|multilabel_margin_loss)$/;
const accumulateMutators = new Set(['append', 'add_', 'extend', 'insert']);
const backwardOwners = /(^|\.)(accelerator|fabric|engine|model_engine|trainer)$/;
const optimizerLike = /optim|(^|\.)opt$|scaler/i;

/** The last name of a dotted expression: `self.model` -> `model`. */
/**
 * The calls that can reach `fn`: any `x.name(...)`, and plain `name(...)` only in its own
 * file or in files that import that name (two scripts may each define `evaluate`).
 */
export function callSitesOf(fn: FunctionInfo): CallSite[] {
  return fn.model.facts.callSites(fn.name).filter((s) => {
    if (s.model === fn.model) return !contains(fn.node, s.call) || s.call.start < (fn.body?.start ?? fn.node.start);
    if (s.model.callee(s.call)?.type === 'attribute') return true;
    return s.model.aliases.has(fn.name);
  });
}

/** The last binding of `key` in the first of `scopes` that has one. */
function lastBindingIn(scopes: Iterable<ScopeData>, key: string): Binding | undefined {
  for (const data of scopes) {
    const list = data.bindings.get(key);
    if (list?.length) return list[list.length - 1];
  }
  return undefined;
}

/** Whether `set` holds any of `keys`. */
export function hasAny(set: ReadonlySet<string>, keys: readonly string[]): boolean {
  if (set.size === 0) return false;
  for (const k of keys) if (set.has(k)) return true;
  return false;
}

export function lastName(text: string): string {
  const i = text.lastIndexOf('.');
  return i === -1 ? text : text.slice(i + 1);
}

export class FileModel {
  readonly aliases = new Map<string, string>();
  readonly functions: FunctionInfo[] = [];
  readonly classes: ClassInfo[] = [];
  private allCalls: SyntaxNode[] | undefined;
  private allReferences: SyntaxNode[] | undefined;
  readonly functionByNode = new Map<SyntaxNode, FunctionInfo>();
  /** True when the file imports torch or a library built on it: the rules only run then. */
  usesTorch = false;
  /**
   * The top-level statement the rules look at (the incremental linter analyses one at a time);
   * undefined: the whole file.
   */
  focus: SyntaxNode | undefined;
  private readonly scopes = new Map<SyntaxNode, ScopeData>();
  private readonly chunks = new Map<SyntaxNode, ChunkIndex>();
  private readonly lines: string[];
  private factsCache = new Map<string, { v: unknown; deps: Set<string> | undefined }>();
  /** `functionFact`s, kept across edits while their function's statement is reused and no lookup they made is stale. */
  private functionFacts = new Map<FunctionInfo, Map<string, { v: unknown; deps: Set<string>; aliases: string; outside: number }>>();
  private factsGeneration = -1;

  constructor(
    readonly path: string,
    readonly text: string,
    readonly root: SyntaxNode,
    readonly facts: WorkspaceFacts & { readonly generation: number; changedOutside(path: string): number },
    previous?: FileModel,
  ) {
    this.lines = text.split('\n');
    this.index(previous);
    if (previous) this.carryFunctionFacts(previous);
  }

  /** The node's text, as a copy: a slice would keep this version of the file alive wherever it is kept (text.ts). */
  src(node: SyntaxNode): string {
    return flatCopy(this.text.slice(node.start, node.end));
  }

  line(row: number): string {
    return this.lines[row] ?? '';
  }

  get lineCount(): number {
    return this.lines.length;
  }

  // ---------------------------------------------------------------- indexing

  /** Builds the index from each top-level statement's, reusing those of `previous` whose subtree was reused. */
  private index(previous: FileModel | undefined): void {
    const rootData = this.newScope();
    this.scopes.set(this.root, rootData);
    for (const node of this.root.children) {
      let chunk = previous?.chunks.get(node);
      if (chunk) this.adopt(chunk);
      else chunk = this.indexChunk(node);
      this.chunks.set(node, chunk);
      for (const [k, v] of chunk.aliases) this.aliases.set(k, v);
      for (const f of chunk.functions) {
        this.functions.push(f);
        this.functionByNode.set(f.node, f);
      }
      for (const c of chunk.classes) this.classes.push(c);
      for (const [k, v] of chunk.scopes) this.scopes.set(k, v);
      for (const c of chunk.root.calls) rootData.calls.push(c);
      for (const [key, list] of chunk.root.bindings) {
        const all = rootData.bindings.get(key);
        if (all) all.push(...list);
        else rootData.bindings.set(key, [...list]);
      }
      for (const g of chunk.root.globals) rootData.globals.add(g);
      for (const e of chunk.root.modeEvents) rootData.modeEvents.push(e);
    }
    this.usesTorch = [...this.aliases.values()].some((q) => torchFamily.test(q));
  }

  /** Takes over a previous model's statement index: its facts were computed in that model. */
  private adopt(chunk: ChunkIndex): void {
    type Owned = { model: FileModel };
    for (const f of chunk.functions) (f as unknown as Owned).model = this;
    for (const c of chunk.classes) (c as unknown as Owned).model = this;
    for (const d of chunk.scopes.values()) {
      d.reachesBackward = undefined;
      d.scalarBackward = undefined;
      d.trainingSignal = undefined;
      d.backwardDeps = undefined;
    }
  }

  private indexChunk(top: SyntaxNode): ChunkIndex {
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
    const broken = new Set<SyntaxNode>();
    const walk = function* (): Generator<SyntaxNode> {
      yield top;
      yield* descendants(top);
    };
    for (const node of walk()) {
      const parent = node.parent as SyntaxNode;
      node.scope = undefined;
      if (node.type === 'ERROR' || broken.has(parent)) {
        broken.add(node);
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
          const info: ClassInfo = { node, name: nameNode ? this.src(nameNode) : '', bases: superclasses ? namedChildren(superclasses).filter((b) => b.type !== 'keyword_argument') : [], methods: new Map(), model: this };
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
              if (name === 'eval' || name === 'train') {
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
    if (chunk.root.calls.length || chunk.root.bindings.size || chunk.root.globals.size || chunk.root.modeEvents.length) out.add('root*');
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
    return undefined;
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
    for (const chunk of this.chunks.values()) {
      if (!chunk.sites) {
        chunk.sites = [];
        for (const call of chunk.calls) {
          const callee = this.callee(call);
          if (callee && (callee.type === 'identifier' || callee.type === 'attribute')) chunk.sites.push({ name: lastName(this.src(callee)), call });
        }
      }
      yield* chunk.sites;
    }
  }

  /** The calls the rules look at: those of the focused statement, or all. */
  targetCalls(): readonly SyntaxNode[] {
    return this.focus ? (this.chunks.get(this.focus)?.calls ?? []) : this.calls;
  }

  /** The nodes the rules look at, in document order: the focused statement and its descendants, or the whole file's. */
  *targetNodes(skip?: (n: SyntaxNode) => boolean): Generator<SyntaxNode> {
    if (!this.focus) {
      yield* descendants(this.root, skip);
      return;
    }
    yield this.focus;
    if (!skip?.(this.focus)) yield* descendants(this.focus, skip);
  }

  private newScope(): ScopeData {
    return { calls: [], bindings: new Map(), globals: new Set(), params: new Set(), modeEvents: [] };
  }

  private isDirectMethod(fn: SyntaxNode, cls: SyntaxNode): boolean {
    // function_definition -> (decorated_definition) -> block -> class_definition
    let p = fn.parent;
    if (p?.type === 'decorated_definition') p = p.parent;
    return p?.type === 'block' && p.parent === cls;
  }

  private functionInfo(node: SyntaxNode, cls: ClassInfo | undefined): FunctionInfo {
    const nameNode = child(node, 'name');
    const paramsNode = child(node, 'parameters');
    const params: string[] = [];
    for (const p of paramsNode ? namedChildren(paramsNode) : []) {
      const id = p.type === 'identifier' ? p : (child(p, 'name') ?? namedChildren(p).find((c) => c.type === 'identifier'));
      if (id?.type === 'identifier') params.push(this.src(id));
    }
    const decorators = node.parent?.type === 'decorated_definition' ? node.parent.children.filter((c) => c.type === 'decorator') : [];
    return { node, name: nameNode ? this.src(nameNode) : '', params, decorators: decorators.map((d) => namedChildren(d)[0]).filter((d): d is SyntaxNode => !!d), cls, body: child(node, 'body'), model: this };
  }

  private addImport(node: SyntaxNode, aliases: [string, string][]): void {
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
  private targets(node: SyntaxNode): SyntaxNode[] {
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

  private scopeData(scope: SyntaxNode): ScopeData {
    let d = this.scopes.get(scope);
    if (!d) {
      d = this.newScope();
      this.scopes.set(scope, d);
    }
    return d;
  }

  functionOf(node: SyntaxNode): FunctionInfo | undefined {
    return this.functionByNode.get(this.scopeOf(node));
  }

  // ---------------------------------------------------------------- names

  /** The dotted name an expression refers to, with import aliases expanded. */
  qualify(node: SyntaxNode | undefined): string | undefined {
    if (!node) return undefined;
    const n = unparen(node);
    if (n.type === 'identifier') {
      const name = this.src(n);
      return this.aliases.get(name) ?? name;
    }
    if (n.type === 'attribute') {
      const object = child(n, 'object');
      const attr = child(n, 'attribute');
      const base = this.qualify(object);
      return base && attr ? `${base}.${this.src(attr)}` : undefined;
    }
    return undefined;
  }

  positionalArgs(call: SyntaxNode): SyntaxNode[] {
    const args = child(call, 'arguments');
    if (!args || args.type !== 'argument_list') return [];
    return namedChildren(args).filter((a) => a.type !== 'keyword_argument' && a.type !== 'dictionary_splat' && a.type !== 'list_splat');
  }

  keywordArg(call: SyntaxNode, name: string): SyntaxNode | undefined {
    const args = child(call, 'arguments');
    if (!args) return undefined;
    for (const a of namedChildren(args)) {
      if (a.type === 'keyword_argument') {
        const k = child(a, 'name');
        if (k && this.src(k) === name) return child(a, 'value');
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

  /** The closest binding of `key` visible at `at`: the nearest one before it in its scope, else any, else the module's. */
  binding(key: string, at: SyntaxNode): Binding | undefined {
    const scope = this.scopeOf(at);
    if (scope === this.root) track(`root:${key}`);
    const own = this.scopeData(scope).bindings.get(key);
    const pick = (list: Binding[] | undefined): Binding | undefined => {
      if (!list?.length) return undefined;
      let best: Binding | undefined;
      for (const b of list) if (b.at.order < at.order && (!best || b.at.order > best.at.order)) best = b;
      return best ?? list[list.length - 1];
    };
    const found = pick(own);
    if (found || scope === this.root || this.scopeData(scope).params.has(key)) return found;
    track(`root:${key}`);
    return pick(this.scopeData(this.root).bindings.get(key));
  }

  /**
   * A binding of `key` in any scope of the file (for `self.meter`, bound in `__init__`): the
   * last one of the first scope that has one. Callers may read the binding's text, not its
   * context: after an edit, a statement answers `any:<key>` only if its own answer's text
   * changed (`signatureOf`).
   */
  bindingAnywhere(key: string): Binding | undefined {
    track(`any:${key}`);
    return lastBindingIn(this.scopes.values(), key);
  }

  /** `self.x = None`: the binding `attributeSetToNone` looks for, and that makes a statement answer `none:<key>`. */
  private setsAttributeToNone(b: Binding): boolean {
    return b.target.type === 'attribute' && b.value !== undefined && this.src(b.value) === 'None';
  }

  /** Is the attribute `key` (`self.hidden`) assigned `None` anywhere in the file? */
  attributeSetToNone(key: string): boolean {
    // Only a statement that sets an attribute to None answers this (`exportsOf`).
    track(`none:${key}`);
    for (const data of this.scopes.values()) {
      if ((data.bindings.get(key) ?? []).some((b) => this.setsAttributeToNone(b))) return true;
    }
    return false;
  }

  bindingsIn(scope: SyntaxNode, key: string): readonly Binding[] {
    if (scope === this.root) track(`root:${key}`);
    return this.scopeData(scope).bindings.get(key) ?? [];
  }

  isParam(scope: SyntaxNode, name: string): boolean {
    if (scope === this.root) track(`root:${name}`);
    return this.scopeData(scope).params.has(name);
  }

  isGlobalIn(scope: SyntaxNode, name: string): boolean {
    if (scope === this.root) track(`root:${name}`);
    return this.scopeData(scope).globals.has(name);
  }

  callsIn(scope: SyntaxNode): readonly SyntaxNode[] {
    if (scope === this.root) track('root*');
    return this.scopeData(scope).calls;
  }

  // ---------------------------------------------------------------- facts cache

  private memo<T>(key: string, compute: () => T): T {
    if (this.factsGeneration !== this.facts.generation) {
      this.factsCache = new Map();
      this.factsGeneration = this.facts.generation;
    }
    const hit = this.factsCache.get(key);
    // A fact computed outside any recording has no keys to replay: compute it again inside one.
    if (hit && (hit.deps || !recordingNow())) {
      replay(hit.deps);
      return hit.v as T;
    }
    // A cycle sees the in-progress answer (undefined) and stops.
    this.factsCache.set(key, { v: undefined, deps: new Set() });
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
    const aliases = this.aliasSignature();
    const outside = this.facts.changedOutside(this.path);
    let facts = this.functionFacts.get(fn);
    const hit = facts?.get(key);
    if (hit && hit.aliases === aliases && hit.outside === outside) {
      replay(hit.deps);
      return hit.v as T;
    }
    const r = recorded(compute);
    if (!facts) this.functionFacts.set(fn, (facts = new Map<string, { v: unknown; deps: Set<string>; aliases: string; outside: number }>()));
    facts.set(key, { v: r.value, deps: r.deps ?? new Set(), aliases, outside });
    return r.value;
  }

  /** Takes over the previous version's function facts that are still valid (see `functionFact`). */
  private carryFunctionFacts(previous: FileModel): void {
    const stale = new Set<string>();
    for (const [node, chunk] of previous.chunks) {
      if (this.chunks.get(node) !== chunk) for (const k of previous.exportsOf(node)) stale.add(k);
    }
    for (const [node, chunk] of this.chunks) {
      if (previous.chunks.get(node) !== chunk) for (const k of this.exportsOf(node)) stale.add(k);
    }
    const keys = [...stale];
    for (const [fn, facts] of previous.functionFacts) {
      if (this.functionByNode.get(fn.node) !== fn) continue;
      const kept = new Map([...facts].filter(([, f]) => !hasAny(f.deps, keys)));
      if (kept.size) this.functionFacts.set(fn, kept);
    }
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
  private shared<T>(key: string, compute: () => T): T {
    if (this.factsGeneration !== this.facts.generation) {
      this.factsCache = new Map();
      this.factsGeneration = this.facts.generation;
    }
    const hit = this.factsCache.get(`shared:${key}`);
    if (hit) return hit.v as T;
    this.factsCache.set(`shared:${key}`, { v: undefined, deps: undefined });
    const v = unrecorded(compute);
    this.factsCache.set(`shared:${key}`, { v, deps: undefined });
    return v;
  }

  /**
   * The file-wide facts every statement's findings may depend on, as one comparable string.
   * The names bound to models, losses and RemoteModules are not in it: a lookup of one records
   * `mt:<name>`, and the linter compares the sets (`moduleNames`) name by name.
   */
  sharedFacts(): string {
    const switches = this.togglesIn(this.root);
    let toggles: string[] = [];
    if (switches.length) {
      const tops = new Map(this.root.children.map((c, i) => [c.start, i]));
      toggles = switches.map((t) => `${tops.get(t.start) ?? -1}:${t.state}`);
    }
    return `${this.aliasSignature()}|${JSON.stringify([this.usesTorch, toggles])}`;
  }

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
      // `torch.no_grad()(fn)` and the like: the callee itself is a guard.
      if (callee.type === 'call') return this.classifyGuard(callee, depth + 1);
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
        const items = clause ? clause.children.filter((c) => c.type === 'with_item') : [];
        for (let i = items.length - 1; i >= 0; i--) {
          const value = child(items[i], 'value');
          const expr = value?.type === 'as_pattern' ? namedChildren(value)[0] : value;
          const g = expr && this.classifyGuard(expr);
          if (g) return g;
        }
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
          if (info.cls && /^(validation_step|test_step|predict_step)$/.test(info.name)) return 'off';
        }
        return 'default';
      }
      if (a.type === 'class_definition') return 'default';
      prev = a;
    }
    return 'default';
  }

  /** A statement before `stmt` in `block` that switches grad mode: `set_grad_enabled(False)`, `stack.enter_context(no_grad())`. */
  private toggleBefore(block: SyntaxNode, stmt: SyntaxNode): 'off' | 'on' | undefined {
    let found: 'off' | 'on' | undefined;
    for (const t of this.togglesIn(block)) {
      if (t.start >= stmt.start) break;
      found = t.state;
    }
    return found;
  }

  /** The grad-mode switches among a block's statements, in order, computed once per block. */
  private togglesIn(block: SyntaxNode): { start: number; state: 'off' | 'on' }[] {
    // The module's switches are shared by every statement: compared by value (sharedFacts), not recorded.
    if (block === this.root) {
      return this.shared('toggles', () => {
        const aliases = this.aliasSignature();
        const out: { start: number; state: 'off' | 'on' }[] = [];
        for (const top of this.root.children) for (const state of this.contribution(top, aliases).toggles) out.push({ start: top.start, state });
        return out;
      });
    }
    return this.memo(`toggles:${block.order}`, () => this.togglesOf(block.children));
  }

  private togglesOfStatement(top: SyntaxNode): ('off' | 'on')[] {
    return this.togglesOf([top]).map((t) => t.state);
  }

  private togglesOf(statements: readonly SyntaxNode[]): { start: number; state: 'off' | 'on' }[] {
    {
      const out: { start: number; state: 'off' | 'on' }[] = [];
      for (const s of statements) {
        if (s.type === 'function_definition' || s.type === 'class_definition' || s.type === 'decorated_definition' || !s.named) continue;
        const calls = s.type === 'expression_statement' ? [unparen(namedChildren(s)[0] ?? s)] : [...descendants(s, (n) => n.type === 'function_definition')];
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

  /** This function is a `@contextmanager` that yields under a guard, or a decorator that calls its argument under one. */
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
      return false;
    });
  }

  /** Like gradState, but stops at `outer` (inclusive of functions nested in it). */
  private gradStateWithin(node: SyntaxNode, outer: SyntaxNode): GradState {
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

  // ---------------------------------------------------------------- models

  /** Is this class an nn.Module (directly or through workspace classes)? */
  isModuleClassInfo(cls: ClassInfo): boolean {
    return this.memo(`moduleClass:${cls.node.order}`, () => cls.bases.some((b) => {
      const q = this.qualify(b) ?? '';
      if (moduleBases.test(q)) return true;
      if (torchFamily.test(q)) return /\.(Module|LightningModule|PreTrainedModel|[A-Z]\w*Model)$/.test(q) && !/Dataset|DataLoader|Sampler|Optimizer/.test(q);
      return this.facts.isModuleClass(lastName(q));
    }));
  }

  /** The names bound to models, losses and RemoteModules in this version of the file (not recorded). */
  moduleNames(): { readonly models: ReadonlySet<string>; readonly losses: ReadonlySet<string>; readonly remotes: ReadonlySet<string> } {
    return this.moduleTexts;
  }

  /** Text keys (`model`, `self.encoder`) bound to models anywhere in the file. */
  private get moduleTexts(): { models: Set<string>; losses: Set<string>; remotes: Set<string> } {
    return this.shared('moduleTexts', () => {
      const models = new Set<string>();
      const losses = new Set<string>();
      const remotes = new Set<string>();
      const aliases = this.aliasSignature();
      for (const top of this.root.children) {
        const c = this.contribution(top, aliases);
        for (const m of c.models) models.add(m);
        for (const l of c.losses) losses.add(l);
        for (const r of c.remotes) remotes.add(r);
      }
      for (const l of losses) models.delete(l);
      return { models, losses, remotes };
    });
  }

  /**
   * What one top-level statement adds to the file-wide facts (names bound to models, losses,
   * RemoteModules; module-level grad switches). Kept with the statement's index across edits
   * until `dropStaleContributions` finds it stale, so that a re-lint does not walk the file.
   */
  private contribution(top: SyntaxNode, aliases = this.aliasSignature()): Contribution {
    const chunk = this.chunks.get(top);
    if (chunk?.contribution && chunk.contribution.aliases === aliases) return chunk.contribution;
    const r = recordRoot(() => {
      const models: string[] = [];
      const losses: string[] = [];
      const remotes: string[] = [];
      for (const call of chunk?.calls ?? []) {
        const mc = this.methodCall(call);
        if (mc && moduleOnlyMethods.has(mc.method) && (mc.receiver.type === 'identifier' || mc.receiver.type === 'attribute')) models.push(this.src(mc.receiver));
      }
      for (const data of chunk ? [chunk.root, ...chunk.scopes.values()] : []) {
        for (const [key, list] of data.bindings) {
          for (const b of list) {
            if (!b.value) continue;
            const kind = this.constructs(b.value);
            if (kind === 'model') models.push(key);
            else if (kind === 'loss') losses.push(key);
          }
          if (list.some((b) => this.buildsRemoteModule(b))) remotes.push(key);
        }
      }
      return { models, losses, remotes, toggles: this.togglesOfStatement(top) };
    });
    const c: Contribution = { ...r.value, deps: r.deps, aliases };
    if (chunk) chunk.contribution = c;
    return c;
  }

  aliasSignature(): string {
    return this.shared('aliases', () => JSON.stringify([...this.aliases]));
  }

  /**
   * Drops the statements' contributions that may be stale: all of them, or those whose
   * lookups hit one of `keys` (exported by statements changed since they were computed).
   */
  dropStaleContributions(keys: ReadonlySet<string> | 'all'): void {
    if (keys !== 'all' && keys.size === 0) return;
    const list = keys === 'all' ? undefined : [...keys];
    for (const chunk of this.chunks.values()) {
      const c = chunk.contribution;
      if (!c) continue;
      if (!list || hasAny(c.deps, list)) chunk.contribution = undefined;
    }
  }


  /** Does this expression build a model or a loss module? */
  private constructs(expr: SyntaxNode, depth = 0): 'model' | 'loss' | undefined {
    const n = unparen(expr);
    if (n.type !== 'call' || depth > 5) return undefined;
    const callee = this.callee(n);
    if (!callee) return undefined;
    const mc = this.methodCall(n);
    if (mc && passThroughMethods.has(mc.method)) return this.constructs(mc.receiver, depth + 1);
    const q = this.qualify(callee) ?? '';
    if (/^torch\.nn\.(parallel\.)?(DataParallel|DistributedDataParallel)$|^torch\.compile$|^copy\.deepcopy$/.test(q) || /^(DDP|DP|FSDP|FullyShardedDataParallel)$/.test(q)) {
      const arg = this.positionalArgs(n)[0];
      if (!arg) return undefined;
      const inner = this.constructs(arg, depth + 1);
      if (inner) return inner;
      return arg.type === 'identifier' || arg.type === 'attribute' ? 'model' : undefined;
    }
    if (/^torch\.nn\.(modules\.\w+\.)?[A-Z]\w*$/.test(q)) return /Loss$/.test(q) ? 'loss' : /^torch\.nn\.(Parameter|ParameterList|ParameterDict|init)/.test(q) ? undefined : 'model';
    if (/^torchvision\.models\.|^timm\.create_model$|^transformers\.\w+\.from_pretrained$|^transformers\.\w*Model\w*$/.test(q)) return 'model';
    if (/\.from_pretrained$/.test(q) && /Model|AutoModel/.test(q)) return 'model';
    const cls = lastName(q);
    if (/^[A-Z]/.test(cls) && this.facts.isModuleClass(cls)) return /Loss$/.test(cls) ? 'loss' : 'model';
    return undefined;
  }

  /** Is the callee of this call a model (not a loss)? */
  isModelCall(call: SyntaxNode): boolean {
    const callee = this.callee(call);
    if (!callee) return false;
    const mc = this.methodCall(call);
    if (mc?.method === 'forward') return this.isModelExpr(mc.receiver, call);
    return this.isModelExpr(callee, call);
  }

  isModelExpr(expr: SyntaxNode, at: SyntaxNode): boolean {
    if (expr.type !== 'identifier' && expr.type !== 'attribute') return false;
    const text = this.src(expr);
    if (text === 'self') {
      const fn = this.functionOf(at);
      return !!fn?.cls && this.isModuleClassInfo(fn.cls);
    }
    if (this.isClassName(expr, at)) return false;
    track(`mt:${text}`);
    const { models, losses, remotes } = this.moduleTexts;
    // A name bound anywhere in the file to a RemoteModule.
    if (remotes.has(text)) return false;
    if (losses.has(text) || lossNamePattern.test(lastName(text))) return false;
    if (models.has(text)) return true;
    const q = this.qualify(expr) ?? text;
    if (torchFamily.test(q)) return false;
    return modelNamePattern.test(lastName(text));
  }

  /**
   * Does this name a class (`Net` after `class Net(nn.Module)`, here or in the workspace)?
   * Calling it constructs a module; it runs no forward pass.
   */
  private isClassName(expr: SyntaxNode, at: SyntaxNode): boolean {
    const text = this.src(expr);
    const name = lastName(text);
    if (!/^[A-Z]/.test(name)) return false;
    if (expr.type === 'identifier' && this.binding(text, at)) return false;
    track(`cls:${name}`);
    return this.classes.some((c) => c.name === name) || this.facts.isModuleClass(name);
  }

  /**
   * Is this expression known to hold a module: built from an `nn` class, a model zoo or a
   * workspace `nn.Module` subclass, or the receiver of a module-only method (`.parameters()`,
   * `.eval()`), or `self` / `self.x` bound to one? Unlike `isModelExpr`, a name alone is not enough.
   */
  isKnownModule(expr: SyntaxNode, at: SyntaxNode): boolean {
    if (expr.type !== 'identifier' && expr.type !== 'attribute') return false;
    const text = this.src(expr);
    if (text === 'self') return this.isModelExpr(expr, at);
    track(`mt:${text}`);
    const { models, losses } = this.moduleTexts;
    return models.has(text) && !losses.has(text);
  }

  /**
   * Is this binding a `RemoteModule` (torch.distributed.nn)? Its forward runs on another
   * worker over RPC: no activations are kept in this process.
   */
  private buildsRemoteModule(b: Binding): boolean {
    const call = this.constructorCall(b);
    return call !== undefined && /^torch\.distributed\.nn\.(api\.remote_module\.)?_?RemoteModule$/.test(this.qualify(this.callee(call)) ?? '');
  }

  /**
   * The call that builds a binding's value, under pass-through methods
   * (`nn.LSTM(...).to(device)` -> `nn.LSTM(...)`), at most 5 deep; undefined when the value is no call.
   */
  private constructorCall(b: Binding): SyntaxNode | undefined {
    let v = b.value && !b.unpacked ? unparen(b.value) : undefined;
    for (let depth = 0; v?.type === 'call' && depth < 5; depth++) {
      const mc = this.methodCall(v);
      if (!mc || !passThroughMethods.has(mc.method)) return v;
      v = unparen(mc.receiver);
    }
    return undefined;
  }

  /** The `torch.nn` class a name is bound to anywhere in the file (`self.rnn = nn.LSTM(...)` -> `torch.nn.LSTM`). */
  constructedClass(text: string): string | undefined {
    track(`ctor:${text}`);
    return this.constructedIn(this.scopes.values(), text);
  }

  /** `constructedClass` over some scopes, in order. */
  private constructedIn(scopes: Iterable<ScopeData>, text: string): string | undefined {
    for (const data of scopes) {
      for (const b of data.bindings.get(text) ?? []) {
        const call = this.constructorCall(b);
        const q = call && this.qualify(this.callee(call));
        if (q) return q;
      }
    }
    return undefined;
  }

  isLossExpr(expr: SyntaxNode): boolean {
    if (expr.type !== 'identifier' && expr.type !== 'attribute') return false;
    const text = this.src(expr);
    track(`mt:${text}`);
    return this.moduleTexts.losses.has(text) || lossNamePattern.test(lastName(text));
  }

  // ---------------------------------------------------------------- backward and history

  private backwardFacts(scope: SyntaxNode): { reaches: Set<string>; scalar: Set<string>; training: boolean } {
    const data = this.scopeData(scope);
    if (scope === this.root) track('root*');
    if (data.reachesBackward && data.scalarBackward && (data.backwardDeps || !recordingNow())) {
      replay(data.backwardDeps);
      return { reaches: data.reachesBackward, scalar: data.scalarBackward, training: !!data.trainingSignal };
    }
    return this.recordBackwardFacts(scope, data);
  }

  private recordBackwardFacts(scope: SyntaxNode, data: ScopeData): { reaches: Set<string>; scalar: Set<string>; training: boolean } {
    const r = recorded(() => this.computeBackwardFacts(scope, data));
    data.backwardDeps = r.deps;
    return r.value;
  }

  private computeBackwardFacts(_scope: SyntaxNode, data: ScopeData): { reaches: Set<string>; scalar: Set<string>; training: boolean } {
    const reaches = new Set<string>();
    const scalar = new Set<string>();
    let training = false;
    const addKeys = (expr: SyntaxNode): void => {
      const n = unparen(expr);
      if (n.type === 'identifier' || n.type === 'attribute') reaches.add(this.src(n));
      for (const d of descendants(n)) if ((d.type === 'identifier' && d.parent?.type !== 'attribute') || d.type === 'attribute') reaches.add(this.src(d));
    };
    const keyOf = (e: SyntaxNode | undefined): string | undefined => {
      const n = e && unparen(e);
      return n && (n.type === 'identifier' || n.type === 'attribute') ? this.src(n) : undefined;
    };
    for (const call of data.calls) {
      const mc = this.methodCall(call);
      const q = this.qualify(this.callee(call)) ?? '';
      const first = this.positionalArgs(call)[0];
      if (mc?.method === 'backward' && first && backwardOwners.test(this.src(mc.receiver))) {
        // accelerator.backward(loss), fabric.backward(loss)
        training = true;
        addKeys(first);
        const k = keyOf(first);
        if (k) scalar.add(k);
      } else if (mc?.method === 'backward') {
        training = true;
        addKeys(mc.receiver);
        const k = keyOf(mc.receiver);
        if (k && !first && !this.keywordArg(call, 'gradient')) scalar.add(k);
        // scaler.scale(loss).backward()
        const inner = unparen(mc.receiver);
        if (inner.type === 'call' && this.methodCall(inner)?.method === 'scale') {
          const scaled = keyOf(this.positionalArgs(inner)[0]);
          if (scaled) scalar.add(scaled);
        }
      } else if (mc?.method === 'manual_backward' || /^torch\.autograd\.(grad|backward)$/.test(q)) {
        training = true;
        const out = first ?? this.keywordArg(call, 'outputs') ?? this.keywordArg(call, 'tensors');
        if (out) addKeys(out);
        const k = mc?.method === 'manual_backward' ? keyOf(first) : undefined;
        if (k) scalar.add(k);
      } else if (mc?.method === 'step' && optimizerLike.test(this.src(mc.receiver))) {
        training = true;
      }
    }
    // Close over assignments: `loss = crit(out, y)` with `loss` reaching backward makes `out` reach it.
    for (let changed = reaches.size > 0; changed;) {
      changed = false;
      for (const [key, list] of data.bindings) {
        if (!reaches.has(key)) continue;
        for (const b of list) {
          if (!b.value) continue;
          const before = reaches.size;
          addKeys(b.value);
          if (reaches.size !== before) changed = true;
        }
      }
    }
    data.reachesBackward = reaches;
    data.scalarBackward = scalar;
    data.trainingSignal = training;
    return { reaches, scalar, training };
  }

  /** Does the value stored under `key` (in the scope of `at`) flow into a backward pass? */
  reachesBackward(key: string, at: SyntaxNode): boolean {
    return this.backwardFacts(this.scopeOf(at)).reaches.has(key);
  }

  /** Does this scope call `.backward()`, `autograd.grad` or an optimizer step? */
  hasTrainingSignal(scope: SyntaxNode): boolean {
    return this.backwardFacts(scope).training;
  }

  /** Does the value of this model call flow into a backward pass (fine-tuning, saliency)? */
  callReachesBackward(call: SyntaxNode): boolean {
    if (this.calleeRunsBackward(call)) return true;
    const scope = this.scopeOf(call);
    const { reaches } = this.backwardFacts(scope);
    for (const a of ancestors(call)) {
      if (a.type === 'call') {
        const mc = this.methodCall(a);
        if (mc?.method === 'backward' && contains(mc.receiver, call) || (mc?.method === 'backward' && mc.receiver === call)) return true;
        const q = this.qualify(this.callee(a)) ?? '';
        if (/^torch\.autograd\.(grad|backward)$/.test(q)) return true;
      }
      if (a.type === 'assignment' || a.type === 'augmented_assignment') {
        const left = child(a, 'left');
        if (left && this.targets(left).some((t) => reaches.has(this.src(t)))) return true;
        break;
      }
      if (a.type === 'return_statement' || a.type === 'expression_statement' || a.type === 'block') break;
    }
    return false;
  }

  /**
   * Is the callee a function of the project (`def step_model(...)`, here or in the workspace)
   * that itself runs backward: a training step, whose forward pass needs its graph?
   */
  private calleeRunsBackward(call: SyntaxNode): boolean {
    const callee = this.callee(call);
    if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return false;
    const name = lastName(this.src(callee));
    if (name === 'forward' || name === '__call__') return false;
    track(`fn:${name}`);
    const fns = [...this.functions.filter((f) => f.name === name), ...this.facts.functionsNamed(name)];
    return fns.some((f) => f.model.hasTrainingSignal(f.node));
  }

  /**
   * Does this expression carry autograd history? True only when provenance is known:
   * a model's output, a loss, arithmetic on those, or a value that is backpropagated.
   */
  carriesHistory(expr: SyntaxNode, seen: Set<number> = new Set()): boolean {
    const n = unparen(expr);
    if (seen.has(n.order) || seen.size > 200) return false;
    seen.add(n.order);
    switch (n.type) {
      case 'identifier':
      case 'attribute': {
        const key = this.src(n);
        const scope = this.scopeOf(n);
        if (this.backwardFacts(scope).scalar.has(key)) return true;
        if (n.type === 'attribute') {
          const attr = child(n, 'attribute');
          const name = attr ? this.src(attr) : '';
          if (/^(data|grad|shape|dtype|device|requires_grad|is_cuda|ndim|is_leaf)$/.test(name)) return false;
        }
        const b = this.binding(key, n);
        if (b?.value) return this.carriesHistory(b.value, seen);
        if (n.type === 'attribute') {
          // `out.logits` carries history when `out` does; `self.x` is unknown.
          const object = child(n, 'object');
          return !!object && this.src(object) !== 'self' && this.carriesHistory(object, seen);
        }
        return false;
      }
      case 'call':
        return this.gradState(n) !== 'off' && this.callCarries(n, seen);
      case 'binary_operator': {
        const l = child(n, 'left');
        const r = child(n, 'right');
        return (!!l && this.carriesHistory(l, seen)) || (!!r && this.carriesHistory(r, seen));
      }
      case 'unary_operator': {
        const arg = child(n, 'argument');
        return !!arg && this.carriesHistory(arg, seen);
      }
      case 'subscript': {
        const v = child(n, 'value');
        return !!v && this.carriesHistory(v, seen);
      }
      case 'conditional_expression':
        return namedChildren(n).slice(0, 1).concat(namedChildren(n).slice(2)).some((c) => this.carriesHistory(c, seen));
      case 'await':
        return namedChildren(n).some((c) => this.carriesHistory(c, seen));
      default:
        return false;
    }
  }

  private callCarries(call: SyntaxNode, seen: Set<number>): boolean {
    const callee = this.callee(call);
    if (!callee) return false;
    const q = this.qualify(callee) ?? '';
    const args = () => namedChildren(child(call, 'arguments') ?? call).map((a) => (a.type === 'keyword_argument' ? child(a, 'value') : a)).filter((a): a is SyntaxNode => !!a);
    const anyArg = () => args().some((a) => this.carriesHistory(a, seen) || ((a.type === 'list' || a.type === 'tuple' || a.type === 'generator_expression' || a.type === 'list_comprehension') && this.containsHistory(a, seen)));
    if (q === 'torch.autograd.grad') {
      // Gradients carry a graph only when asked for one (higher-order derivatives).
      const createGraph = this.keywordArg(call, 'create_graph') ?? this.positionalArgs(call)[4];
      return !!createGraph && this.src(createGraph) !== 'False';
    }
    const mc = this.methodCall(call);
    if (mc) {
      if (historyFreeMethods.has(mc.method)) return false;
      if (q.startsWith('torch.')) {
        if (historyFreeTorch.test(q)) return false;
        return anyArg();
      }
      if (mc.method === 'forward') return this.isModelExpr(mc.receiver, call);
      if (this.isModelExpr(callee, call)) return true;
      if (this.isLossExpr(callee)) return anyArg();
      return this.carriesHistory(mc.receiver, seen);
    }
    if (callee.type === 'identifier') {
      const name = this.src(callee);
      if (historyFreeBuiltins.has(q) || historyFreeBuiltins.has(name)) return false;
      if (q === 'sum' || q === 'max' || q === 'min') return anyArg();
      if (q.startsWith('torch.')) return historyFreeTorch.test(q) ? false : anyArg();
      if (this.isModelExpr(callee, call)) return true;
      if (this.isLossExpr(callee)) return anyArg();
    }
    return false;
  }

  private containsHistory(node: SyntaxNode, seen: Set<number>): boolean {
    for (const d of descendants(node)) {
      if ((d.type === 'identifier' && d.parent?.type !== 'attribute' && d.parent?.type !== 'keyword_argument') || d.type === 'call') {
        if (d.parent?.type === 'call' && d.field === 'function') continue;
        if (this.carriesHistory(d, seen)) return true;
      }
    }
    return false;
  }

  /** Is the value a scalar tensor (so `.item()` is the fix)? */
  isScalar(expr: SyntaxNode, depth = 0): boolean {
    const n = unparen(expr);
    if (depth > 8) return false;
    switch (n.type) {
      case 'identifier':
      case 'attribute': {
        const key = this.src(n);
        if (this.backwardFacts(this.scopeOf(n)).scalar.has(key)) return true;
        if (n.type === 'attribute' && lastName(key) === 'loss') return true;
        const b = this.binding(key, n);
        return !!b?.value && !b.unpacked && this.isScalar(b.value, depth + 1);
      }
      case 'call': {
        const mc = this.methodCall(n);
        const callee = this.callee(n);
        const q = this.qualify(callee) ?? '';
        const reduction = this.keywordArg(n, 'reduction');
        if (reduction && /none/.test(this.src(reduction))) return false;
        if (mc && (mc.method === 'mean' || mc.method === 'sum') && this.positionalArgs(n).length === 0 && !this.keywordArg(n, 'dim')) return true;
        if (mc && /^(to|cpu|cuda|float|double|half|clone|squeeze)$/.test(mc.method)) return this.isScalar(mc.receiver, depth + 1);
        if (/^torch\.(mean|sum)$/.test(q) && this.positionalArgs(n).length === 1 && !this.keywordArg(n, 'dim')) return true;
        if (lossFunction.test(q)) return true;
        return !!callee && this.isLossExpr(callee);
      }
      case 'binary_operator': {
        const l = child(n, 'left');
        const r = child(n, 'right');
        if (!l || !r) return false;
        const ls = this.isScalar(l, depth + 1);
        const rs = this.isScalar(r, depth + 1);
        return (ls && (rs || !this.carriesHistory(r))) || (rs && !this.carriesHistory(l));
      }
      default:
        return false;
    }
  }

  // ---------------------------------------------------------------- loops

  /** Is this loop a training step loop: it runs backward / an optimizer step, or iterates a loader? */
  isStepLoop(loop: SyntaxNode): boolean {
    return this.memo(`steploop:${loop.order}`, () => {
      if (loop.type === 'for_statement') {
        const right = child(loop, 'right');
        if (right && /loader|dataloader|\bdl\b|_dl\b/i.test(this.src(right))) return true;
      }
      for (const d of descendants(loop, (x) => x.type === 'function_definition' || x.type === 'class_definition')) {
        if (d.type !== 'call') continue;
        const mc = this.methodCall(d);
        if (!mc) continue;
        if (mc.method === 'backward' || mc.method === 'manual_backward') return true;
        if (mc.method === 'step' && optimizerLike.test(this.src(mc.receiver))) return true;
      }
      return false;
    });
  }

  /** The innermost enclosing step loop within the node's scope. */
  stepLoopOf(node: SyntaxNode): SyntaxNode | undefined {
    for (const a of ancestors(node)) {
      if (a.type === 'function_definition' || a.type === 'class_definition') return undefined;
      if (loopTypes.has(a.type) && this.isStepLoop(a)) return a;
    }
    return undefined;
  }

  /** The `x.eval()` in force at this call for its receiver, if any (no `x.train()` after it). */
  evalEventFor(call: SyntaxNode, calleeText: string): { order: number; receiver: string } | undefined {
    const scope = this.scopeOf(call);
    if (scope === this.root) track('root*');
    const events = this.scopeData(scope).modeEvents;
    let last: ModeEvent | undefined;
    for (const e of events) {
      if (e.at.order >= call.order) break;
      if (calleeText === e.receiver || calleeText.startsWith(`${e.receiver}.`) || (e.receiver.startsWith(`${calleeText}.`))) last = e;
    }
    return last?.inference ? { order: last.at.order, receiver: last.receiver } : undefined;
  }

  /** The outermost loop around `node` (in its scope) that iterates a validation/test loader. */
  evalLoaderLoopOf(node: SyntaxNode): SyntaxNode | undefined {
    let found: SyntaxNode | undefined;
    for (const a of ancestors(node)) {
      if (a.type === 'function_definition' || a.type === 'class_definition') break;
      if (a.type === 'for_statement') {
        const right = child(a, 'right');
        if (right && /(^|[^a-z])(val|valid|validation|dev|test|testing|eval|evaluation)_?(loader|dataloader|dl|data_loader|dataset|set|ds|batches|iter)/.test(this.src(right).toLowerCase())) found = a;
      }
    }
    return found;
  }

  /** A statement that accumulates `value` into `target`, if `stmt` is one. */
  accumulation(stmt: SyntaxNode): Accumulation | undefined {
    const expr = stmt.type === 'expression_statement' ? namedChildren(stmt)[0] : undefined;
    if (!expr) return undefined;
    if (expr.type === 'augmented_assignment') {
      const op = child(expr, 'operator');
      const left = child(expr, 'left');
      const right = child(expr, 'right');
      if (op && this.src(op) === '+=' && left && right) return { stmt, kind: 'add', target: left, value: right };
      return undefined;
    }
    if (expr.type === 'assignment') {
      const left = child(expr, 'left');
      const right = child(expr, 'right');
      if (!left || !right || (left.type !== 'identifier' && left.type !== 'attribute' && left.type !== 'subscript')) return undefined;
      const r = unparen(right);
      const lt = this.src(left);
      if (r.type === 'binary_operator') {
        const op = child(r, 'operator');
        const a = child(r, 'left');
        const b = child(r, 'right');
        if (op && this.src(op) === '+' && a && b) {
          if (this.src(unparen(a)) === lt) return { stmt, kind: 'add', target: left, value: b };
          if (this.src(unparen(b)) === lt) return { stmt, kind: 'add', target: left, value: a };
        }
      }
      if (r.type === 'call' && /^torch\.(cat|stack|concat|concatenate)$/.test(this.qualify(this.callee(r)) ?? '')) {
        const seq = this.positionalArgs(r)[0];
        if (seq && (seq.type === 'list' || seq.type === 'tuple')) {
          const items = namedChildren(seq);
          if (items.some((i) => this.src(i) === lt)) {
            const other = items.find((i) => this.src(i) !== lt);
            if (other) return { stmt, kind: 'cat', target: left, value: other };
          }
        }
      }
      return undefined;
    }
    if (expr.type === 'call') {
      const mc = this.methodCall(expr);
      if (!mc || !accumulateMutators.has(mc.method)) return undefined;
      const args = this.positionalArgs(expr);
      const value = mc.method === 'insert' ? args[1] : args[0];
      if (!value) return undefined;
      if (mc.method === 'extend') {
        const v = unparen(value);
        if (v.type !== 'list' && v.type !== 'tuple') return undefined;
        const first = namedChildren(v)[0];
        return first ? { stmt, kind: 'list', target: mc.receiver, value: first } : undefined;
      }
      return { stmt, kind: mc.method === 'add_' ? 'add' : 'list', target: mc.receiver, value };
    }
    return undefined;
  }
}

export interface Accumulation {
  readonly stmt: SyntaxNode;
  /** `add`: `+=`, `x = x + v`, `x.add_(v)`; `list`: `.append`/`.extend`/`.insert`; `cat`: `torch.cat([x, v])`. */
  readonly kind: 'add' | 'list' | 'cat';
  readonly target: SyntaxNode;
  readonly value: SyntaxNode;
}

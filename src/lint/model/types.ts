/**
 * The types and name tables the layers of a file's model share (see ../model.ts). The `model` of
 * a FunctionInfo, ClassInfo or CallSite is the whole FileModel: ../model.ts adds that field by
 * declaration merging, so this module does not import the class that imports it.
 */
import { recordingNow, track } from '../deps';
import { child, contains, namedChildren, type SyntaxNode } from '../syntax';

export interface FunctionInfo {
  readonly node: SyntaxNode;
  readonly name: string;
  readonly params: readonly string[];
  readonly decorators: readonly SyntaxNode[];
  readonly cls: ClassInfo | undefined;
  readonly body: SyntaxNode | undefined;
}

export interface ClassInfo {
  readonly node: SyntaxNode;
  readonly name: string;
  readonly bases: readonly SyntaxNode[];
  readonly methods: Map<string, FunctionInfo>;
  /** Which methods accumulate which parameters (the workspace's cache, valid for these imports). */
  accumulating?: { aliases: string; params: Map<string, readonly number[] | undefined> };
}

export interface CallSite {
  readonly call: SyntaxNode;
}

/** A function or method named as a value, not called (`callbacks=[evaluate]`, `hook(self.predict)`): its callers are unknown. */
export interface ValueReference {
  readonly node: SyntaxNode;
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
  /** Classes named `name`, across the workspace. */
  classesNamed(name: string): readonly ClassInfo[];
  /** Places that use a name `name` (or `x.name`) as a value rather than calling it, across the workspace. */
  valueReferences(name: string): readonly ValueReference[];
}

export type GradState = 'off' | 'on' | 'default';

export interface Binding {
  /** The node being bound (identifier, attribute, or parameter name). */
  readonly target: SyntaxNode;
  /** The value, when the binding is `target = value` (or `with value as target`). */
  readonly value: SyntaxNode | undefined;
  /** `a, b = value`: the target holds a part of the value. */
  readonly unpacked: boolean;
  /** The binding statement or clause; its `order` places the binding in the document. */
  readonly at: SyntaxNode;
}

export interface ModeEvent {
  readonly at: SyntaxNode;
  readonly receiver: string;
  readonly inference: boolean;
}

export interface ScopeData {
  readonly calls: SyntaxNode[];
  readonly bindings: Map<string, Binding[]>;
  readonly globals: Set<string>;
  readonly params: Set<string>;
  /** `x.eval()` / `x.train()` calls in document order. */
  readonly modeEvents: ModeEvent[];
  /** Augmented assignments (`loss += term`) in document order: no definitions (flow.ts), but what they add flows on. */
  readonly updates: SyntaxNode[];
  /** Which definitions flow into a backward pass (provenance.ts), computed once per file version. */
  backward?: BackwardFacts;
  backwardDeps?: Set<string>;
  /** Whether the scope calls `.backward()`, `autograd.grad` or an optimizer step (`backward.training`, without the rest). */
  training?: boolean;
  /** The scope's reaching definitions (flow.ts): syntax only, so kept while the statement's index is reused. */
  flow?: Flow;
}

/** The definitions of a key that reach a point; `entry`: some path comes from the scope's entry without one. */
export interface Reaching {
  readonly defs: readonly Binding[];
  readonly entry: boolean;
}

/** Reaching definitions in one scope (flow.ts). */
export interface Flow {
  /** The definitions of `key` that reach `at`; undefined when `at` is in none of the scope's statements. */
  reaching(key: string, at: SyntaxNode): Reaching | undefined;
  /** Can the value of `key` at `at` come from an earlier iteration of `loop`, or from before it? */
  carriedAcross(key: string, at: SyntaxNode, loop: SyntaxNode): boolean;
}

/**
 * What a scope backpropagates, per definition (flow.ts): a name reused by a validation loop
 * under `no_grad` is another definition than the training loop's. A key whose value comes from
 * outside the scope's own definitions (a parameter, an attribute not bound before) is kept by
 * its text.
 */
export interface BackwardFacts {
  /** Definitions whose values flow into `.backward()` or `autograd.grad`. */
  readonly reachesDefs: ReadonlySet<Binding>;
  /** Text keys (`loss`, `self.total`) that flow into one from the scope's entry. */
  readonly reaches: ReadonlySet<string>;
  /** Definitions on which `.backward()` is called without arguments: scalars with history. */
  readonly scalarDefs: ReadonlySet<Binding>;
  readonly scalar: ReadonlySet<string>;
  /**
   * Definitions whose value is the only source of a backpropagated value (`losses =
   * self.model.calculate_loss(batch)`; `loss = sum(losses)`; `loss.backward()`): whatever the
   * call that made them, they hold autograd history, or the backward pass would fail.
   */
  readonly sourceDefs: ReadonlySet<Binding>;
  /** The scope calls `.backward()`, `autograd.grad` or an optimizer step. */
  readonly training: boolean;
}

/**
 * What one top-level statement of a file contributes to the file's index. A statement whose
 * syntax tree was reused after an edit (see `toSyntax`) keeps its index too.
 */
export interface Contribution {
  readonly models: readonly string[];
  readonly losses: readonly string[];
  readonly remotes: readonly string[];
  /** The module-level grad switches this statement makes, in order. */
  readonly toggles: readonly ('off' | 'on')[];
  readonly deps: Set<string>;
  /** The file's imports when computed: names qualify through them. */
  readonly aliases: string;
}

/**
 * A fact kept across edits (`functionFact`, `cyclicFact`): its value, the lookups it made, and
 * the file-wide facts it was made under, which are compared by value and not recorded: the
 * shared facts (`sharedFacts`: imports, module-level grad switches), the names bound to models
 * that it looked up (`mt:` keys, against `modules`), and the latest change to another file.
 */
export interface KeptFact {
  readonly v: unknown;
  readonly deps: Set<string>;
  readonly shared: string;
  readonly outside: number;
  /** The model names then (`moduleNames`), moved on to a later version's once its looked-up names are found the same. */
  modules: object;
  readonly moduleKeys: readonly string[];
  /** The `StaleLog` sequence number up to which the fact is known not stale. */
  checked: number;
}

/**
 * The lookup keys made stale by edits, in batches, shared by the versions of one file: a kept
 * fact checks the batches logged since it was last checked when it is asked again, instead of
 * every kept fact being checked against every batch at every edit.
 */
export interface StaleLog {
  seq: number;
  /** Facts checked before this are stale (everything was dropped then). */
  allBefore: number;
  /** The latest batches, oldest first; a fact last checked before the oldest one kept is stale. */
  readonly batches: { readonly seq: number; readonly keys: readonly string[] }[];
}

/** How many batches a `StaleLog` keeps. */
export const staleLogLength = 256;

export interface ChunkIndex {
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
  valueRefs?: { name: string; node: SyntaxNode }[];
  /** `callFact`s of the statement's calls, kept with the statement across edits while no lookup they made is stale. */
  kept?: Map<SyntaxNode, Map<string, KeptFact>>;
}

export const noGradNames = new Set(['torch.no_grad', 'torch.autograd.no_grad', 'torch.autograd.grad_mode.no_grad']);
export const inferenceModeNames = new Set(['torch.inference_mode', 'torch.autograd.inference_mode', 'torch.autograd.grad_mode.inference_mode']);
export const setGradNames = new Set(['torch.set_grad_enabled', 'torch.autograd.set_grad_enabled', 'torch.autograd.grad_mode.set_grad_enabled']);
export const enableGradNames = new Set(['torch.enable_grad', 'torch.autograd.enable_grad', 'torch.autograd.grad_mode.enable_grad']);
export const torchFamily = /^(torch|torchvision|torchaudio|torchtext|pytorch_lightning|lightning|transformers|timm|accelerate|torchmetrics)(\.|$)/;
export const moduleBases = /^(torch\.nn\.(modules\.module\.)?Module|(pytorch_lightning|lightning|lightning\.pytorch)(\.core)?(\.module)?\.LightningModule|transformers\.(modeling_utils\.)?PreTrainedModel)$/;
/** Methods that only exist on `nn.Module`s: their receiver is a model. */
export const moduleOnlyMethods = new Set(['eval', 'train', 'parameters', 'named_parameters', 'modules', 'named_modules', 'requires_grad_', 'buffers', 'named_buffers']);
/**
 * How many arguments nn.Module's own methods take (`eval()` none, `train(mode=True)` one): a call passing more is
 * another method of the same name (`trainer.eval(evaluate, model_file)` of pytorchic-bert's Trainer), no mode switch.
 * Its receiver may still be a module whose class defines its own (the forward-forward example's `layer.train(h_pos,
 * h_neg)`), so it still counts as a sign of a module.
 */
const moduleMethodArity: Record<string, number> = { eval: 0, train: 1 };

/** Could this call of `method` be nn.Module's own `method`, by how many arguments it passes (`argumentCount`)? */
export function moduleMethodArgsFit(method: string, call: SyntaxNode): boolean {
  const max = moduleMethodArity[method];
  return max === undefined || argumentCount(call) <= max;
}
/**
 * nn.Module's methods that return the module itself, so a model passes through them:
 * `Net(...).cuda()`, `.to(device)`, `.eval()`, `.apply(init_weights)` are `Net`'s instance.
 */
export const moduleSelfMethods = new Set(['cuda', 'cpu', 'to', 'to_empty', 'train', 'eval', 'float', 'half', 'double', 'bfloat16', 'requires_grad_', 'share_memory', 'apply']);
export const modelNamePattern = /^(model|net|network|backbone|encoder|decoder|classifier|generator|discriminator|teacher|student|unet|vae|ema_model)$|_model$|^model_|_net$|^net_/i;
export const lossNamePattern = /loss|criterion|^crit$/i;
/** Attributes of a tensor that carry none of its autograd history (`x.data`, `x.shape`). */
export const historyFreeAttributes = /^(data|grad|shape|dtype|device|requires_grad|is_cuda|ndim|is_leaf)$/;
export const historyFreeMethods = new Set(['item', 'tolist', 'detach', 'detach_', 'numpy', 'argmax', 'argmin', 'argsort', 'eq', 'ne', 'lt', 'le', 'gt', 'ge', 'isnan', 'isinf', 'isfinite', 'size', 'dim', 'numel', 'nelement', 'long', 'int', 'bool', 'byte', 'backward', 'nonzero', 'count_nonzero', 'sign', 'round', 'floor', 'ceil', 'topk_indices', 'data_ptr', 'element_size', 'all', 'any', 'zero_']);
export const historyFreeTorch = /^torch\.(argmax|argmin|argsort|eq|ne|lt|le|gt|ge|isnan|isinf|isfinite|zeros|ones|zeros_like|ones_like|empty|empty_like|full|full_like|tensor|as_tensor|from_numpy|arange|linspace|randn|rand|randint|randperm|no_grad|is_tensor|numel|count_nonzero|sign|round|floor|ceil|manual_seed)$/;
export const historyFreeBuiltins = new Set(['float', 'int', 'bool', 'len', 'str', 'repr', 'round', 'isinstance', 'type', 'id', 'hash', 'print', 'format']);
export const lossFunction = /^torch\.nn\.functional\.([a-z_]*loss|cross_entropy|nll_loss|kl_div|binary_cross_entropy(_with_logits)?|mse_loss|l1_loss|smooth_l1_loss|huber_loss|cosine_embedding_loss|margin_ranking_loss|triplet_margin_loss|ctc_loss|poisson_nll_loss|gaussian_nll_loss|hinge_embedding_loss|multi_margin_loss|soft_margin_loss|multilabel_soft_margin_loss|multilabel_margin_loss)$/;
export const accumulateMutators = new Set(['append', 'add_', 'extend', 'insert']);
/**
 * Objects whose `.backward(loss, ...)` backpropagates its argument: Accelerate, Lightning Fabric and trainers,
 * DeepSpeed engines, OpenRLHF/ColossalAI strategies and boosters, apex's and DeepSpeed's FP16 optimizers.
 */
export const backwardOwners = /(^|\.)(accelerator|fabric|engine|model_engine|trainer|strategy|booster|optimizer|optim)$/;
/**
 * A receiver whose `.step()` is an optimizer step: named for an optimizer (`optimizer`, `self.optim_g`,
 * `d_optim`), a gradient scaler, or `opt` as a word of its last name (`opt`, `self.opt`, `g_opt`,
 * `self.dis_opt`, `opt_D`, `optG`; FUNIT's trainer steps `self.dis_opt` and `self.gen_opt`), not `options`
 * or `adopt`.
 */
export const optimizerLike = /[Oo]ptim|OPTIM|[Ss]caler|SCALER|(^|[._])(opt|OPT)([._]|[A-Z0-9]|$)/;

/** The last name of a dotted expression: `self.model` -> `model`. */
/**
 * The calls that can reach `fn`: any `x.name(...)`, and plain `name(...)` only in its own
 * file or in files that import that name (two scripts may each define `evaluate`).
 */
export function callSitesOf(fn: FunctionInfo): CallSite[] {
  // Once per function and file version (every rule and `sitesOf` asks, for each function of a name): the list is shared, not to be changed.
  return fn.model.nodeMemo(fn, 'callSitesOf', () => sitesCalling(fn)) ?? sitesCalling(fn);
}

function sitesCalling(fn: FunctionInfo): CallSite[] {
  const required = requiredArguments(fn);
  const bound = fn.cls && (fn.params[0] === 'self' || fn.params[0] === 'cls');
  const sites = fn.model.facts.callSites(fn.name);
  const counts = argumentCounts(sites);
  const out: CallSite[] = [];
  // A call through an attribute passes `self` implicitly: no site passing fewer than `required - 1` can call `fn`.
  for (const i of passingAtLeast(counts, required - 1)) {
    const s = sites[i];
    const callee = s.model.callee(s.call);
    // A plain `evaluate(...)` where the file defines a function of that name (not a method) or imports one calls that,
    // not a method `evaluate` (mvts_transformer's module-level `evaluate(evaluator)` beside its runners' methods).
    if (fn.cls && callee?.type === 'identifier' && (s.model.aliases.has(fn.name) || s.model.functionsHere(fn.name).some((f) => !f.cls))) continue;
    // `self.proj.eval()` is no call of a class's `def eval(self, split)`: too few arguments for it.
    if (required > 0 && counts.n[i] < required - (bound && callee?.type === 'attribute' ? 1 : 0)) continue;
    if (s.model === fn.model) {
      if ((!contains(fn.node, s.call) || s.call.start < (fn.body?.start ?? fn.node.start)) && !(fn.cls && callee && holdsModelOutput(s.model, callee, s.call))) out.push(s);
      continue;
    }
    // `mod.f()` (an imported module) may reach a module's function; `self.f()`, `d.f()` only a method.
    if (callee?.type === 'attribute') {
      const text = s.model.src(callee);
      if (fn.cls ? !holdsModelOutput(s.model, callee, s.call) : s.model.aliases.has(text.slice(0, text.indexOf('.')))) out.push(s);
    } else if (s.model.aliases.has(fn.name)) out.push(s);
  }
  return out;
}

/**
 * How many parameters of `fn` a call must pass (those before any `*`, without a default; `self` counted).
 * 0 for a decorated function: a decorator may change what it is called with (`@hydra.main` makes `main()` pass `cfg`).
 */
function requiredArguments(fn: FunctionInfo): number {
  if (fn.decorators.length > 0) return 0;
  const params = fn.node.children.find((c) => c.field === 'parameters');
  let n = 0;
  for (const p of params?.children ?? []) {
    if (!p.named || p.type === 'comment') continue;
    if (p.type === 'identifier' || (p.type === 'typed_parameter' && p.children.some((c) => c.type === 'identifier' && c.named) && !p.children.some((c) => c.type === 'list_splat_pattern' || c.type === 'dictionary_splat_pattern'))) n++;
    else if (p.type === 'list_splat_pattern' || p.type === 'dictionary_splat_pattern' || p.type === 'keyword_separator' || (p.type === 'typed_parameter' && p.children.some((c) => c.type === 'list_splat_pattern' || c.type === 'dictionary_splat_pattern'))) break;
  }
  return n;
}

/** How many arguments `call` passes; Infinity where `*args` / `**kwargs` (or a generator argument) may pass any number. */
function argumentCount(call: SyntaxNode): number {
  const list = call.children.find((c) => c.field === 'arguments');
  if (!list || list.type !== 'argument_list') return Infinity;
  let n = 0;
  for (const a of list.children) {
    if (!a.named || a.type === 'comment') continue;
    if (a.type === 'list_splat' || a.type === 'dictionary_splat') return Infinity;
    n++;
  }
  return n;
}

/** How many arguments each of a name's call sites passes, and their indexes ordered by that, most first. */
interface ArgumentCounts {
  readonly n: readonly number[];
  readonly byCount: readonly number[];
}

/** Once per list of call sites: the workspace's lists live for one version of it. */
const argumentCountsOf = new WeakMap<readonly CallSite[], ArgumentCounts>();

function argumentCounts(sites: readonly CallSite[]): ArgumentCounts {
  let c = argumentCountsOf.get(sites);
  if (!c) {
    const n = sites.map((s) => argumentCount(s.call));
    argumentCountsOf.set(sites, (c = { n, byCount: n.map((_, i) => i).sort((a, b) => n[b] - n[a] || a - b) }));
  }
  return c;
}

/**
 * The indexes of the sites that pass at least `min` arguments, in document order. Every function of a name filters
 * that name's call sites: `def train(model, loader, opt)` against hundreds of `model.train()`, which this skips
 * without looking at them again.
 */
function passingAtLeast(counts: ArgumentCounts, min: number): Iterable<number> {
  const { n, byCount } = counts;
  let k = 0;
  while (k < byCount.length && n[byCount[k]] >= min) k++;
  if (k === byCount.length) return byCount.keys();
  return byCount.slice(0, k).sort((a, b) => a - b);
}

/**
 * `dist.sample()` after `dist = self.actor(obs)`: a method of what a model returned (a tensor, a
 * torch distribution), not of a project class, whatever project method shares its name
 * (a replay buffer's `sample()`).
 */
export function holdsModelOutput(model: CallSite['model'], callee: SyntaxNode, at: SyntaxNode): boolean {
  const object = callee.type === 'attribute' ? callee.children.find((c) => c.field === 'object') : undefined;
  if (object?.type !== 'identifier') return false;
  const b = model.binding(model.src(object), at);
  let v = b?.value;
  while (v?.type === 'parenthesized_expression') v = v.children.find((c: SyntaxNode) => c.named && c.type !== 'comment');
  return v?.type === 'call' && model.isModelCall(v);
}

/** The last binding of `key` in the first of `scopes` that has one. */
export function lastBindingIn(scopes: Iterable<ScopeData>, key: string): Binding | undefined {
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

/**
 * Of several workspace definitions of `name`, the one the module in its qualified name defines (`trainer.Trainer`,
 * from `import trainer as train` and `train.Trainer`, or `from trainer import Trainer`: trainer.py or
 * trainer/__init__.py); where several files are that module, the one beside the importing file (`importer`, a
 * path), which Python's import finds first for a script; undefined when none or still several do.
 */
export function definedByModule<T extends { readonly model: { readonly path: string } }>(name: string, qualified: string, candidates: readonly T[], importer?: string): T | undefined {
  const parts = qualified.replace(/^\.+/, '').split('.');
  const tail = (parts[parts.length - 1] === name ? parts.slice(0, -1) : parts).join('/');
  if (!tail) return undefined;
  const files = [`${tail}.py`, `${tail}/__init__.py`];
  const found = candidates.filter((c) => {
    const p = c.model.path.replace(/\\/g, '/');
    return files.some((f) => p === f || p.endsWith(`/${f}`));
  });
  if (found.length <= 1 || importer === undefined) return found.length === 1 ? found[0] : undefined;
  const dir = importer.replace(/\\/g, '/').replace(/[^/]*$/, '');
  const beside = found.filter((c) => files.some((f) => c.model.path.replace(/\\/g, '/') === `${dir}${f}`));
  return beside.length === 1 ? beside[0] : undefined;
}

/**
 * Records the lookup key `prefix + name` (deps.ts `track`) when a recording is under way: the
 * one-shot linter records nothing, and would otherwise build a key string per question.
 */
export function trackKey(prefix: string, name: string): void {
  if (recordingNow()) track(prefix + name);
}

/** The default value of parameter `param` of `fn` (`def f(x, evaluation=False)`), if it has one. */
export function parameterDefault(fn: FunctionInfo, param: string): SyntaxNode | undefined {
  const params = child(fn.node, 'parameters');
  for (const p of params ? namedChildren(params) : []) {
    if (p.type !== 'default_parameter' && p.type !== 'typed_default_parameter') continue;
    const name = child(p, 'name');
    if (name && fn.model.src(name) === param) return child(p, 'value');
  }
  return undefined;
}

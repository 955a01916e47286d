/** Which callees of a file are models or losses (../model.ts): `nn.Module` subclasses, constructors, names. */
import { recordRoot } from '../deps';
import { child, descendants, unparen, type SyntaxNode } from '../syntax';
import { type Binding, type ChunkIndex, type ClassInfo, type Contribution, definedByModule, type FunctionInfo, hasAny, lastName, lossNamePattern, modelNamePattern, moduleBases, moduleOnlyMethods, moduleSelfMethods, parameterDefault, type ScopeData, torchFamily, trackKey } from './types';
import { ModelGuards } from './guards';

/** The lists of a statement's contribution that has none (shared, never changed). */
const none: readonly never[] = Object.freeze([]);

/** `torch.nn` classes without parameters or buffers (PReLU and the norms have weights; not here). */
const parameterlessLayer = /^torch\.nn\.(modules\.\w+\.)?(ReLU6?|LeakyReLU|R?ReLU|ELU|SELU|CELU|GELU|SiLU|Mish|Sigmoid|LogSigmoid|Hardsigmoid|Tanh|Hardtanh|Tanhshrink|Hardswish|Hardshrink|Softshrink|Softplus|Softsign|Threshold|GLU|Softmax|Softmax2d|LogSoftmax|Softmin|Identity|Flatten|Unflatten|Dropout\d?d?|AlphaDropout|FeatureAlphaDropout|(Adaptive)?(Max|Avg)Pool[123]d|LPPool[123]d|FractionalMaxPool[23]d|MaxUnpool[123]d|Upsample|UpsamplingNearest2d|UpsamplingBilinear2d|PixelShuffle|PixelUnshuffle|ChannelShuffle|(Zero|Constant|Reflection|Replication|Circular)Pad[123]d|CosineSimilarity|PairwiseDistance|Fold|Unfold)$/;

const factoryName = /^_*(load|create|build|get|make|init|initialize|setup|define|instantiate|construct|prepare|restore|new)_\w+$/i;

export abstract class ModelModels extends ModelGuards {
  // ---------------------------------------------------------------- models

  /** Is this class an nn.Module (directly or through workspace classes)? */
  isModuleClassInfo(cls: ClassInfo): boolean {
    return this.memo(`moduleClass:${cls.node.order}`, () => cls.bases.some((b) => {
      const q = this.qualify(b) ?? '';
      if (moduleBases.test(q)) return true;
      if (torchFamily.test(q)) return /\.(Module|Sequential|LightningModule|PreTrainedModel|[A-Z]\w*Model)$/.test(q) && !/Dataset|DataLoader|Sampler|Optimizer/.test(q);
      return this.facts.isModuleClass(lastName(q));
    }));
  }

  /** The names bound to models, losses and RemoteModules in this version of the file (not recorded). */
  moduleNames(): { readonly models: ReadonlySet<string>; readonly losses: ReadonlySet<string>; readonly remotes: ReadonlySet<string> } {
    return this.moduleTexts;
  }

  /** Text keys (`model`, `self.encoder`) bound to models anywhere in the file. */
  protected get moduleTexts(): { models: Set<string>; losses: Set<string>; remotes: Set<string> } {
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
  protected contribution(top: SyntaxNode, aliases = this.aliasSignature()): Contribution {
    const chunk = this.chunks.get(top);
    if (chunk?.contribution && chunk.contribution.aliases === aliases) return chunk.contribution;
    const r = recordRoot(() => this.contributionNow(top, chunk));
    // Built field by field (a spread of the recorded value cost more than the rest for a statement with nothing in it).
    const c: Contribution = { models: r.value.models, losses: r.value.losses, remotes: r.value.remotes, toggles: r.value.toggles, deps: r.deps, aliases };
    if (chunk) chunk.contribution = c;
    return c;
  }

  /**
   * `contribution`'s value. A statement with no call and no binding (most of error debris
   * under the module, a docstring, `pass`) gets shared empty lists: every top-level statement
   * of the file passes here once per version.
   */
  private contributionNow(top: SyntaxNode, chunk: ChunkIndex | undefined): Omit<Contribution, 'deps' | 'aliases'> {
    let models: string[] | undefined;
    let losses: string[] | undefined;
    let remotes: string[] | undefined;
    // Every call and binding of the file passes here once per version: no `methodCall` object or entry pair made per call or name.
    for (const call of chunk?.calls ?? none) {
      const f = child(call, 'function');
      const callee = f && unparen(f);
      if (callee?.type !== 'attribute') continue;
      const attr = child(callee, 'attribute');
      const receiver = attr && child(callee, 'object');
      if (receiver && (receiver.type === 'identifier' || receiver.type === 'attribute') && moduleOnlyMethods.has(this.src(attr))) (models ??= []).push(this.src(receiver));
    }
    if (chunk && (chunk.root.bindings.size > 0 || chunk.scopes.size > 0)) {
      for (const data of [chunk.root, ...chunk.scopes.values()]) {
        for (const [key, list] of data.bindings) {
          for (const b of list) {
            if (!b.value) continue;
            const kind = this.constructs(b.value);
            if (kind === 'model') (models ??= []).push(key);
            else if (kind === 'loss') (losses ??= []).push(key);
          }
          if (list.some((b) => this.buildsRemoteModule(b))) (remotes ??= []).push(key);
        }
      }
    }
    const toggles = this.togglesOfStatement(top);
    return { models: models ?? none, losses: losses ?? none, remotes: remotes ?? none, toggles: toggles.length ? toggles : none };
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
  protected constructs(expr: SyntaxNode, depth = 0): 'model' | 'loss' | undefined {
    const n = unparen(expr);
    if (n.type !== 'call' || depth > 5) return undefined;
    const callee = this.callee(n);
    if (!callee) return undefined;
    const mc = this.methodCall(n);
    if (mc && moduleSelfMethods.has(mc.method)) return this.constructs(mc.receiver, depth + 1);
    const q = this.qualify(callee) ?? '';
    if (/^torch\.nn\.(parallel\.)?(DataParallel|DistributedDataParallel)$|^torch\.compile$|^copy\.deepcopy$/.test(q) || /^(DDP|DP|FSDP|FullyShardedDataParallel)$/.test(q)) {
      const arg = this.positionalArgs(n)[0];
      if (!arg) return undefined;
      const inner = this.constructs(arg, depth + 1);
      if (inner) return inner;
      return arg.type === 'identifier' || arg.type === 'attribute' ? 'model' : undefined;
    }
    if (/^torch\.nn\.(modules\.\w+\.)?[A-Z]\w*$/.test(q)) return /Loss$/.test(q) ? 'loss' : /^torch\.nn\.(Parameter|ParameterList|ParameterDict|init)/.test(q) ? undefined : 'model';
    if (/^transformers\.\w*(Tokenizer|Processor|Config|FeatureExtractor)\w*\./.test(q)) return undefined;
    if (/^torchvision\.models\.|^timm\.create_model$|^transformers\.\w+\.from_pretrained$|^transformers\.\w*Model\w*$/.test(q)) return 'model';
    if (/\.from_pretrained$/.test(q) && /Model|AutoModel/.test(q)) return 'model';
    const cls = lastName(q);
    // A class of the workspace by its module (`network.generator(64)`, pytorch-pix2pix's lower-case class); a bare lower-case
    // name is more often an instance than a class.
    if ((/^[A-Z]/.test(cls) || q.includes('.')) && this.facts.isModuleClass(cls) && this.importedModuleClass(cls, q)) return /Loss$/.test(cls) ? 'loss' : 'model';
    return undefined;
  }

  /**
   * `train.Trainer(...)` after `import trainer as train`, where the workspace has several classes named `Trainer`
   * and one of them is a module: the one trainer.py defines decides. By its name alone (true) when one class has it,
   * the name is not reached through a module, or no module of the qualified name defines one.
   */
  private importedModuleClass(cls: string, q: string): boolean {
    if (!q.includes('.')) return true;
    const classes = this.facts.classesNamed(cls);
    if (classes.length <= 1) return true;
    const picked = definedByModule(cls, q, classes, this.path);
    return !picked || picked.model.isModuleClassInfo(picked);
  }

  /** Is the callee of this call a model (not a loss)? */
  isModelCall(call: SyntaxNode): boolean {
    const callee = this.callee(call);
    if (!callee) return false;
    const mc = this.methodCall(call);
    if (mc?.method === 'forward') return this.isModelExpr(mc.receiver, call) || this.isSubmoduleOfModel(mc.receiver, call) || this.ownSubmodule(mc.receiver, call);
    return this.isModelExpr(callee, call);
  }

  /**
   * `model.module.netE` in `model.module.netE.forward(x)`: an attribute of a model (not of `self`)
   * whose `forward` is called by name is one of its submodules (pix2pixHD precomputes its encoder's
   * features this way). Only for an explicit `.forward`: `model.head(x)` may be any attribute.
   */
  /**
   * `self.feature.forward(x)` in a method of an `nn.Module` class: its attribute's `forward` called by
   * name, a submodule however it was built (`self.feature = model_func()`, a factory passed to the
   * constructor: CloserLookFewShot's BaselineTrain), as `self.encoder(x)` is by its name.
   */
  private ownSubmodule(expr: SyntaxNode, at: SyntaxNode): boolean {
    const object = expr.type === 'attribute' ? child(expr, 'object') : undefined;
    if (object?.type !== 'identifier' || !this.textIs(object, 'self')) return false;
    const cls = this.functionOf(at)?.cls;
    return !!cls && this.isModuleClassInfo(cls);
  }

  private isSubmoduleOfModel(expr: SyntaxNode, at: SyntaxNode): boolean {
    for (let o = expr.type === 'attribute' ? child(expr, 'object') : undefined; o; o = o.type === 'attribute' ? child(o, 'object') : undefined) {
      if (o.type === 'identifier' || o.type === 'attribute') {
        if (this.src(o) === 'self') return false;
        if (this.isModelExpr(o, at)) return true;
      }
    }
    return false;
  }

  isModelExpr(expr: SyntaxNode, at: SyntaxNode): boolean {
    if (expr.type !== 'identifier' && expr.type !== 'attribute') return false;
    const text = this.src(expr);
    if (text === 'self') {
      const fn = this.functionOf(at);
      return !!fn?.cls && this.isModuleClassInfo(fn.cls);
    }
    if (this.isClassName(expr, at)) return false;
    // `self.eval_model(...)` where the class defines `eval_model` (simpletransformers' ClassificationModel): a method
    // of the object, named like a model but no module.
    if (expr.type === 'attribute' && /^self\.\w+$/.test(text)) {
      const cls = this.functionOf(at)?.cls;
      if (cls && definesMethod(cls, text.slice(5))) return false;
    }
    // `cur_model.net_name()` (a Darknet method that returns 'region' or 'yolo', pytorch-0.4-yolov3): named like a
    // model, but a method some project class defines (not a property, which may return a module): no module.
    if (expr.type === 'attribute' && modelNamePattern.test(lastName(text)) && this.projectMethod(lastName(text))) return false;
    // `model.module(x)`: the model a DataParallel / DDP wrapper holds; calling it runs its forward.
    if (expr.type === 'attribute' && text.endsWith('.module')) {
      const object = child(expr, 'object');
      if (object && object.type !== 'call' && this.isModelExpr(object, at)) return true;
    }
    // `trainer.gen_a.encode(x)` after `trainer = MUNIT_Trainer(config)`, whose class binds `self.gen_a = AdaINGen(...)`:
    // a module the object holds (MUNIT's test_batch.py). By the class the object was built from, where it is used.
    if (expr.type === 'attribute' && this.heldModule(expr, at)) return true;
    // `def evaluate(Model, envs): model = Model(envs)`: a class passed in; calling it builds the module.
    if (expr.type === 'identifier' && /^[A-Z]/.test(text) && this.isParam(this.scopeOf(at), text) && this.bindingsIn(this.scopeOf(at), text).length === 0) return false;
    trackKey('mt:', text);
    // From here the answer depends on the text alone (its qualified name too: an identifier's or
    // attribute's text parses the same wherever it is), so once per text and file version.
    const known = this.shared('modelTexts', () => new Map<string, boolean>());
    let answer = known.get(text);
    if (answer === undefined) known.set(text, (answer = this.namesModel(text, expr)));
    return answer;
  }

  /** The expression under nn.Module's methods that return the module itself: `Net(...).cuda().eval()` -> `Net(...)`. */
  moduleBeneath(value: SyntaxNode): SyntaxNode {
    let v = unparen(value);
    for (let mc = v.type === 'call' ? this.methodCall(v) : undefined; mc && moduleSelfMethods.has(mc.method); mc = v.type === 'call' ? this.methodCall(v) : undefined) v = unparen(mc.receiver);
    return v;
  }

  /** `obj.attr` where `obj` was built from a workspace class whose file binds `self.attr` to a model. */
  private heldModule(expr: SyntaxNode, at: SyntaxNode): boolean {
    const object = child(expr, 'object');
    const attr = child(expr, 'attribute');
    if (object?.type !== 'identifier' || !attr || this.src(object) === 'self') return false;
    // Only an object the file binds to a model anywhere (a set lookup): most attributes are not asked further.
    if (!this.moduleTexts.models.has(this.src(object))) return false;
    const b = this.binding(this.src(object), at);
    const v = b?.value && !b.unpacked ? this.moduleBeneath(b.value) : undefined;
    const callee = v?.type === 'call' ? this.callee(v) : undefined;
    if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return false;
    const name = lastName(this.src(callee));
    if (!/^[A-Z]/.test(name)) return false;
    trackKey('cls:', name);
    const classes = this.facts.classesNamed(name);
    return classes.length === 1 && classes[0].model.moduleNames().models.has(`self.${this.src(attr)}`) && !classes[0].model.moduleNames().losses.has(`self.${this.src(attr)}`);
  }

  /** Does a project class (here or in the workspace) define a method `name` that is not a property? */
  private projectMethod(name: string): boolean {
    trackKey('fn:', name);
    const isMethod = (f: FunctionInfo) => !!f.cls && !(f.node.parent?.type === 'decorated_definition' && /@(\w+\.)?(cached_)?property\b/.test(f.model.src(f.node.parent)));
    return this.functionsHere(name).some(isMethod) || this.facts.functionsNamed(name).some(isMethod);
  }

  /** `isModelExpr` for a name or attribute by its text: bound to a model in the file, or named like one. */
  private namesModel(text: string, expr: SyntaxNode): boolean {
    const { models, losses, remotes } = this.moduleTexts;
    // A name bound anywhere in the file to a RemoteModule (or an unpickled object).
    if (remotes.has(text)) return false;
    const last = lastName(text);
    // `model_with_loss.eval()`, then `model_with_loss(batch)` (CenterNet's ModelWithLoss): a model by its
    // use and its name, though the name also says loss; `criterion.train()` (DETR's) stays a loss.
    if (models.has(text) && modelNamePattern.test(last) && !losses.has(text)) return true;
    if (losses.has(text) || lossNamePattern.test(last)) return false;
    if (models.has(text)) return true;
    // `load_model(path)`, `create_model(cfg)`: a factory that returns a model; calling it runs no forward.
    if (factoryName.test(last)) return false;
    const q = this.qualify(expr) ?? text;
    if (torchFamily.test(q)) return false;
    return modelNamePattern.test(last) && !buildsByName(last);
  }

  /**
   * Does this name a class (`Net` after `class Net(nn.Module)`, here or in the workspace)?
   * Calling it constructs a module; it runs no forward pass.
   */
  protected isClassName(expr: SyntaxNode, at: SyntaxNode): boolean {
    const text = this.src(expr);
    const name = lastName(text);
    if (!/^[A-Z]/.test(name)) return false;
    if (expr.type === 'identifier' && this.binding(text, at)) return false;
    // `from models.dcgan import DCGAN_MODEL`, then `DCGAN_MODEL(args)`: a capitalised name the file imports is a class,
    // also one from a module outside the workspace, whatever it is named like (pytorch-wgan: held-out round 24). Not a
    // one-letter name: a GAN project may export its networks as instances (`from nets import G, D`).
    if (expr.type === 'identifier' && name.length > 1 && this.aliases.has(text)) return true;
    trackKey('cls:', name);
    return this.definesClass(name) || this.facts.isModuleClass(name);
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
    trackKey('mt:', text);
    const { models, losses } = this.moduleTexts;
    return models.has(text) && !losses.has(text);
  }

  /**
   * Is this binding a `RemoteModule` (torch.distributed.nn)? Its forward runs on another
   * worker over RPC: no activations are kept in this process. Also an unpickled object (below).
   */
  protected buildsRemoteModule(b: Binding): boolean {
    const call = this.constructorCall(b);
    if (call === undefined) return false;
    const q = this.qualify(this.callee(call)) ?? '';
    // An object unpickled with `pickle.load(f).to(device)` (EDM's and StyleGAN's Inception detector): a network
    // distributed frozen, whose parameters' requires_grad is whatever was saved; what its forward records is not known here.
    return /^torch\.distributed\.nn\.(api\.remote_module\.)?_?RemoteModule$/.test(q) || /^(pickle|dill|cloudpickle)\.loads?$/.test(q);
  }

  /**
   * The call that builds a binding's value, under pass-through methods
   * (`nn.LSTM(...).to(device)` -> `nn.LSTM(...)`), at most 5 deep; undefined when the value is no call.
   */
  protected constructorCall(b: Binding): SyntaxNode | undefined {
    let v = b.value && !b.unpacked ? unparen(b.value) : undefined;
    for (let depth = 0; v?.type === 'call' && depth < 5; depth++) {
      const mc = this.methodCall(v);
      if (!mc || !moduleSelfMethods.has(mc.method)) return v;
      v = unparen(mc.receiver);
    }
    return undefined;
  }

  /** The `torch.nn` class a name is bound to anywhere in the file (`self.rnn = nn.LSTM(...)` -> `torch.nn.LSTM`). */
  constructedClass(text: string): string | undefined {
    trackKey('ctor:', text);
    return this.constructedIn(this.scopesBinding(text), text);
  }

  /** `constructedClass` over some scopes, in order. */
  protected constructedIn(scopes: Iterable<ScopeData>, text: string): string | undefined {
    for (const data of scopes) {
      for (const b of data.bindings.get(text) ?? []) {
        const call = this.constructorCall(b);
        const q = call && this.qualify(this.callee(call));
        if (q) return q;
      }
    }
    return undefined;
  }

  /**
   * Is this callee bound to a `torch.nn` layer without weights (`nn.LogSoftmax(dim=1)`,
   * `nn.ReLU()`, `nn.Dropout(p)`, pooling, padding, `nn.Upsample`)? Calling it is a forward of
   * sorts, but one that keeps nothing its input does not: a graph is at stake only where the
   * input was made with autograd on, and that forward is the one to guard.
   */
  isParameterlessLayer(expr: SyntaxNode): boolean {
    if (expr.type !== 'identifier' && expr.type !== 'attribute') return false;
    const text = this.src(expr);
    trackKey('ctor:', text);
    // By text, once per file version (every model call of missing-no-grad asks).
    const known = this.shared('parameterlessTexts', () => new Map<string, boolean>());
    let answer = known.get(text);
    if (answer === undefined) {
      const q = this.constructedClass(text);
      answer = q !== undefined && (parameterlessLayer.test(q) || (!torchFamily.test(q) && this.facts.classesNamed(lastName(q)).some((c) => weightlessModuleClass(c))));
      known.set(text, answer);
    }
    return answer;
  }

  isLossExpr(expr: SyntaxNode): boolean {
    if (expr.type !== 'identifier' && expr.type !== 'attribute') return false;
    const text = this.src(expr);
    trackKey('mt:', text);
    return this.moduleTexts.losses.has(text) || lossNamePattern.test(lastName(text));
  }

}

/** Does `cls`, or a workspace class it derives from (two levels), define a method `name`? */
function definesMethod(cls: ClassInfo, name: string, depth = 0): boolean {
  if (cls.methods.has(name)) return true;
  if (depth > 1) return false;
  return cls.bases.some((b) => cls.model.facts.classesNamed(lastName(cls.model.src(b))).some((c) => c !== cls && definesMethod(c, name, depth + 1)));
}

/**
 * A workspace `nn.Module` that creates no parameters (melgan-neurips' `Audio2Mel`: an STFT and a mel filter bank kept
 * with `register_buffer`): its one base is `torch.nn.Module`, and nothing in the class builds a layer, a `Parameter`
 * or another class, registers a parameter or module, or keeps an argument without a literal default (which may be a
 * module). Its output carries a graph only where its input does, like a pooling layer's.
 */
function weightlessModuleClass(cls: ClassInfo): boolean {
  const m = cls.model;
  return m.fact(`weightlessModule:${cls.node.order}`, () => {
    if (cls.bases.length !== 1 || !/^torch\.nn\.(modules\.module\.)?Module$/.test(m.qualify(cls.bases[0]) ?? '')) return false;
    for (const d of descendants(cls.node)) {
      if (d.type === 'call') {
        const callee = m.callee(d);
        if (!callee) return false;
        const mc = m.methodCall(d);
        if (mc && /^(register_parameter|add_module|register_module)$/.test(mc.method)) return false;
        const q = m.qualify(callee) ?? m.src(callee);
        if (/^torch\.nn\.(?!functional\.)/.test(q)) return false;
        if (!torchFamily.test(q) && /^[A-Z]/.test(lastName(q))) return false;
      } else if (d.type === 'assignment') {
        const left = child(d, 'left');
        const right = child(d, 'right');
        if (left?.type !== 'attribute' || right?.type !== 'identifier') continue;
        const fn = m.functionOf(d);
        const name = m.src(right);
        if (fn?.params.includes(name)) {
          const def = parameterDefault(fn, name);
          if (!def || !/^(integer|float|true|false|none|string)$/.test(def.type)) return false;
        }
      }
    }
    return true;
  }) ?? false;
}

/**
 * A callee whose name says it builds or loads a model rather than running one: `load_model(...)`,
 * `create_model(...)`, `build_network(...)`, or does something else with one (`save_model(m)`, ONNX's
 * `onnx.checker.check_model(m)`, `test_model(m, loader)`, MobileOne's `reparameterize_model(m)`), or a class by Python's naming convention
 * (`Model(envs)` with `Model` a parameter holding the class). Only consulted when nothing but the
 * name says "model".
 */
function buildsByName(name: string): boolean {
  return /^[A-Z]\w*[a-z]/.test(name) || /^_*(load|create|build|make|get|init|initialize|new|setup|construct|instantiate|restore|prepare|define|wrap|unwrap|convert|export|save|serialize|dump|store|train|fit|evaluate|validate|check|verify|inspect|test|benchmark|profile|log|show|plot|visualize|run|print|summarize|count|copy|clone|update|sync|average|freeze|unfreeze|compile|register|quantize|prune|reparameteri[sz]e|fuse|merge|fold|strip|replace)_/i.test(name);
}

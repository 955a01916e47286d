/**
 * Evidence that a forward pass is inference, beyond a function's name (missing-no-grad):
 * - its input is a `Variable(..., volatile=True)`: the author meant "no graph", which
 *   PyTorch has ignored since 0.4, so the forward now records one;
 * - everything done with its output only reads it: the output (and what is computed from it)
 *   is held in a local name and ends in numbers, a saved or plotted image, a printed line, or
 *   another forward pass, never in a loss, a return value, a container or an attribute;
 * - and which calls are forward passes at all: a method of a model that runs the model's
 *   layers (`model.pi(x)`, `agent.get_action_and_value(obs)`), as `model(x)` does.
 *
 * Every answer leans towards silence: what is not understood counts as a use that may need
 * the graph.
 */
import { track } from '../deps';
import type { FileModel, FunctionInfo } from '../model';
import { ancestors, child, contains, descendants, loopTypes, namedChildren, statementOf, unparen, type SyntaxNode } from '../syntax';
import { historyFreeBuiltins, historyFreeMethods, historyFreeTorch, lastName, lossFunction, moduleOnlyMethods, moduleSelfMethods, optimizerLike } from '../model/types';

/**
 * The `Variable(..., volatile=True)` an argument of this call is built from (through names,
 * `.cuda()` / `.to()` and other method calls, subscripts), if any.
 */
export function volatileInput(model: FileModel, call: SyntaxNode): SyntaxNode | undefined {
  const args = namedChildren(child(call, 'arguments') ?? call).map((a) => (a.type === 'keyword_argument' ? child(a, 'value') : a));
  for (const a of args) {
    const v = a && volatileSource(model, a, 0);
    if (v) return v;
  }
  return undefined;
}

function volatileSource(model: FileModel, expr: SyntaxNode, depth: number): SyntaxNode | undefined {
  const n = unparen(expr);
  if (depth > 6) return undefined;
  if (n.type === 'call') {
    const q = model.qualify(model.callee(n)) ?? '';
    if (/^torch\.autograd\.(variable\.)?Variable$/.test(q)) {
      const v = model.keywordArg(n, 'volatile');
      return v && model.src(v) === 'True' ? n : undefined;
    }
    const mc = model.methodCall(n);
    return mc ? volatileSource(model, mc.receiver, depth + 1) : undefined;
  }
  if (n.type === 'subscript') {
    const v = child(n, 'value');
    return v && volatileSource(model, v, depth + 1);
  }
  if (n.type === 'identifier') {
    let b = model.binding(model.src(n), n);
    // `x = x.cuda()` reads the `x` bound before that statement.
    if (b && (b.at === n || contains(b.at, n))) {
      const own = b.at;
      b = model.binding(model.src(n), own);
      if (b?.at === own) return undefined;
    }
    if (b?.value && !b.unpacked && b.at.order < n.order) return volatileSource(model, b.value, depth + 1);
  }
  return undefined;
}

/** Methods of a module named for running it on inputs: `predict`, `full_sort_predict`, `inference`, `encode`... (not `generate`: HF's and x-transformers' guard themselves) */
const inferenceMethod = /^(predict(_\w+)?|\w+_predict|inference|infer|decode|encode|embed(_\w+)?|classify|detect)$/;

/** Methods of a module that do not run it. */
const notForward = /^(state_dict|load_state_dict|zero_grad|apply|register_\w+|add_module|named_\w+|children|get_parameter|get_submodule|extra_repr|type|to_empty|init_\w+|initHidden|init|reset\w*|save\w*|load\w*)$/;

/**
 * `model.pi(x)`, `agent.get_action_and_value(obs)`: a call of a method, defined in the
 * workspace on a class, that itself calls a model (its own layers): a forward pass under
 * another name. A method no definition of which is seen is not one.
 */
export function forwardMethodCall(model: FileModel, call: SyntaxNode): boolean {
  const mc = model.methodCall(call);
  if (mc) return forwardMethod(model, mc, call);
  // `encode = trainer.gen_a.encode if opts.a2b else trainer.gen_b.encode`, then `encode(images)` (MUNIT's
  // test_batch.py): a model's method under a local name, each of the methods it may be.
  const callee = model.callee(call);
  if (callee?.type !== 'identifier') return false;
  // Most plain calls (`print`, `len`, a project function) have no such binding: asked of the scope's and the module's
  // bindings by name first, before a lookup of the one in force.
  const name = model.src(callee);
  const scope = model.scopeOf(call);
  const aliasValue = (d: { value: SyntaxNode | undefined }): boolean => !!d.value && /^(attribute|conditional_expression)$/.test(unparen(d.value).type);
  if (!model.bindingsIn(scope, name).some(aliasValue) && (scope === model.root || !model.bindingsIn(model.root, name).some(aliasValue))) return false;
  const b = model.binding(name, call);
  const v = b?.value && !b.unpacked ? unparen(b.value) : undefined;
  const options = v?.type === 'conditional_expression' ? [namedChildren(v)[0], namedChildren(v).at(-1)] : v ? [v] : [];
  return options.length > 0 && options.every((o) => {
    const a = o && unparen(o);
    const receiver = a?.type === 'attribute' ? child(a, 'object') : undefined;
    const method = a?.type === 'attribute' ? child(a, 'attribute') : undefined;
    return !!receiver && !!method && forwardMethod(model, { receiver, method: model.src(method) }, call);
  });
}

function forwardMethod(model: FileModel, mc: { receiver: SyntaxNode; method: string }, call: SyntaxNode): boolean {
  if (mc.method === 'forward' || moduleOnlyMethods.has(mc.method) || moduleSelfMethods.has(mc.method) || notForward.test(mc.method)) return false;
  const r = unparen(mc.receiver);
  if ((r.type !== 'identifier' && r.type !== 'attribute') || model.src(r) === 'self' || !model.isModelExpr(r, call)) return false;
  track(`fn:${mc.method}`);
  const defs = [...model.functionsHere(mc.method), ...model.facts.functionsNamed(mc.method)];
  // `self.model.predict(batch)` after `self.model.eval()`, its class outside the workspace (RecBole's models): a
  // module's inference method by its name, on a name known to hold a module (not by its name alone).
  if (defs.length === 0) return inferenceMethod.test(mc.method) && model.isKnownModule(r, call);
  // Other classes may define a method by that name (a replay memory's `sample`): the receiver is a model.
  return defs.some((f) => !!f.cls && f.model.isModuleClassInfo(f.cls) && !f.model.hasTrainingSignal(f.node) && f.model.callsIn(f.node).some((c) => c !== call && f.model.isModelCall(c) && f.model.gradState(c) !== 'off'));
}

/**
 * `net = torch.load('char-rnn.pt')` ... `net(x)`: calling what a whole-model checkpoint
 * loaded is a forward pass.
 */
export function loadedModuleCall(model: FileModel, call: SyntaxNode): boolean {
  const callee = model.callee(call);
  if (callee?.type !== 'identifier') return false;
  // `def checkpoint(acc, epoch)` after `checkpoint = torch.load(path)` in a resume branch: the name is the function.
  if (model.functionsHere(model.src(callee)).some((f) => !f.cls)) return false;
  const b = model.binding(model.src(callee), call);
  const v = b?.value && !b.unpacked ? unparen(b.value) : undefined;
  return v?.type === 'call' && /^torch\.(jit\.)?load$/.test(model.qualify(model.callee(v)) ?? '');
}

/** Output sinks that only read a tensor: printing, saving and plotting images, logging. */
const readingSinks = /^(print|save_image|make_grid|imsave|imwrite|imshow|matshow|savefig|plot|scatter|hist|add_image|add_images|add_figure|add_scalar|add_scalars|add_histogram|add_video|add_audio|add_text|set_description|set_postfix|chr|ord)$/;
/** What a tensor is rather than what it holds. */
const metadata = /^(shape|dtype|device|is_cuda|ndim|requires_grad|grad_fn|size|dim|numel|nelement|element_size)$/;
/** Methods that hand a tensor to autograd machinery or keep it. */
const keepingMethods = /^(register_hook|retain_grad|backward|requires_grad_|register_\w+)$/;

type Use = { kind: 'safe'; meta?: boolean } | { kind: 'escape' } | { kind: 'propagate'; node: SyntaxNode } | { kind: 'bind'; stmt: SyntaxNode; names: string[] };

/**
 * Is all that is done with the value of `call` (a model's forward) reading it? The value must
 * be held in a local name (so the graph outlives the statement) and every use, through the
 * names it flows into within the call's scope, must end in something that keeps no graph:
 * `.item()`, `.data`, `.detach()`, `.cpu().numpy()`, a comparison, `print`, `save_image`, a
 * numpy function, or another forward pass whose output is read the same way.
 */
export function onlyRead(model: FileModel, call: SyntaxNode): boolean {
  const scope = model.scopeOf(call);
  const body = scope === model.root ? scope : child(scope, 'body');
  if (!body) return false;
  if (scope === model.root) track('root*');
  const queue: SyntaxNode[] = [call];
  const seenStmts = new Set<SyntaxNode>();
  let held = false;
  let read = false;
  for (let budget = 0; queue.length; budget++) {
    if (budget > 400) return false;
    const n = queue.pop() as SyntaxNode;
    const use = useOf(model, n, n === call);
    switch (use.kind) {
      case 'escape':
        return false;
      case 'safe':
        // Only its size asked for (`print(y.size())` in a smoke test): not worth a warning.
        if (!use.meta) read = true;
        break;
      case 'propagate':
        queue.push(use.node);
        break;
      case 'bind': {
        if (seenStmts.has(use.stmt)) break;
        seenStmts.add(use.stmt);
        if (seenStmts.size > 30) return false;
        for (const name of use.names) {
          const uses = reachedUses(model, body, name, use.stmt);
          if (uses === undefined) return false;
          held = true;
          queue.push(...uses);
        }
        break;
      }
    }
  }
  return held && read;
}

/** Methods through which a tensor keeps whether it requires grad (and `.numpy()` on the result raises if it does). */
const gradKeeping = new Set(['cpu', 'cuda', 'to', 'float', 'double', 'half', 'squeeze', 'unsqueeze', 'view', 'reshape', 'flatten', 'permute', 'transpose', 'contiguous', 'clone', 'softmax', 'log_softmax', 'sigmoid', 'exp', 'tanh', 'mean', 'sum']);

/**
 * Does the forward's output, or a tensor made from it without leaving autograd (`out.cpu()`, `out[0].squeeze()`,
 * through local names), reach `.numpy()`? That raises on a tensor that requires grad ("Can't call numpy() on Tensor
 * that requires grad"), so where the code runs, this forward records no graph: its callers guard it, or its weights are
 * frozen where the analysis cannot see (pytorch-fid's InceptionV3 from a module outside the workspace, whose features
 * FID and Inception-score code reads with `pred.cpu().numpy()`).
 */
export function numpyRead(model: FileModel, call: SyntaxNode): boolean {
  const scope = model.scopeOf(call);
  const body = scope === model.root ? scope : child(scope, 'body');
  if (!body) return false;
  const queue: SyntaxNode[] = [call];
  const seen = new Set<SyntaxNode>();
  while (queue.length && seen.size < 20) {
    let cur = queue.pop() as SyntaxNode;
    for (;;) {
      const p = cur.parent;
      if (!p) break;
      if (p.type === 'parenthesized_expression' || (p.type === 'subscript' && cur.field === 'value')) {
        cur = p;
        continue;
      }
      if (p.type === 'attribute' && cur.field === 'object' && p.parent?.type === 'call' && p.field === 'function') {
        const method = model.src(child(p, 'attribute') ?? p);
        if (method === 'numpy') return true;
        if (!gradKeeping.has(method)) break;
        cur = p.parent;
        continue;
      }
      if (p.type === 'assignment' && cur.field === 'right') {
        const left = child(p, 'left');
        const stmt = statementOf(p);
        if (left?.type !== 'identifier' || !stmt || seen.has(stmt)) break;
        seen.add(stmt);
        const uses = reachedUses(model, body, model.src(left), stmt);
        if (uses) queue.push(...uses);
      }
      break;
    }
  }
  return false;
}

/** What the expression `n`'s value is used for, climbing through the expressions derived from it. */
function useOf(model: FileModel, n: SyntaxNode, isCall: boolean): Use {
  let cur = n;
  for (;;) {
    const p = cur.parent;
    if (!p) return { kind: 'escape' };
    switch (p.type) {
      case 'parenthesized_expression':
      case 'binary_operator':
      case 'unary_operator':
      case 'boolean_operator':
      case 'conditional_expression':
      case 'list':
      case 'tuple':
      case 'set':
      case 'expression_list':
      case 'pair':
      case 'dictionary':
      case 'list_splat':
        cur = p;
        continue;
      case 'comparison_operator':
      case 'not_operator':
        return { kind: 'safe' };
      case 'subscript':
        cur = p;
        continue;
      case 'attribute': {
        if (cur.field !== 'object') return { kind: 'escape' };
        const attr = child(p, 'attribute');
        const name = attr ? model.src(attr) : '';
        if (name === 'data') return { kind: 'safe' };
        if (metadata.test(name)) return { kind: 'safe', meta: true };
        const gp = p.parent;
        if (gp?.type === 'call' && p.field === 'function') {
          if (keepingMethods.test(name)) return { kind: 'escape' };
          if (historyFreeMethods.has(name)) return { kind: 'safe', meta: metadata.test(name) };
          cur = gp;
          continue;
        }
        cur = p;
        continue;
      }
      case 'argument_list':
        return argumentUse(model, p.parent, cur);
      case 'keyword_argument':
        if (cur.field !== 'value' || p.parent?.type !== 'argument_list') return { kind: 'escape' };
        return argumentUse(model, p.parent.parent, p);
      case 'assignment':
      case 'augmented_assignment': {
        if (cur.field !== 'right') return p.type === 'augmented_assignment' ? { kind: 'safe' } : { kind: 'escape' };
        const left = child(p, 'left');
        const stmt = statementOf(p);
        if (!left || !stmt || stmt.children.find((c) => c.named) !== p) return { kind: 'escape' };
        const names = localTargets(model, left);
        return names ? { kind: 'bind', stmt, names } : { kind: 'escape' };
      }
      case 'expression_statement':
        return isCall ? { kind: 'escape' } : { kind: 'safe' };
      case 'if_statement':
      case 'elif_clause':
      case 'while_statement':
      case 'assert_statement':
        return cur.field === 'condition' || p.type === 'assert_statement' ? { kind: 'safe' } : { kind: 'escape' };
      default:
        return { kind: 'escape' };
    }
  }
}

/** `f(..., value, ...)`: what the call does with the argument. */
function argumentUse(model: FileModel, call: SyntaxNode | null, arg: SyntaxNode): Use {
  if (!call || call.type !== 'call') return { kind: 'escape' };
  const callee = model.callee(call);
  // `nn.Upsample(scale_factor=2)(feat_map)`: a torch.nn layer built and applied at once passes its input's history on.
  if (callee?.type === 'call') {
    const layer = model.qualify(model.callee(callee)) ?? '';
    return /^torch\.nn\.[A-Z]\w*$/.test(layer) && !/Loss$/.test(layer) ? { kind: 'propagate', node: call } : { kind: 'escape' };
  }
  if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return { kind: 'escape' };
  const q = model.qualify(callee) ?? model.src(callee);
  const name = lastName(model.src(callee));
  if (lossFunction.test(q) || /^torch\.autograd\./.test(q)) return { kind: 'escape' };
  if (q.startsWith('torch.')) return historyFreeTorch.test(q) ? { kind: 'safe' } : { kind: 'propagate', node: call };
  if (q.startsWith('numpy.') || historyFreeBuiltins.has(q) || readingSinks.test(name)) return { kind: 'safe' };
  if (model.isLossExpr(callee)) return { kind: 'escape' };
  if (model.isModelCall(call) || forwardMethodCall(model, call) || loadedModuleCall(model, call)) return { kind: 'propagate', node: call };
  // `self.model.proj(x)`: a layer of a known model (an attribute, not a method the workspace defines).
  const mc = model.methodCall(call);
  if (mc && (mc.receiver.type === 'identifier' || mc.receiver.type === 'attribute') && model.src(mc.receiver) !== 'self' && model.isModelExpr(mc.receiver, call) && !notForward.test(mc.method) && !definesFunction(model, mc.method)) {
    return arg.type === 'keyword_argument' || model.positionalArgs(call).includes(arg) ? { kind: 'propagate', node: call } : { kind: 'escape' };
  }
  return { kind: 'escape' };
}

/** The plain local names an assignment target binds (`_` left out); undefined when it stores into an attribute or subscript. */
function localTargets(model: FileModel, left: SyntaxNode): string[] | undefined {
  const out: string[] = [];
  const walk = (t: SyntaxNode): boolean => {
    const n = unparen(t);
    switch (n.type) {
      case 'identifier': {
        const name = model.src(n);
        if (name !== '_' && !model.isGlobalIn(model.scopeOf(n), name)) out.push(name);
        return true;
      }
      case 'pattern_list':
      case 'tuple_pattern':
      case 'list_pattern':
      case 'tuple':
      case 'list':
      case 'list_splat_pattern':
      case 'list_splat':
        return namedChildren(n).every(walk);
      default:
        return false;
    }
  };
  return walk(left) ? out : undefined;
}

/**
 * The reads of `name` in `body` (a function's body, or the module) that the binding made by
 * `stmt` can reach, by the structure of the code: after it until a statement that rebinds the
 * name on every path, and, inside a loop, from the loop's start on the next iteration.
 * Undefined when a nested function or lambda reads it. Errs towards more reads.
 */
/** The reads of `name` in a scope's own code, in document order (one walk per scope, kept per tree); undefined when a closure reads it too. */
export function readsOfName(model: FileModel, scope: SyntaxNode, name: string): readonly SyntaxNode[] | undefined {
  const body = scope === model.root ? scope : child(scope, 'body');
  if (!body) return [];
  if (scope === model.root) track('root*');
  const entry = body === model.root ? rootNameUses(model, name) : namesIn(model, body).get(name);
  return entry?.nestedRead ? undefined : (entry?.reads ?? []);
}

function reachedUses(model: FileModel, body: SyntaxNode, name: string, stmt: SyntaxNode): SyntaxNode[] | undefined {
  const entry = body === model.root ? rootNameUses(model, name) : namesIn(model, body).get(name);
  if (!entry) return [];
  if (entry.nestedRead) return undefined;
  const { reads, kills } = entry;
  // A read u is cut off from the binding when a rebinding statement k lies between them (k starts at or
  // after `from`, ends before u) in a block that also holds u. Reads and kills are in document order and
  // kills do not nest, so one sweep keeps the furthest end of the blocks of the kills passed so far: u is
  // killed when it ends inside it. (Asking every kill for every read was reads × kills per binding, per
  // forward: a module of `x = model(x); x = model(x); …` took 800 ms for 5 KB, found by the fuzz bench.)
  const reachable = (first: number, from: number, until: number, out: SyntaxNode[]): void => {
    let k = firstAtOrAfter(kills, from);
    let cover = -1;
    for (let i = first; i < reads.length && reads[i].start < until; i++) {
      const u = reads[i];
      for (; k < kills.length && kills[k].end <= u.start; k++) {
        const kill = kills[k];
        if (kill !== stmt && kill.parent && kill.parent.end > cover) cover = kill.parent.end;
      }
      if (u.end <= cover) {
        if (cover >= body.end) return; // every later read in the scope is cut off too
        continue;
      }
      out.push(u);
    }
  };
  const out: SyntaxNode[] = [];
  // Inside a loop, the reads from the loop's start up to the binding are reached on the next iteration
  // (the innermost loop holding the read decides where its kills are counted from).
  const loops = [...ancestors(stmt)].filter((a) => loopTypes.has(a.type) && contains(body, a)).reverse();
  for (let j = 0; j < loops.length; j++) {
    const loop = loops[j];
    const inner = loops[j + 1];
    const before: SyntaxNode[] = [];
    reachable(firstAtOrAfter(reads, loop.start), loop.start, stmt.end, before);
    for (const u of before) if (!inner || !contains(inner, u)) out.push(u);
  }
  reachable(firstAtOrAfter(reads, stmt.end), stmt.end, Infinity, out);
  return out;
}

/** The index of the first node of `nodes` (in document order) that starts at or after `at`. */
function firstAtOrAfter(nodes: readonly SyntaxNode[], at: number): number {
  let lo = 0;
  let hi = nodes.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (nodes[mid].start < at) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

interface NameUses {
  /** The name's reads in the scope's own code. */
  readonly reads: SyntaxNode[];
  /** Statements `name = ...` (alone or among other targets) that rebind it. */
  readonly kills: SyntaxNode[];
  /** Read inside a nested function or lambda. */
  nestedRead: boolean;
}

const usesCache = new WeakMap<SyntaxNode, { end: number; count: number; names: Map<string, NameUses> }>();

/** Every name's reads and rebinding statements in a scope's body, gathered in one walk and kept per syntax tree. */
function namesIn(model: FileModel, body: SyntaxNode): Map<string, NameUses> {
  const cached = usesCache.get(body);
  if (cached && cached.end === body.end && cached.count === body.children.length) return cached.names;
  const names = new Map<string, NameUses>();
  const entry = (name: string): NameUses => {
    let e = names.get(name);
    if (!e) names.set(name, (e = { reads: [], kills: [], nestedRead: false }));
    return e;
  };
  // In document order, as `descendants` lists them, without its array of every node: the module's
  // scope walks every module-level function too (for their closures' reads). Class bodies are left out.
  const walk = (node: SyntaxNode, nested: boolean): void => {
    const stack: SyntaxNode[] = [];
    for (let i = node.children.length - 1; i >= 0; i--) stack.push(node.children[i]);
    while (stack.length > 0) {
      const n = stack.pop() as SyntaxNode;
      const type = n.type;
      if (type === 'function_definition' || type === 'lambda') {
        // Closures: a read inside one makes the name escape.
        walk(n, true);
        continue;
      }
      if (type === 'class_definition') continue;
      const children = n.children;
      for (let i = children.length - 1; i >= 0; i--) stack.push(children[i]);
      if (type === 'identifier') {
        if (!readsName(n)) continue;
        const e = entry(model.src(n));
        if (nested) e.nestedRead = true;
        else e.reads.push(n);
      } else if (type === 'assignment' && !nested) {
        const left = child(n, 'left');
        const s = statementOf(n);
        if (left && s && s.children.find((c) => c.named) === n) for (const t of boundNames(model, left)) entry(t).kills.push(s);
      }
    }
  };
  walk(body, false);
  usesCache.set(body, { end: body.end, count: body.children.length, names });
  return names;
}

const rootUsesCache = new WeakMap<SyntaxNode, { text: string; names: Map<string, NameUses | undefined> }>();

/**
 * `namesIn(model, model.root).get(name)`, from the name's own occurrences: the module's walk
 * (every node of the file, its functions' for their closures' reads, and a copy of every
 * identifier's text) took 100-130 ms of a warm lint of the 50,000-line file, to answer the few
 * names bound from module-level forwards. The text's occurrences of the name are found by
 * `indexOf`, each one's node by descending from the root by offset, and each identifier is
 * sorted as the walk would: left out inside a class, a closure's read inside a function or
 * lambda, else a read (not a target, attribute or keyword name) or a rebinding statement's target.
 * The same answers as the walk's (every name of the fixtures and the real-code corpus compared).
 */
function rootNameUses(model: FileModel, name: string): NameUses | undefined {
  const root = model.root;
  const text = model.text;
  let cached = rootUsesCache.get(root);
  if (cached?.text !== text) rootUsesCache.set(root, (cached = { text, names: new Map() }));
  const names = cached.names;
  if (names.has(name)) return names.get(name);
  // Each name searches the whole text: past a few (a file of module-level scripts), one walk for all is cheaper.
  if (names.size >= 8) return namesIn(model, root).get(name);
  let e: NameUses | undefined;
  const end = root.end;
  // The path from the root to the last occurrence's node: occurrences come in document order.
  const path: SyntaxNode[] = [root];
  for (let at = text.indexOf(name, root.start); at !== -1 && at + name.length <= end; at = text.indexOf(name, at + 1)) {
    // An identifier is a whole token: one that goes on is not this name.
    if (identChar(text.charCodeAt(at + name.length))) continue;
    const n = nodeAt(path, at);
    if (n.type !== 'identifier' || n.start !== at || n.end !== at + name.length) continue;
    let nested = false;
    let inClass = false;
    for (let a = n.parent; a && a !== root; a = a.parent) {
      if (a.type === 'class_definition') {
        inClass = true;
        break;
      }
      if (a.type === 'function_definition' || a.type === 'lambda') nested = true;
    }
    if (inClass) continue;
    if (readsName(n)) {
      e ??= { reads: [], kills: [], nestedRead: false };
      if (nested) e.nestedRead = true;
      else e.reads.push(n);
    }
    const kill = nested ? undefined : rebindingStatement(n);
    if (kill) (e ??= { reads: [], kills: [], nestedRead: false }).kills.push(kill);
  }
  names.set(name, e);
  return e;
}

function identChar(c: number): boolean {
  return (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57) || c === 95 || c > 127;
}

/** The deepest node at offset `at`, from `path` (the root's path to an earlier offset's node, updated in place). */
function nodeAt(path: SyntaxNode[], at: number): SyntaxNode {
  while (path.length > 1 && !(path[path.length - 1].start <= at && at < path[path.length - 1].end)) path.pop();
  for (;;) {
    const node = path[path.length - 1];
    const kids = node.children;
    let lo = 0;
    for (let hi = kids.length; lo < hi; ) {
      const mid = (lo + hi) >> 1;
      if (kids[mid].start <= at) lo = mid + 1;
      else hi = mid;
    }
    // The last child starting at or before `at` (empty nodes before it aside) holds it, if any does.
    let next: SyntaxNode | undefined;
    for (let i = lo - 1; i >= 0 && kids[i].start <= at; i--) {
      if (at < kids[i].end) {
        next = kids[i];
        break;
      }
      if (kids[i].end > kids[i].start) break;
    }
    if (!next) return node;
    path.push(next);
  }
}

/**
 * The statement `name = ...` that `n` (an identifier) is a target of, as `namesIn` counts one:
 * the statement's own assignment, `n` reached from its left side through the patterns and
 * parentheses `boundNames` looks through.
 */
function rebindingStatement(n: SyntaxNode): SyntaxNode | undefined {
  let cur = n;
  for (let a = n.parent; a; cur = a, a = a.parent) {
    if (a.type === 'parenthesized_expression') {
      if (namedChildren(a)[0] !== cur) return undefined;
      continue;
    }
    if (boundPatterns.has(a.type)) {
      if (!cur.named) return undefined;
      continue;
    }
    if (a.type !== 'assignment' || cur.field !== 'left' || child(a, 'left') !== cur) return undefined;
    const s = statementOf(a);
    return s && s.children.find((c) => c.named) === a ? s : undefined;
  }
  return undefined;
}

/** The patterns `boundNames` looks into. */
const boundPatterns = new Set(['pattern_list', 'tuple_pattern', 'list_pattern', 'tuple', 'list', 'list_splat_pattern', 'list_splat']);

/** Is this identifier a read of its name: not an attribute's or keyword's name, a definition's name, or a target? */
function readsName(n: SyntaxNode): boolean {
  const p = n.parent;
  if (p?.type === 'attribute' && n.field === 'attribute') return false;
  if (p?.type === 'keyword_argument' && n.field === 'name') return false;
  if (p?.type === 'function_definition' || p?.type === 'class_definition') return false;
  return !isTarget(n);
}

/** Is this identifier bound here (an assignment's or a `for`'s target), rather than read? */
function isTarget(n: SyntaxNode): boolean {
  for (let cur = n, a = n.parent; a; cur = a, a = a.parent) {
    if (a.type === 'assignment' || a.type === 'for_statement' || a.type === 'for_in_clause') return cur.field === 'left';
    if (!targetParts.has(a.type)) return false;
  }
  return false;
}

/** What an assignment's or a loop's target is made of around a name (`isTarget`). */
const targetParts = new Set(['pattern_list', 'tuple_pattern', 'list_pattern', 'tuple', 'list', 'list_splat_pattern', 'list_splat', 'parenthesized_expression']);

function boundNames(model: FileModel, left: SyntaxNode): string[] {
  const n = unparen(left);
  if (n.type === 'identifier') return [model.src(n)];
  if (boundPatterns.has(n.type)) return namedChildren(n).flatMap((c) => boundNames(model, c));
  return [];
}

/** Is a function or method by this name defined in the file or the workspace? */
function definesFunction(model: FileModel, name: string): boolean {
  track(`fn:${name}`);
  return model.functionsHere(name).length > 0 || model.facts.functionsNamed(name).length > 0;
}

/**
 * Does `within` (a scope, or a loop in one) run training steps: it calls `.backward()` / an
 * optimizer step, or a function of the project that runs one update per call
 * (`model.train_net()`)? A function that loops over its own batches (`train(epoch)`) makes the
 * caller an epoch loop instead.
 */
function trainsIn(model: FileModel, within: SyntaxNode): boolean {
  // Once per loop and file version: every forward in the loop asks.
  return model.nodeMemo(within, 'trainsIn', () => trainsInNow(model, within)) ?? false;
}

function trainsInNow(model: FileModel, within: SyntaxNode): boolean {
  const scope = within.type === 'function_definition' || within === model.root ? within : model.scopeOf(within);
  const calls = model.callsIn(scope);
  // The scope's calls are in document order: a loop's are a run of them, found by its start (a
  // module-level loop looked through every call of the module, once per loop).
  for (let i = within === scope ? 0 : firstAtOrAfter(calls, within.start); i < calls.length; i++) {
    const c = calls[i];
    if (within !== scope && c.start >= within.end) break;
    if (within !== scope && !contains(within, c)) continue;
    if (isUpdate(model, c)) return true;
    const callee = model.callee(c);
    if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) continue;
    const name = lastName(model.src(callee));
    // `x.forward(...)` is not every workspace module's forward by its name: one whose forward takes gradients (an
    // attacker's) would make any loop that runs a submodule's `.forward` a training step (as `calleeRunsBackward`).
    if (name === 'forward' || name === '__call__') continue;
    track(`fn:${name}`);
    const fns = [...model.functionsHere(name), ...model.facts.functionsNamed(name)];
    if (fns.some((f) => f.model.hasTrainingSignal(f.node) && !updatesPerEpoch(f))) return true;
  }
  return false;
}

/**
 * Is this forward part of a training step: inside a loop that trains, and not under a periodic
 * condition (`if step % 100 == 0:`, where sampling and evaluation run)? An RL rollout's action
 * is; a sample saved every N steps, or a test after the training loop, is not.
 */
export function inTrainingStep(model: FileModel, call: SyntaxNode): boolean {
  const scope = model.scopeOf(call);
  for (const a of ancestors(call)) {
    if (a === scope) return false;
    if ((a.type === 'if_statement' || a.type === 'elif_clause') && !contains(child(a, 'condition') ?? a, call)) {
      const cond = child(a, 'condition');
      if (cond && [cond, ...descendants(cond)].some((d) => d.type === 'binary_operator' && model.src(child(d, 'operator') ?? d) === '%')) return false;
    }
    if (loopTypes.has(a.type) && trainsIn(model, a)) return true;
  }
  return false;
}

/**
 * Is the forward at `call` part of one training step that its function runs once: neither it nor the function's
 * backward pass or optimizer step after it is in a loop of the function (DDPG's `learn()`: `self.target_actor.eval()`,
 * the target networks' forwards, then `critic_loss.backward()` and `optimizer.step()`)? A module put in `eval()`
 * there is a frozen part of the step, not an evaluation; a validation after a training loop has no update after it.
 */
export function stepUpdatesAfter(model: FileModel, call: SyntaxNode, fn: FunctionInfo): boolean {
  if (inLoopWithin(call, fn.node)) return false;
  return model.callsIn(fn.node).some((b) => b.start > call.end && isUpdate(model, b) && !inLoopWithin(b, fn.node));
}

function isUpdate(model: FileModel, call: SyntaxNode): boolean {
  const mc = model.methodCall(call);
  return (!!mc && (mc.method === 'backward' || mc.method === 'manual_backward' || (mc.method === 'step' && optimizerLike.test(model.src(mc.receiver))))) || model.scalerStep(call);
}

/** Does `f` update in a loop of its own that is an epoch (not one update repeated on the data it holds)? Once per function and version. */
function updatesPerEpoch(f: FunctionInfo): boolean {
  return f.model.nodeMemo(f.node, 'updatesPerEpoch', () => f.model.callsIn(f.node).some((b) => isUpdate(f.model, b) && inLoopWithin(b, f.node) && !repeatsOneUpdate(f.model, b, f.node))) ?? false;
}

/**
 * Is every loop of `fn` around the update `b` a `for _ in range(k)` that repeats the same update on data the
 * function already holds (PPO's `train_net()`: `for i in range(K_epoch)` over the batch made before it, `i` never
 * read, no `next()`)? Then a call of the function is one training step, not an epoch over a loader.
 */
function repeatsOneUpdate(model: FileModel, b: SyntaxNode, fn: SyntaxNode): boolean {
  for (const a of ancestors(b)) {
    if (a === fn) return true;
    if (!loopTypes.has(a.type)) continue;
    const right = a.type === 'for_statement' ? child(a, 'right') : undefined;
    const left = a.type === 'for_statement' ? child(a, 'left') : undefined;
    if (right?.type !== 'call' || model.src(model.callee(right) ?? right) !== 'range' || left?.type !== 'identifier') return false;
    const body = child(a, 'body');
    const index = model.src(left);
    if (!body || descendants(body).some((d) => (d.type === 'identifier' && model.src(d) === index) || (d.type === 'call' && model.src(model.callee(d) ?? d) === 'next'))) return false;
  }
  return false;
}

function inLoopWithin(node: SyntaxNode, outer: SyntaxNode): boolean {
  for (const a of ancestors(node)) {
    if (a === outer) return false;
    if (loopTypes.has(a.type)) return true;
  }
  return false;
}

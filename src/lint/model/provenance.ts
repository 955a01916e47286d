/**
 * Autograd provenance in a file's model (../model.ts): which values reach `.backward()`, carry
 * history or are scalars, training-step and evaluation loops, and accumulations.
 */
import { recorded, recordingNow, replay, track } from '../deps';
import { ancestors, child, contains, descendants, loopTypes, namedChildren, unparen, type SyntaxNode } from '../syntax';
import { accumulateMutators, type BackwardFacts, backwardOwners, type Binding, historyFreeAttributes, historyFreeBuiltins, historyFreeMethods, historyFreeTorch, lastName, lossFunction, type ModeEvent, optimizerLike, type Reaching, type ScopeData, torchFamily, trackKey } from './types';
import { ModelModels } from './models';
import { literalKey, moduleResultPlain, namedLikeModel, resolveCall, summaryCarries } from './summaries';

/** The scopes whose backward facts are being computed through a call of them (`backpropagatedArguments`). */
const backwardInProgress = new Set<SyntaxNode>();

/** Whether a `for` loop iterates an evaluation loader by its iterable's text (`evalLoaderLoopOf`), per loop node. */
const evalLoaderLoops = new WeakMap<SyntaxNode, boolean>();

/** Tensor methods that return `(values, indices)` when given a dimension or k: element 1 holds integer indices. */
const indexedResult = /^(topk|max|min|sort|kthvalue|mode|median|cummax|cummin)$/;

export abstract class ModelProvenance extends ModelModels {
  /** The definitions `definitionsCarry` is answering, outermost first (a cycle through them is neutral). */
  private readonly carrying = new Set<Binding>();

  // ---------------------------------------------------------------- backward and history

  protected backwardFacts(scope: SyntaxNode): BackwardFacts {
    const data = this.scopeData(scope);
    if (scope === this.root) track('root*');
    if (data.backward && (data.backwardDeps || !recordingNow())) {
      replay(data.backwardDeps);
      return data.backward;
    }
    const r = recorded(() => this.computeBackwardFacts(scope, data));
    data.backwardDeps = r.deps;
    return r.value;
  }

  /**
   * Which definitions flow into a backward pass. The receiver of `.backward()` (or the first
   * argument of `accelerator.backward`, `autograd.grad`) names the definitions that reach that
   * call (flow.ts), and every definition their values read reaches it too, transitively: the
   * `loss` of the training loop and the `out` it was computed from, not a validation loop's
   * `loss` or `out` that only share the name. A key no definition of the scope reaches (a
   * parameter, an attribute set elsewhere) is kept by its text, as before definitions were known.
   */
  protected computeBackwardFacts(_scope: SyntaxNode, data: ScopeData): BackwardFacts {
    const reachesDefs = new Set<Binding>();
    const reaches = new Set<string>();
    const scalarDefs = new Set<Binding>();
    const scalar = new Set<string>();
    let training = false;
    const work: Binding[] = [];
    const resolve = (node: SyntaxNode, defs: Set<Binding>, keys: Set<string>): void => {
      const key = this.src(node);
      const r = this.reachingDefs(key, node);
      if (!r || r.defs.length === 0 || r.entry) keys.add(key);
      for (const d of r?.defs ?? []) {
        if (defs.has(d)) continue;
        defs.add(d);
        if (defs === reachesDefs) work.push(d);
      }
    };
    const addKeys = (expr: SyntaxNode): void => {
      const n = unparen(expr);
      if (n.type === 'identifier' || n.type === 'attribute') resolve(n, reachesDefs, reaches);
      // A name is read where it is not an attribute's name: `out` in `out.view(-1)` is (the receiver of a method), `view` is not.
      for (const d of descendants(n)) if ((d.type === 'identifier' && readsValue(this, d)) || d.type === 'attribute') resolve(d, reachesDefs, reaches);
    };
    // The receivers of backward passes, for `sourceDefs`.
    const backpropagated: SyntaxNode[] = [];
    const addScalar = (e: SyntaxNode | undefined): void => {
      const n = e && unparen(e);
      if (n && (n.type === 'identifier' || n.type === 'attribute')) resolve(n, scalarDefs, scalar);
    };
    for (const call of data.calls) {
      const mc = this.methodCall(call);
      const q = this.qualify(this.callee(call)) ?? '';
      const first = this.positionalArgs(call)[0];
      if (mc?.method === 'backward' && first && backwardOwners.test(this.src(mc.receiver))) {
        // accelerator.backward(loss), fabric.backward(loss)
        training = true;
        addKeys(first);
        addScalar(first);
        backpropagated.push(first);
      } else if (mc?.method === 'backward') {
        training = true;
        addKeys(mc.receiver);
        backpropagated.push(mc.receiver);
        // `out.backward(grad)`, or `wrapper.backward(loss, model, opt)` of an owner not listed: what it is given may be backpropagated.
        if (first) addKeys(first);
        if (!first && !this.keywordArg(call, 'gradient')) addScalar(mc.receiver);
        // scaler.scale(loss).backward()
        const inner = unparen(mc.receiver);
        if (inner.type === 'call' && this.methodCall(inner)?.method === 'scale') addScalar(this.positionalArgs(inner)[0]);
      } else if (mc?.method === 'manual_backward' || /^torch\.autograd\.(grad|backward)$/.test(q)) {
        training = true;
        const out = first ?? this.keywordArg(call, 'outputs') ?? this.keywordArg(call, 'tensors');
        if (out) {
          addKeys(out);
          backpropagated.push(out);
        }
        if (mc?.method === 'manual_backward') addScalar(first);
      } else if (mc?.method === 'step' && optimizerLike.test(this.src(mc.receiver))) {
        training = true;
      } else if (first && this.scalerStep(call)) {
        // loss_scaler(loss, optimizer): the loss is backpropagated, a scalar.
        training = true;
        addKeys(first);
        addScalar(first);
        backpropagated.push(first);
      } else if (this.externalGradientCall(call)) {
        training = true;
        for (const a of this.positionalArgs(call)) addKeys(a);
      } else {
        // `hvp(loss, w, v)` whose `y` parameter it differentiates (`autograd.grad(y, w)`): the argument reaches that backward pass.
        for (const a of this.backpropagatedArguments(call)) addKeys(a);
      }
    }
    if (!training && this.stepsWhatItZeroes(data.calls)) training = true;
    // Close over definitions: `loss = crit(out, y)` reaching backward makes the `out` that reaches it reach it.
    // A loop's variable (`for l in terms: autograd.grad(l, params)`, also a comprehension's) holds the iterable's
    // elements: the iterable reaches the backward pass too (EWC's Fisher estimate keeps its log-likelihoods in a list
    // on purpose, to differentiate each after the loop).
    const closeOver = (): void => {
      for (let d = work.pop(); d; d = work.pop()) {
        if (d.value) addKeys(d.value);
        else if (d.at.type === 'for_statement' || d.at.type === 'for_in_clause') {
          const iterable = child(d.at, 'right');
          if (iterable) addKeys(iterable);
        }
      }
    };
    closeOver();
    // `loss += crit(out, y)` is no definition (flow.ts), but what it adds is in the value a definition of `loss` carries on
    // to the backward pass: its right-hand side reaches it where a definition reaching the update does.
    if (training && data.updates.length > 0) {
      const updates = [...data.updates];
      for (let changed = true; changed;) {
        changed = false;
        for (let i = 0; i < updates.length; i++) {
          const left = child(updates[i], 'left');
          const right = child(updates[i], 'right');
          if (!left || !right || (left.type !== 'identifier' && left.type !== 'attribute')) continue;
          const key = this.src(left);
          const r = this.reachingDefs(key, left);
          if (!r || !(r.defs.some((d) => reachesDefs.has(d)) || (r.entry && reaches.has(key)))) continue;
          updates.splice(i--, 1);
          changed = true;
          addKeys(right);
          closeOver();
        }
      }
    }
    const facts: BackwardFacts = { reachesDefs, reaches, scalarDefs, scalar, sourceDefs: this.soleSourceDefs(backpropagated), training };
    data.backward = facts;
    return facts;
  }

  /**
   * The arguments of a call of a project function (of this file) that backpropagates the
   * parameters they are passed for, itself (`def hvp(y, w, v): autograd.grad(y, w, ...)`).
   * None for a function whose facts are being computed (a recursion).
   */
  private backpropagatedArguments(call: SyntaxNode): SyntaxNode[] {
    const args = this.positionalArgs(call);
    if (args.length === 0 || !args.some((a) => a.type === 'identifier')) return [];
    const callee = this.callee(call);
    if (!callee || !(callee.type === 'identifier' || (callee.type === 'attribute' && /^self\.[A-Za-z_]\w*$/.test(this.src(callee))))) return [];
    // Most calls name no function of this file that trains (`print`, `len`, torch's): nothing to resolve.
    trackKey('fn:', lastName(this.src(callee)));
    if (!this.functionsHere(lastName(this.src(callee))).some((f) => this.hasTrainingSignal(f.node))) return [];
    const target = resolveCall(this, call);
    const fn = target?.fn;
    if (!fn || target.cls || fn.model !== this || backwardInProgress.has(fn.node) || !this.hasTrainingSignal(fn.node)) return [];
    backwardInProgress.add(fn.node);
    let reaches: ReadonlySet<string>;
    try {
      reaches = this.backwardFacts(fn.node).reaches;
    } finally {
      backwardInProgress.delete(fn.node);
    }
    const offset = target.bound ? 1 : 0;
    return args.filter((a, i) => a.type === 'identifier' && reaches.has(fn.params[i + offset] ?? ''));
  }

  /**
   * The definitions that are the only source of a backpropagated value, transitively: for
   * `loss = sum(losses) if isinstance(losses, tuple) else losses` with `loss.backward()`, the
   * definitions of `losses` that reach it, and for `losses = parts` the definitions of `parts`.
   * A value made from two names (`crit(out, y)`, `loss / n`) names neither: which one holds the
   * graph is not known. Literal and container definitions are starts or buffers, not sources.
   */
  protected soleSourceDefs(backpropagated: readonly SyntaxNode[]): Set<Binding> {
    const out = new Set<Binding>();
    const work: SyntaxNode[] = [...backpropagated];
    for (let e = work.pop(), budget = 64; e && budget > 0; e = work.pop(), budget--) {
      const sources = this.graphSources(e, 0);
      if (!sources || sources.length === 0) continue;
      const key = this.src(sources[0]);
      if (sources.some((n) => this.src(n) !== key)) continue;
      for (const n of sources) {
        for (const d of this.reachingDefs(key, n)?.defs ?? []) {
          if (out.has(d) || !d.value || d.unpacked || this.initialValue(d) || /^(list|tuple|dictionary|set|list_comprehension|dictionary_comprehension|set_comprehension|generator_expression)$/.test(unparen(d.value).type)) continue;
          out.add(d);
          work.push(d.value);
        }
      }
    }
    return out;
  }

  /**
   * The names and attributes an expression is computed from by operations that keep autograd
   * history (arithmetic, a reduction, a cast or move, an element, either branch of a
   * conditional), ignoring literals, conditions, indexes, dims and devices; undefined when
   * any part is something else (a call of an unknown function, a comprehension).
   */
  protected graphSources(expr: SyntaxNode, depth: number): SyntaxNode[] | undefined {
    const n = unparen(expr);
    if (depth > 8) return undefined;
    const all = (parts: (SyntaxNode | undefined)[]): SyntaxNode[] | undefined => {
      const out: SyntaxNode[] = [];
      for (const p of parts) {
        const s = p ? this.graphSources(p, depth + 1) : undefined;
        if (!s) return undefined;
        out.push(...s);
      }
      return out;
    };
    switch (n.type) {
      case 'identifier':
        return this.src(n) === 'self' ? undefined : [n];
      case 'attribute': {
        const attr = child(n, 'attribute');
        return attr && /^(data|grad)$/.test(this.src(attr)) ? undefined : [n];
      }
      case 'integer':
      case 'float':
        return [];
      case 'binary_operator':
        return all([child(n, 'left'), child(n, 'right')]);
      case 'unary_operator':
        return all([child(n, 'argument')]);
      case 'conditional_expression': {
        const parts = namedChildren(n);
        return parts.length === 3 ? all([parts[0], parts[2]]) : undefined;
      }
      case 'subscript':
        return all([child(n, 'value')]);
      case 'call': {
        const args = this.positionalArgs(n);
        const mc = this.methodCall(n);
        const q = this.qualify(this.callee(n)) ?? '';
        if (mc && !q.startsWith('torch.')) {
          // `loss.mean()`, `loss.to(device)`: the arguments are dims, dtypes, devices.
          if (/^(sum|mean|float|double|half|to|cuda|squeeze|unsqueeze|view|reshape|flatten|clone|contiguous)$/.test(mc.method)) return all([mc.receiver]);
          if (/^(mul|div|add|sub|pow)$/.test(mc.method)) return all([mc.receiver, ...args]);
          return undefined;
        }
        if ((q === 'sum' || /^torch\.(sum|mean|stack|cat|concat)$/.test(q)) && args.length === 1) return all(args);
        return undefined;
      }
      default:
        return undefined;
    }
  }

  /**
   * Does the value stored under `key` (in the scope of `at`) flow into a backward pass? May:
   * true when any definition that can reach `at` does, since a true answer silences the rules
   * that ask (an accumulator that is the loss, a forward whose graph is needed).
   */
  reachesBackward(key: string, at: SyntaxNode): boolean {
    const facts = this.backwardFacts(this.scopeOf(at));
    // Asked at a statement that binds `key` (`loss = crit(out, y)`, a loop that assigns it): the values it binds.
    if (at.type !== 'identifier' && at.type !== 'attribute') {
      const own = this.bindingsStartingIn(this.scopeOf(at), key, at.start, at.end).filter((b) => contains(at, b.target));
      if (own.length) return own.some((b) => facts.reachesDefs.has(b));
    }
    const r = this.reachingDefs(key, at);
    if (!r || r.defs.length === 0) return facts.reaches.has(key);
    return r.defs.some((d) => facts.reachesDefs.has(d)) || (r.entry && facts.reaches.has(key));
  }

  /** Does the definition `stmt` makes of `target` (or, for `x += v`, the value it updates) flow into a backward pass? */
  protected definitionReaches(target: SyntaxNode, stmt: SyntaxNode, facts: BackwardFacts): boolean {
    const key = this.src(target);
    const own = this.bindingsStartingIn(this.scopeOf(stmt), key, target.start, target.start).find((b) => b.target === target);
    return own ? facts.reachesDefs.has(own) : this.reachesBackward(key, stmt);
  }

  /** Does this scope call `.backward()`, `autograd.grad` or an optimizer step? */
  hasTrainingSignal(scope: SyntaxNode): boolean {
    // The same answer as `backwardFacts(scope).training`, from the scope's calls alone: no
    // reaching definitions are needed to see that a scope calls `.backward()` or `step()`.
    if (scope === this.root) track('root*');
    const data = this.scopeData(scope);
    if (data.backward) return data.backward.training;
    data.training ??= data.calls.some((call) => this.isTrainingSignal(call)) || this.stepsWhatItZeroes(data.calls);
    return data.training;
  }

  /**
   * `self.d.zero_grad(); ...; self.d.step()` (in either order): a receiver whose gradients the scope zeroes and which
   * it steps is an optimizer, whatever its name says (FUNIT's trainer, with its optimizers renamed).
   */
  private stepsWhatItZeroes(calls: readonly SyntaxNode[]): boolean {
    return this.zeroedSteps(calls).length > 0;
  }

  /** The `.step()` calls of receivers the same calls also `.zero_grad()`. */
  private zeroedSteps(calls: readonly SyntaxNode[]): SyntaxNode[] {
    let zeroed: Set<string> | undefined;
    let steps: SyntaxNode[] | undefined;
    for (const call of calls) {
      const mc = this.methodCall(call);
      if (mc?.method === 'zero_grad') (zeroed ??= new Set()).add(this.src(mc.receiver));
      else if (mc?.method === 'step') (steps ??= []).push(call);
    }
    if (!zeroed || !steps) return [];
    return steps.filter((c) => zeroed.has(this.src(this.methodCall(c)!.receiver)));
  }

  /** The calls of this scope that make it a training step (`hasTrainingSignal`'s, listed). */
  trainingSignals(scope: SyntaxNode): SyntaxNode[] {
    if (!this.hasTrainingSignal(scope)) return [];
    const calls = this.scopeData(scope).calls;
    const signals = calls.filter((call) => this.isTrainingSignal(call));
    if (signals.length > 0) return signals;
    // Only a step of what the scope zeroes (stepsWhatItZeroes): those steps.
    return this.zeroedSteps(calls);
  }

  /** A call that makes its scope a training step: `.backward()`, `manual_backward`, `autograd.grad`/`backward`, an optimizer's `step()`. */
  isTrainingSignal(call: SyntaxNode): boolean {
    const mc = this.methodCall(call);
    if (mc?.method === 'backward' || mc?.method === 'manual_backward') return true;
    if (/^torch\.autograd\.(grad|backward)$/.test(this.qualify(this.callee(call)) ?? '')) return true;
    if (mc?.method === 'step' && optimizerLike.test(this.src(mc.receiver))) return true;
    return this.scalerStep(call) || this.externalGradientCall(call);
  }

  /**
   * `loss_scaler(loss, optimizer, clip_grad=max_norm, parameters=model.parameters())`: timm's NativeScaler, as DeiT,
   * XCiT and the repositories built on them call it, scales the loss, runs its backward pass and steps the optimizer.
   * A callable named for a scaler, given a value and then an optimizer (`scaler.step(optimizer)` is a method call).
   */
  scalerStep(call: SyntaxNode): boolean {
    const callee = this.callee(call);
    if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return false;
    const name = lastName(this.src(callee));
    // `loss_scaler`, `scaler`, `amp_scaler`; not a function named for one (`_make_train_step_no_scaler(task, optimizer)`).
    if (!/^_*((loss|grad|amp|native)_?)?scaler$/i.test(name)) return false;
    const args = this.positionalArgs(call);
    if (args.length < 2 || !/optim|(^|[._])opt([._]|$)/i.test(this.src(args[1]))) return false;
    // A function of the project is analysed by its body instead.
    trackKey('fn:', name);
    return this.functionsHere(name).length === 0 && this.facts.functionsNamed(name).length === 0;
  }

  /**
   * `gradient_update_parameters(self.model, inner_loss, ...)` (torchmeta, MAML's inner step):
   * a library function outside torch named for gradients, given a model and a value: it
   * differentiates that value (with `autograd.grad`), so the forward that made it needs its graph.
   */
  private externalGradientCall(call: SyntaxNode): boolean {
    const callee = this.callee(call);
    if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return false;
    const name = lastName(this.src(callee));
    if (!/gradient/i.test(name)) return false;
    const q = this.qualify(callee) ?? '';
    // torch's own (`clip_grad_norm_` and the like) and the project's (whose body is analysed) are not this.
    trackKey('fn:', name);
    if (torchFamily.test(q) || this.functionsHere(name).length > 0 || this.facts.functionsNamed(name).length > 0) return false;
    const args = this.positionalArgs(call);
    return args.length >= 2 && args.some((a) => (a.type === 'identifier' || a.type === 'attribute') && this.isModelExpr(a, call));
  }

  /** Does the value of this model call flow into a backward pass (fine-tuning, saliency)? */
  callReachesBackward(call: SyntaxNode): boolean {
    if (this.calleeRunsBackward(call)) return true;
    const facts = this.backwardFacts(this.scopeOf(call));
    for (const a of ancestors(call)) {
      if (a.type === 'call') {
        const mc = this.methodCall(a);
        if (mc?.method === 'backward' && contains(mc.receiver, call) || (mc?.method === 'backward' && mc.receiver === call)) return true;
        const q = this.qualify(this.callee(a)) ?? '';
        if (/^torch\.autograd\.(grad|backward)$/.test(q)) return true;
      }
      if (a.type === 'assignment' || a.type === 'augmented_assignment') {
        const left = child(a, 'left');
        if (left && this.targets(left).some((t) => this.definitionReaches(t, a, facts))) return true;
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
  protected calleeRunsBackward(call: SyntaxNode): boolean {
    const callee = this.callee(call);
    if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return false;
    const name = lastName(this.src(callee));
    if (name === 'forward' || name === '__call__') return false;
    trackKey('fn:', name);
    const fns = [...this.functionsHere(name), ...this.facts.functionsNamed(name)];
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
        const r = this.reachingDefs(key, n);
        if (r && r.defs.length) return this.definitionsCarry(key, n, r, seen);
        if (this.backwardFacts(scope).scalar.has(key)) return true;
        if (n.type === 'attribute') {
          const attr = child(n, 'attribute');
          const name = attr ? this.src(attr) : '';
          if (historyFreeAttributes.test(name)) return false;
        }
        const b = this.binding(key, n);
        // `loss, parts = self.step_losses(batch)`: the element this name takes.
        if (b?.value && b.unpacked && unparen(b.value).type === 'call') return this.elementCarries(unparen(b.value), this.elementIndex(b.target, b.at), seen);
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
        // `get_gradients(batch)[0]`: the element a project function's summary knows, as for `grads, out = ...`.
        const call = v && unparen(v);
        const key = call?.type === 'call' ? literalKey(this, child(n, 'subscript')) : undefined;
        // `scores.topk(k)[1]`, `out.max(1)[1]`: the indices of a (values, indices) result are integers, with no history.
        if (call && key === '1' && indexedResult.test(this.methodCall(call)?.method ?? '')) return false;
        if (call && key !== undefined) return this.elementCarries(call, key, seen);
        return !!v && this.carriesHistory(v, seen);
      }
      case 'conditional_expression':
        // `train_loss if not sc_flag else reward.mean()`: a graph only when both branches hold one, as for
        // two definitions of a name on two paths (a float on one path does not leak every step).
        return namedChildren(n).length === 3 && [namedChildren(n)[0], namedChildren(n)[2]].every((c) => this.carriesHistory(c, seen));
      case 'await':
        return namedChildren(n).some((c) => this.carriesHistory(c, seen));
      default:
        return false;
    }
  }

  /**
   * Do the definitions of `key` that reach `at` carry history? Must, not may: every one of them
   * does (literal initial values aside, see `initialValue`), and none is made under `no_grad`
   * or rebinds the name to a number (`loss = loss.item()`). The rules that ask report a leak
   * when the answer is true, and a value that holds a graph on one path and a number on another
   * is not certain enough to report (the project's precision target is 0.95). A path from the
   * scope's entry (a parameter, an attribute) counts as unknown: no graph, unless the scope
   * calls `.backward()` on that value.
   */
  protected definitionsCarry(key: string, at: SyntaxNode, r: Reaching, seen: Set<number>): boolean {
    const facts = this.backwardFacts(this.scopeOf(at));
    let carried = false;
    for (const d of r.defs) {
      if (facts.scalarDefs.has(d) || facts.sourceDefs.has(d)) {
        carried = true;
        continue;
      }
      // A definition being answered already (`h = cell(x, h)` through the loop's back edge) neither adds nor vetoes.
      if (this.initialValue(d) || this.carrying.has(d)) continue;
      if (this.gradState(d.at) === 'off') return false;
      if (!d.value) {
        // `for step, out in enumerate(outputs)`: an element of a value with history.
        if (!this.loopElementCarries(d, seen)) return false;
        carried = true;
        continue;
      }
      this.carrying.add(d);
      try {
        if (!this.definitionValueCarries(d, new Set(seen))) return false;
      } finally {
        this.carrying.delete(d);
      }
      carried = true;
    }
    if (r.entry && !facts.scalar.has(key) && (at.type === 'attribute' || this.isParam(this.scopeOf(at), key) || this.isGlobalIn(this.scopeOf(at), key))) return false;
    return carried;
  }

  /**
   * Does the loop variable a `for` binds take elements of a value with history: `for out in
   * outputs` or `for step, out in enumerate(outputs)` over a local name (not a call: a loader,
   * `model.parameters()`), whose definitions carry history (the steps of a decoder's outputs)?
   */
  protected loopElementCarries(d: Binding, seen: Set<number>): boolean {
    if (d.at.type !== 'for_statement') return false;
    const left = child(d.at, 'left');
    let right = child(d.at, 'right');
    right = right && unparen(right);
    if (!left || !right) return false;
    if (left === d.target) return right.type === 'identifier' && this.carriesHistory(right, seen);
    if (right.type !== 'call' || this.src(this.callee(right) ?? right) !== 'enumerate') return false;
    const items = namedChildren(left);
    const seq = this.positionalArgs(right)[0];
    return (left.type === 'pattern_list' || left.type === 'tuple_pattern') && items.length === 2 && items[1] === d.target && seq?.type === 'identifier' && this.carriesHistory(seq, seen);
  }

  /**
   * A literal start value (`total = 0`, `h = None`, `acc = torch.zeros(1)`): on the paths where
   * it reaches, the value has no graph, but the definition does not compete with the others as
   * a provenance (an accumulator's start, a loop that may run zero times).
   */
  protected initialValue(d: Binding): boolean {
    const v = d.value && !d.unpacked ? unparen(d.value) : undefined;
    if (!v) return false;
    if (/^(integer|float|none|true|false|string)$/.test(v.type)) return true;
    if (v.type === 'unary_operator') return /^(integer|float)$/.test(namedChildren(v)[0]?.type ?? '');
    return v.type === 'call' && /^torch\.(zeros|ones|tensor|full|empty)$/.test(this.qualify(this.callee(v)) ?? '');
  }

  /** Does the value a definition binds carry history: for `a, b = f(x)`, the part `b` gets. */
  protected definitionValueCarries(d: Binding, seen: Set<number>): boolean {
    const value = unparen(d.value as SyntaxNode);
    if (!d.unpacked) return this.carriesHistory(value, seen);
    const pattern = d.target.parent;
    const index = pattern && (pattern.type === 'pattern_list' || pattern.type === 'tuple_pattern' || pattern.type === 'list_pattern') ? namedChildren(pattern).indexOf(d.target) : -1;
    if (index >= 0 && (value.type === 'expression_list' || value.type === 'tuple' || value.type === 'list')) {
      const items = namedChildren(value);
      if (pattern && items.length === namedChildren(pattern).length) return this.carriesHistory(items[index], seen);
    }
    if (value.type === 'call') return this.gradState(value) !== 'off' && this.callElementCarries(value, index >= 0 ? index : undefined, seen);
    return this.carriesHistory(value, seen);
  }

  /**
   * Does element `index` (a tuple position or a dict key) of this call's result carry history;
   * the whole result when `index` is undefined. A call of a project function answers by its
   * summary (model/summaries.ts); any other call as a whole.
   */
  callElementCarries(call: SyntaxNode, index: number | string | undefined, seen: Set<number> = new Set()): boolean {
    return this.elementCarries(call, index, seen);
  }

  protected elementCarries(call: SyntaxNode, index: number | string | undefined, seen: Set<number>): boolean {
    if (this.gradState(call) === 'off' || seen.has(call.order)) return false;
    const known = summaryCarries(this, call, index);
    return known ?? this.carriesHistory(call, seen);
  }

  /** The position of `target` in the tuple pattern of the assignment `at` (`a, b = ...`: `b` is 1); undefined when nested or starred. */
  protected elementIndex(target: SyntaxNode, at: SyntaxNode): number | undefined {
    const left = at.type === 'assignment' ? child(at, 'left') : undefined;
    if (!left || target.parent !== left) return undefined;
    const items = namedChildren(left);
    if (items.some((i) => i.type === 'list_splat_pattern')) return undefined;
    const i = items.indexOf(target);
    return i >= 0 ? i : undefined;
  }

  protected callCarries(call: SyntaxNode, seen: Set<number>): boolean {
    const callee = this.callee(call);
    if (!callee) return false;
    // A project function or class: what its summary says the result carries.
    if (!this.isModelCall(call) || namedLikeModel(this, call)) {
      const known = summaryCarries(this, call, undefined);
      if (known !== undefined) return known;
    } else if (moduleResultPlain(this, call)) return false;
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
      // `Categorical(probs).sample()`: sampling is not differentiable (`rsample` is).
      if (mc.method === 'sample' && this.isDistribution(mc.receiver, call)) return false;
      if (this.isModelExpr(callee, call)) return true;
      if (this.isLossExpr(callee)) return anyArg();
      return this.carriesHistory(mc.receiver, seen);
    }
    if (callee.type === 'identifier') {
      const name = this.src(callee);
      if (historyFreeBuiltins.has(q) || historyFreeBuiltins.has(name)) return false;
      if (q === 'sum' || q === 'max' || q === 'min') return anyArg();
      if (q.startsWith('torch.')) return historyFreeTorch.test(q) ? false : anyArg();
      // A layer or project module without weights (`lsm = nn.LogSoftmax(1)`, a mel filter bank): what its input carries.
      if (this.isParameterlessLayer(callee)) return anyArg();
      if (this.isModelExpr(callee, call)) return true;
      if (this.isLossExpr(callee)) return anyArg();
    }
    return false;
  }

  /** Is this a `torch.distributions` object: built here, or bound to one where it is read? */
  protected isDistribution(expr: SyntaxNode, at: SyntaxNode): boolean {
    const n = unparen(expr);
    let v: SyntaxNode | undefined = n;
    if (n.type === 'identifier') {
      const b = this.binding(this.src(n), at);
      v = b?.value && !b.unpacked ? unparen(b.value) : undefined;
    }
    return v?.type === 'call' && /^torch\.distributions\./.test(this.qualify(this.callee(v)) ?? '');
  }

  protected containsHistory(node: SyntaxNode, seen: Set<number>): boolean {
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
        const facts = this.backwardFacts(this.scopeOf(n));
        const r = this.reachingDefs(key, n);
        if (r && r.defs.length) {
          // Like definitionsCarry: every definition that reaches is a scalar (or a literal start value).
          if (r.defs.some((d) => facts.scalarDefs.has(d))) return true;
          const defs = r.defs.filter((d) => !this.initialValue(d));
          return defs.length > 0 && defs.every((d) => !!d.value && !d.unpacked && this.isScalar(d.value, depth + 1));
        }
        if (facts.scalar.has(key)) return true;
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
        if (right && this.iteratesLoader(right, loop)) return true;
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

  /**
   * Is a loop's iterable a data loader: named like one (`train_loader`, `dl`), or a local name
   * bound to a `DataLoader` or a torchtext batch iterator (`batch_iterator =
   * torchtext.data.BucketIterator(...)`)?
   */
  protected iteratesLoader(right: SyntaxNode, loop: SyntaxNode): boolean {
    if (/loader|dataloader|\bdl\b|_dl\b/i.test(this.src(right))) return true;
    const n = unparen(right);
    if (n.type !== 'identifier') return false;
    const b = this.binding(this.src(n), loop);
    const v = b?.value && !b.unpacked ? unparen(b.value) : undefined;
    return v?.type === 'call' && /^(torch\.utils\.data\.DataLoader|torchtext\.(legacy\.)?data\.(Bucket|BPTT)?Iterator)$/.test(this.qualify(this.callee(v)) ?? '');
  }

  /** The innermost enclosing step loop within the node's scope. */
  stepLoopOf(node: SyntaxNode): SyntaxNode | undefined {
    for (const a of ancestors(node)) {
      if (a.type === 'function_definition' || a.type === 'class_definition') return undefined;
      if (loopTypes.has(a.type) && this.isStepLoop(a)) return a;
    }
    return undefined;
  }

  /**
   * The loop around `node` (in its scope) that runs once per training step, the batch loop:
   * the innermost loop over a loader-like iterable or whose own body (not a nested loop's)
   * runs an optimizer step; else the innermost loop whose own body runs backward. An epoch
   * loop, which runs the batch loop, is not one: a value made in it lives for an epoch, and a
   * call in it after the batch loop runs once per epoch. Inside the batch loop, a loop over
   * micro-batches, time steps or loss heads is part of the step.
   */
  batchLoopOf(node: SyntaxNode): SyntaxNode | undefined {
    // A module's `forward` runs once per step: its loops (over chunks of its batch, time steps, layers) are inside the
    // step, even one that backpropagates each chunk (DALLE2's trainer module).
    const fn = this.functionOf(node);
    if (fn?.name === 'forward' && fn.cls && this.isModuleClassInfo(fn.cls)) return undefined;
    let backward: SyntaxNode | undefined;
    for (const a of ancestors(node)) {
      if (a.type === 'function_definition' || a.type === 'class_definition' || a.type === 'lambda') break;
      if (!loopTypes.has(a.type)) continue;
      const own = this.loopSignals(a);
      if (own.loader || own.step) return a;
      if (own.backward && !backward) backward = a;
    }
    // A `train_step()` that runs backward per micro-batch in a loop and steps the optimizer
    // after it is one step: its batch loop is the caller's.
    if (backward && this.callsIn(this.scopeOf(backward)).some((c) => !contains(backward, c) && this.isOptimizerStep(c))) return undefined;
    return backward;
  }

  /**
   * The loop whose one iteration a value made at `node` can live for, at most: the batch
   * loop, else an epoch loop around `node` (one that runs a batch loop, `node` being before or
   * after it). Undefined when neither: the value lives for one call or one step.
   */
  stepOrEpochLoopOf(node: SyntaxNode): SyntaxNode | undefined {
    const batch = this.batchLoopOf(node);
    if (batch) return batch;
    for (const a of ancestors(node)) {
      if (a.type === 'function_definition' || a.type === 'class_definition' || a.type === 'lambda') break;
      if (loopTypes.has(a.type) && this.runsBatchLoop(a)) return a;
    }
    return undefined;
  }

  isOptimizerStep(call: SyntaxNode): boolean {
    const mc = this.methodCall(call);
    return mc?.method === 'step' && optimizerLike.test(this.src(mc.receiver));
  }

  /**
   * The innermost loop around `node` (in its scope) whose own body runs backward or an
   * optimizer step: `node` is part of a training step (not merely in a loop over a loader).
   */
  trainingStepLoopOf(node: SyntaxNode): SyntaxNode | undefined {
    for (const a of ancestors(node)) {
      if (a.type === 'function_definition' || a.type === 'class_definition' || a.type === 'lambda') break;
      if (!loopTypes.has(a.type)) continue;
      const own = this.loopSignals(a);
      if (own.step || own.backward) return a;
    }
    return undefined;
  }

  /**
   * Does this loop run a batch loop: contain one (in its scope), or call a function of the
   * project that trains (`train_one_epoch(...)`)? Then it is an epoch loop.
   */
  runsBatchLoop(loop: SyntaxNode): boolean {
    return this.memo(`epochloop:${loop.order}`, () => {
      for (const d of descendants(loop, (x) => x.type === 'function_definition' || x.type === 'class_definition' || x.type === 'lambda')) {
        if (d.type === 'call' && this.calleeRunsBackward(d)) return true;
        if (!loopTypes.has(d.type)) continue;
        const own = this.loopSignals(d);
        if (own.loader || own.step || own.backward) return true;
      }
      return false;
    });
  }

  /**
   * The loop over a loader around `loop`, when `loop` itself iterates none: a loop that repeats an update on one
   * batch (`for _ in range(rep_discriminator)` inside `for mel, audio in loader`), whose values a reset in that
   * batch loop bounds to one batch.
   */
  loaderLoopAround(loop: SyntaxNode): SyntaxNode | undefined {
    if (this.loopSignals(loop).loader) return undefined;
    for (const a of ancestors(loop)) {
      if (a.type === 'function_definition' || a.type === 'class_definition' || a.type === 'lambda') break;
      if (loopTypes.has(a.type) && this.loopSignals(a).loader) return a;
    }
    return undefined;
  }

  /**
   * The innermost loop around `node` inside the step loop `step` when neither it nor any loop between it and `step`
   * backpropagates or steps an optimizer, nested loops included: a rollout (PPO's `for _ in range(num_local_steps)`
   * of forwards whose outputs are kept and only detached after it) rather than micro-batches or loss heads.
   */
  untrainedLoopIn(node: SyntaxNode, step: SyntaxNode): SyntaxNode | undefined {
    let inner: SyntaxNode | undefined;
    for (const a of ancestors(node)) {
      if (a === step) return inner;
      if (a.type === 'function_definition' || a.type === 'class_definition' || a.type === 'lambda') return undefined;
      if (!loopTypes.has(a.type)) continue;
      if (this.trainsWithin(a)) return undefined;
      inner ??= a;
    }
    return undefined;
  }

  /** Does the loop backpropagate or step an optimizer anywhere in its body (nested loops too)? */
  private trainsWithin(loop: SyntaxNode): boolean {
    return this.memo(`trainswithin:${loop.order}`, () => descendants(loop, (x) => x.type === 'function_definition' || x.type === 'class_definition' || x.type === 'lambda').some((d) => {
      const mc = d.type === 'call' ? this.methodCall(d) : undefined;
      return !!mc && ((mc.method === 'step' && optimizerLike.test(this.src(mc.receiver))) || mc.method === 'backward' || mc.method === 'manual_backward');
    }));
  }

  /** What a loop does itself: iterates a loader, runs an optimizer step or backward in its own body (not in a nested loop). */
  protected loopSignals(loop: SyntaxNode): { loader: boolean; step: boolean; backward: boolean } {
    return this.memo(`loopsignals:${loop.order}`, () => {
      const right = loop.type === 'for_statement' ? child(loop, 'right') : undefined;
      const out = { loader: !!right && this.iteratesLoader(right, loop), step: false, backward: false };
      for (const d of descendants(loop, (x) => x.type === 'function_definition' || x.type === 'class_definition' || x.type === 'lambda' || (x !== loop && loopTypes.has(x.type)))) {
        if (d.type !== 'call') continue;
        const mc = this.methodCall(d);
        if (!mc) continue;
        if (mc.method === 'step' && optimizerLike.test(this.src(mc.receiver))) out.step = true;
        else if (mc.method === 'backward' || mc.method === 'manual_backward') out.backward = true;
      }
      return out;
    });
  }

  /** The `x.eval()` in force at this call for its receiver, if any (no `x.train()` after it); `modelItself`: the call runs `calleeText` as a model, not a helper holding one. */
  evalEventFor(call: SyntaxNode, calleeText: string, modelItself = false): { order: number; receiver: string; assigned: boolean } | undefined {
    const scope = this.scopeOf(call);
    if (scope === this.root) track('root*');
    const events = this.scopeData(scope).modeEvents;
    if (events.length === 0) return undefined;
    const index = modeEventIndex(events);
    // The events before the call (they are in document order)…
    let cut = 0;
    for (let hi = events.length; cut < hi; ) {
      const mid = (cut + hi) >> 1;
      if (events[mid].at.order < call.order) cut = mid + 1;
      else hi = mid;
    }
    // …whose receiver is the callee, a prefix of it (`model` for `model.encoder`) or an extension of it: the last one. An
    // extension of a model called itself only through a wrapper (`model.module.eval()`): `model.module.patch_embed.eval()`
    // (XCiT's surgery fine-tuning) freezes a part of the model in a step that goes on training the rest. A helper's object
    // or argument holds its models (`self.model.eval()` before `self._process_one_batch(...)`): any of them.
    let last = Math.max(lastBefore(index.exact.get(calleeText), cut), lastBefore((modelItself ? index.wrapped : index.extended).get(calleeText), cut));
    for (let dot = calleeText.indexOf('.'); dot !== -1; dot = calleeText.indexOf('.', dot + 1)) last = Math.max(last, lastBefore(index.exact.get(calleeText.slice(0, dot)), cut));
    const e = last >= 0 ? events[last] : undefined;
    if (!e?.inference || this.freezesStatistics(events, last)) return undefined;
    return { order: e.at.order, receiver: e.receiver, assigned: e.at.type === 'assignment' };
  }

  /**
   * `norm.train(); norm(values); norm.eval(); values = norm(values)` (rl_games' running mean/std of
   * the returns): somewhere in the scope the receiver is switched to train mode and run there with
   * no backward pass or optimizer step before its next switch: it is used in train mode only to
   * update running statistics, so an `eval()` of it in the scope (that branch's, or another's:
   * `if freeze: norm.eval()`) freezes them within a computation; it does not start an evaluation.
   */
  private freezesStatistics(events: readonly ModeEvent[], at: number): boolean {
    const scope = this.scopeOf(events[at].at);
    // Once per scope and file version: every call after an `eval()` asks.
    return this.memo(`freezes:${scope.order}`, () => this.statisticsReceivers(events, this.scopeData(scope).calls)).has(events[at].receiver);
  }

  /** `freezesStatistics`' receivers of a scope: those run in train mode with no backward pass before their next switch. */
  private statisticsReceivers(events: readonly ModeEvent[], calls: readonly SyntaxNode[]): Set<string> {
    const out = new Set<string>();
    let c0 = 0;
    for (let i = 0; i < events.length; i++) {
      const receiver = events[i].receiver;
      if (events[i].inference || out.has(receiver)) continue;
      const from = events[i].at.order;
      let to = Infinity;
      for (let k = i + 1; k < events.length; k++) {
        if (events[k].receiver === receiver) {
          to = events[k].at.order;
          break;
        }
      }
      let ran = false;
      let trained = false;
      // Calls are in document order, and so are the events: start where the previous train event's scan did.
      while (c0 < calls.length && calls[c0].order <= from) c0++;
      for (let k = c0; k < calls.length && calls[k].order < to; k++) {
        const c = calls[k];
        if (this.isTrainingSignal(c)) {
          trained = true;
          break;
        }
        const callee = this.callee(c);
        if (callee && this.src(callee) === receiver) ran = true;
      }
      if (ran && !trained) out.add(receiver);
    }
    return out;
  }

  /** The outermost loop around `node` (in its scope) that iterates a validation/test loader. */
  evalLoaderLoopOf(node: SyntaxNode): SyntaxNode | undefined {
    let found: SyntaxNode | undefined;
    for (const a of ancestors(node)) {
      if (a.type === 'function_definition' || a.type === 'class_definition') break;
      if (a.type === 'for_statement') {
        // Syntax only (the loop's iterable's text), so once per loop node, kept as long as it is: asked per node inside it.
        let evalLoop = evalLoaderLoops.get(a);
        if (evalLoop === undefined) {
          const right = child(a, 'right');
          evalLoop = !!right && /(^|[^a-z])(val|valid|validation|dev|test|testing|eval|evaluation)_?(loader|dataloader|dl|data_loader|dataset|set|ds|batches|iter)/.test(this.src(right).toLowerCase());
          evalLoaderLoops.set(a, evalLoop);
        }
        if (evalLoop) found = a;
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
      if (op && this.textIs(op, '+=') && left && right) return { stmt, kind: 'add', target: left, value: right };
      return undefined;
    }
    if (expr.type === 'assignment') {
      const left = child(expr, 'left');
      const right = child(expr, 'right');
      if (!left || !right || (left.type !== 'identifier' && left.type !== 'attribute' && left.type !== 'subscript')) return undefined;
      const r = unparen(right);
      // The target's text is read only for the two shapes that compare it: most assignments are neither.
      if (r.type === 'binary_operator') {
        const op = child(r, 'operator');
        const a = child(r, 'left');
        const b = child(r, 'right');
        if (op && this.textIs(op, '+') && a && b) {
          const lt = this.src(left);
          if (this.src(unparen(a)) === lt) return { stmt, kind: 'add', target: left, value: b };
          if (this.src(unparen(b)) === lt) return { stmt, kind: 'add', target: left, value: a };
        }
      }
      if (r.type === 'call' && /^torch\.(cat|stack|concat|concatenate)$/.test(this.qualify(this.callee(r)) ?? '')) {
        const lt = this.src(left);
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

/** A scope's `x.eval()` / `x.train()` events by receiver: positions in the list, ascending. */
interface ModeEventIndex {
  /** By the receiver's text. */
  readonly exact: Map<string, number[]>;
  /** By each text the receiver extends with `.name` (`model` and `model.encoder` for `model.encoder.head`). */
  readonly extended: Map<string, number[]>;
  /** By each text the receiver extends with `.module` only (`model` for `model.module`): the model a wrapper holds. */
  readonly wrapped: Map<string, number[]>;
}

/** Per list of events: a scope's list does not change once its statement is indexed. */
const modeEventIndexes = new WeakMap<readonly ModeEvent[], ModeEventIndex>();

/**
 * Indexes a scope's mode events once, so that finding the one in force at a call does not scan
 * every earlier event (at module level that grew with calls × events).
 */
function modeEventIndex(events: readonly ModeEvent[]): ModeEventIndex {
  let index = modeEventIndexes.get(events);
  if (index) return index;
  index = { exact: new Map(), extended: new Map(), wrapped: new Map() };
  const add = (map: Map<string, number[]>, key: string, i: number): void => {
    const list = map.get(key);
    if (list) list.push(i);
    else map.set(key, [i]);
  };
  events.forEach((e, i) => {
    add(index.exact, e.receiver, i);
    for (let dot = e.receiver.indexOf('.'); dot !== -1; dot = e.receiver.indexOf('.', dot + 1)) {
      add(index.extended, e.receiver.slice(0, dot), i);
      if (/^(\.module)+$/.test(e.receiver.slice(dot))) add(index.wrapped, e.receiver.slice(0, dot), i);
    }
  });
  modeEventIndexes.set(events, index);
  return index;
}

/** The largest position in the ascending list below `cut`; -1 when none. */
function lastBefore(list: readonly number[] | undefined, cut: number): number {
  if (!list) return -1;
  let lo = 0;
  for (let hi = list.length; lo < hi; ) {
    const mid = (lo + hi) >> 1;
    if (list[mid] < cut) lo = mid + 1;
    else hi = mid;
  }
  return lo > 0 ? list[lo - 1] : -1;
}

/**
 * Is the name `d` read for its value on the way to a backward pass? Not an attribute's own name
 * (`view` in `out.view`), not `self`, and not a receiver whose attribute or method drops its history
 * (`real_features.detach()`, `out.item()`, `x.data`); a receiver of any other method is (`out.view(-1)`).
 */
function readsValue(model: ModelModels, d: SyntaxNode): boolean {
  const p = d.parent;
  if (p?.type !== 'attribute') return model.src(d) !== 'self';
  if (d.field !== 'object' || model.src(d) === 'self') return false;
  const attr = child(p, 'attribute');
  const name = attr ? model.src(attr) : '';
  return !historyFreeMethods.has(name) && !historyFreeAttributes.test(name);
}

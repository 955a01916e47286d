/**
 * Autograd provenance in a file's model (../model.ts): which values reach `.backward()`, carry
 * history or are scalars, training-step and evaluation loops, and accumulations.
 */
import { recorded, recordingNow, replay, track } from '../deps';
import { ancestors, child, contains, descendants, loopTypes, namedChildren, unparen, type SyntaxNode } from '../syntax';
import { accumulateMutators, backwardOwners, historyFreeBuiltins, historyFreeMethods, historyFreeTorch, lastName, lossFunction, type ModeEvent, optimizerLike, type ScopeData } from './types';
import { ModelModels } from './models';
import { namedLikeModel, summaryCarries } from './summaries';

export abstract class ModelProvenance extends ModelModels {
  // ---------------------------------------------------------------- backward and history

  protected backwardFacts(scope: SyntaxNode): { reaches: Set<string>; scalar: Set<string>; training: boolean } {
    const data = this.scopeData(scope);
    if (scope === this.root) track('root*');
    if (data.reachesBackward && data.scalarBackward && (data.backwardDeps || !recordingNow())) {
      replay(data.backwardDeps);
      return { reaches: data.reachesBackward, scalar: data.scalarBackward, training: !!data.trainingSignal };
    }
    return this.recordBackwardFacts(scope, data);
  }

  protected recordBackwardFacts(scope: SyntaxNode, data: ScopeData): { reaches: Set<string>; scalar: Set<string>; training: boolean } {
    const r = recorded(() => this.computeBackwardFacts(scope, data));
    data.backwardDeps = r.deps;
    return r.value;
  }

  protected computeBackwardFacts(_scope: SyntaxNode, data: ScopeData): { reaches: Set<string>; scalar: Set<string>; training: boolean } {
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
  protected calleeRunsBackward(call: SyntaxNode): boolean {
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

  /**
   * Does element `index` (a tuple position or a dict key) of this call's result carry history;
   * the whole result when `index` is undefined. A call of a project function answers by its
   * summary (model/summaries.ts); any other call as a whole.
   */
  callElementCarries(call: SyntaxNode, index: number | string | undefined): boolean {
    return this.elementCarries(call, index, new Set());
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
    }
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

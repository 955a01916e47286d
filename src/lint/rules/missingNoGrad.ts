/**
 * missing-no-grad: inference code calls a model without a grad guard, so autograd records
 * the forward pass and keeps every activation until the output is freed.
 */
import { addDecorator, rangeOf, torchSpelling, wrapStatement } from '../fixes';
import { callSitesOf, type FileModel, type FunctionInfo } from '../model';
import type { Rule } from '../rule';
import { ancestors, descendants, loopTypes, statementOf, type SyntaxNode } from '../syntax';
import { docsUrlFor, type Fix, type RawFinding } from '../types';
import { forwardMethodCall, inTrainingStep, loadedModuleCall, onlyRead, volatileInput } from './inferenceEvidence';

const id = 'missing-no-grad';
const inferenceName = /^_*(eval|valid|val_|test|predict|infer)/i;
const maxCallerDepth = 3;

export const rule: Rule = {
  id,
  defaultSeverity: 'warning',
  summary: 'Inference code calls a model without torch.no_grad() / torch.inference_mode().',
  explanation:
    'Without a grad guard, autograd records the forward pass: every layer keeps its input activations for a backward pass that never comes, ' +
    'so evaluation uses about as much GPU memory as training (often 2-3x the memory of a guarded forward) and can run out of memory on batches that would fit. ' +
    '`model.eval()` does not help: it only switches dropout and batch norm to inference behaviour. ' +
    'Wrap inference in `with torch.no_grad():` (or `torch.inference_mode()`), or decorate the function with `@torch.no_grad()`.',
  docsUrl: docsUrlFor(id),
  check,
};

type Context =
  | { kind: 'name'; fn: FunctionInfo }
  | { kind: 'loader'; loop: SyntaxNode }
  | { kind: 'eval'; receiver: string; order: number }
  | { kind: 'volatile'; variable: SyntaxNode }
  | { kind: 'read'; fn: FunctionInfo | undefined };

function check(model: FileModel): RawFinding[] {
  const findings: RawFinding[] = [];
  for (const call of model.targetCalls()) {
    if (!model.isModelCall(call) && !forwardMethodCall(model, call) && !loadedModuleCall(model, call)) continue;
    const mc = model.methodCall(call);
    const calleeNode = mc?.method === 'forward' ? mc.receiver : model.callee(call);
    if (!calleeNode) continue;
    const calleeText = model.src(calleeNode);
    const fn = model.functionOf(call);
    const context = contextOf(model, call, calleeText, fn);
    if (!context) continue;
    if (context.kind === 'name' && model.hasTrainingSignal(context.fn.node)) continue;
    if (context.kind === 'name' && (ownComputation(model, call, calleeText, context.fn) || oneOffInTest(model, call, context.fn))) continue;
    if (model.gradState(call) !== 'default') continue;
    if (frozenScript(model, calleeNode, call)) continue;
    // A `volatile=True` input could not be backpropagated when the code was written.
    if (model.callReachesBackward(call) && !volatileInput(model, call)) continue;
    if (fn && callersGuarded(fn, 1)) continue;
    findings.push({
      message: `\`${model.src(call).split('\n')[0]}\` runs ${describe(context, model)} without \`torch.no_grad()\`: autograd keeps every activation of this forward pass on the GPU.`,
      range: rangeOf(call),
      fixes: [fixFor(model, call, context, fn)],
    });
  }
  return findings;
}

function contextOf(model: FileModel, call: SyntaxNode, calleeText: string, fn: FunctionInfo | undefined): Context | undefined {
  if (fn && inferenceName.test(fn.name)) return { kind: 'name', fn };
  const loop = model.evalLoaderLoopOf(call);
  if (loop) return { kind: 'loader', loop };
  const e = model.evalEventFor(call, calleeText);
  if (e) return { kind: 'eval', receiver: e.receiver, order: e.order };
  const variable = volatileInput(model, call);
  if (variable) return { kind: 'volatile', variable };
  if (readOnlyForward(model, call, calleeText, fn)) return { kind: 'read', fn };
  return undefined;
}

/**
 * A forward whose output is only read (inferenceEvidence.ts: printed, saved, turned into
 * numbers), in code that is not the module's own computation (`self.layer(x)` in a method,
 * or any call in `forward`): sampling, visualisation, generation, a demo script.
 */
function readOnlyForward(model: FileModel, call: SyntaxNode, calleeText: string, fn: FunctionInfo | undefined): boolean {
  if (fn && (/^(forward|__call__)$/.test(fn.name) || (fn.cls && (calleeText === 'self' || calleeText.startsWith('self.')) && model.isModuleClassInfo(fn.cls)))) return false;
  if (!onlyRead(model, call)) return false;
  // In a training loop, a forward run every step (an RL rollout's action) is part of the step.
  return !inTrainingStep(model, call);
}

/**
 * `f = torch.jit.freeze(...)` / `torch.jit.optimize_for_inference(...)`: the weights are
 * folded into the graph as constants, so its forward records no autograd graph.
 */
function frozenScript(model: FileModel, callee: SyntaxNode, call: SyntaxNode): boolean {
  if (callee.type !== 'identifier') return false;
  const b = model.binding(model.src(callee), call);
  const v = b?.value && !b.unpacked ? b.value : undefined;
  return v?.type === 'call' && /^torch\.jit\.(freeze|optimize_for_inference)$/.test(model.qualify(model.callee(v)) ?? '');
}

/** Is there a loop between `node` and the function `fn` it is in? */
function inLoop(node: SyntaxNode, fn: FunctionInfo): boolean {
  for (const a of ancestors(node)) {
    if (a === fn.node) return false;
    if (loopTypes.has(a.type) || a.type === 'for_in_clause') return true;
  }
  return false;
}

/**
 * A method of an `nn.Module` subclass (`AdaptiveLogSoftmaxWithLoss.predict`) that runs the
 * module's own layers once, like `forward`: whether autograd records it is the caller's
 * choice, as for any forward pass. Calling `self(x)` (the whole model) in `predict` is
 * inference of the model, and so is a loop over batches.
 */
function ownComputation(model: FileModel, call: SyntaxNode, calleeText: string, fn: FunctionInfo): boolean {
  // `class AdaptiveLogSoftmaxWithLoss(Module)` inside torch imports Module relatively: a base named Module will do.
  if (!fn.cls || !(model.isModuleClassInfo(fn.cls) || fn.cls.bases.some((b) => /(^|\.)Module$/.test(model.src(b))))) return false;
  if (!calleeText.startsWith('self.')) return false;
  return !inLoop(call, fn);
}

/**
 * A test (`test_*`) that calls the model once and keeps nothing of the result beyond the
 * test: the graph lives for one statement or until the test returns, on a test-sized
 * model. Not worth a warning; a loop, a returned or stored output still is.
 */
function oneOffInTest(model: FileModel, call: SyntaxNode, fn: FunctionInfo): boolean {
  if (!/^test([_A-Z0-9]|$)/.test(fn.name) || inLoop(call, fn)) return false;
  const stmt = statementOf(call);
  if (!stmt || escapes(model, call, stmt)) return false;
  // `out = model(x)`, then `y = out.sum()`: those locals must not leave the test either.
  const assigned = assignedNames(model, call, stmt);
  if (assigned === undefined) return false;
  const locals = new Set(assigned);
  for (let changed = locals.size > 0; changed;) {
    changed = false;
    for (const n of descendants(fn.body ?? fn.node)) {
      if (n.type !== 'identifier' || !locals.has(model.src(n))) continue;
      if ((n.parent?.type === 'attribute' && n.field !== 'object') || (n.parent?.type === 'keyword_argument' && n.field === 'name')) continue;
      const use = statementOf(n);
      if (!use || use === stmt) continue;
      if (escapes(model, n, use)) return false;
      const more = assignedNames(model, n, use);
      if (more === undefined) return false;
      for (const m of more) {
        if (!locals.has(m)) {
          locals.add(m);
          changed = true;
        }
      }
    }
  }
  return true;
}

/** Does the value at `node` get returned, yielded, stored in an attribute/subscript/global, or added to a container? */
function escapes(model: FileModel, node: SyntaxNode, stmt: SyntaxNode): boolean {
  if (stmt.type === 'return_statement') return true;
  for (const a of ancestors(node)) {
    if (a.type === 'yield' || a.type === 'lambda') return true;
    if (a.type === 'call' && /^(append|extend|insert|add_|update|setdefault|put|add|copy_)$/.test(model.methodCall(a)?.method ?? '')) return true;
    if (a === stmt) break;
  }
  return false;
}

/**
 * The local names `stmt` binds from the value at `node` (`[]` when it binds nothing); undefined
 * when it stores it somewhere else (an attribute, a subscript, a global, an augmented target).
 */
function assignedNames(model: FileModel, node: SyntaxNode, stmt: SyntaxNode): string[] | undefined {
  if (/^(assert|if|while|delete|pass)_statement$/.test(stmt.type)) return [];
  if (stmt.type !== 'expression_statement') return undefined;
  const expr = stmt.children.find((c) => c.named);
  if (!expr) return undefined;
  if (expr.type !== 'assignment' && expr.type !== 'augmented_assignment') return [];
  const left = expr.children.find((c) => c.field === 'left');
  const right = expr.children.find((c) => c.field === 'right');
  if (!left || !right || !(right === node || right.start <= node.start && node.end <= right.end)) return [];
  if (expr.type === 'augmented_assignment') return undefined;
  const names: string[] = [];
  const scope = model.scopeOf(stmt);
  for (const t of [left, ...descendants(left)]) {
    if (t.type === 'attribute' || t.type === 'subscript') return undefined;
    if (t.type === 'identifier') {
      const name = model.src(t);
      if (model.isGlobalIn(scope, name)) return undefined;
      names.push(name);
    }
  }
  return names;
}

function describe(context: Context, model: FileModel): string {
  switch (context.kind) {
    case 'name':
      return `in \`${context.fn.name}()\``;
    case 'loader': {
      const right = context.loop.children.find((c) => c.field === 'right');
      return `in a loop over \`${right ? model.src(right) : 'the validation data'}\``;
    }
    case 'eval':
      return `after \`${context.receiver}.eval()\` (which does not turn off autograd)`;
    case 'volatile':
      return 'on a `volatile=True` input (ignored since PyTorch 0.4, so autograd records it)';
    case 'read':
      return `${context.fn ? `in \`${context.fn.name}()\`` : 'at module level'}, whose output is only read (printed, saved or turned into numbers),`;
  }
}

/** Is every call site of `fn` in the workspace guarded, directly or through its callers (up to 3 levels)? */
function callersGuarded(fn: FunctionInfo, depth: number): boolean {
  const sites = callSitesOf(fn);
  if (sites.length === 0) return false;
  return sites.every((s) => {
    const state = s.model.gradState(s.call);
    if (state !== 'default') return state === 'off';
    const caller = s.model.functionOf(s.call);
    return !!caller && depth < maxCallerDepth && callersGuarded(caller, depth + 1);
  });
}

function fixFor(model: FileModel, call: SyntaxNode, context: Context, fn: FunctionInfo | undefined): Fix {
  const allInference = fn && !model.hasTrainingSignal(fn.node) && (context.kind === 'name' || (context.kind === 'eval' && !hasTrainCall(model, fn)));
  if (fn && allInference) {
    const guard = torchSpelling(model, 'no_grad');
    return { title: `Decorate \`${fn.name}\` with \`@${guard.text}()\``, edits: [...guard.edits, addDecorator(model, fn, `${guard.text}()`)] };
  }
  const guard = torchSpelling(model, 'no_grad');
  const target = wrapTarget(model, call, context);
  return { title: `Wrap in \`with ${guard.text}():\``, edits: [...guard.edits, wrapStatement(model, target, `with ${guard.text}():`)] };
}

function hasTrainCall(model: FileModel, fn: FunctionInfo): boolean {
  return model.callsIn(fn.node).some((c) => model.methodCall(c)?.method === 'train');
}

/** The statement to wrap: the validation loop, or the outermost loop after `.eval()`, or the call's own statement. */
function wrapTarget(_model: FileModel, call: SyntaxNode, context: Context): SyntaxNode {
  if (context.kind === 'loader') return context.loop;
  let target: SyntaxNode | undefined;
  if (context.kind === 'eval') {
    for (const a of ancestors(call)) {
      if (a.type === 'function_definition' || a.type === 'class_definition') break;
      if (loopTypes.has(a.type) && a.order > context.order) target = a;
    }
  }
  return target ?? statementOf(call) ?? call;
}

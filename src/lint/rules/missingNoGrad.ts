/**
 * missing-no-grad: inference code calls a model without a grad guard, so autograd records
 * the forward pass and keeps every activation until the output is freed.
 */
import { addDecorator, rangeOf, torchSpelling, wrapStatement } from '../fixes';
import { callSitesOf, type FileModel, type FunctionInfo } from '../model';
import type { Rule } from '../rule';
import { ancestors, loopTypes, statementOf, type SyntaxNode } from '../syntax';
import { docsUrlFor, type Fix, type RawFinding } from '../types';

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
  | { kind: 'eval'; receiver: string; order: number };

function check(model: FileModel): RawFinding[] {
  const findings: RawFinding[] = [];
  for (const call of model.calls) {
    if (!model.isModelCall(call)) continue;
    const mc = model.methodCall(call);
    const calleeNode = mc?.method === 'forward' ? mc.receiver : model.callee(call);
    if (!calleeNode) continue;
    const calleeText = model.src(calleeNode);
    const fn = model.functionOf(call);
    const context = contextOf(model, call, calleeText, fn);
    if (!context) continue;
    if (context.kind === 'name' && model.hasTrainingSignal(context.fn.node)) continue;
    if (model.gradState(call) !== 'default') continue;
    if (model.callReachesBackward(call)) continue;
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
  return undefined;
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

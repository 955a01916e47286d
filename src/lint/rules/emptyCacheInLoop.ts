/** empty-cache-in-loop: `torch.cuda.empty_cache()` on every iteration. */
import { rangeOf, removeStatement } from '../fixes';
import { basename } from 'node:path';
import { callSitesOf, lastName, type CallSite, type ClassInfo, type FileModel, type FunctionInfo } from '../model';
import type { Rule } from '../rule';
import { ancestors, child, contains, descendants, isScopeNode, loopTypes, namedChildren, statementOf, unparen, type SyntaxNode } from '../syntax';
import { calleesOf, excusedInLoop, resolveCall, resolveInstanceCall } from '../model/summaries';
import { docsUrlFor, type RawFinding } from '../types';

const id = 'empty-cache-in-loop';

export const rule: Rule = {
  id,
  defaultSeverity: 'warning',
  summary: 'torch.cuda.empty_cache() runs every iteration: it frees no live memory and slows each step.',
  explanation:
    "`empty_cache()` only returns the caching allocator's unused blocks to the driver; tensors that are still referenced stay where they are, so it cannot fix a leak. " +
    'Called every iteration it forces the allocator to ask the driver for memory again on the next step (`cudaMalloc` is slow and synchronising) and it fragments memory. ' +
    'It is reasonable after the loop, in an out-of-memory `except` handler, or every N steps.',
  docsUrl: docsUrlFor(id),
  check(model: FileModel): RawFinding[] {
    const findings: RawFinding[] = [];
    for (const call of model.targetCalls()) {
      if (model.qualify(model.callee(call)) !== 'torch.cuda.empty_cache' && !acceleratorAlias(model, call)) continue;
      let inLoop: SyntaxNode | undefined;
      let excused = false;
      for (const a of ancestors(call)) {
        if (a.type === 'function_definition' || a.type === 'class_definition' || a.type === 'lambda') break;
        if (loopTypes.has(a.type)) {
          inLoop = a;
          break;
        }
        if (a.type === 'except_clause' || a.type === 'finally_clause') excused = true;
        if (a.type === 'if_statement' || a.type === 'elif_clause') {
          const cond = child(a, 'condition');
          if (cond && ((/%|\bstep\b|==/.test(model.src(cond)) && !deviceCheck(model.src(cond))) || memoryOption(model, cond))) excused = true;
        }
      }
      if (excused) continue;
      if (inLoop && !model.batchLoopOf(call)) {
        // In an epoch loop, before or after its batch loop: once per epoch, not every step.
        if (model.runsBatchLoop(inLoop)) continue;
        // In a loop that is no batch loop, before a loop of its own (DROID-SLAM's per-scene flush before a
        // per-frame tracking loop over a generator): once per outer item, where the inner loop is the step.
        if (besideInnerLoop(model, inLoop, call)) continue;
      }
      // Not in a loop, in a function that runs its own batch loop before or after the call (`train_epoch()` that
      // flushes after its loop): once per call of it, that is once per epoch, whatever loop calls it.
      if (!inLoop && ownBatchLoop(model, call)) continue;
      // Not in a loop of its own: in a method or `__call__` that a loop calls every iteration.
      const caller = inLoop ? undefined : loopingCaller(model, call);
      if (!inLoop && !caller) continue;
      const stmt = statementOf(call);
      if (stmt && leavesLoopAfter(stmt)) continue;
      findings.push({
        message: acceleratorAlias(model, call)
          ? `\`${model.src(call)}\` (the accelerator's \`empty_cache()\`) on every iteration frees no memory that is still in use and makes the next step allocate from the driver again.`
          : caller
          ? `\`torch.cuda.empty_cache()\` runs on every iteration of the loop that calls \`${caller.text}\` (${caller.where}): it frees no memory that is still in use and makes the next step allocate from the driver again.`
          : '`torch.cuda.empty_cache()` on every iteration frees no memory that is still in use and makes the next step allocate from the driver again.',
        range: rangeOf(call),
        fixes: stmt && stmt.type === 'expression_statement' ? [{ title: 'Remove the call', edits: [removeStatement(model, stmt)] }] : [],
      });
    }
    return findings;
  },
};

/**
 * A condition that tests which device runs (`if flair.device.type == "cuda":`), not how often:
 * it is true on every iteration of a GPU run.
 */
function deviceCheck(cond: string): boolean {
  return /\b(device|cuda|is_available|gpu)\b/i.test(cond) && !/%|\bstep\b|\biter|\bbatch|\bepoch/i.test(cond);
}

/**
 * A condition that reads the user's own option for flushing memory (Megatron-LM's `if args.empty_unused_memory_level
 * >= 1:`, `if free_memory_each_step:`): a setting named for it, not a call (`torch.cuda.memory_allocated()` measures,
 * it asks for nothing). The user opted in, usually off by default; the fix would delete the option.
 */
function memoryOption(model: FileModel, cond: SyntaxNode): boolean {
  for (const d of [cond, ...descendants(cond)]) {
    if (d.type !== 'identifier' && d.type !== 'attribute') continue;
    if (d.parent?.type === 'call' && d.parent.children.find((c) => c.field === 'function') === d) continue;
    if (d.type === 'identifier' && d.parent?.type === 'attribute') continue;
    if (/(^|_)(empty|free|clear|release|flush)(_|$)|(^|_)(mem|memory|cache)(_|$)/i.test(lastName(model.src(d)))) return true;
  }
  return false;
}

/**
 * `mod.empty_cache()` where `mod = torch.cuda` or `mod = getattr(torch, device_type, torch.cuda)`
 * (the CUDA, XPU or NPU module, chosen at run time).
 */
function acceleratorAlias(model: FileModel, call: SyntaxNode): boolean {
  const mc = model.methodCall(call);
  if (mc?.method !== 'empty_cache' || mc.receiver.type !== 'identifier') return false;
  const b = model.binding(model.src(mc.receiver), call);
  const v = b?.value && !b.unpacked ? unparen(b.value) : undefined;
  if (!v) return false;
  if (model.qualify(v) === 'torch.cuda') return true;
  if (v.type !== 'call' || model.src(model.callee(v) ?? v) !== 'getattr') return false;
  const [obj] = model.positionalArgs(v);
  return !!obj && model.qualify(obj) === 'torch';
}

/**
 * Does a loop follow `call` in `loop`'s body (in the same function): a flush at the start of each outer
 * item, before the loop that does its steps? (Not one after an inner loop that only post-processes each
 * batch's items: flair's `for sent in batch: ...` then `empty_cache()`, which runs every batch.)
 */
function besideInnerLoop(model: FileModel, loop: SyntaxNode, call: SyntaxNode): boolean {
  const body = child(loop, 'body');
  if (!body) return false;
  const after = descendants(body, isScopeNode).filter((d) => !contains(d, call) && d.start > call.end);
  // Or in a project function the item's work calls after the flush (LeViT's speed test: `empty_cache()`, then
  // `compute_throughput(name, model, ...)`, whose timing loops run the steps, through a name bound to one of two functions).
  return after.some((d) => loopTypes.has(d.type)) || after.some((d) => d.type === 'call' && calledFunctions(model, d).some((f) => !!f.body && descendants(f.body, isScopeNode).some((x) => loopTypes.has(x.type))));
}

/** The project functions a call runs: its callees, or, for a local name bound to functions (`compute = compute_cuda`), those. */
function calledFunctions(model: FileModel, call: SyntaxNode): FunctionInfo[] {
  const fns = calleesOf(model, call);
  const callee = model.callee(call);
  if (fns.length > 0 || callee?.type !== 'identifier') return fns;
  const named = (v: SyntaxNode | undefined): SyntaxNode[] => {
    const n = v && unparen(v);
    if (n?.type === 'identifier') return [n];
    // `f = compute_cpu if device == 'cpu' else compute_cuda`
    if (n?.type !== 'conditional_expression') return [];
    const [then, , otherwise] = namedChildren(n);
    return [...named(then), ...named(otherwise)];
  };
  return model.bindingsIn(model.scopeOf(call), model.src(callee)).flatMap((b) => named(b.value).flatMap((v) => model.functionsHere(model.src(v)).filter((f) => !f.cls)));
}

/** Does the function around `node` run a batch loop of its own (a loop over a loader, or one that steps an optimizer)? */
function ownBatchLoop(model: FileModel, node: SyntaxNode): boolean {
  const fn = model.functionOf(node);
  return !!fn && model.callsIn(fn.node).some((c) => model.functionOf(c) === fn && model.batchLoopOf(c) !== undefined);
}

/**
 * Does the iteration leave the loop (`break`, `return`, `raise`) after this statement, in its block or in an
 * enclosing one up to the loop's body, with no `continue` before? Then the call runs once per loop, or once per
 * attempt of a retry loop that only goes round again through an `except` (timm's validate.py: `try:
 * empty_cache(); results = validate(args); return results` in `while batch_size:`, smaller batch after an OOM).
 */
function leavesLoopAfter(stmt: SyntaxNode): boolean {
  for (let cur: SyntaxNode = stmt; cur.parent && !loopTypes.has(cur.parent.type) && !isScopeNode(cur.parent); cur = cur.parent) {
    if (cur.parent.type !== 'block') continue;
    const siblings = cur.parent.children;
    for (const s of siblings.slice(siblings.indexOf(cur) + 1)) {
      if (s.type === 'continue_statement') return false;
      if (s.type === 'break_statement' || s.type === 'return_statement' || s.type === 'raise_statement') return true;
    }
  }
  return false;
}

/**
 * A call, in a loop and not excused there (`except`, `if step % n == 0`), of the function that
 * contains `node` outside any loop of its own; through up to two more functions. A class's
 * `__call__` is called through its instances (`cleaner = MemoryCleaner()` ... `cleaner()`).
 */
function loopingCaller(model: FileModel, node: SyntaxNode, depth = 0): { text: string; where: string } | undefined {
  const fn = model.functionOf(node);
  if (!fn || depth > 2) return undefined;
  for (const site of fn.name === '__call__' && fn.cls ? instanceCalls(fn.cls) : callSitesOf(fn)) {
    const target = resolveCall(site.model, site.call) ?? resolveInstanceCall(site.model, site.call);
    if (target?.fn !== fn) continue;
    if (excusedInLoop(site.model, site.call, undefined)) continue;
    const inLoop = [...ancestors(site.call)].find((a) => isScopeNode(a) || loopTypes.has(a.type));
    if (inLoop && loopTypes.has(inLoop.type)) {
      const stmt = statementOf(site.call);
      if (stmt && leavesLoopAfter(stmt)) continue;
      // The call is in an epoch loop, before or after its batch loop (Deep-Metric-Learning-Baselines' per-epoch
      // `distance_measure.measure(model, epoch)` after `train_one_epoch(...)`): once per epoch, as for a flush written there.
      if (!site.model.batchLoopOf(site.call) && site.model.runsBatchLoop(inLoop)) continue;
      return { text: site.model.src(site.call).split('\n')[0], where: `${site.model === model ? 'line' : `${basename(site.model.path)}:`}${site.model === model ? ' ' : ''}${site.call.startRow + 1}` };
    }
    if (!inLoop) {
      const further = loopingCaller(site.model, site.call, depth + 1);
      if (further) return further;
    }
  }
  return undefined;
}

/** The calls of instances of `cls`: `x()` for every `x = Cls(...)` (or `self.x = Cls(...)`) in the workspace. */
function instanceCalls(cls: ClassInfo): CallSite[] {
  const out: CallSite[] = [];
  for (const made of cls.model.facts.callSites(cls.name)) {
    const assign = made.call.parent;
    const left = assign?.type === 'assignment' ? child(assign, 'left') : undefined;
    if (!left || (left.type !== 'identifier' && left.type !== 'attribute')) continue;
    const key = made.model.src(left);
    for (const use of made.model.facts.callSites(lastName(key))) {
      if (use.model === made.model && made.model.src(made.model.callee(use.call) ?? use.call) === key) out.push(use);
    }
  }
  return out;
}
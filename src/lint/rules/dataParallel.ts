/** data-parallel: `nn.DataParallel`, whose first GPU carries more memory than the others. */
import { rangeOf } from '../fixes';
import type { FileModel } from '../model';
import { moduleSelfMethods } from '../model/types';
import type { Rule } from '../rule';
import { child, contains, namedChildren, unparen } from '../syntax';
import type { SyntaxNode } from '../syntax';
import { docsUrlFor, type RawFinding } from '../types';

const id = 'data-parallel';

/** What a wrapper may be used for without ever running its forward: its inner module, its weights, moving it. */
const notRunning = new Set(['module', 'state_dict', 'load_state_dict', 'parameters', 'named_parameters', ...moduleSelfMethods]);

export const rule: Rule = {
  id,
  defaultSeverity: 'info',
  summary: 'nn.DataParallel puts the outputs, the loss and the optimizer state on GPU 0: memory is unbalanced.',
  explanation:
    '`nn.DataParallel` runs one process that scatters each batch, replicates the model on every forward pass, and gathers all outputs on the first device. ' +
    'GPU 0 therefore holds the gathered outputs, the loss, the gradients reduced there and the optimizer state, and runs out of memory while the others have room. ' +
    'PyTorch recommends `DistributedDataParallel` (one process per GPU, launched with `torchrun`), which keeps memory balanced and is faster. ' +
    'Not reported: a wrapper over one device (`device_ids=[0]`: its forward calls the module itself, nothing is scattered or gathered) and ' +
    'a wrapper that never runs (only its `.module`, `state_dict()` or `load_state_dict()` are used, to read or write checkpoints with `module.` keys).',
  docsUrl: docsUrlFor(id),
  check(model: FileModel): RawFinding[] {
    const findings: RawFinding[] = [];
    for (const call of model.targetCalls()) {
      const q = model.qualify(model.callee(call)) ?? '';
      if (!/^torch\.nn\.(parallel\.(data_parallel\.)?)?DataParallel$/.test(q)) continue;
      if (oneDevice(model, call) || neverRuns(model, call)) continue;
      findings.push({
        message: '`nn.DataParallel` gathers outputs and keeps the optimizer state on GPU 0, which runs out of memory first; prefer `DistributedDataParallel` with torchrun.',
        range: rangeOf(call),
        fixes: [],
      });
    }
    return findings;
  },
};

/** `DataParallel(net, device_ids=[0])`, or `device_ids` bound to a one-element list or tuple literal. */
function oneDevice(model: FileModel, call: SyntaxNode): boolean {
  let ids: SyntaxNode | undefined = model.keywordArg(call, 'device_ids') ?? model.positionalArgs(call)[1];
  if (ids?.type === 'identifier') {
    const b = model.binding(model.src(ids), call);
    ids = b?.value && !b.unpacked ? b.value : undefined;
  }
  ids = ids && unparen(ids);
  return (ids?.type === 'list' || ids?.type === 'tuple') && namedChildren(ids).length === 1 && !namedChildren(ids).some((c) => c.type === 'list_splat');
}

/**
 * `model = DataParallel(Net())` (or `.cuda()` on it) whose name is then only used as `model.module`,
 * `model.load_state_dict(...)`, `model.state_dict()`, `model.eval()`, ...: never called, passed on,
 * returned or stored, in a function or script that binds it once. A checkpoint helper, not training.
 */
function neverRuns(model: FileModel, call: SyntaxNode): boolean {
  let value = call;
  for (let p = value.parent; p; p = value.parent) {
    if (p.type === 'parenthesized_expression') value = p;
    else if (p.type === 'attribute' && child(p, 'object') === value && moduleSelfMethods.has(model.src(child(p, 'attribute')!)) && p.parent?.type === 'call') value = p.parent;
    else break;
  }
  const assignment = value.parent;
  const target = assignment?.type === 'assignment' && child(assignment, 'right') === value ? child(assignment, 'left') : undefined;
  if (target?.type !== 'identifier') return false;
  const name = model.src(target);
  const scope = model.scopeOf(call);
  // A module-level name may be imported and run by another file, unless it is bound only when the file runs as a script.
  if (scope.type === 'module' && !inMainBlock(model, assignment!)) return false;
  const body = scope.type === 'module' ? scope : child(scope, 'body');
  if (!body || model.isGlobalIn(scope, name)) return false;
  // Every use, nested functions included (a closure that calls it runs it).
  for (const n of identifiersNamed(model, name, body, value.end)) {
    // The wrapped model's own name in the wrapping call (`model = DataParallel(model)`) is the one before.
    if (n === target || !contains(body, n) || contains(value, n)) continue;
    if (anotherVariable(model, n, name, scope, target)) continue;
    const p = n.parent;
    if (p?.type === 'attribute' && child(p, 'object') === n) {
      const attr = model.src(child(p, 'attribute')!);
      const called = p.parent?.type === 'call' && child(p.parent, 'function') === p;
      // `model.cuda()` as a statement; `other = model.cuda()` would be the wrapper under another name.
      if (attr === 'module' || (called && notRunning.has(attr) && !(moduleSelfMethods.has(attr) && p.parent!.parent?.type !== 'expression_statement'))) continue;
      return false;
    }
    if (p?.type === 'keyword_argument' && child(p, 'name') === n) continue;
    if (p?.type === 'attribute' && child(p, 'attribute') === n) continue;
    return false;
  }
  return true;
}

/**
 * Is this `name` another variable than the wrapper's: in the wrapper's scope a use no path from the
 * wrapper's binding reaches (`ic.eval()` before `ic = DataParallel(ic)`), in a nested function a
 * parameter or local of that name.
 */
function anotherVariable(model: FileModel, n: SyntaxNode, name: string, scope: SyntaxNode, target: SyntaxNode): boolean {
  for (let s = model.scopeOf(n); s !== scope; s = model.scopeOf(s)) {
    if ((model.isParam(s, name) || model.bindingsIn(s, name).length > 0) && !model.isGlobalIn(s, name)) return true;
    if (s.type === 'module') return false;
  }
  const defs = model.reachingDefs(name, n)?.defs;
  return defs !== undefined && !defs.some((d) => d.target === target);
}

/**
 * The identifiers named `name` inside `within`, lazily, those after `from` first, then those before
 * it: found in the text (a word match, then the node at that offset) rather than by walking the tree,
 * and the uses after a wrapper (where a call would run it) first, so that the caller stops early.
 */
function* identifiersNamed(model: FileModel, name: string, within: SyntaxNode, from: number): Generator<SyntaxNode> {
  const word = /\w/;
  const text = model.text;
  for (const [start, end] of [[from, within.end], [within.start, from]]) {
    for (let at = text.indexOf(name, start); at >= 0 && at + name.length <= end; at = text.indexOf(name, at + name.length)) {
      if (word.test(text[at - 1] ?? '') || word.test(text[at + name.length] ?? '')) continue;
      const n = nodeAt(within, at);
      if (n?.type === 'identifier' && n.start === at && n.end === at + name.length) yield n;
    }
  }
}

/** The deepest node under `node` that starts at or spans `offset`. */
function nodeAt(node: SyntaxNode, offset: number): SyntaxNode | undefined {
  let n = node;
  for (;;) {
    const kids = n.children;
    let lo = 0;
    let hi = kids.length - 1;
    let next: SyntaxNode | undefined;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const k = kids[mid];
      if (k.end <= offset) lo = mid + 1;
      else if (k.start > offset) hi = mid - 1;
      else {
        next = k;
        break;
      }
    }
    if (!next) return n;
    n = next;
  }
}

/** Inside `if __name__ == '__main__':` (either quote, either order). */
function inMainBlock(model: FileModel, node: SyntaxNode): boolean {
  for (let p = node.parent, prev = node; p; prev = p, p = p.parent) {
    if (p.type !== 'if_statement' || prev.field !== 'consequence') continue;
    const cond = child(p, 'condition');
    if (cond && /^(__name__\s*==\s*(['"])__main__\2|(['"])__main__\3\s*==\s*__name__)$/.test(model.src(unparen(cond)))) return true;
  }
  return false;
}

/**
 * One step for both phases: a function (or a loop over phases) that trains or evaluates by a
 * condition, as in the PyTorch transfer-learning tutorial's `for phase in ['train', 'val']` or
 * `def step(phase, ...): train = phase == 'train'`:
 *
 *     if train: model.train()
 *     else: model.eval()
 *     out = model(x)              # runs in both phases
 *     loss = criterion(out, y)
 *     if train: loss.backward(); optimizer.step()
 *
 * The forward's output reaches a backward pass, but only in the training phase: in the other,
 * autograd records a graph nothing uses. The guard is `torch.set_grad_enabled(<condition>)`
 * around the forward, which changes nothing in the training phase.
 */
import { callSitesOf, type FileModel, type FunctionInfo } from '../model';
import { argumentFor, parameterDefault } from '../model/summaries';
import { ancestors, child, contains, unparen, type SyntaxNode } from '../syntax';

export interface Phase {
  /** The condition every training signal of the step is under, as written (`train`, `phase == 'train'`). */
  readonly condition: string;
  /** The condition as the file spells it, for the fix. */
  readonly source: string;
  /** The names the phase is read through: the condition's, and what a local flag was computed from (`train = phase == 'x'`). */
  readonly names: readonly string[];
  /** The other phase's switch to evaluation (`model.eval()`, `model.train(False)`). */
  readonly evalSwitch: SyntaxNode;
  /** For `for phase in [...]`: the loop; only forwards in its body run in both phases. */
  readonly loop: SyntaxNode | undefined;
  /** For a phase passed in: the parameter, and the argument that picks training (`True`, `'train'`; undefined: unknown). */
  readonly param?: { readonly name: string; readonly training: string | undefined };
}

/** `train`, `is_training`, `phase == 'train'` (a name compared with a string): the conditions a phase is chosen by. */
function phaseCondition(model: FileModel, cond: SyntaxNode | undefined): string | undefined {
  const c = cond && unparen(cond);
  if (!c) return undefined;
  if (c.type === 'identifier') return model.src(c);
  if (c.type !== 'comparison_operator') return undefined;
  const text = model.src(c);
  return /^([A-Za-z_]\w*)\s*==\s*(['"])[\w-]+\2$/.exec(text)?.[1] ?? /^(['"])[\w-]+\1\s*==\s*([A-Za-z_]\w*)$/.exec(text)?.[2];
}

const normal = (text: string): string => text.replace(/\s+/g, ' ').replace(/"/g, "'");

/** A condition as compared with another (`phase == "train"` and `phase == 'train'` alike): parentheses, spacing and quotes dropped. */
export function conditionText(model: FileModel, cond: SyntaxNode): string {
  return normal(model.src(unparen(cond)));
}

/** The phase-choosing `if` a node is in the body of (the nearest one), with its condition. */
function phaseIf(model: FileModel, n: SyntaxNode, within: SyntaxNode): { condition: string; source: string; name: string } | undefined {
  let prev = n;
  for (const a of ancestors(n)) {
    if (a === within) return undefined;
    if (a.type === 'if_statement' && prev.field === 'consequence') {
      const cond = child(a, 'condition');
      const name = phaseCondition(model, cond);
      if (name && cond) return { condition: conditionText(model, cond), source: model.src(unparen(cond)), name };
    }
    prev = a;
  }
  return undefined;
}

/**
 * The phase `fn` trains by, if its every training signal is under one phase condition, the other
 * phase switches a model to evaluation, and the condition's name is a parameter, a flag computed
 * once from parameters, or a loop variable over a literal list of phases. Once per function and
 * file version.
 */
export function phaseOf(fn: FunctionInfo): Phase | undefined {
  const model = fn.model;
  return model.fact(`phase:${fn.node.order}`, () => {
    const signals = model.trainingSignals(fn.node);
    if (signals.length === 0) return undefined;
    const found = phaseIf(model, signals[0], fn.node);
    if (!found || signals.some((s) => phaseIf(model, s, fn.node)?.condition !== found.condition)) return undefined;
    const name = found.name;
    const names = [name];
    const bindings = model.bindingsIn(fn.node, name);
    let loop: SyntaxNode | undefined;
    const literal = (text: string): string | undefined => /'[\w-]+'/.exec(normal(text))?.[0];
    let param: Phase['param'];
    if (bindings.length === 1) {
      const b = bindings[0];
      if (b.at.type === 'for_statement') {
        // `for phase in ['train', 'val']:` (or a tuple): the phases are the literal's strings.
        const right = child(b.at, 'right');
        const list = right && unparen(right);
        if (!list || (list.type !== 'list' && list.type !== 'tuple') || !/^[[(]\s*(['"][\w-]+['"]\s*,?\s*)+[\])]$/.test(model.src(list))) return undefined;
        if (unparen(child(b.at, 'left') ?? b.at) !== b.target) return undefined;
        loop = b.at;
      } else {
        // `train = (phase == 'train_no_dev')`: a flag computed once from the parameters.
        if (!b.value || b.unpacked || b.target.type !== 'identifier') return undefined;
        const read = model.src(b.value).match(/[A-Za-z_]\w*/g) ?? [];
        const params = read.filter((r) => fn.params.includes(r));
        if (params.length === 0) return undefined;
        for (const p of params) if (model.bindingsIn(fn.node, p).length > 0) return undefined;
        names.push(...params);
        const value = normal(model.src(unparen(b.value)));
        if (params.length === 1) param = { name: params[0], training: new RegExp(`^(${params[0]} == '[\\w-]+'|'[\\w-]+' == ${params[0]})$`).test(value) ? literal(value) : undefined };
      }
    } else if (bindings.length > 1 || !fn.params.includes(name)) {
      return undefined;
    } else {
      param = { name, training: found.condition === name ? 'True' : literal(found.condition) };
    }
    const evalSwitch = model.callsIn(fn.node).find((c) => model.functionOf(c) === fn && switchesToEval(model, c) && inOtherPhase(model, c, found.condition, fn.node));
    if (!evalSwitch) return undefined;
    return { condition: found.condition, source: found.source, names, evalSwitch, loop, param };
  });
}

function switchesToEval(model: FileModel, call: SyntaxNode): boolean {
  const mc = model.methodCall(call);
  if (mc?.method === 'eval') return model.positionalArgs(call).length === 0;
  if (mc?.method === 'train') {
    const args = model.positionalArgs(call);
    const mode = args[0] ?? model.keywordArg(call, 'mode');
    return !!mode && model.src(mode) === 'False';
  }
  return false;
}

/** Is `call` in an `else`/`elif` of an `if <condition>:` (the same condition, as written)? */
function inOtherPhase(model: FileModel, call: SyntaxNode, condition: string, within: SyntaxNode): boolean {
  let prev = call;
  for (const a of ancestors(call)) {
    if (a === within) return false;
    if (a.type === 'if_statement' && prev.field === 'alternative') {
      const cond = child(a, 'condition');
      if (cond && conditionText(model, cond) === condition) return true;
    }
    prev = a;
  }
  return false;
}

/**
 * The phase a forward at `call` in `fn` runs in both of: not inside an `if` (or a conditional
 * expression) that reads the phase, inside the phase loop when there is one, and in a function
 * some of whose evaluation-phase calls are unguarded.
 */
export function sharedPhaseOf(model: FileModel, call: SyntaxNode, fn: FunctionInfo | undefined): Phase | undefined {
  if (!fn) return undefined;
  const phase = phaseOf(fn);
  if (!phase) return undefined;
  if (phase.loop) {
    const body = child(phase.loop, 'body');
    if (!body || !contains(body, call)) return undefined;
  }
  const reads = new RegExp(`\\b(${phase.names.join('|')})\\b`);
  for (const a of ancestors(call)) {
    if (a === fn.node) break;
    if (a.type === 'if_statement' || a.type === 'elif_clause' || a.type === 'while_statement' || a.type === 'conditional_expression' || a.type === 'boolean_operator') {
      const cond = a.type === 'conditional_expression' || a.type === 'boolean_operator' ? a : child(a, 'condition');
      if (cond && reads.test(model.src(cond))) return undefined;
    }
  }
  return evaluatedUnguarded(fn, phase) ? phase : undefined;
}

/**
 * For a phase chosen by a parameter: is some call of `fn` that may choose the evaluation phase
 * (passing anything but the training value, or passing nothing where the default is not it)
 * made with autograd on? True where `fn` has no known callers. Arguments are read from the
 * source, the parameter's default where the call passes none.
 */
function evaluatedUnguarded(fn: FunctionInfo, phase: Phase): boolean {
  if (!phase.param) return true;
  const { name, training } = phase.param;
  const sites = callSitesOf(fn);
  if (sites.length === 0) return true;
  return sites.some((s) => {
    const arg = argumentFor(s.model, s.call, { fn, cls: undefined, bound: s.model.callee(s.call)?.type === 'attribute' }, name) ?? parameterDefault(fn, name);
    // The training phase's own calls: `step(True, ...)`, `run_epoch('train', ...)`; and `run(loader, train=False)`,
    // which missing-no-grad reports at that call (its flag-off call), not again at the forward inside.
    if (arg && training !== undefined && normal(s.model.src(arg)) === training) return false;
    if (arg && training === 'True' && s.model.src(arg) === 'False') return false;
    return s.model.gradState(s.call) === 'default';
  });
}

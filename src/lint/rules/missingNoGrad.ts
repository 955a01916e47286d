/**
 * missing-no-grad: inference code calls a model without a grad guard, so autograd records
 * the forward pass and keeps every activation until the output is freed.
 */
import { addDecorator, rangeOf, torchSpelling, wrapStatement } from '../fixes';
import { callSitesOf, lastName, type FileModel, type FunctionInfo } from '../model';
import { parameterDefault } from '../model/types';
import type { Rule } from '../rule';
import { ancestors, child, descendants, isScopeNode, loopTypes, namedChildren, statementOf, unparen, type SyntaxNode } from '../syntax';
import { showsGpu } from './tensorsKeptForLogging';
import { argumentFor, classOfValue, methodOf, namedLikeModel, resolveCall, resolveInstanceCall, runsForward, runsTrainingStep } from '../model/summaries';
import { decorateSafe, functionStatus, resolveCallee, returnsFrom, sitesOf, trains, wrapSafe } from '../trainingPath';
import { docsUrlFor, type Fix, type RawFinding } from '../types';
import { forwardMethodCall, inTrainingStep, loadedModuleCall, numpyRead, onlyRead, stepUpdatesAfter, volatileInput } from './inferenceEvidence';
import { conditionText, phaseOf, sharedPhaseOf, type Phase } from './sharedPhase';

const id = 'missing-no-grad';
const inferenceName = /^_*(eval|valid|val_|test|predict|infer|detect)/i;
/** Generation and sampling: inference when the function decodes in a loop or returns nothing (it saves or prints what it made). */
const generationName = /^_*(generate|sample|translate|greedy|beam_?search)/i;
const maxCallerDepth = 3;
/** `get_model(name, n_classes)`, `build_network(cfg)`: builds a model (calling the class it looked up), runs none. */
const builderName = /^_*(load|create|build|get|make|init|initialize|setup|define|instantiate|construct|prepare|new)_(model|net|network|module|arch|backbone|classifier|generator|discriminator|encoder|decoder)s?$/i;

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
  | { kind: 'eval'; receiver: string; order: number; assigned: boolean }
  /** A helper with no evaluation context of its own that only evaluation calls (`embed()` from `evaluate()`). */
  | { kind: 'caller'; fn: FunctionInfo; /** `evaluate()`, or the script. */ caller: string }
  | { kind: 'volatile'; variable: SyntaxNode }
  | { kind: 'read'; fn: FunctionInfo | undefined }
  /** `run_epoch(loader, train=False)`, `run_epoch(model, loader, loss_fn, None)`: a function that trains only when its flag is set, called with it off (`False` or `None`; `defaulted`: by leaving the parameter's default). */
  | { kind: 'flag'; param: string; value: string; defaulted: boolean }
  /** A step for both phases (`if train: loss.backward()`, `model.eval()` otherwise): the forward runs in both (sharedPhase.ts). */
  | { kind: 'phase'; phase: Phase; fn: FunctionInfo };

/** A forward pass a call runs: a model called directly, or a project function (`forward_batch(model, b)`) that runs one nobody reports. */
interface Forward {
  readonly calleeNode: SyntaxNode;
  /** The texts an `x.eval()` before the call must name: the model, or the helper's arguments. */
  readonly texts: readonly string[];
  /** The helper that runs the forward, for a call of one. */
  readonly via?: FunctionInfo;
  /** `via`'s parameter that turns its training step on, off here (`flagOffForward`): its name, the value, whether by default. */
  readonly flag?: { readonly param: string; readonly value: string; readonly defaulted: boolean };
}

/** `none`: not reported here, for a caller that only asks whether it is (`reportOnly`); safe or unreported, not decided. */
type Verdict = { kind: 'report'; context: Context; fn: FunctionInfo | undefined } | { kind: 'safe' } | { kind: 'unreported' } | { kind: 'none' };

function check(model: FileModel): RawFinding[] {
  const findings: RawFinding[] = [];
  for (const call of model.targetCalls()) {
    // `with model_eval_mode(model):` (composer's): a context manager, named like a model or not, runs no forward pass.
    if (contextManager(call)) continue;
    const fwd = forwardOf(model, call, true);
    if (!fwd) continue;
    const verdict = judge(model, call, fwd, true);
    if (verdict.kind !== 'report') continue;
    const { context, fn } = verdict;
    const fix = fixFor(model, call, context, fn);
    const runs = fwd.via ? `runs a model's forward pass (in \`${fwd.via.cls ? `${fwd.via.cls.name}.` : ''}${fwd.via.name}()\`) ${describe(context, model)}` : `runs ${describe(context, model)}`;
    findings.push({
      message: `\`${model.src(call).split('\n')[0]}\` ${runs} without \`torch.no_grad()\`: autograd keeps every activation of this forward pass ${showsGpu(model) ? 'on the GPU' : 'in memory'}.`,
      range: rangeOf(call),
      fixes: fix ? [fix] : [],
    });
  }
  return findings;
}

/** Is the call a `with` item's context manager (`with f(x):`, `with f(x) as y:`)? */
function contextManager(call: SyntaxNode): boolean {
  const p = call.parent?.type === 'as_pattern' ? call.parent.parent : call.parent;
  return p?.type === 'with_item';
}

/**
 * The project function this call reaches when it runs a model's forward pass with autograd on
 * and no training step of its own, leaving the guard to its caller. Not when the function's
 * own name marks it as inference: then the forward inside it is the finding.
 */
function forwardWrapper(model: FileModel, call: SyntaxNode): FunctionInfo | undefined {
  const target = resolveCall(model, call) ?? resolveInstanceCall(model, call);
  const fn = target?.fn;
  if (!fn || target.cls || !runsForward(fn, 1) || runsTrainingStep(fn, 1)) return undefined;
  if (inferenceName.test(fn.name) && !(fn.cls && fn.model.isModuleClassInfo(fn.cls))) return undefined;
  // Its forward reported inside it (`act()`, which `evaluate()` calls to evaluate): the guard goes there, not on this call too.
  return unreportedForward(fn) ? fn : undefined;
}

/** `lsm(x)` with `lsm = nn.LogSoftmax(dim=1)`: a layer without weights, whose graph is its input's (`isParameterlessLayer`). */
function parameterlessCallee(model: FileModel, call: SyntaxNode): boolean {
  const callee = model.callee(call);
  return !!callee && model.isParameterlessLayer(callee);
}

/**
 * `self.run_epoch(dataset, training=False)` / `self.iteration(epoch, loader, train=False)`: a
 * project function shared by training and evaluation, whose every training signal (`backward()`,
 * an optimizer's `step()`) is under `if <flag>:` for one of its parameters, called with that flag
 * False, and whose model forward runs unguarded: on this call it evaluates with autograd on. The
 * guard belongs on this call (a decorator on the shared function would break its training calls).
 */
function flagOffForward(model: FileModel, call: SyntaxNode): { fn: FunctionInfo; param: string; value: string; defaulted: boolean } | undefined {
  // Most calls call no function (here or in the workspace) of that name with a training flag: nothing to resolve.
  if (!flagNamed(model, call)) return undefined;
  const target = resolveCall(model, call);
  const fn = target?.fn;
  if (!fn || target.cls) return undefined;
  const flag = trainingFlag(fn);
  if (!flag) return undefined;
  const [param, test] = flag.split(' ');
  // A step switched by a string whose other phase puts the model in eval() (CenterNet's `run_epoch(phase, ...)`) is
  // reported at its forward inside, with the phase's own fix (sharedPhase.ts), as before strings were followed here.
  if (test.startsWith('eq:') && phaseOf(fn)) return undefined;
  const passed = argumentFor(model, call, target, param);
  // `evaluate(model, val_loader, loss_fn)` for `def evaluate(..., optimizer=None)`: the default, where no splat could pass it.
  const arg = passed ?? (hasSplat(call) ? undefined : parameterDefault(fn, param));
  const off = arg && model.src(arg);
  if (!off || !unguardedForward(fn)) return undefined;
  // `_model_loop(args, 'val', ...)` for a loop that trains only `if loop_type == 'train'` (robustness): another literal,
  // or another member of the same enum (pytorch-GAT's `main_loop(phase=LoopPhase.TEST)` for `LoopPhase.TRAIN`).
  const switchedOff = test.startsWith('eq:') ? otherLiteral(off, test.slice(3)) : off === 'None' || (off === 'False' && test === 'truthy') || (off === 'True' && test === 'falsy');
  if (!switchedOff || switchesForward(model, call, target, fn, param)) return undefined;
  return { fn, param, value: off, defaulted: !passed };
}

/**
 * Does the call switch on another parameter of `fn` that `fn` hands to its model's forward as a keyword (robustness's
 * `_model_loop(args, 'val', loader, model, None, epoch, True, writer)`, whose `model(inp, make_adv=adv)` then runs an
 * attack that needs autograd)? `True`, or a value named for such a switch (`args.adv_train`): the caller picks what
 * the forward does, and it may need autograd.
 */
function switchesForward(model: FileModel, call: SyntaxNode, target: NonNullable<ReturnType<typeof resolveCall>>, fn: FunctionInfo, flag: string): boolean {
  const fm = fn.model;
  const handed = new Set<string>();
  for (const c of fm.callsIn(fn.node)) {
    if (fm.functionOf(c) !== fn || fm.gradState(c) !== 'default' || !fm.isModelCall(c)) continue;
    for (const a of namedChildren(child(c, 'arguments') ?? c)) {
      const v = a.type === 'keyword_argument' ? child(a, 'value') : undefined;
      if (v?.type === 'identifier' && fn.params.includes(fm.src(v)) && fm.src(v) !== flag) handed.add(fm.src(v));
    }
  }
  for (const p of handed) {
    const arg = argumentFor(model, call, target, p);
    const text = arg ? model.src(arg) : '';
    if (text === 'True' || (arg && (arg.type === 'identifier' || arg.type === 'attribute') && /adv|attack|perturb|make_|mode|train/i.test(text))) return true;
  }
  return false;
}

/** `*args` / `**kwargs` in a call: any parameter may be passed through them. */
function hasSplat(call: SyntaxNode): boolean {
  const args = child(call, 'arguments');
  return !!args && namedChildren(args).some((a) => a.type === 'list_splat' || a.type === 'dictionary_splat');
}

/** Is `call`'s callee name a project function's (here or in the workspace) that trains only under a flag (cheap, by name)? */
function flagNamed(model: FileModel, call: SyntaxNode): boolean {
  const callee = model.callee(call);
  if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return false;
  const name = lastName(model.src(callee));
  // A module's forward is no epoch function (and every module defines one: asking them all is quadratic).
  if (name === 'forward' || name === '__call__') return false;
  // Once per name and file version: a name is called far more often than it is defined.
  return model.fact(`flagNamed:${name}`, () => model.functionsHere(name).some((fn) => trainingFlag(fn) !== undefined) || model.facts.functionsNamed(name).some((fn) => trainingFlag(fn) !== undefined)) ?? false;
}

/**
 * The parameter under whose `if <param>:` (test `truthy`), `if <param> is not None:` (test `notNone`) or
 * `if <param> == 'train':` (test `eq:train`) every training signal of `fn` lies (`def run(loader, train=True)`,
 * `def run_epoch(model, loader, optimizer=None)`, robustness's `_model_loop(args, loop_type, ...)`), if one does,
 * never rebound: as `"param test"`. A local flag bound once from such a comparison (`is_train = (loop_type ==
 * 'train')`, then `if is_train:`) stands for it.
 */
function trainingFlag(fn: FunctionInfo): string | undefined {
  const model = fn.model;
  // Once per function and file version: every call of it with a literal False or None asks.
  return model.fact(`trainingFlag:${fn.node.order}`, () => {
    const signals = model.trainingSignals(fn.node);
    let flag: string | undefined;
    for (const s of signals) {
      const p = enclosingFlag(model, s, fn);
      if (!p || (flag !== undefined && p !== flag)) return '';
      flag = p;
    }
    if (!flag) return '';
    let [param, test] = flag.split(' ');
    if (test === 'truthy' && !fn.params.includes(param)) {
      const bound = model.bindingsIn(fn.node, param);
      const value = bound.length === 1 && !bound[0].unpacked && bound[0].value ? unparen(bound[0].value) : undefined;
      const eq = value?.type === 'comparison_operator' ? equalsLiteral(model, value) : undefined;
      if (!eq) return '';
      [param, test] = [eq.param, `eq:${eq.literal}`];
    }
    return fn.params.includes(param) && model.bindingsIn(fn.node, param).length === 0 ? `${param} ${test}` : '';
  }) || undefined;
}

/** An enum member as written: `LoopPhase.TRAIN`, `cfg.Phase.TEST`. */
const enumMember = /^[A-Za-z_][\w.]*\.[A-Za-z_]\w*$/;

/**
 * `param == 'train'` or `param == Phase.TRAIN` (either way round): the name and the string (its characters) or the
 * enum member (as written) compared with, if the test is that.
 */
function equalsLiteral(model: FileModel, c: SyntaxNode): { param: string; literal: string } | undefined {
  const parts = namedChildren(c);
  if (parts.length !== 2 || !/^[^=!<>]*==[^=]*$/.test(model.src(c).replace(/(['"]).*?\1/g, ''))) return undefined;
  const [a, b] = parts;
  const [name, lit] = a.type === 'identifier' ? [a, b] : [b, a];
  if (name.type !== 'identifier') return undefined;
  if (lit.type === 'attribute' && enumMember.test(model.src(lit))) return { param: model.src(name), literal: model.src(lit) };
  const m = lit.type === 'string' ? /^(['"])(\w*)\1$/.exec(model.src(lit)) : null;
  return m ? { param: model.src(name), literal: m[2] } : undefined;
}

/** Is the argument `off` another value of the kind `literal` is: another string, or another member of the same enum? */
function otherLiteral(off: string, literal: string): boolean {
  if (enumMember.test(literal)) {
    if (!enumMember.test(off)) return false;
    const dot = literal.lastIndexOf('.');
    return off.lastIndexOf('.') === dot && off.slice(0, dot) === literal.slice(0, dot) && off !== literal;
  }
  const m = /^(['"])(\w*)\1$/.exec(off);
  return !!m && m[2] !== literal;
}

/**
 * The name `n` is under in an `if <name>:` or `if <name> is not None:` of `fn` (in its body), or in an `if not <name>:`
 * or the `else:` of an `if <name>:` (test `falsy`: Conv-TasNet's `_run_one_epoch(epoch, cross_valid=True)`, training
 * `if not cross_valid:`), with the test, if any.
 */
function enclosingFlag(model: FileModel, n: SyntaxNode, fn: FunctionInfo): string | undefined {
  let prev = n;
  for (const a of ancestors(n)) {
    if (a === fn.node) return undefined;
    if (a.type === 'if_statement' && prev.type === 'else_clause' && a.children.filter((c) => c.field === 'alternative').length === 1) {
      const cond = child(a, 'condition');
      const c = cond && unparen(cond);
      if (c?.type === 'identifier') return `${model.src(c)} falsy`;
    }
    if (a.type === 'if_statement' && prev.field === 'consequence') {
      const cond = child(a, 'condition');
      const c = cond && unparen(cond);
      if (c?.type === 'identifier') return `${model.src(c)} truthy`;
      const negated = c?.type === 'not_operator' ? child(c, 'argument') : undefined;
      if (negated && unparen(negated).type === 'identifier') return `${model.src(unparen(negated))} falsy`;
      if (c?.type === 'comparison_operator' && /^\w+\s+is\s+not\s+None$/.test(model.src(c))) return `${model.src(namedChildren(c)[0])} notNone`;
      const eq = c?.type === 'comparison_operator' ? equalsLiteral(model, c) : undefined;
      if (eq) return `${eq.param} eq:${eq.literal}`;
    }
    prev = a;
  }
  return undefined;
}

/** Does `fn` itself call a model with autograd in its default state (no guard around the call)? */
function unguardedForward(fn: FunctionInfo): boolean {
  const model = fn.model;
  return model.callsIn(fn.node).some((c) => model.functionOf(c) === fn && model.gradState(c) === 'default' && (model.isModelCall(c) || forwardMethodCall(model, c)));
}

function inferenceContext(model: FileModel, call: SyntaxNode): boolean {
  const callee = model.callee(call);
  if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) return false;
  // `reranker.model.eval()`, then `reranker.encode_candidate(cands)` (BLINK): the object whose method runs its model.
  const receiver = callee.type === 'attribute' ? model.methodCall(call)?.receiver : undefined;
  return contextOf(model, call, receiver ? [model.src(callee), model.src(receiver)] : [model.src(callee)], model.functionOf(call)) !== undefined;
}

/**
 * The forward pass `call` runs, if any: a model call, or a call of a project function that runs an
 * unreported one. With `reportOnly` (the rule's own pass, which only reports, and a report needs an
 * evaluation context: `judge`), a project function's call is followed only where `judge` would find
 * a context for it: most are a training step's, and whether the function runs an unreported forward
 * (`unreportedForward`, which judges every forward in it and its callees) is then not needed.
 */
function forwardOf(model: FileModel, call: SyntaxNode, reportOnly = false): Forward | undefined {
  // `load_model(path)` is named like a model, but a project function: its summary says what it runs.
  if ((model.isModelCall(call) && !namedLikeModel(model, call) && !parameterlessCallee(model, call)) || forwardMethodCall(model, call) || loadedModuleCall(model, call)) {
    const mc = model.methodCall(call);
    const calleeNode = mc?.method === 'forward' ? mc.receiver : model.callee(call);
    return calleeNode ? { calleeNode, texts: [model.src(calleeNode)] } : undefined;
  }
  const callee = model.callee(call);
  if (!callee) return undefined;
  // Plain names and `self.` methods: the project function the name resolves to.
  if (!(callee.type === 'identifier' || (callee.type === 'attribute' && /^self\.[A-Za-z_]\w*$/.test(model.src(callee))))) {
    // `wrapper.eval_batch(batch)`: another object's method, by its class's summary, and only in an inference context.
    const wrapper = callee.type === 'attribute' && inferenceContext(model, call) ? forwardWrapper(model, call) : undefined;
    const receiver = wrapper && model.methodCall(call)?.receiver;
    return wrapper && receiver ? { calleeNode: callee, texts: [model.src(receiver)], via: wrapper } : undefined;
  }
  const flagged = flagOffForward(model, call);
  if (flagged) return { calleeNode: callee, texts: callee.type === 'attribute' ? ['self'] : [], via: flagged.fn, flag: { param: flagged.param, value: flagged.value, defaulted: flagged.defaulted } };
  // A function that trains itself (`trains`' own first test, from its calls alone) is not one.
  const candidates = resolveCallee(model, call).filter((g) => !g.model.hasTrainingSignal(g.node) && !builderName.test(g.name));
  // Most calls of a plain name reach no project function (`print`, `len`): nothing more to ask.
  if (candidates.length === 0) return undefined;
  const texts = callee.type === 'attribute' ? ['self'] : model.positionalArgs(call).filter((a) => a.type === 'identifier' || a.type === 'attribute').map((a) => model.src(a));
  if (reportOnly) {
    // `judge`'s context for a forward through a helper: its own, or (costlier, asked later) the
    // function's as an evaluation-only helper, which one that trains or a module's method is not.
    const fn = model.functionOf(call);
    if (!contextOf(model, call, texts, fn) && !(fn && (mayBeEvalOnlyHelper(fn) || phaseOf(fn)))) return undefined;
  }
  // Whether a candidate runs an unreported forward before whether it trains through its callees:
  // most project functions run no forward (all of torch's), and then that walk is not needed.
  const via = candidates.find((g) => unreportedForward(g) && !trains(g));
  if (!via) return undefined;
  return { calleeNode: callee, texts, via };
}

/**
 * Does `fn` run a forward pass, unguarded, that no finding reports inside it (it has no
 * evaluation context, or it is also called on a training path)? Then its evaluation callers
 * are where the guard belongs.
 */
function unreportedForward(fn: FunctionInfo): boolean {
  const model = fn.model;
  // Through helpers that call each other too (`cyclicFact`: the same answer whichever is asked first), kept across edits.
  return model.cyclicFact(fn, 'unreportedForward', () => {
    for (const c of model.callsIn(fn.node)) {
      const fwd = forwardOf(model, c);
      if (fwd && judge(model, c, fwd).kind === 'unreported') return true;
    }
    return false;
  }, (a, b) => a || b, false);
}

/**
 * Whether the forward at `call` is reported here, needs no guard at all, or is left to the
 * evaluation callers. With `reportOnly` (the rule's own pass over the calls, which only reports)
 * the evaluation context is looked for before the costlier reasons a forward is safe (does its
 * output reach a backward pass, are all its callers guarded): most forwards have none (a training
 * step's), and a report needs one whatever the order, so a forward without one is `none` at once.
 */
function judge(model: FileModel, call: SyntaxNode, fwd: Forward, reportOnly = false): Verdict {
  if (model.gradState(call) !== 'default') return { kind: 'safe' };
  const fn = model.functionOf(call);
  if (!fwd.via && (frozenScript(model, fwd.calleeNode, call) || frozenModule(model, fwd.calleeNode, call) || warmUp(model, call) || guardedMode(model, fwd.calleeNode, call) || guardsItself(model, fwd.calleeNode, call) || trainModeOnly(model, call) || differentiatesInside(model, fwd.calleeNode, call) || numpyRead(model, call))) return { kind: 'safe' };
  let context: Context | undefined = fwd.flag ? { kind: 'flag', ...fwd.flag } : undefined;
  if (reportOnly && !context) {
    context = contextOf(model, call, fwd.texts, fn, fwd.via ? undefined : model.src(fwd.calleeNode)) ?? (fn && evalOnlyHelper(fn)) ?? phaseContext(model, call, fn);
    if (!context) return { kind: 'none' };
  }
  // A `volatile=True` input could not be backpropagated when the code was written.
  // (A call that turns its callee's training step off is followed by the flag, not by the callee's backward.)
  if (!fwd.flag && model.callReachesBackward(call) && !volatileInput(model, call)) {
    // Its backward runs in the training phase only, and the step also evaluates: the other phase records a graph for nothing.
    const phase = phaseContext(model, call, fn);
    if (!phase) return { kind: 'safe' };
    return { kind: 'report', context: phase, fn };
  }
  if (fn && inferenceName.test(fn.name)) {
    if (model.hasTrainingSignal(fn.node)) return { kind: 'safe' };
    if ((!fwd.via && ownComputation(model, call, model.src(fwd.calleeNode), fn)) || oneOffInTest(model, call, fn)) return { kind: 'safe' };
  }
  if (fn && (callersGuarded(fn, 1) || handedToGuard(fn))) return { kind: 'safe' };
  context ??= contextOf(model, call, fwd.texts, fn, fwd.via ? undefined : model.src(fwd.calleeNode)) ?? (fn && evalOnlyHelper(fn));
  if (!context) return { kind: 'unreported' };
  // A target network's forward in a DDPG/SAC `learn()`, put in eval() or only read (detached into the loss): part of that one step.
  if ((context.kind === 'eval' || context.kind === 'read') && fn && stepUpdatesAfter(model, call, fn)) return { kind: 'safe' };
  // A helper the training step also calls (or one handed on as a callback, with callers of its
  // own too): its forward must record a graph; the guard goes on its evaluation callers.
  const status = fn && !trains(fn) ? functionStatus(fn) : 'eval';
  if (status === 'train' || (status === 'unknown' && fn && sitesOf(fn).length > 0 && !ownModelEvaluated(model, call, fwd, fn, context))) return { kind: 'unreported' };
  return { kind: 'report', context, fn };
}

/**
 * `def eval_tta(config, augment, reporter): model = get_model(...); model.load_state_dict(...);
 * model.eval(); ... pred = model(data)` handed to a tuner as a lambda (fast-autoaugment): whoever
 * calls it, the model is its own (put in eval mode there, or the function is named for evaluation), and nothing of the forward is returned;
 * no caller can make that forward part of a training step, and none is known to guard it.
 */
function ownModelEvaluated(model: FileModel, call: SyntaxNode, fwd: Forward, fn: FunctionInfo, context: Context): boolean {
  if ((context.kind !== 'eval' && context.kind !== 'name') || fwd.via || fwd.calleeNode.type !== 'identifier') return false;
  const name = model.src(fwd.calleeNode);
  if ((context.kind === 'eval' && context.receiver !== name) || fn.params.includes(name) || model.isGlobalIn(fn.node, name)) return false;
  return model.bindingsIn(fn.node, name).length > 0 && !returnsFrom(model, call, fn.node);
}

/**
 * A function that does not train, whose every caller is known to evaluate, and that some
 * evaluation calls without a guard (directly, or through helpers like it): its forward is
 * reported in it, where the labels of real code put it, and the fix decorates it.
 */
function evalOnlyHelper(fn: FunctionInfo, depth = 0): Context | undefined {
  // Once per function, depth and file version (every forward in `fn` asks); the depth only grows, so it never asks itself.
  return fn.model.fact(`evalOnlyHelper:${depth}:${fn.node.order}`, () => {
    // A module's own methods are the model's internals: whether autograd records them is their caller's choice.
    if (depth > 2 || (fn.cls && fn.model.isModuleClassInfo(fn.cls)) || trains(fn) || functionStatus(fn) !== 'eval') return undefined;
    for (const s of sitesOf(fn)) {
      if (s.model.gradState(s.call) !== 'default') continue;
      const caller = s.model.functionOf(s.call);
      const texts = s.model.positionalArgs(s.call).filter((a) => a.type === 'identifier' || a.type === 'attribute').map((a) => s.model.src(a));
      if (contextOf(s.model, s.call, texts, caller) || (caller && evalOnlyHelper(caller, depth + 1))) return { kind: 'caller', fn, caller: caller ? `\`${caller.name}()\`` : 'the script' };
    }
    return undefined;
  });
}

/** False where `evalOnlyHelper(fn)` is sure to be undefined by its first, cheap tests (a module's method, a function with a training step of its own). */
function mayBeEvalOnlyHelper(fn: FunctionInfo): boolean {
  return !(fn.cls && fn.model.isModuleClassInfo(fn.cls)) && !fn.model.hasTrainingSignal(fn.node);
}

function contextOf(model: FileModel, call: SyntaxNode, texts: readonly string[], fn: FunctionInfo | undefined, direct?: string): Context | undefined {
  if (fn && inferenceName.test(fn.name)) return { kind: 'name', fn };
  if (fn && generationName.test(fn.name) && generates(model, fn)) return { kind: 'name', fn };
  const loop = model.evalLoaderLoopOf(call);
  if (loop) return { kind: 'loader', loop };
  for (const text of texts) {
    const e = model.evalEventFor(call, text, text === direct);
    if (e) return { kind: 'eval', receiver: e.receiver, order: e.order, assigned: e.assigned };
  }
  // A forward called directly (not through a helper): evidence from its input and its output.
  if (direct === undefined) return undefined;
  const variable = volatileInput(model, call);
  if (variable && !(detachedAtOnce(model, call) && inTrainingStep(model, call))) return { kind: 'volatile', variable };
  if (readOnlyForward(model, call, direct, fn)) return { kind: 'read', fn };
  return undefined;
}

/**
 * `fake = Variable(netG(noisev).data)` / `netG(z).detach()`: the output leaves its graph in the statement that made it
 * (WassersteinGAN's critic step, whose `volatile=True` noise meant "freeze netG" before PyTorch 0.4). In a training
 * step that is the usual way to feed one network's output to another's update, not an evaluation; the `volatile`
 * flag itself is `volatile-variable`'s finding.
 */
function detachedAtOnce(model: FileModel, call: SyntaxNode): boolean {
  const up = call.parent;
  if (up?.type !== 'attribute' || call.field !== 'object') return false;
  const name = child(up, 'attribute');
  if (!name) return false;
  if (model.textIs(name, 'data')) return true;
  return model.textIs(name, 'detach') && up.parent?.type === 'call' && up.field === 'function';
}

/**
 * A forward whose output is only read (inferenceEvidence.ts: printed, saved, turned into
 * numbers), in code that is not the module's own computation (`self.layer(x)` in a method,
 * or any call in `forward`): sampling, visualisation, generation, a demo script.
 */
function readOnlyForward(model: FileModel, call: SyntaxNode, calleeText: string, fn: FunctionInfo | undefined): boolean {
  if (fn && (/^(forward|__call__)$/.test(fn.name) || (fn.cls && (calleeText === 'self' || calleeText.startsWith('self.')) && model.isModuleClassInfo(fn.cls)))) return false;
  // In a training loop, a forward run every step (an RL rollout's action) is part of the step.
  // Asked first: most forwards are a training step's, and the loop's answer is kept for all of
  // them, where following each output's uses (`onlyRead`) indexes the reads of its whole scope.
  if (inTrainingStep(model, call)) return false;
  return onlyRead(model, call);
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

/**
 * `model(data, mode='inference')` where the model's class (in the workspace) has
 * `def forward(self, data, mode): ... elif mode == 'inference': with torch.no_grad(): ...` (SPADE's
 * Pix2PixModel): the branch this call picks by a literal argument runs every call under a guard,
 * and nothing before the branch runs a model: the call records no graph.
 */
/**
 * A forward that runs only while a module is in train mode: in the branch of `if model.training:` (or the `else` of
 * `if not model.training:`), as DPR's `_do_biencoder_fwd_pass` does, with its eval-mode twin under `torch.no_grad()`
 * in the other branch. An evaluation that calls `model.eval()` first never runs it.
 */
function trainModeOnly(model: FileModel, call: SyntaxNode): boolean {
  let n = call;
  for (const a of ancestors(call)) {
    if (isScopeNode(a)) return false;
    if (a.type === 'if_statement') {
      const cond = child(a, 'condition');
      const c = cond && unparen(cond);
      const negated = c?.type === 'not_operator';
      const test = negated ? child(c, 'argument') : c;
      if (test?.type === 'attribute' && lastName(model.src(test)) === 'training') {
        if (!negated && n.field === 'consequence') return true;
        if (negated && n.type === 'else_clause') return true;
      }
    }
    n = a;
  }
  return false;
}

/**
 * `adv = self.attacker(inp, target)` after `self.eval()` (MadryLab robustness's AttackerModel): a project
 * module whose `forward` takes gradients (`torch.autograd.grad`, a differentiable optimiser's step: `differentiates`,
 * in it or in a function it defines): an attack, a saliency map, an inner optimisation. It needs autograd, whatever mode it runs in.
 */
function differentiatesInside(model: FileModel, callee: SyntaxNode, call: SyntaxNode): boolean {
  const forward = objectMethod(model, callee, call, ['forward']);
  if (!forward?.body) return false;
  const fm = forward.model;
  // Only a gradient taken for use: a `.backward()` there may be a trainer module's training step, skipped in
  // evaluation (DALLE2's DecoderTrainer.forward), whose evaluation forward still records a graph.
  return fm.fact(`differentiatesInside:${forward.node.order}`, () => descendants(forward.body!).some((d) => d.type === 'call' && differentiates.test(fm.qualify(fm.callee(d)) ?? ''))) ?? false;
}

/**
 * The method a call of the object `callee` names runs, by the project class its value was built from: the first of
 * `names` that class defines or inherits from a project base class (`methodOf`).
 */
function objectMethod(model: FileModel, callee: SyntaxNode, call: SyntaxNode, names: readonly string[]): FunctionInfo | undefined {
  const cls = classOfValue(model, callee, call);
  if (!cls) return undefined;
  for (const name of names) {
    const method = methodOf(cls, name);
    if (method) return method;
  }
  return undefined;
}

/**
 * Calls that take gradients for use inside a forward: `torch.autograd.grad` and autograd's functional API
 * (jacobians, vector-Jacobian products), and facebookresearch/higher's differentiable optimisers and patched
 * modules (`higher.get_diff_optim(...)`, `higher.innerloop_ctx(...)`: an unrolled inner optimisation, as in its
 * deep-energy example, whose `step(loss)` needs the graph of the forward's own computation).
 */
const differentiates = /^(torch\.autograd\.(grad|functional\.\w+)|higher\.\w+(\.\w+)*)$/;

/**
 * `backbone(img)` where the object's own `forward` (or its class's `__call__`, which runs instead) runs its models
 * only under a grad guard: decorated `@torch.no_grad()` (stable-dreamfusion's `Zero123.__call__`) or inside `with
 * torch.no_grad():` (CutLER's `ViTFeat.forward`). The call records no graph, whoever makes it.
 */
function guardsItself(model: FileModel, callee: SyntaxNode, call: SyntaxNode): boolean {
  const method = objectMethod(model, callee, call, ['__call__', 'forward']);
  if (!method?.body) return false;
  const fm = method.model;
  return fm.fact(`guardsItself:${method.node.order}`, () => {
    // What may run a model: a model call, `self.encoder(x)`, `self.model.get_last_selfattention(img)`.
    const runs = fm.callsIn(method.node).filter((c) => fm.functionOf(c) === method && (fm.isModelCall(c) || /^self\.\w+(\.\w+)?$/.test(fm.src(fm.callee(c) ?? c))));
    return runs.length > 0 && runs.every((c) => fm.gradState(c) === 'off');
  }) ?? false;
}

function guardedMode(model: FileModel, callee: SyntaxNode, call: SyntaxNode): boolean {
  const literals: [string, string][] = [];
  for (const a of call.children.find((c) => c.field === 'arguments')?.children ?? []) {
    if (a.type !== 'keyword_argument') continue;
    const name = child(a, 'name');
    const value = child(a, 'value');
    if (name && value?.type === 'string') literals.push([model.src(name), model.src(value).replace(/"/g, "'")]);
  }
  if (literals.length === 0) return false;
  const forward = objectMethod(model, callee, call, ['forward']);
  if (!forward?.body) return false;
  const fm = forward.model;
  for (const [param, value] of literals) {
    if (!forward.params.includes(param)) continue;
    for (const d of descendants(forward.body, isScopeNode)) {
      if (d.type !== 'if_statement' && d.type !== 'elif_clause') continue;
      const cond = child(d, 'condition');
      const text = cond ? conditionText(fm, cond) : '';
      if (text !== `${param} == ${value}` && text !== `${value} == ${param}`) continue;
      const branch = child(d, 'consequence');
      if (!branch) continue;
      const calls = fm.callsIn(forward.node).filter((c) => fm.functionOf(c) === forward);
      const inBranch = calls.filter((c) => c.start >= branch.start && c.end <= branch.end);
      // The statement the branch belongs to: its earlier `if`/`elif` branches are not run on the way.
      const stmt = d.type === 'elif_clause' && d.parent ? d.parent : d;
      const before = calls.filter((c) => c.end <= stmt.start);
      const runs = (c: SyntaxNode): boolean => fm.isModelCall(c) || /^self\.\w+$/.test(fm.src(fm.callee(c) ?? c));
      // In the branch, a guard and nothing run outside it; before the branch, input preparation (no model called directly).
      return inBranch.some((c) => fm.gradState(c) === 'off') && inBranch.every((c) => fm.gradState(c) === 'off' || !runs(c)) && before.every((c) => fm.gradState(c) === 'off' || !fm.isModelCall(c));
    }
  }
  return false;
}

/**
 * `model(torch.zeros(1, 3, size, size).to(device))  # run once` (YOLO's warm-up before timing): a
 * forward, outside any loop, of a tensor built on the spot from constants, whose output is thrown
 * away with the statement: its graph lives for that statement only.
 */
function warmUp(model: FileModel, call: SyntaxNode): boolean {
  if (call.parent?.type !== 'expression_statement') return false;
  const arg = model.positionalArgs(call)[0];
  let a: SyntaxNode | undefined = arg && unparen(arg);
  // `x = torch.ones(1, 3, h, w).cuda(); model(x)` (ByteTrack's TensorRT warm-up): the one definition of the name that reaches the call.
  if (a?.type === 'identifier') {
    const defs = model.reachingDefs(model.src(a), call);
    const only = defs && !defs.entry && defs.defs.length === 1 && !defs.defs[0].unpacked ? defs.defs[0].value : undefined;
    a = only && unparen(only);
  }
  // Through `.to(device)`, `.type_as(p)`, `.cuda()`, `.half()`, `.float()`.
  for (let mc = a?.type === 'call' ? model.methodCall(a) : undefined; a && mc && /^(to|type_as|cuda|half|float|contiguous)$/.test(mc.method); mc = a.type === 'call' ? model.methodCall(a) : undefined) a = unparen(mc.receiver);
  if (a?.type !== 'call' || !/^torch\.(zeros|ones|empty|rand|randn|full)$/.test(model.qualify(model.callee(a)) ?? '')) return false;
  for (const x of ancestors(call)) {
    if (x.type === 'function_definition' || x.type === 'class_definition') break;
    if (loopTypes.has(x.type)) return false;
  }
  return true;
}

/**
 * `G = load(...)['G_ema'].requires_grad_(False).to(device)`, then `G.synthesis(w)`: a module whose
 * weights were frozen where it was bound records no graph for its weights, and none at all for
 * inputs that need no grad (stylegan2-ada's projector renders its result this way). Not when an
 * argument is a name the function binds with `requires_grad` (an optimised latent: then the
 * forward is part of an optimisation, and its graph is wanted).
 */
function frozenModule(model: FileModel, callee: SyntaxNode, call: SyntaxNode): boolean {
  let root = callee;
  while (root.type === 'attribute') root = child(root, 'object') ?? root;
  if (root.type !== 'identifier') return false;
  if (!frozenValue(model, root, call, 0) && !(callee.type === 'attribute' && frozenAttribute(model, model.src(callee), call))) return false;
  const scope = model.scopeOf(call);
  for (const a of model.positionalArgs(call)) {
    let name = unparen(a);
    while (name.type === 'attribute' || name.type === 'call' || name.type === 'subscript') name = (name.type === 'call' ? model.callee(name) : child(name, name.type === 'attribute' ? 'object' : 'value')) ?? name;
    if (name.type !== 'identifier') continue;
    if (model.bindingsIn(scope, model.src(name)).some((d) => d.value && /requires_grad/.test(model.src(d.value)))) return false;
  }
  return true;
}

/**
 * Is the module `name` names at `at` frozen: bound to `...requires_grad_(False)...`, or frozen by its own statement
 * `name.requires_grad_(False)` after its binding and before `at` in the same scope (EfficientDet's coco_eval.py), or
 * a parameter of the function that every call site in the workspace passes a frozen module for (two callers up)?
 */
function frozenValue(model: FileModel, name: SyntaxNode, at: SyntaxNode, depth: number): boolean {
  const key = model.src(name);
  const b = model.binding(key, at);
  if (b?.value && !b.unpacked && (frozenChain(model, b.value) || frozenOnConstruction(model, b.value))) return true;
  const scope = model.scopeOf(at);
  const after = b ? b.at.end : -1;
  // The last `name.requires_grad_(...)` between the binding and `at` decides (`requires_grad_()` thaws).
  let frozen = false;
  for (const f of gradFreezes(model, scope).get(key) ?? []) {
    if (f.start > after && f.start < at.start) frozen = f.frozen;
  }
  if (frozen) return true;
  // A parameter (no binding in the function): what every caller passes for it. Not a method's `self` (a module's own
  // layers, `self.encoder(x)`, which every `forward` calls: asking each one's callers cost more than the rest of the rule).
  const fn = model.functionOf(at);
  if (b || !fn || depth > 1 || !fn.params.includes(key) || (fn.cls && key === fn.params[0])) return false;
  const sites = callSitesOf(fn);
  return sites.length > 0 && sites.every((site) => {
    const target = resolveCall(site.model, site.call);
    if (target?.fn !== fn) return false;
    const arg = argumentFor(site.model, site.call, target, key);
    return !!arg && unparen(arg).type === 'identifier' && frozenValue(site.model, unparen(arg), site.call, depth + 1);
  });
}

/**
 * `self.avgG(input)` where a method of the class froze that attribute's weights (pytorch_GAN_zoo's buildAvG: `for
 * param in self.avgG.parameters(): param.requires_grad = False`, or `self.avgG.requires_grad_(False)`) and none
 * turns them on again: its forward records no graph for them. Once per class and attribute.
 */
function frozenAttribute(model: FileModel, key: string, at: SyntaxNode): boolean {
  const cls = model.functionOf(at)?.cls;
  if (!cls || !key.startsWith('self.')) return false;
  return model.fact(`frozenAttr:${cls.node.order}:${key}`, () => {
    let frozen = false;
    for (const d of descendants(cls.node)) {
      if (d.type === 'for_statement') {
        const right = child(d, 'right');
        const left = child(d, 'left');
        const body = child(d, 'body');
        if (right?.type !== 'call' || !model.textIs(right, `${key}.parameters()`) || left?.type !== 'identifier' || !body) continue;
        const p = model.src(left);
        for (const a of descendants(body)) {
          const target = a.type === 'assignment' ? child(a, 'left') : undefined;
          const value = a.type === 'assignment' ? child(a, 'right') : undefined;
          if (!target || !value || !model.textIs(target, `${p}.requires_grad`)) continue;
          if (value.type !== 'false') return false;
          frozen = true;
        }
      } else if (d.type === 'call') {
        const mc = model.methodCall(d);
        if (mc?.method !== 'requires_grad_' || !model.textIs(mc.receiver, key)) continue;
        const arg = model.positionalArgs(d)[0] ?? model.keywordArg(d, 'requires_grad');
        if (!arg || arg.type !== 'false') return false;
        frozen = true;
      }
    }
    return frozen;
  }) ?? false;
}

/**
 * `FrozenExtractor(...)` (also through `.to(device)`, `.eval()`): an instance of a project class whose constructor
 * freezes every parameter, `for p in self.parameters(): p.requires_grad = False` (or `p.requires_grad_(False)`,
 * `self.requires_grad_(False)`), also through a constructor parameter that defaults to False and that the call leaves
 * at its default (pytorch-fid's `InceptionV3(..., requires_grad=False)`, which FID and Inception-score code builds and
 * runs without a guard). Not when anything else in the class sets `requires_grad` (a method may thaw them), nor when
 * the call passes arguments by `*args` / `**kwargs`.
 */
function frozenOnConstruction(model: FileModel, value: SyntaxNode): boolean {
  const v = model.moduleBeneath(value);
  if (v.type !== 'call' || model.methodCall(v)) return false;
  const target = resolveCall(model, v);
  const init = target?.cls ? target.fn : undefined;
  if (!target || !init || init.name !== '__init__' || !init.cls) return false;
  const args = child(v, 'arguments');
  if (args?.children.some((c) => c.type === 'list_splat' || c.type === 'dictionary_splat')) return false;
  const cls = init.cls;
  const self = init.params[0];
  if (!self) return false;
  const off = (setting: SyntaxNode | undefined): boolean => {
    const n = setting && unparen(setting);
    if (!n) return false;
    if (n.type === 'false') return true;
    if (n.type !== 'identifier' || !init.params.includes(init.model.src(n))) return false;
    const name = init.model.src(n);
    return parameterDefault(init, name)?.type === 'false' && !argumentFor(model, v, target, name);
  };
  // The value the class's one setting of requires_grad sets, where that setting is the constructor's freeze of every
  // parameter; null where the class sets it anywhere else too (a method may thaw them), or not at all.
  const setting = init.model.fact(`frozenOnInit:${cls.node.order}`, () => {
    let found: SyntaxNode | null | undefined;
    for (const d of descendants(cls.node)) {
      let value: SyntaxNode | undefined;
      if (d.type === 'assignment') {
        const left = child(d, 'left');
        if (left?.type !== 'attribute' || !init.model.textIs(child(left, 'attribute') ?? left, 'requires_grad')) continue;
        if (!everyParameterOf(init, d, left)) return null;
        value = child(d, 'right');
      } else if (d.type === 'call') {
        const mc = init.model.methodCall(d);
        if (mc?.method !== 'requires_grad_') continue;
        if (!(init.model.textIs(mc.receiver, self) && init.model.functionOf(d) === init) && !everyParameterOf(init, d, mc.receiver)) return null;
        value = init.model.positionalArgs(d)[0] ?? init.model.keywordArg(d, 'requires_grad');
      } else continue;
      if (found !== undefined) return null;
      found = value ?? null;
    }
    return found ?? null;
  });
  return !!setting && off(setting);
}

/** Is `setter` (`p.requires_grad = v`, `p.requires_grad_(v)`) in the constructor's loop `for p in self.parameters():`, setting p's? */
function everyParameterOf(init: FunctionInfo, setter: SyntaxNode, target: SyntaxNode): boolean {
  if (init.model.functionOf(setter) !== init) return false;
  const loop = ancestors(setter).find((a) => a.type === 'for_statement');
  const left = loop && child(loop, 'left');
  const right = loop && child(loop, 'right');
  const receiver = target.type === 'attribute' ? child(target, 'object') : target;
  return !!left && !!right && !!receiver && left.type === 'identifier' && init.model.textIs(right, `${init.params[0]}.parameters()`) && init.model.src(receiver) === init.model.src(left);
}

/** A scope's `x.requires_grad_(...)` calls by receiver, in document order: once per scope, not a scan of its calls per forward. */
function gradFreezes(model: FileModel, scope: SyntaxNode): ReadonlyMap<string, readonly { start: number; frozen: boolean }[]> {
  return model.nodeMemo(scope, 'gradFreezes', () => {
    const out = new Map<string, { start: number; frozen: boolean }[]>();
    for (const c of model.callsIn(scope)) {
      const callee = model.callee(c);
      const attr = callee?.type === 'attribute' ? child(callee, 'attribute') : undefined;
      if (!attr || !model.textIs(attr, 'requires_grad_')) continue;
      const mc = model.methodCall(c);
      if (!mc) continue;
      const arg = model.positionalArgs(c)[0] ?? model.keywordArg(c, 'requires_grad');
      const key = model.src(mc.receiver);
      const list = out.get(key) ?? [];
      list.push({ start: c.start, frozen: !!arg && model.src(arg) === 'False' });
      out.set(key, list);
    }
    return out;
  }) ?? new Map();
}

/** An expression whose value is a module after `.requires_grad_(False)` (through `.to()`, `.eval()`, `[key]` and the like). */
function frozenChain(model: FileModel, value: SyntaxNode): boolean {
  for (let v = unparen(value), k = 0; k < 12; k++) {
    if (v.type === 'call') {
      const mc = model.methodCall(v);
      if (!mc) return false;
      if (mc.method === 'requires_grad_') {
        const arg = model.positionalArgs(v)[0] ?? model.keywordArg(v, 'requires_grad');
        return !!arg && model.src(arg) === 'False';
      }
      v = unparen(mc.receiver);
    } else if (v.type === 'subscript') {
      v = unparen(child(v, 'value') ?? v);
    } else return false;
  }
  return false;
}

/**
 * A `generate()` / `sample_images()` / `translate()` that decodes step by step (a model call
 * in a loop) or keeps nothing it made (no `return value`: it saves or prints it). One that
 * returns a single forward's output (`def generate(z): return G(z)`) may feed a training loss.
 */
function generates(model: FileModel, fn: FunctionInfo): boolean {
  // Once per function and file version: every call in a `generate()` asks (forwardOf's inference-context test too).
  return model.fact(`generates:${fn.node.order}`, () => {
    let returns = false;
    for (const n of descendants(fn.body ?? fn.node, isScopeNode)) {
      if (n.type === 'call' && model.isModelCall(n) && inLoop(n, fn)) return true;
      if (n.type === 'return_statement' && n.children.some((c) => c.named && c.type !== 'comment')) returns = true;
    }
    return !returns;
  }) ?? false;
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
  if (!(isUnitTest(model, fn) || smokeTest(model, fn, call)) || inLoop(call, fn)) return false;
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

/**
 * A function a test runner collects: named `test…` in a test file (pytest's `test_*.py` /
 * `*_test.py`) or in a test class (`Test…`, a `TestCase`). In a
 * training script, `def test(model, loader):` is the evaluation entry point (pygcn's
 * `train.py`), not a unit test.
 */
function isUnitTest(model: FileModel, fn: FunctionInfo): boolean {
  if (!/^test([_A-Z0-9]|$)/.test(fn.name)) return false;
  const path = model.path.replace(/\\/g, '/');
  const file = path.slice(path.lastIndexOf('/') + 1);
  // The file's name, not its folders: the path is absolute, and any folder above the project may be called `test`.
  if (/^test_.*\.py$|_test\.py$/.test(file)) return true;
  return !!fn.cls && (/^Test/.test(fn.cls.name) || fn.cls.bases.some((b) => /(^|\.)TestCase$/.test(model.src(b))));
}

/**
 * `def test(): net = ResNet18(); y = net(torch.randn(1, 3, 32, 32)); print(y.size())` at the
 * end of a model file: a `test*` function without parameters that builds the model it calls
 * (a class called in the function itself), a smoke test of its shapes wherever the file is. A
 * training script's `def test():` runs the script's own model, built elsewhere.
 */
function smokeTest(model: FileModel, fn: FunctionInfo, call: SyntaxNode): boolean {
  if (!/^test([_A-Z0-9]|$)/.test(fn.name) || fn.params.length > 0) return false;
  const callee = model.callee(call);
  if (callee?.type !== 'identifier') return false;
  return model.bindingsIn(fn.node, model.src(callee)).some((b) => {
    const v = b.value && !b.unpacked ? unparen(b.value) : undefined;
    const made = v?.type === 'call' ? model.callee(v) : undefined;
    if (!made || (made.type !== 'identifier' && made.type !== 'attribute')) return false;
    const name = lastName(model.src(made));
    // A class, or a function of the file that returns one built (`def densenet_cifar(): return DenseNet(...)`).
    return /^[A-Z]/.test(name) || model.functionsHere(name).some((f) => !f.cls && returnsConstructed(model, f));
  });
}

function returnsConstructed(model: FileModel, fn: FunctionInfo): boolean {
  const returns = descendants(fn.body ?? fn.node, isScopeNode).filter((n) => n.type === 'return_statement');
  return returns.length > 0 && returns.every((r) => {
    const v = r.children.find((c) => c.named);
    const callee = v?.type === 'call' ? model.callee(v) : undefined;
    return !!callee && /^[A-Z]/.test(lastName(model.src(callee)));
  });
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

/** The phase context of a forward that runs in both phases of a step (sharedPhase.ts). */
function phaseContext(model: FileModel, call: SyntaxNode, fn: FunctionInfo | undefined): Context | undefined {
  const phase = fn && sharedPhaseOf(model, call, fn);
  return phase && fn ? { kind: 'phase', phase, fn } : undefined;
}

function describe(context: Context, model: FileModel): string {
  switch (context.kind) {
    case 'name':
      return `in \`${context.fn.name}()\``;
    case 'loader': {
      const right = context.loop.children.find((c) => c.field === 'right');
      return `in a loop over \`${right ? model.src(right) : 'the validation data'}\``;
    }
    case 'caller':
      return `in \`${context.fn.name}()\`, which ${context.caller} calls to evaluate,`;
    case 'eval':
      return `after \`${context.receiver}${context.assigned ? '.training = False' : '.eval()'}\` (which does not turn off autograd)`;
    case 'volatile':
      return 'on a `volatile=True` input (ignored since PyTorch 0.4, so autograd records it)';
    case 'read':
      return `${context.fn ? `in \`${context.fn.name}()\`` : 'at module level'}, whose output is only read (printed, saved or turned into numbers),`;
    case 'flag':
      return context.defaulted ? `with \`${context.param}\` left at its default \`${context.value}\`, which skips its backward pass,` : `with \`${context.param}=${context.value}\`, which skips its backward pass,`;
    case 'phase':
      return `in both phases of \`${context.fn.name}()\` (backward only \`if ${context.phase.source}\`, \`${model.src(context.phase.evalSwitch)}\` otherwise), so the evaluation phase runs it`;
  }
}

/**
 * Is every call site of `fn` in the workspace guarded, directly or through its callers (up to 3
 * levels)? Once per function, depth and file version: every forward in `fn` asks it.
 */
function callersGuarded(fn: FunctionInfo, depth: number): boolean {
  // The depth only grows, so the fact never asks itself (a cycle would read undefined).
  return fn.model.fact(`callersGuarded:${depth}:${fn.node.order}`, () => {
    const sites = callSitesOf(fn);
    if (sites.length === 0) return false;
    return sites.every((s) => {
      const state = s.model.gradState(s.call);
      if (state !== 'default') return state === 'off';
      const caller = s.model.functionOf(s.call);
      return !!caller && depth < maxCallerDepth && callersGuarded(caller, depth + 1);
    });
  }) ?? false;
}

/**
 * `trainer.eval(evaluate, model_file)` (pytorchic-bert's classify.py): a function with no calls of its own, handed
 * as an argument to project functions that call it only under a grad guard (`with torch.no_grad(): evaluate(model,
 * batch)` in `Trainer.eval`): its forward never records a graph. Every place that hands it on must be such a call.
 */
function handedToGuard(fn: FunctionInfo): boolean {
  return fn.model.fact(`handedToGuard:${fn.node.order}`, () => {
    const refs = fn.model.facts.valueReferences(fn.name);
    if (refs.length === 0 || callSitesOf(fn).length > 0) return false;
    return refs.every((r) => {
      const n = r.node;
      if (n.type !== 'identifier') return false;
      const args = n.parent?.type === 'keyword_argument' && n.field === 'value' ? n.parent.parent : n.parent;
      const call = args?.type === 'argument_list' ? args.parent : undefined;
      if (!call || call.type !== 'call') return false;
      const target = resolveCall(r.model, call);
      const g = target?.fn;
      if (!target || !g || target.cls) return false;
      const param = g.params.find((p) => argumentFor(r.model, call, target, p) === n);
      if (!param) return false;
      const gm = g.model;
      const uses = gm.callsIn(g.node).filter((c) => {
        const callee = gm.callee(c);
        return gm.functionOf(c) === g && callee?.type === 'identifier' && gm.textIs(callee, param);
      });
      return uses.length > 0 && uses.every((c) => gm.gradState(c) === 'off');
    });
  }) ?? false;
}

/**
 * The guard for this finding, only where it changes nothing a training path computes: the
 * function's decorator when every caller of it is known to evaluate (trainingPath.ts), else
 * `with no_grad():` around the validation loop or the call's own statement when nothing it
 * computes reaches a backward pass or leaves for a caller that may train. Undefined otherwise.
 */
function fixFor(model: FileModel, call: SyntaxNode, context: Context, fn: FunctionInfo | undefined): Fix | undefined {
  if (context.kind === 'phase') {
    // `set_grad_enabled(<the training condition>)`: on in the training phase, off in the other.
    const stmt = statementOf(call);
    const enabled = torchSpelling(model, 'set_grad_enabled');
    return stmt ? { title: `Wrap in \`with ${enabled.text}(${context.phase.source}):\``, edits: [...enabled.edits, wrapStatement(model, stmt, `with ${enabled.text}(${context.phase.source}):`)] } : undefined;
  }
  const guard = torchSpelling(model, 'no_grad');
  const allInference = fn && !model.hasTrainingSignal(fn.node) && (context.kind === 'name' || context.kind === 'caller' || (context.kind === 'eval' && !hasTrainCall(model, fn)));
  if (fn && allInference && decorateSafe(fn)) {
    return { title: `Decorate \`${fn.name}\` with \`@${guard.text}()\``, edits: [...guard.edits, addDecorator(model, fn, `${guard.text}()`)] };
  }
  const own = statementOf(call);
  for (const target of new Set([wrapTarget(model, call, context), ...(own ? [own] : [])])) {
    if (wrapSafe(model, target, fn, context.kind === 'flag' ? call : undefined)) return { title: `Wrap in \`with ${guard.text}():\``, edits: [...guard.edits, wrapStatement(model, target, `with ${guard.text}():`)] };
  }
  return undefined;
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

/** volatile-variable: `Variable(x, volatile=True)`, a no-op since PyTorch 0.4. */
import { rangeOf, removeArgument } from '../fixes';
import type { FileModel } from '../model';
import { argumentFor, parameterDefault } from '../model/summaries';
import type { SyntaxNode } from '../syntax';
import { sitesOf } from '../trainingPath';
import type { Rule } from '../rule';
import { docsUrlFor, type RawFinding } from '../types';

const id = 'volatile-variable';

export const rule: Rule = {
  id,
  defaultSeverity: 'warning',
  summary: 'Variable(..., volatile=True) has been a no-op since PyTorch 0.4; it does not turn off autograd.',
  explanation:
    'Before PyTorch 0.4, `volatile=True` kept autograd from recording anything computed from the variable. Since 0.4 it is ignored (with a warning), ' +
    'so code that relied on it now records the whole forward pass and keeps every activation on the GPU, as if no guard were there. ' +
    'Use `with torch.no_grad():` (or `torch.inference_mode()`) around the inference instead.',
  docsUrl: docsUrlFor(id),
  check(model: FileModel): RawFinding[] {
    const findings: RawFinding[] = [];
    for (const call of model.targetCalls()) {
      const q = model.qualify(model.callee(call)) ?? '';
      if (!/(^|\.)Variable$/.test(q)) continue;
      const volatile = model.keywordArg(call, 'volatile');
      const kw = volatile?.parent;
      if (!volatile || !kw) continue;
      // Nothing is lost where the flag is never true, or where a grad guard is in force anyway.
      if (falsy(model.src(volatile)) || model.gradState(call) === 'off' || neverTrue(model, call, volatile)) continue;
      findings.push({
        message: '`volatile=True` is ignored since PyTorch 0.4: autograd still records this computation; use `with torch.no_grad():`.',
        range: rangeOf(kw),
        fixes: [{ title: 'Remove `volatile=` (then guard the inference with `torch.no_grad()`)', edits: [removeArgument(model, kw)] }],
      });
    }
    return findings;
  },
};

const falsy = (text: string): boolean => text === 'False' || text === 'None' || text === '0';

/**
 * `Variable(x, volatile=evaluation)` in `def get_batch(..., evaluation=False)`: true only where a
 * caller passes a true value, and harmless where that caller runs under a grad guard (TCN's
 * `evaluate()` calls it with `evaluation=True` inside `torch.no_grad()`; another copy of the
 * helper is never called with it). Callers unknown (none in the workspace): nothing to report.
 */
function neverTrue(model: FileModel, call: SyntaxNode, value: SyntaxNode): boolean {
  if (value.type !== 'identifier') return false;
  const fn = model.functionOf(call);
  const param = model.src(value);
  if (!fn || !fn.params.includes(param) || model.bindingsIn(fn.node, param).length > 0) return false;
  const given = parameterDefault(fn, param);
  const fallback = given && fn.model.src(given);
  return sitesOf(fn).every((site) => {
    const arg = argumentFor(site.model, site.call, { fn, cls: undefined, bound: !!fn.cls }, param);
    const text = arg ? site.model.src(arg) : fallback;
    return (text !== undefined && falsy(text)) || site.model.gradState(site.call) === 'off';
  });
}

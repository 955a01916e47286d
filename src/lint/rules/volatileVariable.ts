/** volatile-variable: `Variable(x, volatile=True)`, a no-op since PyTorch 0.4. */
import { rangeOf, removeArgument } from '../fixes';
import type { FileModel } from '../model';
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
      findings.push({
        message: '`volatile=True` is ignored since PyTorch 0.4: autograd still records this computation; use `with torch.no_grad():`.',
        range: rangeOf(kw),
        fixes: [{ title: 'Remove `volatile=` (then guard the inference with `torch.no_grad()`)', edits: [removeArgument(model, kw)] }],
      });
    }
    return findings;
  },
};

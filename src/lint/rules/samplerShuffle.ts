/** sampler-shuffle: a DataLoader given both `shuffle=True` and a `sampler`. */
import { rangeOf, removeArgument } from '../fixes';
import type { FileModel } from '../model';
import type { Rule } from '../rule';
import { docsUrlFor, type RawFinding } from '../types';

const id = 'sampler-shuffle';

export const rule: Rule = {
  id,
  defaultSeverity: 'error',
  summary: 'DataLoader with shuffle=True and a sampler: PyTorch rejects the combination.',
  explanation:
    '`DataLoader` raises `ValueError: sampler option is mutually exclusive with shuffle` when both are given, usually minutes into a job, after the model is on the GPU. ' +
    'The sampler decides the order; with a `DistributedSampler`, pass `shuffle=True` to the sampler and call `sampler.set_epoch(epoch)` every epoch. ' +
    'A conditional such as `shuffle=(sampler is None)` is correct and not reported.',
  docsUrl: docsUrlFor(id),
  check(model: FileModel): RawFinding[] {
    const findings: RawFinding[] = [];
    for (const call of model.targetCalls()) {
      const q = model.qualify(model.callee(call)) ?? '';
      if (!/(^|\.)DataLoader$/.test(q)) continue;
      const shuffle = model.keywordArg(call, 'shuffle');
      const sampler = model.keywordArg(call, 'sampler') ?? model.positionalArgs(call)[3];
      if (!shuffle || model.src(shuffle) !== 'True' || !sampler || model.src(sampler) === 'None') continue;
      const kw = shuffle.parent;
      if (!kw) continue;
      findings.push({
        message: `\`DataLoader\` gets \`shuffle=True\` and \`sampler=${model.src(sampler)}\`: PyTorch raises ValueError; let the sampler shuffle.`,
        range: rangeOf(kw),
        fixes: [{ title: 'Remove `shuffle=True`', edits: [removeArgument(model, kw)] }],
      });
    }
    return findings;
  },
};

/** data-parallel: `nn.DataParallel`, whose first GPU carries more memory than the others. */
import { rangeOf } from '../fixes';
import type { FileModel } from '../model';
import type { Rule } from '../rule';
import { docsUrlFor, type RawFinding } from '../types';

const id = 'data-parallel';

export const rule: Rule = {
  id,
  defaultSeverity: 'info',
  summary: 'nn.DataParallel puts the outputs, the loss and the optimizer state on GPU 0: memory is unbalanced.',
  explanation:
    '`nn.DataParallel` runs one process that scatters each batch, replicates the model on every forward pass, and gathers all outputs on the first device. ' +
    'GPU 0 therefore holds the gathered outputs, the loss, the gradients reduced there and the optimizer state, and runs out of memory while the others have room. ' +
    'PyTorch recommends `DistributedDataParallel` (one process per GPU, launched with `torchrun`), which keeps memory balanced and is faster.',
  docsUrl: docsUrlFor(id),
  check(model: FileModel): RawFinding[] {
    const findings: RawFinding[] = [];
    for (const call of model.targetCalls()) {
      const q = model.qualify(model.callee(call)) ?? '';
      if (!/^torch\.nn\.(parallel\.(data_parallel\.)?)?DataParallel$/.test(q)) continue;
      findings.push({
        message: '`nn.DataParallel` gathers outputs and keeps the optimizer state on GPU 0, which runs out of memory first; prefer `DistributedDataParallel` with torchrun.',
        range: rangeOf(call),
        fixes: [],
      });
    }
    return findings;
  },
};

/** empty-cache-in-loop: `torch.cuda.empty_cache()` on every iteration. */
import { rangeOf, removeStatement } from '../fixes';
import type { FileModel } from '../model';
import type { Rule } from '../rule';
import { ancestors, child, loopTypes, statementOf, type SyntaxNode } from '../syntax';
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
      if (model.qualify(model.callee(call)) !== 'torch.cuda.empty_cache') continue;
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
          if (cond && /%|\bstep\b|==/.test(model.src(cond))) excused = true;
        }
      }
      if (!inLoop || excused) continue;
      // In an epoch loop, before or after its batch loop: once per epoch, not every step.
      if (!model.batchLoopOf(call) && model.runsBatchLoop(inLoop)) continue;
      const stmt = statementOf(call);
      if (stmt && leavesLoopAfter(stmt)) continue;
      findings.push({
        message: '`torch.cuda.empty_cache()` on every iteration frees no memory that is still in use and makes the next step allocate from the driver again.',
        range: rangeOf(call),
        fixes: stmt && stmt.type === 'expression_statement' ? [{ title: 'Remove the call', edits: [removeStatement(model, stmt)] }] : [],
      });
    }
    return findings;
  },
};

/** Does a later statement of the same block leave the loop (`break`, `return`, `raise`)? Then the call runs at most once. */
function leavesLoopAfter(stmt: SyntaxNode): boolean {
  const siblings = stmt.parent?.type === 'block' ? stmt.parent.children : [];
  return siblings.slice(siblings.indexOf(stmt) + 1).some((s) => s.type === 'break_statement' || s.type === 'return_statement' || s.type === 'raise_statement');
}

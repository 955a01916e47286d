/**
 * What the rules know about one Python file: imports and aliases, functions and classes,
 * scopes with their assignments, grad guards, which callees are models, and which values
 * carry autograd history. Facts that need other files (a guard in a caller, a project's own
 * `@contextmanager` around `no_grad`, an `nn.Module` subclass defined elsewhere, a meter
 * whose `update` appends) come from the workspace through `WorkspaceFacts`.
 *
 * Everything here leans towards silence: when provenance or a guard is unknown, the answer
 * is the one that produces no finding.
 */
import { ModelProvenance } from './model/provenance';

export { callSitesOf, hasAny, lastName } from './model/types';
export type { CallSite, ClassInfo, FunctionInfo, GradState, ValueReference, WorkspaceFacts } from './model/types';
export type { Accumulation } from './model/provenance';

/**
 * The model of one file, in layers by concern, each over the one before: model/imports.ts (the
 * per-statement index: imports and aliases, functions, classes), model/scopes.ts (scopes and
 * assignments, the fact caches), model/guards.ts, model/models.ts and model/provenance.ts.
 */
export class FileModel extends ModelProvenance {}

// The model a FunctionInfo, ClassInfo or CallSite belongs to is the whole FileModel; declared here
// rather than in model/types.ts so that the types need not import this module (an import cycle).
declare module './model/types' {
  interface FunctionInfo {
    readonly model: FileModel;
  }
  interface ClassInfo {
    readonly model: FileModel;
  }
  interface CallSite {
    readonly model: FileModel;
  }
  interface ValueReference {
    readonly model: FileModel;
  }
}

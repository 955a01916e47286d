/**
 * The problems of a job file (`*.job.json`) or tune spec (`*.tune.json`) as the editor underlines
 * them: from the very validators Start Training and Tune Hyperparameters run (`parseJob`,
 * `jobProblems`, `parseSpec`), so a squiggle and a refusal can never disagree, each placed on the
 * field its JSON path names (jsonc-parser gives the offsets). Free of VS Code imports, so unit
 * tests can check the ranges; specDiagnostics.ts turns them into Diagnostics.
 */
import { findNodeAtLocation, parseTree, type Node } from 'jsonc-parser';
import { JobFileError, jobProblems, parseJob } from '../../training/job/spec';
import { parseSpec, SpecError } from '../../tuning/spec';
import { problemPath } from '../training/trainingFormat';

export interface SpecProblem {
  /** Offset and length in the document text of what to underline. */
  readonly offset: number;
  readonly length: number;
  /** The words the refusal uses (a JSON path, then what was expected). */
  readonly message: string;
}

export type SpecKind = 'job' | 'tune';

/** Which validator a file name calls for, if any. */
export function specKind(fileName: string): SpecKind | undefined {
  if (fileName.endsWith('.job.json')) return 'job';
  if (fileName.endsWith('.tune.json')) return 'tune';
  return undefined;
}

/**
 * The problems of `text`, read as the file `file` (relative paths in it resolve against its
 * folder). Text that is not JSON gives none: the editor's JSON support reports syntax errors.
 */
export function specProblems(text: string, file: string, kind: SpecKind | undefined = specKind(file)): SpecProblem[] {
  if (!kind) return [];
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return [];
  }
  const root = parseTree(text);
  if (!root) return [];
  const at = (problem: string, path: readonly (string | number)[] | undefined): SpecProblem => ({ ...place(root, problem, path), message: problem });
  if (kind === 'tune') {
    try {
      parseSpec(raw, file);
      return [];
    } catch (err) {
      if (!(err instanceof SpecError)) throw err;
      const message = `${err.path || '/'}: ${err.detail}`;
      return [at(message, problemPath(message))];
    }
  }
  const torchrun = typeof raw === 'object' && raw !== null && (raw as { kind?: unknown }).kind === 'torchrun';
  let problems: readonly string[];
  if (torchrun) {
    problems = jobProblems(raw);
  } else {
    try {
      parseJob(raw, file);
      problems = [];
    } catch (err) {
      if (!(err instanceof JobFileError)) throw err;
      problems = err.problems;
    }
  }
  return problems.map((p) => at(p, problemPath(p)));
}

/** The offsets to underline for a problem at `path` (undefined: the whole document's start). */
function place(root: Node, problem: string, path: readonly (string | number)[] | undefined): { offset: number; length: number } {
  const brace = { offset: root.offset, length: 1 };
  if (!path) return brace;
  // jobSpec.ts words these two about the object that holds the field; the field is the place.
  // (spec.ts names the field itself: "/search/seeds: is not a known field".)
  const unknown = /has an unknown field "([^"]+)"/.exec(problem);
  const missing = /is missing the required field "([^"]+)"/.exec(problem);
  const full = unknown ? [...path, unknown[1]] : missing ? [...path, missing[1]] : path;
  const nameIsTheProblem = unknown !== null || /^\/\S*: is not a known field/.test(problem);
  for (let n = full.length; n >= 0; n--) {
    const node = n === 0 ? root : findNodeAtLocation(root, [...full.slice(0, n)]);
    if (!node) continue;
    if (n === full.length && !missing) {
      // An unknown (or extra) field: its name. A bad value: the value.
      const key = node.parent?.type === 'property' ? node.parent.children?.[0] : undefined;
      const target = nameIsTheProblem && key ? key : node;
      return { offset: target.offset, length: target.length };
    }
    // What is missing lies inside `node`: underline the name of the object that lacks it (or, at
    // the top, the opening brace), as the editor's own JSON checks do.
    const key = node.parent?.type === 'property' ? node.parent.children?.[0] : undefined;
    return key ? { offset: key.offset, length: key.length } : { offset: node.offset, length: 1 };
  }
  return brace;
}

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
 * Which validator a document calls for: only files on disk (not output channels, untitled or
 * git: views) named *.job.json or *.tune.json. Looked at before anything is scheduled for it.
 */
export function documentSpecKind(uri: { readonly scheme: string; readonly fsPath: string }): SpecKind | undefined {
  return uri.scheme === 'file' ? specKind(uri.fsPath) : undefined;
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
      // SpecError carries its JSON pointer apart from the words: no parsing back out of the message.
      return [at(`${err.path || '/'}: ${err.detail}`, resolvePointer(root, pointerSegments(err.path)))];
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
  return problems.map((p) => at(p, problemPath(p, root)));
}

/**
 * Where in `text` a problem (as JobFileError words it) lies: what the editor underlines, and
 * where Start Training's "Open File" puts the selection. Undefined for text that is not JSON.
 */
export function problemRange(text: string, problem: string): { offset: number; length: number } | undefined {
  const root = parseTree(text);
  return root && place(root, problem, problemPath(problem, root));
}

/** An RFC 6901 JSON pointer's reference tokens: "/env/A~1B" -> ['env', 'A/B'] ("" and "/": the root). */
export function pointerSegments(pointer: string): string[] {
  if (pointer === '' || pointer === '/') return [];
  return pointer.slice(1).split('/').map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/**
 * `segments` as a jsonc-parser path in the document `root`: a segment is an array index only
 * where its parent is an array (an object key "7" stays a string). Past the first segment that is
 * not in the document the rest is kept as strings.
 */
function resolvePointer(root: Node, segments: readonly string[]): (string | number)[] {
  const path: (string | number)[] = [];
  let node: Node | undefined = root;
  for (const seg of segments) {
    if (node?.type === 'array' && /^\d+$/.test(seg)) {
      path.push(Number(seg));
      node = node.children?.[Number(seg)];
    } else {
      path.push(seg);
      const prop: Node | undefined = node?.type === 'object' ? node.children?.find((c) => c.children?.[0]?.value === seg) : undefined;
      node = prop?.children?.[1];
    }
  }
  return path;
}

/** Whether every segment of `path` is in the document. */
function exists(root: Node, path: readonly (string | number)[]): boolean {
  return path.length === 0 || findNodeAtLocation(root, [...path]) !== undefined;
}

/**
 * The field a problem names, as a path in the document `root`: "/data/mnist/trainSize must be …"
 * -> ['data', 'mnist', 'trainSize']. The message starts with a JSON pointer followed by a space or
 * ':'; since a key may itself hold spaces or ':' ("/env/X Y must be a string"), the longest such
 * prefix that names a field of the document wins, else the shortest. Undefined when the problem
 * names no field ("cannot be read").
 */
export function problemPath(problem: string, root: Node): (string | number)[] | undefined {
  const text = problem.trim();
  if (!text.startsWith('/')) return undefined;
  const ends: number[] = [];
  for (let i = 1; i <= text.length; i++) if (i === text.length || /[\s:]/.test(text[i])) ends.push(i);
  const candidates = ends.map((end) => resolvePointer(root, pointerSegments(text.slice(0, end))));
  for (let i = candidates.length - 1; i >= 0; i--) if (exists(root, candidates[i])) return candidates[i];
  return candidates[0];
}

/** The offsets to underline for a problem at `path` (undefined: the whole document's start). */
function place(root: Node, problem: string, path: readonly (string | number)[] | undefined): { offset: number; length: number } {
  const brace = { offset: root.offset, length: 1 };
  if (!path) return brace;
  // training/job/spec.ts words these two about the object that holds the field; the field is the place.
  // (tuning/spec.ts names the field itself: "/search/seeds: is not a known field".)
  const unknown = /has an unknown field "([^"]+)"/.exec(problem);
  const missing = /is missing the required field "([^"]+)"/.exec(problem);
  const full = unknown ? [...path, unknown[1]] : missing ? [...path, missing[1]] : path;
  const nameIsTheProblem = unknown !== null || /: is not a known field/.test(problem);
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

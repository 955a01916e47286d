/**
 * Dependency recording for incremental re-analysis. While the linter analyses one top-level
 * statement of a file (a "chunk"), every lookup that can reach into another chunk (functions,
 * classes or call sites by name, module-level bindings, bindings anywhere by key) records a
 * key here. After an edit, a chunk's cached findings are reused only when no key it recorded
 * is one the edited chunks export (see `FileModel.exportsOf`). Facts memoised while analysing
 * one chunk carry their keys with them, so a later chunk that reuses the fact records them too.
 */

let frame: Set<string> | undefined;
/** The key sets `replay` already added to `frame` (made at the first replay: most recordings replay nothing). */
let replayed: Set<ReadonlySet<string>> | undefined;

/** Records a lookup key in the analysis being recorded, if any. */
export function track(key: string): void {
  frame?.add(key);
}

/** Whether a recording is under way (the incremental linter analysing a chunk). */
export function recordingNow(): boolean {
  return frame !== undefined;
}

/**
 * Runs `compute` recording its keys; they are also added to the enclosing recording. Without
 * an enclosing recording it just computes (deps undefined), so the one-shot CLI pays nothing.
 */
export function recorded<T>(compute: () => T): { value: T; deps: Set<string> | undefined } {
  const outer = frame;
  if (!outer) return { value: compute(), deps: undefined };
  const outerReplayed = replayed;
  const mine = new Set<string>();
  frame = mine;
  replayed = undefined;
  try {
    return { value: compute(), deps: mine };
  } finally {
    frame = outer;
    replayed = outerReplayed;
    for (const k of mine) outer.add(k);
  }
}

/** Adds a memoised fact's keys to the analysis being recorded (once per recording: a fact is often asked many times in one). */
export function replay(deps: ReadonlySet<string> | undefined): void {
  if (!frame || !deps || deps.size === 0) return;
  replayed ??= new Set();
  if (replayed.has(deps)) return;
  replayed.add(deps);
  for (const k of deps) frame.add(k);
}

/** Runs `compute` as the root of a recording and returns its keys. */
export function recordRoot<T>(compute: () => T): { value: T; deps: Set<string> } {
  const outer = frame;
  const outerReplayed = replayed;
  const mine = new Set<string>();
  frame = mine;
  replayed = undefined;
  try {
    return { value: compute(), deps: mine };
  } finally {
    frame = outer;
    replayed = outerReplayed;
  }
}

/** Runs `compute` with no recording (facts every chunk shares, compared by value instead). */
export function unrecorded<T>(compute: () => T): T {
  const outer = frame;
  const outerReplayed = replayed;
  frame = undefined;
  try {
    return compute();
  } finally {
    frame = outer;
    replayed = outerReplayed;
  }
}

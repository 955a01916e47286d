/**
 * Dependency recording for incremental re-analysis. While the linter analyses one top-level
 * statement of a file (a "chunk"), every lookup that can reach into another chunk (functions,
 * classes or call sites by name, module-level bindings, bindings anywhere by key) records a
 * key here. After an edit, a chunk's cached findings are reused only when no key it recorded
 * is one the edited chunks export (see `FileModel.exportsOf`). Facts memoised while analysing
 * one chunk carry their keys with them, so a later chunk that reuses the fact records them too.
 */

/** Whether a recording is under way. */
let recording = false;
/** The keys of the innermost recording, made at its first key: most facts record none. */
let frame: Set<string> | undefined;
/** The key sets `replay` already added to `frame` (made at the first replay: most recordings replay nothing). */
let replayed: Set<ReadonlySet<string>> | undefined;

/** The keys of a recording that made none: one shared set, which nothing may add to. */
class NoKeys extends Set<string> {
  override add(key: string): this {
    throw new Error(`deps: the shared empty key set cannot take '${key}'`);
  }
}
const noKeys: Set<string> = new NoKeys();

/** The innermost recording's keys so far (`frame`, read after a computation has set it). */
function current(): Set<string> | undefined {
  return frame;
}

/** Records a lookup key in the analysis being recorded, if any. */
export function track(key: string): void {
  if (recording) (frame ??= new Set()).add(key);
}

/** Whether a recording is under way (the incremental linter analysing a chunk). */
export function recordingNow(): boolean {
  return recording;
}

/**
 * Runs `compute` recording its keys; they are also added to the enclosing recording. Without
 * an enclosing recording it just computes (deps undefined), so the one-shot CLI pays nothing.
 */
export function recorded<T>(compute: () => T): { value: T; deps: Set<string> | undefined } {
  if (!recording) return { value: compute(), deps: undefined };
  const outer = frame;
  const outerReplayed = replayed;
  frame = undefined;
  replayed = undefined;
  try {
    const value = compute();
    return { value, deps: current() ?? noKeys };
  } finally {
    const mine = current();
    frame = outer;
    replayed = outerReplayed;
    if (mine) {
      const into = (frame ??= new Set());
      for (const k of mine) into.add(k);
    }
  }
}

/** Adds a memoised fact's keys to the analysis being recorded (once per recording: a fact is often asked many times in one). */
export function replay(deps: ReadonlySet<string> | undefined): void {
  if (!recording || !deps || deps.size === 0) return;
  replayed ??= new Set();
  if (replayed.has(deps)) return;
  replayed.add(deps);
  const into = (frame ??= new Set());
  for (const k of deps) into.add(k);
}

/** Runs `compute` as the root of a recording and returns its keys. */
export function recordRoot<T>(compute: () => T): { value: T; deps: Set<string> } {
  const outerRecording = recording;
  const outer = frame;
  const outerReplayed = replayed;
  recording = true;
  frame = undefined;
  replayed = undefined;
  try {
    const value = compute();
    return { value, deps: current() ?? noKeys };
  } finally {
    recording = outerRecording;
    frame = outer;
    replayed = outerReplayed;
  }
}

/** Runs `compute` with no recording (facts every chunk shares, compared by value instead). */
export function unrecorded<T>(compute: () => T): T {
  const outerRecording = recording;
  const outer = frame;
  const outerReplayed = replayed;
  recording = false;
  frame = undefined;
  try {
    return compute();
  } finally {
    recording = outerRecording;
    frame = outer;
    replayed = outerReplayed;
  }
}

/**
 * Python exceptions in the output of a torchrun job: every traceback a worker prints, read line
 * by line as it comes, with
 * - the rank, from the `[default1]:` prefix of torchrun's --tee (or `[rank1]:` / `[1]:`); lines of
 *   several ranks may interleave, each rank's traceback is followed on its own;
 * - the exception's type and message (its indented further lines: messages may span several);
 * - the user's innermost frame: the deepest frame outside the Python library folders
 *   (site-packages, dist-packages, lib/pythonX.Y, `<frozen …>`), where a problem belongs;
 * - chained exceptions ("During handling of the above exception…", "The above exception was the
 *   direct cause…"): the last one printed is the one that ended the script, the earlier ones
 *   are kept as its chain;
 * - SyntaxError, whose location is a `File "x.py", line N` line without a function (with no
 *   "Traceback" header when it is the script itself);
 * - a DataLoader worker's error: the exception in its "Original Traceback", at the user's frame
 *   there (the data set's `__getitem__`), the main process's re-raise as its chain;
 * - an ExceptionGroup's top level (Python 3.11's `  + Exception Group Traceback` and `  | ` lines),
 *   its sub-exceptions only through the group's message;
 * - tracebacks printed and survived ("Exception ignored in: …", a thread's), marked `ignored`.
 * Lines are read through `outputLine` (colours, doubled prefixes, progress bars redrawn with `\r`).
 * torchrun's own tracebacks (ChildFailedError, SignalException, or any error of the launcher)
 * have no frame of the user's and are told apart by `userFrame`.
 */
import type { CudaProblem, ModuleShapeProblem, OomMemoryProblem, ProblemBase } from './problems';
import { frameLine, libraryFrame, outputLine } from './outputLines';

export interface TracebackFrame {
  readonly file: string;
  readonly line: number;
  /** The function, absent on a SyntaxError's location line. */
  readonly function?: string;
}

/** Another exception of a chain, as printed with the one that ended the script. */
export interface ChainedException {
  /**
   * `cause`: "…was the direct cause of the following exception" (raise … from); `context`: "During
   * handling…"; `reraised`: the exception a DataLoader worker's error was re-raised as in the main
   * process ("Caught ValueError in DataLoader worker process 0."), at the loop's line.
   */
  readonly relation: 'cause' | 'context' | 'reraised';
  readonly type: string;
  readonly message: string;
  readonly file?: string;
  readonly line?: number;
}

export interface ScriptException {
  /** As printed: `RuntimeError`, `torch.cuda.OutOfMemoryError`. */
  readonly type: string;
  /** The message, all its lines ('' when the exception had none). */
  readonly message: string;
  readonly rank?: number;
  /** Outermost first, as printed (of a DataLoader worker's error, the worker's "Original Traceback"). */
  readonly frames: readonly TracebackFrame[];
  /** The user's innermost frame, when a frame lies outside the library folders. */
  readonly userFrame?: TracebackFrame;
  /** The innermost frame, when it is not the user's (where in a library it was raised). */
  readonly raisedIn?: TracebackFrame;
  /** Other exceptions of the chain, in the order printed. */
  readonly chain: readonly ChainedException[];
  /** Order of the exception's line in the output, to find the first failure. */
  readonly seq: number;
  /** Printed after "Exception ignored in: …" or "Exception in thread …": it did not end the script. */
  readonly ignored?: boolean;
}


const header = /^Traceback \(most recent call last\):\s*$/;
/** Python 3.11's ExceptionGroup: its own traceback is the `  | ` lines below this, its sub-exceptions are indented further. */
const groupHeader = /^ {2}\+ Exception Group Traceback \(most recent call last\):\s*$/;
const groupLine = /^ {2}\|(?: (.*))?$/;
/** A DataLoader worker's traceback, printed inside the message of the exception it was re-raised as. */
const originalHeader = /^Original Traceback \(most recent call last\):\s*$/;
const repeated = /^\s+\[Previous line repeated \d+ more times?\]\s*$/;
const exceptionLine = /^([A-Za-z_][\w.]*)(?::(?: (.*))?)?$/;
const causeMarker = /^The above exception was the direct cause of the following exception:\s*$/;
const contextMarker = /^During handling of the above exception, another exception occurred:\s*$/;
/** A traceback after these lines was printed and survived: by `__del__`, a thread, an atexit handler. */
const ignoredIntro = /^Exception ignored in\b|^Exception in thread\b|^Error in atexit\._run_exitfuncs:/;
/** The most lines a message is taken to have. */
const maxMessageLines = 40;

interface Pending {
  type: string;
  lines: string[];
  blanks: number;
  frames: TracebackFrame[];
  seq: number;
  ignored: boolean;
  /** A DataLoader worker's error: the exception it was re-raised as. */
  reraisedAs?: Pending;
}

interface Stream {
  /** In a traceback (frames so far), else undefined. */
  frames?: TracebackFrame[];
  /** The exception line was seen: collecting its message. */
  pending?: Pending;
  /** Earlier exceptions of the chain being printed. */
  chain: { relation: 'cause' | 'context'; pending: Pending }[];
  /** A chain marker was seen: the next traceback continues the chain. */
  awaiting?: 'cause' | 'context';
  /** In the top level of an ExceptionGroup's traceback (`  | ` lines). */
  group?: boolean;
  /** The traceback being read follows an `ignoredIntro` line. */
  ignored?: boolean;
  /** Reading the "Original Traceback" of a DataLoader worker: the exception it was re-raised as. */
  reraisedAs?: Pending;
  /** The last non-blank text of this rank, to see what a traceback follows. */
  last?: string;
  /** The frames of this rank's latest traceback. */
  lastFrames: TracebackFrame[];
}

/** The deepest frame outside the library folders: where a problem belongs. */
export function innermostUser(frames: readonly TracebackFrame[]): TracebackFrame | undefined {
  for (let i = frames.length - 1; i >= 0; i--) if (!libraryFrame.test(frames[i].file)) return frames[i];
  return undefined;
}

function messageOf(p: Pending): string {
  return p.lines.join('\n').trimEnd();
}

/**
 * Feeds output line by line; returns the exceptions whose message is complete. Call `end()` at the
 * end of the output. A message is its exception line and the indented lines right after it (how
 * Python prints a multi-line message that is laid out, and PyTorch's `\t`-indented lists): the
 * first line that is not indented ends it, so ordinary output after a caught, printed exception is
 * not taken into its message.
 */
export class PythonTracebackParser {
  private readonly streams = new Map<number, Stream>();
  private seq = 0;

  push(raw: string): ScriptException[] {
    const line = outputLine(raw);
    const rank = line.rank;
    let text = line.text;
    const key = rank ?? -1;
    let s = this.streams.get(key);
    if (!s) {
      s = { chain: [], lastFrames: [] };
      this.streams.set(key, s);
    }
    const seq = this.seq++;
    const done: ScriptException[] = [];
    const before = s.last;
    if (text.trim()) s.last = text;

    if (s.group) {
      const g = groupLine.exec(text);
      if (g) text = g[1] ?? '';
      else {
        // `  +-+---- 1 ----`: the sub-exceptions begin; the group's own exception is complete.
        s.group = false;
        s.frames = undefined;
        if (s.pending) done.push(this.finish(s, rank));
        return done;
      }
    }

    if (s.pending) {
      const p = s.pending;
      if (causeMarker.test(text) || contextMarker.test(text)) {
        s.chain.push({ relation: causeMarker.test(text) ? 'cause' : 'context', pending: p });
        s.pending = undefined;
        s.awaiting = causeMarker.test(text) ? 'cause' : 'context';
        return done;
      }
      if (originalHeader.test(text)) {
        s.reraisedAs = p;
        s.pending = undefined;
        s.frames = [];
        return done;
      }
      if (text.trim() === '') {
        p.blanks++;
        return done;
      }
      if (/^\s/.test(text) && !frameLine.test(text) && p.lines.length + p.blanks < maxMessageLines) {
        for (; p.blanks > 0; p.blanks--) p.lines.push('');
        p.lines.push(text);
        return done;
      }
      done.push(this.finish(s, rank));
    }

    if (s.awaiting && !header.test(text)) {
      if (text.trim() === '') return done;
      // A marker not followed by a traceback: the chain is broken off, its last exception stands.
      const last = s.chain.pop();
      s.awaiting = undefined;
      if (last) {
        s.pending = last.pending;
        done.push(this.finish(s, rank));
      }
    }

    if (header.test(text) || groupHeader.test(text)) {
      if (!s.awaiting) {
        s.chain = [];
        s.ignored = before !== undefined && ignoredIntro.test(before);
      }
      s.awaiting = undefined;
      s.reraisedAs = undefined;
      s.group = groupHeader.test(text);
      s.frames = [];
      return done;
    }
    const frame = frameLine.exec(text);
    if (frame) {
      const f: TracebackFrame = { file: frame[1], line: Number(frame[2]), ...(frame[3] ? { function: frame[3].trim() } : {}) };
      if (s.frames) s.frames.push(f);
      // A SyntaxError in the script itself: Python prints its location without a "Traceback" header.
      else if (!f.function) {
        s.chain = [];
        s.ignored = false;
        s.frames = [f];
      }
      return done;
    }
    if (!s.frames) return done;
    if (repeated.test(text) || /^\s/.test(text) || text === '') return done; // source lines, carets, "[Previous line repeated …]"
    const ex = exceptionLine.exec(text);
    if (!ex) {
      s.frames = undefined; // not a traceback after all
      s.reraisedAs = undefined;
      return done;
    }
    s.pending = { type: ex[1], lines: [ex[2] ?? ''], blanks: 0, frames: s.frames, seq, ignored: s.ignored ?? false, ...(s.reraisedAs ? { reraisedAs: s.reraisedAs } : {}) };
    s.lastFrames = s.frames;
    s.frames = undefined;
    s.reraisedAs = undefined;
    return done;
  }

  /** The exceptions still collecting their message when the output ended. */
  end(): ScriptException[] {
    const done: ScriptException[] = [];
    for (const [key, s] of this.streams) {
      if (!s.pending && s.awaiting) {
        const last = s.chain.pop();
        s.awaiting = undefined;
        if (last) s.pending = last.pending;
      }
      // A worker's "Original Traceback" that was cut off: the exception it was re-raised as stands.
      if (!s.pending && s.reraisedAs) s.pending = s.reraisedAs;
      s.reraisedAs = undefined;
      if (s.pending) done.push(this.finish(s, key === -1 ? undefined : key));
    }
    return done.sort((a, b) => a.seq - b.seq);
  }

  /**
   * The frames of a rank's traceback being read, else of its latest one (the location of an error
   * line that CudaErrorParser recognises).
   */
  frames(rank: number | undefined): readonly TracebackFrame[] {
    const s = this.streams.get(rank ?? -1);
    return s ? s.frames ?? s.pending?.frames ?? s.lastFrames : [];
  }

  private finish(s: Stream, rank: number | undefined): ScriptException {
    const p = s.pending as Pending;
    s.pending = undefined;
    const chain: ChainedException[] = s.chain.map(({ relation, pending }) => {
      const where = innermostUser(pending.frames) ?? pending.frames[pending.frames.length - 1];
      return { relation, type: pending.type, message: messageOf(pending), ...(where ? { file: where.file, line: where.line } : {}) };
    });
    s.chain = [];
    s.ignored = false;
    const outer = p.reraisedAs;
    const outerFrame = outer && innermostUser(outer.frames);
    if (outer) chain.push({ relation: 'reraised', type: outer.type, message: messageOf(outer), ...(outerFrame ? { file: outerFrame.file, line: outerFrame.line } : {}) });
    // A worker's error in library code only (a transform of a library): the loop's line is the user's.
    const userFrame = innermostUser(p.frames) ?? outerFrame;
    const innermost = p.frames[p.frames.length - 1];
    return {
      type: p.type,
      message: messageOf(p),
      ...(rank !== undefined ? { rank } : {}),
      frames: p.frames,
      ...(userFrame ? { userFrame } : {}),
      ...(innermost && innermost !== userFrame ? { raisedIn: innermost } : {}),
      chain,
      seq: p.seq,
      ...(p.ignored ? { ignored: true } : {}),
    };
  }
}

/** Every exception in a whole output text, in the order printed. */
export function parsePythonExceptions(text: string): ScriptException[] {
  const parser = new PythonTracebackParser();
  const out: ScriptException[] = [];
  for (const line of text.split('\n')) out.push(...parser.push(line));
  out.push(...parser.end());
  return out.sort((a, b) => a.seq - b.seq);
}

/** Exceptions that stop a script without it being wrong: Ctrl-C, sys.exit, torchrun passing on a signal or reporting failed workers. */
const notScriptErrors = /^(?:KeyboardInterrupt|SystemExit|GeneratorExit|(?:[\w.]+\.)?SignalException|(?:[\w.]+\.)?ChildFailedError)$/;

/** Whether an exception is an error of the user's script (a frame of theirs, not an interrupt, not one printed and survived). */
export function isScriptError(e: ScriptException): boolean {
  return e.userFrame !== undefined && !e.ignored && !notScriptErrors.test(e.type);
}

/** `type: message` on one line (a message's further lines joined), for a reason. */
export function exceptionText(e: { type: string; message: string }, max = 400): string {
  const msg = e.message.split('\n').map((l) => l.trim()).filter(Boolean).join(' ');
  const text = msg ? `${e.type}: ${msg}` : e.type;
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** A library path from its package on: `/usr/lib/python3/dist-packages/torch/nn/functional.py` → `torch/nn/functional.py`. */
export function shortLibraryPath(file: string): string {
  const m = /[/\\](?:site-packages|dist-packages)[/\\](.+)$/.exec(file) ?? /[/\\]lib[/\\]python\d[\d.]*[/\\](.+)$/.exec(file);
  return m ? m[1].replace(/\\/g, '/') : file;
}

/** An exception of the user's script as a problem: where it belongs (the user's innermost frame) and what it says. */
export interface ExceptionProblem extends ProblemBase {
  readonly kind: 'exception';
  /** `RuntimeError`, `torch.cuda.OutOfMemoryError`. */
  readonly exceptionType: string;
  /** `Type: message` as printed, all the message's lines; the explanation says where it was raised, when that
   * is a library's line, and what it was chained to; hints only for the errors where they are known. */
  readonly message: string;
  readonly chain?: readonly ChainedException[];
  /** The rank lost its connection to another: most likely because that one failed first. */
  readonly peerLost?: boolean;
}

/** gloo's and NCCL's words when the other end of a collective went away. */
const peerLostMessage = /Connection (?:closed|reset) by peer|remote process exited or there was a network error|Broken pipe|NCCL communicator was aborted/;

const shapeMismatch = /mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)/;

function hintsFor(e: ScriptException): string[] {
  return shapeHints(e.message);
}

/** What to try for a shape error's message, where it is known (a Linear layer's in_features). */
export function shapeHints(message: string): string[] {
  const m = shapeMismatch.exec(message);
  if (m && m[2] !== m[3]) {
    const [features, inFeatures, outFeatures] = [m[2], m[3], m[4]];
    return [
      `A Linear layer with in_features=${inFeatures} (weight ${outFeatures}x${inFeatures}) got inputs of ${features} features: set in_features=${features}, or reshape the input to ${inFeatures} features (check the flatten before the layer and the output size of the layers before it).`,
    ];
  }
  return [];
}

/** How a chained exception is introduced, in a problem's explanation and its related information. */
export const chainWords: Record<ChainedException['relation'], string> = {
  cause: 'Caused by',
  context: 'While handling',
  reraised: 'Raised in a DataLoader worker process, re-raised in the main process as',
};

function place(f: { file?: string; line?: number }): string {
  return f.file ? ` (${f.file}${f.line !== undefined ? `:${f.line}` : ''})` : '';
}

/** The problem an exception of the script makes (see `isScriptError`). */
export function exceptionProblem(e: ScriptException): ExceptionProblem {
  const lines: string[] = [];
  const peerLost = peerLostMessage.test(e.message);
  if (peerLost) lines.push('This rank lost its connection to another rank, most often because that rank failed first: its own problem is the cause.');
  if (/^(?:SyntaxError|IndentationError|TabError)$/.test(e.type)) lines.push('Python could not read this file, so the script stopped before it ran.');
  else if (e.raisedIn) lines.push(`Raised in ${shortLibraryPath(e.raisedIn.file)}:${e.raisedIn.line}${e.raisedIn.function ? ` (${e.raisedIn.function})` : ''}, called from this line.`);
  for (const c of e.chain) lines.push(`${chainWords[c.relation]} ${exceptionText(c, 300)}${place(c)}.`);
  return {
    kind: 'exception',
    exceptionType: e.type,
    message: e.message ? `${e.type}: ${e.message}` : e.type,
    explanation: lines.join('\n'),
    hints: hintsFor(e),
    ...(e.userFrame ? { file: e.userFrame.file, line: e.userFrame.line } : {}),
    ...(e.rank !== undefined ? { rank: e.rank } : {}),
    ...(e.chain.length ? { chain: e.chain } : {}),
    ...(peerLost ? { peerLost } : {}),
  };
}

/** A problem of a torchrun job's output: a CUDA error, explained, or any other exception of the script; or from the companion: a module's shape error, an out-of-memory error's memory. */
export type ScriptProblem = CudaProblem | ExceptionProblem | ModuleShapeProblem | OomMemoryProblem;

/** A failed rank in torchrun's ChildFailedError summary. */
export interface RankFailure {
  readonly rank: number;
  readonly exitCode: number;
  /** For a negative exit code: `SIGKILL`, from "Signal 9 (SIGKILL) received by PID …". */
  readonly signal?: string;
  /** Listed under "Root Cause (first observed failure)": torchrun's guess, by the time it noticed. */
  readonly rootCause: boolean;
}

/** The ranks torchrun's failure summary lists (its last one in the output), the root cause marked. */
export function summaryFailures(text: string): RankFailure[] {
  const at = text.lastIndexOf('\nFailures:');
  if (at < 0) return [];
  const out: RankFailure[] = [];
  let root = false;
  let entry: { rank?: number; exitCode?: number; signal?: string } | undefined;
  const close = () => {
    if (entry?.rank !== undefined && entry.exitCode !== undefined) out.push({ rank: entry.rank, exitCode: entry.exitCode, ...(entry.signal ? { signal: entry.signal } : {}), rootCause: root });
    entry = undefined;
  };
  for (const line of text.slice(at + 1, at + 20_000).split('\n')) {
    if (/^={10,}\s*$/.test(line)) break;
    if (/^Root Cause \(first observed failure\)/.test(line)) {
      close();
      root = true;
    } else if (/^\[\d+\]:\s*$/.test(line)) {
      close();
      entry = {};
    } else if (entry) {
      const rank = /^\s*rank\s*:\s*(\d+)/.exec(line);
      const exit = /^\s*exitcode\s*:\s*(-?\d+)/.exec(line);
      const signal = /Signal \d+ \((SIG[A-Z0-9]+)\) received/.exec(line);
      if (rank) entry.rank = Number(rank[1]);
      if (exit) entry.exitCode = Number(exit[1]);
      if (signal) entry.signal = signal[1];
    }
  }
  close();
  return out;
}

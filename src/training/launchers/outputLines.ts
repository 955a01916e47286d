/**
 * One line of a torchrun job's output as the traceback and CUDA error parsers read it: which rank
 * printed it (its prefix) and its text. Shared by `pythonErrors.ts` and `cudaErrors.ts`, so that
 * both see the same lines, frames and ranks.
 */

/**
 * `[rank1]: ` (PyTorch ≥ 2.2, with the space it adds), `[default1]:` (torchrun's --tee, role
 * "default": the line follows as printed, its indentation kept) or `[1]:` followed by text (a
 * bare `[1]:` line heads an entry of torchrun's failure summary and is not a rank's output).
 */
export const rankPrefix = /^\[rank(\d+)\]: ?|^\[default(\d+)\]:|^\[(\d+)\]:(?=.)/;

/** The rank a `rankPrefix` match names. */
export function prefixRank(m: RegExpExecArray): number {
  return Number(m[1] ?? m[2] ?? m[3]);
}

/** Frames in these folders are Python's, PyTorch's or a library's, not the user's; `<frozen runpy>`, `<string>` are no files. */
export const libraryFrame = /[/\\](?:site-packages|dist-packages|lib[/\\]python\d[\d.]*|Lib)[/\\]|^<[^>]*>$/;

/** A traceback's frame line, as Python prints it (two spaces in); no function on a SyntaxError's location line. */
export const frameLine = /^ {2}File "([^"]+)", line (\d+)(?:, in (.+))?\s*$/;

/** SGR colour codes (Python ≥ 3.13 colours tracebacks with PYTHON_COLORS=1 / FORCE_COLOR, even into a file). */
// eslint-disable-next-line no-control-regex
const ansi = /\x1b\[[0-9;]*m/g;

/**
 * A "Traceback" header at the end of a line: after a progress bar that was redrawn with `\r` and
 * no newline (tqdm), maybe after a rank prefix in the middle of the line
 * (`… 0/1400 [00:00<?, ?it/s][rank1]: Traceback (most recent call last):`). Not a DataLoader worker's
 * "Original Traceback" or an ExceptionGroup's header.
 */
const headerAtEnd = /(?:\[(?:rank|default)(\d+)\]: ?)?(?<!Original |Exception Group )(Traceback \(most recent call last\):\s*)$/;

export interface OutputLine {
  /** From the line's rank prefix; undefined for a line without one (torchrun's own output). */
  readonly rank?: number;
  /** The text without prefix and colours; of a line redrawn with `\r`, what was drawn last. */
  readonly text: string;
}

/**
 * A raw output line read: colours removed, rank prefixes taken off (also a doubled
 * `[rank1]: [rank1]: `), only the text after the line's last `\r` kept, and a "Traceback" header
 * that ends the line (after a progress bar) made the whole text.
 */
export function outputLine(raw: string): OutputLine {
  let text = raw.replace(ansi, '').replace(/\r+$/, '');
  let rank: number | undefined;
  for (let m = rankPrefix.exec(text); m; m = rankPrefix.exec(text)) {
    rank ??= prefixRank(m);
    text = text.slice(m[0].length);
  }
  const cr = text.lastIndexOf('\r');
  if (cr >= 0) {
    text = text.slice(cr + 1);
    for (let m = rankPrefix.exec(text); m; m = rankPrefix.exec(text)) {
      rank ??= prefixRank(m);
      text = text.slice(m[0].length);
    }
  }
  const header = headerAtEnd.exec(text);
  if (header && header.index > 0) {
    if (header[1] !== undefined) rank = Number(header[1]);
    text = header[2];
  }
  return { ...(rank !== undefined ? { rank } : {}), text };
}

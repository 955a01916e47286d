/**
 * Line breaks as Python and the editor count them: `\r\n`, `\n` and a lone `\r` (old Mac
 * files, mixed endings). tree-sitter's Python grammar ends a line only at `\n`, so the
 * engine reads a text with each lone `\r` turned into `\n`: same length, so every offset and
 * column stays the editor's, and the same lines as Python's universal newlines.
 */

/** The text with each lone `\r` (one not followed by `\n`) replaced by `\n`; the same string when there is none. */
export function pythonNewlines(text: string): string {
  return text.includes('\r') ? text.replace(/\r(?!\n)/g, '\n') : text;
}

/** The offset where each line starts: after every `\r\n`, `\n` and lone `\r`. */
export function lineStarts(text: string): number[] {
  const starts = [0];
  const breaks = /\r\n?|\n/g;
  for (let m = breaks.exec(text); m; m = breaks.exec(text)) starts.push(m.index + m[0].length);
  return starts;
}

/** The text's first line break (`\n` when it has none): what inserted lines should end with. */
export function lineBreakOf(text: string): string {
  return /\r\n?|\n/.exec(text)?.[0] ?? '\n';
}

/**
 * A copy of `s` that shares no memory with the string it was cut from. V8 makes a slice of 13
 * or more characters a view into its source, so a name kept in a long-lived index would keep
 * the whole file's text (one version per edit) alive. Concatenating flattens into a new
 * string; slicing that copies only the name's characters plus one.
 */
export function flatCopy(s: string): string {
  return s.length < 13 ? s : ` ${s}`.slice(1);
}

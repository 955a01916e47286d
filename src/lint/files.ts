/** Finding the Python files of a folder, for the CLI and the language server's workspace index. */
import { closeSync, constants, existsSync, fstatSync, openSync, readdirSync, readFileSync, statSync, type Stats } from 'node:fs';
import { join, relative, sep } from 'node:path';

/** What a path that is not a regular file is, for messages: `x.py is a named pipe (FIFO)`. */
export function kindOf(stat: Stats): string {
  if (stat.isDirectory()) return 'a folder';
  if (stat.isFIFO()) return 'a named pipe (FIFO)';
  if (stat.isSocket()) return 'a socket';
  if (stat.isCharacterDevice()) return 'a character device';
  if (stat.isBlockDevice()) return 'a block device';
  return 'not a regular file';
}

const meanings: Record<string, string> = {
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  ELOOP: 'too many levels of symbolic links (a link loop?)',
  ENOENT: 'no such file or folder',
  ENOTDIR: 'a part of the path is not a folder',
  ENAMETOOLONG: 'the name is too long',
  EIO: 'input/output error',
  EMFILE: 'too many open files',
  ENFILE: 'too many open files in the system',
};

/** Why a file system call failed, code first: `EACCES (permission denied)`. */
export function reasonOf(err: unknown): string {
  const code = (err as NodeJS.ErrnoException)?.code;
  if (code) return meanings[code] ? `${code} (${meanings[code]})` : code;
  return err instanceof Error ? err.message : String(err);
}

/**
 * Reads a file as UTF-8 only if it is a regular file, without ever blocking: it is opened
 * non-blocking (a FIFO with no writer would block a plain open or read forever) and checked
 * with fstat on the open descriptor. Returns what it is instead when it is not a regular
 * file; throws the file system's error (ENOENT, EACCES, ELOOP…) when it cannot be opened.
 */
export function readRegularFile(path: string): { text: string } | { kind: string } {
  const fd = openSync(path, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) return { kind: kindOf(stat) };
    return { text: readFileSync(fd, 'utf8') };
  } finally {
    closeSync(fd);
  }
}

const skippedDirs = new Set(['.git', '.hg', '.svn', 'node_modules', '__pycache__', '.venv', 'venv', '.tox', '.nox', '.mypy_cache', '.pytest_cache', '.ruff_cache', 'site-packages', '.eggs']);

/** A .gitignore pattern, enough of the syntax for the usual files (no negation). */
interface IgnoreRule {
  readonly base: string;
  readonly regex: RegExp;
  readonly dirOnly: boolean;
  readonly anchored: boolean;
}

function globToRegex(glob: string): string {
  let out = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i];
    if (c === '*') {
      if (glob[i + 1] === '*') {
        out += '.*';
        i++;
        if (glob[i + 1] === '/') i++;
      } else out += '[^/]*';
    } else if (c === '?') out += '[^/]';
    else out += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return out;
}

function readIgnore(dir: string): IgnoreRule[] {
  const file = join(dir, '.gitignore');
  if (!existsSync(file)) return [];
  let text: string;
  try {
    const r = readRegularFile(file);
    if (!('text' in r)) return [];
    text = r.text;
  } catch {
    return [];
  }
  const out: IgnoreRule[] = [];
  for (const raw of text.split(/\r?\n/)) {
    let line = raw.trim();
    if (!line || line.startsWith('#') || line.startsWith('!')) continue;
    const dirOnly = line.endsWith('/');
    if (dirOnly) line = line.slice(0, -1);
    const anchored = line.includes('/');
    if (line.startsWith('/')) line = line.slice(1);
    out.push({ base: dir, regex: new RegExp(`^${globToRegex(line)}$`), dirOnly, anchored });
  }
  return out;
}

function ignored(path: string, isDir: boolean, rulesInScope: readonly IgnoreRule[]): boolean {
  for (const r of rulesInScope) {
    if (r.dirOnly && !isDir) continue;
    const rel = relative(r.base, path).split(sep).join('/');
    const name = rel.slice(rel.lastIndexOf('/') + 1);
    if (r.anchored ? r.regex.test(rel) : r.regex.test(name)) return true;
  }
  return false;
}

/** Told about what a walk could not look into or left out: `why` says why (`EACCES (permission denied)`). */
export type SkipListener = (path: string, why: string) => void;

/**
 * Appends the Python files under `dir` to `out`, in a stable order, skipping VCS folders,
 * node_modules, caches, virtual environments (any folder with a pyvenv.cfg) and what the
 * .gitignore files on the way list. Stops after `limit` files. A folder that cannot be read
 * (`dir` itself included) and a `*.py` that is not a regular file (a FIFO, a socket, a link
 * to one: reading it could block forever) are left out and told to `onSkip`. A link that
 * leads nowhere is listed, for the reader to say why it cannot be read.
 */
export function walkPython(dir: string, out: string[], limit = Infinity, onSkip: SkipListener = () => undefined): void {
  walk(dir, [], out, limit, onSkip);
}

function walk(dir: string, inherited: readonly IgnoreRule[], out: string[], limit: number, onSkip: SkipListener): void {
  if (out.length >= limit) return;
  const scope = [...inherited, ...readIgnore(dir)];
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch (err) {
    onSkip(dir, reasonOf(err));
    return;
  }
  entries.sort((a, b) => a.name.localeCompare(b.name));
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      if (skippedDirs.has(e.name) || existsSync(join(p, 'pyvenv.cfg')) || ignored(p, true, scope)) continue;
      walk(p, scope, out, limit, onSkip);
    } else if (e.name.endsWith('.py') && !ignored(p, false, scope)) {
      let stat: Stats | undefined;
      try {
        stat = e.isFile() ? undefined : statSync(p);
      } catch {
        // A dangling or looping link: listed, and the reader says why it cannot be read.
      }
      if (stat && !stat.isFile()) {
        // A link to a folder named *.py is not followed, as before; anything else is worth a word.
        if (!stat.isDirectory()) onSkip(p, `${kindOf(stat)}, not a file`);
        continue;
      }
      out.push(p);
      if (out.length >= limit) return;
    }
  }
}


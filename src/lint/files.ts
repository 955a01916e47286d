/** Finding the Python files of a folder, for the CLI and the language server's workspace index. */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';

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
    text = readFileSync(file, 'utf8');
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

/**
 * Appends the Python files under `dir` to `out`, in a stable order, skipping VCS folders,
 * node_modules, caches, virtual environments (any folder with a pyvenv.cfg) and what the
 * .gitignore files on the way list. Stops after `limit` files.
 */
export function walkPython(dir: string, out: string[], limit = Infinity): void {
  walk(dir, [], out, limit);
}

function walk(dir: string, inherited: readonly IgnoreRule[], out: string[], limit: number): void {
  if (out.length >= limit) return;
  const scope = [...inherited, ...readIgnore(dir)];
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  entries.sort((a, b) => a.name.localeCompare(b.name));
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      if (skippedDirs.has(e.name) || existsSync(join(p, 'pyvenv.cfg')) || ignored(p, true, scope)) continue;
      walk(p, scope, out, limit);
    } else if ((e.isFile() || e.isSymbolicLink()) && e.name.endsWith('.py') && !ignored(p, false, scope)) {
      out.push(p);
      if (out.length >= limit) return;
    }
  }
}


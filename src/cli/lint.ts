/**
 * `gpu-workbench lint [--format text|json] [--select id,...] [--ignore id,...] [--fix] paths...`
 *
 * Lints Python files (and folders, walked for *.py, skipping .git, node_modules, virtual
 * environments and what .gitignore lists) for GPU-memory hazards. The whole set is indexed
 * first, so a guard in a caller in another file counts. Output is compiler-style text,
 * `path:line:col: rule-id message`, or a JSON array with 1-based positions.
 * Exit status: 0 clean, 1 findings (of any severity: `--ignore` is how CI drops a rule),
 * 2 bad usage, an unreadable file, or a named path that cannot be read. Nothing blocks on a
 * FIFO or device; a subfolder that cannot be read is a warning on stderr.
 */
import { statSync, writeFileSync } from 'node:fs';
import { relative, resolve } from 'node:path';
import { readRegularFile, reasonOf, walkPython } from '../lint/files';
import { createLinter, defaultLimits, isBinarySource, rules } from '../lint/linter';
import type { Finding, LintOptions } from '../lint/types';

const usage = `usage: gpu-workbench lint [--format text|json] [--select id,...] [--ignore id,...] [--fix] [--max-file-size KB] [paths...]

Finds GPU-memory hazards in PyTorch code. Paths are files or folders (default: .).

options:
  --format text|json  output format (default text: path:line:col: rule-id message)
  --json              same as --format json
  --select id,...     run only these rules
  --ignore id,...     do not run these rules (e.g. --ignore data-parallel for warnings only)
  --fix               apply the fixes in place, then report what is left
  --max-file-size KB  skip (with a warning) files larger than this (default ${defaultLimits.maxChars / 1024})
  -h, --help          show this help

rules:
${rules.map((r) => `  ${r.id.padEnd(Math.max(...rules.map((x) => x.id.length)))} ${r.defaultSeverity.padEnd(8)} ${r.summary}`).join('\n')}

exit status: 0 clean, 1 findings, 2 usage error or unreadable file (a folder inside a
named folder that cannot be read is a warning, not an error)`;

interface Args {
  paths: string[];
  format: 'text' | 'json';
  select: string[] | undefined;
  ignore: string[];
  fix: boolean;
  maxFileSizeKb: number;
}

/** The ids of a `--select`/`--ignore` value, or what is wrong with it. */
function ruleIds(option: string, value: string | undefined): string[] | string {
  const ids = (value ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  if (ids.length === 0) return `${option} expects a comma-separated list of rule ids`;
  const unknown = ids.filter((id) => !rules.some((r) => r.id === id));
  if (unknown.length) return `unknown rule id${unknown.length > 1 ? 's' : ''} in ${option}: ${unknown.join(', ')} (known: ${rules.map((r) => r.id).join(', ')})`;
  return ids;
}

function parseArgs(argv: string[]): Args | string {
  const args: Args = { paths: [], format: 'text', select: undefined, ignore: [], fix: false, maxFileSizeKb: defaultLimits.maxChars / 1024 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = (): string | undefined => {
      if (a.includes('=')) return a.slice(a.indexOf('=') + 1);
      return argv[++i];
    };
    if (a === '--json') args.format = 'json';
    else if (a === '--fix') args.fix = true;
    else if (a === '--format' || a.startsWith('--format=')) {
      const v = value();
      if (v !== 'text' && v !== 'json') return `--format expects text or json, got ${v === undefined ? 'nothing' : `'${v}'`}`;
      args.format = v;
    } else if (a === '--select' || a.startsWith('--select=') || a === '--ignore' || a.startsWith('--ignore=')) {
      const option = a.startsWith('--select') ? '--select' : '--ignore';
      const ids = ruleIds(option, value());
      if (typeof ids === 'string') return ids;
      if (option === '--select') args.select = [...(args.select ?? []), ...ids];
      else args.ignore.push(...ids);
    } else if (a === '--max-file-size' || a.startsWith('--max-file-size=')) {
      const v = value();
      const kb = Number(v);
      if (!v || !Number.isFinite(kb) || kb <= 0) return `--max-file-size expects a positive number of kilobytes, got ${v === undefined ? 'nothing' : `'${v}'`}`;
      args.maxFileSizeKb = kb;
    } else if (a.startsWith('-') && a !== '-') return `unknown option '${a}'`;
    else args.paths.push(a);
  }
  if (args.paths.length === 0) args.paths.push('.');
  return args;
}

function display(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel && !rel.startsWith('..') ? rel : path;
}

export async function run(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${usage}\n`);
    return 0;
  }
  const args = parseArgs(argv);
  if (typeof args === 'string') {
    process.stderr.write(`gpu-workbench lint: ${args}\n\n${usage}\n`);
    return 2;
  }
  let status = 0;
  const files: string[] = [];
  for (const p of args.paths) {
    const abs = resolve(p);
    let stat;
    try {
      stat = statSync(abs);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      process.stderr.write(`gpu-workbench lint: ${code === 'ENOENT' ? `no such file or folder: ${p}` : `cannot read ${p}: ${reasonOf(err)}`}\n`);
      return 2;
    }
    if (stat.isDirectory()) {
      walkPython(abs, files, Infinity, (path, why) => {
        if (path === abs) {
          process.stderr.write(`gpu-workbench lint: cannot read folder ${p}: ${why}\n`);
          status = 2;
        } else process.stderr.write(`gpu-workbench lint: warning: skipped ${display(path)}: ${why}\n`);
      });
    } else {
      files.push(abs);
    }
  }
  const sources: { path: string; text: string }[] = [];
  for (const path of [...new Set(files)]) {
    try {
      const read = readRegularFile(path);
      if (!('text' in read)) {
        // Only a path named on the command line gets here (the walk leaves such files out).
        process.stderr.write(`gpu-workbench lint: cannot read ${display(path)}: it is ${read.kind}, not a file; skipped\n`);
        status = 2;
        continue;
      }
      const text = read.text;
      if (isBinarySource(text)) {
        process.stderr.write(`gpu-workbench lint: ${display(path)} is not Python source: it contains a NUL byte (a binary file?); skipped\n`);
        status = 2;
        continue;
      }
      sources.push({ path, text });
    } catch (err) {
      process.stderr.write(`gpu-workbench lint: cannot read ${display(path)}: ${reasonOf(err)}\n`);
      status = 2;
    }
  }
  const internal: string[] = [];
  const linter = await createLinter({ limits: { maxChars: Math.round(args.maxFileSizeKb * 1024) }, onError: (path, err) => internal.push(`${display(path)}: ${err instanceof Error ? err.message : String(err)}`) });
  try {
    const options: LintOptions = { select: args.select, rules: Object.fromEntries(args.ignore.map((id) => [id, 'off' as const])) };
    if (args.fix) {
      for (const s of sources) linter.setFile(s.path, s.text);
      for (const s of sources) {
        const fixed = linter.fixFile(s.path, s.text, options);
        if (fixed !== s.text) {
          writeFileSync(s.path, fixed);
          s.text = fixed;
        }
      }
    }
    const results = linter.lintWorkspace(sources, options);
    const all: { path: string; finding: Finding }[] = [];
    for (const s of sources) for (const finding of results.get(s.path) ?? []) all.push({ path: s.path, finding });
    if (args.format === 'json') {
      const json = all.map(({ path, finding: f }) => ({
        path: display(path),
        line: f.range.start.line + 1,
        column: f.range.start.character + 1,
        endLine: f.range.end.line + 1,
        endColumn: f.range.end.character + 1,
        rule: f.ruleId,
        severity: f.severity,
        message: f.message,
        docsUrl: f.docsUrl,
        fixable: f.fixes.length > 0,
      }));
      process.stdout.write(`${JSON.stringify(json, null, 2)}\n`);
    } else {
      for (const { path, finding: f } of all) {
        process.stdout.write(`${display(path)}:${f.range.start.line + 1}:${f.range.start.character + 1}: ${f.ruleId} ${f.message}\n`);
      }
    }
    for (const s of sources) {
      const why = linter.skipReason(s.path);
      if (why) process.stderr.write(`gpu-workbench lint: warning: skipped ${display(s.path)}: ${why}${/over the limit of [\d,]+ \(/.test(why) ? ' (raise it with --max-file-size KB)' : ''}\n`);
    }
    for (const line of internal) process.stderr.write(`gpu-workbench lint: internal error, some findings may be missing: ${line}\n`);
    if (status === 0 && all.length > 0) status = 1;
    return status;
  } finally {
    linter.dispose();
  }
}

/**
 * Lines per second over a large real corpus, the `torch` package of Debian's python3-torch,
 * side by side with pyflakes (the anchor) and pylint, run on the same files in the same run.
 *
 *   npm run bench -- lint        (or: npx tsc -p . && node out/bench/lint/corpus.js [--runs N] [--no-subset])
 *
 * - ours / pyflakes on the whole corpus (every .py file under torch/ that `dpkg -L python3-torch`
 *   lists; both get exactly this list, written to bench/results/lint-torch-files.txt), N runs
 *   of each (default 3), in alternating order, each ratio printed and then their range: on a
 *   shared machine only a ratio measured in one run means anything;
 * - ours / pyflakes / pylint on a fixed subset: the first files by path totalling ~20,000
 *   lines (pylint is far too slow for the whole corpus);
 * - every finding of ours on the whole corpus goes to bench/results/lint-torch-findings.txt
 *   (path:line:col rule message), and the count per rule to stdout.
 *
 * Times are wall clock. Ours runs in this process: reading the files and linting them
 * (indexing every file first, then the rules), not counting the one-time load of the
 * tree-sitter grammar, which is printed apart. pyflakes and pylint are timed as one process
 * each over the file list, interpreter start included (a fraction of a second against tens).
 * A machine without python3-torch prints "skipped" and exits 0; a missing pyflakes or pylint
 * skips only its column.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { createLinter } from '../../src/lint/linter';
import type { Finding } from '../../src/lint/types';
import { repoRoot } from '../../test/paths';

const python = '/usr/bin/python3';
const subsetLines = 20_000;
/** The package linted: the corpus (python3-torch also ships functorch and torchgen). */
const packageDir = '/usr/lib/python3/dist-packages/torch/';

function torchFiles(): string[] | string {
  const r = spawnSync('dpkg', ['-L', 'python3-torch'], { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.error) return `python3-torch not installed (no dpkg here: ${r.error.message})`;
  if (r.status !== 0) return 'python3-torch not installed';
  const files = r.stdout.split('\n').filter((p) => p.startsWith(packageDir) && p.endsWith('.py') && existsSync(p)).sort();
  return files.length ? files : `python3-torch lists no .py files under ${packageDir}`;
}

function lineCount(text: string): number {
  if (!text) return 0;
  return text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
}

function seconds(t0: bigint): number {
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** Whether `python -m module` can run here; the reason when not. */
function toolMissing(module: string): string | undefined {
  if (!existsSync(python)) return `${python} not found`;
  const r = spawnSync(python, ['-c', `import ${module}`], { encoding: 'utf8' });
  if (r.status !== 0) return `${module} not installed for ${python} (apt-get install -y ${module === 'pyflakes' ? 'python3-pyflakes' : 'pylint'})`;
  return undefined;
}

interface ToolRun {
  readonly seconds: number;
  /** CPU seconds (user + system) of the tool's process: far less sensitive than wall clock to other jobs on the machine. */
  readonly cpu: number;
  readonly messages: number;
  /** What the tool said on stderr: a file it could not read would show here. */
  readonly stderr: string;
}

/** `python -m module`, which also prints its own CPU time (user + system) as the last line of stderr. */
const withCpuTime = (module: string): string =>
  `import resource, runpy, sys\nsys.argv[0] = ${JSON.stringify(module)}\ntry:\n    runpy.run_module(${JSON.stringify(module)}, run_name='__main__', alter_sys=True)\nfinally:\n    r = resource.getrusage(resource.RUSAGE_SELF)\n    sys.stderr.write('\\ncpu-seconds %f\\n' % (r.ru_utime + r.ru_stime))\n`;

/** Runs `python -m module args files` once; a crash (not findings) is an error naming the tool. */
function runTool(module: string, args: readonly string[], files: readonly string[], okStatus: (s: number) => boolean): ToolRun {
  const t0 = process.hrtime.bigint();
  const r = spawnSync(python, ['-c', withCpuTime(module), ...args, ...files], { encoding: 'utf8', maxBuffer: 512 << 20 });
  const s = seconds(t0);
  if (r.error) throw new Error(`${module}: ${r.error.message}`);
  if (r.status === null || !okStatus(r.status)) throw new Error(`${module} exited with ${r.status ?? r.signal}: ${r.stderr.slice(-2000)}`);
  const messages = r.stdout.split('\n').filter((l) => /^\S.*:\d+:/.test(l)).length;
  const cpu = /cpu-seconds ([\d.]+)\s*$/.exec(r.stderr);
  if (!cpu) throw new Error(`${module} did not report its CPU time: ${r.stderr.slice(-500)}`);
  return { seconds: s, cpu: Number(cpu[1]), messages, stderr: r.stderr.slice(0, cpu.index) };
}

// pyflakes: 0 clean, 1 findings. pylint: a bit mask, 1 = fatal, 32 = usage error.
const pyflakesOk = (s: number): boolean => s === 0 || s === 1;
const pylintOk = (s: number): boolean => (s & (1 | 32)) === 0;
const pylintArgs = ['--jobs=1', '--persistent=n', '--score=n', '--rcfile=/dev/null', '--output-format=parseable'];

function rate(lines: number, s: number): string {
  return `${Math.round(lines / s).toLocaleString('en-US')} lines/s`;
}

const load = (): string => loadavg().map((l) => l.toFixed(1)).join(' ');

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const runsAt = argv.indexOf('--runs');
  const runs = runsAt >= 0 ? Number(argv[runsAt + 1]) : 3;
  if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs expects a whole number of at least 1, got ${argv[runsAt + 1]}`);
  const withSubset = !argv.includes('--no-subset');
  const files = torchFiles();
  if (typeof files === 'string') {
    console.log(`skipped: ${files} (apt-get install -y python3-torch)`);
    return;
  }
  const texts = files.map((path) => readFileSync(path, 'utf8'));
  const lines = texts.map(lineCount);
  const total = lines.reduce((a, b) => a + b, 0);
  let n = 0;
  for (let acc = 0; n < files.length && acc < subsetLines; n++) acc += lines[n];
  const subset = files.slice(0, n);
  const subsetTotal = lines.slice(0, n).reduce((a, b) => a + b, 0);

  const t0 = process.hrtime.bigint();
  const warm = await createLinter();
  const loadS = seconds(t0);
  warm.dispose();

  const errors: string[] = [];
  const ours = async (paths: readonly string[]): Promise<{ seconds: number; cpu: number; results: Map<string, Finding[]> }> => {
    const linter = await createLinter({ onError: (path, err) => errors.push(`${path}: ${String(err)}`) });
    const t = process.hrtime.bigint();
    const c = process.cpuUsage();
    const sources = paths.map((path) => ({ path, text: readFileSync(path, 'utf8') }));
    const results = linter.lintWorkspace(sources);
    const used = process.cpuUsage(c);
    const s = seconds(t);
    linter.dispose();
    // All threads of this process: the garbage collector's helpers count too.
    return { seconds: s, cpu: (used.user + used.system) / 1e6, results };
  };

  const dir = join(repoRoot, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const listFile = join(dir, 'lint-torch-files.txt');
  writeFileSync(listFile, `${files.join('\n')}\n`);
  console.log(`corpus: python3-torch's ${packageDir}, ${files.length} .py files, ${total.toLocaleString('en-US')} lines (the list both tools get: ${listFile}); subset: first ${subset.length} files by path, ${subsetTotal.toLocaleString('en-US')} lines`);
  console.log(`load average at the start: ${load()}`);
  console.log(`ours: grammar load ${(loadS * 1000).toFixed(0)} ms, once per process, not counted below`);

  const pyflakesMissing = toolMissing('pyflakes');
  const pylintMissing = toolMissing('pylint');
  if (pyflakesMissing) console.log(`pyflakes skipped: ${pyflakesMissing}`);
  if (pylintMissing) console.log(`pylint skipped: ${pylintMissing}`);

  if (withSubset) {
    // Subset: medians of 3 for ours and pyflakes, one pylint run.
    const oursSub: number[] = [];
    for (let i = 0; i < 3; i++) oursSub.push((await ours(subset)).seconds);
    const oursSubS = median(oursSub);
    console.log(`\nsubset (${subsetTotal.toLocaleString('en-US')} lines):`);
    console.log(`  ours      ${oursSubS.toFixed(2)} s  ${rate(subsetTotal, oursSubS)}`);
    let flakesSubS: number | undefined;
    if (!pyflakesMissing) {
      const flakesRuns = [0, 1, 2].map(() => runTool('pyflakes', [], subset, pyflakesOk));
      flakesSubS = median(flakesRuns.map((r) => r.seconds));
      console.log(`  pyflakes  ${flakesSubS.toFixed(2)} s  ${rate(subsetTotal, flakesSubS)}  (anchor; ${flakesRuns[0].messages} messages)`);
    }
    let pylintSubS: number | undefined;
    if (!pylintMissing) {
      const r = runTool('pylint', pylintArgs, subset, pylintOk);
      pylintSubS = r.seconds;
      console.log(`  pylint    ${pylintSubS.toFixed(2)} s  ${rate(subsetTotal, pylintSubS)}  (${r.messages} messages)`);
    }
    if (flakesSubS !== undefined) {
      const parts = [`ours is ${(flakesSubS / oursSubS).toFixed(2)}x pyflakes' speed`];
      if (pylintSubS !== undefined) parts.push(`pylint is ${(flakesSubS / pylintSubS).toFixed(3)}x pyflakes' speed`, `ours is ${(pylintSubS / oursSubS).toFixed(1)}x pylint's speed`);
      console.log(`  ratios: ${parts.join('; ')}`);
    } else if (pylintSubS !== undefined) console.log(`  ratio: ours is ${(pylintSubS / oursSubS).toFixed(1)}x pylint's speed`);
  }

  // Whole corpus: `runs` pairs (tens of seconds apiece), the order alternating so that a load
  // that changes during the run weighs on both sides alike.
  console.log(`\nwhole corpus (${total.toLocaleString('en-US')} lines), ${runs} run${runs > 1 ? 's' : ''} of each:`);
  let whole: { seconds: number; results: Map<string, Finding[]> } | undefined;
  const ratios: number[] = [];
  const cpuRatios: number[] = [];
  for (let i = 0; i < runs; i++) {
    let flakes: ToolRun | undefined;
    const flakesRun = (): void => {
      if (!pyflakesMissing) flakes = runTool('pyflakes', [], files, pyflakesOk);
    };
    if (i % 2 === 1) flakesRun();
    const mine = await ours(files);
    if (i % 2 === 0) flakesRun();
    if (mine.results.size !== files.length) throw new Error(`ours linted ${mine.results.size} files of ${files.length}`);
    whole = mine;
    const parts = [`run ${i + 1}: ours ${mine.seconds.toFixed(2)} s  ${rate(total, mine.seconds)}`];
    if (flakes) {
      const unread = flakes.stderr.split('\n').filter((l) => /No such file|Permission denied|Is a directory/.test(l));
      if (unread.length) throw new Error(`pyflakes could not read ${unread.length} of the files: ${unread[0]}`);
      ratios.push(flakes.seconds / mine.seconds);
      cpuRatios.push(flakes.cpu / mine.cpu);
      parts.push(
        `pyflakes ${flakes.seconds.toFixed(2)} s  ${rate(total, flakes.seconds)} (anchor; ${flakes.messages} messages)`,
        `ratio: ours is ${(flakes.seconds / mine.seconds).toFixed(2)}x pyflakes' speed; CPU time: ours ${mine.cpu.toFixed(2)} s, pyflakes ${flakes.cpu.toFixed(2)} s, ${(flakes.cpu / mine.cpu).toFixed(2)}x`,
      );
    } else parts[0] += ` (CPU ${mine.cpu.toFixed(2)} s)`;
    console.log(`  ${parts.join(' | ')}  (load ${load()})`);
  }
  const range = (xs: number[]): string => `${Math.min(...xs).toFixed(2)}x to ${Math.max(...xs).toFixed(2)}x, median ${median(xs).toFixed(2)}x`;
  if (ratios.length > 1) console.log(`  ratio over ${ratios.length} runs: wall clock ${range(ratios)} pyflakes' speed; CPU time ${range(cpuRatios)}`);
  if (!whole) return;

  // Every finding, for review; the count per rule here.
  const out: string[] = [];
  const perRule = new Map<string, number>();
  for (const [path, findings] of whole.results) {
    for (const f of findings) {
      out.push(`${path}:${f.range.start.line + 1}:${f.range.start.character + 1}: ${f.ruleId} ${f.message}`);
      perRule.set(f.ruleId, (perRule.get(f.ruleId) ?? 0) + 1);
    }
  }
  const file = join(dir, 'lint-torch-findings.txt');
  writeFileSync(file, out.length ? `${out.join('\n')}\n` : '');
  console.log(`\nfindings on the whole corpus: ${out.length} (listed in ${file})`);
  for (const [rule, count] of [...perRule].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))) console.log(`  ${String(count).padStart(5)}  ${rule}`);
  if (errors.length) {
    console.log(`internal errors (a file or rule that threw; those findings are missing): ${errors.length}`);
    for (const e of errors.slice(0, 20)) console.log(`  ${e}`);
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : String(err));
  process.exitCode = 1;
});

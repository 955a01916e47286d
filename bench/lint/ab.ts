/**
 * A/B of the linter's speed between builds, in one process, alternating: on a shared machine
 * only a ratio measured in one run means anything (see the README's lint speed row).
 *
 *   node out/bench/lint/ab.js <relint|typing|module|fixture|torch> <rounds> <root> [<root> ...]
 *
 * Each root is a checkout compiled with `npx tsc -p .` (its out/ is loaded); the rounds run the
 * roots in turn, reversing the order every other round, and print CPU-time medians with the
 * anchor measured in the same run (CPU time of the process; with AB_CLOCK=main, of the main thread alone,
 * the time a user waits when a core is free):
 * - relint: one identifier of a 5,000-line file of fixture code edited back and forth (21 edits
 *   per round), against a plain parse;
 * - typing: a character typed into an identifier at seeded places, each edit on the last;
 * - module: a whole lint of fixture code flattened to module level (N lines, default 20,000:
 *   env N), against a plain parse;
 * - fixture: a whole lint of the fixture corpus concatenated as it is (N lines, default 50,000:
 *   bench/lint/scale.ts's first input, the issue's "50,000-line file"), against a plain parse;
 * - torch: the first 400 files by path of Debian's python3-torch `torch/` (as bench/lint/corpus.ts
 *   lists them), against pyflakes' CPU time on the same files.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve, basename } from 'node:path';
import { mulberry32 } from '../../src/common/random';
import { fixtureCorpus } from '../../test/unit/lint/corpus';

type LinterModule = typeof import('../../src/lint/linter');
type ParserModule = typeof import('../../src/lint/parser');

/**
 * The main thread's CPU time in ms (Linux: /proc schedstat, in ns), or undefined elsewhere. The time a
 * user waits for a lint on a machine with a core free: the process's CPU time also counts V8's
 * compiler and concurrent-GC threads, which run beside the main thread (up to twice as much in a
 * cold process).
 */
function mainThreadMs(): number | undefined {
  try {
    return Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;
  } catch {
    return undefined;
  }
}
const clock = process.env.AB_CLOCK === 'main' ? 'main' : 'process';
if (clock === 'main' && mainThreadMs() === undefined) throw new Error('AB_CLOCK=main needs /proc/self/task/<pid>/schedstat (Linux)');
const cpu = (fn: () => void): number => {
  if (clock === 'main') {
    const m = mainThreadMs() as number;
    fn();
    return (mainThreadMs() as number) - m;
  }
  const t = process.cpuUsage();
  fn();
  const d = process.cpuUsage(t);
  return (d.user + d.system) / 1000;
};
const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1];

function fixtureText(root: string, lines: number, moduleLevel = false): string {
  const text = fixtureCorpus(lines, undefined, join(root, 'test', 'fixtures', 'lint'));
  return moduleLevel ? text.split('\n').filter((l) => !/^\s*(def|class|@)/.test(l)).join('\n') : text;
}

function pyflakesCpu(files: readonly string[]): number {
  const code = "import resource, runpy, sys\nsys.argv[0] = 'pyflakes'\ntry:\n    runpy.run_module('pyflakes', run_name='__main__', alter_sys=True)\nfinally:\n    r = resource.getrusage(resource.RUSAGE_SELF)\n    sys.stderr.write('\\ncpu-seconds %f\\n' % (r.ru_utime + r.ru_stime))\n";
  const r = spawnSync('/usr/bin/python3', ['-c', code, ...files], { encoding: 'utf8', maxBuffer: 1 << 28 });
  // runpy raises before pyflakes runs when it is missing, and the CPU time is still printed: without this, a missing
  // pyflakes came out as a 20 ms anchor and our speed as 0.00x of it.
  if (/No module named '?pyflakes/.test(r.stderr)) throw new Error("pyflakes is not installed for /usr/bin/python3 (Debian: apt-get install python3-pyflakes)");
  const m = /cpu-seconds ([\d.]+)/.exec(r.stderr);
  if (!m) throw new Error(`pyflakes did not run: ${r.stderr.slice(-300)}`);
  return 1000 * Number(m[1]);
}

async function main(): Promise<void> {
  const [mode, roundsText, ...rootArgs] = process.argv.slice(2);
  const rounds = Number(roundsText);
  if (!['relint', 'typing', 'module', 'fixture', 'torch'].includes(mode) || !(rounds > 0) || rootArgs.length === 0) {
    throw new Error('usage: node out/bench/lint/ab.js <relint|typing|module|fixture|torch> <rounds> <root> [<root> ...]');
  }
  const roots = rootArgs.map((r) => resolve(r));
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- another build's compiled modules, by path
  const load = <T>(root: string, path: string): T => require(join(root, 'out', 'src', 'lint', path)) as T;
  const builds = roots.map((root) => ({ root, L: load<LinterModule>(root, 'linter.js'), P: load<ParserModule>(root, 'parser.js') }));
  const language = await builds[0].P.loadPython();
  const parser = new builds[0].P.PythonParser(language);
  const parse = (text: string): number => cpu(() => parser.parse(text).delete());
  let run: (i: number) => number;
  let anchor: () => number;
  if (mode === 'relint' || mode === 'typing') {
    const text = fixtureText(roots[0], 5000);
    const at = text.indexOf('total');
    const r = mulberry32(5000);
    const typed: string[] = [];
    for (let k = 0, t = text; k < 21 * rounds; k++) {
      const ids = /[A-Za-z_][A-Za-z_0-9]*/g;
      ids.lastIndex = Math.floor(r() * t.length);
      const m = ids.exec(t) ?? ids.exec(t);
      const pos = m ? m.index + 1 : 0;
      t = `${t.slice(0, pos)}q${t.slice(pos)}`;
      typed.push(t);
    }
    const state = builds.map(({ L, P }) => {
      const linter = new L.Linter(new P.PythonParser(language), { incremental: true });
      linter.lintFile('/ab/edit.py', text);
      return { linter, k: 0 };
    });
    run = (i) => {
      const s = state[i];
      const times: number[] = [];
      for (let j = 0; j < 21; j++, s.k++) {
        const next = mode === 'typing' ? typed[s.k] : s.k % 2 ? text : `${text.slice(0, at)}x${text.slice(at)}`;
        times.push(cpu(() => s.linter.lintFile('/ab/edit.py', next)));
      }
      return median(times);
    };
    anchor = () => median([0, 1, 2, 3, 4].map(() => parse(text)));
  } else if (mode === 'module' || mode === 'fixture') {
    const text = mode === 'module' ? fixtureText(roots[0], Number(process.env.N ?? 20000), true) : fixtureText(roots[0], Number(process.env.N ?? 50000));
    run = (i) => {
      const { L, P } = builds[i];
      const linter = new L.Linter(new P.PythonParser(language), { incremental: true });
      const t = cpu(() => linter.lintFile('/ab/module.py', text));
      linter.dispose();
      return t;
    };
    anchor = () => Math.min(parse(text), parse(text));
  } else {
    // bench/lint/corpus.ts's list: every .py under torch/ that python3-torch installs, by path.
    const dpkg = spawnSync('dpkg', ['-L', 'python3-torch'], { encoding: 'utf8', maxBuffer: 64 << 20 });
    const list = (dpkg.stdout ?? '').split('\n').filter((p) => p.startsWith('/usr/lib/python3/dist-packages/torch/') && p.endsWith('.py') && existsSync(p)).sort().slice(0, 400);
    if (list.length === 0) throw new Error('python3-torch is not installed (dpkg -L python3-torch lists no torch/ files)');
    run = (i) => {
      const { L, P } = builds[i];
      const linter = new L.Linter(new P.PythonParser(language));
      const t = cpu(() => linter.lintWorkspace(list.map((path) => ({ path, text: readFileSync(path, 'utf8') }))));
      linter.dispose();
      return t;
    };
    anchor = () => pyflakesCpu(list);
  }
  const results = builds.map((): number[] => []);
  const anchors: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const order = builds.map((_, i) => i);
    if (round % 2) order.reverse();
    anchors.push(anchor());
    for (const i of order) results[i].push(run(i));
  }
  const a = median(anchors);
  console.log(`${mode}, ${clock === 'main' ? "the main thread's" : "the process's"} CPU time: anchor (${mode === 'torch' ? "pyflakes' CPU time on the same files" : 'a plain parse'}) median ${a.toFixed(1)} ms`);
  builds.forEach(({ root }, i) => {
    const m = median(results[i]);
    const ratio = mode === 'torch' ? `${(a / m).toFixed(2)}x pyflakes' speed` : `${(m / a).toFixed(2)}x parse`;
    console.log(`  ${basename(root)}: median ${m.toFixed(1)} ms CPU = ${ratio}  [${results[i].map((x) => x.toFixed(0)).join(' ')}]`);
  });
  for (let i = 1; i < builds.length; i++) console.log(`  ${basename(roots[i])} / ${basename(roots[0])}: ${(median(results[i]) / median(results[0])).toFixed(2)}`);
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : String(err));
  process.exitCode = 1;
});

/**
 * What a user waits for: one diagnostic pull of a large file in a real language server (the built
 * server on stdio, spoken to over JSON-RPC as VS Code does), against a plain tree-sitter parse of
 * the same text in this process.
 *
 *   npx tsc -p . && node out/bench/lint/pull.js [lines]      (default 50,000)
 *
 * The file is bench/lint/scale.ts's first input (the fixture corpus concatenated, the issue's
 * "50,000-line file"). A fresh server is started per round; in it the file is pulled three
 * times, each time as a new document (one identifier changed, so nothing is reused): the first
 * pull is what opening the file in a new window costs (V8 has not compiled the linter's hot
 * code yet), the third one a server that has been linting for a while. For each pull: the wall
 * clock from the request to the answer, and the server's main-thread CPU time over it (Linux
 * /proc schedstat), which is the wall time on a machine with a core free: the process's CPU
 * time also counts V8's compiler and concurrent-GC threads, which run beside it.
 */
import { readFileSync } from 'node:fs';
import { loadPython, PythonParser } from '../../src/lint/parser';
import { fixtureCorpus } from '../../test/unit/lint/corpus';
import { Client, pullCapabilities } from '../../test/unit/server/client';


/** A thread's CPU time in ms (Linux: the first field of its schedstat, in ns). */
function threadMs(pid: number, tid = pid): number {
  return Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;
}

const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1];

async function main(): Promise<void> {
  const lines = Number(process.argv[2] ?? 50_000);
  const rounds = Number(process.env.ROUNDS ?? 3);
  const text = fixtureCorpus(lines);
  const parser = new PythonParser(await loadPython());
  const parse = (): number => {
    const t = threadMs(process.pid);
    parser.parse(text).delete();
    return threadMs(process.pid) - t;
  };
  parse();
  const anchors: number[] = [];
  const walls: number[][] = [[], [], []];
  const mains: number[][] = [[], [], []];
  for (let round = 0; round < rounds; round++) {
    anchors.push(Math.min(parse(), parse()));
    const client = await Client.start(pullCapabilities);
    const pid = client.proc.pid as number;
    try {
      for (let k = 0; k < 3; k++) {
        const uri = `file:///bench/pull-${round}-${k}.py`;
        await client.open(uri, k === 0 ? text : text.replace('total', `total${k}`));
        const m = threadMs(pid);
        const w = performance.now();
        const diagnostics = await client.pull(uri);
        walls[k].push(performance.now() - w);
        mains[k].push(threadMs(pid) - m);
        if (diagnostics.length === 0 || diagnostics.some((d) => d.code === 'file-skipped')) throw new Error(`the server did not lint the ${lines}-line file (${diagnostics.length} diagnostics)`);
        await client.close(uri);
      }
    } finally {
      await client.stop();
    }
  }
  const a = median(anchors);
  console.log(`pull of a ${lines}-line file (${(text.length / 1e6).toFixed(1)} MB) in a fresh language server, ${rounds} rounds; anchor (a plain parse, this process's main thread) median ${a.toFixed(0)} ms`);
  ['first pull (cold server)', 'second pull', 'third pull'].forEach((label, k) => {
    console.log(`  ${label}: wall median ${median(walls[k]).toFixed(0)} ms = ${(median(walls[k]) / a).toFixed(2)}x parse, server main thread ${median(mains[k]).toFixed(0)} ms = ${(median(mains[k]) / a).toFixed(2)}x  [wall ${walls[k].map((x) => x.toFixed(0)).join(' ')}]`);
  });
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : String(err));
  process.exitCode = 1;
});

/**
 * Scheduling overhead per trial of the Slurm executor against the local one on the same spec:
 * the time from a trial's start (`trial/started`) to its first report, for a trial that reports at
 * once and exits. Local and Slurm experiments alternate, several rounds, medians, printed as a
 * ratio to local (the anchor, measured in the same run). Needs root and Slurm (the test
 * harness's two-node cluster on this host, test/support/slurmCluster.ts); says why when not.
 *
 *   npx tsc -p . && node out/bench/tune/slurmOverhead.js [rounds=3] [trials=6] [pollSeconds=0.2 1]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Experiment } from '../../src/tuning/experiment';
import { parseSpec } from '../../src/tuning/spec';
import { slurmUnavailable, startSlurmCluster } from '../../test/support/slurmCluster';

const rounds = Number(process.argv[2] ?? 3);
const trials = Number(process.argv[3] ?? 6);
const polls = process.argv.length > 4 ? process.argv.slice(4).map(Number) : [0.2, 1];

const median = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };

async function firstReportMs(dir: string, name: string, executor: Record<string, unknown> | undefined): Promise<number[]> {
  const spec = parseSpec({
    name, metric: 'loss', search: { algorithm: 'grid' }, space: { x: { grid: Array.from({ length: trials }, (_, i) => i) } }, maxConcurrent: 2,
    trial: { command: ['python3', '-c', 'import json; print("::report::" + json.dumps({"loss": 1}), flush=True)'] },
    ...(executor ? { executor } : {}),
  }, join(dir, `${name}.tune.json`));
  const exp = new Experiment({ spec, workspace: dir, gpuCount: 0 });
  const started = new Map<number, number>();
  const out: number[] = [];
  exp.onEvent((e) => {
    if (e.type === 'trial/started') started.set(e.trialId, performance.now());
    if (e.type === 'trial/report' && started.has(e.trialId)) { out.push(performance.now() - (started.get(e.trialId) ?? 0)); started.delete(e.trialId); }
  });
  await exp.run();
  return out;
}

async function main(): Promise<void> {
  const why = slurmUnavailable();
  if (why) { console.log(`skipped: ${why}`); return; }
  const cluster = await startSlurmCluster();
  process.env.SLURM_CONF = cluster.conf;
  const dir = mkdtempSync(join(tmpdir(), 'gw-bench-slurm-'));
  try {
    const local: number[] = [];
    const slurm = new Map<number, number[]>(polls.map((p) => [p, []]));
    let n = 0;
    for (let r = 0; r < rounds; r++) {
      local.push(...await firstReportMs(dir, `local${n++}`, undefined));
      for (const p of polls) slurm.get(p)!.push(...await firstReportMs(dir, `slurm${n++}`, { slurm: { pollSeconds: p } }));
    }
    const base = median(local);
    console.log(`start to first report, median of ${local.length} trials (${rounds} rounds x ${trials}, maxConcurrent 2):`);
    console.log(`  local executor         ${base.toFixed(0)} ms  (1.00)`);
    for (const [p, xs] of slurm) console.log(`  slurm, poll ${String(p).padEnd(4)} s     ${median(xs).toFixed(0)} ms  (${(median(xs) / base).toFixed(1)}x local)`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await cluster.stop();
  }
}

void main();

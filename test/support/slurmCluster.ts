/**
 * A real Slurm cluster of two nodes on this host, for the tests of the Slurm launcher and
 * executor (see ../shared/CLUSTER.md): in a temp folder its own munged (own socket, run as the
 * munge user), slurmctld, and two slurmd (`n1`, `n2`, each with 2 fake GPUs through gres.conf),
 * every port a free one, every client pointed at it with SLURM_CONF. Needs root and Debian's
 * `slurm-wlm slurmctld slurmd slurm-client munge` (scripts/setup-test-deps.sh installs them);
 * otherwise `startSlurmCluster` says why, and the tests skip printing that.
 *
 * `stop()` cancels every job, then ends each daemon by the pid in its own pid file and any
 * process still carrying this cluster's SLURM_CONF (job steps, their workers) by its pid: nothing
 * is left behind, and nothing of anyone else's is touched.
 */
import { execFile, execFileSync } from 'node:child_process';
import { chownSync, chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';

export interface SlurmCluster {
  readonly dir: string;
  /** SLURM_CONF and PATH for every Slurm client (sbatch, squeue, ...) of this cluster. */
  readonly env: Readonly<Record<string, string>>;
  readonly conf: string;
  readonly nodes: readonly string[];
  /** Runs a Slurm client tool against this cluster; its stdout. */
  tool(cmd: string, args: readonly string[]): string;
  /** Processes of this cluster that are not its daemons (job steps and what they started), by pid. */
  jobProcesses(): number[];
  stop(): Promise<void>;
}

const sbin = ['/usr/sbin', '/sbin'];
const tools = ['munged', 'slurmctld', 'slurmd', 'sbatch', 'squeue', 'scancel', 'srun', 'scontrol', 'sinfo'];

function which(cmd: string): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(':'), ...sbin].filter(Boolean);
  for (const d of dirs) if (existsSync(join(d, cmd))) return join(d, cmd);
  return undefined;
}

/** Why the cluster cannot start here, or undefined when it can. */
export function slurmUnavailable(): string | undefined {
  if (process.platform !== 'linux') return 'a Slurm cluster on this host needs Linux';
  if (process.getuid?.() !== 0) return 'starting a Slurm cluster (munged, slurmctld, slurmd) needs root; run the tests as root to include them';
  const missing = tools.filter((t) => !which(t));
  if (missing.length) return `Slurm is not installed (${missing.join(', ')} missing): bash scripts/setup-test-deps.sh apt (Debian: slurm-wlm slurmctld slurmd slurm-client munge)`;
  if (!existsSync('/etc/munge/munge.key')) return 'munge has no key (/etc/munge/munge.key): reinstall the munge package';
  return undefined;
}

/**
 * A mocha suite's own cluster: `before` starts it and points SLURM_CONF at it (so the code under
 * test finds it as a user's shell would), `after` restores SLURM_CONF and stops it; the suite is
 * skipped, with the reason printed, where the cluster cannot run or `also()` names another reason.
 * Returns the cluster (while the suite runs).
 */
export function useSlurmCluster(also?: () => string | undefined): () => SlurmCluster {
  let cluster: SlurmCluster | undefined;
  let saved: string | undefined;
  before(async function () {
    const why = slurmUnavailable() ?? also?.();
    if (why) {
      console.log(`      skipped: ${why}`);
      this.skip();
    }
    cluster = await startSlurmCluster();
    saved = process.env.SLURM_CONF;
    process.env.SLURM_CONF = cluster.conf;
  });
  after(async () => {
    if (!cluster) return;
    if (saved === undefined) delete process.env.SLURM_CONF;
    else process.env.SLURM_CONF = saved;
    await cluster.stop();
  });
  return () => {
    if (!cluster) throw new Error('the Slurm cluster is not started: useSlurmCluster() in a describe, used in its tests');
    return cluster;
  };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

const alive = (pid: number) => existsSync(`/proc/${pid}`) && !/^State:\s+Z/m.test(safeRead(`/proc/${pid}/status`));

function safeRead(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

async function until(what: string, ok: () => boolean | Promise<boolean>, timeoutMs: number, why?: () => string): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await ok()) return;
    if (Date.now() > end) throw new Error(`slurm test cluster: ${what} within ${timeoutMs / 1000} s${why ? `: ${why()}` : ''}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function pidOf(file: string): number | undefined {
  const n = Number(safeRead(file).trim());
  return Number.isInteger(n) && n > 0 ? n : undefined;
}

/** Pids of every process whose environment carries SLURM_CONF=conf (the daemons were started with it; jobs inherit it). */
function processesOf(conf: string): number[] {
  const mark = `SLURM_CONF=${conf}\0`;
  const out: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    if (safeRead(`/proc/${e}/environ`).includes(mark) && alive(Number(e))) out.push(Number(e));
  }
  return out;
}

async function endPid(pid: number): Promise<void> {
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    return;
  }
  try {
    await until(`pid ${pid} to end after SIGTERM`, () => !alive(pid), 10_000);
  } catch {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
    await until(`pid ${pid} to end after SIGKILL`, () => !alive(pid), 5_000);
  }
}

/** Starts the cluster; throws with the daemons' own log lines when it does not come up. Call `slurmUnavailable()` first. */
export async function startSlurmCluster(): Promise<SlurmCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-slurm-'));
  chmodSync(dir, 0o755);
  const munge = join(dir, 'munge');
  mkdirSync(munge);
  const mungeUser = execFileSync('id', ['-u', 'munge'], { encoding: 'utf8' }).trim();
  const mungeGroup = execFileSync('id', ['-g', 'munge'], { encoding: 'utf8' }).trim();
  chownSync(munge, Number(mungeUser), Number(mungeGroup));
  chmodSync(munge, 0o711); // munged wants execute for all on its socket's folder
  for (const d of ['state', 'spool', 'run', 'log']) mkdirSync(join(dir, d));
  const socket = join(munge, 'munge.sock');
  const host = hostname().split('.')[0];
  const [ctld, p1, p2] = [await freePort(), await freePort(), await freePort()];
  const conf = join(dir, 'slurm.conf');
  writeFileSync(conf, [
    'ClusterName=gwtest',
    `SlurmctldHost=${host}(127.0.0.1)`,
    'SlurmUser=root',
    'AuthType=auth/munge',
    `AuthInfo=socket=${socket}`,
    'CredType=cred/munge',
    `StateSaveLocation=${dir}/state`,
    `SlurmdSpoolDir=${dir}/spool/%n`,
    `SlurmctldPidFile=${dir}/run/slurmctld.pid`,
    `SlurmdPidFile=${dir}/run/slurmd.%n.pid`,
    `SlurmctldLogFile=${dir}/log/slurmctld.log`,
    `SlurmdLogFile=${dir}/log/slurmd.%n.log`,
    `SlurmctldPort=${ctld}`,
    'ProctrackType=proctrack/linuxproc',
    'TaskPlugin=task/none',
    'SelectType=select/cons_tres',
    'SelectTypeParameters=CR_Core',
    'SchedulerType=sched/backfill',
    'MpiDefault=none',
    'ReturnToService=2',
    'JobAcctGatherType=jobacct_gather/none',
    'AccountingStorageType=accounting_storage/none',
    'GresTypes=gpu',
    // A job's record stays a while after it ends (squeue --states=all, scontrol show job read its end).
    'MinJobAge=600',
    'KillWait=5',
    `NodeName=n1 NodeHostname=${host} NodeAddr=127.0.0.1 Port=${p1} CPUs=2 RealMemory=2000 Gres=gpu:2 State=UNKNOWN`,
    `NodeName=n2 NodeHostname=${host} NodeAddr=127.0.0.1 Port=${p2} CPUs=2 RealMemory=2000 Gres=gpu:2 State=UNKNOWN`,
    'PartitionName=gpu Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP',
    '',
  ].join('\n'));
  // Fake GPUs: any device files do for gres (CUDA_VISIBLE_DEVICES is set from their indices).
  writeFileSync(join(dir, 'gres.conf'), 'NodeName=n1 Name=gpu File=/dev/tty[0-1]\nNodeName=n2 Name=gpu File=/dev/tty[2-3]\n');
  const path = [...(process.env.PATH ?? '').split(':'), ...sbin].filter(Boolean).join(':');
  const env = { SLURM_CONF: conf, PATH: path };
  const daemonEnv = { ...process.env, ...env };
  const pidFiles = () => [join(dir, 'run', 'slurmd.n1.pid'), join(dir, 'run', 'slurmd.n2.pid'), join(dir, 'run', 'slurmctld.pid'), join(munge, 'munged.pid')];
  const logs = () => ['slurmctld.log', 'slurmd.n1.log', 'slurmd.n2.log'].map((f) => `${f}: ${safeRead(join(dir, 'log', f)).trim().split('\n').slice(-3).join(' | ')}`).join('; ');
  let stopped = false;
  const cluster: SlurmCluster = {
    dir, env, conf, nodes: ['n1', 'n2'],
    tool: (cmd, args) => execFileSync(cmd, [...args], { encoding: 'utf8', env: daemonEnv, stdio: ['ignore', 'pipe', 'pipe'] }),
    jobProcesses: () => {
      const daemons = new Set(pidFiles().map(pidOf).filter((p): p is number => p !== undefined));
      // slurmctld's own helper (slurmscriptd) is no job's; slurmstepd (a job step) is.
      return processesOf(conf).filter((p) => !daemons.has(p) && !/^(?:slurmctld|slurmscriptd|slurmd|munged)$/.test(safeRead(`/proc/${p}/comm`).trim()));
    },
    stop: async () => {
      if (stopped) return;
      stopped = true;
      try {
        execFileSync('scancel', ['--full', '--user', 'root'], { env: daemonEnv, stdio: 'ignore', timeout: 10_000 });
        await until('every job to end after scancel', () => cluster.jobProcesses().length === 0, 15_000);
      } catch {
        // the daemons may be down already; whatever is left is ended by pid below
      }
      // The nodes first, then the controller, munged last (the others talk through it).
      for (const f of pidFiles()) {
        const pid = pidOf(f);
        if (pid !== undefined) await endPid(pid);
      }
      for (const pid of processesOf(conf)) await endPid(pid);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    // munged as the munge user, its socket, pid, log and seed in our folder (a munged of the system's is left alone).
    execFileSync('runuser', ['-u', 'munge', '--', which('munged') ?? 'munged', `--socket=${socket}`, `--pid-file=${join(munge, 'munged.pid')}`, `--log-file=${join(munge, 'munged.log')}`, `--seed-file=${join(munge, 'munged.seed')}`], { env: daemonEnv, stdio: 'pipe' });
    execFileSync(which('slurmctld') ?? 'slurmctld', ['-c', '-i'], { env: daemonEnv, stdio: 'pipe' });
    for (const n of cluster.nodes) execFileSync(which('slurmd') ?? 'slurmd', ['-N', n], { env: daemonEnv, stdio: 'pipe' });
    await until('both nodes to be idle in sinfo', () => new Promise<boolean>((resolve) => {
      execFile('sinfo', ['-h', '-o', '%T %D'], { env: daemonEnv, encoding: 'utf8' }, (err, out) => resolve(!err && /^idle 2$/m.test(out)));
    }), 30_000, logs);
  } catch (err) {
    await cluster.stop();
    throw err instanceof Error ? new Error(`${err.message}${'stderr' in err ? ` ${String((err as { stderr: unknown }).stderr)}` : ''}`) : err;
  }
  return cluster;
}

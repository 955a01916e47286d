/**
 * The GPUs of a running Slurm job's nodes (issue #16 item 4), read without ssh: one
 * `srun --jobid J --overlap -N n --ntasks-per-node=1 --label` step runs nvidia-smi on every node of
 * the job's allocation (the step shares the job's resources instead of waiting for free ones), and
 * `sinfo -N` says which nodes are down or drained. Pure parsing here plus the two tool calls; the
 * panel shows a section per node and GPU, and points out the allocation's GPUs that sit idle.
 */
import { computeAppsFields, gpuQueryFields, joinProcesses, parseComputeApps, parseGpuRow } from './nvidiaSmi';
import type { PanelSlurmNode, PanelSlurmNodeState } from '../common/protocol';
import type { GpuDevice } from './types';
import { slurmTool } from '../training/launchers/slurm';

/** A node's GPUs and processes by nvidia-smi, as the panel draws them (without sinfo's state). */
export type NodeGpus = Omit<PanelSlurmNode, 'slurm'>;

/** A node's state by sinfo, as the panel draws it. */
export type NodeState = PanelSlurmNodeState;

const mark = '@@gw-';

/** The shell script each node runs: its name, then nvidia-smi's GPUs and compute processes, each after a marker line. */
export function nodeProbeScript(): string {
  const q = `--query-gpu=${gpuQueryFields.join(',')} --format=csv,noheader,nounits`;
  const a = `--query-compute-apps=${computeAppsFields.join(',')} --format=csv,noheader,nounits`;
  return `echo "${mark}node \${SLURMD_NODENAME:-$(hostname -s)}"; echo "${mark}gpus"; nvidia-smi ${q} 2>&1; echo "${mark}apps"; nvidia-smi ${a} 2>&1; echo "${mark}end"`;
}

/** `srun --jobid J --overlap ...` that runs the probe once on each of the job's `nodes` nodes. */
export function nodeProbeArgs(jobId: string, nodes: number): string[] {
  return ['--jobid', jobId, '--overlap', `--nodes=${nodes}`, '--ntasks-per-node=1', '--label', '--quiet', 'bash', '-c', nodeProbeScript()];
}

/** Reads the probe's output (`--label`: each line `TASK: text`, the nodes' lines interleaved). */
export function parseNodeProbe(text: string): NodeGpus[] {
  const byTask = new Map<string, string[]>();
  for (const raw of text.split(/\r?\n/)) {
    const m = /^\s*(\d+):\s?(.*)$/.exec(raw);
    if (!m) continue;
    const lines = byTask.get(m[1]) ?? [];
    lines.push(m[2]);
    byTask.set(m[1], lines);
  }
  const out: NodeGpus[] = [];
  for (const [task, lines] of [...byTask].sort((a, b) => Number(a[0]) - Number(b[0]))) {
    let node = `task ${task}`;
    let section = '';
    const gpuLines: string[] = [];
    const appLines: string[] = [];
    for (const l of lines) {
      if (l.startsWith(`${mark}node `)) node = l.slice(`${mark}node `.length).trim() || node;
      else if (l.startsWith(mark)) section = l.slice(mark.length).trim();
      else if (section === 'gpus') gpuLines.push(l);
      else if (section === 'apps') appLines.push(l);
    }
    const devices = gpuLines.map((l) => parseGpuRow(l, gpuQueryFields)?.device).filter((d): d is GpuDevice => d !== undefined);
    const processes = joinProcesses(parseComputeApps(appLines.join('\n')), devices);
    const said = gpuLines.filter((l) => l.trim() && !parseGpuRow(l, gpuQueryFields)).join(' ').trim();
    const idle = devices.filter((d) => !processes.some((p) => p.gpuIndex === d.index) && (d.utilizationPercent === null || d.utilizationPercent < 5)).map((d) => d.index);
    out.push({ node, devices, processes, idle, ...(devices.length === 0 ? { error: said || 'nvidia-smi printed no GPU' } : {}) });
  }
  return out;
}

/** The `sinfo -h -N -o` format this reads: node, state, reason. */
export const sinfoFormat = '%N|%T|%E';

/** Nodes from `sinfo -h -N -o '%N|%T|%E'` (one line per node and partition: each node once). */
export function parseSinfoNodes(text: string): NodeState[] {
  const seen = new Map<string, NodeState>();
  for (const line of text.split(/\r?\n/)) {
    const [node, state, reason] = line.trim().split('|');
    if (!node || !state || seen.has(node)) continue;
    const unavailable = /^(?:down|drain|drained|draining|fail|failing|maint|not_responding|unknown|inval)/i.test(state) || state.endsWith('*');
    seen.set(node, { node, state, ...(reason && reason !== 'none' ? { reason } : {}), unavailable });
  }
  return [...seen.values()];
}

export interface JobNodes {
  readonly jobId: string;
  readonly nodes: ReadonlyArray<NodeGpus & { readonly slurm?: NodeState }>;
  /** Nodes of the job that sinfo marks down or drained, by name. */
  readonly unavailable: readonly NodeState[];
}

/**
 * One reading of a running job's nodes: the `--overlap` probe and sinfo for the job's nodes
 * (`nodeList`: Slurm's `n[1-2]`, `nodeCount` of them). A failed probe throws in Slurm's words.
 */
export async function readJobNodes(jobId: string, nodeList: string, nodeCount: number, env: NodeJS.ProcessEnv = process.env): Promise<JobNodes> {
  const [probe, sinfo] = await Promise.all([
    slurmTool('srun', nodeProbeArgs(jobId, nodeCount), env),
    slurmTool('sinfo', ['-h', '-N', '-n', nodeList, '-o', sinfoFormat], env).catch(() => ''),
  ]);
  const states = parseSinfoNodes(sinfo);
  const nodes = parseNodeProbe(probe).map((n) => {
    const s = states.find((x) => x.node === n.node);
    return s ? { ...n, slurm: s } : n;
  });
  return { jobId, nodes, unavailable: states.filter((s) => s.unavailable) };
}

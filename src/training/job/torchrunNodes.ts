/**
 * The nodes of a `"kind": "torchrun"` job: `nnodes`, `rendezvous`, `maxRestarts` and `launcher`,
 * checked beyond what the schema can say (a "MIN:MAX" range, a host:port, fields that belong to
 * the other rendezvous backend), every problem naming its field. Pure: the launcher
 * (launchers/multinode.ts) turns the result into torchrun's flags.
 */
import { randomUUID } from 'node:crypto';

/** c10d: every node runs the same command; the agent on `endpoint`'s host keeps the store, group ranks come from the order of joining. */
export interface C10dRendezvous {
  readonly backend: 'c10d';
  /** host:port of the store: a host every node reaches (the first node). */
  readonly endpoint: string;
  /** The run's id: the job's, else a fresh one per run (every node of one run must use the same). */
  readonly id: string;
  /** The id was made for this run (the job gives none): nodes started elsewhere cannot know it. */
  readonly freshId?: boolean;
  /** Extra `--rdzv_conf` entries (join_timeout, read_timeout, is_host). */
  readonly conf: Readonly<Record<string, string>>;
}

/** static: a fixed number of nodes, each told its rank. */
export interface StaticRendezvous {
  readonly backend: 'static';
  readonly masterAddr: string;
  readonly masterPort: number;
  /** This machine's node rank (0 ... nnodes-1). */
  readonly nodeRank: number;
}

export type Rendezvous = C10dRendezvous | StaticRendezvous;

/** A torchrun job's nodes, when the job names any of the multi-node fields. */
export interface TorchrunNodes {
  /** At least this many nodes ... */
  readonly minNodes: number;
  /** ... and at most this many (equal for a fixed count). */
  readonly maxNodes: number;
  readonly rendezvous: Rendezvous;
  /** Restarts of the worker group the elastic agent may make (torchrun's default: 0). */
  readonly maxRestarts: number;
  /**
   * `local`: this machine runs one agent (one node); the others are started by hand (Copy Launch Commands).
   * `slurm`: one sbatch job; srun starts an agent on every node, the c10d store on the first (launchers/slurm.ts).
   */
  readonly launcher: 'local' | 'slurm';
  /** The job's `slurm` field (launcher slurm). */
  readonly slurm?: SlurmJobFields;
}

/** What a job asks of Slurm's allocation, however given (a job file, a tune spec's executor, the settings). */
export interface SlurmRequest {
  readonly partition?: string;
  readonly time?: string;
  readonly account?: string;
  readonly qos?: string;
  /** GPUs per node (`--gres=gpu:N`); 0: none asked. */
  readonly gpusPerNode?: number;
  /** More sbatch options, as sbatch takes them (`--constraint=a100`). */
  readonly sbatchArgs?: readonly string[];
}

/** The job file's `slurm` field (the schema checked the types). */
export interface SlurmJobFields extends SlurmRequest {
  readonly port?: number;
  readonly outputDir?: string;
}

/** The c10d endpoint of a slurm job: the first node of the allocation, found in the batch script (launchers/slurm.ts). */
export const slurmFirstNode = '$GW_RDZV_ENDPOINT';

/** The multi-node fields as the job file has them (the schema checked their types). */
export interface RawTorchrunNodes {
  nnodes?: number | string;
  rendezvous?: { backend?: string; endpoint?: string; id?: string; conf?: Record<string, string | number | boolean>; masterAddr?: string; masterPort?: number; nodeRank?: number };
  maxRestarts?: number;
  launcher?: string;
  slurm?: SlurmJobFields;
}

/** The result of reading the fields: the nodes (undefined: a plain one-node job, as before) or the problems. */
export type NodesOrProblems = { readonly nodes?: TorchrunNodes; readonly problems: readonly string[] };

const c10dOnly = ['endpoint', 'id', 'conf'] as const;
const staticOnly = ['masterAddr', 'masterPort', 'nodeRank'] as const;

/** `host:port`, `[v6]:port`; the port 1-65535. */
function hostPort(text: string): { host: string; port: number } | undefined {
  const m = /^(\[[0-9a-fA-F:.]+\]|[^\s:[\]]+):(\d{1,5})$/.exec(text);
  if (!m) return undefined;
  const port = Number(m[2]);
  return port >= 1 && port <= 65535 ? { host: m[1], port } : undefined;
}

/** A fresh rendezvous id: unique per run, short enough to read in torchrun's log. */
export function newRendezvousId(): string {
  return `gw-${randomUUID().slice(0, 8)}`;
}

/**
 * Reads the multi-node fields of a torchrun job (already valid against the schema). No field
 * given: no nodes (the one-node command of before). `makeId` gives the c10d id when the job has none.
 */
export function torchrunNodes(raw: RawTorchrunNodes, makeId: () => string = newRendezvousId): NodesOrProblems {
  if (raw.nnodes === undefined && raw.rendezvous === undefined && raw.maxRestarts === undefined && raw.launcher === undefined && raw.slurm === undefined) return { problems: [] };
  const problems: string[] = [];
  const slurm = raw.launcher === 'slurm';
  if (raw.launcher !== undefined && raw.launcher !== 'local' && !slurm) problems.push(`/launcher must be "local" or "slurm", got ${JSON.stringify(raw.launcher)}`);
  if (raw.slurm !== undefined && !slurm) problems.push('/slurm is read only with "launcher": "slurm"');
  let minNodes = 1;
  let maxNodes = 1;
  if (typeof raw.nnodes === 'number') {
    minNodes = maxNodes = raw.nnodes;
  } else if (typeof raw.nnodes === 'string') {
    const m = /^\s*([1-9]\d*)\s*(?::\s*([1-9]\d*)\s*)?$/.exec(raw.nnodes);
    if (!m) problems.push(`/nnodes must be a number of nodes (2) or a range "MIN:MAX" ("1:4"), got ${JSON.stringify(raw.nnodes)}`);
    else {
      minNodes = Number(m[1]);
      maxNodes = Number(m[2] ?? m[1]);
      if (minNodes > maxNodes) problems.push(`/nnodes "${raw.nnodes}": MIN (${minNodes}) must not be above MAX (${maxNodes})`);
    }
  }
  const r = raw.rendezvous;
  if (slurm) {
    // The store goes on the allocation's first node, known only once Slurm picked the nodes.
    if (r?.backend === 'static' || r?.masterAddr !== undefined || r?.masterPort !== undefined || r?.nodeRank !== undefined) problems.push('/rendezvous: with "launcher": "slurm" the rendezvous is c10d on the job\'s first node; leave out backend "static", masterAddr, masterPort and nodeRank');
    if (r?.endpoint !== undefined) problems.push('/rendezvous/endpoint: with "launcher": "slurm" the store is on the job\'s first node, which Slurm picks; leave it out (its port: "slurm": {"port": N})');
    if (raw.slurm?.sbatchArgs) for (const a of raw.slurm.sbatchArgs) if (/^--?(?:N\b|nodes\b|output\b|o\b|job-name\b|J\b)/.test(a)) problems.push(`/slurm/sbatchArgs: ${JSON.stringify(a)} is set by GPU Workbench (nodes from "nnodes", the output file and name its own)`);
    if (problems.length) return { problems };
    const conf: Record<string, string> = {};
    for (const [k, v] of Object.entries(r?.conf ?? {})) conf[k] = typeof v === 'boolean' ? (v ? '1' : '0') : String(v);
    return { nodes: { minNodes, maxNodes, rendezvous: { backend: 'c10d', endpoint: slurmFirstNode, id: r?.id ?? 'gw-$SLURM_JOB_ID', conf }, maxRestarts: raw.maxRestarts ?? 0, launcher: 'slurm', slurm: raw.slurm ?? {} }, problems: [] };
  }
  let rendezvous: Rendezvous | undefined;
  const backend = r?.backend ?? (r && r.endpoint === undefined && (r.masterAddr !== undefined || r.masterPort !== undefined || r.nodeRank !== undefined) ? 'static' : 'c10d');
  if (!r) {
    if (maxNodes > 1) problems.push('/rendezvous is needed for more than one node: {"backend": "c10d", "endpoint": "HOST:PORT"} (HOST: the first node, reachable from every node) or {"backend": "static", "masterAddr": "HOST", "masterPort": PORT, "nodeRank": K}');
  } else if (backend === 'c10d') {
    for (const f of staticOnly) if (r[f] !== undefined) problems.push(`/rendezvous/${f} belongs to the static rendezvous: with "backend": "c10d" give "endpoint" (and "id")`);
    if (r.endpoint === undefined) problems.push('/rendezvous is missing the required field "endpoint": HOST:PORT of the c10d store (HOST: the first node, reachable from every node), e.g. "node1:29400"');
    else if (!hostPort(r.endpoint)) problems.push(`/rendezvous/endpoint must be HOST:PORT with a port from 1 to 65535, got ${JSON.stringify(r.endpoint)}`);
    const conf: Record<string, string> = {};
    for (const [k, v] of Object.entries(r.conf ?? {})) {
      if (!/^\w+$/.test(k)) problems.push(`/rendezvous/conf has a key torchrun cannot take: ${JSON.stringify(k)} (letters, digits and _ only)`);
      else if (/[,=\s]/.test(String(v))) problems.push(`/rendezvous/conf/${k} must not hold a comma, "=" or a space, got ${JSON.stringify(v)}`);
      else conf[k] = typeof v === 'boolean' ? (v ? '1' : '0') : String(v);
    }
    if (r.id !== undefined && !/^[\w.-]+$/.test(r.id)) problems.push(`/rendezvous/id must hold only letters, digits, ".", "_" and "-", got ${JSON.stringify(r.id)}`);
    rendezvous = { backend: 'c10d', endpoint: r.endpoint ?? '', id: r.id ?? makeId(), ...(r.id === undefined ? { freshId: true } : {}), conf };
  } else if (backend === 'static') {
    for (const f of c10dOnly) if (r[f] !== undefined) problems.push(`/rendezvous/${f} belongs to the c10d rendezvous: with "backend": "static" give "masterAddr", "masterPort" and "nodeRank"`);
    if (r.masterAddr === undefined) problems.push('/rendezvous is missing the required field "masterAddr": the host of node 0, reachable from every node');
    if (r.masterPort === undefined) problems.push('/rendezvous is missing the required field "masterPort": a free port on node 0, e.g. 29500');
    if (typeof raw.nnodes === 'string' && minNodes !== maxNodes) problems.push(`/nnodes "${raw.nnodes}" is a range, which the static rendezvous cannot take: give a number of nodes, or use "backend": "c10d"`);
    const nodeRank = r.nodeRank ?? 0;
    if (nodeRank >= maxNodes) problems.push(`/rendezvous/nodeRank (${nodeRank}) must be below nnodes (${maxNodes})`);
    rendezvous = { backend: 'static', masterAddr: r.masterAddr ?? '', masterPort: r.masterPort ?? 0, nodeRank };
  } else {
    problems.push(`/rendezvous/backend must be "c10d" or "static", got ${JSON.stringify(r.backend)}`);
  }
  if (problems.length) return { problems };
  // One node and no rendezvous given: this machine's own store on a free port, as a plain job has.
  rendezvous ??= { backend: 'c10d', endpoint: 'localhost:0', id: makeId(), conf: {} };
  return { nodes: { minNodes, maxNodes, rendezvous, maxRestarts: raw.maxRestarts ?? 0, launcher: 'local' }, problems: [] };
}

/** `2` or `1:4`, as torchrun's --nnodes takes it. */
export function nnodesText(n: Pick<TorchrunNodes, 'minNodes' | 'maxNodes'>): string {
  return n.minNodes === n.maxNodes ? String(n.minNodes) : `${n.minNodes}:${n.maxNodes}`;
}

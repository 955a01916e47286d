/**
 * Multi-node torchrun jobs (`nnodes`, `rendezvous`, `maxRestarts` in the job, see
 * job/torchrunNodes.ts): torchrun's flags spelt for the torch that runs them, the exact
 * command of every node (Copy Launch Commands, `gpu-workbench train JOB --print-launch`), and
 * what the elastic agent's own log says: which node this machine is, a restart of the worker
 * group (the same job, not a new one), and why a node ended the job (a peer lost, the
 * rendezvous store gone, a rendezvous that timed out).
 *
 * The agent says those things at INFO, so a multi-node job runs torchrun with LOGLEVEL=INFO
 * (unless the job sets LOGLEVEL itself).
 */
import { execFile, spawnSync } from 'node:child_process';
import { hostname } from 'node:os';
import { nnodesText, type TorchrunNodes } from '../job/torchrunNodes';
import { exceptionText, type ScriptException } from './pythonErrors';

/** What torchrun runs of a job, on each node (torchrun.ts's TorchrunSpec adds the job file's name and its batch-size setting). */
export interface NodeJob {
  /** Absolute path of the user's script. */
  readonly script: string;
  readonly args: readonly string[];
  readonly nprocPerNode: number;
  /** CUDA_VISIBLE_DEVICES for the job, when the job or --devices named devices. */
  readonly devices?: readonly number[];
  readonly python: string;
  readonly cwd: string;
  readonly env: Readonly<Record<string, string>>;
  /** Several nodes, a rendezvous or restarts of the job's own; absent: one node, its own store. */
  readonly nodes?: TorchrunNodes;
}

const versions = new Map<string, string | undefined>();

const versionScript = [
  'try:',
  '    import importlib.metadata as m; print(m.version("torch"))',
  'except Exception:',
  '    import torch; print(torch.__version__)',
].join('\n');

const versionOf = (status: number | null, stdout: string) => (status === 0 ? /^\d+\.\d+\S*/m.exec(stdout)?.[0] : undefined);

/** `torchVersion` without blocking (the extension host): the same cache. */
export function probeTorchVersion(python: string): Promise<string | undefined> {
  if (versions.has(python)) return Promise.resolve(versions.get(python));
  return new Promise((resolve) => {
    execFile(python, ['-c', versionScript], { encoding: 'utf8', timeout: 30_000 }, (err, stdout) => {
      const v = versionOf(err ? 1 : 0, stdout);
      versions.set(python, v);
      resolve(v);
    });
  });
}

/**
 * The torch version of an interpreter (`1.13.0a0+gitunknown`, `2.5.1+cu121`), asked once per
 * interpreter and kept; undefined when it has no torch or cannot be run. Reads the package's
 * metadata (no import of torch: milliseconds, not seconds), else torch.__version__. Blocks while
 * it asks: the extension host calls `probeTorchVersion` first (the task's spec loader), so that
 * runTorchrun finds the answer cached here; the CLI may block.
 */
export function torchVersion(python: string): string | undefined {
  if (versions.has(python)) return versions.get(python);
  const probe = spawnSync(python, ['-c', versionScript], { encoding: 'utf8', timeout: 30_000 });
  const v = versionOf(probe.status, probe.stdout ?? '');
  versions.set(python, v);
  return v;
}

/** torch 1.x takes only `--nproc_per_node`; 2.x spells its flags `--nproc-per-node` (and still takes the old ones). Unknown: the underscore spelling every torchrun takes. */
export function flagSpelling(torch: string | undefined): 'underscore' | 'hyphen' {
  const major = torch ? Number(/^(\d+)\./.exec(torch)?.[1]) : NaN;
  return major >= 2 ? 'hyphen' : 'underscore';
}

/** A torchrun flag in the spelling of its torch: `flag('nproc_per_node', 'hyphen')` is `--nproc-per-node`. */
export function flag(name: string, spelling: 'underscore' | 'hyphen'): string {
  return `--${spelling === 'hyphen' ? name.replace(/_/g, '-') : name}`;
}

/**
 * torchrun's options of a job of several nodes (or one with a rendezvous or restarts of its own),
 * from --nnodes to the rendezvous; `nodeRank` overrides the static rendezvous's (the commands of
 * the other nodes).
 */
export function nodeFlags(job: NodeJob & { nodes: TorchrunNodes }, spelling: 'underscore' | 'hyphen', nodeRank?: number): string[] {
  const n = job.nodes;
  const f = (name: string) => flag(name, spelling);
  const out = ['--nnodes', nnodesText(n), f('nproc_per_node'), String(job.nprocPerNode)];
  if (n.maxRestarts > 0) out.push(f('max_restarts'), String(n.maxRestarts));
  const r = n.rendezvous;
  if (r.backend === 'c10d') {
    out.push(f('rdzv_backend'), 'c10d', f('rdzv_endpoint'), r.endpoint, f('rdzv_id'), r.id);
    const conf = Object.entries(r.conf).map(([k, v]) => `${k}=${v}`).join(',');
    if (conf) out.push(f('rdzv_conf'), conf);
  } else {
    out.push(f('rdzv_backend'), 'static', f('master_addr'), r.masterAddr, f('master_port'), String(r.masterPort), f('node_rank'), String(nodeRank ?? r.nodeRank));
  }
  return out;
}

/** A word for a POSIX shell: as it is when it is plain, else in single quotes. */
export function shellWord(w: string): string {
  return /^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`;
}

/**
 * The command each node runs, for a person to start them (a shell script: a comment line per
 * node, then its command). Every node runs the script from the same path and folder: on
 * machines without a shared filesystem, copy the project to the same place first. The
 * other nodes run the script itself (the companion that measures each rank's memory lives with
 * the extension, on this machine only).
 */
export function launchCommands(job: NodeJob, torch: string | undefined): string {
  const spelling = flagSpelling(torch);
  const env = { ...job.env, ...(job.devices ? { CUDA_VISIBLE_DEVICES: job.devices.join(',') } : {}) };
  const envWords = Object.entries(env).map(([k, v]) => `${k}=${shellWord(v)}`);
  const tail = [flag('redirects', spelling), '2', flag('tee', spelling), '2', job.script, ...job.args];
  const command = (flags: string[]) => [`cd ${shellWord(job.cwd)} &&`, ...envWords, shellWord(job.python), '-m', 'torch.distributed.run', ...flags.map(shellWord), ...tail.map(shellWord)].join(' ');
  const torchNote = `# flags spelt for torch ${torch ?? '(version unknown: the underscore spelling every torchrun takes)'}`;
  if (!job.nodes) return [torchNote, '# one node: this machine', command(['--nnodes', '1', flag('nproc_per_node', spelling), String(job.nprocPerNode), flag('rdzv_backend', spelling), 'c10d', flag('rdzv_endpoint', spelling), 'localhost:0'])].join('\n');
  const n = job.nodes;
  const withNodes = { ...job, nodes: n };
  const lines = [torchNote, `# ${nnodesText(n)} node${n.maxNodes > 1 ? 's' : ''} x ${job.nprocPerNode} process${job.nprocPerNode > 1 ? 'es' : ''}; run each command on its own machine, with ${job.script} at the same path there`];
  const r = n.rendezvous;
  if (r.backend === 'c10d' && r.freshId) lines.push(`# rendezvous id ${r.id}: made for these commands (the job has no "rendezvous": {"id": ...}); start every node, this one too, with them (a job started from GPU Workbench gets an id of its own per run)`);
  for (let k = 0; k < n.maxNodes; k++) {
    const optional = k >= n.minNodes ? ' (optional: the job starts with ' + n.minNodes + ')' : '';
    if (r.backend === 'c10d') {
      const store = k === 0 ? `; on ${r.endpoint.replace(/:\d+$/, '')}, which keeps the rendezvous store` : '';
      lines.push(`# node ${k + 1} of ${n.maxNodes}${optional}${store}`, command(nodeFlags(withNodes, spelling)));
    } else {
      lines.push(`# node rank ${k} of ${n.maxNodes}${k === 0 ? ` (on ${r.masterAddr})` : ''}`, command(nodeFlags(withNodes, spelling, k)));
    }
  }
  return lines.join('\n');
}

/** What the elastic agent reports: a restart of the worker group, or the node joining a round. */
export type ElasticEvent =
  /** The rendezvous completed: this node's group rank, the number of nodes, and the world's processes. */
  | { readonly kind: 'rendezvous'; readonly restart: number; readonly groupRank: number; readonly nodes: number; readonly worldSize?: number }
  /** The agent restarts its workers: `failed` (counted against maxRestarts), or nodes joined (`membership`, not counted). */
  | { readonly kind: 'restart'; readonly why: 'failed' | 'membership'; readonly attempt?: number; readonly maxRestarts?: number };

/** One line of the agent's log read, or nothing. */
export interface AgentNote { readonly message: string; readonly elastic: ElasticEvent }

/**
 * Reads a torchrun agent's log lines (the lines without a rank prefix) as they come: the
 * rendezvous result (group rank, nodes, restart count), restarts, and whether this node's
 * workers failed for good (the agent then waits up to 300 s in its exit barrier for nodes that
 * may be gone).
 */
export class AgentLog {
  private block: Record<string, string> | undefined;
  /** This node's group rank and the nodes of the last round. */
  groupRank?: number;
  nodes?: number;
  restarts = 0;
  /** The agent's workers failed and it has no restart left. */
  failedForGood = false;

  /** The note a line makes, if any. */
  push(text: string): AgentNote | undefined {
    if (this.block) {
      const m = /^\s+(\w+)=(.*)$/.exec(text);
      if (m) {
        this.block[m[1]] = m[2].trim();
        return m[1] === 'global_world_sizes' ? this.endBlock() : undefined;
      }
      const note = this.endBlock();
      return note ?? this.push(text);
    }
    if (/Rendezvous complete for workers\. Result:/.test(text)) {
      this.block = {};
      return undefined;
    }
    let m = /Worker group (FAILED|UNHEALTHY)\. (\d+)\/(\d+) attempts left; will restart worker group/.exec(text);
    if (m) {
      const max = Number(m[3]);
      const attempt = max - Number(m[2]) + 1;
      this.restarts = attempt;
      const node = this.groupRank !== undefined ? `node ${this.groupRank}'s` : 'this node\'s';
      return { message: `torchrun: restart ${attempt} of ${max}: ${node} workers ${m[1] === 'FAILED' ? 'failed' : 'became unhealthy'}; the elastic agent starts them again in a new rendezvous round (the same job)`, elastic: { kind: 'restart', why: 'failed', attempt, maxRestarts: max } };
    }
    m = /Detected (\d+) new nodes? from group_rank=(\d+); will restart worker group/.exec(text);
    if (m) return { message: `torchrun: ${m[1]} more node${m[1] === '1' ? '' : 's'} waiting to join: the elastic agent restarts the workers in a new round with them (the same job; not counted against maxRestarts)`, elastic: { kind: 'restart', why: 'membership' } };
    if (/Local worker group finished \(WorkerState\.FAILED\)/.test(text)) this.failedForGood = true;
    return undefined;
  }

  /** The end of the output: a rendezvous block still open. */
  end(): AgentNote | undefined {
    return this.block ? this.endBlock() : undefined;
  }

  private endBlock(): AgentNote | undefined {
    const b = this.block ?? {};
    this.block = undefined;
    const groupRank = Number(b.group_rank);
    const nodes = Number(b.group_world_size);
    if (!Number.isInteger(groupRank) || !Number.isInteger(nodes)) return undefined;
    const restart = Number(b.restart_count) || 0;
    const world = /^\[(\d+)/.exec(b.global_world_sizes ?? '');
    const worldSize = world ? Number(world[1]) : undefined;
    this.groupRank = groupRank;
    this.nodes = nodes;
    const ranks = b.global_ranks ? ` (global ranks ${b.global_ranks.replace(/^\[|\]$/g, '')})` : '';
    const head = restart > 0 ? `torchrun: after restart ${restart}, this machine is` : 'torchrun: this machine is';
    return { message: `${head} node ${groupRank} of ${nodes}${worldSize !== undefined ? `, in a world of ${worldSize} processes` : ''}${ranks}`, elastic: { kind: 'rendezvous', restart, groupRank, nodes, ...(worldSize !== undefined ? { worldSize } : {}) } };
  }
}

const peerLost = /Connection (?:closed|reset) by peer(?: \[([^\]]+)\]:(\d+))?|remote process exited or there was a network error|Broken pipe|NCCL communicator was aborted/;

/**
 * Why a node of a multi-node job ended it, from the agent's log and the exceptions of the
 * output (torchrun's own, without a rank; the workers', with one): the rendezvous store gone
 * (RendezvousConnectionError), a rendezvous that did not complete in time
 * (RendezvousTimeoutError) or was closed, or this node's workers that lost their peers on
 * another node with no restart left. Undefined: nothing of the nodes (the one-node reading applies).
 */
export function nodeFailure(job: NodeJob & { nodes: TorchrunNodes }, agent: AgentLog, exceptions: readonly ScriptException[]): { reason: string; hint?: string } | undefined {
  const n = job.nodes;
  const r = n.rendezvous;
  const here = `${agent.groupRank !== undefined ? `node ${agent.groupRank}${agent.nodes !== undefined ? ` of ${agent.nodes}` : ''}` : 'this node'} (${hostname()})`;
  const store = r.backend === 'c10d' ? `the rendezvous store at ${r.endpoint}` : `node 0's store at ${r.masterAddr}:${r.masterPort}`;
  const launcher = (type: string) => exceptions.find((e) => e.rank === undefined && !e.ignored && new RegExp(`(?:^|\\.)${type}$`).test(e.type));
  const restarts = n.maxRestarts > 0 ? `after ${agent.restarts} of ${n.maxRestarts} restarts` : 'no restarts allowed (maxRestarts 0)';
  const gone = launcher('RendezvousConnectionError');
  if (gone) {
    return {
      reason: `${here} lost ${store} (RendezvousConnectionError: ${exceptionText(gone, 200)}): the agent that kept it${r.backend === 'c10d' ? `, on ${r.endpoint.replace(/:\d+$/, '')},` : ''} ended or cannot be reached, so no node can go on`,
      hint: 'The node that keeps the store ends the job when it goes: see its log first. Restarts (maxRestarts) cannot bring the store back.',
    };
  }
  const timeout = launcher('RendezvousTimeoutError');
  if (timeout) {
    const conf = r.backend === 'c10d' && r.conf.join_timeout ? `${r.conf.join_timeout} s` : 'join_timeout, 600 s by default';
    return {
      reason: `${here}: the rendezvous ${r.backend === 'c10d' ? `'${r.id}' at ${r.endpoint}` : `at ${r.masterAddr}:${r.masterPort}`} timed out (RendezvousTimeoutError): fewer than ${n.minNodes} node${n.minNodes > 1 ? 's' : ''} joined within ${conf}`,
      hint: 'Start every node\'s agent with the same rendezvous id (GPU Workbench: Copy Launch Commands gives each node\'s command), and check that every node reaches the endpoint\'s host and port.',
    };
  }
  const closed = launcher('RendezvousClosedError');
  if (closed) return { reason: `${here}: the rendezvous was closed (RendezvousClosedError): another node ended the job` };
  const lost = exceptions.filter((e) => e.rank !== undefined && !e.ignored && peerLost.test(e.message)).sort((a, b) => a.seq - b.seq)[0];
  // A peer on this node (one node left, or ever) is the one-node reading's: the rank that failed first.
  if (lost && n.maxNodes > 1 && agent.nodes !== 1) {
    const m = peerLost.exec(lost.message);
    const peer = m?.[1] ? ` at ${m[1]}` : '';
    const other = agent.nodes === 2 && agent.groupRank !== undefined ? `node ${1 - agent.groupRank}` : 'another node';
    return {
      reason: `${here}: local rank ${lost.rank} lost its peer${peer} (${exceptionText(lost, 160)}): ${other} ended or became unreachable (peer lost); ${restarts}, so the job failed`,
      hint: n.maxRestarts > 0 || n.minNodes === n.maxNodes ? 'See the log of the node that went away. To survive the loss of a node, give "nnodes" a range ("1:2") and "maxRestarts" > 0: the agent then restarts its workers with the nodes that are left.' : 'See the log of the node that went away; "maxRestarts" > 0 lets the agent restart its workers with the nodes that are left.',
    };
  }
  return undefined;
}

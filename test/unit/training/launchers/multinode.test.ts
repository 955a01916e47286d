import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JobEvent } from '../../../../src/training/job/events';
import { jobProblems, JobFileError } from '../../../../src/training/job/spec';
import { AgentLog, flagSpelling, launchCommands, nodeFailure, torchVersion, type ElasticEvent } from '../../../../src/training/launchers/multinode';
import { outputLine } from '../../../../src/training/launchers/outputLines';
import { parsePythonExceptions } from '../../../../src/training/launchers/pythonErrors';
import { loadTorchrunJob, runTorchrun, torchrunCommand, type TorchrunSpec } from '../../../../src/training/launchers/torchrun';
import { fixtures, repoRoot } from '../../../paths';

const dir = join(fixtures, 'torchrun');
const script = join(dir, 'nodes_allreduce.py');
const torchPython = '/usr/bin/python3';
const probe = spawnSync(torchPython, ['-c', 'import torch, torch.distributed; print(torch.__version__, torch.distributed.is_gloo_available())'], { encoding: 'utf8', timeout: 60_000 });
const torchMissing = probe.error || probe.status !== 0 || !probe.stdout.includes('True');

let tmp: string;
beforeEach(() => { tmp = mkdtempSync(join(tmpdir(), 'gw-nodes-')); });
afterEach(() => rmSync(tmp, { recursive: true, force: true }));

/** A torchrun job file in the test's folder with these fields (script: the two-node all-reduce). */
function job(fields: Record<string, unknown>, name = 'nodes.job.json'): string {
  const file = join(tmp, name);
  writeFileSync(file, JSON.stringify({ kind: 'torchrun', script, nprocPerNode: 2, python: torchPython, ...fields }));
  return file;
}

/** The problems loading the job reports, one per line. */
function loadProblems(fields: Record<string, unknown>): string {
  try {
    loadTorchrunJob(job(fields));
  } catch (err) {
    assert.ok(err instanceof JobFileError, String(err));
    return err.message;
  }
  assert.fail(`${JSON.stringify(fields)} was accepted`);
}

describe('multi-node torchrun jobs: the job file', () => {
  it('rejects bad node fields with a message naming the field', () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ nnodes: 'two' }, /\/nnodes must be a number of nodes \(2\) or a range "MIN:MAX" \("1:4"\), got "two"/],
      [{ nnodes: '3:2', rendezvous: { endpoint: 'n1:29400' } }, /\/nnodes "3:2": MIN \(3\) must not be above MAX \(2\)/],
      [{ nnodes: 0 }, /\/nnodes must be an integer ≥ 1/],
      [{ nnodes: 2 }, /\/rendezvous is needed for more than one node/],
      [{ nnodes: 2, rendezvous: { backend: 'c10d' } }, /\/rendezvous is missing the required field "endpoint"/],
      [{ nnodes: 2, rendezvous: { endpoint: 'node1' } }, /\/rendezvous\/endpoint must be HOST:PORT with a port from 1 to 65535, got "node1"/],
      [{ nnodes: 2, rendezvous: { endpoint: 'node1:70000' } }, /\/rendezvous\/endpoint must be HOST:PORT/],
      [{ nnodes: 2, rendezvous: { endpoint: 'node1:29400', nodeRank: 1 } }, /\/rendezvous\/nodeRank belongs to the static rendezvous/],
      [{ nnodes: '1:2', rendezvous: { masterAddr: 'node1', masterPort: 29500 } }, /\/nnodes "1:2" is a range, which the static rendezvous cannot take/],
      [{ nnodes: 2, rendezvous: { backend: 'static', masterAddr: 'node1' } }, /\/rendezvous is missing the required field "masterPort"/],
      [{ nnodes: 2, rendezvous: { masterAddr: 'node1', masterPort: 29500, nodeRank: 2 } }, /\/rendezvous\/nodeRank \(2\) must be below nnodes \(2\)/],
      [{ nnodes: 2, rendezvous: { backend: 'static', masterAddr: 'node1', masterPort: 29500, endpoint: 'node1:1' } }, /\/rendezvous\/endpoint belongs to the c10d rendezvous/],
      [{ nnodes: 2, rendezvous: { endpoint: 'n1:29400', port: 1 } }, /\/rendezvous has an unknown field "port"/],
      [{ nnodes: 2, rendezvous: { endpoint: 'n1:29400', conf: { join_timeout: '1,2' } } }, /\/rendezvous\/conf\/join_timeout must not hold a comma/],
      [{ maxRestarts: -1 }, /\/maxRestarts must be an integer ≥ 0/],
      [{ nnodes: 2, launcher: 'slurm', rendezvous: { endpoint: 'n1:29400' } }, /\/rendezvous\/endpoint: with "launcher": "slurm" the store is on the job's first node, which Slurm picks/],
      [{ launcher: 'ssh' }, /\/launcher must be one of "local", "slurm"/],
    ];
    for (const [fields, expected] of cases) assert.match(loadProblems(fields), expected, JSON.stringify(fields));
  });

  it('shows the same problems in the editor as at the start (jobProblems)', () => {
    assert.deepEqual(jobProblems({ kind: 'torchrun', script: 's.py', launcher: 'slurm', rendezvous: { endpoint: 'n1:1' } }).map((p) => p.split(':')[0]), ['/rendezvous/endpoint']);
    assert.deepEqual(jobProblems({ kind: 'torchrun', script: 's.py', nnodes: '1:2', rendezvous: { endpoint: 'n1:29400' }, maxRestarts: 3 }), []);
  });

  it('keeps a plain job\'s one-node command, and gives a c10d job a fresh rendezvous id per run unless it has one', () => {
    const plain = loadTorchrunJob(job({}));
    assert.equal(plain.nodes, undefined);
    assert.deepEqual(torchrunCommand(plain, false).slice(3, 11), ['--nnodes', '1', '--rdzv_backend', 'c10d', '--rdzv_endpoint', 'localhost:0', '--nproc_per_node', '2']);
    const file = job({ nnodes: 2, rendezvous: { endpoint: 'node1:29400' } });
    const [a, b] = [loadTorchrunJob(file), loadTorchrunJob(file)];
    assert.ok(a.nodes?.rendezvous.backend === 'c10d' && b.nodes?.rendezvous.backend === 'c10d');
    assert.match(a.nodes.rendezvous.id, /^gw-[0-9a-f]{8}$/);
    assert.notEqual(a.nodes.rendezvous.id, b.nodes.rendezvous.id, 'two runs, two rendezvous');
    const fixed = loadTorchrunJob(job({ nnodes: 2, rendezvous: { endpoint: 'node1:29400', id: 'exp7' } }));
    assert.ok(fixed.nodes?.rendezvous.backend === 'c10d' && fixed.nodes.rendezvous.id === 'exp7');
  });
});

describe('multi-node torchrun jobs: command lines', () => {
  const c10d = () => loadTorchrunJob(job({ nnodes: '1:2', maxRestarts: 3, rendezvous: { endpoint: 'node1:29400', id: 'exp7', conf: { join_timeout: 60, is_host: true } } }));
  const staticJob = () => loadTorchrunJob(job({ nnodes: 2, rendezvous: { masterAddr: 'node1', masterPort: 29500, nodeRank: 1 } }));

  it('spells every flag with underscores for torch 1.13', () => {
    assert.deepEqual(torchrunCommand(c10d(), false, '1.13.0a0+gitunknown').slice(1), ['-m', 'torch.distributed.run', '--nnodes', '1:2', '--nproc_per_node', '2', '--max_restarts', '3', '--rdzv_backend', 'c10d', '--rdzv_endpoint', 'node1:29400', '--rdzv_id', 'exp7', '--rdzv_conf', 'join_timeout=60,is_host=1', '--redirects', '2', '--tee', '2', script]);
    assert.deepEqual(torchrunCommand(staticJob(), true, '1.13.1').slice(3, 15), ['--nnodes', '2', '--nproc_per_node', '2', '--rdzv_backend', 'static', '--master_addr', 'node1', '--master_port', '29500', '--node_rank', '1']);
  });

  it('spells them with hyphens for torch 2.x, and with underscores when the version is unknown', () => {
    assert.deepEqual(torchrunCommand(c10d(), false, '2.5.1+cu121').slice(3, 17), ['--nnodes', '1:2', '--nproc-per-node', '2', '--max-restarts', '3', '--rdzv-backend', 'c10d', '--rdzv-endpoint', 'node1:29400', '--rdzv-id', 'exp7', '--rdzv-conf', 'join_timeout=60,is_host=1']);
    assert.deepEqual(torchrunCommand(staticJob(), false, '2.1.0').slice(7, 15), ['--rdzv-backend', 'static', '--master-addr', 'node1', '--master-port', '29500', '--node-rank', '1']);
    assert.deepEqual(torchrunCommand(loadTorchrunJob(job({})), false, '2.4.0').slice(3, 11), ['--nnodes', '1', '--rdzv-backend', 'c10d', '--rdzv-endpoint', 'localhost:0', '--nproc-per-node', '2']);
    assert.equal(flagSpelling(undefined), 'underscore');
  });

  it('asks an interpreter for its torch version once', function () {
    // A fake interpreter that counts its runs and answers like torch 2.5's metadata.
    const count = join(tmp, 'runs');
    const python = join(tmp, 'python');
    writeFileSync(python, `#!/bin/sh\necho run >> '${count}'\necho 2.5.1+cu121\n`);
    chmodSync(python, 0o755);
    assert.equal(torchVersion(python), '2.5.1+cu121');
    assert.equal(torchVersion(python), '2.5.1+cu121');
    assert.equal(readFileSync(count, 'utf8'), 'run\n', 'one run for two questions');
    assert.equal(torchVersion(join(tmp, 'no-such-python')), undefined);
    if (torchMissing) this.skip();
    assert.match(torchVersion(torchPython) ?? '', /^1\.13\./, 'Debian bookworm\'s python3-torch');
  });

  it('writes every node\'s command: the same c10d command (and id) on every node, a rank per node for static', () => {
    const text = launchCommands(c10d(), '1.13.1');
    const commands = text.split('\n').filter((l) => !l.startsWith('#'));
    assert.equal(commands.length, 2);
    assert.equal(commands[0], commands[1]);
    assert.equal(commands[0], `cd ${tmp} && /usr/bin/python3 -m torch.distributed.run --nnodes 1:2 --nproc_per_node 2 --max_restarts 3 --rdzv_backend c10d --rdzv_endpoint node1:29400 --rdzv_id exp7 --rdzv_conf join_timeout=60,is_host=1 --redirects 2 --tee 2 ${script}`);
    assert.match(text, /# node 1 of 2; on node1, which keeps the rendezvous store/);
    assert.match(text, /# node 2 of 2 \(optional: the job starts with 1\)/);
    const ranks = launchCommands(loadTorchrunJob(job({ nnodes: 3, rendezvous: { masterAddr: 'node1', masterPort: 29500 }, env: { NCCL_DEBUG: 'INFO', NOTE: 'a b' }, args: ['--lr', '0.1'] })), '2.5.1').split('\n').filter((l) => !l.startsWith('#'));
    assert.deepEqual(ranks.map((c) => /--node-rank (\d)/.exec(c)?.[1]), ['0', '1', '2']);
    assert.match(ranks[0], /&& NCCL_DEBUG=INFO NOTE='a b' \/usr\/bin\/python3 -m torch\.distributed\.run --nnodes 3 --nproc-per-node 2 --rdzv-backend static --master-addr node1 --master-port 29500 --node-rank 0 --redirects 2 --tee 2 \S+nodes_allreduce\.py --lr 0\.1$/);
  });

  it('prints them from the CLI with --print-launch (the same id on every node, a fresh one per call)', () => {
    const file = job({ nnodes: 2, rendezvous: { endpoint: '127.0.0.1:29400' } });
    const cli = join(repoRoot, 'out', 'src', 'cli.js');
    const print = () => spawnSync(process.execPath, [cli, 'train', file, '--print-launch'], { encoding: 'utf8', timeout: 60_000 });
    const [a, b] = [print(), print()];
    assert.equal(a.status, 0, a.stderr);
    const ids = (out: string) => [...out.matchAll(/--rdzv_id (\S+)/g)].map((m) => m[1]);
    assert.equal(ids(a.stdout).length, 2);
    assert.equal(new Set(ids(a.stdout)).size, 1, a.stdout);
    assert.notEqual(ids(a.stdout)[0], ids(b.stdout)[0]);
    assert.match(a.stdout, new RegExp(`# rendezvous id ${ids(a.stdout)[0]}: made for these commands .*start every node, this one too, with them`));
    const bad = spawnSync(process.execPath, [cli, 'train', job({ nnodes: 2, launcher: 'slurm', rendezvous: { endpoint: 'n1:1' } }, 'slurm.job.json'), '--print-launch'], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /slurm\.job\.json: \/rendezvous\/endpoint: with "launcher": "slurm"/);
  });
});

/** Reads a captured agent output as runTorchrun does: the agent's notes, its exceptions, and the node failure. */
function readAgentOutput(name: string, fields: Record<string, unknown>): { notes: ElasticEvent[]; messages: string[]; failure?: { reason: string; hint?: string } } {
  const spec = loadTorchrunJob(job(fields));
  const text = readFileSync(join(dir, name), 'utf8');
  const agent = new AgentLog();
  const notes: ElasticEvent[] = [];
  const messages: string[] = [];
  for (const raw of text.split('\n')) {
    const line = outputLine(raw);
    const note = line.rank === undefined ? agent.push(line.text) : undefined;
    if (note) { notes.push(note.elastic); messages.push(note.message); }
  }
  assert.ok(spec.nodes);
  const failure = nodeFailure({ ...spec, nodes: spec.nodes }, agent, parsePythonExceptions(text));
  return { notes, messages, ...(failure ? { failure } : {}) };
}

describe('multi-node torchrun jobs: the agent\'s log (captured from torch 1.13)', () => {
  const two = { nnodes: 2, rendezvous: { endpoint: '127.0.0.1:29482', id: 'r0' } };

  it('shows a restart by the elastic agent as a restart of the same job, and the node it is after each round', () => {
    const { notes, messages, failure } = readAgentOutput('nodes-restart.txt', { nnodes: '1:2', maxRestarts: 3, rendezvous: { endpoint: '127.0.0.1:29481', id: 'r3' } });
    assert.deepEqual(notes, [
      { kind: 'rendezvous', restart: 0, groupRank: 0, nodes: 2, worldSize: 4 },
      { kind: 'restart', why: 'failed', attempt: 1, maxRestarts: 3 },
      { kind: 'rendezvous', restart: 1, groupRank: 0, nodes: 1, worldSize: 2 },
    ]);
    assert.deepEqual(messages, [
      'torchrun: this machine is node 0 of 2, in a world of 4 processes (global ranks 0, 1)',
      'torchrun: restart 1 of 3: node 0\'s workers failed; the elastic agent starts them again in a new rendezvous round (the same job)',
      'torchrun: after restart 1, this machine is node 0 of 1, in a world of 2 processes (global ranks 0, 1)',
    ]);
    assert.equal(failure, undefined, 'the job went on with one node: nothing of the nodes to blame');
  });

  it('names the node and the lost peer when a node goes and no restart is left', () => {
    const { failure } = readAgentOutput('nodes-peer-lost.txt', two);
    assert.match(failure?.reason ?? '', /^node 0 of 2 \(.+\): local rank 1 lost its peer at 127\.0\.0\.1 \(RuntimeError: .*Connection closed by peer.*\): node 1 ended or became unreachable \(peer lost\); no restarts allowed \(maxRestarts 0\), so the job failed$/);
    assert.match(failure?.hint ?? '', /"nnodes" a range \("1:2"\) and "maxRestarts" > 0/);
  });

  it('says the rendezvous store is gone (RendezvousConnectionError) when the node that kept it ends', () => {
    const { failure } = readAgentOutput('nodes-store-gone.txt', { nnodes: '1:2', maxRestarts: 3, rendezvous: { endpoint: '127.0.0.1:29484', id: 's3' } });
    assert.match(failure?.reason ?? '', /^node 1 of 2 \(.+\) lost the rendezvous store at 127\.0\.0\.1:29484 \(RendezvousConnectionError: .*C10d store has failed.*\): the agent that kept it, on 127\.0\.0\.1, ended or cannot be reached/);
  });

  it('says the rendezvous timed out (RendezvousTimeoutError) when too few nodes join', () => {
    const { failure } = readAgentOutput('nodes-rdzv-timeout.txt', { nnodes: 2, rendezvous: { endpoint: '127.0.0.1:29483', id: 'T', conf: { join_timeout: 5 } } });
    assert.match(failure?.reason ?? '', /^this node \(.+\): the rendezvous 'T' at 127\.0\.0\.1:29483 timed out \(RendezvousTimeoutError\): fewer than 2 nodes joined within 5 s$/);
    assert.match(failure?.hint ?? '', /Copy Launch Commands/);
  });
});

// ---- Real nodes: two torchrun agents on 127.0.0.1 (Debian's torch 1.13, gloo), the store pinned to the first.

/** A port free right now on 127.0.0.1. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** The processes in a process group (Linux /proc). */
function groupMembers(pgid: number): number[] {
  return readdirSync('/proc').filter((p) => /^\d+$/.test(p)).flatMap((p) => {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) === pgid ? [Number(p)] : [];
    } catch {
      return [];
    }
  });
}

const alive = (pid: number) => existsSync(`/proc/${pid}`) && !/^\S+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));

interface Node {
  readonly events: JobEvent[];
  readonly logs: () => string[];
  readonly finished: Promise<Extract<JobEvent, { type: 'job/done' | 'job/failed' }>>;
  readonly agentPid: number;
  /** Every process of the node's group seen while it ran. */
  readonly seen: Set<number>;
}

/** Runs one "node" of the job: its own agent, `is_host` pinning which node keeps the c10d store. */
function startNode(spec: TorchrunSpec, isHost: boolean, onEvent: () => void): Node {
  assert.ok(spec.nodes?.rendezvous.backend === 'c10d');
  const nodes = { ...spec.nodes, rendezvous: { ...spec.nodes.rendezvous, conf: { ...spec.nodes.rendezvous.conf, is_host: isHost ? '1' : '0' } } };
  const events: JobEvent[] = [];
  const seen = new Set<number>();
  const handle = runTorchrun({ ...spec, nodes }, (e) => { events.push(e); onEvent(); });
  const agentPid = handle.pids()[0];
  const watch = setInterval(() => { for (const p of groupMembers(agentPid)) seen.add(p); }, 200);
  const finished = handle.finished.finally(() => clearInterval(watch));
  return { events, logs: () => events.flatMap((e) => (e.type === 'job/log' ? [e.message] : [])), finished, agentPid, seen };
}

/** Resolves when `cond` holds after some event of the nodes (no polling of time: each event re-checks). */
function waiter(): { changed: () => void; until: (what: string, cond: () => boolean) => Promise<void> } {
  const waiting: Array<{ cond: () => boolean; resolve: () => void }> = [];
  return {
    changed: () => { for (const w of [...waiting]) if (w.cond()) { waiting.splice(waiting.indexOf(w), 1); w.resolve(); } },
    until: (_what, cond) => (cond() ? Promise.resolve() : new Promise<void>((resolve) => waiting.push({ cond, resolve }))),
  };
}

/** Each rank's all-reduce line of a node (also when another process's output was glued to it on the way). */
const sums = (n: Node, sum: number) => n.logs().flatMap((l) => [...l.matchAll(new RegExp(`rank \\d+ of \\d+ on node \\d+ \\(restart \\d+\\): sum ${sum}(?![\\d.])`, 'g'))].map((m) => m[0]));

describe('multi-node torchrun jobs: two nodes on 127.0.0.1', function () {
  // torch's own timing: the elastic agent restarts ~46 s after a node goes (under load, more).
  this.timeout(600_000);
  before(function () { if (torchMissing) this.skip(); });

  async function nodesJob(fields: Record<string, unknown>): Promise<TorchrunSpec> {
    const port = await freePort();
    return loadTorchrunJob(job({ rendezvous: { endpoint: `127.0.0.1:${port}` }, env: { GATE: join(tmp, 'gate') }, ...fields }));
  }

  function assertNothingLeft(nodes: readonly Node[]): void {
    for (const n of nodes) {
      assert.ok(n.seen.size >= 3, `the agent and its 2 workers were seen: ${[...n.seen].join(' ')}`);
      assert.deepEqual([...n.seen].filter(alive), [], 'no process of the job outlives it');
    }
  }

  it('runs 2 nodes x 2 processes to the end: one world of 4 ranks, each node told which it is', async () => {
    const spec = await nodesJob({ nnodes: 2 });
    writeFileSync(join(tmp, 'gate'), '');
    const w = waiter();
    const nodes = [startNode(spec, true, w.changed), startNode(spec, false, w.changed)];
    const finals = await Promise.all(nodes.map((n) => n.finished));
    for (const [i, f] of finals.entries()) assert.equal(f.type, 'job/done', `node ${i}: ${JSON.stringify(f)}\n${nodes[i].logs().join('\n')}`);
    const lines = nodes.flatMap((n) => sums(n, 10));
    assert.deepEqual(lines.map((l) => /rank (\d) of 4/.exec(l)?.[1]).sort(), ['0', '1', '2', '3'], lines.join('\n'));
    const joined = nodes.map((n) => n.events.flatMap((e) => (e.type === 'job/log' && e.elastic?.kind === 'rendezvous' ? [e.elastic] : [])));
    assert.deepEqual(joined.map((j) => j.map((e) => `${e.groupRank}/${e.nodes}/${e.worldSize}`)).flat().sort(), ['0/2/4', '1/2/4']);
    assertNothingLeft(nodes);
  });

  it('restarts the survivor\'s workers when the other node is killed (maxRestarts 1), and finishes as the same job', async () => {
    const spec = await nodesJob({ nnodes: '1:2', maxRestarts: 1 });
    const w = waiter();
    const nodes = [startNode(spec, true, w.changed), startNode(spec, false, w.changed)];
    await w.until('4 ranks ready', () => nodes.flatMap((n) => sums(n, 10)).length === 4);
    process.kill(nodes[1].agentPid, 'SIGKILL'); // the node that does not keep the store goes
    await nodes[1].finished;
    writeFileSync(join(tmp, 'gate'), '');
    const final = await nodes[0].finished;
    const logs = nodes[0].logs();
    assert.equal(final.type, 'job/done', `${JSON.stringify(final)}\n${logs.join('\n')}`);
    const restarts = nodes[0].events.flatMap((e) => (e.type === 'job/log' && e.elastic?.kind === 'restart' ? [e.elastic] : []));
    assert.deepEqual(restarts, [{ kind: 'restart', why: 'failed', attempt: 1, maxRestarts: 1 }]);
    assert.ok(logs.includes('torchrun: after restart 1, this machine is node 0 of 1, in a world of 2 processes (global ranks 0, 1)'), logs.join('\n'));
    assert.deepEqual(sums(nodes[0], 3).map((l) => /rank (\d) of 2 on node 0 \(restart 1\)/.exec(l)?.[1]).sort(), ['0', '1'], logs.join('\n'));
    assert.equal(nodes[0].events.filter((e) => e.type === 'job/done' || e.type === 'job/failed').length, 1, 'one job, one end');
    assertNothingLeft(nodes);
  });

  it('fails naming the node and the lost peer when the other node is killed and maxRestarts is 0', async () => {
    const spec = await nodesJob({ nnodes: 2 });
    const w = waiter();
    const nodes = [startNode(spec, true, w.changed), startNode(spec, false, w.changed)];
    await w.until('4 ranks ready', () => nodes.flatMap((n) => sums(n, 10)).length === 4);
    process.kill(nodes[1].agentPid, 'SIGKILL');
    await nodes[1].finished;
    writeFileSync(join(tmp, 'gate'), '');
    const final = await nodes[0].finished;
    assert.equal(final.type, 'job/failed');
    assert.ok(final.type === 'job/failed' && !final.cancelled);
    assert.ok(nodes[0].logs().some((l) => l.includes('its agent is ended now instead of waiting up to 300 s')), 'no 300 s exit barrier for a node that is gone');
    assert.match(final.type === 'job/failed' ? final.reason : '', /^node 0 of 2 \(.+\): local rank \d lost its peer at 127\.0\.0\.1 .*: node 1 ended or became unreachable \(peer lost\); no restarts allowed \(maxRestarts 0\)/, nodes[0].logs().join('\n'));
    assertNothingLeft(nodes);
  });
});

import assert from 'node:assert/strict';
import { fork, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BucketedAllReduce, Ring, RingError, ringSocketPath, type RingTransport } from '../../../../src/training/transport/ring';
import { seededRandom } from '../../../../src/training/strategies/sampler';

function ringOf(worldSize: number, dir: string, transport?: RingTransport, shmDir?: string): Promise<Ring[]> {
  return Promise.all(Array.from({ length: worldSize }, (_, rank) => Ring.join({ rank, worldSize, dir, connectTimeoutMs: 5000, ...(transport ? { transport } : {}), ...(shmDir ? { shmDir } : {}) })));
}

function randomArray(n: number, seed: number): Float32Array {
  const r = seededRandom(seed);
  return Float32Array.from({ length: n }, () => r() * 2 - 1);
}

/** Resolves with the first message of `child` that has `key`, or rejects when it exits first. */
function messageOf<T>(child: ChildProcess, key: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const on = (m: Record<string, unknown>) => {
      if (typeof m.error === 'string') reject(new Error(m.error));
      else if (key in m) {
        child.off('message', on);
        resolve(m as T);
      }
    };
    child.on('message', on);
    child.once('exit', (code, signal) => reject(new Error(`the ring peer exited (${code ?? signal}) before sending ${key}`)));
  });
}

function forkPeer(dir: string, rank: number, worldSize: number, transport: RingTransport): ChildProcess {
  return fork(join(__dirname, 'ringPeer.js'), [dir, String(rank), String(worldSize), transport], { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
}

const exited = (child: ChildProcess) => new Promise<void>((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', () => resolve())));

for (const transport of ['shm', 'socket'] as const) {
  describe(`ring all-reduce between processes (${transport} transport)`, () => {
    let dir: string;
    let rings: Ring[] = [];
    let peers: ChildProcess[] = [];
    beforeEach(() => { dir = mkdtempSync(join(tmpdir(), 'gw-ring-')); });
    afterEach(async () => {
      for (const r of rings) r.close();
      for (const p of peers) p.kill('SIGKILL');
      await Promise.all(peers.map(exited));
      rings = [];
      peers = [];
      rmSync(dir, { recursive: true, force: true });
    });

    for (const worldSize of [2, 3, 4]) {
      it(`sums buffers of ${worldSize} ranks, also lengths that do not split evenly or are shorter than the ring`, async () => {
        rings = await ringOf(worldSize, dir, transport);
        assert.match(rings[0].transport, transport === 'shm' ? /^shm/ : /^socket$/);
        for (const n of [1000, 7, 1, 2, 300_007]) {
          const inputs = rings.map((_, rank) => randomArray(n, n * 10 + rank));
          const expected = new Float64Array(n);
          for (const a of inputs) for (let i = 0; i < n; i++) expected[i] += a[i];
          const outputs = inputs.map((a) => a.slice());
          await Promise.all(rings.map((r, rank) => r.allReduceSum(outputs[rank])));
          for (const out of outputs) {
            for (let i = 0; i < n; i++) assert.ok(Math.abs(out[i] - expected[i]) < 1e-5, `n=${n} i=${i}: ${out[i]} vs ${expected[i]}`);
          }
          for (const out of outputs) assert.deepEqual(out, outputs[0], 'every rank ends with the same bits');
        }
      });
    }

    it('keeps many all-reduces of changing lengths in step (the shared buffer halves alternate)', async () => {
      rings = await ringOf(3, dir, transport);
      for (let k = 0; k < 12; k++) {
        const n = [5000, 3, 70_001, 1][k % 4];
        const bufs = rings.map((_, rank) => new Float32Array(n).fill(rank + k));
        await Promise.all(rings.map((r, rank) => r.allReduceMean(bufs[rank])));
        for (const b of bufs) assert.equal(b[n - 1], (0 + 1 + 2 + 3 * k) / 3, `round ${k}`);
      }
    });

    it('averages gradients in buckets, last layer first, with the loss riding along', async () => {
      rings = await ringOf(2, dir, transport);
      const grads = [0, 1].map((rank) => [randomArray(300, rank), randomArray(50, rank + 10), randomArray(7, rank + 20)]);
      const loss = [new Float32Array([1]), new Float32Array([3])];
      const expected = grads[0].map((g, i) => g.map((v, j) => (v + grads[1][i][j]) / 2));
      // 64-byte buckets: 16 floats each, so many buckets and one that straddles two tensors.
      await Promise.all(rings.map((r, rank) => new BucketedAllReduce(r, 64).mean(grads[rank], loss[rank])));
      for (const rank of [0, 1]) {
        grads[rank].forEach((g, i) => g.forEach((v, j) => assert.ok(Math.abs(v - expected[i][j]) < 1e-6)));
        assert.equal(loss[rank][0], 2);
      }
    });

    it('broadcasts rank 0 to all ranks', async () => {
      rings = await ringOf(3, dir, transport);
      const bufs = rings.map((_, rank) => new Float32Array([rank + 1, 10 * (rank + 1)]));
      await Promise.all(rings.map((r, rank) => r.broadcast(bufs[rank])));
      for (const b of bufs) assert.deepEqual([...b], [1, 10]);
    });

    it('all-reduces with a rank in another process', async () => {
      const peer = forkPeer(dir, 1, 2, transport);
      peers.push(peer);
      const [ring] = await Promise.all([Ring.join({ rank: 0, worldSize: 2, dir, transport, connectTimeoutMs: 5000 }), messageOf(peer, 'joined')]);
      rings = [ring];
      const data = new Float32Array(100_000).fill(2);
      peer.send({ reduce: data.length });
      const [answer] = await Promise.all([messageOf<{ reduced: number }>(peer, 'reduced'), ring.allReduceSum(data)]);
      assert.equal(answer.reduced, 3);
      assert.equal(data[99_999], 3);
    });

    it('fails mid all-reduce with a RingError naming the rank whose process was killed', async () => {
      // Ranks 0 and 2 here, rank 1 in a child process that joins and never all-reduces.
      const peer = forkPeer(dir, 1, 3, transport);
      peers.push(peer);
      const joined = await Promise.all([Ring.join({ rank: 0, worldSize: 3, dir, transport, connectTimeoutMs: 5000 }), Ring.join({ rank: 2, worldSize: 3, dir, transport, connectTimeoutMs: 5000 }), messageOf(peer, 'joined')]);
      rings = [joined[0], joined[1]];
      const pending = rings.map((r) => r.allReduceSum(new Float32Array(50_000).fill(1)));
      peer.kill('SIGKILL');
      const results = await Promise.allSettled(pending);
      for (const r of results) {
        assert.equal(r.status, 'rejected');
        const reason: unknown = r.status === 'rejected' ? r.reason : undefined;
        assert.ok(reason instanceof RingError && reason.peerLost, String(reason));
        assert.match(reason.message, /rank 1/);
      }
      // The ring stays broken: the next call fails at once instead of hanging.
      await assert.rejects(rings[0].allReduceSum(new Float32Array(3)), RingError);
    });

    it('fails the other ranks with the lost peer when one rank closes mid-ring', async () => {
      rings = await ringOf(3, dir, transport);
      rings[1].close();
      const results = await Promise.allSettled([rings[0].allReduceSum(new Float32Array(10)), rings[2].allReduceSum(new Float32Array(10))]);
      for (const r of results) {
        assert.equal(r.status, 'rejected');
        assert.ok(r.reason instanceof RingError && r.reason.peerLost, String(r.status === 'rejected' ? r.reason : ''));
      }
      assert.match(String((results[1] as PromiseRejectedResult).reason), /rank 1/);
    });

    it('says the ring is out of step when the ranks all-reduce different lengths', async () => {
      rings = await ringOf(2, dir, transport);
      const results = await Promise.allSettled([rings[0].allReduceSum(new Float32Array(1000)), rings[1].allReduceSum(new Float32Array(1002))]);
      const reasons = results.map((r) => (r.status === 'rejected' ? (r.reason as Error) : undefined));
      assert.ok(reasons.some((e) => e instanceof RingError && !e.peerLost && /out of step with rank [01]: expected frame 0\/\d+ of \d+ bytes, got 0\/\d+ of \d+/.test(e.message)), reasons.map(String).join(' | '));
    });
  });
}

describe('ring all-reduce: transports and frames', () => {
  let dir: string;
  let rings: Ring[] = [];
  const cleanup: (() => void)[] = [];
  beforeEach(() => { dir = mkdtempSync(join(tmpdir(), 'gw-ring-')); });
  afterEach(() => {
    for (const r of rings) r.close();
    for (const c of cleanup.splice(0)) c();
    rings = [];
    rmSync(dir, { recursive: true, force: true });
  });

  it('leaves no shared file behind in /dev/shm, even for a process that is killed', async function () {
    if (process.platform !== 'linux' || !existsSync('/dev/shm')) this.skip();
    const peer = forkPeer(dir, 1, 2, 'shm');
    cleanup.push(() => peer.kill('SIGKILL'));
    const [ring, joined] = await Promise.all([Ring.join({ rank: 0, worldSize: 2, dir, connectTimeoutMs: 5000 }), messageOf<{ files: string[]; transport: string }>(peer, 'joined')]);
    rings = [ring];
    assert.equal(joined.transport, 'shm (/dev/shm)');
    assert.deepEqual(joined.files, [], 'the peer\'s shared file is unlinked once joined');
    peer.kill('SIGKILL');
    await exited(peer);
    assert.deepEqual(readdirSync('/dev/shm').filter((f) => f.startsWith(`gw-ring-${peer.pid}-`) || f.startsWith(`gw-ring-${process.pid}-`)), []);
  });

  it('keeps its shared files by name in shmDir when asked, and removes them on close', async () => {
    const shm = mkdtempSync(join(tmpdir(), 'gw-shm-'));
    cleanup.push(() => rmSync(shm, { recursive: true, force: true }));
    rings = await ringOf(2, dir, 'shm', shm);
    assert.equal(readdirSync(shm).length, 2);
    const bufs = [new Float32Array([1, 2, 3]), new Float32Array([10, 20, 30])];
    await Promise.all(rings.map((r, i) => r.allReduceSum(bufs[i])));
    assert.deepEqual([...bufs[1]], [11, 22, 33]);
    for (const r of rings) r.close();
    assert.deepEqual(readdirSync(shm), []);
  });

  /** Rank 1 played by hand: a server for rank 0 to connect to, and a socket to rank 0. */
  async function fakeRank1(): Promise<{ toRank0: Socket; server: Server }> {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(ringSocketPath(dir, 1), () => resolve()));
    const toRank0 = await new Promise<Socket>((resolve, reject) => {
      const attempt = () => {
        const s = createConnection(ringSocketPath(dir, 0));
        s.once('connect', () => resolve(s));
        s.once('error', () => (Date.now() - started > 5000 ? reject(new Error('rank 0 never listened')) : setTimeout(attempt, 20)));
      };
      const started = Date.now();
      attempt();
    });
    cleanup.push(() => { toRank0.destroy(); server.close(); });
    return { toRank0, server };
  }

  function header(kind: number, seq: number, chunk: number, len: number): Buffer {
    const h = Buffer.alloc(16);
    h.writeUInt32LE(kind, 0);
    h.writeUInt32LE(seq, 4);
    h.writeUInt32LE(chunk, 8);
    h.writeUInt32LE(len, 12);
    return h;
  }

  it('says which frame it expected when a peer sends one from another all-reduce (socket)', async () => {
    const joining = Ring.join({ rank: 0, worldSize: 2, dir, transport: 'socket', connectTimeoutMs: 5000 });
    const { toRank0 } = await fakeRank1();
    rings = [await joining];
    const data = new Float32Array(8);
    const pending = rings[0].allReduceSum(data);
    // Rank 0 expects frame 0/<chunk 1, piece 0> of 16 bytes; this one claims sequence 5.
    toRank0.write(Buffer.concat([header(0x52575047, 5, 1 << 16, 16), Buffer.alloc(16)]));
    await assert.rejects(pending, (e: Error) => e instanceof RingError && !e.peerLost && /out of step with rank 1: expected frame 0\/65536 of 16 bytes, got 5\/65536 of 16/.test(e.message));
  });

  it('says so when the bytes are not ring frames at all', async () => {
    const joining = Ring.join({ rank: 0, worldSize: 2, dir, transport: 'socket', connectTimeoutMs: 5000 });
    const { toRank0 } = await fakeRank1();
    rings = [await joining];
    const pending = rings[0].allReduceSum(new Float32Array(8));
    toRank0.write(Buffer.from('{"type":"json is not a frame"}'));
    await assert.rejects(pending, /rank 1 sent a frame without the ring header/);
  });

  it('says the transports differ when one rank uses shm and the other sockets', async () => {
    const results = await Promise.allSettled([
      Ring.join({ rank: 0, worldSize: 2, dir, transport: 'shm', connectTimeoutMs: 1000 }),
      Ring.join({ rank: 1, worldSize: 2, dir, transport: 'socket', connectTimeoutMs: 1000 }),
    ]);
    for (const r of results) if (r.status === 'fulfilled') rings.push(r.value);
    const shmSide = results[0];
    assert.equal(shmSide.status, 'rejected');
    assert.match(String(shmSide.reason), /same ring transport|went away while joining|did not connect/);
    // The socket side joined; its first all-reduce reads the shm side's handshake and says so.
    if (rings.length) await assert.rejects(rings[0].allReduceSum(new Float32Array(4)), RingError);
  });

  it('gives up with a clear error when a neighbour never shows up', async () => {
    await assert.rejects(Ring.join({ rank: 0, worldSize: 2, dir, connectTimeoutMs: 200 }), /cannot connect to rank 1|rank 1 did not connect/);
  });
});

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs, { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ring, RingError } from '../../../../src/training/transport/ring';
import { seededRandom } from '../../../../src/training/strategies/sampler';

/**
 * The shm transport in a shared folder too small for the gradients (Docker's /dev/shm is 64 MB):
 * a 1 MiB tmpfs as `shmDir` and all-reduces of 2 MiB. Mounting needs root; without it the tests
 * that need the tmpfs are skipped, saying why.
 */
describe('ring all-reduce: a shared-memory folder too small for the buffer', () => {
  let dir: string;
  let shm: string;
  let mountError: string | undefined;
  let rings: Ring[] = [];
  const restore: (() => void)[] = [];

  before(() => {
    shm = mkdtempSync(join(tmpdir(), 'gw-tiny-shm-'));
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', shm], { stdio: 'pipe' });
    } catch (err) {
      mountError = String((err as { stderr?: Buffer }).stderr ?? err).replace(/\s+/g, ' ').trim() || 'mount failed';
    }
  });
  after(() => {
    if (!mountError) execFileSync('umount', [shm]);
    rmSync(shm, { recursive: true, force: true });
  });
  beforeEach(function () {
    dir = mkdtempSync(join(tmpdir(), 'gw-ring-'));
    if (mountError && /tmpfs/.test(this.currentTest?.title ?? '')) {
      this.currentTest!.title += ` (skipped: cannot mount a 1 MiB tmpfs: ${mountError})`;
      this.skip();
    }
  });
  afterEach(() => {
    for (const r of rings) r.close();
    for (const f of restore.splice(0)) f();
    rings = [];
    rmSync(dir, { recursive: true, force: true });
  });

  /** Replaces `fs[name]` until the end of the test (ring.ts calls it through the module object). */
  function stub<K extends 'statfsSync' | 'statSync' | 'writeSync'>(name: K, fake: (typeof fs)[K]): void {
    const real = fs[name];
    (fs as Record<K, unknown>)[name] = fake;
    restore.push(() => { (fs as Record<K, unknown>)[name] = real; });
  }

  async function joinAll(worldSize: number, shmDir: string | undefined, notes: string[][] = []): Promise<Ring[]> {
    return Promise.all(Array.from({ length: worldSize }, (_, rank) => {
      notes[rank] = [];
      return Ring.join({ rank, worldSize, dir, connectTimeoutMs: 5000, ...(shmDir ? { shmDir } : {}), onFallback: (m) => notes[rank].push(m) });
    }));
  }

  /** All-reduces a different random buffer of `n` floats on each rank and checks every rank got the sum. */
  async function sumsRight(n: number, seed: number): Promise<void> {
    const inputs = rings.map((_, rank) => {
      const r = seededRandom(seed + rank);
      return Float32Array.from({ length: n }, () => r() * 2 - 1);
    });
    const outputs = inputs.map((a) => a.slice());
    await Promise.all(rings.map((r, rank) => r.allReduceSum(outputs[rank])));
    for (let i = 0; i < n; i++) {
      let expected = 0;
      for (const a of inputs) expected += a[i];
      assert.ok(Math.abs(outputs[0][i] - expected) < 1e-5, `n=${n} i=${i}: ${outputs[0][i]} vs ${expected}`);
    }
    for (const out of outputs) assert.deepEqual(out, outputs[0], 'every rank ends with the same bits');
  }

  it('sends a 2 MiB all-reduce over the socket when the 1 MiB tmpfs cannot hold it, says so once, and still uses the tmpfs for what fits', async () => {
    const notes: string[][] = [];
    rings = await joinAll(2, shm, notes);
    assert.equal(rings[0].transport, `shm (${shm})`);
    await sumsRight(512 * 1024, 1);
    for (const [rank, ring] of rings.entries()) {
      assert.match(ring.fallback ?? '', new RegExp(`${shm} has 1\\.0 MiB free, the ring needs about \\d+\\.\\d MiB more there`));
      assert.equal(notes[rank].length, 1);
      assert.match(notes[rank][0], /sending gradients over the Unix socket instead.*docker run --shm-size=1g/);
    }
    await sumsRight(512 * 1024, 2);
    await sumsRight(1000, 3);
    assert.deepEqual(notes.map((n) => n.length), [1, 1], 'told once per rank, not once per all-reduce');
    for (const r of rings) r.close();
    assert.deepEqual(readdirSync(shm), [], 'nothing left in the tmpfs');
  });

  it('falls back mid all-reduce when a write into the tmpfs hits ENOSPC (someone else took the room after the check)', async () => {
    // The free-space check sees plenty, as it would just before another process filled the folder.
    const realStatfs = fs.statfsSync;
    stub('statfsSync', ((path: fs.PathLike) => ({ ...realStatfs(path), bavail: 1 << 30, bsize: 4096 })) as typeof fs.statfsSync);
    const notes: string[][] = [];
    rings = await joinAll(3, shm, notes);
    await sumsRight(512 * 1024, 4);
    for (const ring of rings) assert.match(ring.fallback ?? '', new RegExp(`writing \\d+\\.\\d MiB into ${shm} failed with ENOSPC`));
    assert.ok(notes.every((n) => n.length === 1), JSON.stringify(notes));
    await sumsRight(70_001, 5);
  });

  it('turns any other write error on the shared buffer into a RingError naming the folder and what to try', async () => {
    rings = await joinAll(2, undefined);
    const eio = Object.assign(new Error('EIO: i/o error, write'), { code: 'EIO' });
    stub('writeSync', () => { throw eio; });
    const results = await Promise.allSettled(rings.map((r) => r.allReduceSum(new Float32Array(1000))));
    for (const r of results) {
      assert.equal(r.status, 'rejected');
      const reason: unknown = r.status === 'rejected' ? r.reason : undefined;
      assert.ok(reason instanceof RingError, String(reason));
      assert.match(reason.message, /cannot write 2000 bytes into this rank's shared buffer in \/dev\/shm: EIO: i\/o error, write\. \/dev\/shm has \d+\.\d MiB free\. Try a larger \/dev\/shm \(in Docker: docker run --shm-size=1g\) or the socket ring transport\./);
    }
  });

  it('uses the socket transport where there is no /dev/shm, not files in the ring folder', async () => {
    const realStat = fs.statSync;
    stub('statSync', ((path: fs.PathLike, opts?: fs.StatSyncOptions) => {
      if (path === '/dev/shm') throw Object.assign(new Error(`ENOENT: no such file or directory, stat '${path}'`), { code: 'ENOENT' });
      return realStat(path, opts);
    }) as typeof fs.statSync);
    rings = await joinAll(2, undefined);
    assert.deepEqual(rings.map((r) => r.transport), ['socket', 'socket']);
    await sumsRight(300_007, 6);
    assert.deepEqual(readdirSync(dir).filter((f) => f.endsWith('.buf')), []);
  });
});

/**
 * Ring all-reduce among worker processes over Unix domain sockets, peer to peer.
 *
 * Rank r listens on `<dir>/rank-r.sock`, accepts exactly one connection (from rank r-1) and
 * connects to rank r+1. A sum all-reduce of n floats is a reduce-scatter (W-1 steps: send one
 * chunk to the next rank, add the chunk received from the previous one) followed by an
 * all-gather (W-1 steps: pass the finished chunks along), so every rank sends and receives
 * 2(W-1)/W of the buffer whatever W is, and nothing goes through a coordinator.
 *
 * Frames are raw little-endian Float32Array bytes behind a 16-byte header
 * (magic, sequence number, chunk index, payload bytes); the sequence number catches a peer
 * that got out of step. Nothing is JSON.
 */
import { mkdirSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';

export const magic = 0x52575047; // 'GPWR'
export const headerBytes = 16;
/** Floats per frame within a ring step (256 KiB): small enough to overlap, big enough to amortise a frame. */
const pieceFloats = 1 << 16;

/** The ring broke: a peer closed its socket, died or sent garbage. */
export class RingError extends Error {
  constructor(message: string, readonly peerLost: boolean) {
    super(message);
    this.name = 'RingError';
  }
}

/** Reads frames from the previous rank, copying each payload straight into the caller's buffer. */
class FrameReader {
  private readonly queue: Buffer[] = [];
  private queued = 0;
  private waiter: { seq: number; chunk: number; target: Uint8Array; resolve: () => void; reject: (e: Error) => void } | undefined;
  private failure: Error | undefined;

  push(data: Buffer): void {
    this.queue.push(data);
    this.queued += data.length;
    this.pump();
  }

  fail(err: Error): void {
    if (this.failure) return;
    this.failure = err;
    const w = this.waiter;
    this.waiter = undefined;
    w?.reject(err);
  }

  read(seq: number, chunk: number, target: Uint8Array): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.waiter = { seq, chunk, target, resolve, reject };
      this.pump();
    });
  }

  private pump(): void {
    const w = this.waiter;
    if (!w || this.queued < headerBytes) return;
    const header = this.peek(headerBytes);
    const len = header.readUInt32LE(12);
    if (this.queued < headerBytes + len) return;
    if (header.readUInt32LE(0) !== magic) return this.fail(new RingError('the previous rank sent a frame without the ring header (corrupt stream)', false));
    const seq = header.readUInt32LE(4);
    const chunk = header.readUInt32LE(8);
    if (seq !== w.seq || chunk !== w.chunk || len !== w.target.byteLength) {
      return this.fail(new RingError(`ring out of step: expected frame ${w.seq}/${w.chunk} of ${w.target.byteLength} bytes, got ${seq}/${chunk} of ${len}`, false));
    }
    this.skip(headerBytes);
    this.take(w.target);
    this.waiter = undefined;
    w.resolve();
  }

  private peek(n: number): Buffer {
    if (this.queue[0].length >= n) return this.queue[0].subarray(0, n);
    const out = Buffer.allocUnsafe(n);
    let off = 0;
    for (const b of this.queue) {
      const k = Math.min(b.length, n - off);
      b.copy(out, off, 0, k);
      off += k;
      if (off === n) break;
    }
    return out;
  }

  private skip(n: number): void {
    this.consume(n, undefined);
  }

  private take(target: Uint8Array): void {
    this.consume(target.byteLength, target);
  }

  private consume(n: number, target: Uint8Array | undefined): void {
    let off = 0;
    while (off < n) {
      const b = this.queue[0];
      const k = Math.min(b.length, n - off);
      if (target) target.set(b.subarray(0, k), off);
      off += k;
      if (k === b.length) this.queue.shift();
      else this.queue[0] = b.subarray(k);
    }
    this.queued -= n;
  }
}

export interface RingOptions {
  readonly rank: number;
  readonly worldSize: number;
  /** A folder private to this job, for the sockets. */
  readonly dir: string;
  /** How long to wait for the neighbours to appear. */
  readonly connectTimeoutMs?: number;
}

export function ringSocketPath(dir: string, rank: number): string {
  return join(dir, `rank-${rank}.sock`);
}

export class Ring {
  private seq = 0;
  private closed = false;
  private scratch = new Float32Array(0);

  private constructor(
    readonly rank: number,
    readonly worldSize: number,
    private readonly server: Server | undefined,
    private readonly next: Socket | undefined,
    private readonly prev: Socket | undefined,
    private readonly reader: FrameReader,
  ) {}

  /** Joins the ring; resolves once this rank is connected to both neighbours. */
  static async join(o: RingOptions): Promise<Ring> {
    const reader = new FrameReader();
    if (o.worldSize === 1) return new Ring(0, 1, undefined, undefined, undefined, reader);
    mkdirSync(o.dir, { recursive: true });
    const timeoutMs = o.connectTimeoutMs ?? 30_000;
    const prevRank = (o.rank - 1 + o.worldSize) % o.worldSize;
    const nextRank = (o.rank + 1) % o.worldSize;
    const server = createServer();
    let timer: NodeJS.Timeout | undefined;
    const accepted = new Promise<Socket>((resolve, reject) => {
      timer = setTimeout(() => reject(new RingError(`rank ${prevRank} did not connect within ${timeoutMs} ms`, true)), timeoutMs);
      server.once('connection', (socket) => {
        clearTimeout(timer);
        server.close(); // exactly one peer: the previous rank
        resolve(socket);
      });
    });
    accepted.catch(() => undefined); // observed below; a failed connect must not leave it unhandled
    let next: Socket | undefined;
    let prev: Socket;
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(ringSocketPath(o.dir, o.rank), () => resolve());
      });
      next = await connectWithRetry(ringSocketPath(o.dir, nextRank), nextRank, Date.now() + timeoutMs);
      next.setNoDelay?.(true);
      prev = await accepted;
    } catch (err) {
      clearTimeout(timer);
      server.close();
      next?.destroy();
      throw err;
    }
    const lost = (what: string) => () => reader.fail(new RingError(`rank ${prevRank} ${what} (lost its ring connection)`, true));
    prev.on('data', (d: Buffer) => reader.push(d));
    prev.on('end', lost('closed its socket'));
    prev.on('close', lost('went away'));
    prev.on('error', (e) => reader.fail(new RingError(`rank ${prevRank}: ${e.message}`, true)));
    next.on('error', (e) => reader.fail(new RingError(`rank ${nextRank}: ${e.message}`, true)));
    next.on('close', () => reader.fail(new RingError(`rank ${nextRank} went away (lost its ring connection)`, true)));
    return new Ring(o.rank, o.worldSize, server, next, prev, reader);
  }

  /** Sums `data` over all ranks, in place. Every rank must call it with the same length, in the same order. */
  async allReduceSum(data: Float32Array): Promise<void> {
    const w = this.worldSize;
    if (w === 1 || data.length === 0) return;
    if (this.closed) throw new RingError('the ring is closed', false);
    const seq = this.seq++ >>> 0;
    const bounds = (c: number): [number, number] => [Math.floor((c * data.length) / w), Math.floor(((c + 1) * data.length) / w)];
    if (this.scratch.length < pieceFloats) this.scratch = new Float32Array(pieceFloats);
    const r = this.rank;
    // Reduce-scatter: after W-1 steps, rank r holds the full sum of chunk (r+1) mod W.
    for (let s = 0; s < w - 1; s++) {
      const sendC = (r - s + w) % w;
      const recvC = (r - s - 1 + w) % w;
      const [rs, re] = bounds(recvC);
      await this.step(seq, sendC, data, bounds(sendC), recvC, re - rs, (off, len) => {
        const incoming = this.scratch.subarray(0, len);
        return [bytes(incoming), () => {
          const dst = data.subarray(rs + off, rs + off + len);
          for (let i = 0; i < len; i++) dst[i] += incoming[i];
        }];
      });
    }
    // All-gather: pass the finished chunks around.
    for (let s = 0; s < w - 1; s++) {
      const sendC = (r + 1 - s + w) % w;
      const recvC = (r - s + w) % w;
      const [rs, re] = bounds(recvC);
      await this.step(seq, sendC, data, bounds(sendC), recvC, re - rs, (off, len) => [bytes(data.subarray(rs + off, rs + off + len)), undefined]);
    }
  }

  /**
   * One ring step, pipelined: the chunk goes out in pieces, and each piece received is
   * reduced while the next one is still on the wire, so copying, adding and the socket overlap.
   */
  private async step(seq: number, sendC: number, data: Float32Array, [ss, se]: [number, number], recvC: number, recvLen: number, into: (off: number, len: number) => [Uint8Array, (() => void) | undefined]): Promise<void> {
    const sends: Promise<void>[] = [];
    for (let off = ss, p = 0; off < se || (p === 0 && ss === se); off += pieceFloats, p++) {
      sends.push(this.send(seq, (sendC << 16) | p, data, [off, Math.min(se, off + pieceFloats)]));
      if (ss === se) break;
    }
    try {
      for (let off = 0, p = 0; off < recvLen || (p === 0 && recvLen === 0); off += pieceFloats, p++) {
        const len = Math.min(pieceFloats, recvLen - off);
        const [target, reduce] = into(off, len);
        await this.reader.read(seq, (recvC << 16) | p, target);
        reduce?.();
        if (recvLen === 0) break;
      }
    } finally {
      // Never return (and let the caller overwrite) while our own pieces are still being written.
      await Promise.allSettled(sends);
    }
    await Promise.all(sends);
  }

  /** Averages `data` over all ranks, in place. */
  async allReduceMean(data: Float32Array): Promise<void> {
    await this.allReduceSum(data);
    if (this.worldSize > 1) for (let i = 0; i < data.length; i++) data[i] /= this.worldSize;
  }

  /** Rank `root`'s `data` on every rank (a sum where the other ranks contribute zeros). */
  async broadcast(data: Float32Array, root = 0): Promise<void> {
    if (this.rank !== root) data.fill(0);
    await this.allReduceSum(data);
  }

  close(): void {
    this.closed = true;
    this.next?.destroy();
    this.prev?.destroy();
    this.server?.close();
  }

  private send(seq: number, chunk: number, data: Float32Array, [start, end]: [number, number]): Promise<void> {
    const socket = this.next;
    if (!socket) return Promise.resolve();
    const header = Buffer.allocUnsafe(headerBytes);
    header.writeUInt32LE(magic, 0);
    header.writeUInt32LE(seq, 4);
    header.writeUInt32LE(chunk, 8);
    header.writeUInt32LE((end - start) * 4, 12);
    // The payload is a view, not a copy: resolve only when the socket has taken it, because the
    // caller overwrites this memory in a later step.
    const payload = Buffer.from(data.buffer, data.byteOffset + start * 4, (end - start) * 4);
    return new Promise((resolve, reject) => {
      socket.cork();
      socket.write(header);
      socket.write(payload, (err) => (err ? reject(new RingError(`sending to rank ${(this.rank + 1) % this.worldSize}: ${err.message}`, true)) : resolve()));
      socket.uncork();
    });
  }
}

function bytes(f: Float32Array): Uint8Array {
  return new Uint8Array(f.buffer, f.byteOffset, f.byteLength);
}

export async function connectWithRetry(path: string, rank: number, deadline: number): Promise<Socket> {
  for (;;) {
    try {
      return await new Promise<Socket>((resolve, reject) => {
        const s = createConnection(path);
        s.once('connect', () => {
          s.off('error', reject);
          resolve(s);
        });
        s.once('error', reject);
      });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if ((code !== 'ENOENT' && code !== 'ECONNREFUSED') || Date.now() > deadline) {
        throw new RingError(`cannot connect to rank ${rank} at ${path}: ${code ?? String(err)}`, true);
      }
      await new Promise((r) => setTimeout(r, 20)); // the neighbour has not started listening yet
    }
  }
}

/**
 * Averages a list of gradients over the ring in buckets of about `bucketBytes`, in place.
 * The flat buffer is reused between calls; gradients are taken last layer first, as
 * PyTorch's DDP buckets them, since those are the ones a backward pass finishes first.
 */
export class BucketedAllReduce {
  private flat = new Float32Array(0);

  constructor(private readonly ring: Ring, private readonly bucketBytes = 1 << 20) {}

  /** `extra` floats (e.g. the local loss) ride along in the last bucket and are averaged too. */
  async mean(arrays: Float32Array[], extra: Float32Array = new Float32Array(0)): Promise<void> {
    if (this.ring.worldSize === 1) return;
    const total = arrays.reduce((n, a) => n + a.length, 0) + extra.length;
    if (this.flat.length !== total) this.flat = new Float32Array(total);
    const order = [...arrays].reverse();
    let off = 0;
    for (const a of order) {
      this.flat.set(a, off);
      off += a.length;
    }
    this.flat.set(extra, off);
    const per = Math.max(1, this.bucketBytes >> 2);
    for (let start = 0; start < total; start += per) {
      await this.ring.allReduceMean(this.flat.subarray(start, Math.min(total, start + per)));
    }
    off = 0;
    for (const a of order) {
      a.set(this.flat.subarray(off, off + a.length));
      off += a.length;
    }
    extra.set(this.flat.subarray(off, off + extra.length));
  }
}

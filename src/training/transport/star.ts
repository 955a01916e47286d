/**
 * The links of a `dp` job (torch.nn.DataParallel): rank 0, the coordinator replica, talks to
 * every other rank directly; replicas never talk to each other. Rank 0 scatters slices of
 * each batch, gathers the replicas' gradients, steps once and broadcasts the new weights, so
 * all of dp's traffic and its optimizer state sit on rank 0's device — the imbalance the GPU
 * panel shows, and the reason ddp scales better.
 *
 * Same wire format as the ring: a 16-byte header (magic, sequence, tag, payload bytes) and raw
 * little-endian Float32 bytes. The tag says what a frame is.
 */
import { mkdirSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { connectWithRetry, headerBytes, magic, RingError, ringSocketPath } from './ring';

export const enum Tag {
  /** Rank 0 → replica: one slice of a batch, [labels..., features...]. */
  Batch = 1,
  /** Replica → rank 0: gradients (last layer first) and the slice's mean loss. */
  Grads = 2,
  /** Rank 0 → replica: the trainable weights after the step. */
  Weights = 3,
  /** Rank 0 → replica: training is over. */
  Stop = 4,
  /** Replica → rank 0 on connect: its rank. */
  Hello = 5,
}

export interface Frame {
  readonly tag: Tag;
  readonly data: Float32Array;
}

/** A socket carrying whole frames in both directions; payloads are copied out as Float32Arrays. */
export class FrameLink {
  private readonly queue: Buffer[] = [];
  private queued = 0;
  private waiters: { resolve: (f: Frame) => void; reject: (e: Error) => void }[] = [];
  private failure: Error | undefined;
  private seq = 0;

  constructor(private readonly socket: Socket, public peer: string) {
    socket.setNoDelay?.(true);
    socket.on('data', (d: Buffer) => {
      this.queue.push(d);
      this.queued += d.length;
      this.pump();
    });
    const lost = () => this.fail(new RingError(`${this.peer} went away (lost its connection)`, true));
    socket.on('close', lost);
    socket.on('error', (e) => this.fail(new RingError(`${this.peer}: ${e.message}`, true)));
  }

  send(tag: Tag, data: Float32Array): Promise<void> {
    const header = Buffer.allocUnsafe(headerBytes);
    header.writeUInt32LE(magic, 0);
    header.writeUInt32LE(this.seq++ >>> 0, 4);
    header.writeUInt32LE(tag, 8);
    header.writeUInt32LE(data.byteLength, 12);
    const payload = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    return new Promise((resolve, reject) => {
      this.socket.cork();
      this.socket.write(header);
      this.socket.write(payload, (err) => (err ? reject(new RingError(`sending to ${this.peer}: ${err.message}`, true)) : resolve()));
      this.socket.uncork();
    });
  }

  next(): Promise<Frame> {
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.waiters.push({ resolve, reject });
      this.pump();
    });
  }

  /** The next frame, which must carry `tag`. */
  async expect(tag: Tag): Promise<Float32Array> {
    const f = await this.next();
    if (f.tag !== tag) throw new RingError(`${this.peer} sent frame type ${f.tag} where ${tag} was expected`, false);
    return f.data;
  }

  close(): void {
    this.socket.destroy();
  }

  private fail(err: Error): void {
    if (this.failure) return;
    this.failure = err;
    for (const w of this.waiters.splice(0)) w.reject(err);
  }

  private pump(): void {
    while (this.waiters.length && this.queued >= headerBytes) {
      const header = this.read(headerBytes, false);
      const len = header.readUInt32LE(12);
      if (this.queued < headerBytes + len) return;
      if (header.readUInt32LE(0) !== magic) return this.fail(new RingError(`${this.peer} sent a frame without the header (corrupt stream)`, false));
      const tag = header.readUInt32LE(8) as Tag;
      this.read(headerBytes, true);
      const body = this.read(len, true);
      const data = new Float32Array(len / 4);
      new Uint8Array(data.buffer).set(body);
      this.waiters.shift()!.resolve({ tag, data });
    }
  }

  /** The first `n` queued bytes; `consume` removes them. */
  private read(n: number, consume: boolean): Buffer {
    const out = this.queue.length && this.queue[0].length >= n ? this.queue[0].subarray(0, n) : Buffer.concat(this.queue, Math.min(this.queued, Math.max(n, 0))).subarray(0, n);
    if (consume) {
      let left = n;
      while (left > 0) {
        const b = this.queue[0];
        if (b.length <= left) {
          left -= b.length;
          this.queue.shift();
        } else {
          this.queue[0] = b.subarray(left);
          left = 0;
        }
      }
      this.queued -= n;
    }
    return out;
  }
}

/** Rank 0's side: one link per replica, indexed by rank (index 0 unused). */
export class Star {
  private constructor(readonly rank: number, readonly worldSize: number, readonly links: (FrameLink | undefined)[], private readonly server?: Server) {}

  static async join(o: { rank: number; worldSize: number; dir: string; connectTimeoutMs?: number }): Promise<Star> {
    const timeoutMs = o.connectTimeoutMs ?? 30_000;
    if (o.worldSize === 1) return new Star(0, 1, []);
    mkdirSync(o.dir, { recursive: true });
    if (o.rank !== 0) {
      const socket = await connectWithRetry(ringSocketPath(o.dir, 0), 0, Date.now() + timeoutMs);
      const link = new FrameLink(socket, 'rank 0');
      await link.send(Tag.Hello, new Float32Array([o.rank]));
      const links: FrameLink[] = [];
      links[0] = link;
      return new Star(o.rank, o.worldSize, links);
    }
    const server = createServer();
    const links: (FrameLink | undefined)[] = new Array<FrameLink | undefined>(o.worldSize).fill(undefined);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(ringSocketPath(o.dir, 0), () => resolve());
    });
    await new Promise<void>((resolve, reject) => {
      let joined = 0;
      const timer = setTimeout(() => reject(new RingError(`only ${joined} of ${o.worldSize - 1} replicas connected within ${timeoutMs} ms`, true)), timeoutMs);
      server.on('connection', (socket) => {
        const link = new FrameLink(socket, 'a replica');
        link.expect(Tag.Hello).then((hello) => {
          const r = hello[0];
          if (!Number.isInteger(r) || r < 1 || r >= o.worldSize || links[r]) throw new RingError(`a replica said it was rank ${r}`, false);
          link.peer = `rank ${r}`;
          links[r] = link;
          if (++joined === o.worldSize - 1) {
            clearTimeout(timer);
            server.close();
            resolve();
          }
        }, reject);
      });
    });
    return new Star(0, o.worldSize, links, server);
  }

  close(): void {
    for (const l of this.links) l?.close();
    this.server?.close();
  }
}

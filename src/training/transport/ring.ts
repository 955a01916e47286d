/**
 * Ring all-reduce among worker processes, peer to peer.
 *
 * Rank r listens on `<dir>/rank-r.sock`, accepts exactly one connection (from rank r-1) and
 * connects to rank r+1. A sum all-reduce of n floats is a reduce-scatter (W-1 steps: send one
 * chunk to the next rank, add the chunk received from the previous one) followed by an
 * all-gather (W-1 steps: pass the finished chunks along), so every rank sends and receives
 * 2(W-1)/W of the buffer whatever W is, and nothing goes through a coordinator.
 *
 * Two transports for the floats themselves, both with raw little-endian Float32 bytes, never JSON:
 * - `shm` (the default): each rank owns a file in a memory-backed folder (`/dev/shm`, or `shmDir`)
 *   that only it writes and only its next rank reads. A step is one `pwrite` of
 *   the chunk into the sender's file and one `pread` of it straight into the receiver's buffer,
 *   so the bytes are copied twice (as through a shared-memory ring between threads) instead of
 *   through socket buffers, stream chunks and events. The socket carries only a 16-byte doorbell
 *   per step (magic, sequence, step, bytes). The files are unlinked as soon as both neighbours
 *   have opened them, so nothing is left behind when a process is killed. Where the folder has
 *   too little room (Docker's /dev/shm is 64 MB), a rank sends the chunk inline over the socket
 *   instead, per all-reduce (free space checked first) or per step (a write that hits ENOSPC):
 *   the receiver follows the frame it gets, doorbell or floats, so the ranks need not agree
 *   beforehand. Where there is no /dev/shm (and no `shmDir`), the ring uses the socket transport.
 * - `socket`: the chunk itself goes over the socket in pieces behind the same 16-byte header.
 *
 * In both, the sequence number and step catch a peer that got out of step, and a socket that
 * closes fails every pending operation with a `RingError` naming the rank that went away.
 */
import { closeSync, existsSync, mkdirSync, openSync, readSync, statfsSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { basename, dirname, join } from 'node:path';
import { SimdAdder } from '../backends/simdAdd';
import { mib } from '../../common/units';

export const magic = 0x52575047; // 'GPWR': a frame with its payload
const doorbellMagic = 0x44575047; // 'GPWD': the payload is in the sender's shared file
const fileMagic = 0x46575047; // 'GPWF': where this rank's shared file is (pid, fd), sent once on joining
export const headerBytes = 16;
/** Floats per frame within a socket ring step (1 MiB). */
const pieceFloats = 1 << 18;
/** Each all-reduce writes into one of two halves of the shared file, by sequence parity. */
const shmHalfBytes = 2 ** 30;

export type RingTransport = 'shm' | 'socket';

/** The ring broke: a peer closed its socket, died or sent garbage. */
export class RingError extends Error {
  constructor(message: string, readonly peerLost: boolean) {
    super(message);
    this.name = 'RingError';
  }
}

interface Waiter {
  readonly kind: number;
  readonly seq: number;
  readonly chunk: number;
  readonly bytes: number;
  /** Where a data frame's payload goes; undefined for a doorbell. */
  readonly target: Uint8Array | undefined;
  /** A doorbell is awaited, but the floats themselves (into `target`) will do too. */
  readonly orFloats: boolean;
  readonly resolve: (header: { kind: number; seq: number; chunk: number }) => void;
  readonly reject: (e: Error) => void;
}

/** Reads frames from the previous rank, copying each payload straight into the caller's buffer. */
class FrameReader {
  private readonly queue: Buffer[] = [];
  private queued = 0;
  private waiter: Waiter | undefined;
  private failure: Error | undefined;

  constructor(private readonly prevRank: number) {}

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

  get failed(): Error | undefined {
    return this.failure;
  }

  /** The payload of data frame (seq, chunk), into `target`. */
  async read(seq: number, chunk: number, target: Uint8Array): Promise<void> {
    await this.wait(magic, seq, chunk, target.byteLength, target);
  }

  /** The doorbell for (seq, chunk): `bytes` are ready in the previous rank's shared file. */
  async doorbell(seq: number, chunk: number, bytes: number): Promise<void> {
    await this.wait(doorbellMagic, seq, chunk, bytes, undefined);
  }

  /**
   * Step (seq, chunk) of a shared-buffer ring: either a doorbell (`bytes` are ready in the previous
   * rank's shared file: resolves `true`) or, where that rank's folder was full, the floats
   * themselves, copied into `target` (resolves `false`).
   */
  async doorbellOrFloats(seq: number, chunk: number, target: Uint8Array): Promise<boolean> {
    const h = await this.wait(doorbellMagic, seq, chunk, target.byteLength, target, true);
    return h.kind === doorbellMagic;
  }

  /** The previous rank's shared file: its pid and descriptor (pid 0: by name in the ring's folder). */
  async sharedFile(): Promise<{ pid: number; fd: number }> {
    const h = await this.wait(fileMagic, -1, -1, 0, undefined);
    return { pid: h.seq, fd: h.chunk };
  }

  private wait(kind: number, seq: number, chunk: number, bytes: number, target: Uint8Array | undefined, orFloats = false): Promise<{ kind: number; seq: number; chunk: number }> {
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.waiter = { kind, seq, chunk, bytes, target, orFloats, resolve, reject };
      this.pump();
    });
  }

  private pump(): void {
    const w = this.waiter;
    if (!w || this.queued < headerBytes) return;
    const header = this.peek(headerBytes);
    const kind = header.readUInt32LE(0);
    const len = header.readUInt32LE(12);
    const wire = kind === magic ? len : 0;
    if (kind !== magic && kind !== doorbellMagic && kind !== fileMagic) return this.fail(new RingError(`rank ${this.prevRank} sent a frame without the ring header (corrupt stream)`, false));
    if (this.queued < headerBytes + wire) return;
    const seq = header.readUInt32LE(4);
    const chunk = header.readUInt32LE(8);
    if (kind !== w.kind && !(w.orFloats && kind === magic)) {
      const what = (k: number) => (k === magic ? 'floats over the socket' : k === doorbellMagic ? 'a shared-buffer doorbell' : 'the shared-buffer handshake');
      return this.fail(new RingError(`ring out of step with rank ${this.prevRank}: expected ${what(w.kind)}, got ${what(kind)} (do both ranks use the same ring transport?)`, false));
    }
    if (kind !== fileMagic && (seq !== w.seq || chunk !== w.chunk || len !== w.bytes)) {
      return this.fail(new RingError(`ring out of step with rank ${this.prevRank}: expected frame ${w.seq}/${w.chunk} of ${w.bytes} bytes, got ${seq}/${chunk} of ${len}`, false));
    }
    this.consume(headerBytes, undefined);
    if (kind === magic) this.consume(len, w.target);
    this.waiter = undefined;
    w.resolve({ kind, seq, chunk });
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

/** Errors of a write that mean the folder is full, not that something is broken. */
const fullCodes = new Set(['ENOSPC', 'EDQUOT', 'EFBIG']);

/** This rank's shared file (written here, read by the next rank) and the previous rank's (read here). */
class SharedFiles {
  /** Per half of this rank's file: how far it has been written, so those pages exist already and need no more room. */
  private readonly written = [0, 0];

  constructor(readonly root: string, private readonly own: number, private readonly prev: number, private readonly unlinkOnClose: string | undefined, private readonly worldSize: number) {}

  /** Bytes free in the shared folder, or undefined where the platform cannot say. */
  free(): number | undefined {
    try {
      const s = statfsSync(this.root);
      return s.bavail * s.bsize;
    } catch {
      return undefined;
    }
  }

  /**
   * Whether writing `end` bytes into `half` fits: the pages not yet written need room in the
   * folder, and so do the other ranks', which write as much at the same moment into the same
   * folder. Undefined when it fits; else why not, for the user.
   */
  roomFor(half: number, end: number): string | undefined {
    const more = end - this.written[half];
    if (more <= 0) return undefined;
    const free = this.free();
    if (free === undefined || more * this.worldSize <= free) return undefined;
    return this.tooSmall(more * this.worldSize, free);
  }

  /** Writes `bytes` at `position` of `half`; when the folder is full, says so (then the caller sends them another way). */
  write(bytes: Uint8Array, half: number, position: number): string | undefined {
    let off = 0;
    try {
      while (off < bytes.byteLength) off += writeSync(this.own, bytes, off, bytes.byteLength - off, half * shmHalfBytes + position + off);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== undefined && fullCodes.has(code)) return `writing ${mib(bytes.byteLength)} into ${this.root} failed with ${code} (${mib(this.free() ?? 0)} free)`;
      throw new RingError(`cannot write ${bytes.byteLength} bytes into this rank's shared buffer in ${this.root}: ${(err as Error).message}. ${this.advice()}`, false);
    }
    this.written[half] = Math.max(this.written[half], position + off);
    return undefined;
  }

  read(target: Uint8Array, half: number, position: number, prevRank: number): void {
    const at = half * shmHalfBytes + position;
    for (let off = 0; off < target.byteLength;) {
      let n: number;
      try {
        n = readSync(this.prev, target, off, target.byteLength - off, at + off);
      } catch (err) {
        throw new RingError(`cannot read ${target.byteLength} bytes of rank ${prevRank}'s shared buffer in ${this.root}: ${(err as Error).message}. ${this.advice()}`, false);
      }
      if (n === 0) throw new RingError(`rank ${prevRank}'s shared buffer in ${this.root} ended early (${at + off} bytes): it rang before writing`, false);
      off += n;
    }
  }

  tooSmall(needed: number, free: number): string {
    return `${this.root} has ${mib(free)} free, the ring needs about ${mib(needed)} more there (all ranks)`;
  }

  private advice(): string {
    const free = this.free();
    return `${free === undefined ? '' : `${this.root} has ${mib(free)} free. `}Try a larger ${this.root} (in Docker: docker run --shm-size=1g) or the socket ring transport.`;
  }

  close(): void {
    for (const fd of [this.own, this.prev]) {
      try {
        closeSync(fd);
      } catch {
        // already closed
      }
    }
    if (this.unlinkOnClose) unlinkQuietly(this.unlinkOnClose);
  }
}

export interface RingOptions {
  readonly rank: number;
  readonly worldSize: number;
  /** A folder private to this job, for the sockets. */
  readonly dir: string;
  /** How long to wait for the neighbours to appear. */
  readonly connectTimeoutMs?: number;
  /** How the floats travel (default `shm`); every rank of a ring must use the same. */
  readonly transport?: RingTransport;
  /**
   * Where the `shm` transport keeps its files, by name (default: /dev/shm, unlinked at once;
   * where there is no /dev/shm and no `shmDir`, the ring uses the socket transport).
   */
  readonly shmDir?: string;
  /** Told once, the first time this rank sends floats over the socket because the shared folder is full (for the job's log). */
  readonly onFallback?: (message: string) => void;
}

export function ringSocketPath(dir: string, rank: number): string {
  return join(dir, `rank-${rank}.sock`);
}

function sharedFilePath(root: string, dir: string, rank: number): string {
  return join(root, `gw-ring-${basename(dir)}-rank-${rank}.buf`);
}

export class Ring {
  private seq = 0;
  private closed = false;
  private scratch = new Float32Array(0);
  /** The reduce-scatter's add in WebAssembly SIMD, where there is SIMD (else the JS loop). */
  private readonly adder = SimdAdder.create();

  private constructor(
    readonly rank: number,
    readonly worldSize: number,
    private readonly server: Server | undefined,
    private readonly next: Socket | undefined,
    private readonly prev: Socket | undefined,
    private readonly reader: FrameReader,
    private readonly shared: SharedFiles | undefined,
    private readonly onFallback: ((message: string) => void) | undefined,
  ) {}

  /** Why this rank last sent floats over the socket instead of its shared buffer, if it ever did. */
  fallback: string | undefined;

  /** `shm (/dev/shm)`, `socket`, or `none` for a world of one. */
  get transport(): string {
    if (this.worldSize === 1) return 'none';
    return this.shared ? `shm (${this.shared.root})` : 'socket';
  }

  /** Joins the ring; resolves once this rank is connected to both neighbours. */
  static async join(o: RingOptions): Promise<Ring> {
    const prevRank = (o.rank - 1 + o.worldSize) % o.worldSize;
    const nextRank = (o.rank + 1) % o.worldSize;
    const reader = new FrameReader(prevRank);
    if (o.worldSize === 1) return new Ring(0, 1, undefined, undefined, undefined, reader, undefined, undefined);
    mkdirSync(o.dir, { recursive: true });
    const timeoutMs = o.connectTimeoutMs ?? 30_000;
    // Every rank of a ring runs on this machine and sees the same folders, so all decide alike.
    const useShm = (o.transport ?? 'shm') === 'shm' && (o.shmDir !== undefined || isDir('/dev/shm'));
    let own: { fd: number; path: string; byProc: boolean } | undefined;
    let prevFd: number | undefined;
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
    let prev: Socket | undefined;
    try {
      if (useShm) own = createSharedFile(o);
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(ringSocketPath(o.dir, o.rank), () => resolve());
      });
      next = await connectWithRetry(ringSocketPath(o.dir, nextRank), nextRank, Date.now() + timeoutMs);
      next.setNoDelay?.(true);
      if (own) next.write(frameHeader(fileMagic, own.byProc ? process.pid : 0, own.byProc ? own.fd : 0, 0));
      prev = await accepted;
      prev.on('data', (d: Buffer) => reader.push(d));
      if (useShm) {
        let handshakeTimer: NodeJS.Timeout | undefined;
        const given = new Promise<never>((_, reject) => {
          prev!.once('close', () => reject(new RingError(`rank ${prevRank} went away while joining the ring`, true)));
          handshakeTimer = setTimeout(() => reject(new RingError(`rank ${prevRank} did not say where its shared buffer is within ${timeoutMs} ms (do both ranks use the same ring transport?)`, false)), timeoutMs);
        });
        given.catch(() => undefined);
        const where = await Promise.race([reader.sharedFile(), given]).finally(() => clearTimeout(handshakeTimer));
        const path = where.pid ? `/proc/${where.pid}/fd/${where.fd}` : sharedFilePath(o.shmDir ?? '/dev/shm', o.dir, prevRank);
        try {
          prevFd = openSync(path, 'r');
        } catch (err) {
          throw new RingError(`cannot open rank ${prevRank}'s shared buffer ${path}: ${(err as Error).message}`, false);
        }
      }
    } catch (err) {
      clearTimeout(timer);
      server.close();
      next?.destroy();
      prev?.destroy();
      if (prevFd !== undefined) closeSync(prevFd);
      if (own) {
        closeSync(own.fd);
        if (!own.byProc) unlinkQuietly(own.path);
      }
      throw err;
    }
    const lost = (what: string) => () => reader.fail(new RingError(`rank ${prevRank} ${what} (lost its ring connection)`, true));
    prev.on('end', lost('closed its socket'));
    prev.on('close', lost('went away'));
    prev.on('error', (e) => reader.fail(new RingError(`rank ${prevRank}: ${e.message}`, true)));
    // What this rank waits for comes from the previous rank; the next one going away matters
    // only if the previous one stays: a moment's grace lets frames already sent by the previous
    // rank (a neighbour that finished its last all-reduce and closed) arrive first.
    const nextLost = (e: RingError) => setTimeout(() => reader.fail(e), 100).unref();
    next.on('error', (e) => nextLost(new RingError(`rank ${nextRank}: ${e.message}`, true)));
    next.on('close', () => nextLost(new RingError(`rank ${nextRank} went away (lost its ring connection)`, true)));
    const shared = own && prevFd !== undefined ? new SharedFiles(dirname(own.path), own.fd, prevFd, own.byProc ? undefined : own.path, o.worldSize) : undefined;
    return new Ring(o.rank, o.worldSize, server, next, prev, reader, shared, o.onFallback);
  }

  /** Sums `data` over all ranks, in place. Every rank must call it with the same length, in the same order. */
  allReduceSum(data: Float32Array): Promise<void> {
    return this.allReduce(data, 1);
  }

  /** Averages `data` over all ranks, in place: each rank scales the chunk it owns after the reduce-scatter, so every rank ends with the same bits. */
  allReduceMean(data: Float32Array): Promise<void> {
    return this.allReduce(data, 1 / this.worldSize);
  }

  private async allReduce(data: Float32Array, scale: number): Promise<void> {
    const w = this.worldSize;
    if (w === 1 || data.length === 0) return;
    if (this.closed) throw new RingError('the ring is closed', false);
    if (this.reader.failed) throw this.reader.failed;
    if (this.shared) {
      // One all-reduce's steps must fit in half of the shared file: 2(W-1) chunks of ⌈n/W⌉ floats.
      const most = w * (Math.floor(shmHalfBytes / (8 * (w - 1))) - 1);
      for (let start = 0; start < data.length; start += most) await this.allReduceShm(data.subarray(start, Math.min(data.length, start + most)), scale);
      return;
    }
    await this.allReduceSocket(data, scale);
  }

  /** Reduce-scatter then all-gather through the shared files: one pwrite, one doorbell, one pread per step. */
  private async allReduceShm(data: Float32Array, scale: number): Promise<void> {
    const w = this.worldSize;
    const r = this.rank;
    const shared = this.shared!;
    const seq = this.seq++ >>> 0;
    const n = data.length;
    const bounds = (c: number): [number, number] => [Math.floor((c * n) / w), Math.floor(((c + 1) * n) / w)];
    const slotBytes = 4 * Math.ceil(n / w);
    // Rank r rewrites a half only two all-reduces later; by then the next rank has finished
    // reading it, since rank r cannot finish an all-reduce before its next rank has finished
    // the reduce-scatter of it (the ring's steps depend on each other all the way round).
    const half = seq & 1;
    if (this.scratch.length < slotBytes / 4) this.scratch = new Float32Array(slotBytes / 4);
    const prevRank = (r - 1 + w) % w;
    // Where the shared folder has too little room for this all-reduce, its chunks go over the
    // socket instead; the next rank sees floats where it expected a doorbell and reads them.
    let full = shared.roomFor(half, 2 * (w - 1) * slotBytes);
    for (let s = 0; s < 2 * (w - 1); s++) {
      const gather = s >= w - 1;
      const k = gather ? s - (w - 1) : s;
      const sendC = gather ? (r + 1 - k + w) % w : (r - k + w) % w;
      const recvC = gather ? (r - k + w) % w : (r - k - 1 + w) % w;
      const [ss, se] = bounds(sendC);
      const pos = s * slotBytes;
      const out = bytes(data.subarray(ss, se));
      if (full === undefined) full = shared.write(out, half, pos);
      if (full === undefined) {
        this.next!.write(frameHeader(doorbellMagic, seq, s, out.byteLength));
      } else {
        this.fellBack(full);
        // A copy: this chunk of `data` is overwritten later in this all-reduce, maybe before the socket has sent it.
        this.next!.write(Buffer.concat([frameHeader(magic, seq, s, out.byteLength), out]));
      }
      const [rs, re] = bounds(recvC);
      const target = bytes(gather ? data.subarray(rs, re) : this.adder ? this.adder.incoming(re - rs) : this.scratch.subarray(0, re - rs));
      if (await this.reader.doorbellOrFloats(seq, s, target)) shared.read(target, half, pos, prevRank);
      if (gather) continue; // read in place
      if (this.adder) {
        this.adder.addInto(data.subarray(rs, re), s === w - 2 ? scale : 1);
      } else {
        const incoming = this.scratch.subarray(0, re - rs);
        const dst = data.subarray(rs, re);
        if (scale !== 1 && s === w - 2) for (let i = 0; i < incoming.length; i++) dst[i] = (dst[i] + incoming[i]) * scale;
        else for (let i = 0; i < incoming.length; i++) dst[i] += incoming[i];
      }
    }
  }

  private fellBack(why: string): void {
    if (this.fallback === undefined) this.onFallback?.(`ring rank ${this.rank}: ${why}; sending gradients over the Unix socket instead (slower). For the shared-memory transport, give it more room (in Docker: docker run --shm-size=1g).`);
    this.fallback = why;
  }

  private async allReduceSocket(data: Float32Array, scale: number): Promise<void> {
    const w = this.worldSize;
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
        const last = scale !== 1 && s === w - 2;
        return [bytes(incoming), () => {
          const dst = data.subarray(rs + off, rs + off + len);
          if (last) for (let i = 0; i < len; i++) dst[i] = (dst[i] + incoming[i]) * scale;
          else for (let i = 0; i < len; i++) dst[i] += incoming[i];
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
   * One socket ring step, pipelined: the chunk goes out in pieces, and each piece received is
   * reduced while the next one is still on the wire, so copying, adding and the socket overlap.
   */
  private async step(seq: number, sendC: number, data: Float32Array, [ss, se]: [number, number], recvC: number, recvLen: number, into: (off: number, len: number) => [Uint8Array, (() => void) | undefined]): Promise<void> {
    // Writes on one socket complete in order: the last one's callback covers them all.
    let written: Promise<void> = Promise.resolve();
    for (let off = ss, p = 0; off < se || (p === 0 && ss === se); off += pieceFloats, p++) {
      const end = Math.min(se, off + pieceFloats);
      written = this.send(seq, (sendC << 16) | p, data, [off, end], end >= se);
      if (ss === se) break;
    }
    written.catch(() => undefined); // awaited below; a write that fails while we read must not count as unhandled
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
      await written.catch(() => undefined);
    }
    await written;
  }

  /** Rank `root`'s `data` on every rank (a sum where the other ranks contribute zeros). */
  async broadcast(data: Float32Array, root = 0): Promise<void> {
    if (this.rank !== root) data.fill(0);
    await this.allReduceSum(data);
  }

  close(): void {
    this.closed = true;
    this.reader.fail(new RingError('the ring is closed', false));
    this.next?.end(); // after the doorbells still queued: the next rank may be waiting for the last one
    this.next?.unref();
    this.prev?.destroy();
    this.server?.close();
    this.shared?.close();
  }

  /** Writes one socket piece; only the last piece of a step asks to hear when the socket took it. */
  private send(seq: number, chunk: number, data: Float32Array, [start, end]: [number, number], last: boolean): Promise<void> {
    const socket = this.next;
    if (!socket) return Promise.resolve();
    const header = frameHeader(magic, seq, chunk, (end - start) * 4);
    // The payload is a view, not a copy: the step waits until the socket has taken it, because
    // the caller overwrites this memory in a later step.
    const payload = Buffer.from(data.buffer, data.byteOffset + start * 4, (end - start) * 4);
    socket.cork();
    socket.write(header);
    const done = last
      ? new Promise<void>((resolve, reject) => {
        socket.write(payload, (err) => (err ? reject(new RingError(`sending to rank ${(this.rank + 1) % this.worldSize}: ${err.message}`, true)) : resolve()));
      })
      : (socket.write(payload), Promise.resolve());
    socket.uncork();
    return done;
  }
}

function frameHeader(kind: number, seq: number, chunk: number, len: number): Buffer {
  const h = Buffer.allocUnsafe(headerBytes);
  h.writeUInt32LE(kind, 0);
  h.writeUInt32LE(seq, 4);
  h.writeUInt32LE(chunk, 8);
  h.writeUInt32LE(len, 12);
  return h;
}

/**
 * This rank's shared file. On Linux it lives in /dev/shm and is unlinked at once: the next rank
 * opens it through /proc/<pid>/fd/<fd>, so a process killed at any moment leaves nothing behind.
 * Elsewhere (no /proc, or a `shmDir`) it is a file in /dev/shm or `shmDir`, opened by name and removed on close.
 */
function createSharedFile(o: RingOptions): { fd: number; path: string; byProc: boolean } {
  const byProc = o.shmDir === undefined && process.platform === 'linux' && existsSync(`/proc/${process.pid}/fd`) && isDir('/dev/shm');
  const path = byProc ? join('/dev/shm', `gw-ring-${process.pid}-${o.rank}-${randomBytes(6).toString('hex')}`) : sharedFilePath(o.shmDir ?? '/dev/shm', o.dir, o.rank);
  let fd: number;
  try {
    fd = openSync(path, 'w+', 0o600);
  } catch (err) {
    throw new RingError(`cannot create the ring's shared buffer ${path}: ${(err as Error).message}`, false);
  }
  if (byProc) unlinkSync(path);
  return { fd, path, byProc };
}

function isDir(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // gone already
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
 * TF.js hands over every gradient at once (there is no backward hook to start a bucket
 * early), so the default bucket is PyTorch's default cap, 25 MB: one all-reduce for
 * models of that size, since each bucket costs a round of doorbells.
 */
export class BucketedAllReduce {
  private flat = new Float32Array(0);

  /** Floats in a bucket of the default size. */
  static readonly defaultBucketFloats = (25 << 20) >> 2;

  constructor(private readonly ring: Ring, private readonly bucketBytes = 25 << 20) {}

  /** Floats in one bucket: `meanFlat` reduces the buffer in slices of this many. */
  get bucketFloats(): number {
    return Math.max(1, this.bucketBytes >> 2);
  }

  /** `extra` floats (e.g. the local loss) ride along in the last bucket and are averaged too. */
  async mean(arrays: Float32Array[], extra: Float32Array = new Float32Array(0)): Promise<void> {
    if (this.ring.worldSize === 1) return;
    const total = arrays.reduce((n, a) => n + a.length, 0) + extra.length;
    if (this.flat.length !== total) this.flat = new Float32Array(total);
    let off = 0;
    for (let i = arrays.length - 1; i >= 0; i--) {
      this.flat.set(arrays[i], off);
      off += arrays[i].length;
    }
    this.flat.set(extra, off);
    await this.meanFlat(this.flat);
    off = 0;
    for (let i = arrays.length - 1; i >= 0; i--) {
      arrays[i].set(this.flat.subarray(off, off + arrays[i].length));
      off += arrays[i].length;
    }
    extra.set(this.flat.subarray(off, off + extra.length));
  }

  /** Averages a buffer the caller already laid out (see strategies/gradients.ts GradientBuffer), in place, bucket by bucket. */
  async meanFlat(flat: Float32Array): Promise<void> {
    const per = this.bucketFloats;
    for (let start = 0; start < flat.length; start += per) await this.ring.allReduceMean(flat.subarray(start, Math.min(flat.length, start + per)));
  }
}

/**
 * The extension's end of the companion's channel (see src/common/companionProtocol.ts): a Unix
 * socket in a private temporary folder, one connection per process of the job, one JSON message
 * per line. And where the companion's Python package is: `python/` next to the bundle (dist/python
 * in the .vsix) or at the repository's root (tests, out/).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { companionChannelEnv, maxCompanionLineBytes, parseCompanionLine, type CompanionMessage } from '../../common/companionProtocol';

export class CompanionMissingError extends Error {}

/**
 * The folder to put on PYTHONPATH for `python -m gpu_workbench.run`: the first `python/` holding
 * gpu_workbench/__init__.py at or above `from` (dist/python in the bundle, python/ in the repository).
 */
export function companionPythonPath(from: string = __dirname): string {
  for (let dir = from; ; dir = dirname(dir)) {
    const candidate = join(dir, 'python');
    if (existsSync(join(candidate, 'gpu_workbench', '__init__.py'))) return candidate;
    if (dirname(dir) === dir) throw new CompanionMissingError(`the Python companion (python/gpu_workbench) is not at or above ${from}: build the extension with npm run build`);
  }
}

export interface CompanionChannel {
  /** What the job's processes need in their environment to connect (GPU_WORKBENCH_CHANNEL). */
  readonly env: Readonly<Record<string, string>>;
  /** Stops listening once every connection made so far has ended (at most `graceMs`), then removes the socket. */
  close(graceMs?: number): Promise<void>;
}

export interface ChannelHandlers {
  readonly onMessage: (m: CompanionMessage) => void;
  /** A line that is no message: why, and its first characters. */
  readonly onBadLine: (error: string, line: string) => void;
}

/**
 * Listens on a fresh Unix socket. The socket exists when this returns (Node binds a path
 * synchronously), so the job may start at once.
 */
export function openCompanionChannel(handlers: ChannelHandlers): CompanionChannel {
  const dir = mkdtempSync(join(tmpdir(), 'gw-ch-'));
  const path = join(dir, 'c.sock');
  const open = new Set<Promise<void>>();
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    let partial = '';
    let skipping = false;
    const take = (line: string) => {
      if (!line.trim()) return;
      const parsed = parseCompanionLine(line);
      if (parsed.ok) handlers.onMessage(parsed.message);
      else handlers.onBadLine(parsed.error, line.slice(0, 120));
    };
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      const lines = (partial + chunk).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        if (skipping) skipping = false; // the rest of an overlong line
        else if (Buffer.byteLength(line) > maxCompanionLineBytes) handlers.onBadLine(`a line longer than ${maxCompanionLineBytes} bytes`, line.slice(0, 120));
        else take(line);
      }
      if (Buffer.byteLength(partial) > maxCompanionLineBytes) {
        if (!skipping) handlers.onBadLine(`a line longer than ${maxCompanionLineBytes} bytes`, partial.slice(0, 120));
        skipping = true;
        partial = '';
      }
    });
    open.add(new Promise<void>((ended) => {
      socket.on('close', () => {
        // What came without its newline was cut off when the process died: a torn line.
        if (partial && !skipping) take(partial);
        partial = '';
        sockets.delete(socket);
        ended();
      });
    }));
    socket.on('error', () => { /* the process died mid-write: 'close' follows */ });
  });
  server.on('error', (err) => handlers.onBadLine(`the channel failed: ${err.message}`, ''));
  server.listen(path);
  let closing: Promise<void> | undefined;
  return {
    env: { [companionChannelEnv]: `unix:${path}` },
    close: (graceMs = 2000) => {
      closing ??= (async () => {
        const ended = Promise.all([...open]);
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([ended, new Promise<void>((r) => { timer = setTimeout(r, graceMs); })]);
        clearTimeout(timer);
        for (const s of sockets) s.destroy();
        await new Promise<void>((r) => server.close(() => r()));
        rmSync(dir, { recursive: true, force: true });
      })();
      return closing;
    },
  };
}

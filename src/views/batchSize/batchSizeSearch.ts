/**
 * The parts of "Find Max Batch Size" that need no `vscode`, unit-tested in Node: the search in
 * a child process (`cli.js train JOB --find-batch-size --json`, read line by line, stopped
 * on cancel) and the words of its result. `batchSize.ts` turns them into VS Code calls.
 */
import { fork } from 'node:child_process';
import { dirname } from 'node:path';
import { dataBoundText, measuredOn, memoryIsNotTheLimit, perWhat, settingText, suggestionCaveat, type FindBatchSizeEvent, type FindBatchSizeResult } from '../../training/launchers/findBatchSize';

/** How long the search gets to stop its trial after a cancel before it is killed. */
const cancelGraceMs = 5000;

export interface SearchEnding {
  readonly result?: FindBatchSizeResult;
  /** The CLI refused the job (`batch/failed`), or the process could not start. */
  readonly failed?: { readonly reason: string; readonly hint?: string };
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  /** The end of its stderr, for a process that died without a result. */
  readonly stderr: string;
}

/** A cancellation source, as VS Code's `CancellationToken` has it. */
export interface Cancellation {
  onCancellationRequested(listener: () => void): { dispose(): void };
}

export interface SearchProcess {
  readonly ended: Promise<SearchEnding>;
  readonly pid: number | undefined;
  /**
   * Stops the search as a cancel does: SIGTERM (the CLI cancels the trial under way, which
   * ends its workers), SIGKILL if it is still there after a grace period. For the extension's
   * disposal; a no-op once it has ended.
   */
  stop(): void;
}

/** Runs the CLI's search in a child process; `onEvent` sees its events, `onLine` every other line it prints. */
export function startSearch(cli: string, file: string, o: { onEvent: (e: FindBatchSizeEvent) => void; onLine?: (line: string) => void; cancel?: Cancellation; execArgv?: string[]; args?: readonly string[] }): SearchProcess {
  // The IPC channel ties the search to this process: if it goes away without stopping it (the
  // extension host killed), the CLI sees the channel disconnect and cancels the search.
  const child = fork(cli, ['train', file, '--find-batch-size', '--json', ...(o.args ?? [])], { cwd: dirname(file), stdio: ['ignore', 'pipe', 'pipe', 'ipc'], execArgv: o.execArgv ?? [] });
  const running = () => child.exitCode === null && child.signalCode === null;
  function stop(): void {
    if (!running()) return;
    child.kill('SIGTERM'); // the CLI cancels the trial under way, which ends its workers
    setTimeout(() => { if (running()) child.kill('SIGKILL'); }, cancelGraceMs).unref();
  }
  const ended = new Promise<SearchEnding>((resolve) => {
    let result: FindBatchSizeResult | undefined;
    let failed: SearchEnding['failed'];
    let stderr = '';
    let pending = '';
    child.stdout?.on('data', (d: Buffer) => {
      pending += d.toString();
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) {
        if (!line.trim()) continue;
        let e: FindBatchSizeEvent | { type: 'batch/failed'; reason: string; hint?: string };
        try {
          e = JSON.parse(line) as typeof e;
        } catch {
          o.onLine?.(line);
          continue;
        }
        if (e.type === 'batch/failed') failed = { reason: e.reason, ...(e.hint ? { hint: e.hint } : {}) };
        else {
          if (e.type === 'batch/done') result = e.result;
          o.onEvent(e);
        }
      }
    });
    child.stderr?.on('data', (d: Buffer) => { stderr = (stderr + d.toString()).slice(-4000); });
    const cancel = o.cancel?.onCancellationRequested(stop);
    child.on('error', (err) => {
      cancel?.dispose();
      resolve({ failed: { reason: `the search process could not be started (${err.message}). Is the extension built (dist/cli.js)?` }, code: null, signal: null, stderr });
    });
    child.on('exit', (code, signal) => {
      cancel?.dispose();
      resolve({ ...(result ? { result } : {}), ...(failed ? { failed } : {}), code, signal, stderr });
    });
  });
  return { ended, pid: child.pid, stop };
}

/** What to tell the user at the end: the message, whether it is an error, and the batchSize to offer. */
export interface SearchMessage {
  readonly text: string;
  readonly error: boolean;
  readonly offer?: number;
  /** A torchrun job's button that writes it: `Set --batch-size 128`, `Set BATCH_SIZE=128` (a TF.js job's is `Set "batchSize": 128`). */
  readonly offerLabel?: string;
}

function offer(r: FindBatchSizeResult): Pick<SearchMessage, 'offer' | 'offerLabel'> {
  if (r.suggestedBatchSize === undefined) return {};
  return { offer: r.suggestedBatchSize, ...(r.torchrun ? { offerLabel: `Set ${settingText(r, r.suggestedBatchSize)}` } : {}) };
}

export function searchMessage(ending: SearchEnding): SearchMessage {
  const r = ending.result;
  if (!r) {
    const why = ending.failed ? `${ending.failed.reason}${ending.failed.hint ? ` ${ending.failed.hint}` : ''}` : `the search process ${ending.signal ? `was killed by ${ending.signal}` : `exited with code ${ending.code}`}${ending.stderr.trim() ? `: ${ending.stderr.trim().split('\n').slice(-2).join(' | ')}` : ''}`;
    return { text: `Find Max Batch Size failed: ${why}`, error: true };
  }
  const d = r.devices;
  // Where the trials really ran: "CPU (wasm)" on a machine whose GPUs no backend could use.
  const where = d.map(measuredOn).join(', ');
  if (d.some((x) => x.limit === 'cancelled')) return { text: `Find Max Batch Size for ${r.job} was cancelled${r.perDevice > 0 ? `; a batch of ${r.perDevice} fits so far` : ''}.`, error: false };
  const failed = d.find((x) => x.limit === 'error');
  if (failed) return { text: `Find Max Batch Size for ${r.job} stopped: a trial failed for another reason than memory: ${failed.error?.reason ?? 'unknown'}${failed.error?.hint ? ` ${failed.error.hint}` : ''}`, error: true };
  if (r.perDevice === 0) return { text: `Not even a batch of 1 fits on ${where} for ${r.job}: the model alone is too large.`, error: true };
  if (memoryIsNotTheLimit(r)) {
    const most = r.trainSamples !== undefined ? `; no batchSize above ${r.trainSamples.toLocaleString('en-US')} (the training set) trains on more examples` : '';
    return { text: `Memory is not the limit here: for ${r.job}, a batch of ${r.perDevice.toLocaleString('en-US')} per device (${dataBoundText(r)}) fits, measured on ${where}${most}. Nothing to change.`, error: false };
  }
  const global = r.suggestedBatchSize !== undefined && r.strategy !== 'single' ? ` For ${r.strategy} on ${r.jobDevices} devices that is "batchSize": ${r.suggestedBatchSize}.` : '';
  const limited = r.torchrun?.memoryLimitBytes !== undefined ? ` (each process limited to ${Math.round(r.torchrun.memoryLimitBytes / 2 ** 20).toLocaleString('en-US')} MiB)` : '';
  const none = r.suggestedBatchSize === undefined ? ` The job's ${r.strategy} strategy cannot take it (a batch must hold whole micro-batches).` : '';
  const caveat = suggestionCaveat(r);
  // Stopped by --max-batch-size with every trial fitting: the largest tried, not the largest that fits.
  if (d.every((x) => x.limit === 'max')) return { text: `A batch of ${perWhat(r, r.perDevice)} fits for ${r.job}, measured on ${where}${limited}: the search reached --max-batch-size ${r.maxBatchSize ?? r.perDevice}, so larger batches were not tried.${global}${none}${caveat ? ` ${caveat}` : ''}`, error: false, ...offer(r) };
  return { text: `Largest batch that fits for ${r.job}: ${perWhat(r, r.perDevice)}, measured on ${where}${limited}.${global}${none}${caveat ? ` ${caveat}` : ''}`, error: false, ...offer(r) };
}

/**
 * The pseudoterminals of trial tasks, without the `vscode` module (VS Code takes them by shape),
 * so that their life cycle can be tested on its own: a trial's terminal, and what VS Code's
 * "Rerun Task" on an ended trial gets (the CustomExecution callback runs again for a rerun).
 */

interface Disposable { dispose(): unknown }

/**
 * Whether a trial's terminal closes once its task has ended: yes unless the trial failed. Its
 * whole output stays in its log file (linked from its row of the Tuning Results table), so an
 * experiment leaves open only the terminals worth reading, instead of one per trial.
 */
export function closesWhenEnded(status: 'pending' | 'running' | 'done' | 'stopped' | 'failed' | 'interrupted'): boolean {
  return status !== 'failed' && status !== 'running' && status !== 'pending';
}

/** A `vscode.EventEmitter` by shape: `event` is a `vscode.Event`. */
class Emitter<T> {
  private readonly listeners = new Set<(e: T) => unknown>();

  readonly event = (listener: (e: T) => unknown, thisArgs?: unknown, disposables?: Disposable[]): Disposable => {
    const l = (e: T): unknown => listener.call(thisArgs, e);
    this.listeners.add(l);
    const d = { dispose: (): void => { this.listeners.delete(l); } };
    disposables?.push(d);
    return d;
  };

  fire(e: T): void {
    for (const l of [...this.listeners]) l(e);
  }
}

/**
 * A trial's terminal: the trial's own output, written as it comes (buffered until VS Code opens
 * the terminal), then the reason it ended; closing it (or Terminate Task, or Ctrl-C in it) stops the trial.
 */
export class TrialTerminal {
  private readonly writeEmitter = new Emitter<string>();
  private readonly closeEmitter = new Emitter<number>();
  readonly onDidWrite = this.writeEmitter.event;
  readonly onDidClose = this.closeEmitter.event;
  private opened = false;
  private closed = false;
  private pending: string[] = [];
  private exitCode: number | undefined;

  constructor(private readonly header: string, private readonly onTerminate: () => void) {}

  open(): void {
    this.opened = true;
    this.writeEmitter.fire(`\x1b[2m${this.header}\x1b[0m\r\n`);
    for (const text of this.pending.splice(0)) this.writeEmitter.fire(text);
    if (this.exitCode !== undefined) this.fireClose();
  }

  /** The user closed the terminal or terminated the task. */
  close(): void {
    if (this.exitCode === undefined) this.onTerminate();
    this.closed = true;
  }

  handleInput(data: string): void {
    if (data === '\x03' && this.exitCode === undefined) this.onTerminate();
  }

  write(text: string): void {
    if (this.closed) return;
    const t = text.replace(/\r?\n/g, '\r\n');
    if (this.opened) this.writeEmitter.fire(t);
    else this.pending.push(t);
  }

  /** The trial ended: say why, and end the task with this exit code. */
  end(code: number, message: string): void {
    if (this.exitCode !== undefined) return;
    this.write(`\r\n${message}\r\n`);
    this.exitCode = code;
    if (this.opened) this.fireClose();
  }

  private fireClose(): void {
    if (this.closed) return;
    this.closed = true;
    this.closeEmitter.fire(this.exitCode ?? 0);
  }
}

/** A terminal that prints one message and closes at once: the task it belongs to ends. */
export class NoticeTerminal {
  private readonly writeEmitter = new Emitter<string>();
  private readonly closeEmitter = new Emitter<number>();
  readonly onDidWrite = this.writeEmitter.event;
  readonly onDidClose = this.closeEmitter.event;

  constructor(private readonly message: string, private readonly code = 0) {}

  open(): void {
    this.writeEmitter.fire(`\r\n${this.message.replace(/\r?\n/g, '\r\n')}\r\n`);
    this.closeEmitter.fire(this.code);
  }

  close(): void {
    // Nothing runs.
  }
}

/**
 * The callback of a trial task's CustomExecution. The first call gets the trial's terminal. VS
 * Code calls it again for "Rerun Task" on that task: the trial ran as part of its experiment (its
 * slot, its GPUs, its journal), so it is not started on its own; the rerun gets a terminal that
 * says so (`refusal()`, read at that time) and closes, so that the rerun task ends rather than
 * waiting on a terminal that has closed already (which left it spinning, and the next Rerun
 * refused as "already active").
 */
export function trialExecution(terminal: TrialTerminal, refusal: () => string): () => Promise<TrialTerminal | NoticeTerminal> {
  let used = false;
  return () => {
    if (used) return Promise.resolve(new NoticeTerminal(refusal()));
    used = true;
    return Promise.resolve(terminal);
  };
}

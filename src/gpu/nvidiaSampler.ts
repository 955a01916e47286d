/**
 * Live NVIDIA readings from ONE long-lived `nvidia-smi --query-gpu=... -lms <interval>` child
 * (spawned without a shell), parsed line by line as it prints, plus the compute processes from
 * `--query-compute-apps` every 2 s. The child is restarted with exponential backoff when it exits;
 * a tool that stays silent for three intervals is reported stale, and nothing here ever waits on
 * it synchronously.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import {
  SampleAssembler, computeAppsArgs, detectToolError, gpuQueryArgs, gpuQueryFields, joinProcesses,
  parseComputeApps, parseHelpQueryGpu, type ComputeApp, type GpuRow,
} from './nvidiaSmi';
import type { GpuDevice, GpuSnapshot } from './types';

export interface NvidiaSamplerOptions {
  readonly path: string;
  readonly intervalMs: number;
  readonly env?: NodeJS.ProcessEnv;
  /** How often the compute processes are read (default 2000 ms). */
  readonly processIntervalMs?: number;
  readonly onSnapshot: (snapshot: GpuSnapshot) => void;
  /** The tool is not there (ENOENT): the caller may look for another source. */
  readonly onMissing?: (reason: string) => void;
  /** The field probe; the monitor passes one that remembers its answer (probe once). */
  readonly probe?: () => Promise<ProbeResult>;
}

/** The longest wait between restarts of a tool that keeps exiting. */
const maxBackoffMs = 30_000;
/** Extra time the first sample of a freshly started tool may take. */
const startupGraceMs = 1000;
/** Samples a child must deliver before its restart counter is forgiven. */
const healthySamples = 3;

export function missingToolMessage(path: string): string {
  return path.includes('/') || path.includes('\\') ? `nvidia-smi not found at ${path}` : `${path} not found on PATH`;
}

interface ErrnoLike { code?: unknown; message?: unknown }
function errnoCode(err: unknown): string | undefined {
  const c = (err as ErrnoLike | null)?.code;
  return typeof c === 'string' ? c : undefined;
}

export type ProbeResult = readonly string[] | 'missing';

/**
 * The engine's query fields this driver knows, from `--help-query-gpu`. Unknown ones are dropped
 * (their values read null). A tool whose help cannot be read keeps the full list; a field it
 * then rejects is dropped when the query fails (see `NvidiaSmiSampler`).
 */
export function probeFields(path: string, env: NodeJS.ProcessEnv | undefined, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    execFile(path, ['--help-query-gpu'], { env, timeout: timeoutMs, killSignal: 'SIGKILL', windowsHide: true, maxBuffer: 4 << 20 }, (err, stdout) => {
      if (err && errnoCode(err) === 'ENOENT') return resolve('missing');
      const known = parseHelpQueryGpu(String(stdout ?? ''));
      if (known.size === 0 || !known.has('index')) return resolve([...gpuQueryFields]);
      resolve(gpuQueryFields.filter((f) => known.has(f)));
    });
  });
}

export class NvidiaSmiSampler {
  private generation = 0;
  private child: ChildProcess | null = null;
  private appsChild: ChildProcess | null = null;
  private fields: string[] = [...gpuQueryFields];
  private assembler: SampleAssembler;
  private startupGraceMs = startupGraceMs;
  private watchdog: NodeJS.Timeout | null = null;
  private appsTimer: NodeJS.Timeout | null = null;
  private flushTimer: NodeJS.Timeout | null = null;
  private restartTimer: NodeJS.Timeout | null = null;
  private attempts = 0;
  private lastSampleAt = 0;
  private staleReported = false;
  private latestDevices: readonly GpuDevice[] = [];
  private latest: GpuSnapshot | null = null;
  private apps: readonly ComputeApp[] = [];
  private appsRead = false;
  private appsWaiters: Array<() => void> = [];
  private running = false;

  constructor(private readonly opts: NvidiaSamplerOptions) {
    this.assembler = new SampleAssembler(this.fields, opts.intervalMs / 2);
  }

  get isRunning(): boolean {
    return this.running;
  }

  /** Field names this driver was found to reject (their values read null). */
  get droppedFields(): string[] {
    return gpuQueryFields.filter((f) => !this.fields.includes(f));
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    const gen = ++this.generation;
    this.lastSampleAt = Date.now();
    this.staleReported = false;
    this.attempts = 0;
    const interval = this.opts.intervalMs;
    this.watchdog = setInterval(() => this.checkStale(), Math.max(10, interval));
    const probe = this.opts.probe ?? (() => probeFields(this.opts.path, this.opts.env, Math.max(3000, 3 * interval)));
    void probe().then((fields) => {
      if (gen !== this.generation) return;
      if (fields === 'missing') {
        this.running = false;
        this.clearTimers();
        const reason = missingToolMessage(this.opts.path);
        this.opts.onMissing?.(reason);
        return;
      }
      this.fields = [...fields];
      this.assembler.setFields(this.fields);
      this.spawnQuery(gen);
      this.pollApps(gen);
      this.appsTimer = setInterval(() => this.pollApps(gen), this.opts.processIntervalMs ?? 2000);
    });
  }

  stop(): void {
    this.generation++;
    this.running = false;
    this.clearTimers();
    killChild(this.child);
    killChild(this.appsChild);
    this.child = null;
    this.appsChild = null;
    for (const w of this.appsWaiters.splice(0)) w();
  }

  /** The compute processes as last read (joined to devices by the caller). */
  get processes(): readonly ComputeApp[] {
    return this.apps;
  }

  /** Resolves once the compute processes have been read once (or the sampler stopped). */
  processesRead(): Promise<void> {
    if (this.appsRead || !this.running) return Promise.resolve();
    return new Promise((resolve) => this.appsWaiters.push(resolve));
  }

  private clearTimers(): void {
    for (const t of [this.watchdog, this.appsTimer]) if (t) clearInterval(t);
    for (const t of [this.flushTimer, this.restartTimer]) if (t) clearTimeout(t);
    this.watchdog = this.appsTimer = this.flushTimer = this.restartTimer = null;
  }

  private spawnQuery(gen: number): void {
    if (gen !== this.generation) return;
    let samples = 0;
    // Silence is measured from the spawn; the first sample may also wait on process start and
    // NVML initialisation (about a second without persistence mode).
    this.lastSampleAt = Date.now();
    this.startupGraceMs = startupGraceMs;
    let ended = false;
    let partial = '';
    let stderr = '';
    let chatter = ''; // stdout lines that were not GPU rows: where the tool's own errors appear
    const child = spawn(this.opts.path, gpuQueryArgs(this.fields, this.opts.intervalMs), {
      env: this.opts.env, stdio: ['ignore', 'pipe', 'pipe'], windowsHide: true,
    });
    this.child = child;
    const emitRows = (rows: GpuRow[]): void => {
      samples++;
      if (samples >= healthySamples) this.attempts = 0;
      this.emitSample(rows.map((r) => r.device));
    };
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      if (gen !== this.generation) return;
      const lines = (partial + chunk).split(/\r?\n/);
      partial = lines.pop() ?? '';
      for (const line of lines) {
        const before = this.assembler.pending;
        const done = this.assembler.push(line);
        for (const rows of done) emitRows(rows);
        if (done.length === 0 && this.assembler.pending === before && line.trim()) chatter = (chatter + line + '\n').slice(-4096);
      }
      this.scheduleFlush(gen, emitRows);
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => { stderr = (stderr + chunk).slice(-4096); });
    const onEnd = (code: number | null, signal: NodeJS.Signals | null, spawnError?: unknown): void => {
      if (ended) return;
      ended = true;
      if (this.child === child) this.child = null;
      if (gen !== this.generation) return;
      if (partial) { for (const rows of this.assembler.push(partial)) emitRows(rows); partial = ''; }
      const rest = this.assembler.flush();
      if (rest) emitRows(rest);
      if (spawnError && errnoCode(spawnError) === 'ENOENT') {
        this.stop();
        this.opts.onMissing?.(missingToolMessage(this.opts.path));
        return;
      }
      const toolError = detectToolError(`${chatter}\n${stderr}`);
      if (toolError?.kind === 'invalid-field' && toolError.field && this.fields.includes(toolError.field) && toolError.field !== 'index') {
        // A driver older than its help text, or no help at all: drop the field and go on at once.
        this.fields = this.fields.filter((f) => f !== toolError.field);
        this.assembler.setFields(this.fields);
        this.spawnQuery(gen);
        return;
      }
      this.attempts++;
      const delay = Math.min(maxBackoffMs, Math.max(250, this.opts.intervalMs) * 2 ** (this.attempts - 1));
      const how = spawnError
        ? `could not start ${this.opts.path}: ${spawnError instanceof Error ? spawnError.message : String(errnoCode(spawnError) ?? 'unknown error')}`
        : toolError && toolError.kind !== 'other' ? toolError.message
          : `${this.opts.path} exited ${signal ? `on ${signal}` : `with code ${code}`}${lastLine(stderr || chatter) ? `: ${lastLine(stderr || chatter)}` : ''}`;
      this.staleReported = true; // the error snapshot below already says the numbers are old
      this.emit({
        source: 'nvidia-smi', devices: this.latestDevices, processes: this.latest?.processes ?? [],
        error: how, retryInMs: delay, takenAt: Date.now(), ...(this.latestDevices.length ? { stale: true } : {}),
      });
      this.restartTimer = setTimeout(() => { this.restartTimer = null; this.spawnQuery(gen); }, delay);
    };
    child.on('error', (err) => onEnd(null, null, err));
    child.on('close', (code, signal) => onEnd(code, signal));
  }

  /** Emits a sample whose remaining rows did not come within a short quiet period. */
  private scheduleFlush(gen: number, emitRows: (rows: GpuRow[]) => void): void {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    if (this.assembler.pending === 0) return;
    this.flushTimer = setTimeout(() => {
      this.flushTimer = null;
      if (gen !== this.generation) return;
      const rows = this.assembler.flush();
      if (rows) emitRows(rows);
    }, Math.min(200, Math.max(5, this.opts.intervalMs / 2)));
  }

  private emitSample(devices: GpuDevice[]): void {
    devices.sort((a, b) => a.index - b.index);
    this.latestDevices = devices;
    this.lastSampleAt = Date.now();
    this.startupGraceMs = 0;
    this.staleReported = false;
    this.emit({ source: 'nvidia-smi', devices, processes: joinProcesses(this.apps, devices), takenAt: this.lastSampleAt });
  }

  private emit(snapshot: GpuSnapshot): void {
    this.latest = snapshot;
    this.opts.onSnapshot(snapshot);
  }

  private checkStale(): void {
    if (!this.running || this.staleReported) return;
    const silentMs = Date.now() - this.lastSampleAt;
    if (silentMs <= 3 * this.opts.intervalMs + this.startupGraceMs) return;
    this.staleReported = true;
    const since = this.latest && this.latestDevices.length ? ` (numbers from ${new Date(this.latest.takenAt).toLocaleTimeString()})` : '';
    this.emit({
      source: 'nvidia-smi', devices: this.latestDevices, processes: this.latest?.processes ?? [], takenAt: Date.now(), stale: true,
      error: `${this.opts.path} has printed no sample for ${formatDelay(silentMs)} (3 intervals of ${this.opts.intervalMs} ms): the driver may be hung${since}`,
    });
  }

  private pollApps(gen: number): void {
    if (gen !== this.generation || this.appsChild) return;
    const child = execFile(this.opts.path, computeAppsArgs(), {
      env: this.opts.env, timeout: Math.max(5000, 3 * this.opts.intervalMs), killSignal: 'SIGKILL', windowsHide: true, maxBuffer: 4 << 20,
    }, (err, stdout) => {
      if (this.appsChild === child) this.appsChild = null;
      if (gen !== this.generation) return;
      // A failed read keeps the last list: the query loop reports the tool's errors.
      if (!err) this.apps = parseComputeApps(String(stdout));
      this.appsRead = true;
      for (const w of this.appsWaiters.splice(0)) w();
    });
    this.appsChild = child;
  }
}

function killChild(child: ChildProcess | null): void {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  // A tool stuck in the driver may ignore SIGTERM; SIGKILL it a moment later.
  const t = setTimeout(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL'); }, 1000);
  t.unref();
  child.once('exit', () => clearTimeout(t));
}

function lastLine(text: string): string {
  const lines = text.split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
  return lines[lines.length - 1] ?? '';
}

function formatDelay(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

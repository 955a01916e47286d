/**
 * Checkpoints, one folder per epoch, written by rank 0 after the epoch:
 *   epoch-3/model.json + weights.bin   a TF.js Layers model (loadable with tf.loadLayersModel)
 *   epoch-3/optimizer.json + .bin      the optimizer's state (Adam's moments, iteration count)
 *   epoch-3/trainer.json               epochs done, global step, job name
 *   latest.json                        {"dir": "epoch-3", "epoch": 3}, replaced atomically last
 * The optimizer state is that of one optimizer over every trainable weight of the model, in the
 * model's order, whatever the strategy: a pipeline job's stages each hand their part to rank 0
 * (`saveStageOptimizer`), which merges them (`mergeOptimizerStates`), and each stage takes its
 * part back on resume (`loadOptimizerState` with a slice). So a checkpoint of any strategy
 * resumes under any other.
 * A folder is written under a temporary name, flushed to disk and renamed, and latest.json only
 * then points to it (written aside, flushed, renamed over the old one), so a worker killed or a
 * machine that loses power mid-write leaves the previous checkpoint loadable.
 *
 * One folder holds one run. A job that starts over (no --resume; "Start Over" in the editor) on
 * a folder that holds checkpoints moves the earlier run's files into `previous-<time>/` inside
 * it first (`moveRunAside`), so its epochs are never mixed with the new run's and its
 * latest.json keeps naming its own last checkpoint (resumable there: point checkpointDir at it).
 */
import type { LayersModel } from '@tensorflow/tfjs-layers';
import type { Optimizer } from '@tensorflow/tfjs-core';
import { accessSync, closeSync, constants, existsSync, fsyncSync, linkSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { basename, join, resolve } from 'node:path';
import type { Tf } from '../backends/types';

type WeightsManifestEntry = Parameters<Tf['io']['decodeWeights']>[1][number];
type NamedTensor = Awaited<ReturnType<Optimizer['getWeights']>>[number];

export interface TrainerState {
  readonly epochsDone: number;
  readonly globalStep: number;
  readonly job: string;
  readonly savedAt: string;
  /** The job file and its "model", to tell this job's run from another's on resume (absent in checkpoints of older versions). */
  readonly file?: string;
  readonly model?: unknown;
}

function toArrayBuffer(data: ArrayBuffer | ArrayBuffer[] | undefined): ArrayBuffer {
  if (data === undefined) return new ArrayBuffer(0);
  if (!Array.isArray(data)) return data;
  const total = data.reduce((s, b) => s + b.byteLength, 0);
  const out = new Uint8Array(total);
  let off = 0;
  for (const b of data) {
    out.set(new Uint8Array(b), off);
    off += b.byteLength;
  }
  return out.buffer;
}

/** An optimizer's state as `getWeights()` gives it: the iteration count, then one group of slots per kind (Adam: m, then v), one slot per weight. */
export interface OptimizerState {
  readonly className: string;
  readonly weights: readonly NamedTensor[];
}

/** Writes a file and flushes it to disk, so that a rename after it never points at a file the disk does not hold yet. */
function writeDurable(path: string, data: string | Uint8Array): void {
  const fd = openSync(path, 'w');
  try {
    writeFileSync(fd, data);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Flushes a folder's entries (a rename inside it); some file systems refuse, which only loses durability. */
function syncFolder(dir: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(dir, 'r');
    fsyncSync(fd);
  } catch {
    // not supported here
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

function writeOptimizerState(tf: Tf, dir: string, state: OptimizerState): Promise<void> {
  return tf.io.encodeWeights([...state.weights]).then((encoded) => {
    writeDurable(join(dir, 'optimizer.bin'), new Uint8Array(encoded.data));
    writeDurable(join(dir, 'optimizer.json'), JSON.stringify({ className: state.className, specs: encoded.specs }));
  });
}

function readOptimizerState(tf: Tf, dir: string): OptimizerState {
  const opt = JSON.parse(readFileSync(join(dir, 'optimizer.json'), 'utf8')) as { className: string; specs: WeightsManifestEntry[] };
  const named = tf.io.decodeWeights(readBin(join(dir, 'optimizer.bin')), opt.specs);
  return { className: opt.className, weights: opt.specs.map((s) => ({ name: s.name, tensor: named[s.name] })) };
}

export async function optimizerState(optimizer: Optimizer): Promise<OptimizerState> {
  return { className: optimizer.getClassName(), weights: await optimizer.getWeights() };
}

/** How many slot groups a state of `vars` weights holds (Adam 2, momentum 1, SGD 0). */
function slotGroups(state: OptimizerState, vars: number, what: string): number {
  const slots = state.weights.length - 1;
  if (state.weights[0]?.name !== 'iter') throw new CheckpointError(`${what}: the optimizer state does not start with its iteration count`);
  if (vars === 0) {
    if (slots !== 0) throw new CheckpointError(`${what}: ${slots} optimizer slots for no weights`);
    return -1;
  }
  if (slots % vars !== 0) throw new CheckpointError(`${what}: ${slots} optimizer slots do not divide among ${vars} weights: was it written for another model?`);
  return slots / vars;
}

/**
 * The state of one optimizer over all the stages' weights, from the states of the stages in
 * order (`vars`: how many trainable weights each stage has): the iteration count, then each
 * slot group with the stages' slots one after the other.
 */
export function mergeOptimizerStates(parts: readonly { readonly state: OptimizerState; readonly vars: number }[]): OptimizerState {
  const counts = parts.map((p, i) => slotGroups(p.state, p.vars, `pipeline stage ${i}`));
  const groups = Math.max(0, ...counts);
  const bad = counts.findIndex((k) => k !== -1 && k !== groups);
  if (bad >= 0) throw new CheckpointError(`pipeline stage ${bad} has ${counts[bad]} optimizer slot groups, another stage ${groups}`);
  const weights: NamedTensor[] = [parts[0].state.weights[0]];
  for (let g = 0; g < groups; g++) for (const p of parts) weights.push(...p.state.weights.slice(1 + g * p.vars, 1 + (g + 1) * p.vars));
  return { className: parts[0].state.className, weights };
}

/** The part of a whole-model optimizer state that belongs to weights [from, to) of `total`. */
export function sliceOptimizerState(state: OptimizerState, from: number, to: number, total: number): OptimizerState {
  const groups = Math.max(0, slotGroups(state, total, 'the checkpoint'));
  const weights: NamedTensor[] = [state.weights[0]];
  for (let g = 0; g < groups; g++) weights.push(...state.weights.slice(1 + g * total + from, 1 + g * total + to));
  return { className: state.className, weights };
}

const stageFolder = (root: string, epochsDone: number, stage: number) => join(root, `.epoch-${epochsDone}.stage-${stage}.optimizer`);

/** A pipeline stage other than 0: writes its optimizer state where rank 0's `saveCheckpoint` will take it from (before telling rank 0 the epoch is over). */
export async function saveStageOptimizer(tf: Tf, root: string, epochsDone: number, stage: number, optimizer: Optimizer): Promise<void> {
  const dir = stageFolder(root, epochsDone, stage);
  mkdirSync(dir, { recursive: true });
  await writeOptimizerState(tf, dir, await optimizerState(optimizer));
}

/** Rank 0 of a pipeline: the optimizer states stages 1.. wrote for this epoch, removed from disk. */
export function takeStageOptimizers(tf: Tf, root: string, epochsDone: number, stages: number): OptimizerState[] {
  return Array.from({ length: stages - 1 }, (_, i) => {
    const dir = stageFolder(root, epochsDone, i + 1);
    if (!existsSync(join(dir, 'optimizer.json'))) throw new CheckpointError(`pipeline stage ${i + 1} wrote no optimizer state for epoch ${epochsDone} (${dir})`);
    const state = readOptimizerState(tf, dir);
    rmSync(dir, { recursive: true, force: true });
    return state;
  });
}

/** The folder of the checkpoint written after `epochsDone` epochs. */
export const checkpointFolder = (root: string, epochsDone: number): string => join(root, `epoch-${epochsDone}`);

export async function saveCheckpoint(tf: Tf, root: string, model: LayersModel, optimizer: Optimizer | OptimizerState, state: TrainerState): Promise<string> {
  const dir = checkpointFolder(root, state.epochsDone);
  const name = basename(dir);
  const tmp = join(root, `.${name}.tmp-${process.pid}`);
  mkdirSync(tmp, { recursive: true });
  await model.save(tf.io.withSaveHandler((artifacts) => {
    writeDurable(join(tmp, 'weights.bin'), new Uint8Array(toArrayBuffer(artifacts.weightData)));
    const modelJson = {
      modelTopology: artifacts.modelTopology,
      format: artifacts.format ?? 'layers-model',
      generatedBy: artifacts.generatedBy,
      convertedBy: null,
      weightsManifest: [{ paths: ['weights.bin'], weights: artifacts.weightSpecs ?? [] }],
    };
    writeDurable(join(tmp, 'model.json'), JSON.stringify(modelJson));
    return Promise.resolve({ modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: 'JSON' } });
  }));
  await writeOptimizerState(tf, tmp, 'weights' in optimizer ? optimizer : await optimizerState(optimizer));
  writeDurable(join(tmp, 'trainer.json'), JSON.stringify(state, null, 2));
  syncFolder(tmp);
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  syncFolder(root);
  // Only now, with the checkpoint whole on disk, does latest.json name it.
  const latestTmp = join(root, `.latest.json.tmp-${process.pid}`);
  writeDurable(latestTmp, JSON.stringify({ dir: name, epoch: state.epochsDone }));
  renameSync(latestTmp, join(root, 'latest.json'));
  syncFolder(root);
  return dir;
}

/** What a checkpoint folder holds of an earlier run. */
export interface ExistingRun {
  readonly root: string;
  /** The checkpoint a resume starts from: what latest.json names when that folder is whole, else the newest whole epoch-N (`repaired`). */
  readonly latest?: { readonly dir: string; readonly epoch: number; readonly repaired?: string };
  /** The epoch-N folders, in order of N. */
  readonly epochs: readonly number[];
  /** The job that wrote the latest checkpoint and when (its trainer.json): its name, job file and model, as far as recorded. */
  readonly job?: string;
  readonly file?: string;
  readonly model?: unknown;
  readonly savedAt?: string;
  /** The names in `root` that belong to the run: latest.json, epoch-N, and the leftovers of a write cut off. */
  readonly entries: readonly string[];
}

const runEntry = /^(latest\.json|epoch-\d+|\.epoch-\d+\..*|\.latest\.json\.tmp-.*)$/;

const dtypeBytes: Readonly<Record<string, number>> = { float32: 4, int32: 4, bool: 1, uint8: 1, complex64: 8 };

/** Whether `bin` holds exactly the bytes `specs` describe (unknown dtypes are not counted). */
function binMatches(bin: string, specs: unknown): boolean {
  if (!Array.isArray(specs)) return false;
  let bytes = 0;
  for (const s of specs as { shape?: unknown; dtype?: unknown }[]) {
    if (!Array.isArray(s.shape) || typeof s.dtype !== 'string') return false;
    const size = dtypeBytes[s.dtype];
    if (size === undefined) return statSync(bin).isFile();
    bytes += (s.shape as number[]).reduce((a, b) => a * b, 1) * size;
  }
  return statSync(bin).size === bytes;
}

/**
 * The trainer state of a checkpoint folder when it is whole: trainer.json readable, model.json
 * and optimizer.json readable, and weights.bin / optimizer.bin of exactly the size their
 * manifests give; undefined otherwise (a folder written by a run cut off, or damaged since).
 */
export function wholeCheckpoint(dir: string): (Partial<TrainerState> & { readonly epochsDone: number }) | undefined {
  try {
    const trainer = JSON.parse(readFileSync(join(dir, 'trainer.json'), 'utf8')) as Partial<TrainerState>;
    if (typeof trainer.epochsDone !== 'number') return undefined;
    const model = JSON.parse(readFileSync(join(dir, 'model.json'), 'utf8')) as { weightsManifest?: { weights?: unknown }[] };
    if (!binMatches(join(dir, 'weights.bin'), model.weightsManifest?.[0]?.weights)) return undefined;
    const opt = JSON.parse(readFileSync(join(dir, 'optimizer.json'), 'utf8')) as { specs?: unknown };
    if (!binMatches(join(dir, 'optimizer.bin'), opt.specs)) return undefined;
    return { ...trainer, epochsDone: trainer.epochsDone };
  } catch {
    return undefined;
  }
}

const epochFolders = (names: readonly string[]): number[] => names.map((n) => /^epoch-(\d+)$/.exec(n)).filter((m) => m !== null).map((m) => Number(m[1])).sort((a, b) => a - b);

/** Why latest.json cannot be trusted, or undefined when it names a whole checkpoint (`dir`). */
function latestProblem(root: string): { readonly problem?: string; readonly dir?: string } {
  let text: string;
  try {
    text = readFileSync(join(root, 'latest.json'), 'utf8');
  } catch {
    return { problem: 'there is no latest.json' };
  }
  let l: { dir?: unknown; epoch?: unknown };
  try {
    l = JSON.parse(text) as typeof l;
  } catch {
    return { problem: text.trim() === '' ? 'latest.json is empty' : 'latest.json is not JSON' };
  }
  if (typeof l.dir !== 'string' || typeof l.epoch !== 'number' || !/^epoch-\d+$/.test(l.dir)) return { problem: 'latest.json names no epoch folder' };
  if (!existsSync(join(root, l.dir))) return { problem: `latest.json names ${l.dir}, which is not there` };
  if (!wholeCheckpoint(join(root, l.dir))) return { problem: `latest.json names ${l.dir}, which is not a whole checkpoint` };
  return { dir: l.dir };
}

/** Where a resume of `root` starts: see `latestCheckpoint`. */
function resumePoint(root: string): ExistingRun['latest'] | undefined {
  let names: string[];
  try {
    names = readdirSync(root);
  } catch {
    return undefined;
  }
  const named = latestProblem(root);
  if (named.dir) {
    const state = wholeCheckpoint(join(root, named.dir));
    return { dir: named.dir, epoch: state?.epochsDone ?? Number(named.dir.slice(6)) };
  }
  for (const e of epochFolders(names).reverse()) {
    const state = wholeCheckpoint(join(root, `epoch-${e}`));
    if (state) return { dir: `epoch-${e}`, epoch: state.epochsDone, repaired: named.problem };
  }
  return undefined;
}

/** The run a checkpoint folder holds (latest.json or an epoch-N folder), or undefined when it holds none (or does not exist). */
export function existingRun(root: string): ExistingRun | undefined {
  let names: string[];
  try {
    names = readdirSync(root);
  } catch {
    return undefined;
  }
  const entries = names.filter((n) => runEntry.test(n)).sort();
  const epochs = epochFolders(names);
  if (epochs.length === 0 && !names.includes('latest.json')) return undefined;
  const latest = resumePoint(root);
  const trainer: Partial<TrainerState> = (latest ? wholeCheckpoint(join(root, latest.dir)) : undefined) ?? {};
  return {
    root, epochs, entries,
    ...(latest ? { latest } : {}),
    ...(typeof trainer.job === 'string' ? { job: trainer.job } : {}),
    ...(typeof trainer.file === 'string' ? { file: trainer.file } : {}),
    ...(trainer.model !== undefined ? { model: trainer.model } : {}),
    ...(typeof trainer.savedAt === 'string' ? { savedAt: trainer.savedAt } : {}),
  };
}

/** The folder in `root` that `moveRunAside` moves a run into at `now`: previous-2026-11-25T23-41-07Z. */
export function previousRunFolder(root: string, now: Date): string {
  const stamp = now.toISOString().replace(/\.\d+Z$/, 'Z').replace(/:/g, '-');
  for (let i = 1; ; i++) {
    const dir = join(root, `previous-${stamp}${i === 1 ? '' : `-${i}`}`);
    if (!existsSync(dir)) return dir;
  }
}

const errText = (err: unknown): string => err instanceof Error ? err.message : String(err);

/**
 * Moves `entries` (default: all of the run's) out of the way into a new `previous-<time>/`
 * folder inside `root`, each by a rename; returns that folder. The moved latest.json keeps
 * naming its own checkpoint there. When a rename fails, the entries already moved are moved
 * back and the new folder removed, so the run stays whole where it was; the error says so (or,
 * when moving back fails too, exactly which entries are where).
 */
export function moveRunAside(run: ExistingRun, now = new Date(), entries: readonly string[] = run.entries): string {
  const to = previousRunFolder(run.root, now);
  mkdirSync(to);
  const moved: string[] = [];
  for (const name of entries) {
    try {
      renameSync(join(run.root, name), join(to, name));
      moved.push(name);
    } catch (err) {
      const stuck: string[] = [];
      for (const m of [...moved].reverse()) {
        try {
          renameSync(join(to, m), join(run.root, m));
        } catch {
          stuck.push(m);
        }
      }
      if (stuck.length === 0) {
        rmSync(to, { recursive: true, force: true });
        throw new CheckpointError(`could not move ${name} into ${to} (${errText(err)}); ${moved.length > 0 ? `${moved.join(', ')}, already moved, went back, so ` : ''}${run.root} is as it was`);
      }
      throw new CheckpointError(`could not move ${name} into ${to} (${errText(err)}), nor move back ${stuck.join(', ')}: ${stuck.join(', ')} ${stuck.length === 1 ? 'is' : 'are'} in ${to}, the rest of the run in ${run.root}`);
    }
  }
  syncFolder(run.root);
  return to;
}

/** The lock file a running job holds in its checkpoint folder. */
export const lockFileName = '.gpu-workbench.lock';

/** Who holds a checkpoint folder's lock (the lock file's content). */
export interface LockOwner {
  readonly pid: number;
  readonly host: string;
  /** When the job started (ISO time). */
  readonly startedAt: string;
  /** The process's start time as the OS gives it (Linux: /proc/<pid>/stat field 22), to tell a reused pid apart. */
  readonly processStart?: string;
  readonly job?: string;
  readonly file?: string;
}

/** The start time of process `pid` as Linux gives it (clock ticks since boot), or undefined where that cannot be read. */
export function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

/** Whether the process that wrote `owner` still runs (on another host: assumed so, as it cannot be checked). */
export function lockOwnerAlive(owner: LockOwner): boolean {
  if (owner.host !== hostname()) return true;
  try {
    process.kill(owner.pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
  }
  // Alive (or another user's: EPERM); a pid reused by another process since has another start time.
  if (owner.processStart !== undefined) {
    const now = processStartTime(owner.pid);
    if (now !== undefined && now !== owner.processStart) return false;
  }
  return true;
}

export function describeLockOwner(owner: LockOwner): string {
  return `pid ${owner.pid}${owner.host !== hostname() ? ` on ${owner.host}` : ''}${owner.job ? `, job ${owner.job}` : ''}${owner.file ? ` (${owner.file})` : ''}, started ${owner.startedAt}`;
}

function readLock(path: string): LockOwner | undefined {
  try {
    const o = JSON.parse(readFileSync(path, 'utf8')) as Partial<LockOwner>;
    return typeof o.pid === 'number' && typeof o.host === 'string' ? o as LockOwner : undefined;
  } catch {
    return undefined;
  }
}

/** Whether `path` changed in the last 10 s (false when it is gone). */
function recentlyChanged(path: string): boolean {
  try {
    return Date.now() - statSync(path).mtimeMs < 10_000;
  } catch {
    return false;
  }
}

/** A checkpoint folder's lock, held by this process until released. */
export interface CheckpointLock {
  readonly path: string;
  release(): void;
}

/** The checkpoint folder is held by another running job. */
export class CheckpointInUseError extends Error {
  constructor(readonly root: string, readonly owner: LockOwner) {
    super(`the checkpoint folder ${root} is in use by another running job: ${describeLockOwner(owner)}`);
    this.name = 'CheckpointInUseError';
  }
}

/**
 * Takes `root`'s lock for this process (created with 'wx': only one process can), so that two
 * jobs never write one folder. A lock left by a process that is gone (its pid dead, or reused by
 * a process started at another time) is taken over; one whose owner still runs throws
 * `CheckpointInUseError`. Release it when the job ends (it is also removed if this process exits).
 */
export function lockCheckpointFolder(root: string, job: { readonly name?: string; readonly file?: string } = {}): CheckpointLock {
  const path = join(root, lockFileName);
  const processStart = processStartTime(process.pid);
  const me: LockOwner = { pid: process.pid, host: hostname(), startedAt: new Date().toISOString(), ...(processStart ? { processStart } : {}), ...(job.name ? { job: job.name } : {}), ...(job.file ? { file: job.file } : {}) };
  for (let attempt = 0; ; attempt++) {
    let fd: number;
    try {
      fd = openSync(path, 'wx');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= 3) throw err;
      const owner = readLock(path);
      if (owner && lockOwnerAlive(owner)) throw new CheckpointInUseError(root, owner);
      // Unreadable: written by a process that died at once, or one writing it right now.
      if (!owner && recentlyChanged(path)) throw new CheckpointError(`the checkpoint folder ${root} is being taken by another job right now (its lock file ${path} is not written yet); try again in a moment`);
      // Gone (or a lock cut off while being written): take it over. A rename to a name of our
      // own is atomic, so of two processes doing this at once only one gets the stale file.
      const stale = `${path}.stale-${process.pid}`;
      try {
        renameSync(path, stale);
      } catch {
        continue;
      }
      const took = readLock(stale);
      if (took && owner && (took.pid !== owner.pid || took.startedAt !== owner.startedAt)) {
        // Another process took it over between our read and our rename: its lock goes back.
        try {
          linkSync(stale, path);
        } catch {
          // ignored: the 'wx' below decides
        }
      }
      rmSync(stale, { force: true });
      continue;
    }
    try {
      writeFileSync(fd, JSON.stringify(me));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    let held = true;
    const release = (): void => {
      if (!held) return;
      held = false;
      process.off('exit', release);
      // Only our own lock: never one another process took over after ours went stale.
      const now = readLock(path);
      if (now && now.pid === me.pid && now.startedAt === me.startedAt) rmSync(path, { force: true });
    };
    process.on('exit', release);
    return { path, release };
  }
}

export class CheckpointError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CheckpointError';
  }
}

/**
 * The checkpoint folder under `root` a resume starts from: the one latest.json names when it is
 * whole, else (latest.json unreadable, or naming a folder cut short) the newest whole epoch-N;
 * undefined when there is none.
 */
export function latestCheckpoint(root: string): string | undefined {
  const from = resumePoint(root);
  return from ? join(root, from.dir) : undefined;
}

function readBin(path: string): ArrayBuffer {
  const b = readFileSync(path);
  return new Uint8Array(b).buffer;
}

/** Loads the weights into `model`; returns what the trainer had done. */
export function loadWeights(tf: Tf, dir: string, model: LayersModel): TrainerState {
  const modelJson = JSON.parse(readFileSync(join(dir, 'model.json'), 'utf8')) as { weightsManifest: { weights: WeightsManifestEntry[] }[] };
  const specs = modelJson.weightsManifest[0].weights;
  const named = tf.io.decodeWeights(readBin(join(dir, 'weights.bin')), specs);
  const values = specs.map((s) => named[s.name]);
  const expected = model.weights;
  if (values.length !== expected.length) throw new CheckpointError(`${dir} holds ${values.length} weights, the model has ${expected.length}: was it written by another model?`);
  values.forEach((v, i) => {
    if (v.shape.join(',') !== expected[i].shape.join(',')) throw new CheckpointError(`${dir}: weight ${specs[i].name} has shape [${v.shape.join(', ')}], the model expects [${expected[i].shape.join(', ')}]`);
  });
  model.setWeights(values);
  tf.dispose(values);
  return JSON.parse(readFileSync(join(dir, 'trainer.json'), 'utf8')) as TrainerState;
}

/**
 * Loads the optimizer state of `dir` into `optimizer`: all of it, or (a pipeline stage) the
 * slots of the trainable weights [from, to) of the model's `total`.
 */
export async function loadOptimizerState(tf: Tf, dir: string, optimizer: Optimizer, slice?: { readonly from: number; readonly to: number; readonly total: number }): Promise<void> {
  let state = readOptimizerState(tf, dir);
  if (state.className !== optimizer.getClassName()) throw new CheckpointError(`${dir} holds the state of ${state.className}, the job uses ${optimizer.getClassName()}`);
  if (slice) {
    const all = state;
    state = sliceOptimizerState(all, slice.from, slice.to, slice.total);
    const kept = new Set(state.weights);
    tf.dispose(all.weights.filter((w) => !kept.has(w)).map((w) => w.tensor));
  }
  await optimizer.setWeights([...state.weights]);
  tf.dispose(state.weights.map((w) => w.tensor));
}

/** Loads weights and optimizer state into `model` and `optimizer`; returns what the trainer had done. */
export async function loadCheckpoint(tf: Tf, dir: string, model: LayersModel, optimizer: Optimizer): Promise<TrainerState> {
  const state = loadWeights(tf, dir, model);
  await loadOptimizerState(tf, dir, optimizer);
  return state;
}

const epochList = (epochs: readonly number[]): string => epochs.length === 0 ? 'no epoch folder' : epochs.length === 1 ? `epoch-${epochs[0]}` : `epoch-${epochs[0]} … epoch-${epochs[epochs.length - 1]}`;

/** The job about to use a checkpoint folder, to tell its own run from another job's. */
export interface FolderJob {
  readonly name: string;
  readonly file?: string;
  readonly model?: unknown;
}

/** Why the run in a folder is not `job`'s own (another job file, or another model), or undefined when it is (or cannot be told). */
export function otherJobsRun(run: ExistingRun, job: FolderJob): string | undefined {
  if (run.file !== undefined && job.file !== undefined) {
    if (resolve(run.file) !== resolve(job.file)) return `it was written by another job file, ${run.file}${run.job ? ` (job ${run.job})` : ''}`;
  } else if (run.job !== undefined && run.job !== job.name) return `it was written by another job, ${run.job}`;
  if (run.model !== undefined && job.model !== undefined && JSON.stringify(run.model) !== JSON.stringify(job.model)) return `its model (${JSON.stringify(run.model)}) is not this job's (${JSON.stringify(job.model)})`;
  return undefined;
}

/** What readying a checkpoint folder will do; `checkpointFolderPlan` works it out, `applyCheckpointPlan` does it. */
export interface CheckpointPlan {
  readonly root: string;
  readonly resume: boolean;
  readonly run?: ExistingRun;
  /** The run's entries to move into previous-<time>/ (none: nothing to move). */
  readonly move: readonly string[];
  /** Resuming from a checkpoint that latest.json does not name (it was unreadable): latest.json is rewritten to name it. */
  readonly repairLatest?: { readonly dir: string; readonly epoch: number; readonly why: string };
  /** Said in the job's log even when nothing moves (a --resume with nothing to resume). */
  readonly note?: string;
}

/**
 * What readying `root` for a run will do, without touching it. Starting over (`resume` false)
 * on an earlier run moves that run aside; resuming keeps it (from what latest.json names, or,
 * when latest.json is unreadable, the newest whole epoch-N) and moves aside epoch folders past
 * that checkpoint (another run's, or cut short). Throws a CheckpointError for a resume that
 * cannot be: checkpoints of which none is whole, or another job's run (`job`).
 */
export function checkpointFolderPlan(root: string, resume: boolean, job?: FolderJob): CheckpointPlan {
  const run = existingRun(root);
  if (!run) return { root, resume, move: [], ...(resume ? { note: `--resume: ${root} holds no checkpoint to resume from, so this run starts at epoch 1` } : {}) };
  if (!resume) return { root, resume, run, move: run.entries };
  if (!run.latest) {
    const newest = run.epochs.length > 0 ? `; newest epoch folder epoch-${run.epochs[run.epochs.length - 1]} is not whole` : '';
    throw new CheckpointError(`nothing whole to resume in ${root} (${latestProblem(root).problem ?? 'latest.json names nothing whole'}${newest}); start without --resume (Start Over) to move these files into previous-<time>/ and train from epoch 1`);
  }
  const other = job ? otherJobsRun(run, job) : undefined;
  if (other) throw new CheckpointError(`${root} holds a run that is not this job's: ${other}; resuming it would load another model's weights. Start without --resume (Start Over) to move it into previous-<time>/, or give this job its own checkpointDir`);
  const latest = run.latest;
  const stale = run.epochs.filter((e) => e > latest.epoch).map((e) => `epoch-${e}`);
  return { root, resume, run, move: stale, ...(latest.repaired ? { repairLatest: { dir: latest.dir, epoch: latest.epoch, why: latest.repaired } } : {}) };
}

/**
 * Does what `plan` says (moves, latest.json rewritten); returns what was done, for the job's
 * log, or undefined when there was nothing to do or say.
 */
export function applyCheckpointPlan(plan: CheckpointPlan, now = new Date()): string | undefined {
  const { root, run } = plan;
  const said: string[] = [];
  if (plan.repairLatest) {
    const { dir, epoch, why } = plan.repairLatest;
    const tmp = join(root, `.latest.json.tmp-${process.pid}`);
    writeDurable(tmp, JSON.stringify({ dir, epoch }));
    renameSync(tmp, join(root, 'latest.json'));
    syncFolder(root);
    said.push(`${why}: resuming from the newest whole checkpoint in ${root}, ${dir} (${epoch} epoch${epoch === 1 ? '' : 's'} done), and latest.json now names it`);
  }
  if (run && plan.move.length > 0) {
    const to = moveRunAside(run, now, plan.move);
    if (plan.resume) {
      const stale = plan.move.map((m) => Number(m.slice(6)));
      said.push(`${epochList(stale)} in ${root} came after the checkpoint resumed from (${run.latest?.dir}), so they are another run's or cut short: moved to ${to} to keep them apart from the resumed run`);
    } else {
      const what = run.latest ? `the earlier run${run.job ? ` of ${run.job}` : ''} (${epochList(run.epochs)}, latest ${run.latest.dir}${run.savedAt ? ` saved ${run.savedAt}` : ''})` : `the checkpoints of an earlier run (${epochList(run.epochs)}, none of them whole)`;
      said.push(`${root} held ${what}: moved to ${to}; this run starts at epoch 1 (--resume continues the earlier run instead)`);
    }
  }
  if (plan.note) said.push(plan.note);
  return said.length > 0 ? said.join('; ') : undefined;
}

/**
 * Readies a job's checkpoint folder so that it only ever holds the run about to start:
 * `checkpointFolderPlan`, then `applyCheckpointPlan`. Returns what was done, for the job's log.
 */
export function prepareCheckpointFolder(root: string, resume: boolean, now = new Date(), job?: FolderJob): string | undefined {
  return applyCheckpointPlan(checkpointFolderPlan(root, resume, job), now);
}

/**
 * Makes sure `root` can hold checkpoints before any training: creates it (and its parents)
 * and checks that it is a folder this process can write, else throws a CheckpointError naming it.
 */
export function ensureCheckpointFolder(root: string): void {
  try {
    mkdirSync(root, { recursive: true });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' || code === 'ENOTDIR') throw new CheckpointError(`checkpointDir ${root} is not a folder: ${existsSync(root) ? 'it is a file' : 'a part of its path is a file'} (${errText(err)})`);
    throw new CheckpointError(`checkpointDir ${root} cannot be created: ${errText(err)}`);
  }
  if (!statSync(root).isDirectory()) throw new CheckpointError(`checkpointDir ${root} is not a folder: it is a file`);
  try {
    accessSync(root, constants.W_OK);
  } catch (err) {
    throw new CheckpointError(`checkpointDir ${root} is not writable: ${errText(err)}`);
  }
}

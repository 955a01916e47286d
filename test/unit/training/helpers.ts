/** Helpers shared by the training job tests: run a job to its end, read its checkpoint, wait on worker processes. */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { JobEvent } from '../../../src/training/job/events';
import { runJob, type RunJobOptions } from '../../../src/training/launchers/coordinator';
import { fixtures, repoRoot } from '../../paths';

export const tinyJob = join(fixtures, 'jobs', 'tiny-mnist.job.json');

export type Final = Extract<JobEvent, { type: 'job/done' | 'job/failed' }>;

/** Runs a job to its end, keeping every event it reported and the pids of its workers. */
export async function run(opts: Omit<RunJobOptions, 'onEvent'>, onEvent: (e: JobEvent) => void = () => undefined): Promise<{ events: JobEvent[]; final: Final; pids: number[] }> {
  const events: JobEvent[] = [];
  const handle = runJob({ ...opts, onEvent: (e) => { events.push(e); onEvent(e); } });
  const final = await handle.finished;
  return { events, final, pids: handle.pids() };
}

/** The weights of the latest checkpoint, in model order. */
export function checkpointWeights(dir: string): Float32Array {
  const latest = JSON.parse(readFileSync(join(dir, 'latest.json'), 'utf8')) as { dir: string };
  const b = readFileSync(join(dir, latest.dir, 'weights.bin'));
  return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
}

/** Whether a process with this pid still exists. */
export { isAlive as alive } from '../gpu/helpers';

export async function until(what: string, cond: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Runs the built `gpu-workbench train ... --json` to its end: its exit code, its JSON events and its stderr. */
export async function trainCli(env: NodeJS.ProcessEnv, ...args: string[]): Promise<{ code: number | null; events: JobEvent[]; stderr: string }> {
  const child = spawn(process.execPath, [join(repoRoot, 'out', 'src', 'cli.js'), 'train', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
  child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  const events = stdout.trim().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as JobEvent);
  return { code, events, stderr };
}

/** Helpers shared by the training job tests: run a job to its end, read its checkpoint, wait on worker processes. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { JobEvent } from '../../../src/training/job/events';
import { runJob, type RunJobOptions } from '../../../src/training/launchers/coordinator';
import { fixtures } from '../../paths';

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

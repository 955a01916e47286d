import { mkdtempSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fixtures } from '../../paths';

export const fakeBin = join(fixtures, 'bin');

/** An environment with the fake nvidia-smi first on PATH, playing `scenario`, logging to a fresh file. */
export function fakeEnv(scenario: string, extra: NodeJS.ProcessEnv = {}): { env: NodeJS.ProcessEnv; log: string } {
  const log = join(mkdtempSync(join(tmpdir(), 'gpu-fake-')), 'invocations.jsonl');
  return {
    log,
    env: { ...process.env, PATH: `${fakeBin}${delimiter}${process.env.PATH ?? ''}`, FAKE_NVIDIA_SMI_SCENARIO: scenario, FAKE_NVIDIA_SMI_LOG: log, ...extra },
  };
}

/** PATH without the fake (and, on this machine, without any nvidia-smi). */
export function envWithoutNvidiaSmi(): NodeJS.ProcessEnv {
  return { ...process.env, PATH: ['/usr/bin', '/bin'].join(delimiter) };
}

export interface Invocation { pid: number; argv: string[]; scenario: string; t: number }

export function invocations(log: string): Invocation[] {
  if (!existsSync(log)) return [];
  return readFileSync(log, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Invocation);
}

export const isQueryLoop = (i: Invocation): boolean => i.argv.some((a) => a.startsWith('--query-gpu=')) && i.argv.includes('-lms');

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Waits until `check` returns a truthy value, or fails after `deadlineMs` saying what it waited for. */
export async function waitFor<T>(check: () => T | undefined | null | false, what: string, deadlineMs = 8000): Promise<T> {
  const until = Date.now() + deadlineMs;
  for (;;) {
    const v = check();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

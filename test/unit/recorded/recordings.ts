/**
 * The recordings of real GPU machines (test/fixtures/torchrun/cuda/<machine>/, each with a README
 * saying what ran) and how the tests read them: every channel line parsed as the extension parses
 * it, so a line it would refuse fails the test that reads it.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseCompanionLine, type CompanionMessage } from '../../../src/common/companionProtocol';
import { fixtures } from '../../paths';

/** The machines recorded by scripts/gpu-check.sh: an H100 80GB HBM3 (2026-11-26) and an H200 (2026-11-27). */
export type Machine = 'h100' | 'h200';

/** A file recorded on `machine`. */
export function recorded(machine: Machine, name: string): string {
  return readFileSync(join(fixtures, 'torchrun', 'cuda', machine, name), 'utf8');
}

/** An nvidia-smi output in test/fixtures/nvidia-smi/. */
export function smi(name: string): string {
  return readFileSync(join(fixtures, 'nvidia-smi', name), 'utf8');
}

/** Every line of a recorded channel, parsed as the extension parses it; a line it refuses fails the test with its reason. */
export function channel(machine: Machine, name: string): CompanionMessage[] {
  return recorded(machine, name).split('\n').filter((l) => l.trim()).map((line, i) => {
    const r = parseCompanionLine(line);
    if (!r.ok) assert.fail(`${machine}/${name}:${i + 1}: ${r.error}`);
    return r.message;
  });
}

export function only<T extends CompanionMessage['type']>(messages: CompanionMessage[], type: T): Extract<CompanionMessage, { type: T }>[] {
  return messages.filter((m): m is Extract<CompanionMessage, { type: T }> => m.type === type);
}

export const MiB = 2 ** 20;

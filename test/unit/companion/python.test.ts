import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot } from '../../paths';

/**
 * The Python side of the companion (python/gpu_workbench): its unittest suite, test/python, run with
 * Debian's /usr/bin/python3 (torch 1.13, CPU). The suite skips its torch tests, saying why, where
 * that interpreter has no torch; without the interpreter this test is skipped.
 */
describe('the Python companion gpu_workbench (test/python with /usr/bin/python3)', function () {
  this.timeout(240_000);

  it('passes its unittest suite: the run wrapper, the step hooks on a real model, the channel, report()', async function () {
    const r = await new Promise<{ code: number | null; out: string; missing?: boolean }>((done) => {
      const child = spawn('/usr/bin/python3', ['-m', 'unittest', 'discover', '-s', join(repoRoot, 'test', 'python'), '-v'], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
      child.stderr.on('data', (d: Buffer) => { out += d.toString(); });
      child.on('error', () => done({ code: null, out, missing: true }));
      child.on('close', (code) => done({ code, out }));
    });
    if (r.missing) this.skip();
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /^Ran \d+ tests? in /m);
    for (const skipped of r.out.matchAll(/\.\.\. skipped '(.*)'$/gm)) console.warn(`  skipped: ${skipped[1]}`);
  });
});

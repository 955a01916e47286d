// A torchrun job ends when torchrun exits, also when a process it started in a session of its own
// (out of reach of the group kill) still holds its output: the job trials of an experiment run
// torchrun through the training CLI, and a job that never ends keeps the experiment's stop() waiting.
import * as assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JobEvent } from '../../../src/training/job/events';
import { runTorchrun } from '../../../src/training/launchers/torchrun';

async function until(cond: () => boolean, what: string, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('torchrun: a leftover holding the output does not keep the job from ending', function () {
  this.timeout(30_000);

  it('ends with torchrun\'s exit code shortly after its exit and says the later output was dropped', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'torchrun-exit-'));
    const pidFile = join(dir, 'sleeper');
    // Stands in for the interpreter running torchrun: starts a sleeper in a new session that inherits stdout, then exits.
    const python = join(dir, 'python');
    // It exits only once the sleeper is in its own session (its pid file written), else the group kill
    // at torchrun's exit could take the sleeper first on a loaded machine and nothing would hold the output.
    writeFileSync(python, `#!/bin/bash\nsetsid sh -c 'echo $$ > ${pidFile}.tmp; mv ${pidFile}.tmp ${pidFile}; exec sleep 120' &\nwhile [ ! -s ${pidFile} ]; do sleep 0.01; done\necho started\nexit 0\n`);
    chmodSync(python, 0o755);
    const events: JobEvent[] = [];
    const handle = runTorchrun({ file: join(dir, 'x.job.json'), name: 'x', script: join(dir, 'train.py'), args: [], nprocPerNode: 1, python, cwd: dir, env: {} }, (e) => events.push(e));
    let final: JobEvent | undefined;
    void handle.finished.then((e) => { final = e; });
    try {
      await until(() => final !== undefined, `the job to end; events: ${JSON.stringify(events)}`, 10_000);
      assert.equal(final?.type, 'job/done');
      assert.ok(events.some((e) => e.type === 'job/log' && e.message === 'started'), 'the output before the exit is kept');
      assert.ok(events.some((e) => e.type === 'job/log' && e.level === 'warning' && /output after its exit was dropped/.test(e.message)));
    } finally {
      await until(() => existsSync(pidFile) && readFileSync(pidFile, 'utf8').trim() !== '', 'the sleeper to write its pid', 10_000).catch(() => undefined);
      const pid = existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8').trim()) : 0;
      if (pid > 0) try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
    }
  });
});

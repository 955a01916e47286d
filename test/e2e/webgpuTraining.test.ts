/**
 * Issue #14 item 6: the installed extension (the packaged .vsix, which carries Dawn's dawn.node)
 * trains a job with `"backend": "webgpu"` on lavapipe, Mesa's Vulkan on the CPU: Start Training…
 * from F1 on a small copy of the MNIST example, and the job's log names the adapter its workers
 * got. Lavapipe runs the very shaders a GPU runs, slowly, so the job is small.
 */
import * as assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { since, waitUntil } from './harness';
import { codeServerSuite, startTraining, trainingWorkspace, waitForNotification } from './flows';

describe('e2e: a webgpu job in code-server (lavapipe)', function () {
  this.timeout(420_000);
  const s = codeServerSuite('webgpu-training', () => {
    const ws = trainingWorkspace({ trainSize: 512, testSize: 128, epochs: 1 });
    const job = JSON.parse(readFileSync(ws.jobFile, 'utf8')) as Record<string, unknown>;
    writeFileSync(ws.jobFile, `${JSON.stringify({ ...job, backend: 'webgpu', checkpointDir: undefined }, null, 2)}\n`);
    return ws;
  });

  it('Start Training… on a job with "backend": "webgpu" trains on Dawn over lavapipe and the log names the adapter', async () => {
    const t0 = performance.now();
    const page = await s.open('mnist-ddp.job.json');
    await startTraining(page, 'mnist-ddp.job.json', 'ddp', '2 CPU workers');
    // Software Vulkan is the CPU: the end message says so, with the backend the workers loaded.
    const done = await waitForNotification(page, new RegExp(`Training ${s.ws.name} finished: test accuracy [\\d.]+% after 1 epoch on CPU \\(webgpu\\)`), 360_000);
    s.timings.toFinishedMs = since(t0);
    assert.ok(Number(/test accuracy ([\d.]+)%/.exec(done)![1]) > 30, done);
    // The training log (its output channel's file) has the start line with the adapter of each rank.
    const lines = await waitUntil('the training log to name the webgpu adapter', 30_000, () => {
      const found = s.server!.logFiles(/Training\.log$/).flatMap((f) => readFileSync(f, 'utf8').split('\n')).filter((l) => /webgpu adapter .*(llvmpipe|lavapipe)/i.test(l));
      return found.length > 0 ? found : undefined;
    }, 250);
    console.log(`      webgpu start line: ${lines[0].slice(0, 240)}`);
  });
});

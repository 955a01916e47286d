import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FindBatchSizeEvent, FindBatchSizeResult } from '../../../../src/training/launchers/findBatchSize';
import { searchMessage, startSearch, type Cancellation } from '../../../../src/views/batchSize/batchSizeSearch';
import { formatBatchEvent } from '../../../../src/cli/train';
import { fixtures, repoRoot } from '../../../paths';
import { alive, tinyJob } from '../../training/helpers';

const cli = join(repoRoot, 'out', 'src', 'cli.js');

function canceller(): Cancellation & { cancel(): void } {
  const listeners = new Set<() => void>();
  return {
    onCancellationRequested: (l) => { listeners.add(l); return { dispose: () => listeners.delete(l) }; },
    cancel: () => { for (const l of listeners) l(); },
  };
}

const result = (r: Partial<FindBatchSizeResult>): FindBatchSizeResult => ({ job: 'mnist', file: '/w/mnist.job.json', strategy: 'ddp', jobDevices: 2, devices: [], perDevice: 0, ...r });

describe('Find Max Batch Size: the search process and its message', function () {
  this.timeout(120_000);

  it('runs the search in a child process; when the training set fits, says memory is not the limit and offers nothing', async () => {
    const events: FindBatchSizeEvent[] = [];
    const s = startSearch(cli, tinyJob, { onEvent: (e) => events.push(e) });
    const ending = await s.ended;
    assert.equal(ending.code, 0, ending.stderr);
    // tiny-mnist trains on 256 examples from a batch of 32: the training set is the bound.
    assert.deepEqual(events.map((e) => (e.type === 'batch/trial' ? `${e.batchSize} ${e.outcome.kind}` : e.type)), ['32 fits', '64 fits', '128 fits', '256 fits', 'batch/done']);
    assert.deepEqual(searchMessage(ending), { text: 'Memory is not the limit here: for tiny-mnist, a batch of 256 per device (the whole 256-sample training set) fits, measured on CPU (wasm); no batchSize above 256 (the training set) trains on more examples. Nothing to change.', error: false });
  });

  it('never offers more than the data holds: ddp on 2 devices over 8,000 samples fits 4,000 per device, and that is no offer', () => {
    // What MNIST (trainSize 8000, ddp on 2 devices) gave on wasm: every trial fit up to the bound.
    const cpu = { device: 0, deviceLabel: 'cpu', backend: 'wasm', trials: [] };
    const mnist = result({ trainSamples: 8000, devices: [{ ...cpu, batchSize: 4000, limit: 'max', max: 4000 }], perDevice: 4000 });
    const m = searchMessage({ code: 0, signal: null, stderr: '', result: mnist });
    assert.equal(m.offer, undefined, 'no Set "batchSize" button');
    assert.equal(m.text, 'Memory is not the limit here: for mnist, a batch of 4,000 per device (a device\'s share of the 8,000-sample training set for ddp on 2 devices) fits, measured on CPU (wasm); no batchSize above 8,000 (the training set) trains on more examples. Nothing to change.');
    assert.deepEqual(formatBatchEvent({ type: 'batch/done', result: mnist }).split('\n'), [
      'a batch of 4000 fits on CPU (wasm): the largest size tried, 4000, fit: the data holds only 4000 per device (a device\'s share of the 8,000-sample training set for ddp on 2 devices) (0 trials)',
      'memory is not the limit here: every batch the training set can fill fits; keep "batchSize" as it is in mnist.job.json',
    ]);
    // Stopped by --max-batch-size: larger batches were not tried, so the bound is offered, and nothing says memory is not the limit.
    const capped = searchMessage({ code: 0, signal: null, stderr: '', result: result({ trainSamples: 8000, maxBatchSize: 512, devices: [{ ...cpu, batchSize: 512, limit: 'max', max: 512 }], perDevice: 512, suggestedBatchSize: 1024 }) });
    assert.deepEqual(capped, { text: 'A batch of 512 per device fits for mnist, measured on CPU (wasm): the search reached --max-batch-size 512, so larger batches were not tried. For ddp on 2 devices that is "batchSize": 1024.', error: false, offer: 1024 });
    // On a GPU the message names it.
    const gpu = searchMessage({ code: 0, signal: null, stderr: '', result: result({ devices: [{ ...cpu, deviceLabel: 'gpu:1 (CUDA_VISIBLE_DEVICES=1)', backend: 'tensorflow', batchSize: 96, limit: 'memory', max: 4000 }], perDevice: 96, suggestedBatchSize: 192 }) });
    assert.deepEqual(gpu, { text: 'Largest batch that fits for mnist: 96 per device, measured on GPU 1 (tensorflow). For ddp on 2 devices that is "batchSize": 192.', error: false, offer: 192 });
  });

  /** The gated job: its second trial waits in loadData until the test lets it go (see gated.data.js). */
  function gated(): { job: string; gate: string; loaders(): number[]; done(): void } {
    const gate = mkdtempSync(join(tmpdir(), 'gwb-batch-gate-'));
    process.env.GPU_WORKBENCH_TEST_GATE = gate;
    return {
      job: join(fixtures, 'jobs', 'gated-activations.job.json'),
      gate,
      // The loads: the search sizing the training set, the first trial, the held second trial.
      // Who loaded the data: the search sizing the training set, each trial's worker (the
      // second held at the gate, if the cancel had not already stopped it from starting).
      loaders: () => readFileSync(join(gate, 'loads'), 'utf8').trim().split('\n').map(Number),
      done: () => { delete process.env.GPU_WORKBENCH_TEST_GATE; rmSync(gate, { recursive: true, force: true }); },
    };
  }

  it('stops on cancel: the search ends at once, says it was cancelled, and offers nothing', async () => {
    const g = gated();
    try {
      const c = canceller();
      const fits: number[] = [];
      const s = startSearch(cli, g.job, {
        onEvent: (e) => { if (e.type === 'batch/trial' && e.outcome.kind === 'fits' && fits.push(e.batchSize) === 1) c.cancel(); },
        cancel: c,
      });
      // The second trial holds until cancelled: the cancel lands while a trial runs.
      const ending = await s.ended;
      assert.equal(ending.code, 130, ending.stderr);
      const m = searchMessage(ending);
      assert.deepEqual([m.error, m.offer], [false, undefined]);
      assert.deepEqual(fits, [2]);
      assert.equal(m.text, 'Find Max Batch Size for gated-activations was cancelled; a batch of 2 fits so far.');
      // `ended` is the search process's exit; the held trial's worker went with it.
      assert.equal(alive(s.pid as number), false, 'the search process is gone');
      const loaders = g.loaders();
      assert.ok(loaders.length >= 2 && loaders.length <= 3, `the search and one trial loaded the data, a second trial at most got to the gate: ${loaders.length}`);
      assert.deepEqual(loaders.filter((pid) => alive(pid)), [], 'no trial worker is left behind');
    } finally {
      g.done();
    }
  });

  it('stop() (the extension disposed) ends the search process like a cancel, and is a no-op once it has ended', async () => {
    const g = gated();
    try {
      let stopped = false;
      const s = startSearch(cli, g.job, { onEvent: (e) => { if (e.type === 'batch/trial' && !stopped) { stopped = true; s.stop(); } } });
      const ending = await s.ended;
      assert.equal(ending.code, 130, ending.stderr);
      assert.match(searchMessage(ending).text, /was cancelled/);
      assert.equal(alive(s.pid as number), false, 'the search process is gone');
      s.stop();
    } finally {
      g.done();
    }
  });

  it('says why when the job is refused or the process dies, and never offers a batch it cannot take', () => {
    assert.deepEqual(searchMessage({ failed: { reason: 'bad.job.json: /batchSize must be an integer ≥ 1', hint: 'Fix the job file.' }, code: 1, signal: null, stderr: '' }), { text: 'Find Max Batch Size failed: bad.job.json: /batchSize must be an integer ≥ 1 Fix the job file.', error: true });
    assert.equal(searchMessage({ code: null, signal: 'SIGKILL', stderr: 'line 1\nline 2\nlast words\n' }).text, 'Find Max Batch Size failed: the search process was killed by SIGKILL: line 2 | last words');
    const cpu = { device: 0, deviceLabel: 'cpu', backend: 'wasm', max: 1000, trials: [] };
    assert.deepEqual(searchMessage({ code: 0, signal: null, stderr: '', result: result({ devices: [{ ...cpu, batchSize: 96, limit: 'memory' }], perDevice: 96, suggestedBatchSize: 192 }) }), { text: 'Largest batch that fits for mnist: 96 per device, measured on CPU (wasm). For ddp on 2 devices that is "batchSize": 192.', error: false, offer: 192 });
    assert.deepEqual(searchMessage({ code: 1, signal: null, stderr: '', result: result({ devices: [{ ...cpu, batchSize: 0, limit: 'memory' }] }) }), { text: 'Not even a batch of 1 fits on CPU (wasm) for mnist: the model alone is too large.', error: true });
    assert.deepEqual(searchMessage({ code: 1, signal: null, stderr: '', result: result({ devices: [{ ...cpu, batchSize: 32, limit: 'error', error: { reason: "Kernel 'X' not registered" } }], perDevice: 32 }) }), { text: "Find Max Batch Size for mnist stopped: a trial failed for another reason than memory: Kernel 'X' not registered", error: true });
    // dp: the trials measured one replica's share; rank 0 holds more, so the offer comes with a warning.
    const dp = searchMessage({ code: 0, signal: null, stderr: '', result: result({ strategy: 'dp', devices: [{ ...cpu, batchSize: 96, limit: 'memory' }], perDevice: 96, suggestedBatchSize: 192 }) });
    assert.deepEqual(dp, { text: 'Largest batch that fits for mnist: 96 per device, measured on CPU (wasm). For dp on 2 devices that is "batchSize": 192. This is an upper bound for dp: the trials measured one replica\'s share (96), but rank 0, the coordinator, also holds the whole batch of 192 and every replica\'s gradients, so it can run out of memory there; if it does, lower batchSize (or use ddp, whose replicas are alike).', error: false, offer: 192 });
    const pipeline = searchMessage({ code: 0, signal: null, stderr: '', result: result({ strategy: 'pipeline', devices: [{ ...cpu, batchSize: 3, limit: 'memory' }], perDevice: 3 }) });
    assert.deepEqual([pipeline.error, pipeline.offer], [false, undefined]);
    assert.match(pipeline.text, /The job's pipeline strategy cannot take it \(a batch must hold whole micro-batches\)\.$/);
  });
});

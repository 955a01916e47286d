import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { loadBackend } from '../../../../src/training/backends/backend';
import { saveCheckpoint } from '../../../../src/training/job/checkpoint';
import { loadDataset, readIdx } from '../../../../src/training/job/data';
import { loadJobFile } from '../../../../src/training/job/spec';
import { buildModel, makeOptimizer } from '../../../../src/training/job/model';
import { LeakWatch } from '../../../../src/training/strategies/trainLoop';
import { fixtures } from '../../../paths';

const jobs = join(fixtures, 'jobs');

function idx(dims: number[], data: number[]): Buffer {
  const head = Buffer.alloc(4 + 4 * dims.length);
  head[2] = 0x08;
  head[3] = dims.length;
  dims.forEach((d, i) => head.writeUInt32BE(d, 4 + 4 * i));
  return Buffer.concat([head, Buffer.from(data)]);
}

describe('training data and models', function () {
  this.timeout(20_000);
  let dir: string;
  beforeEach(() => { dir = mkdtempSync(join(tmpdir(), 'gw-data-')); });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('splits the 10,000 MNIST digits the same way every time, train and test disjoint', async () => {
    const spec = loadJobFile(join(jobs, 'tiny-mnist.job.json'));
    const a = await loadDataset(spec.data, spec.file);
    const b = await loadDataset(spec.data, spec.file);
    assert.deepEqual(a.inputShape, [28, 28, 1]);
    assert.equal(a.train.count, 256);
    assert.equal(a.test.count, 64);
    assert.deepEqual(a.train.labels, b.train.labels);
    assert.ok(a.train.xs.every((v) => v >= 0 && v <= 1) && a.train.xs.some((v) => v > 0.9), 'pixels are in [0, 1]');
    assert.ok(new Set(a.train.labels).size === 10, 'all ten digits are in a shuffled split');
    const key = (xs: Float32Array, i: number) => xs.subarray(i * 784, (i + 1) * 784).join(',');
    const train = new Set(Array.from({ length: a.train.count }, (_, i) => key(a.train.xs, i)));
    assert.ok(Array.from({ length: a.test.count }, (_, i) => key(a.test.xs, i)).every((k) => !train.has(k)), 'no test digit is trained on');
  });

  it('reads a CSV with a header, holding out a test fraction, and names the line of a bad value', async () => {
    const spec = loadJobFile(join(jobs, 'tiny-csv.job.json'));
    const d = await loadDataset(spec.data, spec.file);
    assert.deepEqual(d.inputShape, [2]);
    assert.equal(d.numClasses, 2);
    assert.deepEqual([d.train.count, d.test.count], [30, 10]);
    writeFileSync(join(dir, 'bad.csv'), 'a,b,label\n1,2,0\n3,x,1\n');
    await assert.rejects(loadDataset({ kind: 'csv', path: join(dir, 'bad.csv'), header: true, testFraction: 0.5 }, spec.file), /bad\.csv:3: column 2 is not a number: "x"/);
  });

  it('reads IDX images and labels, gzipped or not, and rejects mismatched files', async () => {
    writeFileSync(join(dir, 'images.idx.gz'), gzipSync(idx([4, 2, 2], [0, 255, 51, 102, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])));
    writeFileSync(join(dir, 'labels.idx'), idx([4], [0, 1, 2, 1]));
    writeFileSync(join(dir, 'three.idx'), idx([3], [0, 1, 2]));
    assert.deepEqual(readIdx(join(dir, 'labels.idx')).shape, [4]);
    const d = await loadDataset({ kind: 'idx', images: join(dir, 'images.idx.gz'), labels: join(dir, 'labels.idx'), testImages: join(dir, 'images.idx.gz'), testLabels: join(dir, 'labels.idx'), testFraction: 0.2, scale: 255 }, join(dir, 'x.job.json'));
    assert.deepEqual(d.inputShape, [2, 2, 1]);
    assert.equal(d.numClasses, 3);
    assert.deepEqual([...d.train.xs.subarray(0, 4)].map((v) => Math.round(v * 100) / 100), [0, 1, 0.2, 0.4]);
    await assert.rejects(loadDataset({ kind: 'idx', images: join(dir, 'images.idx.gz'), labels: join(dir, 'three.idx'), testFraction: 0.2, scale: 255 }, join(dir, 'x.job.json')), /holds 4 images but .*three\.idx holds 3 labels/);
  });

  it('loads a createModel module and a loadData module', async () => {
    const spec = loadJobFile(join(jobs, 'module-model.job.json'));
    const { tf } = await loadBackend('cpu');
    const d = await loadDataset(spec.data, spec.file);
    assert.deepEqual([d.train.count, d.test.count, d.numClasses], [64, 20, 2]);
    const model = await buildModel(tf, spec.model, d.inputShape, d.numClasses, 0);
    assert.deepEqual(model.outputs[0].shape, [null, 2]);
  });

  it('reads back a model.json written by a checkpoint as a model source, with the same predictions', async () => {
    const { tf } = await loadBackend('cpu');
    const model = await buildModel(tf, { kind: 'preset', preset: 'mlp', hiddenUnits: [4] }, [3], 2, 1);
    await saveCheckpoint(tf, dir, model, makeOptimizer(tf, { name: 'adam', learningRate: 0.1, momentum: 0 }), { epochsDone: 1, globalStep: 1, job: 't', savedAt: '' });
    const loaded = await buildModel(tf, { kind: 'layers', path: join(dir, 'epoch-1', 'model.json') }, [3], 2, 99);
    const x = tf.tensor2d([[0.1, 0.2, 0.3]]);
    const p = (m: typeof model) => Array.from((m.predict(x) as ReturnType<typeof tf.tensor>).dataSync());
    assert.deepEqual(p(loaded), p(model));
  });

  it('seeds the presets, so two processes build the same initial weights', async () => {
    const { tf } = await loadBackend('cpu');
    const w = async (seed: number) => (await buildModel(tf, { kind: 'preset', preset: 'mlp', hiddenUnits: [5] }, [4], 3, seed)).getWeights()[0].dataSync().join(',');
    assert.equal(await w(7), await w(7));
    assert.notEqual(await w(7), await w(8));
  });

  it('reports a tensor leak once, with the step it started, and not a flat count', () => {
    const flat = new LeakWatch(5);
    for (let s = 1; s <= 20; s++) assert.equal(flat.observe(s, 14), undefined);
    const leak = new LeakWatch(5);
    const seen = [14, 14, 14, 15, 16, 17, 18, 19, 20, 21].map((n, i) => leak.observe(i + 1, n));
    assert.deepEqual(seen.filter((s) => s !== undefined), [3]);
  });
});

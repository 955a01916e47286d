/**
 * The webgpu backend for tests: Dawn's Node binding (npm `webgpu`) on whatever Vulkan adapter the
 * machine has (lavapipe on CI), tfjs-backend-webgpu on top, and our webgpu kernels registered.
 * A suite calls `webgpuOrSkip(this)` in its `before`: where no adapter exists the suite is
 * skipped with the reason printed, never passed.
 *
 * Until the production loader (src/training/backends/webgpu.ts) lands, `startWebgpu` below is
 * this file's own small init; switching to the loader is the one line marked LOADER.
 */
import * as os from 'node:os';
import { registerWebgpuKernels } from '../../../../../src/training/backends/webgpuKernels/index';
import { assertClose, initBackends, runOn, tf } from '../wasmKernels/tfHarness';

export type Backend = 'cpu' | 'wasm' | 'webgpu';

/** The adapter Dawn picked, as it describes itself. */
export interface Adapter { vendor: string; architecture: string; description: string; device: string; fallback: boolean }

let adapter: Adapter | undefined;

/** The adapter webgpu runs on, once `initWebgpu` has resolved without a reason. */
export function webgpuAdapter(): Adapter | undefined {
  return adapter;
}

/** lavapipe, SwiftShader and the like: WebGPU on the CPU (a fallback adapter, or `architecture: software`). */
export function isSoftware(a: Adapter): boolean {
  return a.fallback || a.architecture === 'software' || /llvmpipe|lavapipe|swiftshader/i.test(`${a.description} ${a.device}`);
}

/** Starts Dawn and registers the 'webgpu' backend with tfjs; resolves with why not, or undefined. */
async function startWebgpu(): Promise<string | undefined> {
  // Without XDG_RUNTIME_DIR, lavapipe prints a (harmless) error line per process.
  process.env.XDG_RUNTIME_DIR ??= os.tmpdir();
  let dawn: { create(flags: string[]): unknown; globals: object };
  try {
    dawn = await import('webgpu');
  } catch (err) {
    return `Dawn's Node binding (npm "webgpu") did not load: ${(err as Error).message.split('\n')[0]}`;
  }
  type Info = { vendor?: string; architecture?: string; description?: string; device?: string; isFallbackAdapter?: boolean };
  const gpu = dawn.create([]) as { requestAdapter(o?: object): Promise<{ info?: Info; isFallbackAdapter?: boolean } | null> };
  const found = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (found != null) {
    const info = found.info ?? {};
    adapter = { vendor: info.vendor ?? '', architecture: info.architecture ?? '', description: info.description ?? '', device: info.device ?? '', fallback: Boolean(info.isFallbackAdapter ?? found.isFallbackAdapter) };
  }
  if (found == null) return 'Dawn found no Vulkan adapter on this machine (for lavapipe on CI: mesa-vulkan-drivers from bookworm-backports, see scripts/setup-test-deps.sh)';
  Object.assign(globalThis, dawn.globals);
  Object.defineProperty(globalThis, 'navigator', { value: { gpu }, configurable: true, writable: true });
  // tfjs-backend-webgpu registers its backend at import, only where navigator.gpu exists.
  await import('@tensorflow/tfjs-backend-webgpu');
  return undefined;
}

let started: Promise<string | undefined> | undefined;

/**
 * Makes 'webgpu' a backend tfjs can switch to (and cpu and wasm, the references), leaving the
 * active backend as it was. Resolves with the reason webgpu cannot run here, or undefined.
 */
export function initWebgpu(): Promise<string | undefined> {
  started ??= (async () => {
    // Settle the active backend first: tfjs-backend-webgpu registers itself at a higher priority
    // than cpu and wasm, and must not become the default of other suites in this process.
    await initBackends();
    const previous = tf.getBackend();
    const why = await startWebgpu(); // LOADER: the production loader's init goes here
    if (why) return why;
    try {
      if (!(await tf.setBackend('webgpu'))) return 'tfjs-backend-webgpu did not initialise on the adapter Dawn found';
      registerWebgpuKernels();
    } finally {
      await tf.setBackend(previous);
    }
    return undefined;
  })();
  return started;
}

/** For a suite's `before`: starts webgpu, or prints why it cannot and skips the whole suite. */
export async function webgpuOrSkip(ctx: Mocha.Context): Promise<void> {
  ctx.timeout(60_000);
  const why = await initWebgpu();
  if (why) {
    console.log(`      skipped: ${why}`);
    ctx.skip();
  }
}

/** Runs `body` with `backend` active, then puts the previous one back. */
export async function onBackend<T>(backend: Backend, body: () => T | Promise<T>): Promise<T> {
  const previous = tf.getBackend();
  await tf.setBackend(backend);
  try {
    return await body();
  } finally {
    await tf.setBackend(previous);
  }
}

/** Runs `body` with tfjs-backend-webgpu's small-tensor hand-off to the cpu backend off: every kernel runs its shader. */
export async function shadersOnly<T>(body: () => Promise<T>): Promise<T> {
  const env = tf.env();
  const previous = env.getBool('WEBGPU_CPU_FORWARD');
  env.set('WEBGPU_CPU_FORWARD', false);
  try {
    return await body();
  } finally {
    env.set('WEBGPU_CPU_FORWARD', previous);
  }
}

/** The same computation on cpu (the reference) and on webgpu, its shaders only, within `rtol` of the reference's scale. */
export async function compareOnWebgpu(what: string, build: () => tf.Tensor, rtol = 1e-4): Promise<void> {
  const expected = await runOn('cpu', build);
  const actual = await shadersOnly(() => runOn('webgpu', build));
  assertClose(actual, expected, what, rtol);
}

/** Runs `body` with tfjs-backend-webgpu's matMul forced onto one of its four programs (-1: its own choice). */
export async function withMatMulProgram<T>(program: number, body: () => Promise<T>): Promise<T> {
  const env = tf.env();
  const previous = env.getNumber('WEBGPU_MATMUL_PROGRAM_TYPE');
  env.set('WEBGPU_MATMUL_PROGRAM_TYPE', program);
  try {
    return await body();
  } finally {
    env.set('WEBGPU_MATMUL_PROGRAM_TYPE', previous);
  }
}

/** tfjs-backend-webgpu's matMul programs (its MatMulProgramType). */
export const matMulPrograms = { reduce: 0, splitK: 1, smallOutput: 2, packed: 3 } as const;

/**
 * The webgpu backend for tests: the production loader (loadBackend('webgpu'): Dawn's dawn.node on
 * whatever Vulkan adapter the machine has, lavapipe on CI, tfjs-backend-webgpu on our device,
 * our webgpu kernels registered), beside cpu and wasm, the references. A suite calls
 * `webgpuOrSkip(this)` in its `before`: where no adapter exists the suite is skipped with the
 * reason printed (a failure in CI, which installs lavapipe), never passed.
 */
import { loadBackend } from '../../../../../src/training/backends/backend';
import { assertClose, initBackends, runOn, tf } from '../wasmKernels/tfHarness';

export type Backend = 'cpu' | 'wasm' | 'webgpu';

type Adapter = NonNullable<Awaited<ReturnType<typeof loadBackend>>['adapter']>;

let adapter: Adapter | undefined;

/** The adapter webgpu runs on, once `initWebgpu` has resolved without a reason. */
export function webgpuAdapter(): Adapter | undefined {
  return adapter;
}

let started: Promise<string | undefined> | undefined;

/**
 * Makes 'webgpu' a backend tfjs can switch to (and cpu and wasm), leaving the active backend as
 * it was. Resolves with the reason webgpu cannot run here, or undefined.
 */
export function initWebgpu(): Promise<string | undefined> {
  started ??= (async () => {
    await initBackends();
    const previous = tf.getBackend();
    try {
      const loaded = await loadBackend('webgpu');
      adapter = loaded.adapter;
      return undefined;
    } catch (err) {
      return (err as Error).message;
    } finally {
      await tf.setBackend(previous);
    }
  })();
  return started;
}

/** For a suite's `before`: starts webgpu, or prints why it cannot and skips the whole suite (fails in CI). */
export async function webgpuOrSkip(ctx: Mocha.Context): Promise<void> {
  ctx.timeout(60_000);
  const why = await initWebgpu();
  if (why) {
    if (process.env.CI === 'true') throw new Error(`no WebGPU adapter in CI: ${why}`);
    console.log(`      skipped: ${why} (bash scripts/setup-test-deps.sh apt installs lavapipe)`);
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

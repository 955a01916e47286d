/** The webgpu tests' guard: the adapters Dawn lists on this machine, or a skip that says why there are none (a failure in CI). */
import { listWebgpuAdapters, type WebgpuAdapter } from '../../../src/training/backends/webgpu';

export async function adaptersOrSkip(ctx: Mocha.Context): Promise<WebgpuAdapter[]> {
  const listed = await listWebgpuAdapters();
  if ('error' in listed) {
    // CI installs lavapipe first (.ci/run: setup-test-deps.sh apt): there a missing adapter is a failure, not a skip.
    if (process.env.CI === 'true') throw new Error(`no WebGPU adapter in CI: ${listed.error}`);
    console.log(`      skipped, no WebGPU adapter on this machine: ${listed.error} (bash scripts/setup-test-deps.sh apt installs lavapipe)`);
    ctx.skip();
  }
  return 'error' in listed ? [] : listed.adapters;
}

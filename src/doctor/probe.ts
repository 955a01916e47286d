/**
 * The child-process side of the doctor's probes (`gpu-workbench doctor --probe <what>`): loads one
 * native thing, prints one JSON line, exits. A backend that crashes the process (a native module
 * built for another ABI, a Vulkan driver that segfaults) or hangs ends only this probe.
 */
import { loadBackend } from '../training/backends/backend';
import { listWebgpuAdapters } from '../training/backends/webgpu';
import type { BackendChoice } from '../training/job/spec';

export async function runProbe(what: string): Promise<Record<string, unknown>> {
  if (what === 'webgpu-adapters') return { ...await listWebgpuAdapters() };
  const backend = /^backend:(.+)$/.exec(what);
  if (backend) {
    try {
      const b = await loadBackend(backend[1] as BackendChoice);
      return { ok: true, name: b.name, label: b.label, device: b.device, gpu: b.gpu, note: b.note };
    } catch (err) {
      return { ok: false, why: err instanceof Error ? err.message : String(err) };
    }
  }
  throw new Error(`unknown probe '${what}' (expected webgpu-adapters or backend:<name>)`);
}

/**
 * Why Dawn may see no Vulkan adapter on a machine whose NVIDIA driver works for CUDA: the pieces
 * between Dawn and the driver, each looked up on its own. Found on a real GPU machine (an H100 VM,
 * 2026-11-26): `nvidia-smi` and CUDA worked, /usr/share/vulkan/icd.d/nvidia_icd.json was there,
 * yet Dawn said "Found no drivers", because the Vulkan loader (libvulkan.so.1, package libvulkan1)
 * was not installed, and once it was, NVIDIA's ICD library (libGLX_nvidia.so.0) could not load
 * without glvnd's libGLdispatch.so.0 (package libglvnd0).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, isAbsolute, join } from 'node:path';

/** One Vulkan ICD manifest: where it is and the driver library it names. */
export interface IcdManifest { readonly path: string; readonly library?: string; readonly error?: string }

export interface VulkanFacts {
  /** `ldconfig -p`'s listing (the libraries the dynamic loader finds by name), or undefined when it could not run. */
  readonly ldconfig?: string;
  readonly icds: readonly IcdManifest[];
  /** Library paths the process adds (LD_LIBRARY_PATH), searched too. */
  readonly libraryPath?: readonly string[];
  /** Whether a file exists (injected by tests). */
  readonly exists?: (path: string) => boolean;
}

/** The folders the Vulkan loader reads ICD manifests from on Linux, or the files VK_DRIVER_FILES / VK_ICD_FILENAMES name instead. */
export function icdFiles(env: NodeJS.ProcessEnv = process.env): string[] {
  const named = env.VK_DRIVER_FILES || env.VK_ICD_FILENAMES;
  if (named) return named.split(':').filter(Boolean);
  const dirs = ['/etc/vulkan/icd.d', '/usr/local/share/vulkan/icd.d', '/usr/share/vulkan/icd.d'];
  return dirs.flatMap((d) => {
    try {
      return readdirSync(d).filter((f) => f.endsWith('.json')).sort().map((f) => join(d, f));
    } catch {
      return [];
    }
  });
}

/** An ICD manifest read: its `ICD.library_path`, or what was wrong with it. */
export function readIcd(path: string, read: (p: string) => string = (p) => readFileSync(p, 'utf8')): IcdManifest {
  try {
    const json = JSON.parse(read(path)) as { ICD?: { library_path?: unknown } };
    const library = json.ICD?.library_path;
    return typeof library === 'string' ? { path, library } : { path, error: 'no ICD.library_path in it' };
  } catch (err) {
    return { path, error: (err as Error).message.split('\n')[0] };
  }
}

/** Whether the dynamic loader finds `name` (a bare soname: in ldconfig's cache or on the library path; a path: that file). */
function finds(facts: VulkanFacts, name: string): boolean {
  const exists = facts.exists ?? existsSync;
  if (isAbsolute(name)) return exists(name);
  if (facts.ldconfig !== undefined && new RegExp(`^\\s*${name.replace(/[.+]/g, '\\$&')} \\(`, 'm').test(facts.ldconfig)) return true;
  return (facts.libraryPath ?? []).some((dir) => exists(join(dir, name)));
}

/**
 * What stands between Dawn and a GPU's Vulkan driver: evidence lines, and when something is missing
 * the fix and `causes`, one short line each, for the check's summary.
 */
export function diagnoseVulkan(facts: VulkanFacts): { evidence: string[]; fix?: string; causes: string[] } {
  const evidence: string[] = [];
  // Each missing piece once: its cause (a short line for the summary) and its fix.
  const missing: { cause: string; fix: string }[] = [];
  const loader = finds(facts, 'libvulkan.so.1');
  evidence.push(loader ? 'the Vulkan loader libvulkan.so.1 is installed' : 'the Vulkan loader libvulkan.so.1 is not installed (Dawn loads it to reach any Vulkan driver)');
  if (!loader) missing.push({ cause: 'the Vulkan loader libvulkan.so.1 is not installed', fix: 'install the Vulkan loader: apt-get install libvulkan1 (dnf install vulkan-loader)' });
  if (facts.icds.length === 0) {
    evidence.push('no Vulkan driver manifest (ICD) in /etc/vulkan/icd.d, /usr/local/share/vulkan/icd.d or /usr/share/vulkan/icd.d');
    missing.push({ cause: 'no Vulkan driver manifest (ICD) is installed', fix: 'no Vulkan driver is installed: NVIDIA\'s driver ships nvidia_icd.json with it (in a container, NVIDIA_DRIVER_CAPABILITIES must include graphics, or set VK_DRIVER_FILES to the driver\'s nvidia_icd.json)' });
  }
  for (const icd of facts.icds) {
    if (icd.error || !icd.library) {
      evidence.push(`${icd.path}: unreadable (${icd.error ?? 'no library'})`);
      continue;
    }
    const ok = finds(facts, icd.library);
    evidence.push(`${icd.path}: driver library ${icd.library}${ok ? '' : ', which the dynamic loader does not find'}`);
    if (!ok) missing.push({ cause: `the driver library ${icd.library} of ${icd.path} is missing`, fix: `the driver library ${icd.library} of ${icd.path} is missing: install the driver's Vulkan part (or its library folder in ld.so.conf)` });
    // NVIDIA's Vulkan driver lives in its GLX library, which is a glvnd vendor library: it needs glvnd's dispatcher.
    if (ok && /GLX_nvidia|EGL_nvidia/.test(basename(icd.library))) {
      const glvnd = finds(facts, 'libGLdispatch.so.0');
      evidence.push(glvnd ? 'glvnd\'s libGLdispatch.so.0, which NVIDIA\'s Vulkan driver needs, is installed' : 'glvnd\'s libGLdispatch.so.0 is not installed: NVIDIA\'s Vulkan driver (libGLX_nvidia) cannot load without it, and Dawn then says "Found no drivers"');
      if (!glvnd) missing.push({ cause: 'glvnd\'s libGLdispatch.so.0, which NVIDIA\'s Vulkan driver needs, is not installed', fix: 'install glvnd: apt-get install libglvnd0 (dnf install libglvnd)' });
    }
  }
  const causes = missing.map((m) => m.cause);
  return missing.length ? { evidence, fix: `${missing.map((m) => m.fix).join('; ')}.`, causes } : { evidence, causes };
}

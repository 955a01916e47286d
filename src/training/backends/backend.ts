/**
 * Picks the TF.js backend a worker really runs on, best first: tfjs-node-gpu (libtensorflow
 * with CUDA), webgpu on a hardware adapter (Dawn over Vulkan, webgpu.ts), tfjs-node
 * (libtensorflow on CPU), wasm, cpu. A software WebGPU adapter (lavapipe) is only used when the
 * job asks for `webgpu` by name: on a CPU our wasm backend is faster. The two native packages are optional
 * dependencies whose install downloads libtensorflow and fails offline, so they are loaded with
 * a guarded require at run time (through `createRequire`, which webpack leaves alone) and the
 * reason each one was skipped is kept for the job's start line. Nothing here claims a GPU the
 * process cannot see.
 */
import * as tf from '@tensorflow/tfjs-core';
import * as tfl from '@tensorflow/tfjs-layers';
import '@tensorflow/tfjs-backend-cpu';
import { setWasmPaths } from '@tensorflow/tfjs-backend-wasm';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { BackendChoice } from '../job/spec';
import { gemmOffByEnvironment, relaxedSimdAvailable } from './gemm';
import { guardWasmHeap } from './oom';
import { registerWebgpuKernels } from './webgpuKernels/index';
import type { LoadedBackend, Tf } from './types';
import { uploadThroughWriteBuffer } from './webgpuUpload';
import { adapterLabel, checkPin, openWebgpu, parseBusIds, pinEnv, type Gpu } from './webgpu';

const runtimeRequire = createRequire(__filename);

/** Loads an optional package, or says in a few words why it cannot be loaded. */
function tryRequire(pkg: string): { ok: true } | { ok: false; why: string } {
  try {
    runtimeRequire(pkg);
    return { ok: true };
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code === 'MODULE_NOT_FOUND' && e.message.includes(pkg)) return { ok: false, why: `${pkg} is not installed` };
    return { ok: false, why: `${pkg} failed to load: ${(e.message ?? String(err)).split('\n')[0]}` };
  }
}

/** The folder holding tfjs-backend-wasm's .wasm files: next to the bundle (dist/) or in node_modules. */
export function locateWasmDir(from: string = __dirname): string | undefined {
  const file = 'tfjs-backend-wasm-simd.wasm';
  if (existsSync(join(from, file))) return from;
  let dir = from;
  for (;;) {
    const candidate = join(dir, 'node_modules', '@tensorflow', 'tfjs-backend-wasm', 'dist');
    if (existsSync(join(candidate, file))) return candidate;
    const up = dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
}

/** Counts the GPUs this process can see (after CUDA_VISIBLE_DEVICES), via `nvidia-smi -L`; 0 without a driver. */
function visibleGpus(): number {
  const visible = process.env.CUDA_VISIBLE_DEVICES;
  if (visible !== undefined && visible.trim() === '') return 0;
  try {
    const out = execFileSync('nvidia-smi', ['-L'], { encoding: 'utf8', timeout: 5000, stdio: ['ignore', 'pipe', 'ignore'] });
    const all = out.split('\n').filter((l) => l.startsWith('GPU ')).length;
    return visible === undefined ? all : Math.min(all, visible.split(',').length);
  } catch {
    return 0;
  }
}

/**
 * This worker's GPU (the job's device number, which the coordinator puts in
 * CUDA_VISIBLE_DEVICES, numbered as nvidia-smi and the GPU panel number them) pinned for Dawn by
 * its PCI address; undefined where nvidia-smi lists no GPU (nothing to pin), else why not.
 */
async function pinThisWorker(): Promise<{ ok: true; index: number; busId: string } | { ok: false; why: string } | undefined> {
  let csv: string;
  try {
    csv = execFileSync('nvidia-smi', ['--query-gpu=index,pci.bus_id', '--format=csv,noheader'], { encoding: 'utf8', timeout: 5000, stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return undefined;
  }
  const buses = parseBusIds(csv);
  if (buses.size === 0) return undefined;
  const visible = process.env.CUDA_VISIBLE_DEVICES ?? '';
  if (!/^\d+$/.test(visible)) return { ok: false, why: `webgpu not pinned to one GPU: CUDA_VISIBLE_DEVICES is '${visible}', not one GPU index` };
  const index = Number(visible);
  const busId = buses.get(index);
  if (!busId) return { ok: false, why: `webgpu not pinned: nvidia-smi lists no GPU ${index}` };
  const checked = await checkPin(busId);
  return checked.ok ? { ok: true, index, busId } : { ok: false, why: `webgpu not pinned to GPU ${index} (PCI ${busId}), so on whichever adapter Dawn ranks first: ${checked.why}` };
}

let wasmKernelsRegistered = false;

/** Registers our own wasm kernels (missing gradients, transposed matMul) if that module is built. */
function registerOurWasmKernels(notes: string[]): void {
  if (wasmKernelsRegistered) return;
  wasmKernelsRegistered = true;
  let mod: { registerWasmKernels?: () => void } | undefined;
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    mod = require('./wasmKernels/index') as { registerWasmKernels?: () => void };
  } catch {
    return; // not built: the shipped wasm kernels only
  }
  try {
    mod.registerWasmKernels?.();
  } catch (err) {
    notes.push(`our wasm kernels were not registered: ${(err as Error).message}`);
  }
  // Our matMul's FMA tiles (and the conv gradient's im2col, same module) need WebAssembly relaxed SIMD; Node 20 has it behind a V8 flag, set here (a worker process, before its first matMul).
  if (gemmOffByEnvironment) notes.push('matMul on XNNPACK without FMA: GPU_WORKBENCH_WASM_GEMM=xnnpack');
  else if (!relaxedSimdAvailable(true)) notes.push(`matMul on XNNPACK without FMA: this runtime (V8 ${process.versions.v8}) has no WebAssembly relaxed SIMD`);
}

async function activate(name: string): Promise<boolean> {
  return (await activateOrWhy(name)) === undefined;
}

/** Makes `name` the backend; undefined when it is, else why not. */
async function activateOrWhy(name: string): Promise<string | undefined> {
  try {
    if (!(await tf.setBackend(name))) return `the ${name} backend did not initialise`;
    await tf.ready();
    return tf.getBackend() === name ? undefined : `the ${name} backend did not initialise`;
  } catch (err) {
    return `the ${name} backend failed to initialise: ${(err as Error).message?.split('\n')[0] ?? String(err)}`;
  }
}

/**
 * The webgpu backend on the adapter Dawn ranks first, with its device's limits raised to the
 * adapter's and its buffers guarded (webgpu.ts). `forced` (the job asked for webgpu) takes a
 * software adapter too; auto does not.
 */
async function loadWebgpu(api: Tf, forced: boolean, extra: string[], injected: Gpu | undefined): Promise<LoadedBackend | { why: string }> {
  // One GPU per worker: pinned by PCI address before Dawn's instance exists (webgpu.ts, checkPin).
  const pin = injected ? undefined : await pinThisWorker();
  if (pin?.ok) Object.assign(process.env, pinEnv(pin.busId));
  else if (pin) extra.push(pin.why);
  // GPU_WORKBENCH_DAWN_FLAGS: extra flags for dawn.node's create(), space-separated, e.g.
  // "enable-dawn-features=skip_validation" (Dawn toggles; for measuring, bench/webgpu/latency.ts).
  const flags = (process.env.GPU_WORKBENCH_DAWN_FLAGS ?? '').split(/\s+/).filter(Boolean);
  const got = await openWebgpu({ allowSoftware: forced, ...(flags.length ? { flags } : {}), ...(injected ? { gpu: injected } : {}) });
  if (!got.ok) return { why: got.why };
  const { gpu, adapter, device, info, memory } = got.opened;
  // Required before navigator.gpu exists: the package registers its own factory (Dawn's first adapter, its own limits) when it finds navigator.gpu at load; ours uses our device.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { WebGPUBackend } = require('@tensorflow/tfjs-backend-webgpu') as { WebGPUBackend: new (device: unknown, info?: unknown) => tf.KernelBackend };
  // Our kernels in place of those tfjs-backend-webgpu 4.22 computes differently from cpu (webgpuKernels/: MaxPoolGrad's ties).
  registerWebgpuKernels();
  // Its constructor checks navigator.gpu (Node 20 has no navigator; Node 21+ has one without gpu).
  const g = globalThis as { navigator?: object };
  if (g.navigator) Object.defineProperty(g.navigator, 'gpu', { value: gpu, configurable: true });
  else Object.defineProperty(g, 'navigator', { value: { gpu }, configurable: true, writable: true });
  if (tf.findBackendFactory('webgpu')) tf.removeBackend('webgpu');
  // Uploads through queue.writeBuffer instead of a new staging buffer per tensor (webgpuUpload.ts: most of an Adam step on an H100).
  tf.registerBackend('webgpu', () => {
    const backend = new WebGPUBackend(device, info);
    uploadThroughWriteBuffer(backend);
    return backend;
  }, 0);
  const why = await activateOrWhy('webgpu');
  if (why) {
    device.destroy();
    return { why: `webgpu on ${adapterLabel(adapter)}: ${why}` };
  }
  if (adapter.software) extra.push(`the webgpu adapter is software, its shaders run on the CPU: ${adapterLabel(adapter)}`);
  return {
    tf: api,
    name: 'webgpu',
    label: 'webgpu (Dawn)',
    gpu: !adapter.software,
    device: pin?.ok && !adapter.software ? `gpu:${pin.index} (PCI ${pin.busId}, webgpu adapter ${adapterLabel(adapter)})` : `${adapter.software ? 'cpu' : 'gpu'} (webgpu adapter ${adapterLabel(adapter)})`,
    adapter,
    outOfMemory: memory.failure,
    note: '',
  };
}

/**
 * Loads the best backend allowed by `choice`. A forced backend that cannot load is an error
 * that says why; `auto` falls through to the next one and remembers why. `opts.webgpu`: the
 * dawn.node instance to ask for an adapter (tests hand in one whose adapter says it is hardware).
 */
export async function loadBackend(choice: BackendChoice, opts: { webgpu?: Gpu } = {}): Promise<LoadedBackend> {
  // Production mode: no debug checks, and no "install our node backend" banner in the worker's output.
  tf.enableProdMode();
  const api = { ...tf, ...tfl } as Tf;
  const skipped: string[] = [];
  const extra: string[] = [];
  const order: readonly Exclude<BackendChoice, 'auto'>[] = choice === 'auto' ? autoOrder : [choice];
  for (const candidate of order) {
    switch (candidate) {
      case 'tensorflow-gpu':
      case 'tensorflow': {
        const pkg = candidate === 'tensorflow-gpu' ? '@tensorflow/tfjs-node-gpu' : '@tensorflow/tfjs-node';
        const loaded = tryRequire(pkg);
        if (!loaded.ok) {
          skipped.push(loaded.why);
          break;
        }
        if (!(await activate('tensorflow'))) {
          skipped.push(`${pkg} loaded but its 'tensorflow' backend did not initialise`);
          break;
        }
        const gpus = candidate === 'tensorflow-gpu' ? visibleGpus() : 0;
        const cuda = process.env.CUDA_VISIBLE_DEVICES;
        if (candidate === 'tensorflow-gpu' && gpus === 0) skipped.push(`${pkg} loaded but no GPU is visible to this process (nvidia-smi -L lists none)`);
        return {
          tf: api,
          name: 'tensorflow',
          label: pkg,
          gpu: gpus > 0,
          device: gpus > 0 ? `gpu:${cuda ?? '0'} (CUDA_VISIBLE_DEVICES=${cuda ?? 'unset'})` : 'cpu',
          note: notes(skipped, extra, gpus > 0),
        };
      }
      case 'webgpu': {
        const got = await loadWebgpu(api, choice === 'webgpu', extra, opts.webgpu);
        if ('why' in got) {
          skipped.push(got.why);
          break;
        }
        return { ...got, note: notes(skipped, extra, got.gpu) };
      }
      case 'wasm': {
        const dir = locateWasmDir();
        if (!dir) {
          skipped.push('the wasm backend\'s .wasm files were not found next to the bundle or in node_modules');
          break;
        }
        try {
          setWasmPaths(`${dir}/`);
        } catch {
          // already set by an earlier call in this process
        }
        if (!(await activate('wasm'))) {
          skipped.push('the wasm backend did not initialise');
          break;
        }
        registerOurWasmKernels(extra);
        // Every worker on wasm (single, ddp ranks, dp replicas, pipeline stages): a tensor the heap cannot hold is an OutOfMemoryError, not a corrupted heap.
        guardWasmHeap(api);
        return { tf: api, name: 'wasm', label: 'wasm', gpu: false, device: 'cpu', note: notes(skipped, extra, false) };
      }
      case 'cpu':
        if (!(await activate('cpu'))) throw new Error('the TF.js cpu backend did not initialise');
        return { tf: api, name: 'cpu', label: 'cpu', gpu: false, device: 'cpu', note: notes(skipped, extra, false) };
    }
  }
  throw new Error(`backend "${choice}" is not available: ${skipped.join('; ')}`);
}

/** What `auto` tries, best first. */
export const autoOrder: readonly Exclude<BackendChoice, 'auto'>[] = ['tensorflow-gpu', 'webgpu', 'tensorflow', 'wasm', 'cpu'];

function notes(skipped: string[], extra: string[], gpu: boolean): string {
  const parts = [...(gpu ? skipped.map((s) => `skipped: ${s}`) : skipped.length ? [`no GPU: ${skipped[0]}`, ...skipped.slice(1)] : ['no GPU']), ...extra];
  return parts.join('; ');
}

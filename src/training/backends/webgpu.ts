/**
 * WebGPU through Dawn: the `webgpu` package's prebuilt `dawn.node` (N-API, so it loads in Node
 * and in VS Code's Electron alike) over the platform's Vulkan (Metal, D3D12) driver. Nothing
 * else is needed on the machine: no CUDA toolkit, no libtensorflow.
 *
 * The package's own entry (index.js) is an ES module whose only work is to `require` the
 * platform's dawn.node, so we load dawn.node ourselves: from next to the bundle (webpack
 * copies the packaged platform's file into dist/) or from node_modules/webgpu/dist/<platform>/.
 *
 * Adapters: dawn.node's `requestAdapter` answers one adapter, the first of Dawn's enumeration
 * whose device name contains the `adapter=` flag; asked for a name no adapter has, it rejects
 * with the list of all of them. `listWebgpuAdapters` reads that list, then asks for each name,
 * in a child process (Dawn writes warnings to the process's stderr and a driver may crash).
 *
 * Software adapters (Mesa's lavapipe/llvmpipe, SwiftShader: `isFallbackAdapter`, or
 * architecture `software`) run the very same shaders on the CPU, slowly: `auto` never picks
 * one (our wasm backend is faster there), a job gets one only by asking for `webgpu` by name.
 *
 * Out of memory: tfjs-backend-webgpu creates buffers with no error scope, so a buffer larger
 * than the device's limits is a validation error printed from deep inside Dawn and the tensor
 * reads as garbage, and a failed allocation or a lost device surfaces, if at all, at the next
 * read. `guardWebgpuMemory` checks every buffer against the limits (an `OutOfMemoryError`
 * naming the limit) and turns Dawn's out-of-memory errors and a lost device into the same
 * `OutOfMemoryError` the wasm workers raise, so Find Max Batch Size works on GPUs.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { OutOfMemoryError } from './oom';

/** One adapter as Dawn reports it. */
export interface WebgpuAdapter {
  /** Its place in Dawn's enumeration (the order of the platform's driver, e.g. Vulkan's physical devices). */
  index: number;
  vendor: string;
  architecture: string;
  /** The device name, as dawn.node's `info.device` has it. */
  device: string;
  /** The driver's own description: "NVIDIA: 580.65.06", "llvmpipe: Mesa 25.0.7 (LLVM 15.0.6)". */
  description: string;
  /** The driver's version part of the description, where it has one. */
  driver?: string;
  /** A CPU implementation (lavapipe, SwiftShader): never picked by `auto`. */
  software: boolean;
  limits: { maxBufferSize: number; maxStorageBufferBindingSize: number };
}

// The few WebGPU types we touch; the project's TypeScript libs declare none of them.
export interface GpuAdapterInfo {
  readonly vendor: string;
  readonly architecture: string;
  readonly device: string;
  readonly description: string;
  readonly isFallbackAdapter?: boolean;
}
export type GpuLimits = Record<string, number>;
export interface GpuBufferDescriptor { size: number; usage: number; mappedAtCreation?: boolean; label?: string }
export interface GpuDevice {
  readonly limits: GpuLimits;
  readonly lost: Promise<{ reason: string; message: string }>;
  createBuffer(descriptor: GpuBufferDescriptor): unknown;
  addEventListener(type: 'uncapturederror', listener: (event: { error: { message: string; constructor: { name: string } } }) => void): void;
  destroy(): void;
}
export interface GpuAdapter {
  readonly info: GpuAdapterInfo;
  readonly limits: GpuLimits;
  readonly features: ReadonlySet<string>;
  requestDevice(descriptor?: { requiredLimits?: Record<string, number>; requiredFeatures?: string[] }): Promise<GpuDevice>;
}
export interface Gpu { requestAdapter(options?: { powerPreference?: 'high-performance' | 'low-power' }): Promise<GpuAdapter | null> }
interface DawnModule { create(flags: string[]): Gpu; globals: Record<string, unknown> }

/** The platform folder of the `webgpu` package's dist/: linux-x64, darwin-universal, win32-x64. */
export function dawnPlatform(platform: string = process.platform, arch: string = process.arch): string {
  return `${platform}-${platform === 'darwin' ? 'universal' : arch}`;
}

/** dawn.node next to the bundle (dist/dawn.node) or in node_modules/webgpu/dist/<platform>/. */
export function locateDawnNode(from: string = __dirname): string | undefined {
  if (existsSync(join(from, 'dawn.node'))) return join(from, 'dawn.node');
  let dir = from;
  for (;;) {
    const candidate = join(dir, 'node_modules', 'webgpu', 'dist', dawnPlatform(), 'dawn.node');
    if (existsSync(candidate)) return candidate;
    const up = dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
}

let dawn: DawnModule | { error: string } | undefined;

/** Loads dawn.node once per process and puts WebGPU's globals (GPUBufferUsage, ...) on globalThis, where tfjs-backend-webgpu looks for them. */
export function loadDawn(): DawnModule | { error: string } {
  if (dawn) return dawn;
  const path = locateDawnNode();
  if (!path) return (dawn = { error: `the webgpu package's dawn.node for ${dawnPlatform()} was found neither next to the bundle nor in node_modules/webgpu/dist` });
  try {
    const mod = createRequire(__filename)(path) as DawnModule;
    Object.assign(globalThis, mod.globals);
    dawn = mod;
  } catch (err) {
    dawn = { error: `${path} failed to load: ${(err as Error).message.split('\n')[0]}` };
  }
  return dawn;
}

/** Software (a CPU implementation of Vulkan): Dawn's fallback flag, architecture `software`, or a known CPU driver's name. */
export function isSoftwareAdapter(info: Pick<GpuAdapterInfo, 'vendor' | 'architecture' | 'device' | 'description' | 'isFallbackAdapter'>): boolean {
  return info.isFallbackAdapter === true || info.architecture === 'software' || /llvmpipe|lavapipe|swiftshader/i.test(`${info.device} ${info.description}`);
}

/** An adapter as we report it, from what dawn.node says of it. */
export function describeAdapter(index: number, info: GpuAdapterInfo, limits: GpuLimits): WebgpuAdapter {
  // Dawn's Vulkan description is "<driverName>: <driverInfo>" (VK_KHR_driver_properties).
  const colon = info.description.indexOf(': ');
  const driver = colon > 0 ? info.description.slice(colon + 2).trim() : '';
  return {
    index,
    vendor: info.vendor,
    architecture: info.architecture,
    device: info.device,
    description: info.description,
    ...(driver ? { driver } : {}),
    software: isSoftwareAdapter(info),
    limits: { maxBufferSize: limits.maxBufferSize, maxStorageBufferBindingSize: limits.maxStorageBufferBindingSize },
  };
}

/** One line for people: `llvmpipe-llvm-15-0-6-256-bits- (mesa, software; driver: llvmpipe: Mesa 25.0.7 (LLVM 15.0.6))`, `<device> (nvidia, <architecture>; driver: NVIDIA: 580.65.06)`. */
export function adapterLabel(a: WebgpuAdapter): string {
  const what = [a.vendor || 'vendor unknown', a.architecture || 'architecture unknown', ...(a.software && a.architecture !== 'software' ? ['software'] : [])];
  return `${a.device || 'unnamed adapter'} (${what.join(', ')}${a.description ? `; driver: ${a.description}` : ''})`;
}

/** The adapter names in dawn.node's answer to an `adapter=` flag no adapter has: "Available adapters:\n * backend: 'vulkan', name: '...'". */
export function parseAdapterList(message: string): { backend: string; name: string }[] {
  const out: { backend: string; name: string }[] = [];
  for (const line of message.split('\n')) {
    const m = /^ \* backend: '([^']*)', name: '(.*)'$/.exec(line);
    if (m) out.push({ backend: m[1], name: m[2] });
  }
  return out;
}

/** Dawn's notice on lavapipe that it capped two limits nobody here uses; said on stderr at every adapter request. */
export const dawnNoisePattern = /^Warning: maxDynamic\w+PerPipelineLayout artificially reduced from \d+ to \d+ to fit dynamic offset allocation limit\.$/;

/** A flag value no adapter's name contains, so that dawn.node answers with the list of them all. */
const noSuchAdapter = 'adapter=\u0001gpu-workbench-list';

/** The script the listing child runs: plain Node, given dawn.node's path; prints one JSON line. */
const listScript = `
const { create } = require(process.argv[1]);
(async () => {
  let list = '';
  try {
    // Resolves null when Dawn has no adapter at all; rejects with the list when it has some.
    if (await create([${JSON.stringify(noSuchAdapter)}]).requestAdapter()) { console.log(JSON.stringify({ error: 'dawn.node answered an adapter for a name none has' })); return; }
  } catch (e) { list = String(e && e.message || e); }
  const out = [];
  for (const line of list.split('\\n')) {
    const m = /^ \\* backend: '([^']*)', name: '(.*)'$/.exec(line);
    if (!m) continue;
    const ad = await create(['adapter=' + m[2]]).requestAdapter({ powerPreference: 'high-performance' });
    if (!ad) continue;
    const i = ad.info;
    out.push({ info: { vendor: i.vendor, architecture: i.architecture, device: i.device, description: i.description, isFallbackAdapter: i.isFallbackAdapter }, limits: { maxBufferSize: ad.limits.maxBufferSize, maxStorageBufferBindingSize: ad.limits.maxStorageBufferBindingSize } });
  }
  console.log(JSON.stringify({ adapters: out }));
})().catch((e) => console.log(JSON.stringify({ error: String(e && e.message || e).split('\\n')[0] })));
`;

/**
 * Every adapter Dawn sees on this machine, best first as Dawn orders them, each with its
 * vendor, architecture, driver and limits; or why none can be listed (no dawn.node, no
 * Vulkan driver). Runs Dawn in a child process: its stderr (warnings, a driver's complaints)
 * never reaches ours, and a driver that crashes takes only the child down.
 */
export async function listWebgpuAdapters(): Promise<{ adapters: WebgpuAdapter[] } | { error: string }> {
  const r = await listInChild({});
  return 'stderr' in r ? r.result : r;
}

/** The listing, in a child process with `env` added to ours; with the child's stderr (the device-select layer's debug lines). */
async function listInChild(env: NodeJS.ProcessEnv): Promise<{ result: { adapters: WebgpuAdapter[] } | { error: string }; stderr: string } | { error: string }> {
  const path = locateDawnNode();
  if (!path) return { error: `the webgpu package's dawn.node for ${dawnPlatform()} was found neither next to the bundle nor in node_modules/webgpu/dist` };
  const r = await new Promise<{ stdout: string; stderr: string; err: Error | null }>((resolve) => {
    execFile(process.execPath, ['-e', listScript, path], { env: { ...process.env, ...env, ELECTRON_RUN_AS_NODE: '1' }, timeout: 30_000, maxBuffer: 1 << 20 }, (err, stdout, stderr) => resolve({ stdout, stderr, err }));
  });
  return { result: readListing(r), stderr: r.stderr };
}

function readListing(r: { stdout: string; stderr: string; err: Error | null }): { adapters: WebgpuAdapter[] } | { error: string } {
  const stderr = r.stderr.split('\n').filter((l) => l.trim() !== '' && !dawnNoisePattern.test(l) && !l.startsWith('device-select:') && !/^(selectable devices:| {2}GPU \d+: )/.test(l));
  const line = r.stdout.trim().split('\n').pop() ?? '';
  let answer: { adapters?: { info: GpuAdapterInfo; limits: GpuLimits }[]; error?: string };
  try {
    answer = JSON.parse(line) as typeof answer;
  } catch {
    const why = r.err ? `${r.err.message.split('\n')[0]}` : 'no answer';
    return { error: `listing WebGPU adapters failed: ${why}${stderr.length ? `: ${stderr.slice(-2).join(' | ')}` : ''}` };
  }
  if (answer.error) return { error: answer.error };
  const adapters = (answer.adapters ?? []).map((a, i) => describeAdapter(i, a.info, a.limits));
  if (adapters.length === 0) return { error: `Dawn found no ${process.platform === 'linux' ? 'Vulkan ' : ''}adapter: no GPU driver with ${process.platform === 'linux' ? 'a Vulkan ICD (NVIDIA\'s driver ships one; Mesa\'s mesa-vulkan-drivers for others and for lavapipe)' : 'WebGPU support'} is installed` };
  return { adapters };
}

/**
 * One physical GPU per worker. Dawn's own `adapter=<name>` flag matches device names, which two
 * identical GPUs share, and dawn.node's JS adapter info has no PCI address. Mesa's Vulkan
 * device-select layer (VK_LAYER_MESA_device_select, an implicit layer that mesa-vulkan-drivers
 * installs and the Vulkan loader applies to every ICD, NVIDIA's included) can: with
 * `DRI_PRIME=pci-DDDD_BB_DD_F!` it exposes only the Vulkan device at that PCI address, and with
 * `MESA_VK_DEVICE_SELECT_DEBUG=1` it prints every device's PCI address and which rule picked
 * one. A worker finds its GPU's PCI bus id with `nvidia-smi --query-gpu=index,pci.bus_id` (the
 * numbering of nvidia-smi and the GPU panel), asks a child process with that environment which
 * device the layer exposes, and only when the layer says it picked that very address by it
 * does the worker take the same environment and name the GPU. Otherwise the worker is not
 * pinned and says why; it never names a GPU it is not on.
 */

/** nvidia-smi's PCI bus id ("00000000:41:00.0") as the device-select layer's DRI_PRIME tag ("pci-0000_41_00_0"), or undefined. */
export function pciTag(busId: string): string | undefined {
  const m = /^([0-9a-f]{1,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$/i.exec(busId.trim());
  if (!m) return undefined;
  const domain = parseInt(m[1], 16);
  return `pci-${domain.toString(16).padStart(4, '0')}_${m[2].toLowerCase()}_${m[3].toLowerCase()}_${m[4]}`;
}

/** A PCI address as the layer prints it ("0000:41:00.0"), from nvidia-smi's ("00000000:41:00.0"). */
export function shortBusId(busId: string): string | undefined {
  const tag = pciTag(busId);
  if (!tag) return undefined;
  const [domain, bus, dev, fn] = tag.slice(4).split('_');
  return `${domain}:${bus}:${dev}.${fn}`;
}

export interface DeviceSelectReport {
  /** The Vulkan devices the layer saw, in the loader's order: `  GPU 0: 10de:2330 "NVIDIA H100 80GB HBM3" discrete GPU 0000:41:00.0`. */
  readonly devices: { index: number; vendorId: number; deviceId: number; name: string; type: string; pci?: string }[];
  /** Which rule of the layer picked which device: `device-select: device_select_find_dri_prime_tag_default selected 1`. */
  readonly selected?: { rule: string; index: number };
}

/** The device-select layer's debug lines (MESA_VK_DEVICE_SELECT_DEBUG=1) on stderr; the last listing and selection win. */
export function parseDeviceSelectDebug(stderr: string): DeviceSelectReport {
  let devices: DeviceSelectReport['devices'] = [];
  let selected: DeviceSelectReport['selected'];
  for (const line of stderr.split('\n')) {
    if (line.startsWith('selectable devices:')) devices = [];
    const d = /^ {2}GPU (\d+): ([0-9a-f]+):([0-9a-f]+) "(.*)" (.+?)(?: ([0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]))?$/i.exec(line);
    if (d) devices.push({ index: Number(d[1]), vendorId: parseInt(d[2], 16), deviceId: parseInt(d[3], 16), name: d[4], type: d[5], ...(d[6] ? { pci: d[6].toLowerCase() } : {}) });
    const s = /^device-select: (\w+) selected (\d+)$/.exec(line);
    if (s) selected = { rule: s[1], index: Number(s[2]) };
  }
  return { devices, ...(selected ? { selected } : {}) };
}

/**
 * Whether the environment `env` (DRI_PRIME=pci-...!) puts Dawn on the GPU at `busId` and on it
 * alone, from what a child process with that environment saw: the layer's report and Dawn's
 * adapter list. Pure, so that recorded outputs test it.
 */
export function judgePin(busId: string, report: DeviceSelectReport, listed: { adapters: WebgpuAdapter[] } | { error: string }): { ok: true; adapter: WebgpuAdapter } | { ok: false; why: string } {
  const want = shortBusId(busId);
  if (!want) return { ok: false, why: `nvidia-smi's PCI bus id '${busId}' is not of the form 00000000:41:00.0` };
  if (report.devices.length === 0) return { ok: false, why: 'Mesa\'s Vulkan device-select layer is not active (install mesa-vulkan-drivers, which ships it; NODEVICE_SELECT must be unset)' };
  const at = report.devices.find((d) => d.pci === want);
  if (!at) return { ok: false, why: `no Vulkan device at PCI ${want} (the layer saw ${report.devices.map((d) => `${d.name}${d.pci ? ` at ${d.pci}` : ''}`).join(', ')})` };
  if (report.selected?.rule !== 'device_select_find_dri_prime_tag_default' || report.selected.index !== at.index) return { ok: false, why: `the device-select layer did not pick PCI ${want} by its address (${report.selected ? `${report.selected.rule} picked device ${report.selected.index}` : 'it picked none'})` };
  if ('error' in listed) return { ok: false, why: `Dawn saw no adapter with the GPU at PCI ${want} selected: ${listed.error}` };
  if (listed.adapters.length !== 1) return { ok: false, why: `Dawn still saw ${listed.adapters.length} adapters with only PCI ${want} exposed` };
  return { ok: true, adapter: listed.adapters[0] };
}

/** `nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader` as index -> PCI bus id. */
export function parseBusIds(csv: string): Map<number, string> {
  const out = new Map<number, string>();
  for (const line of csv.split('\n')) {
    const m = /^\s*(\d+)\s*,\s*([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s*$/.exec(line);
    if (m) out.set(Number(m[1]), m[2]);
  }
  return out;
}

/** The environment that exposes only the GPU at `busId` to Vulkan (and so to Dawn). */
export function pinEnv(busId: string): NodeJS.ProcessEnv {
  return { DRI_PRIME: `${pciTag(busId)}!` };
}

/** Asks a child process with `pinEnv(busId)` which adapter Dawn gets: the adapter when the layer pinned exactly that GPU, else why not. */
export async function checkPin(busId: string): Promise<{ ok: true; adapter: WebgpuAdapter } | { ok: false; why: string }> {
  if (!pciTag(busId)) return judgePin(busId, { devices: [] }, { error: '' });
  const r = await listInChild({ ...pinEnv(busId), MESA_VK_DEVICE_SELECT_DEBUG: '1', NODEVICE_SELECT: undefined });
  if (!('stderr' in r)) return { ok: false, why: r.error };
  return judgePin(busId, parseDeviceSelectDebug(r.stderr), r.result);
}

/** What `openWebgpu` got: the adapter, a device with limits up to the adapter's, and the guard's OOM state. */
export interface OpenedWebgpu {
  /** The dawn.node instance: tfjs-backend-webgpu wants it as navigator.gpu. */
  readonly gpu: Gpu;
  readonly adapter: WebgpuAdapter;
  readonly device: GpuDevice;
  readonly info: GpuAdapterInfo;
  readonly memory: WebgpuMemoryGuard;
}

/** The limits tfjs-backend-webgpu asks for, and the two we must have in full: every one up to what the adapter offers. */
export const requestedLimits = ['maxBufferSize', 'maxStorageBufferBindingSize', 'maxComputeWorkgroupStorageSize', 'maxComputeWorkgroupsPerDimension', 'maxComputeWorkgroupSizeX', 'maxComputeInvocationsPerWorkgroup'] as const;

/**
 * Opens the adapter Dawn ranks first (high performance) and a device on it with every limit
 * tfjs uses raised to the adapter's. `allowSoftware` false (auto) refuses a software adapter,
 * saying which it is. `flags` go to dawn.node's `create` (e.g. `adapter=<name>`).
 */
export async function openWebgpu(opts: { allowSoftware: boolean; flags?: string[]; gpu?: Gpu }): Promise<{ ok: true; opened: OpenedWebgpu } | { ok: false; why: string }> {
  let gpu = opts.gpu;
  if (!gpu) {
    const mod = loadDawn();
    if ('error' in mod) return { ok: false, why: mod.error };
    gpu = mod.create(opts.flags ?? []);
  }
  let adapter: GpuAdapter | null;
  try {
    adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  } catch (err) {
    return { ok: false, why: `Dawn found no matching adapter: ${(err as Error).message.split('\n').join(' ')}` };
  }
  if (!adapter) return { ok: false, why: `Dawn found no ${process.platform === 'linux' ? 'Vulkan ' : ''}adapter (no GPU driver with ${process.platform === 'linux' ? 'a Vulkan ICD' : 'WebGPU support'})` };
  const described = describeAdapter(0, adapter.info, adapter.limits);
  if (described.software && !opts.allowSoftware) return { ok: false, why: `webgpu: the only adapter is software, ${adapterLabel(described)}: auto leaves it to wasm, which is faster on a CPU (ask for "backend": "webgpu" to use it)` };
  const requiredLimits: Record<string, number> = {};
  for (const k of requestedLimits) if (typeof adapter.limits[k] === 'number') requiredLimits[k] = adapter.limits[k];
  const requiredFeatures = ['timestamp-query', 'bgra8unorm-storage'].filter((f) => adapter.features.has(f));
  let device: GpuDevice;
  try {
    device = await adapter.requestDevice({ requiredLimits, requiredFeatures });
  } catch (err) {
    return { ok: false, why: `webgpu: ${adapterLabel(described)} refused a device: ${(err as Error).message.split('\n')[0]}` };
  }
  return { ok: true, opened: { gpu, adapter: described, device, info: adapter.info, memory: guardWebgpuMemory(device) } };
}

const size = (bytes: number): string => bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(2)} GiB` : bytes >= 2 ** 20 ? `${(bytes / 2 ** 20).toFixed(1)} MiB` : `${bytes} bytes`;

/** The storage usage bit (GPUBufferUsage.STORAGE, 0x80). */
const storageUsage = 0x80;

export interface WebgpuMemoryGuard {
  /** Why the device can no longer be trusted (out of memory, lost), or undefined. */
  readonly failure: () => string | undefined;
}

/**
 * Guards `device`: a buffer over `maxBufferSize`, or a storage buffer over
 * `maxStorageBufferBindingSize`, throws an `OutOfMemoryError` naming the limit before Dawn
 * sees it; Dawn's out-of-memory errors and a lost device are remembered and thrown as an
 * `OutOfMemoryError` at the next buffer (and by `webgpuErrorAsOutOfMemory` for the error the
 * job then fails with).
 */
export function guardWebgpuMemory(device: GpuDevice): WebgpuMemoryGuard {
  let failed: string | undefined;
  const limits = { maxBufferSize: device.limits.maxBufferSize, maxStorageBufferBindingSize: device.limits.maxStorageBufferBindingSize };
  device.addEventListener('uncapturederror', (event) => {
    const e = event.error;
    if (e.constructor.name === 'GPUOutOfMemoryError' || /out of memory/i.test(e.message)) failed ??= `out of memory on the GPU: ${e.message.split('\n')[0]}`;
  });
  void device.lost.then((info) => {
    // destroy() is ours; any other loss mid-job is the device giving up, on a GPU most often for memory.
    if (info.reason !== 'destroyed') failed ??= `out of memory: the GPU device was lost (${info.message || info.reason})`;
  });
  const create = device.createBuffer.bind(device);
  device.createBuffer = (descriptor: GpuBufferDescriptor) => {
    if (failed) throw new OutOfMemoryError(failed);
    if (descriptor.size > limits.maxBufferSize) throw new OutOfMemoryError(`out of memory: a ${size(descriptor.size)} tensor is larger than this GPU's maxBufferSize (${size(limits.maxBufferSize)}, the most its adapter offers)`);
    if ((descriptor.usage & storageUsage) !== 0 && descriptor.size > limits.maxStorageBufferBindingSize) throw new OutOfMemoryError(`out of memory: a ${size(descriptor.size)} tensor is larger than this GPU's maxStorageBufferBindingSize (${size(limits.maxStorageBufferBindingSize)}, the most its adapter offers)`);
    return create(descriptor);
  };
  return { failure: () => failed };
}

/** What a worker on webgpu reports for `err`: an `OutOfMemoryError` once the device ran out of memory or was lost, else `err` itself. */
export function webgpuErrorAsOutOfMemory(failure: WebgpuMemoryGuard['failure'] | undefined, err: unknown): unknown {
  if (err instanceof OutOfMemoryError) return err;
  const why = failure?.();
  return why ? new OutOfMemoryError(why) : err;
}

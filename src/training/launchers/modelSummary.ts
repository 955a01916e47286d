/**
 * The companion's model messages (python/gpu_workbench/_modules.py) in words: the first step's model
 * summary (torchinfo-style rows for the job's log), the model's memory with its 16-bit estimates, a
 * module's shape error as a problem at the line where the module is made, and an out-of-memory error's
 * memory as a problem.
 */
import type { CompanionMessage, ModelMemory, MemoryPart } from '../../common/companionProtocol';
import type { LayerSummary } from '../job/events';
import type { ModuleShapeProblem, OomMemoryProblem } from './problems';
import { bytesText } from '../../common/units';
import { shapeHints } from './pythonErrors';

export { bytesText };

type Message<T extends CompanionMessage['type']> = Extract<CompanionMessage, { type: T }>;

/** A module as people name it: `fc (Linear)`, or the model's class for the model itself. */
export function moduleLabel(module: string, className: string): string {
  return module ? `${module} (${className})` : className;
}

function shapeText(shape: readonly number[] | null): string {
  return shape ? `[${shape.join(', ')}]` : '(no tensor)';
}

function partText(what: string, p: MemoryPart): string {
  return `${what} ${bytesText(p.bytes)}${p.measured ? '' : ` (estimated: ${p.note ?? 'no tensors yet'})`}`;
}

/**
 * Three lines: what the model takes as it is (measured from its tensors; a part that did not exist yet
 * is estimated and says so), what torch.autocast and what half parameters would make of it (estimated
 * from those numbers).
 */
export function modelMemoryLines(m: ModelMemory): string[] {
  const acts = !m.activations ? ''
    : !m.activations.measured && m.activations.bytes === 0 ? `, activations ${m.activations.note ?? 'not measured'}`
      : `, activations ${bytesText(m.activations.bytes)} (the leaf modules' outputs in the forward${m.activations.note ? `, ${m.activations.note}` : ''})`;
  const a = m.autocast;
  const h = m.halfParams;
  const saves = (total: number) => (total < m.totalBytes ? `, ${bytesText(m.totalBytes - total)} less` : '');
  return [
    `memory as it is, measured from the tensors: ${partText('parameters', m.params)}, ${partText('gradients', m.grads)}, ${partText('optimizer state', m.optimizerState)}${acts}; ${bytesText(m.totalBytes)} in all`,
    `with torch.autocast (bf16/fp16), estimated: ${bytesText(a.totalBytes)}${saves(a.totalBytes)}: parameters, gradients and optimizer state stay fp32 (${bytesText(a.params + a.grads + a.optimizerState)}), activations about half (${bytesText(a.activations)}), plus 16-bit copies of the weights it casts (${bytesText(a.weightCopies)})`,
    `with half parameters (model.half()), estimated: ${bytesText(h.totalBytes)}${saves(h.totalBytes)}: parameters ${bytesText(h.params)}, gradients ${bytesText(h.grads)}, optimizer state ${bytesText(h.optimizerState)}, activations ${bytesText(h.activations)} (fp16 weights lose precision: autocast is the safer change)`,
  ];
}

/** The summary's rows for `job/summary`: names indented by depth, the model by its class. */
export function summaryLayers(m: Message<'modelSummary'>): LayerSummary[] {
  return m.rows.map((r) => ({ name: `${'  '.repeat(r.depth)}${r.name || r.className}`, className: r.className, outputShape: shapeText(r.outputShape), params: r.params }));
}

/** The summary as the job's log shows it: one line per module, the totals and the memory. */
export function summaryText(m: Message<'modelSummary'>): string {
  const layers = summaryLayers(m);
  const w = Math.max(24, ...layers.map((l) => l.name.length + 2));
  const c = Math.max(14, ...layers.map((l) => l.className.length + 2));
  const s = Math.max(18, ...layers.map((l) => l.outputShape.length + 2));
  return [
    `model summary (rank ${m.rank}, first step): ${m.totalParams.toLocaleString('en-US')} parameters (${m.trainableParams.toLocaleString('en-US')} trainable)`,
    `  ${'layer'.padEnd(w)}${'class'.padEnd(c)}${'output shape'.padEnd(s)}parameters`,
    ...layers.map((l) => `  ${l.name.padEnd(w)}${l.className.padEnd(c)}${l.outputShape.padEnd(s)}${l.params.toLocaleString('en-US')}`),
    ...(m.rowsOmitted ? [`  … ${m.rowsOmitted.toLocaleString('en-US')} more module calls (the summary is cut to fit one message)`] : []),
    ...modelMemoryLines(m.memory),
  ].join('\n');
}

/** A module's shape error, at the line where the module is made (else where it was raised). */
export function moduleShapeProblem(m: Message<'moduleError'>): ModuleShapeProblem {
  const label = moduleLabel(m.module, m.className);
  const of = m.model ? ` of ${m.model}` : '';
  const where = m.definedAt ? ', made at this line' : '';
  const prev = m.previous ? ` The module before it, ${moduleLabel(m.previous.module, m.previous.className)}, produced ${shapeText(m.previous.outputShape)}.` : '';
  const raised = m.raisedAt ? ` Raised at ${m.raisedAt.file}:${m.raisedAt.line}.` : '';
  const place = m.definedAt ?? m.raisedAt;
  return {
    kind: 'module-shape',
    message: `${m.exception.type}: ${m.exception.message}`,
    explanation: `In module ${label}${of}${where}: ${m.repr}. It expected ${m.expected}; it got ${m.got}.${prev}${raised}`,
    hints: shapeHints(m.exception.message),
    ...(place ? { file: place.file, line: place.line } : {}),
    rank: m.rank,
    module: m.module,
    className: m.className,
    repr: m.repr,
    expected: m.expected,
    got: m.got,
    ...(m.previous ? { previous: { module: m.previous.module, className: m.previous.className, outputShape: m.previous.outputShape, ...(m.previous.definedAt ? { file: m.previous.definedAt.file, line: m.previous.definedAt.line } : {}) } } : {}),
    ...(m.raisedAt ? { raisedAt: m.raisedAt } : {}),
  };
}

/** The log line of a module's shape error. */
export function moduleShapeText(p: ModuleShapeProblem): string {
  const where = p.file ? ` (made at ${p.file}:${p.line ?? '?'})` : '';
  const prev = p.previous ? `; the module before it, ${moduleLabel(p.previous.module, p.previous.className)}, produced ${shapeText(p.previous.outputShape)}` : '';
  return `shape error in ${moduleLabel(p.module, p.className)}${where}: expected ${p.expected}, got ${p.got}${prev}`;
}

/** An out-of-memory error's memory, where it was raised. */
export function oomMemoryProblem(m: Message<'oomMemory'>): OomMemoryProblem {
  return {
    kind: 'oom-memory',
    message: `${m.exception.type}: ${m.exception.message}`,
    explanation: m.firstStepDone ? 'The model\'s memory, measured after its first step:' : 'The model\'s memory when it ran out, before its first optimizer step (what did not exist yet is estimated):',
    hints: [],
    memoryLines: modelMemoryLines(m.memory),
    ...(m.raisedAt ? { file: m.raisedAt.file, line: m.raisedAt.line } : {}),
    rank: m.rank,
  };
}

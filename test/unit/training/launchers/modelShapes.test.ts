import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseCompanionLine, type CompanionMessage, type ModelMemory } from '../../../../src/common/companionProtocol';
import { formatEvent } from '../../../../src/cli/train';
import type { JobEvent } from '../../../../src/training/job/events';
import { modelMemoryLines, moduleShapeProblem, oomMemoryProblem, summaryText } from '../../../../src/training/launchers/modelSummary';
import type { ScriptProblem } from '../../../../src/training/launchers/pythonErrors';
import { loadTorchrunJob, runTorchrun } from '../../../../src/training/launchers/torchrun';
import { problemDiagnostics, torchrunEndMessage } from '../../../../src/views/torchrun/torchrunFormat';
import { fixtures } from '../../../paths';

const dir = join(fixtures, 'torchrun', 'shapes');
const torchPython = '/usr/bin/python3';
const probe = spawnSync(torchPython, ['-c', 'import torch; print(torch.__version__)'], { encoding: 'utf8', timeout: 60_000 });
const torchMissing = probe.error ? `${torchPython} cannot be run` : probe.status !== 0 ? `${torchPython} has no torch: apt-get install -y python3-torch` : undefined;

const who = { v: 1, rank: 1, localRank: 1, worldSize: 2 };
const part = (bytes: number, measured = true) => ({ bytes, halfBytes: bytes / 2, measured });
/** The MLP of test/python/test_modules.py after its first Adam step (2372 parameters, batch 16). */
const mlpMemory: ModelMemory = {
  params: part(9488), grads: part(9488), optimizerState: { bytes: 18992, halfBytes: 9504, measured: true }, activations: part(8448), totalBytes: 46416,
  autocast: { params: 9488, grads: 9488, optimizerState: 18992, activations: 4224, weightCopies: 4744, totalBytes: 46936 },
  halfParams: { params: 4744, grads: 4744, optimizerState: 9504, activations: 4224, totalBytes: 23216 },
};
const parse = (m: Record<string, unknown>): CompanionMessage => {
  const r = parseCompanionLine(JSON.stringify({ ...who, ...m }));
  if (!r.ok) throw new Error(r.error);
  return r.message;
};
const shapeError = {
  type: 'moduleError', exception: { type: 'RuntimeError', message: 'mat1 and mat2 shapes cannot be multiplied (4x2048 and 1568x10)' },
  raisedAt: { file: '/w/net.py', line: 19 }, module: 'fc', className: 'Linear', repr: 'Linear(in_features=1568, out_features=10, bias=True)',
  expected: 'input with 1568 features (in_features)', got: 'input of 4x2048: 2048 features', definedAt: { file: '/w/net.py', line: 14 }, model: 'Net',
  previous: { module: 'features', className: 'Sequential', outputShape: [4, 8, 16, 16], definedAt: { file: '/w/net.py', line: 9 } },
};

describe('shape errors and the model\'s memory from the companion', function () {
  this.timeout(120_000);

  it('accepts the model messages and names what is wrong with a bad one', () => {
    const m = parse(shapeError);
    assert.equal(m.type, 'moduleError');
    assert.deepEqual(parse({ type: 'oomMemory', exception: { type: 'RuntimeError', message: 'out of memory' }, firstStepDone: false, memory: mlpMemory }), { type: 'oomMemory', rank: 1, localRank: 1, worldSize: 2, exception: { type: 'RuntimeError', message: 'out of memory' }, firstStepDone: false, memory: mlpMemory });
    const bad = (x: Record<string, unknown>) => { const r = parseCompanionLine(JSON.stringify({ ...who, ...x })); return r.ok ? 'accepted' : r.error; };
    assert.equal(bad({ ...shapeError, definedAt: { file: '/w/net.py', line: 0 } }), 'moduleError message: raisedAt and definedAt must be {file, line}');
    assert.equal(bad({ ...shapeError, expected: undefined }), 'moduleError message: needs module, className, repr, expected and got');
    assert.equal(bad({ type: 'modelSummary', rows: [{ name: 'fc', className: 'Linear', depth: 1, outputShape: [4, -1], params: 10 }], totalParams: 10, trainableParams: 10, memory: mlpMemory }), 'modelSummary message: rows must be a list of {name, className, depth, outputShape, params}');
    assert.equal(bad({ type: 'oomMemory', exception: { type: 'E', message: '' }, firstStepDone: true, memory: { ...mlpMemory, grads: { bytes: 1 } } }), 'oomMemory message: memory must have params, grads, optimizerState (bytes, halfBytes, measured), totalBytes, autocast and halfParams');
  });

  it('says which memory numbers are measured and which estimated, and the autocast and half-parameter estimates', () => {
    assert.deepEqual(modelMemoryLines(mlpMemory), [
      'memory as it is, measured from the tensors: parameters 9.27 KiB, gradients 9.27 KiB, optimizer state 18.5 KiB, activations 8.25 KiB (the leaf modules\' outputs in the forward); 45.3 KiB in all',
      'with torch.autocast (bf16/fp16), estimated: 45.8 KiB: parameters, gradients and optimizer state stay fp32 (37.1 KiB), activations about half (4.13 KiB), plus 16-bit copies of the weights it casts (4.63 KiB)',
      'with half parameters (model.half()), estimated: 22.7 KiB, 22.7 KiB less: parameters 4.63 KiB, gradients 4.63 KiB, optimizer state 9.28 KiB, activations 4.13 KiB (fp16 weights lose precision: autocast is the safer change)',
    ]);
    const before: ModelMemory = { ...mlpMemory, grads: { ...part(9488, false), note: 'as large as the trainable parameters (no gradient existed yet)' }, optimizerState: { ...part(18976, false), note: '2 copies of the trainable parameters (Adam, before its first step)' } };
    assert.match(modelMemoryLines(before)[0], /gradients 9\.27 KiB \(estimated: as large as the trainable parameters \(no gradient existed yet\)\), optimizer state 18\.5 KiB \(estimated: 2 copies of the trainable parameters \(Adam, before its first step\)\)/);
    // torch.compile: the companion cannot see the modules inside the graph (test_modules.py).
    const compiled: ModelMemory = { ...mlpMemory, activations: { bytes: 0, halfBytes: 0, measured: false, note: 'not measured: the model runs as a torch.compile graph, whose modules the companion does not see' } };
    assert.match(modelMemoryLines(compiled)[0], /optimizer state 18\.5 KiB, activations not measured: the model runs as a torch\.compile graph, whose modules the companion does not see; 45\.3 KiB in all$/);
  });

  it('writes the summary one line per module, and says how many were left out to fit one message', () => {
    const m = parse({ type: 'modelSummary', rows: [{ name: '', className: 'Sequential', depth: 0, outputShape: [16, 4], params: 0 }, { name: '0', className: 'Linear', depth: 1, outputShape: [16, 64], params: 2112 }], totalParams: 2372, trainableParams: 2372, memory: mlpMemory, rowsOmitted: 2 }) as Extract<CompanionMessage, { type: 'modelSummary' }>;
    const lines = summaryText(m).split('\n');
    assert.equal(lines[0], 'model summary (rank 1, first step): 2,372 parameters (2,372 trainable)');
    assert.match(lines[2], /^ {2}Sequential +Sequential +\[16, 4\] +0$/);
    assert.match(lines[3], /^ {4}0 +Linear +\[16, 64\] +2,112$/);
    assert.equal(lines[4], '  … 2 more module calls (the summary is cut to fit one message)');
    assert.equal(lines.length, 8);
  });

  it('puts a shape error at the line where the module is made, naming it, expected and got, and the shape before it; the raising line is related', () => {
    const exception: ScriptProblem = { kind: 'exception', exceptionType: 'RuntimeError', message: 'RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x2048 and 1568x10)', explanation: '', hints: [], file: '/w/net.py', line: 19, rank: 1 };
    const problem = moduleShapeProblem(parse(shapeError) as Extract<CompanionMessage, { type: 'moduleError' }>);
    const [shape, raised] = problemDiagnostics([problem, exception], '/w/net.py', '/w');
    assert.equal(shape.line, 13);
    assert.equal(shape.code, 'module-shape');
    assert.equal(shape.message.split('\n')[0], 'Shape error in fc (Linear) (rank 1): expected input with 1568 features (in_features), got input of 4x2048: 2048 features; the module before it produced [4, 8, 16, 16]');
    assert.match(shape.message, /In module fc \(Linear\) of Net, made at this line: Linear\(in_features=1568, out_features=10, bias=True\)\. .*The module before it, features \(Sequential\), produced \[4, 8, 16, 16\]\./);
    assert.match(shape.message, /set in_features=2048/);
    assert.deepEqual(shape.related.map((r) => [r.file, r.line]), [['/w/net.py', 18], ['/w/net.py', 8]]);
    assert.equal(raised.line, 18, 'the exception\'s own problem stays at the line that raised it');
  });

  it('shows an out-of-memory error\'s memory with that error\'s problem of the same rank, whichever came first, else on its own', () => {
    const memory = oomMemoryProblem(parse({ type: 'oomMemory', exception: { type: 'torch.cuda.OutOfMemoryError', message: 'CUDA out of memory.' }, raisedAt: { file: '/w/net.py', line: 30 }, firstStepDone: true, memory: mlpMemory }) as Extract<CompanionMessage, { type: 'oomMemory' }>);
    const oom: ScriptProblem = { kind: 'cuda-oom', message: 'CUDA out of memory. Tried to allocate 20.00 MiB', explanation: 'The GPU ran out of memory.', hints: [], file: '/w/net.py', line: 30, rank: 1 };
    for (const order of [[memory, oom], [oom, memory]]) {
      const d = problemDiagnostics(order, '/w/net.py', '/w');
      assert.equal(d.length, 1);
      assert.equal(d[0].code, 'cuda-oom');
      assert.match(d[0].message, /The model's memory, measured after its first step:\nmemory as it is, measured from the tensors: parameters 9\.27 KiB/);
      assert.match(d[0].message, /with torch\.autocast \(bf16\/fp16\), estimated: 45\.8 KiB/);
    }
    const failed = { type: 'job/failed', reason: 'CUDA out of memory', rank: 1, problem: oom } as const;
    assert.equal(torchrunEndMessage('net', failed, [oom, memory]), 'Training net (torchrun) failed on rank 1: CUDA out of memory at net.py:30. 1 problem in the Problems panel.', 'the memory is no problem of its own');
    const alone = problemDiagnostics([memory], '/w/net.py', '/w');
    assert.deepEqual([alone[0].code, alone[0].line], ['oom-memory', 29]);
    assert.match(alone[0].message, /^Out of memory \(rank 1\): CUDA out of memory\.\n/);
  });

  it('a real torchrun job with a shape bug: the problem is at the module\'s definition line, and the first step\'s summary is in the log', async function () {
    if (torchMissing) this.skip();
    const spec = loadTorchrunJob(join(dir, 'shape_bug.job.json'));
    const events: JobEvent[] = [];
    const final = await runTorchrun(spec, (e) => events.push(e)).finished;
    const logs = events.flatMap((e) => (e.type === 'job/log' ? [e.message] : []));
    assert.equal(final.type, 'job/failed', logs.join('\n'));
    const source = readFileSync(spec.script, 'utf8').split('\n');
    const lineOf = (text: string) => source.findIndex((l) => l.includes(text)) + 1;
    const problems = events.flatMap((e) => (e.type === 'job/log' && e.problem ? [e.problem] : []));
    const shapes = problems.filter((p) => p.kind === 'module-shape');
    // Both ranks hit the bug, but once one fails torchrun stops the other (SIGTERM): whether that one got to
    // report its own error first is a race, so one or both ranks' problems, each at fc's line.
    assert.ok(shapes.length >= 1 && shapes.length <= 2, logs.join('\n'));
    for (const p of shapes) assert.deepEqual([[0, 1].includes(p.rank ?? -1), p.file, p.line], [true, spec.script, lineOf('self.fc = nn.Linear')], logs.join('\n'));
    const diagnostics = problemDiagnostics(problems, spec.script, spec.cwd);
    const shape = diagnostics.find((d) => d.code === 'module-shape');
    assert.ok(shape, JSON.stringify(diagnostics));
    assert.equal(shape.line, lineOf('self.fc = nn.Linear') - 1);
    assert.match(shape.message.split('\n')[0], /^Shape error in fc \(Linear\) \((rank [01]|ranks 0, 1)\): expected input with 1568 features \(in_features\), got input of 4x2048: 2048 features; the module before it produced \[4, 8, 16, 16\]$/);
    assert.deepEqual(shape.related.map((r) => r.line), [lineOf('return self.fc(x)') - 1, lineOf('self.features = nn.Sequential(') - 1]);
    const raised = diagnostics.find((d) => d.code === 'exception');
    assert.equal(raised?.line, lineOf('return self.fc(x)') - 1, 'the traceback\'s problem stays at the failing line');
    // The first step's summary: rows and hand-counted parameters, in the log as people read it.
    const summaries = events.filter((e): e is Extract<JobEvent, { type: 'job/summary' }> => e.type === 'job/summary');
    assert.equal(summaries.length, 1);
    const s = summaries[0];
    assert.deepEqual(s.layers.map((l) => [l.name.trim(), l.outputShape, l.params]), [
      ['Net', '[4, 10]', 0], ['features', '[4, 8, 14, 14]', 0], ['features.0', '[4, 8, 28, 28]', 8 * 9 + 8], ['features.1', '[4, 8, 28, 28]', 0], ['features.2', '[4, 8, 14, 14]', 0], ['fc', '[4, 10]', 1568 * 10 + 10],
    ]);
    assert.equal(s.totalParams, 80 + 15690);
    assert.equal(s.memory?.params.bytes, (80 + 15690) * 4);
    assert.equal(s.memory?.optimizerState.bytes, 2 * (80 + 15690) * 4 + 4 * 4);
    const text = formatEvent(s, { every: 1 });
    assert.match(text, /^model summary \(rank \d, first step\): 15,770 parameters \(15,770 trainable\)\n {2}layer +class +output shape +parameters\n {2}Net +Net +\[4, 10\] +0\n/);
    assert.match(text, /\n {6}features\.0 +Conv2d +\[4, 8, 28, 28\] +80\n/);
    assert.match(text, /\nwith torch\.autocast \(bf16\/fp16\), estimated: /);
  });
});

/**
 * The OOM hints on a real GPU: each script of test/fixtures/torchrun/cuda/hints/ holds a hazard the
 * linter reports, NAME.fixed.py is what the linter's quick fixes make of it, and both ran on an
 * NVIDIA H200 under the companion (scripts/gpu-check.sh, steps hints-memory and hints-time), their
 * channels recorded in test/fixtures/torchrun/cuda/h200/hints/. These tests hold the linter to the
 * scripts that were measured (the same findings, the same fixed text: a change to a fix makes the
 * recordings stale and fails here), and read the recordings as the extension reads them: what the
 * hazard cost in CUDA memory, what the fix saved, and what the panel's growth check makes of it.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { rankMemoryOf, type RankMemory } from '../../../src/common/companionProtocol';
import { RankMemoryTracker } from '../../../src/common/rankMemory';
import { GrowthWatch, scriptLinter } from '../../../src/cli/growthWatch';
import { createLinter } from '../../../src/lint/linter';
import type { Finding } from '../../../src/lint/types';
import { growthHint, lintSource, pickGrowthFinding } from '../../../src/views/torchrun/rankMemoryFormat';
import { fixtures } from '../../paths';
import { channel, MiB, only } from './recordings';

const scripts = join(fixtures, 'torchrun', 'cuda', 'hints');
const recorded = join(fixtures, 'torchrun', 'cuda', 'h200', 'hints');

/** Each script, the findings (rule and 1-based line) the linter gives it. */
const expected: Record<string, [string, number][]> = {
  'heldout_sum.py': [['accumulated-loss', 36]],
  'train_sum.py': [['accumulated-loss', 33]],
  'eval_no_grad.py': [['missing-no-grad', 37]],
  'volatile_eval.py': [['volatile-variable', 40], ['missing-no-grad', 41]],
  'logits_kept.py': [['tensors-kept-for-logging', 41]],
  'empty_cache.py': [['empty-cache-in-loop', 34]],
  'to_device.py': [['model-to-device-in-loop', 26]],
};

/** The memory records of one recorded run (`heldout_sum`, `heldout_sum.fixed`), CUDA only, one per optimizer step. */
function steps(name: string): Extract<RankMemory, { kind: 'cuda' }>[] {
  const records = only(channel('h200', `hints/${name}.jsonl`), 'memory').map(rankMemoryOf);
  for (const [i, r] of records.entries()) {
    assert.equal(r.kind, 'cuda', `${name}: step ${r.step} on ${r.device}`);
    assert.equal(r.step, i + 1, `${name}: the steps in order`);
  }
  return records as Extract<RankMemory, { kind: 'cuda' }>[];
}

function growthOf(records: readonly RankMemory[]): ReturnType<RankMemoryTracker['growth']> {
  const tracker = new RankMemoryTracker();
  records.forEach((r) => tracker.add(r));
  return tracker.growth();
}

const allocated = (rs: readonly { allocatedBytes: number }[]) => rs.map((r) => r.allocatedBytes);
const peak = (rs: readonly { peakAllocatedBytes: number }[]) => rs.map((r) => r.peakAllocatedBytes);
const differences = (xs: readonly number[]) => xs.slice(1).map((x, i) => x - xs[i]);

describe('the OOM hints on an NVIDIA H200: the hazard and its quick fix, measured by the companion', () => {
  const findings = new Map<string, Finding[]>();
  const fixed = new Map<string, { text: string; findings: Finding[] }>();

  before(async () => {
    const linter = await createLinter();
    try {
      for (const name of Object.keys(expected)) {
        const path = join(scripts, name);
        const text = readFileSync(path, 'utf8');
        findings.set(name, linter.lintFile(path, text));
        const after = linter.fixFile(path, text);
        fixed.set(name, { text: after, findings: linter.lintFile(path, after) });
      }
    } finally {
      linter.dispose();
    }
  });

  for (const [name, want] of Object.entries(expected)) {
    it(`${name}: the linter reports ${want.map(([rule, line]) => `${rule} at line ${line}`).join(' and ')}; its quick fixes give the NAME.fixed.py that ran, where it reports nothing`, () => {
      assert.deepEqual(findings.get(name)!.map((f) => [f.ruleId, f.range.start.line + 1]), want);
      const measured = readFileSync(join(scripts, name.replace(/\.py$/, '.fixed.py')), 'utf8');
      assert.equal(fixed.get(name)!.text, measured, `the quick fixes of ${name} no longer give the script measured on the H200: run scripts/gpu-check.sh hints-memory hints-time on a GPU again`);
      assert.deepEqual(fixed.get(name)!.findings.map((f) => f.ruleId), []);
    });
  }

  it('accumulated-loss, a held-out loss never backpropagated (heldout_sum.py): 64 MiB more allocated after every step, the panel\'s growth hint naming the finding; after .item() flat', () => {
    const bad = steps('heldout_sum');
    const good = steps('heldout_sum.fixed');
    assert.equal(bad.length, 30);
    // Each step keeps its held-out forward's two saved ReLU outputs (16x32x128x128 floats, 32 MiB each) and the sum's small block.
    const saved = 2 * 16 * 32 * 128 * 128 * 4;
    for (const d of differences(allocated(bad))) assert.ok(d >= saved && d < saved + 64 * 1024, `grew ${d} bytes in a step`);
    assert.ok(allocated(bad)[29] - allocated(bad)[0] > 29 * 64 * MiB);
    // Fixed: one held-out graph lives between two steps (`held_out` until it is rebound), never more.
    const held = [...new Set(allocated(good).slice(1))];
    assert.equal(held.length, 1, held.join(" "));
    assert.ok(held[0] - allocated(good)[0] >= saved && held[0] - allocated(good)[0] < saved + 64 * 1024, `${held[0] - allocated(good)[0]}`);

    const growth = growthOf(bad);
    assert.deepEqual(growth.map((g) => [g.rank, g.device, g.kind]), [[0, 'cuda:0', 'cuda']]);
    assert.ok(growth[0].growthBytes > 1000 * MiB, `${growth[0].growthBytes}`);
    assert.deepEqual(growthOf(good), []);
    // The panel names the lint finding as the likely cause, as VS Code hands the diagnostics over.
    const script = join(scripts, 'heldout_sum.py');
    const diagnostics = findings.get('heldout_sum.py')!.map((f) => ({ source: lintSource, code: { value: f.ruleId }, line: f.range.start.line, message: f.message }));
    const hint = growthHint(growth, pickGrowthFinding(script, diagnostics), script);
    assert.deepEqual(hint && { ranks: hint.ranks, code: hint.finding?.code, line: hint.finding?.line }, { ranks: [0], code: 'accumulated-loss', line: 35 });
    assert.match(hint!.message, /^Memory grows every optimizer step on rank 0 cuda:0 \(allocated \+1\.69 GiB over steps 3-30\)/);
    assert.match(findings.get('heldout_sum.py')![0].message, /every step's activations stay on the GPU/);
  });

  it('the CLI\'s growth watch over the same channel: one warning, at the step the panel would show it, naming heldout_sum.py:36; none for the fixed script, nor for train_sum.py', async () => {
    const linter = await createLinter();
    try {
      const lint = scriptLinter(linter, (p) => readFileSync(p, 'utf8'));
      const watched = (name: string, script: string) => {
        const watch = new GrowthWatch(join(scripts, script), lint, scripts);
        return steps(name).flatMap((m) => {
          const w = watch.observe({ type: 'job/rankMemory', ...m });
          return w ? [{ step: m.step, message: w.message }] : [];
        });
      };
      const [warning, ...more] = watched('heldout_sum', 'heldout_sum.py');
      assert.deepEqual(more, []);
      assert.equal(warning.step, 10, 'the tracker needs 8 rising steps after its 2 warm-up steps');
      // 7 steps of 64 MiB between step 3 and step 10.
      assert.equal(warning.message.split('\n')[0], 'Memory grows every optimizer step on rank 0 cuda:0 (allocated +448.0 MiB over steps 3-10): accumulating tensors? Summing a loss tensor (`total += loss`) keeps every step\'s graph alive; add `loss.item()` instead.');
      assert.match(warning.message.split('\n')[1], /^ {2}likely cause, an OOM hint in the script: heldout_sum\.py:36: accumulated-loss: `held_out` is stored in `held_out_total`/);
      // The CLI itself on the H200 (hints-cli step), 30 steps under torchrun: it printed that warning, once.
      const cli = readFileSync(join(recorded, 'heldout_sum.cli.txt'), 'utf8').split('\n');
      const printed = cli.filter((l) => l.startsWith('warning: Memory grows'));
      assert.deepEqual(printed, [`warning: ${warning.message.split('\n')[0]}`]);
      assert.equal(cli[cli.indexOf(printed[0]) + 1], `  ${warning.message.split('\n')[1].trim().replace('heldout_sum.py', 'test/fixtures/torchrun/cuda/hints/heldout_sum.py')}`);
      assert.match(cli.join('\n'), /^memory: rank 0 step 30 cuda:0 1936\.2 MiB allocated/m);
      assert.match(cli.join('\n'), /^done: torchrun exited 0 /m);
      assert.deepEqual(watched('heldout_sum.fixed', 'heldout_sum.fixed.py'), []);
      assert.deepEqual(watched('train_sum', 'train_sum.py'), []);
      // A script that cannot be read when memory grows: the warning says so instead of a cause.
      const [gone] = watched('heldout_sum', 'no_such_script.py');
      assert.match(gone.message, /\n {2}the script could not be linted for a cause \(ENOENT/);
    } finally {
      linter.dispose();
    }
  });

  it('accumulated-loss, the training loss summed after backward() (train_sum.py): CUDA memory stays flat, so the message speaks of host memory and the panel stays quiet', () => {
    const bad = steps('train_sum');
    const good = steps('train_sum.fixed');
    // backward() freed the activations and the sum's backward saves no operand: one small block for the sum, nothing per step.
    assert.deepEqual([...new Set(allocated(bad).slice(1))], [allocated(good)[0] + 512]);
    assert.deepEqual([...new Set(allocated(good))], [allocated(good)[0]]);
    assert.deepEqual(peak(bad).map((p, i) => p - peak(good)[i]), [0, ...Array<number>(29).fill(512)]);
    assert.deepEqual(growthOf(bad), []);
    assert.match(findings.get('train_sum.py')![0].message, /backward\(\) has freed each step's saved activations, but the sum keeps every step's chain of autograd nodes: host memory grows every step \(GPU memory does not\)/);
  });

  it('missing-no-grad (eval_no_grad.py): each evaluation\'s peak 1,072 MiB higher, its 256-image forward\'s saved activations; @torch.no_grad() removes exactly that', () => {
    const bad = steps('eval_no_grad');
    const good = steps('eval_no_grad.fixed');
    assert.equal(bad.length, 24);
    const extra = peak(bad).map((p, i) => p - peak(good)[i]);
    // Steps 9 and 17 are the first after an evaluation: the companion resets the peak after every step.
    const afterEvaluation = [9, 17];
    const activations = 2 * 256 * 32 * 128 * 128 * 4; // the two ReLU outputs the forward saves
    for (const [i, e] of extra.entries()) {
      if (afterEvaluation.includes(i + 1)) assert.ok(e >= activations && e < activations + 64 * MiB, `step ${i + 1}: ${e} bytes more`);
      else assert.equal(e, 0, `step ${i + 1}`);
    }
    // Nothing outlives evaluate(): allocated memory is the same at every step.
    assert.deepEqual(allocated(bad), allocated(good));
    assert.deepEqual(growthOf(bad), []);
  });

  it('volatile-variable (volatile_eval.py): volatile=True changed nothing (torch warns so), and the last evaluation batch\'s graph stays allocated through the next epoch; torch.no_grad() frees both', () => {
    const bad = steps('volatile_eval');
    const good = steps('volatile_eval.fixed');
    const out = readFileSync(join(fixtures, 'torchrun', 'cuda', 'h200', 'hints', 'volatile_eval.out.txt'), 'utf8');
    assert.match(out, /UserWarning: volatile was removed and now has no effect\. Use `with torch\.no_grad\(\):` instead\./);
    const activations = 2 * 256 * 32 * 128 * 128 * 4;
    const kept = allocated(bad).map((a, i) => a - allocated(good)[i]);
    // Epoch 1 (steps 1-8) is the same; from the first evaluation on, `output` (a module-level name) keeps its batch's graph.
    assert.deepEqual(kept.slice(0, 8), [0, 0, 0, 0, 0, 0, 0, 0]);
    for (const k of kept.slice(8)) assert.ok(k >= activations && k < activations + 64 * MiB, `${k}`);
    assert.equal(peak(bad)[8] - peak(good)[8], kept[8]);
    assert.deepEqual(growthOf(bad), [], 'a plateau, not growth: the lint finding is what names it');
  });

  it('tensors-kept-for-logging (logits_kept.py): 12 validation batches of logits, exactly 3,000 MiB, stay on the GPU through the next epoch; after .cpu() none', () => {
    const bad = steps('logits_kept');
    const good = steps('logits_kept.fixed');
    const logits = 12 * 16 * 128 * 32000 * 4; // batches x batch x sequence x vocabulary x float32
    assert.equal(logits, 3000 * MiB);
    const kept = allocated(bad).map((a, i) => a - allocated(good)[i]);
    assert.deepEqual(kept, [...Array<number>(8).fill(0), ...Array<number>(16).fill(logits)]);
    assert.deepEqual([...new Set(allocated(good))], [allocated(good)[0]]);
    assert.deepEqual(growthOf(bad), [], 'a plateau, not growth');
  });

  it('empty-cache-in-loop and model-to-device-in-loop: both ran their 60 steps twice, one script at a time, bad and fixed in turn (their step times are in docs/rules)', () => {
    for (const name of ['empty_cache', 'to_device']) {
      for (const run of [`${name}.r1`, `${name}.fixed.r1`, `${name}.r2`, `${name}.fixed.r2`]) {
        const rs = steps(run);
        assert.equal(rs.length, 60, run);
        assert.ok(rs.every((r) => r.stepSeconds !== undefined && r.stepSeconds > 0), run);
      }
    }
  });
});

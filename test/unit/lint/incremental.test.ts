/**
 * Incremental re-analysis must give exactly what a from-scratch analysis gives: after each of
 * a seeded series of random edits to a file (typing, deleting, moving and re-indenting lines,
 * renaming), the incremental linter's findings equal those of a linter that parses and
 * analyses the same workspace anew.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { corpusLib } from '../../../bench/lint/_realMatch';
import { repoRoot } from '../../paths';
import { createLinter, Linter } from '../../../src/lint/linter';
import { Workspace } from '../../../src/lint/workspace';
import { FileModel } from '../../../src/lint/model';
import * as syntaxModule from '../../../src/lint/syntax';
import { lintFixtures, readFixtures } from './corpus';
import { mulberry32 } from '../../../src/common/random';


/** Names and snippets an edit may bring in: they switch facts on and off across statements. */
const words = ['model', 'loss', 'total', 'evaluate', 'train', 'no_grad', 'torch.no_grad()', 'history', 'self.meter', 'update', 'append', 'backward', 'optimizer.step()', 'eval', 'net', 'Net', 'x', 'y', '(', ')', ':', '\n', '    ', '#', 'None', '.detach()', '.item()', 'set_grad_enabled(False)'];
const lines = [
  'torch.set_grad_enabled(False)',
  'import torch as T',
  'from torch import no_grad as ng',
  'model = Net()',
  '    model.eval()',
  '    total += loss',
  '        history.append(model(x))',
  'def evaluate(model, loader):',
  '    with torch.no_grad():',
  '        loss.backward()',
  'class Net(nn.Module):',
  '    evaluate(model, loader)',
];

type Edit = (text: string, r: () => number) => string;
const pick = <T>(xs: readonly T[], r: () => number): T => xs[Math.floor(r() * xs.length)];
const lineStarts = (t: string): number[] => [0, ...[...t.matchAll(/\n/g)].map((m) => (m.index ?? 0) + 1)];
const edits: Edit[] = [
  // type a word or a character somewhere
  (t, r) => {
    const at = Math.floor(r() * t.length);
    return t.slice(0, at) + pick(words, r) + t.slice(at);
  },
  // delete a few characters
  (t, r) => {
    const at = Math.floor(r() * t.length);
    return t.slice(0, at) + t.slice(at + 1 + Math.floor(r() * 12));
  },
  // delete, duplicate or move a whole line
  (t, r) => {
    const ls = t.split('\n');
    const i = Math.floor(r() * ls.length);
    const [line] = ls.splice(i, 1);
    const k = r();
    if (k < 0.3) return ls.join('\n');
    ls.splice(k < 0.6 ? i : Math.floor(r() * ls.length), 0, line, ...(k < 0.6 ? [line] : []));
    return ls.join('\n');
  },
  // indent or dedent a line
  (t, r) => {
    const starts = lineStarts(t);
    const at = pick(starts, r);
    if (r() < 0.5) return `${t.slice(0, at)}    ${t.slice(at)}`;
    return t.startsWith('    ', at) ? t.slice(0, at) + t.slice(at + 4) : t;
  },
  // insert a line that changes facts elsewhere (a guard, a model, a call site, an import)
  (t, r) => {
    const at = pick(lineStarts(t), r);
    return `${t.slice(0, at)}${pick(lines, r)}\n${t.slice(at)}`;
  },
  // call a function the file defines from another place (helpers that call each other: cycles in the call graph)
  (t, r) => {
    const names = [...t.matchAll(/^\s*def (\w+)\(/gm)].map((m) => m[1]);
    if (!names.length) return t;
    const starts = lineStarts(t).filter((at) => t.startsWith('    ', at));
    if (!starts.length) return t;
    const at = pick(starts, r);
    const indent = /^[ \t]*/.exec(t.slice(at))?.[0] ?? '';
    return `${t.slice(0, at)}${indent}${pick(names, r)}(${pick(['model, x', 'self', 'loader', ''], r)})\n${t.slice(at)}`;
  },
  // rename every occurrence of one word
  (t, r) => {
    const from = pick(['model', 'evaluate', 'loss', 'total', 'net', 'train', 'history', 'update'], r);
    return t.split(from).join(pick(['model', 'evaluate', 'loss', 'total', 'net', 'train', 'history', 'update', 'xs'], r));
  },
];

describe('incremental re-analysis', function () {
  this.timeout(600_000);
  let incremental: Linter;
  let fresh: Linter;
  before(async () => {
    const onError = (path: string, err: unknown) => {
      throw new Error(`internal error on ${path}: ${String(err)}`);
    };
    incremental = await createLinter({ incremental: true, onError });
    fresh = await createLinter({ onError });
  });
  after(() => {
    incremental.dispose();
    fresh.dispose();
  });

  /**
   * Lints each text in turn as edits of one file: after every step the incremental findings must
   * equal a fresh analysis of that text. Returns each step's findings as `line:rule` lists.
   */
  function lintSteps(path: string, texts: readonly string[]): string[] {
    const seen: string[] = [];
    for (const [i, text] of texts.entries()) {
      const got = incremental.lintFile(path, text);
      fresh.removeFile(path);
      assert.deepEqual(got, fresh.lintFile(path, text), `step ${i + 1}`);
      seen.push(got.map((f) => `${f.range.start.line}:${f.ruleId}`).join(' '));
    }
    incremental.removeFile(path);
    fresh.removeFile(path);
    return seen;
  }

  for (const [seed, dir] of [[1, 'unguarded'], [2, 'guarded'], [3, 'distributed']] as const) {
    it(`after each of 60 random edits (seed ${seed}, beside the ${dir} workspace) equals a fresh analysis`, () => {
      const workspace = readFixtures(join(lintFixtures, 'workspace', dir));
      const corpus = [...readFixtures(join(lintFixtures, 'bad'), (n) => !n.endsWith('.fixed.py') && !n.startsWith('malformed')), ...readFixtures(join(lintFixtures, 'good'))];
      const r = mulberry32(seed);
      const parts = [workspace[0].text];
      while (parts.join('\n').split('\n').length < 500) parts.push(pick(corpus, r).text);
      let text = parts.join('\n');
      const path = workspace[0].path;
      const others = workspace.slice(1);
      incremental.lintWorkspace(workspace);
      incremental.lintFile(path, text);
      let changed = 0;
      for (let i = 0; i < 60; i++) {
        text = pick(edits, r)(text, r);
        const got = incremental.lintFile(path, text);
        for (const p of [path, ...others.map((o) => o.path)]) fresh.removeFile(p);
        fresh.lintWorkspace([{ path, text }, ...others]);
        const expected = fresh.lintFile(path);
        assert.deepEqual(got, expected, `edit ${i + 1} (seed ${seed})`);
        if (got.length !== expected.length || i === 0) changed++;
      }
      for (const p of [path, ...others.map((o) => o.path)]) {
        incremental.removeFile(p);
        fresh.removeFile(p);
      }
      assert.ok(changed > 0);
    });
  }

  // Real code (docs/lint-corpus.md): each project's files are the workspace, one file of it edited.
  const cache = corpusLib.cacheFolder(repoRoot);
  const projectFiles = (dir: string): { path: string; text: string }[] => {
    const out: { path: string; text: string }[] = [];
    const walk = (d: string): void => {
      for (const name of readdirSync(d).sort()) {
        const p = join(d, name);
        if (statSync(p).isDirectory()) walk(p);
        else if (name.endsWith('.py')) out.push({ path: p, text: readFileSync(p, 'utf8') });
      }
    };
    walk(dir);
    return out;
  };
  for (const seed of [11, 12, 13, 14]) {
    it(`after each of 25 random edits of a real project's file (seed ${seed}, its project as the workspace) equals a fresh analysis`, function () {
      if (!existsSync(cache)) this.skip();
      const r = mulberry32(seed);
      const projects = readdirSync(cache).filter((d) => statSync(join(cache, d)).isDirectory()).sort();
      assert.ok(projects.length > 0, `no project in the corpus cache ${cache}`);
      // Two projects per seed, and the file of each that defines the most functions (the call graph to keep right).
      for (const project of [pick(projects, r), pick(projects, r)]) {
        const files = projectFiles(join(cache, project));
        if (!files.length) continue;
        const edited = files.reduce((a, b) => ((b.text.match(/\bdef /g)?.length ?? 0) > (a.text.match(/\bdef /g)?.length ?? 0) ? b : a));
        const others = files.filter((f) => f !== edited);
        let text = edited.text;
        incremental.lintWorkspace(files);
        for (let i = 0; i < 25; i++) {
          text = pick(edits, r)(text, r);
          const got = incremental.lintFile(edited.path, text);
          for (const f of files) fresh.removeFile(f.path);
          fresh.lintWorkspace([{ path: edited.path, text }, ...others]);
          assert.deepEqual(got, fresh.lintFile(edited.path), `edit ${i + 1} of ${relative(cache, edited.path)} (seed ${seed})`);
        }
        for (const f of files) {
          incremental.removeFile(f.path);
          fresh.removeFile(f.path);
        }
      }
    });
  }

  it('keeps what functions calling each other do (a cycle) through edits elsewhere, and recomputes it when a function of the cycle changes', () => {
    const path = '/incremental/cycle.py';
    const cycle = 'import torch\n\n\ndef warmup(model, loader, opt):\n    tune(model, loader, opt, 1)\n\n\ndef evaluate(model, loader, opt, depth=0):\n    model.eval()\n    for x in loader:\n        out = model(x)\n        print(out.argmax())\n    if depth:\n        tune(model, loader, opt, depth)\n\n\ndef tune(model, loader, opt, depth):\n    evaluate(model, loader, opt, depth - 1)\n    step(opt)\n\n\ndef step(opt):\n    opt.step()\n';
    const elsewhere = `${cycle}\n\ndef unrelated():\n    return 1\n`;
    // The only training step goes: nothing in the cycle trains any more, and evaluate may be decorated.
    const noStep = elsewhere.replace('    opt.step()', '    opt.zero_grad()');
    const fixes = (text: string): string[] => {
      lintSteps(path, [cycle, text]);
      incremental.lintFile(path, cycle);
      return incremental.lintFile(path, text).flatMap((f) => f.fixes.map((x) => x.title));
    };
    assert.deepEqual(lintSteps(path, [cycle, elsewhere, noStep, elsewhere, cycle]), ['10:missing-no-grad', '10:missing-no-grad', '10:missing-no-grad', '10:missing-no-grad', '10:missing-no-grad']);
    assert.deepEqual(fixes(elsewhere), ['Wrap in `with torch.no_grad():`']);
    assert.deepEqual(fixes(noStep), ['Decorate `evaluate` with `@torch.no_grad()`']);
    incremental.removeFile(path);
  });

  it('re-analyses a statement when another one makes a name it calls a model, and again when that goes', () => {
    const path = '/incremental/model-name.py';
    const use = 'import torch\n\n\ndef evaluate(loader):\n    outs = []\n    for x in loader:\n        outs.append(thing(x))\n    return outs\n';
    const bound = use.replace('import torch\n', 'import torch\nthing = torch.nn.Linear(2, 2)\n');
    const seen = lintSteps(path, [use, bound, bound.replace('thing = ', 'thingy = '), bound, use]);
    // The call is a forward pass only while `thing` is bound to a module.
    assert.equal(seen[0], '');
    assert.match(seen[1], /missing-no-grad/);
    assert.equal(seen[2], '');
    assert.equal(seen[3], seen[1]);
  });

  it('moves a shared helper\'s missing-no-grad (and its fix) when another statement starts or stops training through it, or hands it on', () => {
    const path = '/incremental/shared-helper.py';
    const shared = readFixtures(join(lintFixtures, 'bad'), (n) => n === 'shared_predict_helper.py')[0].text;
    // The training step stops calling the helper: it evaluates only.
    const evalOnly = shared.replace('logits = predict(model, images)', 'logits = model(images)');
    // Handed on as a value: its callers are unknown again.
    const handedOn = `${evalOnly}\n\nHOOKS = {"predict": predict}\n`;
    const texts = [shared, evalOnly, handedOn, evalOnly, shared];
    const seen = lintSteps(path, texts);
    const lineOf = (text: string, needle: string) => text.split('\n').findIndex((l) => l.includes(needle));
    assert.equal(seen[0], `${lineOf(shared, 'preds = predict(')}:missing-no-grad`);
    // In the helper itself (its first line of that text), no longer at the caller.
    assert.equal(seen[1], `${lineOf(evalOnly, '    logits = model(images)')}:missing-no-grad`);
    assert.equal(seen[2], seen[0]);
    assert.equal(seen[3], seen[1]);
    assert.equal(seen[4], seen[0]);
  });

  // Lookups compared by value (`FileModel.signatureOf`): the class a name is built from, and a
  // binding found in another scope. An edit elsewhere in the binding statement changes nothing;
  // an edit of the bound value changes the other statement's findings.
  const hidden = 'import torch\nfrom torch import nn\n\n\nclass Keeper(nn.Module):\n    def forward(self, x, h):\n        return x, h.detach()\n\n\nrnn = Keeper()\n\n\ndef train(loader, optimizer):\n    hidden = None\n    for x, y in loader:\n        out, hidden = rnn(x, hidden)\n        loss = out.sum()\n        loss.backward()\n        optimizer.step()\n';
  const meter = 'import torch\n\n\nclass Meter:\n    def update(self, v):\n        self.total += v\n\n\nclass Plain:\n    def update(self, v):\n        self.last = 1\n\n\nclass Base:\n    def __init__(self):\n        self.meter = Meter()\n        self.steps = 0\n\n\nclass Trainer(Base):\n    def fit(self, model, loader, optimizer):\n        for x in loader:\n            loss = model(x).sum()\n            loss.backward()\n            optimizer.step()\n            self.meter.update(loss)\n';
  for (const [name, text, same, other, rule] of [
    ['the class a name is built from', hidden, hidden.replace('rnn = Keeper()', 'rnn = (Keeper())'), hidden.replace('rnn = Keeper()', 'rnn = nn.GRU(4, 4)'), 'carried-hidden-state'],
    ['a binding in another scope', meter, meter.replace('self.steps = 0', 'self.steps = 1'), meter.replace('self.meter = Meter()', 'self.meter = Plain()'), 'accumulated-loss'],
  ] as const) {
    it(`re-analyses a statement when ${name} changes in another statement, and only then`, () => {
      const path = '/incremental/by-value.py';
      const seen = lintSteps(path, [text, same, other, text]);
      assert.equal(seen[0], seen[1]);
      assert.notEqual(seen[2], seen[0]);
      assert.match(seen[0] + seen[2], new RegExp(rule));
      assert.equal(seen[3], seen[0]);
    });
  }

  it('keeps helpers\' set_epoch answers through edits elsewhere and recomputes them when a helper two calls down changes', () => {
    const path = '/incremental/set-epoch.py';
    const text = 'import torch\nfrom torch.utils.data import DataLoader, DistributedSampler\n\n\ndef prepare(sampler, epoch):\n    sampler.set_epoch(epoch)\n\n\ndef unrelated():\n    return 1\n\n\ndef epoch_start(sampler, epoch):\n    prepare(sampler, epoch)\n\n\ndef main(dataset, model, optimizer):\n    sampler = DistributedSampler(dataset)\n    loader = DataLoader(dataset, sampler=sampler)\n    for epoch in range(3):\n        epoch_start(sampler, epoch)\n        for x in loader:\n            model(x).sum().backward()\n            optimizer.step()\n';
    const unrelated = text.replace('return 1', 'return 2');
    const removed = unrelated.replace('sampler.set_epoch(epoch)', 'sampler.seed = epoch');
    // Each step edits one statement; main() is re-analysed only when it changes or a lookup it made does.
    const seen = lintSteps(path, [text, unrelated, unrelated.replace('    epoch_start(sampler, epoch)', '    epoch_start(sampler, epoch) '), removed, unrelated]);
    assert.deepEqual(seen, ['', '', '', '19:missing-set-epoch', '']);
  });

  it('re-analyses the statements before a GPU mention typed at the end (tensors-kept-for-logging needs one in the file)', () => {
    const path = '/incremental/gpu-evidence.py';
    const cpu = readFixtures(join(lintFixtures, 'bad'), (n) => n === 'eval_outputs_kept.py')[0].text.split('\n\nif __name__')[0].replace(/gpu/gi, 'xpu');
    const seen = lintSteps(path, [cpu, `${cpu}\n\nDEVICE = "cuda"\n`, cpu]);
    assert.deepEqual(seen, ['', '14:tensors-kept-for-logging 15:tensors-kept-for-logging 29:tensors-kept-for-logging', '']);
  });

  it('reads the file for GPU evidence once per version, not once per statement (it was 6% of linting torch)', () => {
    const body = Array.from({ length: 300 }, (_, i) => `def step_${i}(model, x):\n    return model(x)\n`).join('\n');
    let scans = 0;
    // A scan starts at the text's beginning (`test` runs `exec` too); a scan that goes on from match to match is one.
    // eslint-disable-next-line @typescript-eslint/unbound-method -- saved to be put back, and called with its `this`
    const exec = RegExp.prototype.exec;
    RegExp.prototype.exec = function (this: RegExp, s: string): RegExpExecArray | null {
      if (this.source.includes('local_rank') && this.lastIndex === 0) scans++;
      return exec.call(this, s);
    };
    try {
      fresh.lintFile('/incremental/many.py', `import torch\n\n${body}\n# runs on the gpu when there is one\n`);
    } finally {
      RegExp.prototype.exec = exec;
      fresh.removeFile('/incremental/many.py');
    }
    assert.equal(scans, 1);
  });

  it('keeps which function each call reaches for the statements an edit re-analyses without changing them', () => {
    // Every train_<i> looks `update` up, so an edit of Meter re-analyses them all; their other calls reach what they did.
    const trains = Array.from({ length: 20 }, (_, i) => `def train_${i}(model, loader, meter, helper, optimizer):\n    for x in loader:\n        loss = model(x).sum()\n        loss.backward()\n        optimizer.step()\n        meter.update(loss)\n        helper.frobnicate(x, loss)\n`).join('\n\n');
    const text = `import torch\n\n\nclass Meter:\n    def __init__(self):\n        self.total = 0\n\n    def update(self, value):\n        self.total += value\n\n\nclass Helper:\n    def frobnicate(self, x):\n        return x\n\n\n${trains}`;
    const path = '/incremental/resolutions.py';
    incremental.lintFile(path, text);
    let asked = 0;
    // eslint-disable-next-line @typescript-eslint/unbound-method -- saved to be put back, and called with its `this`
    const functionsNamed = Workspace.prototype.functionsNamed;
    Workspace.prototype.functionsNamed = function (this: Workspace, name: string) {
      if (name === 'frobnicate') asked++;
      return functionsNamed.call(this, name);
    };
    let edited: string;
    try {
      edited = text.replace('self.total = 0', 'self.totals = 0');
      incremental.lintFile(path, edited);
    } finally {
      Workspace.prototype.functionsNamed = functionsNamed;
    }
    fresh.removeFile(path);
    assert.deepEqual(incremental.lintFile(path), fresh.lintFile(path, edited));
    incremental.removeFile(path);
    fresh.removeFile(path);
    assert.equal(asked, 0);
  });

  it('re-analyses only the class when one of its methods changes, not the statements that look up its other methods', () => {
    // Each train_<i> calls `losses.update(...)` on a receiver of unknown class: it looks up every method named `update`.
    const n = 10;
    const trains = Array.from({ length: n }, (_, i) => `def train_${i}(model, loader, losses, optimizer):\n    for x, y in loader:\n        loss = model(x).sum()\n        loss.backward()\n        optimizer.step()\n        losses.update(loss.item(), x.size(0))\n`).join('\n\n');
    const text = `import torch\n\n\nclass AverageMeter:\n    def __init__(self):\n        self.reset()\n\n    def reset(self):\n        self.sum = 0\n        self.count = 0\n\n    def update(self, val, n=1):\n        self.sum += val * n\n        self.count += n\n\n\n${trains}`;
    const path = '/incremental/methods.py';
    const spied = Linter.prototype as unknown as { analyse: (...args: unknown[]) => unknown };
    const analyse = spied.analyse;
    let analysed = 0;
    spied.analyse = function (this: Linter, ...args: unknown[]) {
      if (this === incremental) analysed++;
      return analyse.apply(this, args);
    };
    const steps = [text, text.replace('self.count = 0', 'self.count = 0.0'), text.replace('self.sum += val * n', 'self.sum += val * n * 1')];
    const counts: number[] = [];
    try {
      for (const step of steps) {
        analysed = 0;
        const got = incremental.lintFile(path, step);
        counts.push(analysed);
        fresh.removeFile(path);
        assert.deepEqual(got, fresh.lintFile(path, step));
      }
    } finally {
      spied.analyse = analyse;
      incremental.removeFile(path);
      fresh.removeFile(path);
    }
    assert.equal(counts[0], 2 + n);
    // An edit in reset(): only the class; one in update(): the class and every train_<i>.
    assert.deepEqual(counts.slice(1), [1, 1 + n]);
  });

  it('updates the workspace index from the statements an edit replaced, without listing every statement of the file', () => {
    const text = `import torch\n\n\n${Array.from({ length: 50 }, (_, i) => `def step_${i}(model, x):\n    return model(x)\n`).join('\n\n')}`;
    const path = '/incremental/index.py';
    incremental.lintFile(path, text);
    let listed = 0;
    // eslint-disable-next-line @typescript-eslint/unbound-method -- saved to be put back, and called with its `this`
    const chunkList = FileModel.prototype.chunkList;
    FileModel.prototype.chunkList = function (this: FileModel) {
      listed++;
      return chunkList.call(this);
    };
    const edited = text.replace('def step_7(model, x)', 'def step_seven(model, x)');
    try {
      incremental.lintFile(path, edited);
    } finally {
      FileModel.prototype.chunkList = chunkList;
    }
    fresh.removeFile(path);
    assert.deepEqual(incremental.lintFile(path), fresh.lintFile(path, edited));
    assert.deepEqual(incremental.indexSize(), fresh.indexSize());
    incremental.removeFile(path);
    fresh.removeFile(path);
    assert.equal(listed, 0);
  });

  it('does not list every node of the file when re-linting after an edit (the indentation unit is found near the top)', () => {
    const text = `import torch\n\n\n${Array.from({ length: 300 }, (_, i) => `def step_${i}(model, x):\n    return model(x) + ${i}\n`).join('\n\n')}`;
    const path = '/incremental/nodes.py';
    incremental.lintFile(path, text);
    // The module's exports object: compiled callers read `descendants` from it at each call.
    const exported = syntaxModule as { descendants: typeof syntaxModule.descendants };
    const descendants = exported.descendants;
    let wholeFile = 0;
    exported.descendants = (node, skip) => {
      if (node.type === 'module') wholeFile++;
      return descendants(node, skip);
    };
    const edited = text.replace('model(x) + 150', 'model(x) + 151');
    let found: ReturnType<Linter['lintFile']>;
    try {
      found = incremental.lintFile(path, edited);
    } finally {
      exported.descendants = descendants;
    }
    fresh.removeFile(path);
    assert.deepEqual(found, fresh.lintFile(path, edited));
    incremental.removeFile(path);
    fresh.removeFile(path);
    assert.equal(wholeFile, 0);
  });

  it('equals a fresh analysis when another file of the workspace changes', () => {
    const files = readFixtures(join(lintFixtures, 'workspace', 'unguarded'));
    const main = files.find((f) => f.name === 'main.py');
    const engine = files.find((f) => f.name === 'engine.py');
    assert.ok(main && engine);
    incremental.lintWorkspace(files);
    const before = incremental.lintFile(engine.path);
    // The caller in main.py gets a guard: engine.py's evaluation is no longer reported.
    const guarded = main.text.replace('    return evaluate(model, val_loader)', '    with torch.no_grad():\n        return evaluate(model, val_loader)');
    assert.notEqual(guarded, main.text);
    incremental.lintFile(main.path, guarded);
    const after = incremental.lintFile(engine.path);
    for (const f of files) fresh.removeFile(f.path);
    fresh.lintWorkspace(files.map((f) => (f === main ? { path: f.path, text: guarded } : f)));
    assert.deepEqual(after, fresh.lintFile(engine.path));
    assert.notDeepEqual(after, before);
  });
});

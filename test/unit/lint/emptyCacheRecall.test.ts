import assert from 'node:assert/strict';
import { createLinter, type Linter } from '../../../src/lint/linter';

/** empty-cache-in-loop behind a device check or through the accelerator module chosen at run time (issue #13). */
describe('empty-cache-in-loop: device checks and accelerator aliases', () => {
  let linter: Linter;
  before(async () => {
    linter = await createLinter({ onError: (path, err) => { throw new Error(`internal error on ${path}: ${String(err)}`); } });
  });
  after(() => linter.dispose());

  const lines = (text: string) => linter.lintFile('/ws/embed.py', text).filter((f) => f.ruleId === 'empty-cache-in-loop').map((f) => f.range.start.line + 1);

  it('reports empty_cache under a device test, which holds on every iteration of a GPU run', () => {
    const text = `import torch


def encode_all(encoder, chunks, runtime):
    vectors = []
    for chunk in chunks:
        vectors.append(encoder(chunk).cpu())
        if runtime.device.type == "cuda":
            torch.cuda.empty_cache()
    return vectors
`;
    assert.deepEqual(lines(text), [9]);
  });

  it('still excuses a device test combined with a step count', () => {
    const text = `import torch


def encode_all(encoder, chunks, runtime):
    vectors = []
    for step, chunk in enumerate(chunks):
        vectors.append(encoder(chunk).cpu())
        if step % 50 == 0 and runtime.device.type == "cuda":
            torch.cuda.empty_cache()
    return vectors
`;
    assert.deepEqual(lines(text), []);
  });

  it('reports empty_cache through the accelerator module picked with getattr(torch, ...)', () => {
    const text = `import torch


def fit(model, loader, opt, backend):
    accel = getattr(torch, backend, torch.cuda)
    for x, y in loader:
        opt.zero_grad()
        model(x, y).backward()
        opt.step()
        accel.empty_cache()
`;
    const found = linter.lintFile('/ws/fit.py', text).filter((f) => f.ruleId === 'empty-cache-in-loop');
    assert.deepEqual(found.map((f) => f.range.start.line + 1), [10]);
    assert.match(found[0].message, /`accel\.empty_cache\(\)`/);
    assert.equal(found[0].fixes[0].title, 'Remove the call');
  });

  it('ignores an empty_cache method of something that is not a torch module', () => {
    const text = `import torch


def fit(model, loader, opt, store):
    pool = store.pool()
    for x, y in loader:
        opt.zero_grad()
        model(x, y).backward()
        opt.step()
        pool.empty_cache()
`;
    assert.deepEqual(lines(text), []);
  });
});

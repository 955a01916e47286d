import assert from 'node:assert/strict';
import { SimdAdder } from '../../../../src/training/backends/simdAdd';
import { seededRandom } from '../../../../src/training/strategies/sampler';

describe('ring reduce step in WebAssembly SIMD', () => {
  it('computes (dst + incoming) * scale like the JS loop, for lengths with a tail, across memory growth', () => {
    const adder = SimdAdder.create();
    assert.ok(adder, 'Node 20 has WebAssembly SIMD');
    const r = seededRandom(3);
    for (const [n, scale] of [[1, 1], [3, 0.5], [4, 1], [1001, 0.25], [70_003, 1 / 3], [300_001, 0.5], [5, 1]] as const) {
      const dst = Float32Array.from({ length: n }, () => r() * 2 - 1);
      const inc = Float32Array.from({ length: n }, () => r() * 2 - 1);
      const expected = dst.map((v, i) => Math.fround(Math.fround(v + inc[i]) * Math.fround(scale)));
      adder.incoming(n).set(inc);
      adder.addInto(dst, scale);
      assert.deepEqual(dst, expected, `n=${n}`);
    }
  });
});

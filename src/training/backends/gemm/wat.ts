/**
 * The WebAssembly text of our float32 GEMM for the wasm backend (`gemmModule.ts` holds it
 * assembled; `test/unit/training/backends/gemm.test.ts` checks the two agree and, with UPDATE_WASM=1,
 * rewrites the assembled copy). Only tests import this file: the bundle carries the bytes.
 *
 * C[M×N] = opA · B (+ bias per column) (then max(·, 0) for relu), all row-major float32 on the
 * backend's own heap. Register tiles of R rows × 8 columns (2 vectors): per k, two vector loads
 * of packed B, R broadcast loads of A and 2R `f32x4.relaxed_madd`. XNNPACK, as the wasm backend
 * ships it, multiplies and adds separately (4-wide SIMD without FMA); with relaxed SIMD V8 emits
 * one FMA instruction where the CPU has one, which is what doubles the rate. opA is read in place
 * through two strides (`ars` between rows, `acs` between columns), so Aᵀ costs no copy; B is
 * packed once per call into panels of 8 columns (zeros past N), its transpose likewise.
 */

/** Rows per register tile: 4 rows = 8 accumulators + 2 B vectors + 1 broadcast, well inside x86-64's 16 vector registers. */
export const tileRows = 4;

export function gemmWat(R: number = tileRows): string {
  const rows = [...Array(R).keys()];
  const acc = rows.flatMap((r) => [`$c${r}0`, `$c${r}1`]);
  const madd = (b: string, c: string) => `(local.set ${c} (f32x4.relaxed_madd (local.get $x) (local.get ${b}) (local.get ${c})))`;
  const kstep = [
    '(local.set $b0 (v128.load (local.get $bk)))',
    '(local.set $b1 (v128.load offset=16 (local.get $bk)))',
    ...rows.flatMap((r) => [
      `(local.set $x (v128.load32_splat (local.get $p${r})))`,
      madd('$b0', `$c${r}0`), madd('$b1', `$c${r}1`),
      `(local.set $p${r} (i32.add (local.get $p${r}) (local.get $acs)))`,
    ]),
  ].join('\n          ');
  return `(module
  (import "env" "mem" (memory 0))
  ;; packB(b, rs, cs, K, N, dst): opB(k, j) at b + k*rs + j*cs (bytes) into panels of 8 columns,
  ;; K rows of 8 floats each, panel after panel; columns past N are zeros.
  (func (export "packB") (param $b i32) (param $rs i32) (param $cs i32) (param $K i32) (param $N i32) (param $dst i32)
    (local $jp i32) (local $k i32) (local $jj i32) (local $src i32) (local $row i32) (local $fast i32)
    (block $done (loop $panels
      (br_if $done (i32.ge_u (local.get $jp) (local.get $N)))
      (local.set $k (i32.const 0))
      (local.set $row (i32.add (local.get $b) (i32.mul (local.get $jp) (local.get $cs))))
      (local.set $fast (i32.and (i32.eq (local.get $cs) (i32.const 4)) (i32.le_u (i32.add (local.get $jp) (i32.const 8)) (local.get $N))))
      (block $kd (loop $ks
        (br_if $kd (i32.ge_u (local.get $k) (local.get $K)))
        (if (local.get $fast)
          (then
            (v128.store (local.get $dst) (v128.load (local.get $row)))
            (v128.store offset=16 (local.get $dst) (v128.load offset=16 (local.get $row))))
          (else
            (local.set $jj (i32.const 0))
            (local.set $src (local.get $row))
            (loop $cols
              (f32.store (i32.add (local.get $dst) (i32.shl (local.get $jj) (i32.const 2)))
                (if (result f32) (i32.lt_u (i32.add (local.get $jp) (local.get $jj)) (local.get $N))
                  (then (f32.load (local.get $src))) (else (f32.const 0))))
              (local.set $src (i32.add (local.get $src) (local.get $cs)))
              (local.set $jj (i32.add (local.get $jj) (i32.const 1)))
              (br_if $cols (i32.lt_u (local.get $jj) (i32.const 8))))))
        (local.set $dst (i32.add (local.get $dst) (i32.const 32)))
        (local.set $row (i32.add (local.get $row) (local.get $rs)))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br $ks)))
      (local.set $jp (i32.add (local.get $jp) (i32.const 8)))
      (br $panels))))
  ;; im2colT(x, col, b0, b1, inH, inW, inC, outH, outW, fh, fw, sh, sw, top, left): the transposed im2col
  ;; matrix of images b0..b1-1 of an NHWC input: row (i, j, c) (filter tap i, j, channel c), column
  ;; (b, oh, ow) holds x[b, oh*sh + i - top, ow*sw + j - left, c], 0 outside the image. Branch-free
  ;; inner loop: an out-of-range tap loads a valid address and stores 0 instead.
  (func (export "im2colT") (param $x i32) (param $col i32) (param $b0 i32) (param $b1 i32) (param $inH i32) (param $inW i32) (param $inC i32) (param $outH i32) (param $outW i32) (param $fh i32) (param $fw i32) (param $sh i32) (param $sw i32) (param $top i32) (param $left i32)
    (local $i i32) (local $j i32) (local $c i32) (local $b i32) (local $oh i32) (local $ow i32) (local $ih i32) (local $iw i32) (local $row i32) (local $end i32) (local $in i32) (local $v f32)
    (block $idone (loop $iloop
      (br_if $idone (i32.ge_u (local.get $i) (local.get $fh)))
      (local.set $j (i32.const 0))
      (block $jdone (loop $jloop
        (br_if $jdone (i32.ge_u (local.get $j) (local.get $fw)))
        (local.set $c (i32.const 0))
        (block $cdone (loop $cloop
          (br_if $cdone (i32.ge_u (local.get $c) (local.get $inC)))
          (local.set $b (local.get $b0))
          (block $bdone (loop $bloop
            (br_if $bdone (i32.ge_u (local.get $b) (local.get $b1)))
            (local.set $oh (i32.const 0))
            (block $ohdone (loop $ohloop
              (br_if $ohdone (i32.ge_u (local.get $oh) (local.get $outH)))
              (local.set $ih (i32.sub (i32.add (i32.mul (local.get $oh) (local.get $sh)) (local.get $i)) (local.get $top)))
              (local.set $end (i32.add (local.get $col) (i32.shl (local.get $outW) (i32.const 2))))
              (if (i32.ge_u (local.get $ih) (local.get $inH))
                (then
                  (memory.fill (local.get $col) (i32.const 0) (i32.shl (local.get $outW) (i32.const 2)))
                  (local.set $col (local.get $end)))
                (else
                  ;; x[b, ih, 0, c]
                  (local.set $row (i32.add (local.get $x) (i32.shl (i32.add (i32.mul (i32.add (i32.mul (local.get $b) (local.get $inH)) (local.get $ih)) (i32.mul (local.get $inW) (local.get $inC))) (local.get $c)) (i32.const 2))))
                  (local.set $iw (i32.sub (local.get $j) (local.get $left)))
                  (block $owdone (loop $owloop
                    (br_if $owdone (i32.ge_u (local.get $col) (local.get $end)))
                    (local.set $in (i32.lt_u (local.get $iw) (local.get $inW)))
                    (local.set $v (f32.load (select (i32.add (local.get $row) (i32.shl (i32.mul (local.get $iw) (local.get $inC)) (i32.const 2))) (local.get $row) (local.get $in))))
                    (f32.store (local.get $col) (select (local.get $v) (f32.const 0) (local.get $in)))
                    (local.set $col (i32.add (local.get $col) (i32.const 4)))
                    (local.set $iw (i32.add (local.get $iw) (local.get $sw)))
                    (br $owloop)))))
              (local.set $oh (i32.add (local.get $oh) (i32.const 1)))
              (br $ohloop)))
            (local.set $b (i32.add (local.get $b) (i32.const 1)))
            (br $bloop)))
          (local.set $c (i32.add (local.get $c) (i32.const 1)))
          (br $cloop)))
        (local.set $j (i32.add (local.get $j) (i32.const 1)))
        (br $jloop)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $iloop))))
  ;; gemm(a, ars, acs, bp, c, ldc, M, K, N, bias, relu, tile): C = opA · B (+ bias) (relu), N columns
  ;; of C from c, rows ldc bytes apart; opA(i, k) at a + i*ars + k*acs; bp: packB's panels; bias: 0
  ;; or ceil(N/8)*8 floats; tile: ${R * 32} bytes of scratch for the tiles at the bottom and right edges,
  ;; which are copied out element by element.
  (func (export "gemm") (param $a i32) (param $ars i32) (param $acs i32) (param $bp i32) (param $c i32) (param $ldc i32) (param $M i32) (param $K i32) (param $N i32) (param $bias i32) (param $relu i32) (param $tile i32)
    (local $i i32) (local $jp i32) (local $bk i32) (local $bend i32) (local $panel i32) (local $last i32) (local $dst i32) (local $r i32) (local $jj i32)
    ${rows.map((r) => `(local $p${r} i32)`).join(' ')}
    (local $x v128) (local $b0 v128) (local $b1 v128) (local $bv0 v128) (local $bv1 v128)
    ${acc.map((a) => `(local ${a} v128)`).join(' ')}
    (local.set $last (i32.mul (i32.sub (local.get $M) (i32.const 1)) (local.get $ars)))
    (local.set $panel (local.get $bp))
    (block $jdone (loop $jloop
      (br_if $jdone (i32.ge_u (local.get $jp) (local.get $N)))
      (local.set $bend (i32.add (local.get $panel) (i32.shl (local.get $K) (i32.const 5))))
      (if (local.get $bias)
        (then
          (local.set $bv0 (v128.load (i32.add (local.get $bias) (i32.shl (local.get $jp) (i32.const 2)))))
          (local.set $bv1 (v128.load offset=16 (i32.add (local.get $bias) (i32.shl (local.get $jp) (i32.const 2))))))
        (else
          (local.set $bv0 (v128.const i32x4 0 0 0 0))
          (local.set $bv1 (v128.const i32x4 0 0 0 0))))
      (local.set $i (i32.const 0))
      (block $idone (loop $iloop
        (br_if $idone (i32.ge_u (local.get $i) (local.get $M)))
        ;; row pointers; rows past M read the last row and their results are dropped
        ${rows.map((r) => `(local.set $p${r} (i32.add (local.get $a) (select (i32.mul (i32.add (local.get $i) (i32.const ${r})) (local.get $ars)) (local.get $last) (i32.lt_u (i32.add (local.get $i) (i32.const ${r})) (local.get $M)))))`).join('\n        ')}
        ${acc.map((a, k) => `(local.set ${a} (local.get ${k % 2 ? '$bv1' : '$bv0'}))`).join(' ')}
        (local.set $bk (local.get $panel))
        (block $kdone (loop $kloop
          (br_if $kdone (i32.ge_u (local.get $bk) (local.get $bend)))
          ${kstep}
          (local.set $bk (i32.add (local.get $bk) (i32.const 32)))
          (br $kloop)))
        (if (local.get $relu)
          (then
            ${acc.map((a) => `(local.set ${a} (f32x4.max (local.get ${a}) (v128.const i32x4 0 0 0 0)))`).join(' ')}))
        (if (i32.and (i32.le_u (i32.add (local.get $i) (i32.const ${R})) (local.get $M)) (i32.le_u (i32.add (local.get $jp) (i32.const 8)) (local.get $N)))
          (then
            (local.set $dst (i32.add (local.get $c) (i32.add (i32.mul (local.get $i) (local.get $ldc)) (i32.shl (local.get $jp) (i32.const 2)))))
            ${rows.map((r) => `(v128.store (local.get $dst) (local.get $c${r}0)) (v128.store offset=16 (local.get $dst) (local.get $c${r}1)) (local.set $dst (i32.add (local.get $dst) (local.get $ldc)))`).join('\n            ')})
          (else
            ${rows.map((r) => `(v128.store offset=${r * 32} (local.get $tile) (local.get $c${r}0)) (v128.store offset=${r * 32 + 16} (local.get $tile) (local.get $c${r}1))`).join('\n            ')}
            (local.set $r (i32.const 0))
            (block $rdone (loop $rloop
              (br_if $rdone (i32.or (i32.ge_u (local.get $r) (i32.const ${R})) (i32.ge_u (i32.add (local.get $i) (local.get $r)) (local.get $M))))
              (local.set $jj (i32.const 0))
              (block $cdone (loop $cloop
                (br_if $cdone (i32.or (i32.ge_u (local.get $jj) (i32.const 8)) (i32.ge_u (i32.add (local.get $jp) (local.get $jj)) (local.get $N))))
                (f32.store
                  (i32.add (local.get $c) (i32.add (i32.mul (i32.add (local.get $i) (local.get $r)) (local.get $ldc)) (i32.shl (i32.add (local.get $jp) (local.get $jj)) (i32.const 2))))
                  (f32.load (i32.add (local.get $tile) (i32.shl (i32.add (i32.shl (local.get $r) (i32.const 3)) (local.get $jj)) (i32.const 2)))))
                (local.set $jj (i32.add (local.get $jj) (i32.const 1)))
                (br $cloop)))
              (local.set $r (i32.add (local.get $r) (i32.const 1)))
              (br $rloop)))))
        (local.set $i (i32.add (local.get $i) (i32.const ${R})))
        (br $iloop)))
      (local.set $panel (local.get $bend))
      (local.set $jp (i32.add (local.get $jp) (i32.const 8)))
      (br $jloop))))
)
`;
}

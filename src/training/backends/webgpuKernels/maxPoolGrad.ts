/**
 * MaxPoolGrad for webgpu: the gradient of each window's output goes to the FIRST of its largest
 * pixels (row-major), as on the cpu and wasm backends, TensorFlow and PyTorch; a NaN or -Infinity
 * never wins, and a window with no other pixel passes no gradient.
 *
 * The shipped kernel (4.22) marks positions with `value >= max`, so a tie goes to the LAST
 * equal pixel. Ties are common in training: a ReLU before the pool makes whole windows of 0.
 * That gradient then lands on another pixel than on cpu (where ReLU's own gradient at 0 hides
 * it), and on equal positive values (quantised inputs, saturated activations) it changes the
 * weights' gradients.
 *
 * One pass: each thread is one input pixel; for every window that covers it, it finds the
 * window's first maximum and adds that window's dy if the maximum is this pixel. The shipped
 * kernel's two passes (positions to an int32 tensor, then a scatter) read as much.
 */
import { backend_util, type KernelConfig, type KernelFunc, type MaxPoolGradAttrs, type MaxPoolGradInputs, type TensorInfo } from '@tensorflow/tfjs-core';
import type { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import { flatProgram, run } from './program';

const body = `
  let coords = getCoordsFromIndex(index);
  let b = coords[0];
  let xR = coords[1];
  let xC = coords[2];
  let d = coords[3];
  var sum = 0.0;
  for (var wR = 0; wR < uniforms.filterDims[0]; wR++) {
    let rowNum = xR + uniforms.pads[0] - wR;
    if (rowNum < 0 || rowNum % uniforms.strides[0] != 0) { continue; }
    let dyR = rowNum / uniforms.strides[0];
    if (dyR >= uniforms.dyShape[1]) { continue; }
    for (var wC = 0; wC < uniforms.filterDims[1]; wC++) {
      let colNum = xC + uniforms.pads[1] - wC;
      if (colNum < 0 || colNum % uniforms.strides[1] != 0) { continue; }
      let dyC = colNum / uniforms.strides[1];
      if (dyC >= uniforms.dyShape[2]) { continue; }
      // The first largest pixel of window (dyR, dyC): strictly greater wins, NaN never does.
      let r0 = dyR * uniforms.strides[0] - uniforms.pads[0];
      let c0 = dyC * uniforms.strides[1] - uniforms.pads[1];
      var found = false;
      var best = 0.0;
      var bestR = -1;
      var bestC = -1;
      for (var r = max(r0, 0); r < min(r0 + uniforms.filterDims[0], uniforms.xShape[1]); r++) {
        for (var c = max(c0, 0); c < min(c0 + uniforms.filterDims[1], uniforms.xShape[2]); c++) {
          let v = getX(b, r, c, d);
          // -0x1.fffffep+127f is -FLT_MAX: every finite value passes, -Infinity and NaN do not (cpu starts from -Infinity with >).
          if ((!found && v >= -0x1.fffffep+127f) || (found && v > best)) {
            found = true;
            best = v;
            bestR = r;
            bestC = c;
          }
        }
      }
      if (bestR == xR && bestC == xC) {
        sum += getDy(b, dyR, dyC, d);
      }
    }
  }
  setOutputAtIndex(index, sum);
`;

export function maxPoolGrad(args: { inputs: MaxPoolGradInputs; backend: WebGPUBackend; attrs: MaxPoolGradAttrs }): TensorInfo {
  const { dy, input } = args.inputs as Required<MaxPoolGradInputs> & { dy: TensorInfo; input: TensorInfo };
  const { filterSize, strides, pad, dimRoundingMode } = args.attrs;
  const info = backend_util.computePool2DInfo(input.shape as [number, number, number, number], filterSize, strides, 1, pad, dimRoundingMode);
  const program = flatProgram(input.shape.slice(), 'gpuWorkbenchMaxPoolGrad', ['x', 'dy'], 'strides : vec2<i32>, pads : vec2<i32>, filterDims : vec2<i32>,', body);
  return run(args.backend, program, [input, dy], 'float32', [
    { type: 'int32', data: [info.strideHeight, info.strideWidth] },
    { type: 'int32', data: [info.padInfo.top, info.padInfo.left] },
    { type: 'int32', data: [info.effectiveFilterHeight, info.effectiveFilterWidth] },
  ]);
}

export const maxPoolGradConfig: KernelConfig = {
  kernelName: 'MaxPoolGrad',
  backendName: 'webgpu',
  kernelFunc: maxPoolGrad as unknown as KernelFunc,
};

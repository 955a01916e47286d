/**
 * What our webgpu kernels need of tfjs-backend-webgpu, typed here: the package exports the
 * backend class and `webgpu_util`, but not its program classes, so each of our kernels is a
 * plain object in the shape `runWebGPUProgram` takes (webgpu_program.d.ts in the package).
 * Only types are imported, so this module loads without the package (the wasm and cpu workers
 * never load it).
 */
import type { TensorInfo } from '@tensorflow/tfjs-core';
import type { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';

export type Uniform = { type: 'int32' | 'float32' | 'uint32'; data: number[] };

/** The fields of tfjs-backend-webgpu's WebGPUProgram that a flat, one-output-per-thread shader sets. */
export interface FlatProgram {
  outputShape: number[];
  shaderKey: string;
  dispatchLayout: { x: number[] };
  dispatch: [number, number, number];
  variableNames: string[];
  uniforms: string;
  workgroupSize: [number, number, number];
  size: boolean;
  getUserCode(): string;
}

/**
 * A program with one invocation per output element, `index` its flat index (WGSL `main(index)`,
 * guarded by `uniforms.size`), as the package's own element-wise programs are laid out.
 */
export function flatProgram(outputShape: number[], shaderKey: string, variableNames: string[], uniforms: string, body: string): FlatProgram {
  const workgroupSize: [number, number, number] = [64, 1, 1];
  const size = outputShape.reduce((a, b) => a * b, 1);
  return {
    outputShape,
    shaderKey,
    dispatchLayout: { x: outputShape.map((_, i) => i) },
    // runWebGPUProgram reshapes a dispatch over the device's per-dimension limit.
    dispatch: [Math.ceil(size / workgroupSize[0]), 1, 1],
    variableNames,
    uniforms,
    workgroupSize,
    size: true,
    getUserCode: () => `
      fn main(index : i32) {
        if (index < uniforms.size) {
          ${body}
        }
      }
    `,
  };
}

export function run(backend: WebGPUBackend, program: FlatProgram, inputs: TensorInfo[], dtype: 'float32' | 'int32', uniforms: Uniform[]): TensorInfo {
  return (backend as unknown as { runWebGPUProgram(p: FlatProgram, i: TensorInfo[], d: string, u: Uniform[]): TensorInfo }).runWebGPUProgram(program, inputs, dtype, uniforms);
}

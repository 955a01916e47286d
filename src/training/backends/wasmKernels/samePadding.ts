import { backend_util, Conv2D, DepthwiseConv2dNative, FusedConv2D, FusedDepthwiseConv2D, type KernelConfig, type KernelFunc, type NamedAttrMap, type TensorInfo } from '@tensorflow/tfjs-core';
import { asWasmBackend, runShipped } from './wasmData';

/**
 * tfjs-backend-wasm 4.22's forward convolutions (Conv2D, FusedConv2D and their depthwise
 * versions) return wrong values for `same` padding with a non-square filter and a stride above 1,
 * e.g. a 3×1 filter at strides [2, 2] (measured: errors 0.08–0.49 on unit-scale data against the
 * cpu backend; square filters and stride 1 are right). Given the same padding spelled out as
 * numbers, the same kernels are right. So every NHWC `same` convolution goes to the shipped
 * kernel with its padding made explicit, exactly as tfjs computes it (computeConv2DInfo).
 */
interface ConvAttrs { strides: [number, number] | number; pad: unknown; dataFormat?: string; dilations?: [number, number] | number; dimRoundingMode?: 'floor' | 'round' | 'ceil' }

function explicitSame(kernelName: string, depthwise: boolean): KernelFunc {
  return ({ inputs, backend, attrs }) => {
    const wasm = asWasmBackend(backend, kernelName);
    const at = (attrs ?? {}) as NamedAttrMap & ConvAttrs;
    if (at.pad !== 'same' || (at.dataFormat ?? 'NHWC') !== 'NHWC') return runShipped(kernelName, wasm, inputs, attrs);
    const x = inputs.x as TensorInfo;
    const filter = inputs.filter as TensorInfo;
    const info = backend_util.computeConv2DInfo(x.shape as [number, number, number, number], filter.shape as [number, number, number, number], at.strides, at.dilations ?? 1, 'same', at.dimRoundingMode, depthwise, 'channelsLast');
    const p = info.padInfo;
    return runShipped(kernelName, wasm, inputs, { ...attrs, pad: [[0, 0], [p.top, p.bottom], [p.left, p.right], [0, 0]] });
  };
}

const config = (kernelName: string, depthwise: boolean): Omit<KernelConfig, 'setupFunc' | 'disposeFunc'> => ({ kernelName, backendName: 'wasm', kernelFunc: explicitSame(kernelName, depthwise) });

export const samePaddingConfigs = [config(Conv2D, false), config(FusedConv2D, false), config(DepthwiseConv2dNative, true), config(FusedDepthwiseConv2D, true)];

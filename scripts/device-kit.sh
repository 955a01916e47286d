#!/usr/bin/env bash
# Builds .devkit/, what scripts/gpu-check.sh needs on a GPU machine that has Python and PyTorch but
# no Node, no node_modules and no network (the project's lent GPU machines):
#   node.xz         this machine's Node binary, xz-compressed
#   dist.tar.xz     dist/ as the .vsix carries it (CLI, training host, dawn.node, wasm, the companion)
#                   plus dist/bench-webgpu.js (bench/webgpu bundled), without source maps
#   vk/lib/         the Vulkan loader and Mesa's device-select layer (the layer that pins a webgpu
#                   worker to one GPU by its PCI address) with the libraries it links, from this
#                   machine's packages (libvulkan1, mesa-vulkan-drivers); gpu-check.sh uses only
#                   the ones the GPU machine lacks
#   vk/VkLayer_MESA_device_select.json
#   vk/lib/ also glvnd's dispatch libraries (libglvnd0: libGLdispatch, libGLX, libEGL, libOpenGL):
#                   NVIDIA's Vulkan driver is its GLX vendor library and does not load without them,
#                   and the lent machines have NVIDIA's ICD but no glvnd (doctor names this)
# Size: about 40 MB. Usage: bash scripts/device-kit.sh   (then carry .devkit to the GPU machine)
set -euo pipefail
cd "$(dirname "$0")/.."
kit=.devkit
rm -rf "$kit"
mkdir -p "$kit/vk/lib"
npm run --silent build
npx webpack --env bench --mode production
tar -cJf "$kit/dist.tar.xz" --exclude='*.map' dist
xz -T2 -6 -c "$(readlink -f "$(command -v node)")" > "$kit/node.xz"
libdir=/usr/lib/x86_64-linux-gnu
layer=$libdir/libVkLayer_MESA_device_select.so
if [ -e "$layer" ] && [ -e "$libdir/libvulkan.so.1" ]; then
  cp -L "$libdir/libvulkan.so.1" "$layer" "$kit/vk/lib/"
  for dep in $(ldd "$layer" | awk '/=> \// { print $3 }'); do
    case "$(basename "$dep")" in libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|ld-linux*) ;; *) cp -L "$dep" "$kit/vk/lib/" ;; esac
  done
  cp /usr/share/vulkan/implicit_layer.d/VkLayer_MESA_device_select.json "$kit/vk/"
  for lib in libGLdispatch.so.0 libGLX.so.0 libEGL.so.1 libOpenGL.so.0; do
    if [ -e "$libdir/$lib" ]; then cp -L "$libdir/$lib" "$kit/vk/lib/"; else echo "device-kit: no $lib here (apt-get install libglvnd0): NVIDIA's Vulkan driver will not load where the GPU machine lacks it" >&2; fi
  done
else
  echo "device-kit: no Vulkan loader or Mesa device-select layer here (apt-get install libvulkan1 mesa-vulkan-drivers): the kit goes without them" >&2
fi
du -sh "$kit"/* "$kit"/vk/lib

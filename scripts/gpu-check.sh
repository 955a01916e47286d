#!/usr/bin/env bash
# What only a machine with a real GPU can show, in one run, each step time-boxed, every output kept:
#   - the machine: nvidia-smi's answers to exactly the queries the GPU panel makes (fixtures for
#     test/fixtures/nvidia-smi), the Vulkan ICDs, Python and torch;
#   - `gpu-workbench doctor --json` (driver, Vulkan adapters, backends, Python/torch, a run per GPU);
#   - the MNIST example on webgpu, one worker, then ddp on two workers;
#   - the companion's channel on CUDA, recorded raw (test/fixtures/torchrun/cuda/record_channel.py):
#     per-step memory of two ranks, a CUDA out-of-memory error, fp32 against bf16 autocast, a
#     shape error, torch.compile;
#   - `npm run bench -- webgpu` (as the bundle dist/bench-webgpu.js) against PyTorch on CUDA, and
#     where a webgpu step's time goes (bench/webgpu/latency.ts);
#   - Find Max Batch Size on a torchrun job that runs out of CUDA memory, and a torchrun job's events;
#   - the OOM hints on CUDA (test/fixtures/torchrun/cuda/hints/): each script there as written, with the
#     hazard the linter reports, and as the linter's quick fix leaves it (NAME.fixed.py), the companion's
#     channel recorded: what the hazard costs in CUDA memory (hints-memory, the scripts side by side:
#     each process's allocator is its own) or in step time (hints-time, one script at a time).
# Needs .devkit/ from scripts/device-kit.sh where the machine has no Node. Everything goes into
# /tmp/gpu-check/ and, after every step, into $OUT/gpu-check.tar.gz (or ./gpu-check.tar.gz), so a
# run cut short still leaves what it did.
#   bash scripts/gpu-check.sh [step...]     (no step: all; GPU_CHECK_PYTHON: the Python with torch)
set -u
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-$root}
rec=/tmp/gpu-check
rm -rf "$rec"
mkdir -p "$rec"
py=${GPU_CHECK_PYTHON:-python3}
kit=$root/.devkit
cuda=$root/test/fixtures/torchrun/cuda
wanted=" $* "

save() { tar -C /tmp -czf "$out/gpu-check.tar.gz" gpu-check 2>/dev/null || true; }
# step NAME SECONDS command...: runs it with a time limit, stdout and stderr kept, and saves.
step() {
  local name=$1 secs=$2 t0 rc
  shift 2
  if [ "$wanted" != "  " ] && [[ "$wanted" != *" $name "* ]]; then return 0; fi
  echo "== $name ($(date +%T), limit ${secs}s): $*" | tee -a "$rec/steps.log"
  t0=$(date +%s%N)
  # bash -c: a step may be one of the functions below (exported).
  timeout -k 5 "$secs" bash -c '"$@"' step "$@" > "$rec/$name.out" 2> "$rec/$name.err"
  rc=$?
  echo "   $name: exit $rc after $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$rec/steps.log"
  tail -n 4 "$rec/$name.out" "$rec/$name.err" | cut -c1-400
  save
}

# --- Node, dist/ and the Vulkan pieces from the kit, where the machine lacks them
if ! command -v node > /dev/null; then
  mkdir -p /tmp/gw-node/bin
  "$py" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$kit/node.xz" /tmp/gw-node/bin/node
  chmod +x /tmp/gw-node/bin/node
  export PATH=/tmp/gw-node/bin:$PATH
fi
if [ -e "$kit/dist.tar.xz" ]; then
  "$py" -c 'import tarfile, sys; tarfile.open(sys.argv[1]).extractall(".")' "$kit/dist.tar.xz"
fi
if [ -d "$kit/vk/lib" ]; then
  mkdir -p /tmp/gw-vklib
  for f in "$kit"/vk/lib/*; do
    b=$(basename "$f")
    # Only what the machine lacks: its own libraries stay in charge of everything else.
    if [ "$b" = libVkLayer_MESA_device_select.so ] || ! ldconfig -p | grep -q "/$b\$"; then ln -sf "$f" "/tmp/gw-vklib/$b"; fi
  done
  export LD_LIBRARY_PATH=/tmp/gw-vklib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if [ -e "$kit/vk/VkLayer_MESA_device_select.json" ] && ! ls /usr/share/vulkan/implicit_layer.d/*device_select* > /dev/null 2>&1; then
    mkdir -p /usr/share/vulkan/implicit_layer.d
    sed 's#"library_path": *"[^"]*"#"library_path": "/tmp/gw-vklib/libVkLayer_MESA_device_select.so"#' "$kit/vk/VkLayer_MESA_device_select.json" > /usr/share/vulkan/implicit_layer.d/VkLayer_MESA_device_select.json
  fi
fi
icd=
for d in /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d; do
  ls "$d"/nvidia_icd*.json > /dev/null 2>&1 && icd=found
done
if [ -z "$icd" ] && [ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json VK_ICD_FILENAMES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}

machine() {
  echo "date: $(date -u +%FT%TZ)"; uname -a; echo "node: $(node --version) at $(command -v node)"
  echo "python: $(command -v "$py")"; "$py" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])'
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; ls -l /tmp/gw-vklib 2>/dev/null
  echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-}"; ls /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/share/vulkan/implicit_layer.d /usr/local/nvidia/share/vulkan/icd.d 2>&1
  ldconfig -p | grep -E 'libvulkan|libGLX_nvidia|libnvidia-glcore' || true
  nvidia-smi
}
export py rec cuda root
export -f machine
step machine 60 machine
# The exact queries of src/gpu/nvidiaSmi.ts and src/training/backends/backend.ts, for fixtures.
step smi-query 30 nvidia-smi --query-gpu=timestamp,index,uuid,name,memory.used,memory.reserved,memory.total,utilization.gpu,temperature.gpu,power.draw,power.limit --format=csv,noheader,nounits
step smi-apps 30 nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory --format=csv,noheader,nounits
step smi-bus 30 nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader
step smi-help 30 nvidia-smi --help-query-gpu
step smi-q 30 nvidia-smi -q
step gpus 60 node dist/cli.js gpus --json
step doctor 150 node dist/cli.js doctor --json --python "$py"
step webgpu-single 120 node dist/cli.js train examples/mnist/mnist-ddp.job.json --backend webgpu --strategy single --devices 1 --epochs 1 --json --runs-dir /tmp/gw-runs
step webgpu-ddp2 120 node dist/cli.js train examples/mnist/mnist-ddp.job.json --backend webgpu --strategy ddp --devices 2 --epochs 1 --json --runs-dir /tmp/gw-runs
# The CNN preset (its conv filter gradients are our kernel, webgpuKernels/conv2dBackpropFilter.ts): compare with wasm (90.7 % here).
step webgpu-cnn 120 node dist/cli.js train examples/mnist/mnist-cnn.job.json --backend webgpu --json --runs-dir /tmp/gw-runs

# The companion on CUDA (torch of this machine), its channel recorded raw.
torchrun() { "$py" "$cuda/record_channel.py" "$rec/$1.jsonl" -- "$py" -m torch.distributed.run --standalone --nproc_per_node "$2" --redirects 2 --tee 2 -m gpu_workbench.run "${@:3}"; }
export -f torchrun
step companion-memory 90 torchrun companion-memory 2 "$cuda/cuda_train.py" --batch-size 32 --image 128 --steps 6
step companion-oom 90 torchrun companion-oom 1 "$cuda/cuda_train.py" --batch-size 256 --image 1024 --steps 2
step companion-fp32 90 torchrun companion-fp32 1 "$cuda/cuda_train.py" --batch-size 64 --image 256 --steps 4
step companion-bf16 90 torchrun companion-bf16 1 "$cuda/cuda_train.py" --batch-size 64 --image 256 --steps 4 --autocast bf16
step companion-shape 90 torchrun companion-shape 2 "$root/test/fixtures/torchrun/shapes/shape_bug.py"

step bench-webgpu 200 env GPU_WORKBENCH_PYTHON="$py" node dist/bench-webgpu.js --seconds 3 --rounds 2
step webgpu-latency 150 node dist/bench-webgpu-latency.js --steps 20
# The GPU time of one step by shader program (timestamp queries): which kernels a slow step waits on.
step webgpu-kernels 150 node dist/bench-webgpu-latency.js --steps 0 --kernels
# The same with Dawn's validation off, then also its lazy zeroing of new buffers and its shader bounds checks:
# what Dawn itself costs per dispatch.
step webgpu-latency-novalidation 150 env GPU_WORKBENCH_DAWN_FLAGS=enable-dawn-features=skip_validation node dist/bench-webgpu-latency.js --steps 20
step webgpu-latency-unsafe 150 env GPU_WORKBENCH_DAWN_FLAGS="enable-dawn-features=skip_validation,disable_robustness disable-dawn-features=lazy_clear_resource_on_first_use" node dist/bench-webgpu-latency.js --steps 20
# A trial takes 14-18 s: an 80 GB H100 needed 10 trials (144 s); a 141 GB H200 (2026-11-27) needs 12, more
# than 200 s (the old limit cut it during the 12th, 107, with 106 found), hence 400 s.
step find-batch 400 node dist/cli.js train "$cuda/cuda_grow.job.json" --find-batch-size --trial-steps 2 --json --python "$py" --runs-dir /tmp/gw-runs
step torchrun-job 120 node dist/cli.js train "$cuda/cuda_ddp.job.json" --json --python "$py" --runs-dir /tmp/gw-runs
# The OOM hints on CUDA: the companion's channel of each hint script and of its quick-fixed twin.
hint() { "$py" "$cuda/record_channel.py" "$rec/hint-$1.jsonl" -- "$py" -m gpu_workbench.run "$cuda/hints/$2" "${@:3}"; }
hints_memory() {
  local pids=() n rc=0
  for n in heldout_sum train_sum eval_no_grad volatile_eval logits_kept; do
    hint "$n" "$n.py" > "$rec/hint-$n.out" 2>&1 & pids+=($!)
    hint "$n.fixed" "$n.fixed.py" > "$rec/hint-$n.fixed.out" 2>&1 & pids+=($!)
  done
  for n in "${pids[@]}"; do wait "$n" || rc=1; done
  return $rc
}
hints_time() {
  local n round
  for round in 1 2; do
    for n in empty_cache to_device; do
      hint "$n.r$round" "$n.py" || return 1
      hint "$n.fixed.r$round" "$n.fixed.py" || return 1
    done
  done
}
export -f hint hints_memory hints_time
step hints-memory 180 hints_memory
step hints-time 240 hints_time
# The same leak as a torchrun job through the CLI: its growth warning, naming the OOM hint in the script.
step hints-cli 120 node dist/cli.js train "$cuda/hints/heldout_sum.job.json" --python "$py" --runs-dir /tmp/gw-runs
step companion-compile 180 torchrun companion-compile 1 "$cuda/cuda_train.py" --batch-size 32 --image 128 --steps 4 --compile
echo "== done $(date +%T)" | tee -a "$rec/steps.log"
save

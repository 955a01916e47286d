"""A torchrun FIXTURE that fails the way a real GPU run fails, on a machine without a GPU.

A tiny DDP training loop on the CPU (gloo), also on a machine with GPUs. When the environment variable
GPU_WORKBENCH_FIXTURE_ERROR names an error, rank 1 raises, at step 3 of the loop, the exception
PyTorch raised in a real run, with that run's recorded message text (copied from a PyTorch 1.13
OOM on an 8 GB GPU and a device-side assert report): the traceback, file and line are this
script's own. Without the variable it trains for --steps steps (--sleep seconds each, to stand
in for a longer step) and exits 0.

    GPU_WORKBENCH_FIXTURE_ERROR=cuda-oom /usr/bin/python3 -m torch.distributed.run --standalone \
        --nproc_per_node 2 recorded_cuda_error.py

`recorded-cuda-oom.job.json` sets the variable: it is what the editor's Problems panel test runs.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

RECORDED = {
    # PyTorch 1.13, torch.cuda.OutOfMemoryError on a 7.79 GiB GPU (the same text as test/fixtures/torchrun/oom-torch1.13.txt).
    "cuda-oom": (
        torch.cuda.OutOfMemoryError,
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity; 6.34 GiB already allocated; "
        "8.50 MiB free; 6.40 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting "
        "max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
    ),
    # The report of a label >= num_classes in nll_loss on a GPU (test/fixtures/torchrun/device-side-assert.txt).
    "device-side-assert": (
        RuntimeError,
        "CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API "
        "call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--sleep", type=float, default=0.0)
    args = parser.parse_args()
    fixture = os.environ.get("GPU_WORKBENCH_FIXTURE_ERROR", "")
    if fixture and fixture not in RECORDED:
        raise SystemExit(f"GPU_WORKBENCH_FIXTURE_ERROR={fixture!r}: expected one of {', '.join(RECORDED)}")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    for step in range(1, args.steps + 1):
        opt.zero_grad()
        if fixture and rank == 1 and step == 3:
            error, message = RECORDED[fixture]
            raise error(message)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
        time.sleep(args.sleep)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

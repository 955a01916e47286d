"""PyTorch anchor for bench/train/strategies.ts: the same MLP and CNN, single process and
DistributedDataParallel on gloo, samples/s of wall time.

    /usr/bin/python3 bench/train/torch_ddp.py --model mlp512 --batch 256 --world 2 [--data FILE]

Runs with Debian's python3-torch (CPU); with libopenblas0-pthread installed, since that torch
otherwise falls back to the reference BLAS, about 9x slower. Every process is pinned to one
thread (torch.set_num_threads(1)), as our wasm workers run one thread each; `--threads` changes it.

--batch is the global batch: with --world W each process trains on batch/W rows of its own
DistributedSampler shard (disjoint, reshuffled per epoch), so single and DDP see the same
samples per step, as in bench/train/strategies.ts. --data is a file written by that bench:
int32 rows, int32 width, then rows*width float32 features and rows int32 labels (MNIST
digits); without it the rows are random (throughput does not depend on the values).
--device cuda trains on the GPU (rank r on cuda:r, NCCL between ranks; the data moved there
once), the anchor of bench/webgpu on a GPU machine; the default is cpu.
Prints one JSON line: {"model", "world", "batch", "threads", "steps", "samples_per_s", ...}.
"""

import argparse
import json
import os
import sys
import time

# Pin the BLAS pools too (OpenBLAS-pthread keeps its own threads besides torch's), before they start;
# the spawned DDP processes inherit this.
_threads = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv[:-1] else "1"
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, _threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402


def build(model: str) -> nn.Module:
    torch.manual_seed(7)
    if model == "mlp512":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    if model == "mlp128":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    if model == "cnn":
        # The "cnn" preset: conv 8 3x3 same, maxpool 2, conv 16 3x3 same, maxpool 2, dense 10.
        return nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * 7 * 7, 10),
        )
    raise SystemExit(f"unknown model {model!r}: mlp512, mlp128 or cnn")


def load(path: str | None, rows: int):
    if path:
        with open(path, "rb") as f:
            n, width = np.frombuffer(f.read(8), dtype=np.int32)
            xs = np.frombuffer(f.read(4 * n * width), dtype=np.float32).reshape(n, width)
            labels = np.frombuffer(f.read(4 * n), dtype=np.int32)
        return torch.from_numpy(xs.copy()), torch.from_numpy(labels.astype(np.int64))
    g = torch.Generator().manual_seed(0)
    return torch.rand(rows, 784, generator=g), torch.randint(0, 10, (rows,), generator=g)


def train(rank: int, world: int, a, port: int, out) -> None:
    torch.set_num_threads(a.threads)
    cuda = a.device == "cuda"
    device = torch.device(f"cuda:{rank}" if cuda else "cpu")
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    xs, labels = load(a.data, 9000)
    if a.model == "cnn":
        xs = xs.reshape(-1, 1, 28, 28)
    xs, labels = xs.to(device), labels.to(device)
    model = build(a.model).to(device)
    net = DistributedDataParallel(model, device_ids=[rank] if cuda else None) if world > 1 else model
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    local = a.batch // world
    sampler = DistributedSampler(range(len(labels)), num_replicas=world, rank=rank, shuffle=True, seed=7, drop_last=True) if world > 1 else None
    epoch = 0

    def batches():
        nonlocal epoch
        while True:
            if sampler is not None:
                sampler.set_epoch(epoch)
                order = torch.tensor(list(iter(sampler)))
            else:
                order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(7 + epoch))
            order = order.to(device)
            epoch += 1
            for s in range(len(order) // local):
                idx = order[s * local:(s + 1) * local]
                yield xs[idx], labels[idx]

    it = batches()

    def step() -> None:
        x, y = next(it)
        opt.zero_grad(set_to_none=True)
        loss_fn(net(x), y).backward()
        opt.step()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    for _ in range(a.warmup):
        step()
    sync()
    if world > 1:
        dist.barrier()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    sync()
    if world > 1:
        dist.barrier()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if rank == 0:
        out.put({"model": a.model, "world": world, "batch": a.batch, "threads": a.threads, "steps": a.steps,
                 "samples_per_s": a.steps * a.batch / wall, "ms_per_step": 1000 * wall / a.steps,
                 "cpu_ms_per_step_rank0": 1000 * cpu / a.steps, "torch": torch.__version__,
                 "device": torch.cuda.get_device_name(device) if cuda else "cpu"})
    if world > 1:
        dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="mlp512")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    a = p.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False on this machine")
    if a.batch % a.world:
        raise SystemExit(f"--batch {a.batch} does not split over --world {a.world}")
    if a.world > 1 and not dist.is_gloo_available():
        raise SystemExit("this torch has no gloo backend")
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    if a.world == 1:
        train(0, 1, a, 0, out)
    else:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.start_processes(train, args=(a.world, a, port, out), nprocs=a.world, join=True, start_method="spawn")
    print(json.dumps(out.get()))
    sys.stdout.flush()



if __name__ == "__main__":
    main()

"""A small DDP training script for `"kind": "torchrun"` jobs (CPU with gloo, GPU with nccl).

Synthetic MNIST-shaped data (no download): 28x28 inputs, 10 classes, labels from a fixed
random linear teacher, so the loss visibly falls. Every rank reads its own shard through a
DistributedSampler, with set_epoch each epoch; rank 0 prints the loss and the accuracy.

    gpu-workbench train examples/torchrun/ddp.job.json --python /usr/bin/python3
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank = dist.get_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    g = torch.Generator().manual_seed(0)
    xs = torch.rand(4096, 1, 28, 28, generator=g)
    teacher = torch.randn(28 * 28, 10, generator=g)
    ys = (xs.flatten(1) @ teacher).argmax(1)
    data = TensorDataset(xs, ys)
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    model = DDP(model, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total, correct, loss_sum = 0, 0, 0.0
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            total += len(y)
        stats = torch.tensor([loss_sum, correct, total], dtype=torch.float64, device=device)
        dist.all_reduce(stats)
        if rank == 0:
            print(f"epoch {epoch + 1}: loss {stats[0] / stats[2]:.4f}, train accuracy {stats[1] / stats[2]:.2%}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

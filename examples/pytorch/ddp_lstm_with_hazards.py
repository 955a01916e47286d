"""A sequence model trained with DistributedDataParallel, with the four hazards GPU Workbench's
DDP and RNN rules find. Launch with `torchrun --standalone --nproc-per-node=2 ddp_lstm_with_hazards.py`
(it falls back to one CPU process without torchrun). Lint it with:

    gpu-workbench lint examples/pytorch/ddp_lstm_with_hazards.py

Run as is, it stops on the second batch with the RuntimeError that carried-hidden-state
explains (the LSTM state still points into the previous batch's graph, whose weights the
optimizer has since changed). ddp_lstm_clean.py is the same script with every hazard fixed,
and runs.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Forecaster(nn.Module):
    def __init__(self, features=8, hidden=64):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x, state=None):
        out, state = self.lstm(x, state)
        return self.head(out[:, -1]), state


def setup():
    if "LOCAL_RANK" not in os.environ:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29500", rank=0, world_size=1)
        return torch.device("cpu")
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
        return torch.device("cuda", rank)
    return torch.device("cpu")


def main(epochs=3, batch_size=32):
    device = setup()
    train_set = TensorDataset(torch.randn(4096, 16, 8), torch.randn(4096, 1))
    val_set = TensorDataset(torch.randn(512, 16, 8), torch.randn(512, 1))
    model = Forecaster()
    ddp_model = DDP(model.to(device))
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=1e-3)
    sampler = DistributedSampler(train_set)
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=batch_size, drop_last=True)
    state = None
    for epoch in range(epochs):
        ddp_model.train()
        for x, y in loader:
            model.to(device)
            pred, state = ddp_model(x.to(device), state)
            loss = F.mse_loss(pred, y.to(device))
            optimizer.zero_grad()
            loss.backward(retain_graph=True)
            optimizer.step()
        ddp_model.eval()
        predictions = []
        with torch.no_grad():
            for x, y in val_loader:
                pred, _ = ddp_model(x.to(device))
                predictions.append(pred)
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: {len(predictions)} validation batches")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

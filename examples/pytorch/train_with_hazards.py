"""A small MNIST-style training script with the GPU-memory hazards GPU Workbench finds.

Open it in VS Code with GPU Workbench installed: each hazard is underlined, the hover
explains the memory effect, and the light bulb offers a fix. From a terminal:

    gpu-workbench lint examples/pytorch/train_with_hazards.py
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

device = "cuda" if torch.cuda.is_available() else "cpu"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def make_loaders(batch_size=64, distributed=False):
    train_set = TensorDataset(torch.randn(2048, 1, 28, 28), torch.randint(0, 10, (2048,)))
    val_set = TensorDataset(torch.randn(512, 1, 28, 28), torch.randint(0, 10, (512,)))
    sampler = DistributedSampler(train_set) if distributed else None
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, sampler=sampler)
    val_loader = DataLoader(val_set, batch_size=batch_size)
    return train_loader, val_loader


def evaluate(model, val_loader):
    model.eval()
    correct = 0
    for x, y in val_loader:
        logits = model(x.to(device))
        correct += (logits.argmax(1) == y.to(device)).sum().item()
    return correct / len(val_loader.dataset)


def train(epochs=3):
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    train_loader, val_loader = make_loaders()
    for epoch in range(epochs):
        model.train()
        epoch_loss = 0
        for x, y in train_loader:
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_loss += loss
            torch.cuda.empty_cache()
        print(f"epoch {epoch}: loss {epoch_loss / len(train_loader):.4f}, accuracy {evaluate(model, val_loader):.3f}")


if __name__ == "__main__":
    train()

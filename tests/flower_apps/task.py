"""The task both apps share (one module, where a Flower example keeps its own copy): the model, the
data of one partition, and the train / test loops."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from dpfl.data.idx import read_idx


class Net(nn.Module):
    """A small MLP for 28x28 digits."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


@functools.lru_cache(maxsize=1)
def _mnist() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    root = Path(os.environ.get("FLOWER_APPS_DATA", "data")) / "mnist"
    def images(name: str) -> torch.Tensor:
        return torch.from_numpy(read_idx(root / name).astype(np.float32) / 255.0)
    def labels(name: str) -> torch.Tensor:
        return torch.from_numpy(read_idx(root / name).astype(np.int64))
    return (images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz"),
            images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz"))


def load_data(partition_id: int, num_partitions: int) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """An IID partition of MNIST's training set: 80% to train on, 20% to validate."""
    x, y, _, _ = _mnist()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(42))
    part = order[partition_id::num_partitions]
    cut = int(0.8 * len(part))
    return (x[part[:cut]], y[part[:cut]]), (x[part[cut:]], y[part[cut:]])


def load_test() -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST's test set (for the server's evaluation)."""
    _, _, x, y = _mnist()
    return x, y


def get_weights(net: nn.Module) -> list[np.ndarray]:
    return [v.cpu().numpy() for v in net.state_dict().values()]


def set_weights(net: nn.Module, parameters: list[np.ndarray]) -> None:
    keys = net.state_dict().keys()
    net.load_state_dict({k: torch.tensor(v) for k, v in zip(keys, parameters, strict=True)}, strict=True)


def train(net: nn.Module, data: tuple[torch.Tensor, torch.Tensor], epochs: int = 1, lr: float = 0.1,
          batch_size: int = 32) -> float:
    """Plain SGD; returns the mean training loss of the last epoch."""
    x, y = data
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(0)
    net.train()
    total = 0.0
    for _ in range(epochs):
        total = 0.0
        for idx in torch.randperm(len(x), generator=gen).split(batch_size):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += float(loss) * len(idx)
    return total / len(x)


def test(net: nn.Module, data: tuple[torch.Tensor, torch.Tensor]) -> tuple[float, float]:
    """(loss, accuracy)."""
    x, y = data
    net.eval()
    with torch.no_grad():
        out = net(x)
    return float(nn.functional.cross_entropy(out, y)), float((out.argmax(1) == y).float().mean())

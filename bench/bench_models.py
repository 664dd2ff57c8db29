"""Models for bench/callbacks.py at module level: the callback's background process rebuilds
them from a pickle, which names their class by module path."""

from __future__ import annotations

import lightning.pytorch as L
import torch
from torch import nn


class Regressor(L.LightningModule):
    """An MLP with BatchNorm and Dropout: a few milliseconds a step on two cores."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = 64
        for _ in range(2):
            layers += [nn.Linear(width, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.1)]
            width = 256
        self.net = nn.Sequential(*layers, nn.Linear(256, 8))
        self.example_input_array = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)

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


class ConvClassifier(L.LightningModule):
    """A small CNN with BatchNorm and Dropout (bench/cuda_models.py: a fit on a GPU, where cuDNN's
    convolutions use TF32 unless told not to)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.1), nn.Linear(16, 4))
        self.example_input_array = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

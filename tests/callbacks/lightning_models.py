"""A Lightning module at module level (the background process unpickles it by class path)."""

from __future__ import annotations

import lightning.pytorch as L
import torch
from torch import nn


class Regressor(L.LightningModule):
    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.example_input_array = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        out = self(x)
        out = out[0] if isinstance(out, tuple) else out
        loss = nn.functional.mse_loss(out, y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

"""Tiny models for the callback tests, at module level: the background process rebuilds them
from a pickle, which names their class by module path."""

from __future__ import annotations

import torch
from torch import nn


class TinyNet(nn.Module):
    """Linear-BatchNorm-Dropout, plus a determinant: ONNX has Det, CoreML and TensorRT don't (a
    blocker for those targets)."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.drop = nn.Dropout(0.2)
        self.l2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.l2(self.drop(torch.relu(self.bn(self.l1(x)))))
        return y, torch.linalg.det(y.reshape(-1, 2, 2))


def perturbed(model: nn.Module, seed: int = 0) -> nn.Module:
    """Seeded weights, scaled up so outputs are of order 1 (parity then proves something)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    return model

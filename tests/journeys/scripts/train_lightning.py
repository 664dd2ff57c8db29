"""A user's training script: a small residual CNN (defined at module level, as the background
conversion process needs to unpickle it) trained with Lightning for two epochs, LightningConvert converting each epoch to ONNX and
Core ML in the background, then ``unframe.convert()`` on the trained model at the end.

    python train_lightning.py OUT_DIR

Prints one JSON line: the callback's outcomes and the final conversion's parity. Writes
OUT_DIR/final.onnx and OUT_DIR/final_io.npz (the sample and the trained model's own output)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning.pytorch as L
import numpy as np
import torch
from torch import nn

import unframe
from unframe.callbacks.lightning import LightningConvert


class Block(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU(),
                                  nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.conv(x))


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                 Block(16), nn.MaxPool2d(2), Block(16), nn.AdaptiveAvgPool2d(1),
                                 nn.Flatten(), nn.Linear(16, 10))
        self.example_input_array = torch.randn(2, 3, 32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(out: Path) -> None:
    torch.manual_seed(0)
    module = Classifier()
    x = torch.randn(32, 3, 32, 32)
    y = torch.randint(0, 10, (32,))
    convert = LightningConvert(to=["onnx", "coreml"], every_n_epochs=1)
    trainer = L.Trainer(max_epochs=2, default_root_dir=out, callbacks=[convert], logger=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8))
    module.eval()
    sample = torch.randn(4, 3, 32, 32)
    result = unframe.convert(module, to="onnx", sample_inputs=sample, output=out / "final.onnx")
    with torch.no_grad():
        np.savez(out / "final_io.npz", x=sample.numpy(), y=module(sample).numpy())
    print(json.dumps({
        "outcomes": [{"tag": o.tag, "ok": o.ok, "error": o.error,
                      "targets": {k: {"passed": t.passed, "path": str(t.path), "error": t.error}
                                  for k, t in o.targets.items()}} for o in convert.outcomes],
        "final_passed": bool(result.report),
        "final_stages": [s.summary() for s in result.report.stages],
    }))


if __name__ == "__main__":
    main(Path(sys.argv[1]))

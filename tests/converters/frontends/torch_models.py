"""Small real architectures for the torch frontend tests and bench, built with seeded weights.

Importable by module path (``tests.converters.frontends.torch_models:make_cnn``) so the
``module:factory`` source and the state-dict route can be tested with a real factory.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Conv-BatchNorm-ReLU, max and average pooling, bilinear upsampling, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.pool(h)
        h = torch.relu(self.bn2(self.conv2(h)))
        up = nn.functional.interpolate(h, scale_factor=2.0, mode="bilinear", align_corners=False)
        logits = self.head(nn.functional.adaptive_avg_pool2d(h, 1).flatten(1))
        return logits, up


class Recurrent(nn.Module):
    """An LSTM or a GRU (batch first) with a linear head on every step."""

    def __init__(self, cell: str = "lstm") -> None:
        super().__init__()
        self.rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(6, 12, batch_first=True)
        self.head = nn.Linear(12, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out)


class TinyEncoder(nn.Module):
    """Embedding + a one-layer transformer encoder (attention, LayerNorm, GELU) + mean pool."""

    def __init__(self, vocab: int = 50, dim: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=64, dropout=0.0,
                                           activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.norm(self.encoder(self.embed(tokens))).mean(dim=1)


class DictModel(nn.Module):
    """Takes a dict of tensors, returns a dict of tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.image = nn.Linear(10, 4)
        self.side = nn.Linear(3, 4)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        fused = torch.tanh(self.image(batch["image"]) + self.side(batch["meta"]))
        return {"score": fused.sum(-1), "embedding": fused}


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * y


class DataDependent(nn.Module):
    """Python control flow on a tensor's value: torch.export can't capture it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if y.sum() > 0:
            return y * 2
        return y - 1


def seeded(cls: type[nn.Module], seed: int = 0, **kwargs: Any) -> nn.Module:
    torch.manual_seed(seed)
    model = cls(**kwargs)
    # Non-trivial BatchNorm statistics so eval mode really differs from identity.
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 1.5)
    return model.eval()


def make_cnn() -> nn.Module:
    return seeded(SmallCNN)


def make_two_inputs() -> nn.Module:
    return seeded(TwoInputs)


def cnn_sample(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, 16, 16, generator=torch.Generator().manual_seed(1))


def tiny_bert(seed: int = 0) -> Any:
    """A transformers BERT built from a tiny config (no downloads)."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=32)
    torch.manual_seed(seed)
    return BertModel(config).eval()

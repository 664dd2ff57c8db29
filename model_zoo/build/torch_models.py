"""PyTorch reference models: small public architectures (ResNet, VGG, MobileNet, SqueezeNet,
DenseNet, ShuffleNet, U-Net, a transformer encoder, a ViT, GRU/LSTM) with seeded random weights,
exported with the TorchScript exporter (``dynamo=False``, which still writes opsets 9+).

Every builder is ``build(out_dir, opset)``: it writes ``model.onnx``, ``inputs.npz`` and torch's
own ``outputs.npz`` (keyed by the ONNX output names) into ``out_dir``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from zoo_common import MODEL_FILE, save_io, seed_everything

HEAD_STD = 2.0  # the standard deviation of the head's outputs after ``_spread_head``


def _spread_head(model: Any, args: tuple[Any, ...]) -> None:
    """Scale the last Linear or Conv2d layer (the classifier, a U-Net's mask logits) so its
    outputs spread with a standard deviation of about ``HEAD_STD`` on the sample inputs: random-
    init heads gave logits of scale 0.1 and a near-uniform softmax (1/10 +- 0.015), which a
    parity check can learn little from."""
    import torch

    heads = [m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    if not heads:
        return
    seen: list[Any] = []
    hook = heads[-1].register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    with torch.no_grad():
        model(*args)
    hook.remove()
    spread = float(seen[-1].double().std()) if seen else 0.0
    if spread > 0:
        with torch.no_grad():
            for p in heads[-1].parameters():
                p.mul_(max(1.0, HEAD_STD / spread))  # only ever widened


def _export(model: Any, example: dict[str, Any], out_dir: Path, opset: int,
            output_names: list[str], dynamic_batch: bool = True) -> None:
    import torch

    model.eval()
    names = list(example)
    args = tuple(example.values())
    _spread_head(model, args)
    axes: dict[str, dict[int, str]] = {}
    if dynamic_batch:
        axes = {n: {0: "batch"} for n in names + output_names}
    torch.onnx.export(model, args, str(out_dir / MODEL_FILE), opset_version=opset, dynamo=False,
                      input_names=names, output_names=output_names, dynamic_axes=axes or None)
    with torch.no_grad():
        result = model(*args)
    results = result if isinstance(result, tuple) else (result,)
    outputs = {n: r.detach().numpy() for n, r in zip(output_names, results, strict=True)}
    save_io(out_dir, {n: t.numpy() for n, t in example.items()}, outputs)


def _image(batch: int = 2, size: int = 32, channels: int = 3) -> Any:
    import torch

    return torch.randn(batch, channels, size, size)


def _modules() -> Any:
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNetTiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                      nn.ReLU(), nn.MaxPool2d(2))
            self.layers = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2))
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(64, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))

    class Fire(nn.Module):
        def __init__(self, cin: int, squeeze: int, expand: int) -> None:
            super().__init__()
            self.squeeze = nn.Conv2d(cin, squeeze, 1)
            self.e1 = nn.Conv2d(squeeze, expand, 1)
            self.e3 = nn.Conv2d(squeeze, expand, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            s = torch.relu(self.squeeze(x))
            return torch.cat([torch.relu(self.e1(s)), torch.relu(self.e3(s))], 1)

    class SqueezeNetTiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(3, 32, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
                                          Fire(32, 8, 16), Fire(32, 8, 16), nn.MaxPool2d(3, 2, ceil_mode=True),
                                          Fire(32, 16, 32))
            self.head = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(64, 10, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.flatten(self.head(self.features(x)), 1)

    class DenseLayer(nn.Module):
        def __init__(self, cin: int, growth: int) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 4 * growth, 1, bias=False),
                                      nn.BatchNorm2d(4 * growth), nn.ReLU(),
                                      nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, self.body(x)], 1)

    class DenseNetTiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list[nn.Module] = [nn.Conv2d(3, 16, 3, padding=1, bias=False)]
            ch = 16
            for _ in range(3):
                layers.append(DenseLayer(ch, 8))
                ch += 8
            layers += [nn.BatchNorm2d(ch), nn.ReLU(), nn.Conv2d(ch, ch // 2, 1, bias=False), nn.AvgPool2d(2)]
            self.features = nn.Sequential(*layers)
            self.fc = nn.Linear(ch // 2, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.features(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = cin * expand
            self.use_res = stride == 1 and cin == cout
            self.body = nn.Sequential(
                nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
                nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                nn.ReLU6(), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.body(x)
            return x + y if self.use_res else y

    class MobileNetTiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
                InvertedResidual(16, 16, 1, 2), InvertedResidual(16, 24, 2, 4), InvertedResidual(24, 24, 1, 4),
                InvertedResidual(24, 32, 2, 4))
            self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(32, 10))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.features(x).mean([2, 3]))

    class ShuffleBlock(nn.Module):
        def __init__(self, ch: int) -> None:
            super().__init__()
            half = ch // 2
            self.branch = nn.Sequential(
                nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(),
                nn.Conv2d(half, half, 3, 1, 1, groups=half, bias=False), nn.BatchNorm2d(half),
                nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b = x.chunk(2, dim=1)
            y = torch.cat([a, self.branch(b)], 1)
            n, c, h, w = y.shape
            return y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)

    class ShuffleNetTiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 24, 3, 2, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU())
            self.blocks = nn.Sequential(ShuffleBlock(24), ShuffleBlock(24), ShuffleBlock(24))
            self.fc = nn.Linear(24, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.blocks(self.stem(x)).mean([2, 3]))

    class UNetTiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
            self.enc2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.dec = nn.Sequential(nn.Conv2d(24, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = self.enc1(x)
            return torch.sigmoid(self.dec(torch.cat([a, self.up(self.enc2(a))], 1)))

    class VggTiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
            self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(),
                                            nn.Dropout(), nn.Linear(64, 10), nn.Softmax(dim=1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.classifier(self.features(x))

    class AlexNetTiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 16, 5, 2, 2), nn.ReLU(), nn.LocalResponseNorm(5), nn.MaxPool2d(3, 2),
                nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2))
            self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 3 * 3, 10), nn.LogSoftmax(dim=1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.classifier(self.features(x))

    class TextTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(100, 32)
            layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(32, 3)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(self.embed(tokens)).mean(1))

    class ViTTiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, 32, 8, 8)
            self.cls = nn.Parameter(torch.randn(1, 1, 32))
            self.pos = nn.Parameter(torch.randn(1, 17, 32) * 0.02)
            layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(32)
            self.head = nn.Linear(32, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            p = self.patch(x).flatten(2).transpose(1, 2)
            p = torch.cat([self.cls.expand(p.shape[0], -1, -1), p], 1) + self.pos
            return self.head(self.norm(self.encoder(p))[:, 0])

    class GruTagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(8, 16, num_layers=2, batch_first=True)
            self.fc = nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y, _ = self.gru(x)
            return self.fc(y)

    class BiLstm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(8, 16, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(32, 2)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y, (h, _) = self.lstm(x)
            return self.fc(y[:, -1]), h

    class MlpLayerNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(20, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 64),
                                     nn.SiLU(), nn.Linear(64, 5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

    return {cls.__name__: cls for cls in (
        ResNetTiny, SqueezeNetTiny, DenseNetTiny, MobileNetTiny, ShuffleNetTiny, UNetTiny, VggTiny,
        AlexNetTiny, TextTransformer, ViTTiny, GruTagger, BiLstm, MlpLayerNorm)}


def _make(name: str) -> Any:
    import torch

    torch.manual_seed(0)
    seed_everything()
    model = _modules()[name]()
    # Random BatchNorm statistics, so that the folded-in normalization is not an identity.
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def _image_model(name: str, size: int = 32) -> Callable[[Path, int], None]:
    def build(out_dir: Path, opset: int) -> None:
        model = _make(name)
        _export(model, {"image": _image(2, size)}, out_dir, opset, ["logits"])
    build.__doc__ = f"{name} on 3x{size}x{size} images."
    return build


resnet_tiny = _image_model("ResNetTiny")
squeezenet_tiny = _image_model("SqueezeNetTiny")
densenet_tiny = _image_model("DenseNetTiny")
mobilenet_tiny = _image_model("MobileNetTiny")
shufflenet_tiny = _image_model("ShuffleNetTiny")
vgg_tiny = _image_model("VggTiny")
alexnet_tiny = _image_model("AlexNetTiny")
vit_tiny = _image_model("ViTTiny")


def unet_tiny(out_dir: Path, opset: int) -> None:
    _export(_make("UNetTiny"), {"image": _image(2, 32)}, out_dir, opset, ["mask"])


def text_transformer(out_dir: Path, opset: int) -> None:
    import torch

    model = _make("TextTransformer")
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 100, (2, 12)).astype(np.int64))
    _export(model, {"tokens": tokens}, out_dir, opset, ["logits"])


def gru_tagger(out_dir: Path, opset: int) -> None:
    import torch

    model = _make("GruTagger")
    _export(model, {"sequence": torch.randn(2, 7, 8)}, out_dir, opset, ["tags"])


def bilstm(out_dir: Path, opset: int) -> None:
    import torch

    model = _make("BiLstm")
    _export(model, {"sequence": torch.randn(2, 7, 8)}, out_dir, opset, ["logits", "hidden"],
            dynamic_batch=False)


def mlp_layernorm(out_dir: Path, opset: int) -> None:
    import torch

    _export(_make("MlpLayerNorm"), {"features": torch.randn(4, 20)}, out_dir, opset, ["scores"])

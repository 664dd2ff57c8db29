"""Shared by the ExecuTorch backend's tests: the inputs the torch frontend prepares (its own
functions, in its order: samples bound, leaves named, the batch axis proven by a probe run),
tiny seeded models with outputs of order 1, and a parity check with unframe's comparator."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("executorch", reason="needs the executorch extra (unframe[executorch])")

import torch  # noqa: E402

from unframe.converters.backends.executorch.direct import convert_from_torch  # noqa: E402
from unframe.converters.base import Artifact, InputSpec, Target  # noqa: E402
from unframe.converters.frontends._torch import dynamic as dyn  # noqa: E402
from unframe.converters.frontends._torch import inputs as inp  # noqa: E402
from unframe.converters.frontends._torch.runner import TorchRunner, run_model  # noqa: E402
from unframe.converters.registry import BACKENDS  # noqa: E402
from unframe.validate.compare import StageParity, compare  # noqa: E402


@dataclass
class Prepared:
    """What the torch frontend hands a direct route: the inputs, the output names, and parity's
    feeds (the samples, and the probe at another batch size when the batch axis was proven)."""

    model: Any
    inputs: inp.ModelInputs
    outputs: list[str]
    feeds: list[dict[str, np.ndarray]]


def prepare(model: Any, samples: Any, spec: InputSpec | None = None) -> Prepared:
    spec = spec or InputSpec(samples=samples)
    args, kwargs = inp.from_samples(model, samples, "model")
    inputs = inp.finalize(model, args, kwargs, spec, "model")
    eager = run_model(model, *inputs.rebuild(inp.tensor_copies(inputs)), "model")
    feeds = [inp.feeds(inputs)]
    probe, _ = dyn.prove(model, inputs, "model")
    dyn.use_as_example(inputs, probe)
    if probe is not None:
        feeds.append(probe.feed)
    return Prepared(model, inputs, inp.output_names(eager), feeds)


def convert(p: Prepared, workdir: Path, **options: Any) -> tuple[Artifact, Target]:
    target = Target("executorch", options=options)
    return convert_from_torch(p.model, p.inputs, target, workdir, p.outputs), target


def parity(p: Prepared, artifact: Artifact, target: Target, feeds: list[dict[str, np.ndarray]] | None = None,
           model: Any = None) -> StageParity:
    """The artifact run by the backend's runner against torch eager, with the backend's
    tolerance, as the pipeline's parity stage compares them."""
    backend = BACKENDS.get("executorch")
    runner = backend.runner(artifact, target)
    reference = TorchRunner(model if model is not None else p.model, p.inputs, p.outputs, "model")
    return compare(reference, runner, feeds or p.feeds, default_fn=lambda dt: backend.tolerance(dt, target))


def perturbed(module: torch.nn.Module, seed: int, scale: float = 0.5) -> torch.nn.Module:
    """Random-init weights nudged so that outputs are of order 1 (not ~0, not constant)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale * (p.std() if p.numel() > 1 else 1.0))
    return module.eval()


class SmallCNN(torch.nn.Module):
    """conv -> relu -> mean over H, W (XNNPACK leaves the mean to a portable kernel) -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean((2, 3))) * 4


def small_cnn(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return perturbed(SmallCNN(), seed)


def images(batch: int, seed: int = 1, size: int = 16) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def output_scale(p: Prepared) -> float:
    out = run_model(p.model, *p.inputs.rebuild(inp.tensor_copies(p.inputs)), "model")
    leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    return max(float(t.abs().max()) for t in leaves if t.is_floating_point())

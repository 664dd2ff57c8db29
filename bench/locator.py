"""The time the divergence locator adds to a failing conversion, per stage, in one run.

Two models as users have them: a ~600-node torch transformer encoder (token embedding, 7 layers of
attention and MLP, classifier head) and a 200-layer CNN (200 x Conv+ReLU, residual-friendly init
so outputs stay of order 1). For each, one fault is injected per stage kind, the way the tests do:

- export: a torch exporter registered for the bench that perturbs one weight after export
  (the locator re-captures the ExportedProgram and taps torch's intermediates);
- opset: a wrong version-converter adapter (Softmax 13->12 on the wrong axis; Relu 14->13 as a
  LeakyRelu), converting the exported graph to opset 12;
- backend: a wrong CoreML translator (Softmax on the wrong axis; Relu as a sigmoid), converting
  to an fp32 ML Program checked by the MIL evaluator.

Each failing conversion is timed with the locator off (``locate=False``: the parity failure
alone) and on (the same failure plus the search, plot and repro); the difference is what the
locator adds. Median of ``--reps``.

    .venv/bin/python bench/locator.py [--reps 3] [--models transformer,cnn] [--stages export,opset,backend]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from benchlib import median_time, print_rows  # noqa: E402


# ------------------------------------------------------------------------------ models --------
def transformer() -> tuple[Any, Any]:
    import torch
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(100, 32)
            self.pos = nn.Parameter(torch.randn(1, 16, 32) * 0.1)
            layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 7, enable_nested_tensor=False)
            self.head = nn.Linear(32, 5)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            h = self.embed(tokens) + self.pos[:, : tokens.shape[1]]
            return self.head(self.encoder(h).mean(dim=1))

    torch.manual_seed(0)
    model = Encoder().eval()
    tokens = torch.randint(0, 100, (2, 16))
    return model, tokens


def cnn(layers: int = 200, channels: int = 8) -> tuple[Any, Any]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    blocks: list[nn.Module] = [nn.Conv2d(3, channels, 3, padding=1), nn.ReLU()]
    for _ in range(layers - 1):
        conv = nn.Conv2d(channels, channels, 3, padding=1)
        with torch.no_grad():  # identity plus noise: the signal survives 200 layers
            nn.init.dirac_(conv.weight)
            conv.weight.add_(0.02 * torch.randn_like(conv.weight))
            conv.bias.uniform_(-0.02, 0.02)
        blocks += [conv, nn.ReLU()]
    model = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 4)).eval()
    return model, torch.rand(2, 3, 16, 16)


MODELS = {"transformer": transformer, "cnn": cnn}
# per model: (op whose adapter/translator is made wrong, the adapter's opset step)
FAULTY_OP = {"transformer": ("Softmax", (13, 12)), "cnn": ("Relu", (14, 13))}


# ------------------------------------------------------------------------------ faults --------
@contextlib.contextmanager
def replaced(registry: Any, key: Any, obj: Any) -> Iterator[None]:
    """Put ``obj`` under ``key`` (in place of the built-in one, or where the generic step ran)."""
    registry.load()
    original = registry.get(key, None)
    registry.unregister(key)
    registry.register(key, obj, origin="bench: a deliberately wrong entry")
    try:
        yield
    finally:
        registry.unregister(key)
        if original is not None:
            registry.register(key, original)


@contextlib.contextmanager
def faulty_exporter() -> Iterator[str]:
    import numpy as np
    import onnx_ir as ir

    from unframe.converters.frontends.torch import TorchFrontend
    from unframe.converters.registry import FRONTENDS

    class Faulty(TorchFrontend):
        name = "torch-faulty-bench"

        def to_onnx(self, native: Any, spec: Any, opts: Any) -> Any:
            result = super().to_onnx(native, spec, opts)
            weights = [v for v in result.model.graph.initializers.values()
                       if v.const_value is not None and len(v.const_value.shape) >= 2]
            value = weights[len(weights) // 2]  # a weight half-way through the model
            array = value.const_value.numpy()
            value.const_value = ir.tensor(array + np.sign(array) * np.abs(array).mean(), name=value.name)
            return result

    FRONTENDS.register(Faulty.name, Faulty(), origin="bench")
    try:
        yield Faulty.name
    finally:
        FRONTENDS.unregister(Faulty.name)


@contextlib.contextmanager
def wrong_adapter(op: str, step: tuple[int, int]) -> Iterator[None]:
    from unframe.version_converter.registry import ADAPTERS, AdapterKey

    def wrong(node: Any, st: Any) -> None:
        if op == "Softmax":
            st.set_attr("axis", 1)  # the sequence axis instead of the key axis
        else:
            node.op_type = "LeakyRelu"
            st.set_attr("alpha", 0.5)

    with replaced(ADAPTERS, AdapterKey("", op, *step), wrong):
        yield


@contextlib.contextmanager
def wrong_translator(op: str) -> Iterator[None]:
    from coremltools.converters.mil import Builder as mb

    from unframe.converters.backends.coreml.ops import TRANSLATORS, Translator

    def wrong(ctx: Any) -> Any:
        x = ctx.inputs[0]
        return mb.softmax(x=x, axis=1) if op == "Softmax" else mb.sigmoid(x=x)

    with replaced(TRANSLATORS, op, Translator(op, wrong)):
        yield


# ------------------------------------------------------------------------------ timing --------
def failing_call(stage: str, model: Any, sample: Any, onnx_path: Path, op: str,
                 step: tuple[int, int], folder: Path) -> tuple[Callable[[bool], Any], Any]:
    """(a call that fails at ``stage`` with the locator on or off, the context holding the fault)."""
    import unframe

    if stage == "export":
        ctx = faulty_exporter()

        def call(locate: bool) -> Any:
            return unframe.convert(model, from_="torch-faulty-bench", to="onnx", sample_inputs=sample,
                                   locate=locate, debug_dir=folder / "export")
        return call, ctx
    if stage == "opset":
        def call(locate: bool) -> Any:
            return unframe.convert_opset(onnx_path, step[1], locate=locate, debug_dir=folder / "opset")
        return call, wrong_adapter(op, step)

    def call(locate: bool) -> Any:
        return unframe.convert(onnx_path, to="coreml", precision="fp32", locate=locate,
                               debug_dir=folder / "backend")
    return call, wrong_translator(op)


def run_failing(call: Callable[[bool], Any], locate: bool, what: str) -> Any:
    """Run a call that must fail parity; return the divergence the locator found (or None)."""
    from unframe.errors import ParityError

    try:
        call(locate)
    except ParityError as exc:
        return exc.divergence
    raise RuntimeError(f"{what}: the injected fault did not fail parity")


def measure(name: str, stages: list[str], reps: int) -> list[dict[str, Any]]:
    import onnx_ir as ir

    import unframe

    model, sample = MODELS[name]()
    op, step = FAULTY_OP[name]
    rows = []
    with tempfile.TemporaryDirectory(prefix="unframe-bench-locate-") as tmp:
        folder = Path(tmp)
        onnx_path = folder / f"{name}.onnx"
        unframe.convert(model, to="onnx", opset=step[0], sample_inputs=sample, output=onnx_path)
        nodes = len(list(ir.load(onnx_path).graph))
        for stage in stages:
            call, fault = failing_call(stage, model, sample, onnx_path, op, step, folder)
            with fault:
                run_failing(call, True, f"{name}/{stage}")  # warm-up: imports, torchlib, passes
                without = median_time(lambda c=call: run_failing(c, False, ""), reps)
                found: list[Any] = []
                with_locator = median_time(
                    lambda c=call, f=found: f.append(run_failing(c, True, "")), reps)
            d = found[-1]
            rows.append({"model": name, "nodes": nodes, "stage": stage, "no locator s": without,
                         "with locator s": with_locator, "added s": with_locator - without,
                         "locator's own s": d.seconds,
                         "named": f"{d.node} [{d.op_type}]" if d else d.status,
                         "compared": d.compared, "reproduces": "yes" if d.reproduces else "no"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--models", default="transformer,cnn")
    parser.add_argument("--stages", default="export,opset,backend")
    args = parser.parse_args()
    rows = []
    for name in args.models.split(","):
        t0 = time.perf_counter()
        rows += measure(name, args.stages.split(","), args.reps)
        print(f"# {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print_rows(rows, width=14)


if __name__ == "__main__":
    main()

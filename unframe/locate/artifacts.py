"""Open any artifact unframe writes for ``unframe compare``: a runner of it, a tap into it when its
intermediates can be seen here, and the ONNX graph when it is one.

- ``.onnx``: onnxruntime (``OnnxTap`` for the intermediates); the graph is the file.
- ``.mlpackage``: the MIL evaluator (the CoreML runner reads the intermediates through the
  package's recorded value map; ``taps.runner_tap``).
- ``.engine`` / ``.plan``: the TensorRT engine on a CUDA device; its intermediates need its
  ONNX graph to rebuild from, so ``compare A.onnx B.engine --intermediates`` bisects on a GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unframe.errors import InputError, UnsupportedError

if TYPE_CHECKING:
    import onnx_ir as ir

    from unframe.validate.runner import Runner


@dataclass
class Opened:
    path: Path
    kind: str  # onnx | coreml | tensorrt
    runner: Runner
    graph: ir.Model | None = None
    tap: Any = None
    options: dict[str, Any] = field(default_factory=dict)  # how it was built (precision, target)

    def feeds(self, count: int = 1) -> list[dict[str, Any]]:
        """Inputs drawn from the artifact's own input specs."""
        from unframe.validate.inputs import generate_feeds

        if self.graph is not None:
            return generate_feeds(self.graph, source=str(self.path))[:count]
        return [_feeds_from_specs(self.runner.input_specs() or [], str(self.path))]


def _feeds_from_specs(specs: list[Any], source: str) -> dict[str, Any]:
    """One feed from a runner's input specs (dynamic dims as 2): floats ~N(0, 1), ints in 0..9."""
    import numpy as np

    rng = np.random.default_rng(0)
    feeds = {}
    for spec in specs:
        if spec.shape is None:
            raise InputError(f"{source}: input {spec.name!r} has no known rank",
                             "pass --sample-inputs with an .npz of inputs")
        shape = tuple(d if isinstance(d, int) else 2 for d in spec.shape)
        dtype = np.dtype(spec.dtype)
        feeds[spec.name] = (rng.standard_normal(shape).astype(dtype) if dtype.kind == "f"
                            else rng.integers(0, 10, shape).astype(dtype))
    return feeds


def open_artifact(path: str | Path) -> Opened:
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or folder", "check the path")
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        return _onnx(path)
    if suffix in (".mlpackage", ".mlmodel"):
        return _coreml(path)
    if suffix in (".engine", ".plan"):
        return _engine(path)
    raise InputError(f"{path}: not an artifact unframe can run ({suffix or 'no suffix'})",
                     "compare .onnx, .mlpackage or .engine files")


def _onnx(path: Path) -> Opened:
    from unframe import io
    from unframe.validate.intermediates import OnnxTap
    from unframe.validate.onnxruntime import onnx_runner

    model = io.load_model(path)
    return Opened(path, "onnx", onnx_runner(model), model, OnnxTap(model))


def _coreml(path: Path) -> Opened:
    from unframe.converters.backends.coreml.runner import open_package, user_metadata
    from unframe.locate.taps import runner_tap

    runner = open_package(path)
    meta = user_metadata(path)
    options = {"precision": meta.get("unframe.precision", "fp16"), "target": meta.get("unframe.target")}
    return Opened(path, "coreml", runner, None, runner_tap(runner), {k: v for k, v in options.items() if v})


def _engine(path: Path) -> Opened:
    from unframe.converters.backends.tensorrt import trtmodule
    from unframe.converters.backends.tensorrt.sidecar import read_sidecar

    device = trtmodule.cuda_device()
    if isinstance(device, str):
        raise UnsupportedError(f"{path}: running a TensorRT engine needs a CUDA device ({device})",
                               "compare it on a machine with a GPU")
    from unframe.converters.backends.tensorrt.runner import TensorRTRunner

    sidecar = read_sidecar(path)
    options = {"precision": sidecar.get("precision", "fp32")} if isinstance(sidecar, dict) else {}
    return Opened(path, "tensorrt", TensorRTRunner(path.read_bytes()), None, None, options)


def describe(opened: Opened) -> str:
    return f"{opened.path.name} ({opened.runner.name})"


def provenance_of(opened: Opened) -> dict[str, Any]:
    if opened.graph is not None:
        return dict(opened.graph.metadata_props)
    return json.loads(json.dumps(opened.options))

"""The LiteRT backend: a .tflite flatbuffer, run here on ai-edge-litert's interpreter (XNNPACK).

Routes: from a TF/Keras source through TensorFlow's TFLite converter (``from_tf.convert_from_tf``)
and from a torch source through litert-torch (``from_torch.convert_from_torch``), both direct:
no ONNX in between. From ONNX there is none: the maintained ONNX -> TFLite converter (onnx2tf)
pins TensorFlow 2.19, onnx 1.19 and numpy 1.26, which can't live beside unframe's pins, so
``check`` on an ONNX graph is one exit-4 blocker naming the direct routes, and ``convert`` refuses
the same way (they never disagree).

Target options: ``precision`` (fp32, the default; fp16 stores the weights in 16 bits, the
interpreter computes in float32).

Provenance and the I/O record are TFLite metadata entries (``unframe.<key>``, UTF-8 text), shown by
``unframe inspect``; the main signature's keys are the source's input and output names.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from unframe.converters.backends.litert import common
from unframe.converters.base import Artifact, Backend, RunnerUnavailable, Target
from unframe.converters.registry import register_backend
from unframe.errors import Blocker, UnsupportedError, UsageError
from unframe.validate.runner import Runner
from unframe.validate.tolerances import Tolerance

if TYPE_CHECKING:
    import onnx_ir as ir

NO_ONNX_ROUTE = ("no ONNX -> .tflite converter installs beside unframe's pins (onnx2tf pins TensorFlow "
                 "2.19, onnx 1.19 and numpy 1.26)")
DIRECT_ROUTES = "convert from the TF/Keras or torch source (TensorFlow's TFLite converter, litert-torch)"
# fp16 weights, float32 compute: each weight moves by up to 2**-11 of itself, and an output by
# the sum of those over what it accumulates: of the output's scale (validate.tolerances)
FP16_TOLERANCE = Tolerance(1e-2, 1e-2, of_scale=True)


@register_backend
class LiteRTBackend(Backend):
    name = "litert"
    extra = "litert"
    requires = ("ai_edge_litert",)
    packages = "ai-edge-litert, tensorflow (TF/Keras sources), litert-torch (torch sources)"
    description = ("LiteRT flatbuffer (.tflite, alias tflite) from the TF/Keras or torch source, checked on "
                   "ai-edge-litert's interpreter (XNNPACK)")
    suffixes = (".tflite",)
    canonical_opset = None  # no ONNX importer: the routes start from the source framework
    option_names = ("precision",)
    onnx_route = False
    direct_modules = {"tf": "unframe.converters.backends.litert.from_tf",
                      "torch": "unframe.converters.backends.litert.from_torch"}
    direct_tools = {"tf": "TensorFlow's TFLite converter", "torch": "litert-torch"}
    # each route's own quantizer (quantize.py): TFLite's converter, litert-torch's PT2E and recipes;
    # the sensitivity pass names ONNX nodes, which these routes have none of
    quantize_schemes = ("int8", "int8-dynamic", "w8")

    def distributions(self) -> tuple[str, ...]:
        return ("ai-edge-litert", "litert-torch")

    # -- the ONNX route: none ------------------------------------------------------------------
    def check(self, model: ir.Model, target: Target) -> list[Blocker]:
        blockers = [Blocker("*", NO_ONNX_ROUTE, hint=DIRECT_ROUTES)]
        if str(target.get("precision", "fp32")).lower() not in common.PRECISIONS:
            blockers.append(Blocker("*", f"precision {target.get('precision')!r} is not one of "
                                         f"{', '.join(common.PRECISIONS)}"))
        return blockers

    def convert(self, model: ir.Model, target: Target, workdir: Path) -> Artifact:
        raise UnsupportedError("LiteRT can't be reached from an ONNX graph here",
                               DIRECT_ROUTES, blockers=self.check(model, target))

    # -- the artifact --------------------------------------------------------------------------
    def runner(self, artifact: Artifact, target: Target) -> Runner:
        import importlib.util

        from unframe.converters.backends.litert.runner import LiteRTRunner

        if importlib.util.find_spec("ai_edge_litert") is None:
            raise RunnerUnavailable("ai-edge-litert is not installed (pip install 'unframe[litert]')")
        record = _io(artifact)
        if artifact.metadata.get("built_here") and isinstance(artifact.model, (bytes, bytearray)):
            return LiteRTRunner(record, content=bytes(artifact.model))
        if artifact.path is None:
            raise RunnerUnavailable("the .tflite artifact is neither in memory nor on disk")
        return LiteRTRunner(record, path=artifact.path)  # a file from outside: in a child process

    def compute_precision(self, target: Target) -> str:
        return common.precision(target)

    def tolerance(self, dtype: np.dtype, target: Target) -> Tolerance | None:
        if common.precision(target) == "fp16" and np.dtype(dtype).kind == "f":
            return FP16_TOLERANCE
        return None

    def stamp(self, artifact: Artifact, provenance: dict[str, str]) -> None:
        from unframe.converters.backends.litert import flatbuf

        entries = {f"{flatbuf.PREFIX}{k}": common.text(v) for k, v in provenance.items()}
        artifact.metadata.update(entries)
        ours = {k: common.text(v) for k, v in artifact.metadata.items() if k.startswith(flatbuf.PREFIX)}
        artifact.model = flatbuf.stamp(bytes(artifact.model), ours)

    def write(self, artifact: Artifact, path: Path) -> list[Path]:
        path = Path(path)
        if path.suffix.lower() not in self.suffixes:
            raise UsageError(f"LiteRT output {path} must end in .tflite", "use -o model.tflite")
        path.write_bytes(bytes(artifact.model))
        return [path]


def _io(artifact: Artifact) -> dict[str, Any] | None:
    import json

    from unframe.converters.backends.litert import flatbuf

    raw = artifact.metadata.get(flatbuf.IO_KEY)
    return json.loads(raw) if isinstance(raw, str) else None

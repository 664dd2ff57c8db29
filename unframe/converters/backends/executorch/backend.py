"""The ExecuTorch backend: a ``.pte`` program (+ ``<program>.pte.json`` sidecar) for torch sources.

ExecuTorch programs are made by torch.export from the torch model itself (``direct.py``); no
maintained tool takes ONNX to ``.pte``. So the ONNX route this class is asked for by the
ONNX-hub pipeline is a refusal: ``check`` gives the one blocker naming the route to use and
``convert`` raises it (exit 4). What the class also does for either route: the runner
(ExecuTorch's Python runtime, on the CPU here), the parity tolerance of a float16 program,
provenance in the sidecar and the write.

Target options: ``precision`` (fp32, the default, or fp16), ``shapes``
(``name:min:opt:max``: the bounds of the dynamic dims; opt is not used) and ``static``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from unframe.converters.backends.executorch import pte
from unframe.converters.backends.executorch.direct import PRECISIONS
from unframe.converters.base import Artifact, Backend, RunnerUnavailable, Target
from unframe.converters.registry import register_backend
from unframe.errors import Blocker, UnsupportedError, UsageError
from unframe.validate.runner import Runner
from unframe.validate.tolerances import Tolerance

if TYPE_CHECKING:
    import onnx_ir as ir

# (atol, rtol) of a float16 program against the float32 source, of the output's scale (the ONNX
# and TensorRT backends' fp16 figures)
FP16_TOLERANCE = (1e-2, 1e-2)
ONNX_ROUTE = Blocker(
    "*", "ExecuTorch programs are built from torch sources (torch.export); there is no route "
    "from an ONNX graph to .pte",
    hint="convert the PyTorch model itself (an nn.Module, a .pt2 ExportedProgram) with --to executorch")


@register_backend
class ExecuTorchBackend(Backend):
    name = "executorch"
    extra = "executorch"
    requires = ("executorch", "torch")
    packages = "executorch, torchao (with torch)"
    description = "ExecuTorch program (.pte, XNNPACK + portable kernels) from torch sources, with a JSON sidecar"
    suffixes = (pte.SUFFIX,)
    canonical_opset = None  # no ONNX route: nothing to normalize to
    option_names = ("precision", "shapes", "static")
    onnx_route = False
    direct_modules = {"torch": "unframe.converters.backends.executorch.direct"}
    direct_tools = {"torch": "torch.export, edge dialect, XNNPACK partition"}
    # PT2E with ExecuTorch's XNNPACKQuantizer (quantize.py); the sensitivity pass names ONNX
    # nodes, which this route has none of
    quantize_schemes = ("int8", "int8-dynamic")

    def distributions(self) -> tuple[str, ...]:
        return ("executorch", "torch", "torchao")

    # -- the ONNX route: refused ------------------------------------------------------------
    def check(self, model: ir.Model, target: Target) -> list[Blocker]:
        return [ONNX_ROUTE, *option_blockers(target)]

    def convert(self, model: ir.Model, target: Target, workdir: Path) -> Artifact:
        raise UnsupportedError("ExecuTorch programs are built from torch sources, not from ONNX",
                               ONNX_ROUTE.hint, blockers=self.check(model, target))

    # -- run --------------------------------------------------------------------------------
    def runner(self, artifact: Artifact, target: Target) -> Runner:
        from unframe.converters.backends.executorch.runner import ExecuTorchRunner

        if self.missing():
            raise RunnerUnavailable(f"{', '.join(self.missing())} not installed: the program can't run here")
        if artifact.path is None or not artifact.path.is_file():
            raise RunnerUnavailable("the ExecuTorch program was not written to disk")
        # written by this process just now: loaded here, without the header check and probe
        return ExecuTorchRunner(artifact.path, artifact.metadata, vouched=True)

    def compute_precision(self, target: Target) -> str:
        return "fp16" if str(target.get("precision") or "fp32").lower() == "fp16" else "fp32"

    def tolerance(self, dtype: np.dtype, target: Target) -> Tolerance | None:
        if self.compute_precision(target) == "fp32" or np.dtype(dtype).kind != "f":
            return None
        # 16-bit compute: an element's error follows the values summed into it (validate.tolerances)
        return Tolerance(*FP16_TOLERANCE, of_scale=True)

    # -- provenance and the write -----------------------------------------------------------
    def stamp(self, artifact: Artifact, provenance: dict[str, str]) -> None:
        artifact.metadata.setdefault("provenance", {}).update(provenance)

    def write(self, artifact: Artifact, path: Path) -> list[Path]:
        import hashlib

        path = Path(path)
        if path.suffix.lower() != pte.SUFFIX:
            raise UsageError(f"ExecuTorch output {path} must end in {pte.SUFFIX}", "use -o model.pte")
        data = artifact.model if isinstance(artifact.model, bytes) else artifact.path.read_bytes()
        path.write_bytes(data)
        meta = dict(artifact.metadata, program_sha256=hashlib.sha256(data).hexdigest())
        return [path, pte.write_sidecar(path, meta)]

    def placed(self, artifact: Artifact, written: list[Path]) -> None:
        # the program is read from where it now lies (the work dir goes with the run)
        artifact.path = written[0]


def option_blockers(target: Target) -> list[Blocker]:
    precision = str(target.get("precision") or "fp32").lower()
    if precision in PRECISIONS:
        return []
    return [Blocker("*", f"precision {precision!r} is not one of {', '.join(PRECISIONS)}",
                    hint="use --precision fp32 or fp16")]

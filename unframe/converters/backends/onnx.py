"""ONNX out: the checker with full checks and strict shape inference as pre-flight, then an
atomic write (external data above the 2 GB protobuf limit). Provenance goes in metadata_props."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_ir as ir

from unframe import io
from unframe.converters.base import Artifact, Backend, Target
from unframe.converters.registry import register_backend
from unframe.errors import Blocker, UsageError
from unframe.version_converter.types import infer_shapes


@register_backend
class OnnxBackend(Backend):
    name = "onnx"
    extra = ""
    description = "ONNX files at any opset (.onnx)"
    suffixes = (".onnx",)
    canonical_opset = None  # keep the model's opset unless --opset asks for another
    artifact_is_graph = True

    def distributions(self) -> tuple[str, ...]:
        return ("onnx", "onnx-ir")

    def check(self, model: ir.Model, target: Target) -> list[Blocker]:
        return onnx_checker_blockers(model)

    def convert(self, model: ir.Model, target: Target, workdir: Path) -> Artifact:
        remove_dead_values(model)
        return Artifact(kind="onnx", model=model)

    def stamp(self, artifact: Artifact, provenance: dict[str, str]) -> None:
        artifact.metadata.update(provenance)
        io.stamp_onnx(artifact.model, provenance)

    def write(self, artifact: Artifact, path: Path) -> list[Path]:
        if path.suffix.lower() != ".onnx":
            raise UsageError(f"output {path.name} does not end in .onnx", "name the output file *.onnx")
        final_dir = path.parent.parent  # the staging folder is made inside the output's folder
        shared = io.shared_external_files(artifact.model, final_dir)
        written = io.write_onnx(artifact.model, path, final_dir=final_dir)
        if shared and written == [path]:
            artifact.notes.append(
                f"weights left in {', '.join(shared)}, shared with the source rather than copied "
                "(the output reads that file: keep it, and don't rewrite it in place)")
        artifact.path = path
        return written


def remove_dead_values(model: ir.Model) -> None:
    """Drop nodes, initializers and functions nothing reads (an exporter's or a pass's leftovers),
    so that a written file carries no dead weights.

    Before: ``W_unused`` (an initializer no node reads), ``Add(x, c) -> t`` with ``t`` unused
    After:  neither"""
    from onnx_ir.passes.common import RemoveUnusedFunctionsPass, RemoveUnusedNodesPass

    RemoveUnusedNodesPass()(model)
    RemoveUnusedFunctionsPass()(model)


def onnx_checker_blockers(model: ir.Model) -> list[Blocker]:
    """onnx.checker and strict shape inference, as blockers, on the model's weight-less proto:
    large initializers (external data included) are declared as typed graph inputs, so no weight
    is read, copied or held twice, whatever its size."""
    proto = io.light_proto(model)
    blockers: list[Blocker] = []
    try:
        onnx.checker.check_model(proto, full_check=False)
    except onnx.checker.ValidationError as exc:
        blockers.append(Blocker(op="model", reason=f"onnx.checker: {_one_line(exc)}"))
    try:
        infer_shapes(proto, check_type=True, strict_mode=True)
    except Exception as exc:  # InferenceError, ValidationError
        blockers.append(Blocker(op="model", reason=f"strict shape inference: {_one_line(exc)}"))
    return blockers


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:400]

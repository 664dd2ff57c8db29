"""ONNX out: the checker with full checks and strict shape inference as pre-flight, then an
atomic write (external data above the 2 GB protobuf limit). Provenance goes in metadata_props.

``precision="fp16"`` (or bf16) makes 16-bit compute a property of the graph: float32 compute is
rewritten to the 16-bit type where onnx's schemas allow it, inputs and outputs keep their types,
numerically sensitive ops stay in float32 (``unframe.passes.precision``), and so do tensors past
fp16's range on calibration feeds and the nodes whose rounding moves an output past what parity
allows (found by bisection before conversion, ``unframe.validate.rounding``). The graph is then
checked against the float32 one on onnxruntime, like any other artifact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from unframe import io
from unframe.converters.base import Artifact, Backend, Target
from unframe.converters.registry import register_backend
from unframe.errors import Blocker, UsageError
from unframe.validate.runner import Runner
from unframe.validate.tolerances import Tolerance
from unframe.version_converter.types import infer_shapes

# 16-bit compute an ONNX graph can be given, with its (atol, rtol) against the float32 graph
LOW_PRECISIONS = {"fp16": (1e-2, 1e-2), "bf16": (6e-2, 6e-2)}


@register_backend
class OnnxBackend(Backend):
    name = "onnx"
    extra = ""
    description = "ONNX files at any opset (.onnx)"
    suffixes = (".onnx",)
    canonical_opset = None  # keep the model's opset unless --opset asks for another
    artifact_is_graph = True
    option_names = ("precision",)

    def distributions(self) -> tuple[str, ...]:
        return ("onnx", "onnx-ir")

    def check(self, model: ir.Model, target: Target) -> list[Blocker]:
        return onnx_checker_blockers(model)

    def changes_compute(self, target: Target) -> bool:
        return self.compute_precision(target) != "fp32"

    def compute_precision(self, target: Target) -> str:
        precision = str(target.get("precision") or "fp32").lower()
        return precision if precision in LOW_PRECISIONS else "fp32"

    def tolerance(self, dtype: np.dtype, target: Target) -> Tolerance | None:
        precision = self.compute_precision(target)
        if precision == "fp32" or np.dtype(dtype).kind != "f":
            return None
        return Tolerance(*LOW_PRECISIONS[precision], of_scale=True)  # 16-bit compute: validate.tolerances

    def runner(self, artifact: Artifact, target: Target) -> Runner:
        from unframe.pipeline import onnx_runner_of

        return onnx_runner_of(artifact.model, "the 16-bit graph")

    def convert(self, model: ir.Model, target: Target, workdir: Path) -> Artifact:
        from unframe.validate.onnxruntime import rewrite_hazards

        precision = self.compute_precision(target)
        notes: list[str] = []
        if precision != "fp32":
            from unframe.passes import keeps_fp32
            from unframe.passes.precision import lower_precision, range_analysis, schema_supports

            overflow, notes = range_analysis(model, precision)
            # a copy: the float32 graph stays the route's model (the rounding planner reads it)
            model = lower_precision(model.clone(), precision, keep_values=overflow, supports=schema_supports)
            kept = sum(keeps_fp32(n) for n in model.graph)
            notes.append(f"{precision} compute set in the graph where onnx's schemas allow it; inputs and "
                         "outputs keep their types; softmax, norms, reductions, exp/log/pow"
                         + (f" and {kept} node(s) planned for float32" if kept else "") + " stay in float32")
        remove_dead_values(model)
        notes += rewrite_hazards(model)
        return Artifact(kind="onnx", model=model, notes=notes,
                        metadata={"unframe.precision": precision} if precision != "fp32" else {})

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

    def placed(self, artifact: Artifact, written: list[Path]) -> None:
        """The model's weights written to external data are read from there from now on: a
        model exported from live parameters no longer follows them (nor holds them)."""
        if len(written) > 1 and isinstance(artifact.model, ir.Model):
            io.adopt_external_weights(artifact.model, next(p for p in written if p.suffix == ".onnx"))


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

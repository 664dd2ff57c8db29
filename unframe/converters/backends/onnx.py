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
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from unframe import io
from unframe import opset as facts
from unframe.converters.base import AS_DEPLOYED, Artifact, Backend, Target
from unframe.converters.registry import register_backend
from unframe.errors import Blocker, UsageError
from unframe.validate.runner import Runner
from unframe.validate.tolerances import Tolerance
from unframe.version_converter.types import infer_shapes

# 16-bit compute an ONNX graph can be given, with its (atol, rtol) against the float32 graph
LOW_PRECISIONS = {"fp16": (1e-2, 1e-2), "bf16": (6e-2, 6e-2)}
HALVES = (ir.DataType.BFLOAT16, ir.DataType.FLOAT16)
# the highest opset a 16-bit graph is raised to when no --opset was given (onnxruntime runs it)
HIGHEST_RAISE = 23


@register_backend
class OnnxBackend(Backend):
    name = "onnx"
    extra = ""
    description = "ONNX files at any opset (.onnx)"
    suffixes = (".onnx",)
    canonical_opset = None  # keep the model's opset unless --opset asks for another
    artifact_is_graph = True
    option_names = ("precision", "sample_shapes")
    quantize_schemes = ("int8", "int8-dynamic", "w8", "w4")
    quantize_excludes = True
    # NNCF's ONNX backend (passes/quantize/onnx_quant.nncf_quantize): its ranges averaged over
    # the calibration sets hold where onnxruntime's extremes don't (an outlier set)
    other_quantizers = {"nncf": ("int8",)}

    def distributions(self) -> tuple[str, ...]:
        return ("onnx", "onnx-ir")

    def check(self, model: ir.Model, target: Target) -> list[Blocker]:
        unranked = unranked_outputs(model)
        if half_refusals(model, main_opset(model)) or unranked:
            # convert gives those nodes their 16-bit type (a higher opset) or float32, and outputs
            # of unknown rank the rank they have when run: check the graph it will write
            model = model.clone()
            cast_around(model, half_refusals(model, main_opset(model)))
            if unranked:
                rank_outputs(model, target.get("sample_shapes"))
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

    # the accuracy guard's runner of a quantized graph lives in a child process: the latency
    # timing builds one in-process (``runner`` with ``AS_DEPLOYED``) once the guard has run it
    times_apart = True

    def runner(self, artifact: Artifact, target: Target) -> Runner:
        """onnxruntime on the graph as written (parity), except where the artifact is judged as
        deployed: a quantized graph, and the float graph timed against it (``AS_DEPLOYED``), run
        with onnxruntime's default optimizations as a user's session runs them. Run as written,
        a Q/DQ graph computes in float between its quantize steps: a seeded MnasNet's int8
        artifact measured cosine 0.992 that way, 0.974 in the int8 kernels users get. A quantized
        graph is judged in unframe's onnxruntime child: those fused kernels crashed the process
        (SIGSEGV) on RetinaNet's int8 graph, which is then an exit-5 failure naming the set."""
        from unframe.validate.deferred import onnx_runner_of

        quantized = target.get("quantize") is not None
        what = "the quantized graph" if quantized else "the 16-bit graph"
        timing = bool(target.get(AS_DEPLOYED))
        return onnx_runner_of(artifact.model, what, "all" if quantized or timing else "basic",
                              isolated=quantized and not timing)

    def convert(self, model: ir.Model, target: Target, workdir: Path) -> Artifact:
        from unframe.validate.onnxruntime import rewrite_hazards

        precision = self.compute_precision(target)
        notes: list[str] = []
        request = target.get("quantize")
        if request is not None:
            from unframe.passes.quantize.onnx_quant import quantize_onnx

            model, notes = quantize_onnx(model, request)  # a copy: the float graph stays the route's
            if precision != "fp32":
                notes.append(f"--precision {precision} not applied: the graph is quantized ({request.scheme.name})")
                precision = "fp32"
        elif precision != "fp32":
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
        notes += rank_outputs(model, target.get("sample_shapes"))
        raised, fitted = fit_halves(model, target.opset is None)
        notes += fitted
        metadata = {"unframe.precision": precision} if precision != "fp32" else {}
        if request is not None:
            metadata["unframe.quantize"] = request.scheme.name
        if raised:
            metadata[RAISED] = str(raised)
        return Artifact(kind="onnx", model=model, notes=notes, metadata=metadata)

    def stamp(self, artifact: Artifact, provenance: dict[str, str]) -> None:
        raised = artifact.metadata.get(RAISED)
        if raised and "opset_path" in provenance:  # the opset this backend raised the graph to
            import json

            path = json.loads(provenance["opset_path"])
            provenance = {**provenance, "opset_path": json.dumps([*path, raised])}
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


RAISED = "unframe.raised_opset"


def main_opset(model: ir.Model) -> int:
    return int(model.opset_imports.get("", 1))


def fit_halves(model: ir.Model, may_raise: bool) -> tuple[int | None, list[str]]:
    """A bfloat16 (or float16) graph whose ops don't take that type at its opset (ONNX Conv takes
    bfloat16 from opset 22; torch exports at 18): raised to the lowest opset where they all do when
    the user fixed none (``may_raise``), else those nodes compute in float32 between Casts that
    keep every other tensor, and the graph's inputs and outputs, as they were. Returns the opset
    raised to (None: not raised) and the notes.

    Before (opset 18): ``y:bf16 = Conv(x:bf16, W:bf16)``
    After, raised:     the same node at opset 22
    After, cast:       ``y = Cast(Conv(Cast(x, float), Cast(W, float)), bfloat16)``"""
    opset = main_opset(model)
    refused = half_refusals(model, opset)
    if not refused:
        return None, []
    ops = sorted({n.op_type for n in refused})
    kinds = sorted({_half_name(n) for n in refused})
    target = lowest_opset(model, opset)
    if may_raise and target is not None:
        from unframe import version_converter

        version_converter.convert_opset(model, target)
        return target, [f"opset raised from {opset} to {target}: ONNX {', '.join(ops)} take "
                        f"{'/'.join(kinds)} from opset {target} (--opset {opset} keeps the opset and "
                        "computes them in float32)"]
    cast_around(model, refused)
    keeps = f"; --opset {target} keeps {'/'.join(kinds)}" if target is not None else ""
    return None, [f"{len(refused)} node(s) ({', '.join(ops)}) compute in float32 between Casts: ONNX "
                  f"{', '.join(ops)} at opset {opset} don't take {'/'.join(kinds)}{keeps}"]


def half_refusals(model: ir.Model, opset: int) -> list[ir.Node]:
    """Nodes with a bfloat16/float16 input or output that their schema at ``opset`` refuses."""
    from unframe.version_converter.types import allowed_types

    refused = []
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        schema = facts.schema_at(node.op_type, opset)
        if schema is None:
            continue
        for values, params in ((node.inputs, schema.inputs), (node.outputs, schema.outputs)):
            bad = [i for i, v in enumerate(values) if v is not None and v.dtype in HALVES
                   and (allowed := allowed_types(schema, params, i)) is not None
                   and f"tensor({v.dtype.name.lower()})" not in allowed]
            if bad:
                refused.append(node)
                break
    return refused


def lowest_opset(model: ir.Model, opset: int) -> int | None:
    """The lowest opset above ``opset`` at which no node refuses its 16-bit types."""
    for candidate in range(opset + 1, HIGHEST_RAISE + 1):
        if not half_refusals(model, candidate):
            return candidate
    return None


def cast_around(model: ir.Model, nodes: list[ir.Node]) -> None:
    """Each node computes in float32: its 16-bit inputs Cast up, its 16-bit outputs Cast back
    (consumers and graph outputs see the same names and types as before)."""
    for node in nodes:
        graph = node.graph
        assert graph is not None
        for i, value in enumerate(node.inputs):
            if value is not None and value.dtype in HALVES:
                up = ir.node("Cast", [value], {"to": ir.DataType.FLOAT}, name=f"{node.name}_in{i}_fp32")
                up.outputs[0].name = f"{node.name}_in{i}_fp32"
                up.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
                up.outputs[0].shape = value.shape
                graph.insert_before(node, up)
                node.replace_input_with(i, up.outputs[0])
        for i, value in enumerate(node.outputs):
            if value.dtype in HALVES:
                _cast_back(graph, node, value, f"{node.name}_out{i}")


def _cast_back(graph: ir.Graph, node: ir.Node, value: ir.Value, label: str) -> None:
    """``value`` becomes float32 under a new name; a Cast gives its old name and type back."""
    half = value.dtype
    users = list(value.uses())
    name = value.name
    value.name = f"{label}_fp32"
    value.type = ir.TensorType(ir.DataType.FLOAT)
    down = ir.node("Cast", [value], {"to": half}, name=f"{label}_back")
    down.outputs[0].name = name
    down.outputs[0].type = ir.TensorType(half)
    down.outputs[0].shape = value.shape
    graph.insert_after(node, down)
    for user, index in users:
        user.replace_input_with(index, down.outputs[0])
    if graph.outputs:
        for j, out in enumerate(graph.outputs):
            if out is value:
                graph.outputs[j] = down.outputs[0]


def _half_name(node: ir.Node) -> str:
    for v in [*node.inputs, *node.outputs]:
        if v is not None and v.dtype in HALVES:
            return "bfloat16" if v.dtype == ir.DataType.BFLOAT16 else "float16"
    return "16-bit"


def unranked_outputs(model: ir.Model) -> list[ir.Value]:
    """Graph outputs of unknown rank (onnx.checker requires every graph output's shape)."""
    return [v for v in model.graph.outputs if v.shape is None]


def rank_outputs(model: ir.Model, sample_shapes: dict[str, Any] | None) -> list[str]:
    """Outputs of unknown rank given the rank they have when the graph runs: first from onnx's
    shape inference (with data propagation), then from one onnxruntime run on feeds drawn at the
    samples' shapes (what parity fed). A dim is fixed where every graph input is, else named
    ``<output>_d<axis>``. An output nothing can rank stays as it was (the checker says so)."""
    unranked = unranked_outputs(model)
    if not unranked:
        return []
    _infer_output_shapes(model, unranked)
    still = [v for v in unranked if v.shape is None]
    if still:
        _run_for_ranks(model, still, sample_shapes)
    done = [v.name for v in unranked if v.shape is not None]
    return [f"output(s) {', '.join(done)} of unknown rank in the graph given the rank they have when "
            "run (onnx.checker requires it)"] if done else []


def _infer_output_shapes(model: ir.Model, values: list[ir.Value]) -> None:
    try:
        proto = infer_shapes(io.light_proto(model), check_type=False, strict_mode=False)
    except Exception:  # noqa: BLE001 - no inference: the run below decides
        return
    found = {vi.name: vi for vi in (*proto.graph.output, *proto.graph.value_info)}
    for value in values:
        vi = found.get(value.name)
        if vi is not None and vi.type.tensor_type.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or f"{value.name}_d{i}")
                    for i, d in enumerate(vi.type.tensor_type.shape.dim)]
            value.shape = ir.Shape(dims)


def _run_for_ranks(model: ir.Model, values: list[ir.Value], sample_shapes: dict[str, Any] | None) -> None:
    from unframe.validate.inputs import generate_feeds
    from unframe.validate.onnxruntime import onnx_runner

    work = model.clone()
    inputs = [v for v in work.graph.inputs if v.name not in work.graph.initializers]
    for value in inputs:
        if sample_shapes and value.name in sample_shapes:
            value.shape = ir.Shape([int(d) for d in sample_shapes[value.name]])
    fixed = all(v.shape is not None and all(isinstance(d, int) for d in v.shape) for v in inputs)
    try:
        outputs = onnx_runner(work).run(generate_feeds(work)[0])
    except Exception:  # noqa: BLE001 - it can't be run here: the checker's blocker stands
        return
    for value in values:
        got = outputs.get(value.name)
        if got is not None:
            shape = np.shape(got)
            value.shape = ir.Shape([int(d) if fixed else f"{value.name}_d{i}" for i, d in enumerate(shape)])


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

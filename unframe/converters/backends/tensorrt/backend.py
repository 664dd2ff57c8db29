"""The TensorRT backend: ONNX -> serialized engine (+ ``<engine>.json`` sidecar).

Flow of ``convert``: copy the model, run the preparation passes (``prepare.py``), lower precision
in the graph (``precision.py``; strongly typed networks have no precision flags), derive the
optimization profile (``profiles.py``), write the prepared ONNX in the work dir, parse and build
(``build.py``). Works with the ``tensorrt`` module or ``tensorrt_rtx`` (which builds on a machine
without a GPU: the engine is "built AOT on CPU").

``check`` needs no TensorRT: it checks every node against the support table (``preflight.py``);
when a module is importable it also asks its parser and adds what only the parser refuses.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from unframe.converters.backends.tensorrt import preflight, trtmodule
from unframe.converters.backends.tensorrt.sidecar import (
    AOT_ON_CPU,
    check_engine_compat,
    reject_engine_input,
    write_sidecar,
)
from unframe.converters.base import Artifact, Backend, RunnerUnavailable, Target
from unframe.converters.registry import register_backend
from unframe.errors import Blocker, MissingExtraError, UsageError
from unframe.validate.runner import Runner
from unframe.validate.tolerances import Tolerance

if TYPE_CHECKING:
    import onnx_ir as ir

CANONICAL_OPSET = 21
# The ONNX opsets each parser takes, from NVIDIA's documents (onnx-tensorrt operators.md: "TensorRT
# 10.15 supports operators in the inclusive range of opset 9 to opset 24"; the TensorRT 11 opset
# guide: 9 to 25). TensorRT-RTX ships the same open-source ONNX parser as TensorRT 10.
PARSER_OPSETS = {("tensorrt", 10): (9, 24), ("tensorrt", 11): (9, 25), ("tensorrt_rtx", 1): (9, 24)}
DEFAULT_WINDOW = (9, 24)
PRECISIONS = ("fp32", "fp16", "bf16")
# (atol, rtol) of engine vs onnxruntime, by compute precision. fp32 allows for TF32 tensor-core
# matmuls/convolutions, which TensorRT enables by default on Ampere and later.
TOLERANCES = {"fp32": (1e-3, 1e-3), "fp16": (1e-2, 1e-2), "bf16": (6e-2, 6e-2)}
# The builder's peak memory per byte of weights, measured with tensorrt-rtx on the CPU (a
# Llama-1B slice: 4.3 GB for 1.2 GB of weights, bench/llm.py): checked before a build starts.
BUILDER_MEMORY_PER_WEIGHT_BYTE = 3.5

__all__ = ["TensorRTBackend", "CheckReport", "check_engine_compat", "check_report", "support_rows",
           "reject_engine_input"]


@dataclass
class CheckReport:
    """What ``unframe check --to tensorrt`` shows: the blockers, which parser was asked (if
    any) and where it disagrees with the support table."""

    blockers: list[Blocker]
    parser: str | None = None
    disagreements: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"blockers": [b.to_dict() for b in self.blockers], "parser": self.parser,
                "disagreements": self.disagreements}


def check_report(model: ir.Model, ask_parser: bool = True) -> CheckReport:
    """Table blockers, plus (when a TensorRT module imports) the parser's own refusals of the
    graph ``convert`` would hand it: the model after the preparation passes (constant folding
    turns computed axes and scales into initializers, which the raw parser would refuse). The
    table is read against that prepared graph too: a pass that legalizes an op (an integer
    CumSum summed in float) removes its blocker."""
    prepared = _prepared_copy(model)
    blockers = preflight.check(prepared, trtmodule.installed_flavour())
    if not ask_parser or trtmodule.load_or_none() is None:
        return CheckReport(blockers)
    verdict = preflight.parser_verdict(prepared)
    if verdict is None:
        return CheckReport(blockers)
    report = CheckReport(blockers, verdict.module,
                         preflight.disagreements(prepared, blockers, verdict))
    refusal = verdict.model_refusal()
    if refusal is not None and not blockers:
        # a parser that refuses is never agreement: its message is the blocker
        report.blockers.append(Blocker("*", f"{verdict.module} parser refuses the model: {refusal}",
                                       hint="the support table did not predict this"))
    nodes = list(prepared.graph)
    blocked = {b.node for b in blockers}
    for index, message in sorted(verdict.failed_nodes.items()):
        node = nodes[index] if 0 <= index < len(nodes) else None
        if node is not None and node.name and node.name in blocked:
            continue
        if node is None or (not node.name and any(b.op == node.op_type for b in blockers)):
            continue
        report.blockers.append(Blocker(node.op_type, f"{verdict.module} parser: {message}",
                                       node.name or f"#{index}", "", _parser_hint(message)))
    return report


# Parser messages whose remedy is known, and the hint that says it.
PARSER_HINTS = (
    # a length computed from values (a NonZero or NMS selection) of static network inputs: the
    # parser wants those inputs as host shape tensors; with a symbolic dim they stay on the device
    ("is a shape tensor and must have type Int32 or Int64",
     "a length here is computed from the values of a network input with static dims; give that "
     "input a symbolic dim in the ONNX file (e.g. the box count), so TensorRT computes it on the GPU"),
)


def _parser_hint(message: str) -> str:
    return next((hint for words, hint in PARSER_HINTS if words in message),
                "the support table did not predict this")


def _prepared_copy(model: ir.Model) -> ir.Model:
    from unframe.converters.backends.tensorrt.prepare import prepare

    try:
        return prepare(model.clone())
    except Exception:  # preparation is best effort here: ask the parser about the model as is
        return model


@register_backend
class TensorRTBackend(Backend):
    name = "tensorrt"
    extra = "tensorrt"
    requires = ("tensorrt",)  # or tensorrt_rtx: see missing()
    packages = "tensorrt-rtx-cu12 (or NVIDIA's tensorrt)"
    description = "TensorRT serialized engine (.engine) with a JSON sidecar"
    suffixes = (".engine", ".plan")
    canonical_opset = CANONICAL_OPSET
    tensor_only = True  # no ai.onnx.ml ops, no strings: the route lowers them first
    tree_gemm_max_depth = 3  # a GPU runtime: hummingbird's rule (unmeasured here: no GPU)
    option_names = ("precision", "shapes", "workspace", "timing_cache", "version_compatible",
                    "hardware_compatibility", "static", "sample_shapes",
                    "builder_optimization_level")
    # int8 as an explicitly quantized network: the engine is built from a Q/DQ ONNX graph
    # (quantize.py); nodes the sensitivity pass names stay float (no Q/DQ around them)
    quantize_schemes = ("int8",)
    quantize_excludes = True

    def missing(self) -> list[str]:
        return [] if trtmodule.installed_flavour() else ["tensorrt (or tensorrt_rtx)"]

    def distributions(self) -> tuple[str, ...]:
        return tuple(d for dists in trtmodule.DISTRIBUTIONS.values() for d in dists)

    def ensure_available(self, what: str | None = None) -> None:
        if trtmodule.load_or_none() is None:
            raise MissingExtraError(what or "building a TensorRT engine", self.extra, self.packages)

    def opset_window(self, target: Target) -> tuple[int, int]:
        """The installed parser's window (read from distribution metadata, no import)."""
        flavour = trtmodule.installed_flavour()
        versions = trtmodule.distribution_versions(flavour) if flavour else {}
        major = next((int(v.split(".")[0]) for v in versions.values() if v.split(".")[0].isdigit()), None)
        return PARSER_OPSETS.get((flavour or "", major or 0), DEFAULT_WINDOW)

    def pick_opset(self, target: Target, requested: int | None) -> int:
        """The highest opset both the parser and unframe's TensorRT passes (preparation, precision
        lowering, the pre-flight table) are checked at: the canonical opset, inside the window."""
        low, high = self.opset_window(target)
        return max(low, min(high, CANONICAL_OPSET))

    # -- check --------------------------------------------------------------------------------
    def check(self, model: ir.Model, target: Target) -> list[Blocker]:
        return self.check_with_notes(model, target)[0]

    def check_with_notes(self, model: ir.Model, target: Target) -> tuple[list[Blocker], list[str]]:
        precision = target.get("precision", "fp32")
        request = target.get("quantize")
        if request is not None:  # the graph the engine is built from is the Q/DQ one: check that
            from unframe.converters.backends.tensorrt.quantize import quantized_graph

            model = quantized_graph(model, request)[0]
        report = check_report(model)
        blockers = list(report.blockers)
        if precision not in PRECISIONS:
            blockers.append(Blocker("*", f"precision {precision!r} is not one of "
                                         f"{', '.join(PRECISIONS)}"))
        if report.parser is None:
            return blockers, []
        notes = [f"pre-flight table and {report.parser}'s parser agree" if not report.disagreements
                 else f"pre-flight table and {report.parser}'s parser disagree on "
                      f"{len(report.disagreements)} point(s):"]
        return blockers, notes + [f"  {line}" for line in report.disagreements]

    # -- convert ------------------------------------------------------------------------------
    def convert(self, model: ir.Model, target: Target, workdir: Path) -> Artifact:
        from unframe import io, limits
        from unframe.converters.backends.tensorrt.build import BuildOptions, build
        from unframe.converters.backends.tensorrt.cumsum import check_profile
        from unframe.converters.backends.tensorrt.prepare import prepare
        from unframe.converters.backends.tensorrt.profiles import make_profile
        from unframe.converters.backends.tensorrt.table import supports_low
        from unframe.passes.precision import lower_precision, range_analysis

        self.ensure_available()
        precision = target.get("precision", "fp32")
        if precision not in PRECISIONS:
            raise UsageError(f"unknown TensorRT precision {precision!r}",
                             f"use one of {', '.join(PRECISIONS)}")
        request = target.get("quantize")
        float_model, quant_notes = model, []
        if request is not None:
            from unframe.converters.backends.tensorrt.quantize import quantized_graph

            model, quant_notes = quantized_graph(model, request)
            if precision != "fp32":
                quant_notes.append(f"--precision {precision} not applied: the network is quantized "
                                   f"({request.scheme.name}); what is not int8 computes in float32")
                precision = "fp32"
        limits.check_stage_memory(int(BUILDER_MEMORY_PER_WEIGHT_BYTE * io.tensor_bytes(model)),
                                  "TensorRT's builder (its weights, tactics and the engine)")
        overflow, range_notes = range_analysis(model, precision)
        prepared = lower_precision(prepare(model.clone()), precision, keep_values=overflow, supports=supports_low)
        profile = make_profile(prepared, target.get("shapes"), target.get("sample_shapes"),
                               bool(target.get("static", False)))
        check_profile(prepared, profile)  # an integer CumSum summed in digits stays exact
        workdir.mkdir(parents=True, exist_ok=True)
        options = BuildOptions(
            workspace=_int_or_none(target.get("workspace")),
            timing_cache=Path(target.get("timing_cache")) if target.get("timing_cache") else None,
            version_compatible=bool(target.get("version_compatible", False)),
            hardware_compatibility=target.get("hardware_compatibility"),
            optimization_level=_int_or_none(target.get("builder_optimization_level")))
        with io.tool_file(prepared) as onnx_path:  # large weights read where they lie when they can
            result = build(onnx_path, profile, options)
            meta = self._metadata(result, precision, profile, onnx_path)
        meta["network"] = result.network
        notes = [f"built with {result.module} {result.version} ({meta['gpu']})",
                 *result.notes]
        if precision != "fp32":
            notes.append(f"{precision} compute set in the graph (strongly typed network); "
                         "inputs and outputs keep their types")
        if request is not None:
            from unframe.converters.backends.tensorrt.quantize import QDQ_KEY, weight_bytes

            meta["quantize"] = request.scheme.name
            # the stored weights the engine is built from: float32 graph vs the Q/DQ graph
            meta["quantized_size"] = (weight_bytes(float_model), weight_bytes(model))
            meta[QDQ_KEY] = model  # in memory only (write drops it): a prediction where the engine can't run
        return Artifact(kind="engine", model=result.engine, metadata=meta,
                        notes=notes + quant_notes + range_notes)

    def _metadata(self, result: Any, precision: str, profile: dict[str, Any],
                  onnx_path: Path) -> dict[str, Any]:
        device = trtmodule.cuda_device()
        flags = result.flags
        portable = result.module == "tensorrt_rtx"
        return {
            "format": "unframe TensorRT engine sidecar v1",
            "flavour": result.module,
            "tensorrt_version": result.version,
            "gpu": AOT_ON_CPU if isinstance(device, str) else device.name,
            # NVIDIA's tensorrt builds for the GPU it runs on; TensorRT-RTX for a list of compute
            # capabilities (its portable default), whatever the machine has
            "compute_capability": None if isinstance(device, str) or portable else device.compute_capability,
            "compute_capabilities": list(trtmodule.RTX_DEFAULT_TARGETS) if portable else None,
            "precision": precision,
            "strongly_typed": True,
            "profiles": [{name: p.to_dict() for name, p in profile.items()}],
            "flags": flags,
            "prepared_onnx_sha256": hashlib.sha256(onnx_path.read_bytes()).hexdigest(),
            "provenance": {},
        }

    # -- run ----------------------------------------------------------------------------------
    def runner(self, artifact: Artifact, target: Target) -> Runner:
        device = trtmodule.cuda_device()  # before any TensorRT runtime object: see trtmodule
        if isinstance(device, str):
            from unframe.converters.backends.tensorrt.quantize import QDQ_KEY

            qdq = "; the Q/DQ graph it was built from can stand in for it on onnxruntime" \
                if artifact.metadata.get(QDQ_KEY) is not None else ""
            raise RunnerUnavailable(f"no CUDA device: {device}{qdq}")
        from unframe.converters.backends.tensorrt.runner import TensorRTRunner

        return TensorRTRunner(artifact.model)

    def probe(self, model: ir.Model, target: Target) -> Any:
        """On a GPU: build the engine again with some values marked as outputs and run it, for the
        locator's bisection (marking stops fusion across a value, so it marks few at a time)."""
        device, trt = trtmodule.cuda_device(), trtmodule.load_or_none()
        if isinstance(device, str) or trt is None or trtmodule.engine_gap(trt, device) is not None:
            return None

        def run(names: list[str], feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            import tempfile

            from unframe.validate.intermediates import with_outputs

            marked = with_outputs(model, names)
            with tempfile.TemporaryDirectory(prefix="unframe-probe-") as tmp:
                artifact = self.convert(marked, target, Path(tmp))
            runner = self.runner(artifact, target)
            try:
                return runner.run(feeds)
            finally:
                runner.close()

        return run

    def compute_precision(self, target: Target) -> str:
        precision = str(target.get("precision", "fp32"))
        return precision if precision in TOLERANCES else "fp32"

    def tolerance(self, dtype: np.dtype, target: Target) -> Tolerance | None:
        if np.dtype(dtype).kind != "f":
            return None
        precision = str(target.get("precision", "fp32"))
        atol, rtol = TOLERANCES.get(precision, TOLERANCES["fp32"])
        # 16-bit compute: an element's error follows the values summed into it (validate.tolerances)
        return Tolerance(atol, rtol, of_scale=precision in ("fp16", "bf16"))

    def stamp(self, artifact: Artifact, provenance: dict[str, str]) -> None:
        artifact.metadata.setdefault("provenance", {}).update(provenance)

    def write(self, artifact: Artifact, path: Path) -> list[Path]:
        from unframe.converters.backends.tensorrt.quantize import QDQ_KEY

        path.write_bytes(artifact.model)
        meta = {k: v for k, v in artifact.metadata.items() if k != QDQ_KEY}
        meta["engine_sha256"] = hashlib.sha256(artifact.model).hexdigest()
        return [path, write_sidecar(path, meta)]


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def support_rows() -> list[dict[str, str]]:
    """One row per ONNX op of TensorRT's table, for docs/support.md: status, types, the table's
    restrictions and what pre-flight checks statically."""
    from unframe.converters.backends.tensorrt.table import support_table

    rows: list[dict[str, str]] = []
    for op, row in sorted(support_table().items()):
        checks = []
        if op in preflight.CONSTANT_INPUTS:
            checks.append("constant inputs: " + ", ".join(w for _, w in preflight.CONSTANT_INPUTS[op]))
        if op in preflight.restriction_checks():
            checks.append("restrictions")
        if row.types:
            checks.append("types")
        rows.append({
            "op": op,
            "status": {"yes": "supported", "no": "unsupported"}.get(row.status, "not listed"),
            "types": ", ".join(sorted(row.types)),
            "restrictions": row.restrictions,
            "preflight": "; ".join(checks) if row.supported else "blocked",
        })
    return rows


def support_markdown() -> list[str]:
    """The TensorRT section of docs/support.md, from ``support_rows()``."""
    from unframe.converters.backends.tensorrt.cumsum import MAX_EXACT_LENGTH as MAX_EXACT_CUMSUM

    lines = ["## TensorRT ONNX operators", "",
             "From TensorRT's ONNX parser documentation (TRT 10.15); pre-flight checks each node "
             "against it. Ops of other domains need a TensorRT plugin.", "",
             "Pre-flight reads the graph after unframe's preparation, which rewrites three parser "
             "refusals exactly: Einsum subscripts renamed to lower case (the parser reads a-z only), "
             "integer CumSum summed as float32 base-16 digits (exact for any values over at most "
             f"{MAX_EXACT_CUMSUM:,} elements), and a Loop whose trip count is only in its condition "
             "(over constants) given that count as M (the parser sizes scan outputs from M).", "",
             "TensorRT-RTX (the CPU-buildable flavour) lacks some of these, and pre-flight names them "
             "when it is the TensorRT installed: implemented with plugins it doesn't ship: "
             + ", ".join(sorted(preflight.PLUGIN_OPS))
             + " (a NonZero over one axis is rewritten by the preparation into a compaction it "
             "builds); parsed but with no layer implementation in its builder: "
             + ", ".join(sorted(preflight.NO_RUNNER_OPS)) + " (from opset 13 the preparation writes "
             "NonMaxSuppression as comparison matrices and a fixed-point Loop it builds, selecting "
             "what onnxruntime selects; an If that only guards against empty boxes, as torchvision's, "
             "is taken out so the data-dependent shapes reach the top level). Its runtime runs engines only on GPUs "
             "of compute capability " + ", ".join(trtmodule.RTX_RUNS_ON) + " (not Hopper: on an H100 "
             "it refuses every engine), and its engines are portable across "
             + ", ".join(trtmodule.RTX_DEFAULT_TARGETS) + " whatever machine built them; on other "
             "GPUs a conversion builds the engine and says why its parity was not checked.", "",
             "| op | status | types | restrictions | pre-flight checks |", "|---|---|---|---|---|"]
    for r in support_rows():
        restrictions = r["restrictions"].replace("|", "/")
        lines.append(f"| {r['op']} | {r['status']} | {r['types']} | {restrictions} | {r['preflight']} |")
    return lines + [""]



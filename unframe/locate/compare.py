"""``unframe compare A B``: run two artifacts on the same inputs, check every output, and with
``intermediates`` find the first node where they part (the locator on a plan built from the
two files instead of a pipeline stage)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unframe.locate.artifacts import Opened, describe, open_artifact
from unframe.locate.locator import LocatePlan, backend_reproducer, locate, stage_tolerance
from unframe.locate.search import Divergence

if TYPE_CHECKING:
    import onnx_ir as ir

    from unframe.validate.compare import StageParity


@dataclass
class CompareResult:
    reference: str
    candidate: str
    parity: StageParity
    divergence: Divergence | None = None

    def __bool__(self) -> bool:
        return bool(self.parity)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": bool(self), "reference": self.reference, "candidate": self.candidate,
                "parity": self.parity.to_dict(),
                "divergence": self.divergence.to_dict() if self.divergence is not None else None}

    def __str__(self) -> str:
        lines = [f"parity {self.parity.summary()}", f"       {self.reference}  vs  {self.candidate}"]
        if self.divergence is not None:
            lines += self.divergence.lines()
        return "\n".join(lines)


def compare_artifacts(a: str | Path, b: str | Path, *, feeds: list[dict[str, Any]] | None = None,
                      atol: Any = None, rtol: Any = None, intermediates: bool = False,
                      debug_dir: str | Path | None = None, seconds: float = 120.0) -> CompareResult:
    from unframe.validate.onnxruntime import untrusted_graphs

    with untrusted_graphs():  # two files from outside: onnxruntime works on them in a child
        return _compare_artifacts(a, b, feeds, atol, rtol, intermediates, debug_dir, seconds)


def _compare_artifacts(a: str | Path, b: str | Path, feeds: list[dict[str, Any]] | None, atol: Any,
                       rtol: Any, intermediates: bool, debug_dir: str | Path | None, seconds: float
                       ) -> CompareResult:
    from unframe.validate.compare import compare

    ref, cand = open_artifact(a), open_artifact(b)
    if feeds is None:
        feeds = (ref if ref.graph is not None else cand).feeds(2)
    parity = compare(ref.runner, cand.runner, feeds, atol, rtol, stage="compare",
                     default_fn=_backend_tolerance(cand), floors=_rounding_floors(ref, cand, feeds))
    result = CompareResult(describe(ref), describe(cand), parity)
    if intermediates:
        plan = _plan(ref, cand, stage_tolerance(parity))
        if plan is None:
            result.divergence = Divergence("compare", status="unavailable",
                                           reason="intermediates need one side to be an ONNX file")
        else:
            folder = Path(debug_dir) if debug_dir else Path(tempfile.mkdtemp(prefix="unframe-compare-"))
            result.divergence = locate(plan, feeds, stage="compare", out_dir=folder, seconds=seconds)
    return result


def _backend_tolerance(opened: Opened) -> Any:
    """The candidate backend's own default tolerances (fp16 compute is looser)."""
    if opened.kind == "onnx":
        return None
    from unframe.converters.base import Target
    from unframe.converters.registry import BACKENDS

    backend = BACKENDS.get(opened.kind)
    target = Target(opened.kind, None, dict(opened.options))
    return lambda dtype: backend.tolerance(dtype, target)


def _rounding_floors(ref: Opened, cand: Opened, feeds: list[dict[str, Any]]) -> dict[str, float] | None:
    """A 16-bit candidate against an ONNX reference: the atol floors the conversion's own parity
    used (what 16-bit rounding alone moves the reference graph's outputs by)."""
    if ref.graph is None or cand.kind == "onnx":
        return None
    from unframe.converters.base import Target
    from unframe.converters.registry import BACKENDS
    from unframe.errors import UnframeError
    from unframe.validate.rounding import rounding_error

    try:
        precision = BACKENDS.get(cand.kind).compute_precision(Target(cand.kind, None, dict(cand.options)))
    except UnframeError:  # a precision this version doesn't name ("fp32 (every node pinned...)")
        return None
    if precision == "fp32":
        return None
    measured = rounding_error(ref.graph, feeds, precision)
    return None if measured is None else {n: measured.allowance(n) for n in measured.errors}


def _plan(ref: Opened, cand: Opened, tolerance: float) -> LocatePlan | None:
    """Walk the candidate's graph when it is ONNX (a cut of it reruns on onnxruntime), else the
    reference's (a cut is rebuilt for the candidate's backend)."""
    from unframe.locate.origin import node_origin
    from unframe.locate.repro import run_on_onnxruntime

    if cand.graph is not None:
        return LocatePlan(cand.graph, ref.tap, cand.tap, reproduce=run_on_onnxruntime,
                          source_of=node_origin, tolerance=tolerance)
    if ref.graph is None:
        return None
    probe = _probe(ref.graph, cand) if cand.tap is None else None
    return LocatePlan(ref.graph, ref.tap, cand.tap, probe=probe, reproduce=_rebuild(cand),
                      source_of=node_origin, tolerance=tolerance)


def _probe(graph: ir.Model, cand: Opened) -> Any:
    from unframe.converters.base import Target
    from unframe.converters.registry import BACKENDS

    return BACKENDS.get(cand.kind).probe(graph, Target(cand.kind, None, dict(cand.options)))


def _rebuild(cand: Opened) -> Any:
    from unframe.converters.base import Target
    from unframe.converters.registry import BACKENDS

    return backend_reproducer(BACKENDS.get(cand.kind), Target(cand.kind, None, dict(cand.options)))

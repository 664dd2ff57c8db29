"""The public calls: plan a route (``unframe.route``), run its stages (``unframe.pipeline``),
return what they produced.

Every stage is checked against the stage before it (``ParityReport``). By default a failed check
raises ``ParityError`` and nothing is written. Outputs are placed by rename from a staging folder
beside them, so an interrupted or failed run never leaves a partial file. Several targets share
the load and export stages; one target failing leaves the others written.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx_ir as ir

from unframe import io, sandbox
from unframe import pipeline as pl
from unframe.converters.base import Artifact, ConvertOptions, InputSpec
from unframe.errors import Blocker, InputError, UnframeError, UsageError
from unframe.route import Branch, Request, Route, detect_frontend, is_reference, parse_targets, plan
from unframe.validate.compare import ParityReport
from unframe.validate.inputs import load_npz
from unframe.validate.runner import TensorSpec


@dataclass
class ConversionResult:
    """One target's product. ``model`` is the product itself (an ``onnx_ir.Model`` for ONNX, an
    ``MLModel`` for CoreML, the engine's bytes for TensorRT); ``artifact`` adds its metadata."""

    artifact: Artifact
    path: Path | None
    report: ParityReport
    route: Route
    branch: Branch | None = None
    flow: pl.Flow | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)

    @property
    def model(self) -> Any:
        return self.artifact.model

    @property
    def target(self) -> str:
        return self.branch.name if self.branch is not None else self.route.backend

    @property
    def export(self) -> Any:
        return self.flow.export if self.flow is not None else None

    @property
    def opset_conversion(self) -> Any:
        return self.flow.conversion if self.flow is not None else None

    @property
    def notes(self) -> list[str]:
        return (self.flow.notes if self.flow is not None else []) + self.artifact.notes

    @property
    def timing_split(self) -> dict[str, Any]:
        """``timings`` told apart per stage into the wrapped tools' own seconds (by tool) and
        unframe's (the rest: copies, guards, probes, feeds, comparisons, writes); ``total`` sums
        them, unframe's part including the time between stages (planning, forking)."""
        split = dict(self.flow.split) if self.flow is not None else {}
        if "total" in self.timings:
            split["total"] = total_split(self.timings["total"], split)
        return split

    def save(self, path: str | os.PathLike[str], *, force: bool = False) -> list[Path]:
        """Write the product (with its sidecars) atomically; ``force`` replaces an existing one."""
        if self.flow is None or self.branch is None or self.artifact.model is None:
            raise UsageError("this result holds no artifact to save", "convert without explain=True")
        dest = Path(path)
        from unframe.route import check_suffix

        check_suffix(dest, self.branch.backend)
        io.check_output_path(dest, force=force, inputs=(self.flow.source,)
                             if isinstance(self.flow.source, Path) else ())
        self.written = pl.write_artifact(self.flow, self.branch.backend, dest, force=force)
        self.path = dest
        return self.written

    def to_dict(self) -> dict[str, Any]:
        conversion = self.opset_conversion
        return {
            "target": self.target,
            "path": str(self.path) if self.path else None,
            "written": [str(p) for p in self.written],
            "route": self.route.to_dict(),
            "parity": self.report.to_dict(),
            "exporter": self.export.tool if self.export else None,
            "notes": self.notes,
            "opset_conversion": conversion.to_dict() if hasattr(conversion, "to_dict") else None,
            "provenance": self.provenance,
            "timings": self.timings,
            "timing_split": self.timing_split,
        }

    def __str__(self) -> str:
        lines = [f"{self.target}: " + (", ".join(str(p) for p in self.written) or "not written")]
        lines += [f"  note: {n}" for n in self.notes]
        lines += ["  " + line for line in str(self.report).splitlines()]
        return "\n".join(lines)


def total_split(total: float, split: dict[str, Any]) -> dict[str, Any]:
    tools: dict[str, float] = {}
    for part in split.values():
        for name, seconds in part["tools"].items():
            tools[name] = round(tools.get(name, 0.0) + seconds, 4)
    return {"seconds": round(total, 4), "tools": tools,
            "unframe": round(max(0.0, total - sum(tools.values())), 4)}


@dataclass
class MultiResult:
    """Several targets from one call: one ``ConversionResult`` per target that succeeded and the
    error of each that failed. Truthy when every target succeeded."""

    route: Route
    results: dict[str, ConversionResult] = field(default_factory=dict)
    errors: dict[str, UnframeError] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return not self.errors

    def __getitem__(self, target: str) -> ConversionResult:
        return self.results[target]

    @property
    def written(self) -> list[Path]:
        return [p for r in self.results.values() for p in r.written]

    def to_dict(self) -> dict[str, Any]:
        return {"ok": not self.errors, "route": self.route.to_dict(),
                "targets": {k: r.to_dict() for k, r in self.results.items()},
                "errors": {k: e.to_dict() for k, e in self.errors.items()}, "timings": self.timings}

    def __str__(self) -> str:
        parts = [str(r) for r in self.results.values()]
        parts += [f"{name}: FAILED: {err}" for name, err in self.errors.items()]
        return "\n".join(parts)


class PartialFailure(UnframeError):
    """Some targets of a multi-target call failed; the others were written. Carries the
    ``MultiResult``; the exit code is the first failed target's."""

    def __init__(self, result: MultiResult) -> None:
        name, first = next(iter(result.errors.items()))
        done = ", ".join(result.results) or "none"
        hint = "; ".join(h for h in (first.hint, f"written: {done}") if h)
        super().__init__(f"{len(result.errors)} of {len(result.route.branches)} targets failed; "
                         f"{name}: {first.message}", hint)
        self.exit_code = first.exit_code
        self.kind = first.kind
        self.result = result
        self.blockers = getattr(first, "blockers", [])


@dataclass
class CheckResult:
    route: Route
    blockers: list[Blocker]
    notes: list[str] = field(default_factory=list)  # e.g. where a live parser disagrees
    target: str = ""

    def __bool__(self) -> bool:
        return not self.blockers

    def to_dict(self) -> dict[str, Any]:
        return {"ok": not self.blockers, "target": self.target, "route": self.route.to_dict(),
                "blockers": [b.to_dict() for b in self.blockers], "notes": self.notes}


@dataclass
class MultiCheck:
    route: Route
    results: dict[str, CheckResult] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return all(self.results.values())

    @property
    def blockers(self) -> list[Blocker]:
        return [b for r in self.results.values() for b in r.blockers]

    def to_dict(self) -> dict[str, Any]:
        return {"ok": bool(self), "targets": {k: r.to_dict() for k, r in self.results.items()},
                "notes": list(self.route.notes)}


# -------------------------------------------------------------------------- public API -------
def convert(source: Any, *, from_: str | None = None, to: str | list[str] = "onnx",
            output: str | os.PathLike[str] | None = None, opset: int | None = None,
            sample_inputs: Any = None, inputs: Any = None, target: Any = None, validate: bool = True,
            atol: Any = None, rtol: Any = None, trust: bool = False, force: bool = False,
            static: bool = False, dynamic: list[tuple[str, int, str | None]] | None = None,
            explain: bool = False, ml_opset: int | None = None, strict_parity: bool = False,
            locate: bool | float = True, debug_dir: str | os.PathLike[str] | None = None,
            gather: bool = False, observer: pl.Observer | None = None, **options: Any) -> Any:
    """Convert ``source`` (a file path or a framework object) to ``to``: "onnx", "coreml",
    "tensorrt", a comma list or list of them, or "all" (every backend usable here).

    One target returns a ``ConversionResult`` and raises on failure. Several return a
    ``MultiResult``; if any fails, ``PartialFailure`` is raised after the others were written
    (it carries the ``MultiResult``). Without ``output`` nothing is written: the products stay in
    memory (``result.save(path)``); the CLI without ``-o`` writes beside the source.
    Stage options (``exporter``, ``signature``, ``precision``, ``shapes``...) are keyword
    arguments; one no stage of the route reads is a ``UsageError``. A parity stage whose reference
    is degenerate (near zero, constant, non-finite) even on other drawn inputs is *weak*;
    ``strict_parity=True`` makes that a failure. When a stage fails, the divergence locator
    (``locate=True``, or a time cap in seconds) names the first diverging node on the
    ``ParityError`` (``.divergence``) and writes a repro and an error plot under ``debug_dir``
    (default: beside the output).

    In a distributed run (torch.distributed initialized, ``$RANK`` or ``TF_CONFIG`` set) only rank
    0 converts a live model; the other ranks get a falsy ``SkippedResult`` at once (a file path
    converts on every process that asks). An FSDP-sharded model is
    refused unless ``gather=True``, called on every rank: its full weights are gathered to rank
    0's CPU (a collective) and rank 0 converts an unsharded copy; the live model is untouched."""
    if not explain:
        source, skipped = _rank_zero_only(source, gather)
        if skipped is not None:
            return skipped
    settings = pl.Settings(validate=validate, strict=strict_parity, trust=trust, force=force, atol=atol, rtol=rtol,
                           locate=bool(locate), debug_dir=Path(debug_dir) if debug_dir is not None else None,
                           locate_seconds=pl.Settings.locate_seconds if isinstance(locate, bool)
                           else float(locate),
                           spec=InputSpec(tensors=_parse_inputs(inputs), samples=_samples(sample_inputs),
                                          static=static, dynamic=list(dynamic or [])),
                           options=dict(options))
    targets = parse_targets(to)
    src = _as_source(source)
    request = Request(src, targets, from_, Path(output) if output is not None else None, opset,
                      ml_opset, target, settings, write=True)
    route = plan(request)
    multi = _is_multi(to, route)
    if explain:
        return _planned(route, multi)
    _check_before_work(route, request)
    return run(route, request, observer or pl.Observer(), multi)


def run(route: Route, request: Request, observer: pl.Observer, multi: bool) -> Any:
    """Run a planned route: the prefix once, then each target's branch on its own fork. Native
    code sandboxed in child processes gets one child per library for the whole conversion."""
    with sandbox.session(), pl.limited(request.settings):
        return _run(route, request, observer, multi)


def _run(route: Route, request: Request, observer: pl.Observer, multi: bool) -> Any:
    t0 = time.perf_counter()
    outcome = MultiResult(route)
    first_output = route.branches[0].output if route.branches else None
    with pl.running(pl.Flow(request.settings, request.source, route.load.frontend,
                            output=first_output)) as flow:
        shared_failure = _run_prefix(route, flow, observer, multi)
        last = len(route.branches) - 1
        for i, branch in enumerate(route.branches):
            if shared_failure is not None and not branch.direct:
                outcome.errors[branch.name] = shared_failure  # its ONNX graph was never made
                continue
            fork = flow.fork(clone=i < last)
            fork.output = branch.output
            try:
                pl.run_stages(branch.stages, fork, observer)
                outcome.results[branch.name] = _result(route, branch, fork)
            except UnframeError as exc:
                fork.cleanup()
                if not multi:
                    raise
                outcome.errors[branch.name] = exc
            except BaseException:
                fork.cleanup()
                raise
    outcome.timings = {**flow.timings, "total": time.perf_counter() - t0}
    if not multi:
        result = outcome.results[route.branches[0].name]
        result.timings["total"] = outcome.timings["total"]
        return result
    if outcome.errors:
        raise PartialFailure(outcome)
    return outcome


def _run_prefix(route: Route, flow: pl.Flow, observer: pl.Observer, multi: bool) -> UnframeError | None:
    """The shared stages. When the export (or its parity) fails in a call with direct targets,
    those still run from the loaded model: the failure is returned for the ONNX targets."""
    loading = [s for s in route.prefix if s.kind == "load"]
    pl.run_stages(loading, flow, observer)
    rest = [s for s in route.prefix if s.kind != "load"]
    try:
        pl.run_stages(rest, flow, observer)
    except UnframeError as exc:
        if not multi or not any(b.direct for b in route.branches):
            raise
        flow.model, flow.export = None, None
        return exc
    return None


def _result(route: Route, branch: Branch, flow: pl.Flow) -> ConversionResult:
    artifact = flow.artifact
    if artifact is not None and not flow.written and isinstance(artifact.model, ir.Model):
        flow.kept = io.snapshot_weights(artifact.model)  # live parameters: the caller's own copy
    if not flow.written and artifact is not None and artifact.path is not None:
        flow.keep_workdir = True  # no output asked: the caller gets the artifact from there
    flow.cleanup()
    # the same keys whatever the artifact keeps them as (TFLite metadata names them unframe.<key>)
    prov = {k.removeprefix("unframe."): v for k, v in artifact.metadata.items()
            if isinstance(v, str)} if artifact else {}
    if artifact is not None and isinstance(artifact.metadata.get("provenance"), dict):
        prov = dict(artifact.metadata["provenance"])
    return ConversionResult(artifact, branch.output if flow.written else None, flow.report, route,
                            branch, flow, prov, dict(flow.timings), list(flow.written))


def _planned(route: Route, multi: bool) -> Any:
    if multi:
        return MultiResult(route)
    return ConversionResult(Artifact(kind=route.branches[0].name), None, ParityReport(), route,
                            route.branches[0])


def _check_before_work(route: Route, request: Request) -> None:
    """Refuse an output that exists, overwrites the input or lies in no folder, and a missing
    extra, before anything is loaded."""
    route.load.frontend.ensure_available()
    protect = (request.source,) if isinstance(request.source, Path) else ()
    multi_dir = route.branches[0].output.parent if len(route.branches) > 1 and route.branches[0].output else None
    if multi_dir is not None and not multi_dir.exists():
        if not multi_dir.parent.is_dir():
            raise UsageError(f"output folder {multi_dir.parent} does not exist", "create it first")
        multi_dir.mkdir()
    for branch in route.branches:
        branch.backend.ensure_available()
        if branch.output is not None:
            io.check_output_path(branch.output, force=request.settings.force, inputs=protect)


def check(source: Any, *, from_: str | None = None, to: str | list[str] = "onnx", opset: int | None = None,
          target: Any = None, trust: bool = False, sample_inputs: Any = None, inputs: Any = None,
          static: bool = False, **options: Any) -> Any:
    """Pre-flight: every reason each target can't take the model, at once, without writing.
    One target returns a ``CheckResult``; several (or "all") a ``MultiCheck``."""
    settings = pl.Settings(validate=False, trust=trust, options=dict(options),
                           spec=InputSpec(tensors=_parse_inputs(inputs), samples=_samples(sample_inputs),
                                          static=static))
    targets = parse_targets(to)
    request = Request(_as_source(source), targets, from_, None, opset, None, target, settings, write=False)
    route = plan(request)
    fe = route.load.frontend
    fe.ensure_available()
    out = MultiCheck(route)
    with sandbox.session(), pl.limited(settings), \
            pl.running(pl.Flow(settings, request.source, fe)) as flow:
        pl.run_stages(route.prefix, flow, pl.Observer())
        for branch in route.branches:
            out.results[branch.name] = _check_branch(route, branch, flow)
    return out if _is_multi(to, route) else out.results[route.branches[0].name]


def _check_branch(route: Route, branch: Branch, flow: pl.Flow) -> CheckResult:
    from unframe.pipeline.quantize import scheme_blockers, wanted

    refused = scheme_blockers(branch.backend, wanted(flow))
    if refused:
        return CheckResult(route, refused, target=branch.name)
    if branch.direct:  # the backend's own check on the native model, as its convert will see it
        fe = route.load.frontend
        blockers = pl.check_direct(branch.backend, fe, pl.prepared_for(flow), branch.target)
        return CheckResult(route, blockers, target=branch.name)
    model = flow.model
    if branch.opset and _main_opset(model) != branch.opset:
        from unframe import version_converter

        blockers = version_converter.preflight(model, branch.opset)
        if blockers:
            return CheckResult(route, blockers, target=branch.name)
        model = model.clone()
        version_converter.convert_opset(model, branch.opset)
    for stage in branch.stages:  # the lowering of ai.onnx.ml ops, when the branch has one
        if isinstance(stage, pl.LowerStage):
            blockers, model = stage.check_model(model)
            if blockers:
                return CheckResult(route, blockers, target=branch.name)
    blockers, notes = branch.backend.check_with_notes(model, branch.target)
    return CheckResult(route, blockers, notes, branch.name)


def convert_opset(model: Any, opset: int, *, output: str | os.PathLike[str] | None = None,
                  validate: bool = True, force: bool = False, sample_inputs: Any = None,
                  atol: Any = None, rtol: Any = None, ml_opset: int | None = None,
                  strict_parity: bool = False, locate: bool | float = True,
                  debug_dir: str | os.PathLike[str] | None = None, **limits: Any) -> ConversionResult:
    """Move an ONNX model (path, ModelProto or onnx_ir.Model) to another opset, checked with
    onnxruntime against the original. ``ml_opset`` moves the ``ai.onnx.ml`` domain too. With
    ``validate=False`` no parity inputs are drawn (models with sequence inputs convert).
    ``limits``: ``max_memory`` and ``parity_timeout`` (see ``unframe.limits``)."""
    return convert(model, from_="onnx", to="onnx", opset=opset, output=output, validate=validate,
                   force=force, sample_inputs=sample_inputs, atol=atol, rtol=rtol, ml_opset=ml_opset,
                   strict_parity=strict_parity, locate=locate, debug_dir=debug_dir, **limits)


def compare(a: str | os.PathLike[str], b: str | os.PathLike[str], *, sample_inputs: Any = None,
            atol: Any = None, rtol: Any = None, intermediates: bool = False,
            debug_dir: str | os.PathLike[str] | None = None, seconds: float = 120.0) -> Any:
    """Run two artifacts (.onnx, .mlpackage, .engine on a GPU) on the same inputs and check every
    output (a ``CompareResult``, truthy when they agree). ``intermediates=True`` also finds the
    first node where they part, with its repro and error plot under ``debug_dir``."""
    from unframe.locate.compare import compare_artifacts
    from unframe.validate.inputs import as_feed_list

    samples = _samples(sample_inputs)
    return compare_artifacts(a, b, feeds=as_feed_list(samples) if samples is not None else None,
                             atol=atol, rtol=rtol, intermediates=intermediates,
                             debug_dir=debug_dir, seconds=seconds)


def load(path: str | os.PathLike[str], *, from_: str | None = None, trust: bool = False, **options: Any) -> Any:
    """Load a model file: ONNX as an ``onnx_ir.Model`` (external data lazy); other formats as
    their framework's object (``--trust`` rules apply)."""
    src = _as_source(path)
    fe = detect_frontend(src, from_)
    fe.ensure_available()
    return fe.load(src, ConvertOptions(trust=trust, options=dict(options)))


def save(model: Any, path: str | os.PathLike[str], *, force: bool = False,
         external_data: bool | None = None) -> list[Path]:
    """Atomically save an ONNX model (onnx_ir.Model or ModelProto)."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        model = ir.serde.deserialize_model(model)
    if not isinstance(model, ir.Model):
        raise UsageError(f"save() takes an ONNX model, not {type(model).__name__}",
                         "use unframe.convert(..., output=PATH) for other formats")
    return io.save_model(model, path, force=force, external_data=external_data)


# ------------------------------------------------------------------------------ helpers ------
def _rank_zero_only(source: Any, gather: bool) -> tuple[Any, Any]:
    """The source rank 0 converts, and what the other ranks return (None on rank 0). With
    ``gather`` every rank first joins the gather of an FSDP-sharded torch model. A file source
    (the CLI, the zoo, a checkpoint) converts on whichever process asks."""
    from unframe.distributed import SkippedResult, process_rank

    if isinstance(source, (str, os.PathLike)):
        return source, None
    if gather and any(
            f"{c.__module__}.{c.__qualname__}" == "torch.nn.modules.module.Module"
            for c in type(source).__mro__):
        from unframe.converters.frontends._torch.fsdp import gather_to_rank0

        source = gather_to_rank0(source, f"the live {type(source).__name__}")
    rank = process_rank()
    return source, (SkippedResult(rank) if rank != 0 else None)


def _is_multi(to: Any, route: Route) -> bool:
    """A comma list, a list or "all" gets the multi-target result, even if it names one target."""
    return len(route.branches) > 1 or not isinstance(to, str) or "," in to or to.strip().lower() == "all"


def _main_opset(model: ir.Model) -> int | None:
    from unframe.opset import main_opset

    return main_opset(model)


def _as_source(source: Any) -> Any:
    if isinstance(source, (str, os.PathLike)) and not is_reference(source):
        return Path(source)
    return source


def _samples(sample_inputs: Any) -> Any:
    if isinstance(sample_inputs, (str, os.PathLike)):
        p = Path(sample_inputs)
        if not p.is_file():
            raise InputError(f"{p}: sample inputs file not found", "pass an .npz of arrays by input name")
        try:
            return load_npz(str(p))
        except Exception as exc:
            raise InputError(f"{p}: not a readable .npz file ({exc})", "save samples with numpy.savez") from exc
    return sample_inputs


def _parse_inputs(inputs: Any) -> list[TensorSpec] | None:
    """``name:shape:dtype`` strings (shape like 1x3x224x224 or batchx3x224x224; '?' dynamic)
    or TensorSpec objects."""
    if inputs is None:
        return None
    if isinstance(inputs, str):
        inputs = [s for s in inputs.split(",") if s.strip()]
    specs = []
    for item in inputs:
        if isinstance(item, TensorSpec):
            specs.append(item)
            continue
        parts = str(item).strip().split(":")
        if len(parts) not in (2, 3) or not parts[0]:
            raise UsageError(f"bad input spec {item!r}", "use name:shape:dtype, e.g. x:1x3x224x224:float32")
        shape: list[int | str | None] = []
        for d in parts[1].lower().replace(",", "x").split("x") if parts[1] else []:
            d = d.strip()
            shape.append(int(d) if d.isdigit() else (None if d in ("?", "-1", "") else d))
        specs.append(TensorSpec(parts[0], tuple(shape), parts[2] if len(parts) == 3 else "float32"))
    return specs

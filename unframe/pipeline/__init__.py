"""The pipeline: the stage objects a route is made of, and the one loop that runs them.

``route.plan()`` returns a ``Route``: a prefix of stages every target shares (load, export) and
one branch of stages per target (opset, backend, write), with a ``ParityStage`` after each stage
that changes what is computed. ``run_route()`` runs them in order over one ``Flow``, the state in
flight. A work stage offers a runner of what it produced; the parity stage after it compares that
runner with the previous one, the way Polygraphy's comparator compares each runner with the next.
``--explain`` prints the same list, so what is explained is what runs.

Adding a capability (a locator, a callback, a new kind of check) means a new stage or a method on
one, not a new parameter threaded through ``unframe.api``.

Before::   api.convert: load; export; compare; convert opset; compare; check; convert; compare...
After::    for stage in route.prefix + branch.stages: stage.run(flow)
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unframe import io, limits
from unframe.converters.base import (
    Artifact,
    Backend,
    ConvertOptions,
    ExportResult,
    Frontend,
    InputSpec,
    RunnerUnavailable,
    Target,
)
from unframe.distributions import dist_version
from unframe.errors import ConversionError, InputError, ParityError, UnframeError, UnsupportedError
from unframe.opset import main_opset
from unframe.validate.compare import FAILED, ParityReport, StageParity, compare
from unframe.validate.deferred import Deferred, onnx_runner_of
from unframe.validate.runner import Runner
from unframe.validate.tolerances import Tolerance

if TYPE_CHECKING:
    import onnx_ir as ir


# ------------------------------------------------------------------------ the request ---------
@dataclass
class Settings:
    """What the caller asked that any stage may read (the rest of a call is the route itself)."""

    validate: bool = True
    strict: bool = False  # a weak parity stage (degenerate reference) fails instead of passing
    locate: bool = True  # on a parity failure, find the first diverging node (unframe.locate)
    locate_seconds: float = 120.0  # the locator's time cap
    debug_dir: Path | None = None  # where the locator writes its repro and plot
    trust: bool = False
    force: bool = False
    atol: Any = None
    rtol: Any = None
    spec: InputSpec = field(default_factory=InputSpec)
    options: dict[str, Any] = field(default_factory=dict)  # stage options by name

    def convert_options(self, opset: int | None = None) -> ConvertOptions:
        return ConvertOptions(trust=self.trust, opset=opset, options=dict(self.options),
                              validate=self.validate)

    @property
    def parity_seconds(self) -> float:
        """The time limit of one parity check (--parity-timeout), and of loading its runtimes."""
        given = self.options.get("parity_timeout")
        return limits.parse_seconds(given) if given else limits.DEFAULT_PARITY_SECONDS


# ------------------------------------------------------------------------ runners ------------
@dataclass
class Unavailable:
    """A stage's artifact can't be run here (a TensorRT engine without a GPU): parity is skipped."""

    candidate: str
    reason: str


# ------------------------------------------------------------------------ the flow -----------
@dataclass
class Flow:
    """One route's state in flight. Several targets fork it after the shared prefix."""

    settings: Settings
    source: Any
    frontend: Frontend
    native: Any = None
    export: ExportResult | None = None
    model: ir.Model | None = None
    conversion: Any = None
    artifact: Artifact | None = None
    opset_path: list[int] = field(default_factory=list)
    report: ParityReport = field(default_factory=ParityReport)
    reference: Runner | None = None  # the runner of the last checked stage
    candidate: Runner | Unavailable | None = None  # what the stage just run offers for checking
    workdir: Path | None = None
    keep_workdir: bool = False
    written: list[Path] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _feeds: list[dict[str, Any]] | None = None
    redrawn: bool = False  # other feeds were tried once for a degenerate reference
    unstable: set[str] = field(default_factory=set)  # outputs the reference doesn't reproduce (random ops)
    before: ir.Model | None = None  # the graph as it was before the opset stage (for the locator)
    output: Path | None = None  # where this branch writes (the locator's folder goes beside it)
    divergence: Any = None  # what the locator found when a parity stage failed
    kept: Any = None  # the folder of a result's weights (io.snapshot_weights): lives with the result
    # Contexts held for the whole run (the live-model guard): released by ``release()``
    _held: ExitStack = field(default_factory=ExitStack)

    def hold(self, context: AbstractContextManager[Any]) -> Any:
        """Enter ``context`` until the run ends (``release``), on every outcome."""
        return self._held.enter_context(context)

    def release(self) -> None:
        self._held.close()

    @property
    def validate(self) -> bool:
        return self.settings.validate

    @property
    def feeds(self) -> list[dict[str, Any]]:
        """Parity inputs: the exporter's, else the user's samples, else generated from the graph.
        Drawn only when a stage compares something (``validate=False`` never needs them)."""
        if self._feeds is None:
            from unframe.validate.inputs import DYNAMIC_FILLS, as_feed_list, generate_feeds
            from unframe.validate.runnable import check_runnable

            if self.model is not None:  # before any runtime loads it: weights, endless Loops
                check_runnable(self.model, source_text(self.source))
            if self.export is not None and self.export.feeds:
                self._feeds = self.export.feeds
            elif self.settings.spec.samples is not None:
                self._feeds = as_feed_list(self.settings.spec.samples)
            else:  # static: the artifact keeps the first feed's shapes, so no feed of other sizes
                fills = DYNAMIC_FILLS[:1] if self.settings.spec.static else DYNAMIC_FILLS
                self._feeds = generate_feeds(self.model, fills=fills, source=source_text(self.source))
        return self._feeds

    def pin_runners(self) -> None:
        """Build deferred runners and draw the feeds now: the next stage changes the model in
        place, and both must see the graph as it was."""
        if not self.validate:
            return
        _ = self.feeds  # first: the feeds' checks refuse what no runtime should be handed
        with limits.time_limit(self.settings.parity_seconds, "loading the runtimes for parity"):
            for r in (self.reference, self.candidate):
                if isinstance(r, Deferred):
                    r.pin()

    def fork(self, clone: bool) -> Flow:
        """A copy for one target's branch: its own model (a clone when other branches follow),
        report, artifact and written files; the prefix's reference runner and feeds are shared."""
        self.pin_runners()
        model = self.model.clone() if clone and self.model is not None else self.model
        return Flow(self.settings, self.source, self.frontend, native=self.native, export=self.export,
                    model=model, opset_path=list(self.opset_path),
                    report=ParityReport(list(self.report.stages)), reference=self.reference,
                    timings=dict(self.timings), notes=list(self.notes), _feeds=self._feeds,
                    unstable=set(self.unstable))

    def record(self, stage: StageParity) -> None:
        hint = ("nothing was written; loosen --atol/--rtol only if the difference is expected, or "
                "report the model")
        if any(o.top1_failed for o in stage.outputs):
            hint = ("nothing was written; the classes are decided by differences this stage doesn't "
                    "keep: pass inputs that exercise the model (--sample-inputs), compute in fp32 "
                    "(--precision fp32), or report the model")
        if stage.run_failure:  # the artifact, not the user's input: it can't be checked as it is
            hint = ("nothing was written: the artifact could not be run to check it; report it with "
                    "--debug output, or --no-validate writes it unchecked")
        if stage and stage.weak and self.settings.strict:
            stage.status, stage.reason = "failed", "weak (--strict-parity): " + "; ".join(stage.weak)
            hint = ("nothing was written; pass inputs that exercise the model (--sample-inputs), or "
                    "drop --strict-parity to accept a weak check")
        self.report.add(stage)
        if not stage:
            raise ParityError(f"parity failed at the {stage.stage} stage ({stage.reference} vs "
                              f"{stage.candidate}): {stage.reason}", hint, report=self.report,
                              divergence=self.divergence)

    def work_dir(self, near: Path | None) -> Path:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=".unframe-tmp-", dir=near))
        return self.workdir

    def cleanup(self) -> None:
        if self.workdir is not None and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


def source_text(source: Any) -> str:
    return str(source) if isinstance(source, (str, Path)) else type(source).__name__


# ------------------------------------------------------------------------ stages -------------
class Stage:
    """One step of a route. ``run(flow)`` does the work; a stage that changes what is computed
    sets ``flow.candidate`` for the parity stage after it. A stage that changes ``flow.model`` in
    place calls ``flow.pin_runners()`` first, when a comparison will follow."""

    kind = ""  # load | export | opset | lower | backend | parity | stamp | write

    def __init__(self, tool: str, detail: str = "", versions: dict[str, str] | None = None) -> None:
        self.tool = tool
        self.detail = detail
        self.versions = versions or {}

    def run(self, flow: Flow) -> None:
        raise NotImplementedError

    def checked_seconds(self, flow: Flow) -> float:
        """Seconds of the last ``run`` spent checking numbers (validation the stage does itself):
        timed with the parity after it, not as the stage's own work."""
        return 0.0

    def locate_plan(self, flow: Flow, tolerance: float, candidate: Runner | None = None) -> Any:
        """A ``unframe.locate.LocatePlan`` for the divergence locator when this stage's parity
        fails (``candidate``: the runner that failed it): the graph both sides share, a tap (or
        probe) into each, how to rerun this stage on a small cut of the graph; None when nothing
        can look inside one side here."""
        return None

    def compare_options(self, flow: Flow) -> dict[str, Any]:
        """How the parity stage after this one compares outputs (exact outputs, tolerances)."""
        export = flow.export
        return {"exact": export.exact_outputs if export else (),
                "defaults": export.tolerances if export else None}

    def recover(self, flow: Flow, candidate: Runner | None) -> Runner | None:
        """After this stage's parity failed: measure what the stage's own precision allows (a
        floor for ``compare_options``) and return the runner to compare again; None when there
        is nothing to retry (the default)."""
        return None

    def decode_steps(self, flow: Flow) -> int:
        """Greedy tokens the parity stage after this one compares for a decoder."""
        from unframe.validate.generate import DEFAULT_STEPS

        return DEFAULT_STEPS

    @property
    def label(self) -> str:
        return f"{self.kind}: {self.tool}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.kind, "tool": self.tool, "detail": self.detail, "versions": self.versions}

    def describe(self) -> str:
        ver = ", ".join(f"{k} {v}" for k, v in self.versions.items())
        return (f"{self.kind:<8} {self.tool}" + (f" [{ver}]" if ver else "")
                + (f" - {self.detail}" if self.detail else ""))


class LoadStage(Stage):
    kind = "load"

    def __init__(self, frontend: Frontend, source: Any) -> None:
        versions = frontend.versions() if frontend.exports else {
            "onnx": dist_version("onnx") or "?", "onnx-ir": dist_version("onnx-ir") or "?"}
        super().__init__(f"{frontend.name} frontend", source_text(source), versions)
        self.frontend = frontend
        self.source = source

    def run(self, flow: Flow) -> None:
        fe = self.frontend
        flow.hold(fe.preserve(self.source))  # a live model comes back as it was, on any outcome
        flow.native = fe.load(self.source, flow.settings.convert_options())
        if not fe.exports:  # the source is the graph already
            flow.model = flow.native
            flow.opset_path = [o for o in [main_opset(flow.model)] if o]
        if flow.validate:
            native = flow.native
            flow.reference = Deferred(lambda: fe.runner(native, flow.export), "the source model",
                                      InputError)


class ExportStage(Stage):
    kind = "export"

    def __init__(self, frontend: Frontend, opset: int | None, targets: tuple[str, ...] = ()) -> None:
        super().__init__(f"{frontend.name} exporter", f"to ONNX opset {opset}" if opset else "to ONNX",
                         frontend.versions())
        self.frontend = frontend
        self.opset = opset
        self.targets = targets  # the backends the export feeds (ConvertOptions.targets)
        self._noise: tuple[Any, Any, str] | None = None  # (feeds, RoundingError, runner) once measured

    def run(self, flow: Flow) -> None:
        opts = flow.settings.convert_options(self.opset)
        opts.targets = self.targets
        flow.export = self.frontend.to_onnx(flow.native, flow.settings.spec, opts)
        flow.model = flow.export.model
        flow.opset_path = [o for o in [main_opset(flow.model)] if o]
        flow.notes.extend(flow.export.notes)
        if flow.validate:
            flow.candidate = onnx_runner_of(flow.model, "the exported ONNX graph")

    def checked_seconds(self, flow: Flow) -> float:
        return flow.export.check_seconds if flow.export is not None else 0.0

    def compare_options(self, flow: Flow) -> dict[str, Any]:
        options = super().compare_options(flow)
        measured = self._noise[1] if self._noise is not None and self._noise[0] is flow.feeds else None
        if measured is not None:
            options["floors"] = {n: measured.allowance(n) for n in measured.errors}
            options["floor_origin"] = f"the source's own float32 error ({self._noise[2]})"
        return options

    def recover(self, flow: Flow, candidate: Runner | None) -> Runner | None:
        """After the export's parity failed at the default tolerance: run the source in float64
        (where its frontend can) to measure what float32 alone moves its outputs by
        (``unframe.validate.rounding.source_float32_error``); that raises the atol, and the
        comparison runs again. Exports that pass never pay for it."""
        from unframe.validate.rounding import source_float32_error

        if self._noise is not None or flow.export is None or flow.reference is None or candidate is None:
            return None
        precise = self.frontend.precise_runner(flow.native, flow.export)
        if precise is None:
            return None
        feeds = flow.feeds
        measured = source_float32_error(flow.reference, precise, feeds)
        self._noise = (feeds, measured, precise.name)
        if measured is None or not any(measured.allowance(n) for n in measured.errors):
            return None
        return candidate

    def locate_plan(self, flow: Flow, tolerance: float, candidate: Runner | None = None) -> Any:
        from unframe.locate import LocatePlan
        from unframe.locate.repro import run_on_onnxruntime
        from unframe.locate.taps import OnnxTap, source_tap

        source = source_tap(self.frontend, flow.native, flow.export)
        if source is None:
            return None
        return LocatePlan(flow.model, source, OnnxTap(flow.model), reproduce=run_on_onnxruntime,
                          source_of=source_namer(flow), tolerance=tolerance)


class OpsetStage(Stage):
    kind = "opset"

    def __init__(self, start: int | None, target: int, ml_target: int | None = None,
                 exporting: bool = False) -> None:
        if exporting and start == target:
            detail = f"ensure opset {target} (converts only if the export came out at another)"
        else:
            detail = f"opset {start or '?'} -> {target}"
            if exporting:
                detail += " (if the exporter can't produce it directly)"
        if ml_target is not None:
            detail += f", ai.onnx.ml -> {ml_target}"
        super().__init__("unframe version converter", detail, {"unframe": dist_version("unframe") or "?"})
        self.target = target
        self.ml_target = ml_target

    def run(self, flow: Flow) -> None:
        from unframe import opset as facts

        model = flow.model
        ml_now = model.opset_imports.get(facts.ML_DOMAIN)
        move_ml = self.ml_target is not None and ml_now is not None and ml_now != self.ml_target
        if main_opset(model) == self.target and not move_ml:
            return  # already there: nothing changed, nothing to compare
        from unframe import version_converter

        flow.pin_runners()
        if flow.validate and flow.settings.locate:
            flow.before = model.clone()  # O(nodes); tensors are shared, never copied
        flow.conversion = version_converter.convert_opset(
            model, self.target, ml_target=self.ml_target if move_ml else None)  # raises with every blocker
        flow.opset_path.append(self.target)
        if flow.validate:
            flow.candidate = onnx_runner_of(model)

    def locate_plan(self, flow: Flow, tolerance: float, candidate: Runner | None = None) -> Any:
        from unframe.locate import LocatePlan
        from unframe.locate.taps import OnnxTap

        if flow.before is None:
            return None

        def reproduce(cut: ir.Model, feeds: dict[str, Any]) -> dict[str, Any]:
            from unframe import version_converter
            from unframe.locate.repro import run_on_onnxruntime

            version_converter.convert_opset(cut, self.target)
            return run_on_onnxruntime(cut, feeds)

        return LocatePlan(flow.before, OnnxTap(flow.before), OnnxTap(flow.model), reproduce=reproduce,
                          source_of=source_namer(flow), tolerance=tolerance)


class LowerStage(Stage):
    """ai.onnx.ml ops rewritten into standard ONNX ops (``unframe.passes.ml_to_tensor``), for
    runtimes that have no ML domain (automatic) or on request (``ml_to_tensor``). A model below
    opset 13 is brought to 13 first. For a runtime without the ML domain (``encode_strings``)
    string inputs and outputs become indices under a stated mapping, applied to the reference
    runner and the feeds here so that every later stage compares like with like, and the whole
    graph is pinned to float32 (its labels come from comparing scores); the decisions go to the
    notes (provenance)."""

    kind = "lower"
    def __init__(self, encode_strings: bool, plan: list[str] | None = None, gemm_max_depth: int = 0) -> None:
        rule = (f"trees: GEMM depth <= {gemm_max_depth}, perfect traversal <= 10, traversal beyond"
                if gemm_max_depth else "trees: perfect traversal depth <= 10, traversal beyond")
        detail = "ai.onnx.ml ops -> standard ONNX (" + ("; ".join(plan) if plan else rule) + ")"
        if encode_strings:
            detail += "; string inputs/outputs -> indices, mapped on the host"
        super().__init__("unframe ml_to_tensor", detail, {"unframe": dist_version("unframe") or "?"})
        self.encode_strings = encode_strings
        self.gemm_max_depth = gemm_max_depth

    def _needed(self, model: ir.Model) -> bool:
        from unframe.passes import ml_to_tensor as mlt
        from unframe.passes.ml_to_tensor import strings

        return mlt.has_ml_ops(model) or (self.encode_strings and strings.has_strings(model))

    def check_model(self, model: ir.Model) -> tuple[list[Any], ir.Model]:
        """The blockers of lowering ``model``, and a lowered copy when there are none."""
        from unframe.passes import ml_to_tensor as mlt

        if not self._needed(model):
            return [], model
        work = _at_lowering_opset(model.clone())
        blockers = mlt.check(work, encode_strings=self.encode_strings)
        if not blockers:
            mlt.lower(work, encode_strings=self.encode_strings, gemm_max_depth=self.gemm_max_depth)
        return blockers, work

    def run(self, flow: Flow) -> None:
        from unframe.passes import ml_to_tensor as mlt

        if not self._needed(flow.model):
            if self.encode_strings and flow.frontend.emits_ml_ops:
                self._pin(flow)
            return  # nothing lowered: nothing computes differently, nothing to compare
        flow.pin_runners()
        _at_lowering_opset(flow.model, flow)
        report = mlt.lower(flow.model, encode_strings=self.encode_strings,
                           tree_strategy=flow.settings.options.get("tree_strategy"),
                           pin_fp32=self.encode_strings, gemm_max_depth=self.gemm_max_depth)
        decided = report.strategies()
        if decided:
            self.detail = f"ai.onnx.ml ops -> standard ONNX ({'; '.join(decided)})"
        flow.notes += [f"ml_to_tensor: {d}" for d in decided]
        if report.mappings:
            flow.notes.append("ml_to_tensor host-side mappings: " + json.dumps(report.mappings))
        if flow.validate:
            self._map_reference(flow, report)
            flow.candidate = onnx_runner_of(flow.model)

    @staticmethod
    def _pin(flow: Flow) -> None:
        """A classical ML model without ML ops (an MLP, a Gaussian process...) still decides
        labels by comparing scores: keep it in float32 on a 16-bit backend too."""
        from unframe.passes import KEEP_FP32

        for node in flow.model.graph:
            node.metadata_props[KEEP_FP32] = "1"
        flow.notes.append("ml_to_tensor: graph pinned to float32 (a scikit-learn model's labels "
                          "come from comparing scores; 16-bit compute would move them)")

    @staticmethod
    def _map_reference(flow: Flow, report: Any) -> None:
        """The reference (the graph before) answers through the stated mappings from now on."""
        from unframe.passes.ml_to_tensor.host import MappedReference, encode_feed

        if not report.mappings or flow.reference is None:
            return
        flow.reference = MappedReference(flow.reference, report.mappings)
        if report.input_vocab:
            flow._feeds = [encode_feed(f, report.input_vocab) for f in flow.feeds]


def _at_lowering_opset(model: ir.Model, flow: Flow | None = None) -> ir.Model:
    """Lowerings are written for opset 13 and later: convert an older model up to 13."""
    from unframe.passes.ml_to_tensor.builder import MIN_OPSET

    current = main_opset(model)
    if current is not None and current < MIN_OPSET:
        from unframe import version_converter

        version_converter.convert_opset(model, MIN_OPSET)
        if flow is not None:
            flow.opset_path.append(MIN_OPSET)
            flow.notes.append(f"ml_to_tensor: opset {current} -> {MIN_OPSET} first (the lowering "
                              f"writes opset-{MIN_OPSET} ops)")
    return model


class BackendStage(Stage):
    kind = "backend"

    def __init__(self, backend: Backend, target: Target, output: Path | None) -> None:
        suffixes = ", ".join(backend.suffixes)
        super().__init__(f"{backend.name} backend", f"build {suffixes}", backend.versions())
        self.backend = backend
        self.target = target
        self.output = output
        self._rounding: tuple[Any, Any] | None = None  # (feeds, RoundingError) of the last parity

    def run(self, flow: Flow) -> None:
        be, tgt = self.backend, self.target
        if "sample_shapes" in be.option_names and "sample_shapes" not in tgt.options:
            shapes = _sample_shapes(flow)
            if shapes:
                tgt.options["sample_shapes"] = shapes
        blockers = be.preflight(flow.model, tgt)
        if blockers:
            raise UnsupportedError(f"the {be.name} backend can't take this model: {len(blockers)} "
                                   "blocker(s)", "see the list; `unframe check` shows them without "
                                   "converting", blockers=blockers)
        compared = be.changes_compute(tgt)  # not a plain ONNX artifact: checked against the graph
        if compared:
            flow.pin_runners()
        self._convert(flow)

    def _convert(self, flow: Flow) -> None:
        be, tgt = self.backend, self.target
        near = self.output.parent if self.output is not None else None
        flow.artifact = be.convert(flow.model, tgt, flow.work_dir(near))
        if not flow.validate or not be.changes_compute(tgt):
            return
        try:
            flow.candidate = be.runner(flow.artifact, tgt)
        except RunnerUnavailable as why:
            flow.candidate = Unavailable(be.name, str(why))

    def locate_plan(self, flow: Flow, tolerance: float, candidate: Runner | None = None) -> Any:
        from unframe.locate import LocatePlan
        from unframe.locate.locator import backend_reproducer
        from unframe.locate.taps import OnnxTap, runner_tap

        be, tgt = self.backend, self.target
        tap = runner_tap(candidate)  # the locator sees the runner, not the backend
        probe = be.probe(flow.model, tgt) if tap is None else None
        if tap is None and probe is None:
            return None
        # a cut of the graph has other inputs: the options that name the model's own go
        cut_target = Target(tgt.name, tgt.opset, {k: v for k, v in tgt.options.items()
                                                  if k not in INPUT_BOUND_OPTIONS})

        return LocatePlan(flow.model, OnnxTap(flow.model), tap, probe=probe,
                          reproduce=backend_reproducer(be, cut_target),
                          source_of=source_namer(flow), tolerance=tolerance)

    def compare_options(self, flow: Flow) -> dict[str, Any]:
        options = {**super().compare_options(flow),
                   "default_fn": lambda dt: self.backend.tolerance(dt, self.target)}
        measured = self._rounding[1] if self._rounding is not None and self._rounding[0] is flow.feeds else None
        if measured is not None:
            options["floors"] = {n: measured.allowance(n) for n in measured.errors}
        return options

    def recover(self, flow: Flow, candidate: Runner | None) -> Runner | None:
        """After this stage's parity failed: for a 16-bit artifact, measure what 16-bit rounding
        alone moves the float32 graph's outputs by (``unframe.validate.rounding``), which raises
        the parity's atol; where rounding alone goes past what parity may allow (a tenth of an
        output's scale, or an overflow), keep the nodes responsible in float32 (the bisection of
        ``plan_keep_fp32``; the backend honours the marks) and convert again. Returns the runner
        (``candidate``, or the new artifact's) to compare again, or None when there is nothing to
        retry. Conversions that pass at the backend's own tolerance never pay for any of it.

        ``candidate`` None: the artifact can't be run here (a TensorRT engine without a GPU), so
        the rounding emulation is the only check: the plan is made all the same, and the note
        says it was predicted, not measured on the engine."""
        from unframe.passes import KEEP_FP32
        from unframe.validate.rounding import MAX_SHARE, WIDEN, plan_keep_fp32, rounding_error

        be, tgt = self.backend, self.target
        precision = be.compute_precision(tgt)
        if precision == "fp32" or flow.model is None or self._rounding is not None:
            return None  # a float32 artifact, or already retried
        feeds = flow.feeds
        model = flow.model
        measured = _in_parity_time(flow, "measuring what 16-bit rounding moves the outputs by",
                                   lambda: rounding_error(model, feeds, precision))
        self._rounding = (feeds, measured)
        if measured is None:
            return None
        runner = candidate
        if any(n in measured.nonfinite or WIDEN * e > MAX_SHARE * measured.scales[n]
               for n, e in measured.errors.items()):
            plan = _in_parity_time(flow, "planning which nodes to keep in float32", lambda: plan_keep_fp32(
                model, feeds, precision, lambda _name, scale: MAX_SHARE * scale / WIDEN))
            if plan is not None and plan.kept:
                nodes = list(flow.model.graph)
                for position in plan.positions:
                    nodes[position].metadata_props[KEEP_FP32] = "1"
                self._rounding = (feeds, rounding_error(flow.model, feeds, precision))
                shown = ", ".join(plan.kept[:6]) + (f" +{len(plan.kept) - 6} more" if len(plan.kept) > 6 else "")
                moved = "overflowed" if plan.before == float("inf") else \
                    f"moved an output {plan.before * MAX_SHARE / WIDEN:.2g} of its scale"
                flow.notes.append(
                    f"{len(plan.kept)} node(s) kept in float32 ({shown}): {precision} rounding alone {moved}, "
                    f"{plan.after * MAX_SHARE / WIDEN:.2g} with them (onnxruntime on a rounded copy); converted again"
                    + ("" if candidate is not None else " (predicted by that emulation: the artifact can't run here)")
                    + ("" if plan.enough else "; still too much: --precision fp32 computes all of it in float32"))
                self._convert(flow)
                runner, flow.candidate = flow.candidate, None
        elif measured.nonfinite:
            flow.notes.append(f"{precision} rounding alone overflows output(s) {', '.join(measured.nonfinite)} "
                              "of the graph (onnxruntime on a rounded copy): compute in fp32 (--precision fp32)")
        return runner

    def decode_steps(self, flow: Flow) -> int:
        return self.backend.decode_steps(self.target)


def _in_parity_time(flow: Flow, what: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` under the parity time limit (--parity-timeout): it is part of a parity
    check. Past the limit it is given up (None) and a note says so; the failure it was trying to
    explain stands."""
    seconds = flow.settings.parity_seconds
    try:
        with limits.time_limit(seconds, what):
            return compute()
    except limits.TimeLimitExceeded:
        flow.notes.append(f"{what} stopped at the parity time limit ({seconds:g} s); "
                          "--parity-timeout gives it longer")
        return None


def _sample_shapes(flow: Flow) -> dict[str, tuple[int, ...]] | None:
    feeds = flow.export.feeds if flow.export is not None and flow.export.feeds else None
    if feeds is None:
        try:
            feeds = flow.feeds
        except Exception:  # inputs no feed can be drawn for (sequences): the backend decides
            return None
    return {k: tuple(v.shape) for k, v in feeds[0].items()}


class ParityStage(Stage):
    """Compares the runner the stage before offered with the last checked runner."""

    kind = "parity"

    def __init__(self, checks: Stage, reference: str, candidate: str, what: str) -> None:
        super().__init__(f"{reference} vs {candidate}", what,
                         {"onnxruntime": dist_version("onnxruntime") or "?"})
        self.checks = checks

    def run(self, flow: Flow) -> None:
        candidate, flow.candidate = flow.candidate, None
        if candidate is None:
            return  # the stage changed nothing
        ref = flow.reference
        if isinstance(candidate, Unavailable):
            if isinstance(self.checks, BackendStage):  # a 16-bit engine no one can run here
                self.checks.recover(flow, None)
            flow.record(StageParity.skipped(self.checks.kind, ref.name if ref else "?",
                                            candidate.candidate, candidate.reason))
            return
        if ref is None:
            flow.reference = candidate
            return
        result = self._compare(flow, ref, candidate, flow.feeds)
        if not result and not result.run_failure:  # the stage's own precision: a rounding floor
            retry = self.checks.recover(flow, candidate)  # (16-bit, or the source's float32)
            if retry is not None:
                candidate = retry
                result = self._compare(flow, ref, candidate, flow.feeds)
        # other inputs may exercise a degenerate reference; a random one stays random
        degenerate = result.cut_ties or any(o.weak and not o.unstable for o in result.outputs)
        if result and degenerate and not flow.redrawn:
            result = self._redraw(flow, ref, candidate, result)
        if not result and flow.settings.locate and not result.run_failure:
            flow.divergence = locate_failure(self.checks, flow, result, candidate)
        if result:
            self._generate(flow, ref, candidate, result)
        flow.record(result)
        flow.reference = candidate

    def _generate(self, flow: Flow, ref: Runner, candidate: Runner, result: StageParity) -> None:
        """A decoder's tokens: greedy generation on both sides (``unframe.validate.generate``)."""
        from unframe.validate.generate import DecoderSignature, compare_generation

        graph = flow.model.graph if flow.model is not None else None
        if graph is None:
            return
        inputs = [v for v in graph.inputs if v.name not in graph.initializers]
        sig = DecoderSignature.of([v.name for v in inputs], [v.name for v in graph.outputs])
        logits = next((o for o in result.outputs if sig is not None and o.name == sig.logits), None)
        if sig is None or logits is None:
            return
        ids = next(v for v in inputs if v.name == "input_ids")
        if ids.shape is None or len(ids.shape) != 2 or isinstance(ids.shape[1], int):
            note = ("greedy-token parity skipped: input_ids has a fixed sequence length (export "
                    "with --kv-cache, or --dynamic input_ids:1 --dynamic attention_mask:1)")
            if note not in flow.notes:
                flow.notes.append(note)
            return
        result.generation = compare_generation(ref, candidate, sig, flow.feeds[0],
                                               self.checks.decode_steps(flow),
                                               Tolerance(logits.atol, logits.rtol, logits.of_scale))
        if not result.generation:
            result.status = FAILED
            result.reason = f"greedy generation: {result.generation.reason}"

    def _compare(self, flow: Flow, ref: Runner, candidate: Runner, feeds: list[dict[str, Any]]
                 ) -> StageParity:
        from unframe.validate.inputs import drawn_from

        s = flow.settings
        with limits.time_limit(s.parity_seconds, f"the {self.checks.kind} parity check ({self.tool})"):
            try:
                result = compare(ref, candidate, feeds, s.atol, s.rtol, stage=self.checks.kind,
                                 unstable=flow.unstable, drawn_from=drawn_from(feeds),
                                 **self.checks.compare_options(flow))
            except (UnframeError, KeyboardInterrupt):
                raise
            except Exception as exc:  # a backend's runner (not Deferred) refusing its artifact
                raise ConversionError(f"the {self.checks.kind} stage's artifact can't be run for parity "
                                      f"({type(exc).__name__}: {io.first_line(exc)})",
                                      "report it with --debug output; --no-validate converts "
                                      "without running it") from exc
        self._keep(flow, feeds, result)
        return result

    def _keep(self, flow: Flow, feeds: list[dict[str, Any]], result: StageParity) -> None:
        """What a comparison learnt about the source, for the later stages: outputs it doesn't
        reproduce (random ops), and feeds unframe drew that it can't run (dropped, with a note)."""
        if result.unstable:
            new = [n for n in result.unstable if n not in flow.unstable]
            flow.unstable.update(result.unstable)
            if new:
                flow.notes.append(f"{self.checks.kind} parity: output(s) {', '.join(map(repr, new))} change "
                                  "between two runs of the reference on the same input (random ops): "
                                  "their shapes and dtypes are compared, not their values")
        if result.dropped and feeds is flow.feeds:
            from unframe.validate.inputs import DrawnFeeds

            kept = [f for i, f in enumerate(feeds) if i not in result.dropped]
            flow._feeds = DrawnFeeds(kept, len(kept)) if isinstance(feeds, DrawnFeeds) else kept
            result.feeds_note = result.dropped_note
            flow.notes.append(f"{self.checks.kind} parity: {result.dropped_note}")

    def _redraw(self, flow: Flow, ref: Runner, candidate: Runner, weak: StageParity) -> StageParity:
        """The reference proved nothing on these feeds: try feeds that exercise the model (once
        per route); keep them for the later stages when they do."""
        from unframe.validate.inputs import alternative_feeds

        flow.redrawn = True
        for label, feeds in alternative_feeds(flow.model, flow.feeds):
            try:
                trial = self._compare(flow, ref, candidate, feeds)
            except Exception:  # noqa: BLE001 - a runtime that refuses these feeds: try the next
                continue
            if not trial or len(trial.weak) < len(weak.weak):
                trial.feeds_note = f"the first inputs gave a degenerate reference; drew {label}"
                flow.notes.append(f"{self.checks.kind} parity: {trial.feeds_note}")
                flow._feeds = feeds
                return trial
        return weak


def locate_failure(stage: Stage, flow: Flow, failed: StageParity, candidate: Runner | None = None) -> Any:
    """Run the divergence locator for a failed stage, within its time cap. Never raises: a locator
    that can't run says why in the Divergence (None when the stage offers nothing to look into)."""
    from unframe.locate import Divergence, locate
    from unframe.locate.locator import stage_tolerance

    try:
        plan = stage.locate_plan(flow, stage_tolerance(failed), candidate)
    except Exception as exc:  # a tap that can't be built here: the parity failure still stands
        return Divergence(stage.kind, status="unavailable",
                          reason=f"could not look inside the stage: {type(exc).__name__}: {exc}")
    if plan is None:
        return Divergence(stage.kind, status="unavailable",
                          reason=f"nothing can look inside the {stage.kind} stage here")
    return locate(plan, flow.feeds, stage=stage.kind, out_dir=debug_dir(flow, stage.kind),
                  seconds=flow.settings.locate_seconds)


def source_namer(flow: Flow) -> Callable[[Any], str]:
    """node -> where in the user's model it comes from (``unframe.locate.taps.source_namer``)."""
    from unframe.locate.taps import source_namer as namer

    return namer(flow.frontend, flow.native)


# backend options that name the model's own inputs or outputs (not a cut's)
INPUT_BOUND_OPTIONS = frozenset({"sample_shapes", "shapes", "dims", "enumerated", "image_input",
                                 "class_labels", "scale", "bias", "color_layout"})


def debug_dir(flow: Flow, stage_kind: str) -> Path:
    """The locator's folder: the one asked for, else beside the output (``m.onnx.debug/``), else a
    new temporary folder (a Python call without an output)."""
    if flow.settings.debug_dir is not None:
        folder = Path(flow.settings.debug_dir) / stage_kind
    elif flow.output is not None:
        folder = flow.output.parent / f"{flow.output.name}.debug" / stage_kind
    else:
        folder = Path(tempfile.mkdtemp(prefix="unframe-debug-")) / stage_kind
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class WriteStage(Stage):
    """Stamps provenance and places the artifact by rename from a staging folder beside it."""

    kind = "write"

    def __init__(self, backend: Backend, output: Path) -> None:
        super().__init__(f"{backend.name} backend", str(output))
        self.backend = backend
        self.output = output

    def run(self, flow: Flow) -> None:
        write_artifact(flow, self.backend, self.output, force=flow.settings.force)


class StampStage(Stage):
    """Records provenance in the artifact: ONNX metadata_props, CoreML user metadata, or the
    TensorRT sidecar. ``route_names`` is filled in by the planner once the branch is complete."""

    kind = "stamp"

    def __init__(self, backend: Backend) -> None:
        super().__init__("provenance", "source sha256, route, tool versions, opset path, parity")
        self.backend = backend
        self.route_names: list[str] = []

    def run(self, flow: Flow) -> None:
        self.backend.stamp(flow.artifact, provenance(flow, self.route_names, self.backend))


def write_artifact(flow: Flow, backend: Backend, output: Path, *, force: bool) -> list[Path]:
    parent = output.parent if str(output.parent) else Path(".")
    stage_dir = Path(tempfile.mkdtemp(prefix=".unframe-tmp-", dir=parent))
    try:
        written = backend.write(flow.artifact, stage_dir / output.name)
        protect = (flow.source,) if isinstance(flow.source, Path) else ()
        flow.written = io.place(written, parent, force=force, protect=protect)
    finally:
        shutil.rmtree(stage_dir, ignore_errors=True)
    flow.artifact.path = output
    backend.placed(flow.artifact, flow.written)
    return flow.written


# ------------------------------------------------------------------------ provenance ---------
def provenance(flow: Flow, route_names: list[str], backend: Backend) -> dict[str, str]:
    """One provenance record, the same for every artifact kind and for the zoo."""
    fe, export = flow.frontend, flow.export
    tools = {"unframe": dist_version("unframe"), "onnx": dist_version("onnx"),
             "onnx-ir": dist_version("onnx-ir"), "onnxruntime": dist_version("onnxruntime")}
    tools.update(fe.versions())
    tools.update(backend.versions())
    if export is not None:
        tools.update(export.tool_versions)
    if isinstance(flow.source, Path):
        source, digest = str(flow.source), io.sha256_of(flow.source)
    else:
        source, digest = f"python object: {fe.describe(flow.native)}", ""
    return {
        "version": dist_version("unframe") or "?",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": source,
        "source_sha256": digest,
        "route": json.dumps(route_names),
        "exporter": export.tool if export else "",
        "export_route": export.route if export else "",
        "notes": json.dumps(flow.notes),
        "tools": json.dumps({k: v or "not installed" for k, v in tools.items()}, sort_keys=True),
        # the opsets the graph actually had, ending with the one handed to the backend
        "opset_path": json.dumps([str(o) for o in _dedupe(flow.opset_path)]),
        "parity": json.dumps(parity_summary(flow.report)),
    }


def _dedupe(path: list[int]) -> list[int]:
    return [p for i, p in enumerate(path) if i == 0 or p != path[i - 1]]


def parity_summary(report: ParityReport) -> dict[str, Any]:
    return {"passed": bool(report), "stages": [
        {"stage": s.stage, "status": s.status, "reference": s.reference, "candidate": s.candidate,
         "max_abs": s.max_abs, "max_rel": s.max_rel, "scale": s.scale, "cases": s.cases,
         "reason": s.reason, **({"generation": s.generation.summary()} if s.generation else {})}
        for s in report.stages]}


# ------------------------------------------------------------------------ the loop -----------
class Observer:
    """Told when each stage starts and ends (the CLI shows a spinner; the default is silent)."""

    @contextmanager
    def stage(self, stage: Stage) -> Iterator[None]:
        yield


@contextmanager
def running(flow: Flow) -> Iterator[Flow]:
    """One run of a route over ``flow``: what its stages hold (a live model's guard) is released
    when it ends, after a success, an error or a KeyboardInterrupt."""
    try:
        yield flow
    finally:
        flow.release()


@contextmanager
def limited(settings: Settings) -> Iterator[None]:
    """The memory budget of a whole route (``--max-memory``), around everything that allocates
    from a model's numbers: stages, and the feeds drawn between them."""
    budget = settings.options.get("max_memory")
    with limits.memory_budget(limits.parse_size(budget) if budget is not None else None):
        yield


def run_stages(stages: list[Stage], flow: Flow, observer: Observer) -> None:
    with limited(flow.settings):
        for stage in stages:
            _run_stage(stage, flow, observer)


def _run_stage(stage: Stage, flow: Flow, observer: Observer) -> None:
    started = time.perf_counter()
    with observer.stage(stage):
        stage.run(flow)
    elapsed = time.perf_counter() - started
    if stage.kind == "parity":
        key = f"parity:{stage.checks.kind}"
    else:
        key, checked = stage.kind, min(stage.checked_seconds(flow), elapsed)
        if checked > 0:
            flow.timings[f"parity:{key}"] = flow.timings.get(f"parity:{key}", 0.0) + checked
            elapsed -= checked
    flow.timings[key] = flow.timings.get(key, 0.0) + elapsed

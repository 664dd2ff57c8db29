"""The request and the state in flight: ``Settings`` (what the caller asked that any stage may
read), ``Flow`` (one route's model, runners, feeds, report and notes as the stages hand them on),
and the loop that runs a list of stages over one flow (``run_stages``, under the route's memory
budget), telling an ``Observer`` as each starts and ends.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unframe import limits, timing
from unframe.converters.base import Artifact, ConvertOptions, ExportResult, Frontend, InputSpec
from unframe.errors import ParityError
from unframe.validate.compare import ParityReport, StageParity
from unframe.validate.deferred import Deferred
from unframe.validate.runner import Runner

if TYPE_CHECKING:
    import onnx_ir as ir

    from unframe.pipeline.stages import Stage


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


# ------------------------------------------------------------------------ a runner not here ---
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
    split: dict[str, dict[str, Any]] = field(default_factory=dict)  # timings: tools' vs unframe's
    notes: list[str] = field(default_factory=list)
    _feeds: list[dict[str, Any]] | None = None
    redrawn: bool = False  # other feeds were tried once for a degenerate reference
    unstable: set[str] = field(default_factory=set)  # outputs the reference doesn't reproduce (random ops)
    before: ir.Model | None = None  # the graph as it was before the opset stage (for the locator)
    output: Path | None = None  # where this branch writes (the locator's folder goes beside it)
    divergence: Any = None  # what the locator found when a parity stage failed
    kept: Any = None  # the folder of a result's weights (io.snapshot_weights): lives with the result
    # What the branches of one run share, made once on first use (a direct route's Prepared)
    shared: dict[str, Any] = field(default_factory=dict)
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
        report, artifact and written files; the prefix's reference runner and feeds are shared.
        A prefix without a graph (direct branches only: nothing was exported) pins nothing, nor
        does the fork of a single branch: its stages pin the runners themselves before they change
        the model (or, for large weights, keep the graph as it was instead: ``OpsetStage``)."""
        if self.model is not None and clone:  # several branches: the others keep the prefix's
            self.pin_runners()
        model = self.model.clone() if clone and self.model is not None else self.model
        return Flow(self.settings, self.source, self.frontend, native=self.native, export=self.export,
                    model=model, opset_path=list(self.opset_path),
                    report=ParityReport(list(self.report.stages)), reference=self.reference,
                    timings=dict(self.timings), split=dict(self.split), notes=list(self.notes),
                    _feeds=self._feeds,
                    unstable=set(self.unstable), shared=self.shared)

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


def in_parity_time(flow: Flow, what: str, compute: Callable[[], Any]) -> Any:
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


# ------------------------------------------------------------------------ the loop ---------
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
    """Runs one stage and times it: ``flow.timings`` by stage (what a stage spent checking its
    own numbers timed as that stage's parity), ``flow.split`` the same seconds told apart into
    the wrapped tools' own and unframe's (``unframe.timing``)."""
    started = time.perf_counter()
    with timing.stage_clock() as clock, observer.stage(stage):
        stage.run(flow)
    elapsed = time.perf_counter() - started
    if stage.kind == "parity":
        key = f"parity:{stage.checks.kind}"
    else:
        key, checked = stage.kind, min(stage.checked_seconds(flow), elapsed)
        if checked > 0:
            flow.timings[f"parity:{key}"] = flow.timings.get(f"parity:{key}", 0.0) + checked
            _add_split(flow, f"parity:{key}", checked, clock.check)
            elapsed -= checked
    flow.timings[key] = flow.timings.get(key, 0.0) + elapsed
    _add_split(flow, key, elapsed, clock.work)


def _add_split(flow: Flow, key: str, seconds: float, bucket: timing.Bucket) -> None:
    part = timing.split(seconds, bucket)
    if key in flow.split:  # a stage kind run twice on one branch (two parity checks of one kind)
        old = flow.split[key]
        tools = dict(old["tools"])
        for name, value in part["tools"].items():
            tools[name] = round(tools.get(name, 0.0) + value, 4)
        part = {"seconds": round(old["seconds"] + part["seconds"], 4), "tools": tools,
                "unframe": round(old["unframe"] + part["unframe"], 4)}
    flow.split[key] = part

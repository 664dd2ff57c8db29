"""The work stages before the backend: ``Stage`` (what every stage offers: ``run``, and for the
parity stage after it a runner, compare options, a recovery and a locator plan), then load,
export, opset and the ai.onnx.ml lowering.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from unframe.converters.base import Frontend
from unframe.distributions import dist_version
from unframe.errors import InputError
from unframe.opset import main_opset
from unframe.pipeline.flow import Flow, source_text
from unframe.pipeline.locating import source_namer
from unframe.validate.deferred import Deferred, graph_fingerprint, onnx_runner_of
from unframe.validate.runner import Runner

if TYPE_CHECKING:
    import onnx_ir as ir


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

    def reused_parity(self, flow: Flow, reference: Runner, candidate: Runner) -> Any:
        """A comparison of these runners on ``flow.feeds`` the stage already made itself, with
        the options the parity stage would use (a ``StageParity``); None: compare (the default)."""
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
            flow.candidate = candidate = onnx_runner_of(flow.model, "the exported ONNX graph")
            fingerprint, runs = flow.export.extra.pop("onnx_runs", (None, []))
            if runs and fingerprint == graph_fingerprint(flow.model):  # the frontend's own check
                for feed, outputs, name in runs:
                    candidate.remember(feed, outputs, name)

    def checked_seconds(self, flow: Flow) -> float:
        return flow.export.check_seconds if flow.export is not None else 0.0

    def compare_options(self, flow: Flow) -> dict[str, Any]:
        return {**super().compare_options(flow), **float32_floors(self._noise, flow)}

    def reused_parity(self, flow: Flow, reference: Runner, candidate: Runner) -> Any:
        """The frontend's own check compared the source with onnxruntime on the parity feeds, at
        the export's tolerances (the TF frontend: ``extra["self_check"]``): a comparison that
        passed stands for the parity stage's while nothing it depends on changed (the graph, the
        feeds, no --atol/--rtol, no exact outputs). A 17M-element output was compared twice."""
        export = flow.export
        found = export.extra.pop("self_check", None) if export is not None else None
        if found is None:
            return None
        fingerprint, result = found
        s = flow.settings
        if (not result or fingerprint != graph_fingerprint(flow.model) or flow.feeds is not export.feeds
                or s.atol is not None or s.rtol is not None or export.exact_outputs or flow.unstable):
            return None
        result.reference, result.candidate = reference.name, candidate.name
        return result

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


def float32_floors(noise: tuple[Any, Any, str] | None, flow: Flow) -> dict[str, Any]:
    """The compare options a measured float32 error of the source gives (``noise``: the feeds it
    was measured on, the ``RoundingError``, the precise runner's name), when it was measured on
    the feeds being compared."""
    measured = noise[1] if noise is not None and noise[0] is flow.feeds else None
    if measured is None:
        return {}
    return {"floors": {n: measured.allowance(n) for n in measured.errors},
            "floor_origin": f"the source's own float32 error ({noise[2]})"}


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

        shared = self._shares_weights(flow)
        if shared:
            _ = flow.feeds  # drawn from the graph as it is, before it changes
        else:
            flow.pin_runners()
        before = model.clone() if flow.validate and (shared or flow.settings.locate) else None
        if flow.settings.locate:
            flow.before = before  # O(nodes); tensors are shared, never copied
        flow.conversion = version_converter.convert_opset(
            model, self.target, ml_target=self.ml_target if move_ml else None)  # raises with every blocker
        flow.opset_path.append(self.target)
        if not flow.validate:
            return
        if shared and before is not None:
            self._shared_parity(flow, before)
        else:
            flow.candidate = onnx_runner_of(model)

    @staticmethod
    def _shares_weights(flow: Flow) -> bool:
        """A model of large weights whose reference hasn't loaded them yet: parity runs the
        graph before once and the converted nodes alone (``validate.shared``)."""
        from unframe import io
        from unframe.validate.shared import LARGE_WEIGHTS

        ref = flow.reference
        return (flow.validate and isinstance(ref, Deferred) and not ref.pinned
                and io.tensor_bytes(flow.model) >= LARGE_WEIGHTS)

    @staticmethod
    def _shared_parity(flow: Flow, before: ir.Model) -> None:
        from unframe.validate.shared import SharedParity, cut

        plan = cut(before, flow.model)
        ref = flow.reference
        parity = SharedParity(before, flow.model, plan, flow.feeds, what=getattr(ref, "what", "the source model"),
                              failure=getattr(ref, "failure", InputError))
        flow.reference, flow.candidate = parity.reference, parity.candidate
        flow.notes.append(f"opset parity on large weights, loaded once: {plan.describe()}")

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

"""The backend stage: pre-flight, convert, offer the artifact's runner, and after a failed parity
measure what 16-bit rounding allows (keeping the nodes responsible in float32 and converting
again where rounding alone goes too far).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unframe.converters.base import AS_DEPLOYED, Backend, RunnerUnavailable, Target
from unframe.errors import UnsupportedError
from unframe.pipeline.flow import Flow, Unavailable, in_parity_time
from unframe.pipeline.locating import INPUT_BOUND_OPTIONS, source_namer
from unframe.pipeline.stages import Stage
from unframe.validate.runner import Runner


class BackendStage(Stage):
    kind = "backend"

    def __init__(self, backend: Backend, target: Target, output: Path | None) -> None:
        suffixes = ", ".join(backend.suffixes)
        super().__init__(f"{backend.name} backend", f"build {suffixes}", backend.versions())
        self.backend = backend
        self.target = target
        self.output = output
        self._rounding: tuple[Any, Any] | None = None  # (feeds, RoundingError) of the last parity
        self._full = False  # converted again at full precision (Backend.full_precision)

    def run(self, flow: Flow) -> None:
        be, tgt = self.backend, self.target
        if "sample_shapes" in be.option_names and "sample_shapes" not in tgt.options:
            shapes = _sample_shapes(flow)
            if shapes:
                tgt.options["sample_shapes"] = shapes
        from unframe.pipeline.quantize import quant_request

        quant_request(flow, be, tgt, flow.feeds[0] if wanted_quant(flow) else {})
        blockers = be.preflight(flow.model, tgt)
        if blockers:
            raise UnsupportedError(f"the {be.name} backend can't take this model: {len(blockers)} "
                                   "blocker(s)", "see the list; `unframe check` shows them without "
                                   "converting", blockers=blockers)
        compared = be.changes_compute(tgt) or wanted_quant(flow)  # checked against the graph
        if compared:
            flow.pin_runners()
        self._convert(flow)

    def _convert(self, flow: Flow) -> None:
        be, tgt = self.backend, self.target
        near = self.output.parent if self.output is not None else None
        flow.artifact = be.convert(flow.model, tgt, flow.work_dir(near))
        if flow.validate and (be.changes_compute(tgt) or tgt.get("quantize")):
            offer_runner(flow, be, tgt)

    def float_runner(self, flow: Flow) -> Runner:
        """The artifact built again without ``--quantize`` (same target otherwise), in a folder
        of its own, and its runner: the float side of the accuracy guard's latency."""
        be, tgt = self.backend, unquantized(self.target)
        near = self.output.parent if self.output is not None else None
        folder = flow.work_dir(near) / "float-for-latency"
        folder.mkdir(exist_ok=True)
        built = self._build(flow, tgt, folder)
        # run as the quantized artifact is: with its runtime's defaults, as deployed
        return be.runner(built, Target(tgt.name, tgt.opset, {**tgt.options, AS_DEPLOYED: True}))

    def deployed_runner(self, flow: Flow) -> Runner:
        """The artifact's runner as deployed (``AS_DEPLOYED``), in this process: the quantized
        side of the latency timing where the guard ran it apart (``Backend.times_apart``)."""
        tgt = self.target
        return self.backend.runner(flow.artifact, Target(tgt.name, tgt.opset, {**tgt.options, AS_DEPLOYED: True}))

    def _build(self, flow: Flow, target: Target, folder: Path) -> Any:
        return self.backend.convert(flow.model, target, folder)

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
        """After this stage's parity failed: the 16-bit rounding floor and the nodes kept in
        float32 (``recover_rounding``); when that is spent or there is none, the artifact at the
        full precision the runtime's default reduced (``recover_full_precision``)."""
        runner = self.recover_rounding(flow, candidate)
        return runner if runner is not None else self.recover_full_precision(flow)

    def recover_full_precision(self, flow: Flow) -> Runner | None:
        """Convert again with the target the backend offers at full precision (OpenVINO: fp32
        weights where fp16 was only its default), said in a note; None when there is none, or it
        was done. The new artifact is held to full precision's tolerance (no 16-bit floor)."""
        if self._full or flow.artifact is None:
            return None
        found = self.backend.full_precision(self.target)
        if found is None:
            return None
        self._full = True
        self.target, why = found
        self._rounding = None
        flow.notes.append(why)
        self._convert(flow)
        runner, flow.candidate = flow.candidate, None
        return runner if isinstance(runner, Runner) else None

    def recover_rounding(self, flow: Flow, candidate: Runner | None) -> Runner | None:
        """For a 16-bit artifact, measure what 16-bit rounding
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
        if precision == "fp32" or flow.model is None or self._rounding is not None or self._full:
            return None  # a float32 artifact, or already retried
        feeds = flow.feeds
        model = flow.model
        measured = in_parity_time(flow, "measuring what 16-bit rounding moves the outputs by",
                                   lambda: rounding_error(model, feeds, precision))
        self._rounding = (feeds, measured)
        if measured is None:
            return None
        runner = candidate
        if any(n in measured.nonfinite or WIDEN * e > MAX_SHARE * measured.scales[n]
               for n, e in measured.errors.items()):
            plan = in_parity_time(flow, "planning which nodes to keep in float32", lambda: plan_keep_fp32(
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


def offer_runner(flow: Flow, be: Backend, target: Target) -> None:
    """The artifact's runner for the parity stage after a backend stage, or why this machine
    can't run it (the parity stage then records itself skipped)."""
    try:
        flow.candidate = be.runner(flow.artifact, target)
    except RunnerUnavailable as why:
        flow.candidate = Unavailable(be.name, str(why))


def unquantized(target: Target) -> Target:
    return Target(target.name, target.opset, {k: v for k, v in target.options.items() if k != "quantize"})


def wanted_quant(flow: Flow) -> bool:
    return bool(flow.settings.options.get("quantize"))


def _sample_shapes(flow: Flow) -> dict[str, tuple[int, ...]] | None:
    feeds = flow.export.feeds if flow.export is not None and flow.export.feeds else None
    if feeds is None:
        try:
            feeds = flow.feeds
        except Exception:  # inputs no feed can be drawn for (sequences): the backend decides
            return None
    return {k: tuple(v.shape) for k, v in feeds[0].items()}

"""The parity stage: the runner the stage before offered against the last checked one.

A failed comparison first asks the stage it checks to recover (a rounding floor measured, the
artifact converted again), redraws feeds once for a degenerate reference, and on a failure that
stands runs the divergence locator (``locating.py``) before recording the stage.
"""

from __future__ import annotations

from typing import Any

from unframe import io, limits
from unframe.distributions import dist_version
from unframe.errors import ConversionError, UnframeError
from unframe.pipeline.backend import BackendStage
from unframe.pipeline.flow import Flow, Unavailable
from unframe.pipeline.locating import locate_failure
from unframe.pipeline.stages import Stage
from unframe.validate.compare import FAILED, StageParity, compare
from unframe.validate.runner import Runner
from unframe.validate.tolerances import Tolerance

RECOVERIES = 2  # a stage's recover() is asked again after a retry that still fails


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
        result = self.checks.reused_parity(flow, ref, candidate) or self._compare(flow, ref, candidate, flow.feeds)
        result, candidate = self._recovered(flow, ref, candidate, result)
        # other inputs may exercise a degenerate reference; a random one stays random
        degenerate = result.cut_ties or any(o.weak and not o.unstable for o in result.outputs)
        if result and degenerate and not flow.redrawn:
            result = self._redraw(flow, ref, candidate, result)
            if not result:  # inputs that exercise the model found what the first ones hid
                result, candidate = self._recovered(flow, ref, candidate, result)
        if not result and flow.settings.locate and not result.run_failure:
            flow.divergence = locate_failure(self.checks, flow, result, candidate)
        if result:
            self._generate(flow, ref, candidate, result)
        flow.record(result)
        flow.reference = candidate

    def _recovered(self, flow: Flow, ref: Runner, candidate: Runner, result: StageParity
                   ) -> tuple[StageParity, Runner]:
        """A failed comparison (not a run failure) handed to the stage's ``recover``: the stage's own
        precision (a rounding floor: 16-bit, or the source's float32), then full precision; each
        retry compared again on the current feeds. The last comparison and its candidate."""
        for _ in range(RECOVERIES):
            if result or result.run_failure:
                break
            retry = self.checks.recover(flow, candidate)
            if retry is None:
                break
            candidate = retry
            result = self._compare(flow, ref, candidate, flow.feeds)
        return result, candidate

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

"""Quantized branches: the request the backend reads, and the accuracy stage that judges the
artifact in place of tolerance parity.

``--quantize SCHEME`` on a branch: before the backend converts, ``quant_request`` builds the
``QuantRequest`` (``unframe.passes.quantize``) from ``--calibration`` (or sets drawn like parity's
feeds), holding out the last fifth; the backend reads it from ``target.options["quantize"]`` and
quantizes with its vendor's tool. ``AccuracyStage`` then runs the accuracy guard
(``unframe.validate.accuracy``) on the held-out sets, the float model (the source, or the float
ONNX graph) against the quantized artifact's own runtime. When it fails, the other quantizers the
backend can use (``Backend.other_quantizers``: NNCF for the ONNX graph, onnxruntime's Q/DQ graph
for OpenVINO) convert in turn, before any layer is kept in float; the first that passes is kept,
else the one that fell least short goes on. When it still fails and the backend keeps
named ONNX nodes in float (``Backend.quantize_excludes``), the sensitivity pass ranks the layers
on the float graph (run on calibration sets, never on the held-out ones the guard judges) and the
branch converts again with the worst one kept in float, then (ranked
again with those kept) 2 and 4 more, never more than half of the weighted layers; what still fails
is exit 5 with the figures, and nothing is written; for a scheme that quantizes activations the
error then says whether the float model itself passes with its inputs merely rounded to int8 steps
(``validate.accuracy.input_floor``): a model that amplifies changes that small explains a failure
no kept layer cured.
"""

from __future__ import annotations

from typing import Any

from unframe.converters.base import Backend, Target
from unframe.errors import Blocker, ParityError, UnframeError, UnsupportedError
from unframe.pipeline.flow import Flow, Unavailable, in_parity_time
from unframe.pipeline.stages import Stage

QUANT = "quantize"  # Flow.shared key: (calibration sets, origin, drawn, held-out sets)
KEEP_FLOAT_STEPS = (1, 2, 4)  # layers added to those kept in float at each try of the sensitivity pass


def wanted(flow: Flow) -> Any:
    """The scheme asked for (``--quantize``), or None."""
    from unframe.passes.quantize import scheme_of

    asked = flow.settings.options.get("quantize")
    return scheme_of(asked) if asked else None


def scheme_blockers(be: Backend, scheme: Any) -> list[Blocker]:
    """A backend that can't hold the scheme: one blocker naming those it can."""
    if scheme is None or scheme.name in be.quantize_schemes:
        return []
    holds = ", ".join(be.quantize_schemes) or "no quantized scheme here"
    return [Blocker("*", f"the {be.name} backend can't hold --quantize {scheme.name}",
                    hint=f"it holds: {holds}")]


def quant_request(flow: Flow, be: Backend, target: Target, like: dict[str, Any]) -> None:
    """Put the ``QuantRequest`` in ``target.options["quantize"]`` (calibration drawn or loaded
    once per run, shared by the branches), or refuse a scheme the backend can't hold."""
    from unframe.passes.quantize import QuantRequest
    from unframe.passes.quantize.calibration import calibration_sets, split

    scheme = wanted(flow)
    if scheme is None:
        return
    blockers = scheme_blockers(be, scheme)
    if blockers:
        raise UnsupportedError(f"the {be.name} backend can't hold --quantize {scheme.name}",
                               blockers[0].hint, blockers=blockers)
    if QUANT not in flow.shared:
        sets, origin, drawn = calibration_sets(flow.settings.options.get("calibration"), like)
        calibration, held_out = split(sets)
        flow.shared[QUANT] = (calibration, f"{len(calibration)} of {origin}", drawn, held_out)
        if drawn and scheme.calibrated:
            flow.notes.append("quantize: no --calibration given: calibrated on inputs unframe drew at "
                              "random, so the accuracy figures prove little; pass real inputs")
        elif drawn:  # weight-only or dynamic: nothing calibrated, but the guard judges on these sets
            flow.notes.append("quantize: no --calibration given: the accuracy guard ran on inputs unframe "
                              "drew at random, so its figures prove little; pass real inputs")
    calibration, origin, drawn, _ = flow.shared[QUANT]
    previous = target.options.get("quantize")
    exclude = previous.exclude if isinstance(previous, QuantRequest) else ()
    target.options["quantize"] = QuantRequest(scheme, calibration if scheme.calibrated else [],
                                              origin if scheme.calibrated else "", drawn, exclude)


class AccuracyStage(Stage):
    """The accuracy guard after a quantizing backend stage (see the module's doc)."""

    kind = "parity"

    def __init__(self, checks: Any, reference: str, candidate: str) -> None:
        super().__init__(f"{reference} vs {candidate}", "quantized artifact vs float model, held-out inputs")
        self.checks = checks  # the backend (or direct) stage

    def run(self, flow: Flow) -> None:
        from unframe.passes.quantize import parse_accuracy
        from unframe.validate.accuracy import guard, input_floor
        from unframe.validate.compare import StageParity

        candidate, flow.candidate = flow.candidate, None
        request = self.checks.target.get("quantize")
        ref = flow.reference
        if candidate is None or request is None or ref is None:
            return
        judged = _predicted(flow, candidate)
        if judged is None:
            flow.record(StageParity.skipped("accuracy", ref.name, candidate.candidate, candidate.reason))
            return
        predicted, candidate = judged is not candidate, judged
        thresholds = parse_accuracy(flow.settings.options.get("accuracy"))
        held_out = flow.shared[QUANT][3]
        check = guard(ref, candidate, held_out, thresholds, scheme=request.scheme.name)
        rounds = 1
        skipped = floor = ""
        others: list[str] = []
        stale = False  # the artifact converted last is not the one judged best
        if not check:
            check, candidate, tries, stale, others = self._other_quantizers(
                flow, request, ref, (check, candidate), held_out, thresholds)
            rounds += tries
        if not check and self._can_keep_float(flow):
            skipped = _sensitivity_room(flow.model)
        if not check and self._can_keep_float(flow) and not skipped:
            most = _keepable(flow.model)
            ranking = _ranking_sets(flow)
            for step in KEEP_FLOAT_STEPS:  # greedy: ranked again with what is kept so far
                room = most - len(request.exclude)
                ranked = in_parity_time(flow, "ranking the layers by what quantization costs them",
                                        lambda: _rank(flow.model, request, ranking)) if room > 0 else None
                if isinstance(ranked, str):  # the quantized graph can't run the ranking sets
                    skipped = f"the sensitivity pass stopped: {ranked}"
                    break
                if not ranked:
                    break
                request.exclude = (*request.exclude, *ranked[:min(step, room)])
                self.checks._convert(flow)
                stale = False
                candidate, flow.candidate = _predicted(flow, flow.candidate), None
                rounds += 1
                check = guard(ref, candidate, held_out, thresholds, scheme=request.scheme.name)
                if check:
                    break
        if not check and stale:  # the report's sizes and layers are those of the artifact judged best
            self.checks._convert(flow)
            flow.candidate = None
        if not check and request.scheme.activations != "float":
            floor = in_parity_time(flow, "the float model on int8-rounded inputs",
                                   lambda: input_floor(ref, held_out, thresholds))
        check.calibration = request.origin
        check.quantizer = request.quantizer
        check.others = others
        check.kept_float = list(request.exclude)
        check.rounds = rounds
        check.floor = floor
        check.predicted = "onnxruntime on the Q/DQ graph" if predicted else ""
        check.size = _sizes(flow)
        check.layers, check.layers_source = _layers(flow, request, self.checks.backend.name)
        if predicted:
            check.latency_note = "the artifact can't run here"
        elif check:
            check.latency, check.latency_note = _latency(flow, self.checks, candidate, held_out[0])
        flow.report.add(check)
        if not check:
            kept = (f"; still after {rounds} conversions keeping {len(request.exclude)} layer(s) in float "
                    "(the sensitivity pass)") if rounds > 1 else ""
            raise ParityError(f"the quantized artifact fails the accuracy guard ({check.reason})"
                              + kept + (f"; {skipped}" if skipped else "") + (f"; {floor}" if floor else ""),
                              "nothing was written; calibrate on real inputs (--calibration), relax "
                              "--accuracy, or use a milder scheme (w8, int8-dynamic)", report=flow.report)
        flow.notes.append(f"quantize: {request.describe()}")
        if predicted:
            flow.notes.append(f"quantize: the accuracy guard ran {candidate.name}: a prediction, "
                              "the artifact itself was not run")
        flow.reference = candidate

    def _other_quantizers(self, flow: Flow, request: Any, ref: Any, first: tuple[Any, Any], held_out: Any,
                          thresholds: Any) -> tuple[Any, Any, int, bool, list[str]]:
        """The backend's own quantizer failed the guard: each other it can use for the scheme
        (``Backend.other_quantizers``, where importable; only on routes through ONNX, whose
        graph they quantize) converts in turn, until one passes. Returns the check and runner
        of the one that passed, else of the one that fell least short (``shortfall``; the
        request names it, for the sensitivity pass to go on with), the conversions made,
        whether the last one converted is not that one, and why each other failed."""
        import importlib.util

        from unframe.validate.accuracy import guard, shortfall

        names = [name for name, schemes in self.checks.backend.other_quantizers.items()
                 if request.scheme.name in schemes and importlib.util.find_spec(name) is not None]
        if flow.model is None or not names:
            return (*first, 0, False, [])
        own = request.quantizer
        judged = [(own, *first)]
        for name in names:
            request.quantizer = name
            try:
                self.checks._convert(flow)
            except Exception as exc:  # noqa: BLE001 - that quantizer can't make this model: the others stand
                judged.append((name, _failed_conversion(first[0], exc), None))
                continue
            candidate, flow.candidate = _predicted(flow, flow.candidate), None
            check = guard(ref, candidate, held_out, thresholds, scheme=request.scheme.name)
            judged.append((name, check, candidate))
            if check:
                break
        best = min(range(len(judged)), key=lambda i: shortfall(judged[i][1], thresholds))
        name, check, candidate = judged[best]
        request.quantizer = name
        failed = [f"{n or 'its own quantizer'}: {c.reason[:200]}" for i, (n, c, _) in enumerate(judged)
                  if i != best and not c]
        converted = [j for j in judged if j[2] is not None or j[0] == own]
        return check, candidate, len(judged) - 1, judged[best] is not converted[-1], failed

    def _can_keep_float(self, flow: Flow) -> bool:
        return flow.model is not None and self.checks.backend.quantize_excludes

    def describe(self) -> str:
        return super().describe().replace("parity  ", "accuracy")


def _failed_conversion(like: Any, exc: Exception) -> Any:
    """A failed check standing for a quantizer that could not convert the model."""
    from dataclasses import replace

    from unframe.validate.compare import FAILED

    text = exc.message if isinstance(exc, UnframeError) else f"{type(exc).__name__}: {exc}"
    failed = replace(like, status=FAILED, reason=f"it could not convert the model ({' '.join(text.split())[:160]})")
    failed.run_failure = failed.reason
    return failed


def _predicted(flow: Flow, candidate: Any) -> Any:
    """The runner to judge: the artifact's own; or, where this machine can't run the artifact (a
    TensorRT engine without a GPU) and its backend left the quantized ONNX graph it was built
    from (``artifact.metadata["qdq_model"]``), onnxruntime on that graph, named as a prediction;
    None when there is neither (the stage is then skipped)."""
    import onnx_ir as ir

    if not isinstance(candidate, Unavailable):
        return candidate
    graph = flow.artifact.metadata.get("qdq_model") if flow.artifact is not None else None
    if not isinstance(graph, ir.Model):
        return None
    from unframe.validate.onnxruntime import onnx_runner

    runner = onnx_runner(graph)
    runner.name = (f"{runner.name} on the Q/DQ graph the {candidate.candidate} artifact was built "
                   f"from (predicted; the artifact can't run here: {candidate.reason})")
    return runner


# The sensitivity pass holds many copies of the weights at once: the float graph and the quantized
# one in onnxruntime, each serialized, and the quantized graph's run dequantizing its weights with
# every weighted layer's output read. Measured on a 1.3 GB one-layer Llama-3.2-1B at w4: 4.8 GB
# before the pass, past 16 GB in the quantized graph's first run (killed at 24 GB).
SENSITIVITY_COPIES = 12


def _sensitivity_room(model: Any) -> str:
    """"" when the sensitivity pass fits the memory budget (``--max-memory``, else a share of what
    is free), else why it is left out: it runs both graphs with every weighted layer's output read
    (a 1B decoder's pass needed more than this machine's 24 GB and was killed)."""
    from unframe import io, limits

    needed = SENSITIVITY_COPIES * io.tensor_bytes(model)
    budget = limits.max_memory()
    if needed <= budget:
        return ""
    return (f"the sensitivity pass was left out: it needs about {limits.human(needed)} (the float and "
            f"the quantized graph running side by side) and the memory budget is {limits.human(budget)} "
            "(--max-memory raises it)")


def _keepable(model: Any) -> int:
    """At most half of the weighted layers are kept in float: beyond that the artifact is no
    longer the quantized model asked for, and the guard's failure should stand."""
    from unframe.passes.quantize.onnx_quant import WEIGHTED

    return sum(1 for n in model.graph if n.op_type in WEIGHTED) // 2


RANKING_SETS = 4  # calibration sets the sensitivity pass runs both graphs on, every output read


def _ranking_sets(flow: Flow) -> list[dict[str, Any]]:
    """The sets the sensitivity pass ranks the layers on: calibration sets, never the held-out
    ones the guard judges (layers chosen to mend the judged sets would pass a guard that the next
    inputs fail: a briefly trained MobileNetV3-Small passed on its 8 held-out sets, cosine 0.998,
    with 3 layers ranked on them, and gave 0.977 on 24 more), spread over the calibration."""
    calibration = flow.shared[QUANT][0]
    if len(calibration) <= RANKING_SETS:
        return list(calibration)
    step = len(calibration) / RANKING_SETS
    return [calibration[int(i * step)] for i in range(RANKING_SETS)]


def _rank(model: Any, request: Any, feeds: list[dict[str, Any]]) -> list[str] | str:
    from dataclasses import replace

    from unframe.passes.quantize import SCHEMES
    from unframe.passes.quantize.sensitivity import rank_layers

    # the ranking quantizes in onnxruntime: static int8 for any calibrated scheme
    proxy = replace(request, scheme=SCHEMES["int8"] if request.scheme.calibrated else request.scheme)
    try:
        return rank_layers(model, proxy, feeds)
    except Exception as exc:  # onnxruntime fails the quantized graph on a held-out set: nothing to rank by
        text = exc.message if isinstance(exc, UnframeError) else " ".join(str(exc).split())
        return f"onnxruntime can't run the quantized graph on the calibration sets ({text[:200]})"


def _layers(flow: Flow, request: Any, backend: str) -> tuple[dict[str, str], str]:
    """Each weighted layer's scheme: as the quantized ONNX graph holds it where the artifact is
    one (or was built from one), else as asked of the backend's quantizer."""
    import onnx_ir as ir

    from unframe.passes.quantize import layers

    artifact = flow.artifact
    graph = artifact.model if artifact is not None and isinstance(artifact.model, ir.Model) else (
        artifact.metadata.get("qdq_model") if artifact is not None else None)
    if isinstance(graph, ir.Model):
        return layers.from_graph(graph, request.exclude), "the quantized graph"
    if flow.model is not None:
        return (layers.planned(flow.model, request.scheme, request.exclude),
                f"as asked of the {backend} quantizer, which may leave small layers in float")
    return {}, ""


def _latency(flow: Flow, stage: Any, candidate: Any, feed: dict[str, Any]) -> tuple[Any, str]:
    """The float artifact (built again, same target without --quantize) against the quantized
    one, in the same runtime, alternating (``validate.latency``); or why not. A failure to time
    is a note, never the conversion's failure."""
    from unframe.validate.latency import paired

    why = stage.backend.latency_note
    if why:
        return None, why
    float_runner = timed_runner = None
    try:
        float_runner = in_parity_time(flow, "building the float artifact to time against",
                                      lambda: stage.float_runner(flow))
        if float_runner is None:
            return None, "the float artifact took past the parity time limit"
        if stage.backend.times_apart:  # the guard ran it in a child: timed in-process, as deployed
            timed_runner = candidate = stage.deployed_runner(flow)
        timed = in_parity_time(flow, "timing the float and the quantized artifact",
                               lambda: paired(float_runner, candidate, feed))
        return timed, "" if timed is not None else "past the parity time limit"
    except Exception as exc:  # noqa: BLE001 - a figure left out, said why; the artifact stands
        return None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    finally:
        for runner in (float_runner, timed_runner):
            if runner is not None:
                runner.close()


def _sizes(flow: Flow) -> tuple[int, int] | None:
    import onnx_ir as ir

    artifact = flow.artifact
    given = artifact.metadata.get("quantized_size") if artifact is not None else None
    if given:
        return tuple(given)  # type: ignore[return-value]
    if artifact is not None and isinstance(artifact.model, ir.Model) and flow.model is not None:
        return _weight_bytes(flow.model), _weight_bytes(artifact.model)
    return None


def _weight_bytes(model: Any) -> int:
    """Bytes of the initializers as stored (int4 packed two to a byte)."""
    from unframe import io

    return sum(v.const_value.nbytes for v in io.all_initializers(model) if v.const_value is not None)

"""The TF frontend's ``to_onnx``: resolve inputs, try the routes, edit the graph, make feeds."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from unframe import timing
from unframe.converters.base import ExportResult, InputSpec, Prepared
from unframe.converters.frontends._tf import axes
from unframe.converters.frontends._tf import export as routes
from unframe.converters.frontends._tf.common import telling_line
from unframe.converters.frontends._tf.native import TfModel, unique_names
from unframe.converters.frontends._tf.runners import make_runner
from unframe.converters.frontends._tf.signature import (
    call_specs,
    candidate_axes,
    declared_inputs,
    draw,
    first_feed,
    forced_axes,
    make_feeds,
    resolve_inputs,
)
from unframe.errors import InputError, UnframeError, UsageError
from unframe.validate.onnxruntime import OnnxRuntimeRunner
from unframe.validate.runner import Runner, TensorSpec

Axis = axes.Axis


def export(model: TfModel, spec: InputSpec, opset: int, nchw_option: Any,
           versions: dict[str, str], self_check: bool = True) -> ExportResult:
    """``self_check``: accept a route only when its numbers match TensorFlow on the parity feeds
    (else only when onnxruntime loads it): the caller turns it off when it validates nothing.

    Axes are dynamic only where the source ran with them changed (``axes.py``) and the export
    takes them: when no route exports the dynamic graph, the export is made again with every
    axis as the first feed has it, and a note says why."""
    model.memo = {}  # TF's outputs per feed, shared by the probes and the routes' checks
    try:
        return _export_axes(model, spec, opset, nchw_option, versions, self_check)
    finally:
        model.memo = None


def _export_axes(model: TfModel, spec: InputSpec, opset: int, nchw_option: Any,
                 versions: dict[str, str], self_check: bool) -> ExportResult:
    if spec.static:
        inputs = resolve_inputs(model, spec)
        return _export(model, inputs, make_feeds(model, inputs, spec), spec, opset, nchw_option,
                       versions, self_check, [])
    plan = plan_axes(model, spec, self_check, derive=self_check)
    if not plan.dynamic:
        return _export(model, plan.inputs, plan.feeds, spec, opset, nchw_option, versions,
                       self_check, plan.notes)
    try:
        result = _export(model, plan.inputs, plan.feeds, spec, opset, nchw_option, versions,
                         self_check, plan.notes)
        if not result.extra.get("parity_failed"):
            return result
        problem = result.extra["parity_failed"]
    except UnframeError as exc:
        problem = exc.message
    fixed = plan.fixed()
    result = _export(model, fixed.inputs, fixed.feeds, spec, opset, nchw_option, versions,
                     self_check, [])
    result.notes.insert(0, f"every axis kept as the samples have it: the export with "
                           f"{plan.describe()} dynamic failed ({problem[:240]})")
    return result


def prepare(model: TfModel, spec: InputSpec) -> Prepared:
    """A direct route's inputs, feeds, output names and TF runner, found as ``export`` finds
    them (an axis dynamic where TensorFlow ran the model with it changed), without exporting.
    The runner keeps the TF outputs of the probe runs (``model.memo``)."""
    model.memo = {}
    if spec.static:
        inputs = resolve_inputs(model, spec)
        feeds, notes = make_feeds(model, inputs, spec), []
    else:
        plan = plan_axes(model, spec, True)
        inputs, feeds, notes = plan.inputs, plan.feeds, list(plan.notes)
    if model.kind == "function":
        if model.fresh is not None:  # no trace of another export's shapes
            model.obj = model.fresh()
        model.outputs = function_outputs(model, inputs)
    outputs = unique_names(list(model.outputs or []))
    runner = make_runner(model, inputs, outputs, memo=model.memo)
    first = feeds[0] if feeds else {}

    def freeze() -> list[TensorSpec]:
        return [TensorSpec(t.name, tuple(first[t.name].shape), t.dtype) if t.name in first else t
                for t in inputs]

    dynamic = any(t.shape is not None and None in t.shape for t in inputs)
    return Prepared(model, inputs, outputs, feeds, notes, runner, freeze=freeze if dynamic and first else None)


def plan_axes(model: TfModel, spec: InputSpec, self_check: bool, derive: bool = False) -> axes.AxesPlan:
    """The first feed, then the dynamic axes: probed on the source when it may run
    (``self_check``); without running it, the axes the signature leaves open (and those asked
    for) are taken as declared.

    ``derive`` (the export, whose per-route check compares onnxruntime with these runs): when the
    first probe only adds rows to the first feed along axis 0, TensorFlow runs the probe alone and
    its outputs' leading rows stand for the first feed's (``derive_first``); one model run fewer
    (a third of TensorFlow's time on a batch-1 sample), checked by the export as any run is."""
    declared = declared_inputs(model, spec)
    first, drawn = first_feed(model, declared, spec)
    plan = axes.AxesPlan(first, axes.first_shapes(first, declared),
                         {t.name: t.dtype for t in declared}, [t.name for t in declared])
    candidates = candidate_axes(model, declared, first)
    forced = forced_axes(spec, declared)
    if not candidates and not forced:
        return plan
    def redraw(shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
        return draw(model, shapes, declared, seed=1)

    if not self_check:
        signed = {t.name for t in model.inputs if t.shape is not None}
        plan.dynamic = list(dict.fromkeys(forced + [a for a in candidates if a[0] in signed]))
        plan.probe = axes.probe_feed(first, plan.dynamic, drawn, redraw) if plan.dynamic else None
        if plan.dynamic:
            plan.notes.append("dynamic axes as the signature declares them (not probed: validation "
                              "is off): " + plan.describe())
        return plan
    runner = make_runner(model, declared, [], memo=model.memo)
    ranks: list[int] = []
    probes: dict[tuple[Axis, ...], dict[str, np.ndarray]] = {}  # one feed object per probe: the memo keys by it
    tried: dict[int, str] = {}  # id(feed) -> its run's problem

    def probe(feed_first: dict[str, np.ndarray], changed: Sequence[Axis], was_drawn: bool,
              again: Any) -> dict[str, np.ndarray]:
        key = tuple(changed)
        if key not in probes:
            probes[key] = axes.probe_feed(feed_first, changed, was_drawn, again)
        return probes[key]

    def runs(feed: dict[str, np.ndarray]) -> str:
        if id(feed) not in tried:
            tried[id(feed)] = _runs(runner, feed, ranks)
        return tried[id(feed)]

    if not (derive and not forced and derive_first(model, runner, first, candidates, drawn, redraw, probe, runs)):
        problem = runs(first)
        if problem:
            _first_feed_fails(model, problem, drawn)
    if forced:
        trial = runs(probe(first, forced, drawn, redraw))
        if trial:
            raise UsageError(f"{model.source} can't run with the axes asked to be dynamic "
                             f"({', '.join(f'{n}[{a}]' for n, a in forced)}) changed: {trial}",
                             "drop --dynamic (or the named dims of --inputs) for those axes")
    plan = axes.choose(plan, candidates, forced, drawn, runs, redraw, probe)
    if derived_note(model):
        plan.notes = [n.replace("TensorFlow ran the model with each size", derived_note(model))
                      for n in plan.notes]
    return plan


DERIVED = "derived"  # the third item of a memo entry whose outputs were cut from a larger run


def derive_first(model: TfModel, runner: Any, first: dict[str, np.ndarray], candidates: Sequence[Axis],
                 drawn: bool, redraw: Any, probe: Any, runs: Any) -> bool:
    """Run the first probe (the first group of candidate axes, as ``axes.choose`` will) before
    the first feed; when it only adds rows along axis 0 (``axes.leading_rows``) and TensorFlow
    runs it, put the leading rows of its outputs in the memo as the first feed's (marked
    ``DERIVED``) and say True: the first feed is not run. Unchecked until the export's per-route
    check compares onnxruntime's outputs on the first feed with them; a model whose rows interact
    fails that, and ``forget_derived`` makes TensorFlow run the first feed after all."""
    group = axes.groups(first, candidates)[:1]
    if not group:
        return False
    try:
        feed = probe(first, group[0], drawn, redraw)
    except (ValueError, IndexError):
        return False
    rows = axes.leading_rows(first, feed, group[0])
    if not rows or runs(feed):
        return False
    key = tuple(sorted((name, id(value)) for name, value in feed.items()))
    size = next(feed[name].shape[0] for name, _ in group[0])
    values = axes.derived_outputs(model.memo[key][1], rows, size) if model.memo and key in model.memo else None
    if values is None:
        return False
    model.memo[tuple(sorted((name, id(value)) for name, value in first.items()))] = (dict(first), values, DERIVED)
    return True


def forget_derived(model: TfModel) -> bool:
    """Drop the memo's derived outputs (``derive_first``), so TensorFlow runs those feeds itself;
    whether there were any."""
    memo = model.memo or {}
    derived = [key for key, entry in memo.items() if len(entry) > 2 and entry[2] == DERIVED]
    for key in derived:
        del memo[key]
    return bool(derived)


def derived_note(model: TfModel) -> str:
    memo = model.memo or {}
    if not any(len(entry) > 2 and entry[2] == DERIVED for entry in memo.values()):
        return ""
    return ("TensorFlow ran the larger size, the first feed being its leading rows (its outputs' leading "
            "rows are the first feed's reference), onnxruntime each size")


def _runs(runner: Any, feed: dict[str, np.ndarray], ranks: list[int]) -> str:
    """"" when the source runs on ``feed`` with its outputs of the ranks they had on the first
    feed (``ranks``, filled by the first call), else why not: an axis whose size changes an
    output's rank (a shape fed as an input) is no dynamic size."""
    try:
        outputs = runner.run_native(feed)
    except (KeyboardInterrupt, UnframeError):
        raise
    except Exception as exc:  # whatever TF raises on a shape the model can't take
        return axes.failure(exc)
    got = [np.ndim(v) for v in outputs]
    if not ranks:
        ranks.extend(got)
    elif got != ranks:
        return f"the outputs' ranks change with it ({ranks} -> {got})"
    return ""


def _first_feed_fails(model: TfModel, problem: str, drawn: bool) -> None:
    if drawn:
        raise UsageError(f"{problem} ({model.source} can't run on the inputs unframe drew from its "
                         "signature)", "pass sample inputs that fit it (--sample-inputs)")
    raise InputError(f"{problem} ({model.source} can't run on the sample inputs in TensorFlow)",
                     "check the sample inputs (names, shapes, dtypes), or fix the model")


def _export(model: TfModel, inputs: list[TensorSpec], tf_feeds: list[dict[str, np.ndarray]],
            spec: InputSpec, opset: int, nchw_option: Any, versions: dict[str, str],
            self_check: bool, notes: list[str]) -> ExportResult:
    if model.kind == "function":
        if model.fresh is not None:  # no trace of another export's shapes
            model.obj = model.fresh()
        model.outputs = function_outputs(model, inputs)
    nchw = nchw_inputs(inputs, nchw_option)
    feeds = [to_onnx_layout(f, nchw) for f in tf_feeds]
    tried: list[tuple[routes.Attempt, routes.Outcome]] = []
    finished: dict[int, ir.Model] = {}  # id(proto) -> edited graph, made once per route
    ran: dict[int, list[Any]] = {}  # id(proto) -> onnxruntime's (feed, outputs) of its check
    compared: dict[int, list[Any]] = {}  # id(proto) -> the check's comparison (a StageParity)

    low = low_compute_dtype(model)

    checking = [0.0]  # seconds in the per-route checks: the export's parity, not its work

    def check(proto: onnx.ModelProto) -> str:
        finished[id(proto)] = _finish(model, proto, inputs, nchw, spec)
        started = time.perf_counter()
        try:
            with timing.checking() if self_check else contextlib.nullcontext():
                problem = _check(model, finished[id(proto)], inputs, nchw, feeds, self_check, low,
                                 ran.setdefault(id(proto), []), compared.setdefault(id(proto), []))
                if problem and self_check and forget_derived(model):  # the derived reference was wrong
                    ran[id(proto)], compared[id(proto)] = [], []  # (rows that interact): TF runs it now
                    notes.append("TensorFlow ran the first feed itself after all: the leading rows of its "
                                 f"larger run did not match onnxruntime's outputs on it ({problem[:160]})")
                    problem = _check(model, finished[id(proto)], inputs, nchw, feeds, self_check, low,
                                     ran[id(proto)], compared[id(proto)])
                return problem
        finally:
            if self_check:  # a load check alone (nothing validated) is part of the export
                checking[0] += time.perf_counter() - started

    for attempt in routes.attempts(model, inputs, opset):
        outcome = routes.try_attempt(attempt, check)
        tried.append((attempt, outcome))
        if outcome.proto is not None and not outcome.problem:
            break
    else:
        first_parity = next((t for t in tried if t[1].parity_failed), None)
        if first_parity is None:
            routes.give_up(model, [o for _, o in tried])
        # Only parity failed: keep the first such graph, so the pipeline's parity stage
        # reports the numbers instead of a vague conversion error.
        tried.append(first_parity)
    chosen, outcome = tried[-1]
    ir_model = finished.get(id(outcome.proto)) or _finish(model, outcome.proto, inputs, nchw, spec)
    if self_check:
        _ranks_from_the_run(model, ir_model, inputs, nchw, feeds)
    route_notes = list(dict.fromkeys(o.problem for _, o in tried if o.problem))
    if len(tried) > 1:
        route_notes.append(f"used route {chosen.route}")
    if low:
        route_notes.append(f"mixed precision: the model computes in {low}; parity uses {low}'s "
                           "tolerance")
    stepped = quantized_outputs(ir_model)
    if stepped:
        route_notes.append(f"the graph carries the model's own quantization (QuantizeLinear/DequantizeLinear): "
                           f"output(s) {', '.join(stepped)} compared within one step of their quantizer "
                           "(a value at a step's edge may round to either side: TensorFlow's fake quantization and "
                           "ONNX's QuantizeLinear round ties and sum in their own ways)")
    extra = {"tf_inputs": inputs, "nchw_inputs": nchw, "tf_kind": model.kind,
             "signature": model.signature}
    if outcome.parity_failed:
        extra["parity_failed"] = outcome.problem
    elif ran.get(id(outcome.proto)) and id(outcome.proto) in finished:
        from unframe.validate.deferred import graph_fingerprint

        # the parity stage needn't run them again, while the graph is the one they ran
        extra["onnx_runs"] = (graph_fingerprint(ir_model), ran[id(outcome.proto)])
        if compared.get(id(outcome.proto)):  # nor compare them again (ExportStage.reused_parity)
            extra["self_check"] = (graph_fingerprint(ir_model), compared[id(outcome.proto)][-1])
    if self_check and model.memo:  # TensorFlow's own runs on the parity feeds (the probes'): the
        extra["tf_runs"] = tf_runs(model.memo, tf_feeds, feeds)  # parity reference reuses them
    return ExportResult(model=ir_model, tool=chosen.tool, route=chosen.route, opset=chosen.opset,
                        tool_versions=dict(versions), notes=list(notes) + route_notes, feeds=feeds,
                        tolerances=compute_tolerances(ir_model, low), extra=extra,
                        check_seconds=checking[0])


def tf_runs(memo: dict[Any, Any], tf_feeds: Sequence[dict[str, np.ndarray]],
            feeds: Sequence[dict[str, np.ndarray]]) -> list[tuple[dict[str, np.ndarray], list[Any]]]:
    """(parity feed, TensorFlow's outputs on it) for each feed the export's runs already ran
    (``memo`` is keyed by the TF-layout arrays, ``feeds`` are the same in the graph's layout)."""
    out = []
    for tf_feed, feed in zip(tf_feeds, feeds, strict=True):
        key = tuple(sorted((name, id(value)) for name, value in tf_feed.items()))
        if key in memo:
            out.append((feed, memo[key][1]))
    return out


def _finish(model: TfModel, proto: onnx.ModelProto, inputs: Sequence[TensorSpec],
            nchw: Sequence[str], spec: InputSpec) -> ir.Model:
    given = {(name, axis if axis >= 0 else axis + len(_shape_of(inputs, name))): dim
             for name, axis, dim in spec.dynamic if dim and _shape_of(inputs, name)}
    batch_named = model.kind in ("keras", "saved_model", "tflite")
    return routes.finish(proto, inputs, model.outputs, batch_named, nchw, given)


def _shape_of(inputs: Sequence[TensorSpec], name: str) -> tuple[Any, ...]:
    return next((tuple(t.shape or ()) for t in inputs if t.name == name), ())


def _check(model: TfModel, candidate: ir.Model, inputs: Sequence[TensorSpec],
           nchw: Sequence[str], feeds: list[dict[str, np.ndarray]], parity: bool,
           low: str | None, ran: list[Any] | None = None, results: list[Any] | None = None) -> str:
    if not parity:
        return routes.load_problem(candidate, OnnxRuntimeRunner)
    ref = make_runner(model, inputs, [v.name for v in candidate.graph.outputs], nchw, memo=model.memo)

    def recorded(graph: ir.Model) -> Runner:
        return _Recording(OnnxRuntimeRunner(graph), ran if ran is not None else [])

    return routes.parity_problem(ref, candidate, feeds, recorded,
                                 compute_tolerances(candidate, low), results)


class _Recording(Runner):
    """onnxruntime as the self-check runs it, keeping each (feed, outputs) for the pipeline's
    parity stage, which compares the same graph on the same feeds."""

    timed = False  # the onnxruntime runner it wraps is

    def __init__(self, inner: Runner, into: list[Any]) -> None:
        self.inner, self.into, self.name = inner, into, inner.name

    def input_specs(self) -> Any:
        return self.inner.input_specs()

    def output_names(self) -> Any:
        return self.inner.output_names()

    def run(self, feeds: Any) -> dict[str, np.ndarray]:
        outputs = self.inner.run(feeds)
        self.into.append((feeds, outputs, self.inner.name))
        return outputs


def _ranks_from_the_run(model: TfModel, graph: ir.Model, inputs: Sequence[TensorSpec],
                        nchw: Sequence[str], feeds: list[dict[str, np.ndarray]]) -> None:
    """Outputs tf2onnx left without a shape (a reshape to a shape fed as an input, MatrixDiagV3
    with its sizes as inputs) get their rank from TensorFlow's runs on the parity feeds when it is
    the same on each, every dim symbolic: onnxruntime runs them, but onnx.checker requires a shape
    on each graph output::

        before:  output_0: float32, shape unknown
        after:   output_0: float32[output_0_dim0, output_0_dim1]
    """
    unknown = [v for v in graph.graph.outputs if v.shape is None]
    if not unknown:
        return
    runner = make_runner(model, inputs, [v.name for v in graph.graph.outputs], nchw, memo=model.memo)
    try:
        runs = [runner.run(feed) for feed in feeds]
    except Exception:  # noqa: BLE001 - the parity stage reports a source that fails
        return
    for value in unknown:
        ranks = {np.ndim(run.get(value.name)) for run in runs}
        if len(ranks) == 1:
            value.shape = ir.Shape([f"{value.name}_dim{i}" for i in range(ranks.pop())])


def low_compute_dtype(model: TfModel) -> str | None:
    """float16/bfloat16 when a Keras model's layers compute in it (a mixed-precision policy,
    e.g. ``mixed_float16``: float32 weights, half-precision compute); else None."""
    if model.kind != "keras":
        return None
    found = {str(getattr(getattr(layer, "dtype_policy", None), "compute_dtype", ""))
             for layer in model.obj._flatten_layers(include_self=False, recursive=True)}
    return next((d for d in ("bfloat16", "float16") if d in found), None)


def compute_tolerances(graph: ir.Model, low: str | None) -> dict[str, tuple[float, float]]:
    """Every output's tolerance is the compute precision's, whatever dtype it is returned in; an
    output the model's own quantization produced (a quantization-aware model's Q/DQ) is compared
    within one step of its quantizer's grid (``validate.quantized``)."""
    from unframe.validate import quantized
    from unframe.validate.tolerances import DEFAULTS

    base = {v.name: DEFAULTS[low] for v in graph.graph.outputs} if low is not None else {}
    return quantized.tolerances(graph, base, *DEFAULTS[low or "float32"])[0]


def quantized_outputs(graph: ir.Model) -> list[str]:
    from unframe.validate import quantized

    return list(quantized.output_steps(graph))


def function_outputs(model: TfModel, inputs: Sequence[TensorSpec]) -> list[str]:
    """Output names of a tf.function: dict keys (in tf.nest order), else ``output_<i>``."""
    import tensorflow as tf

    try:
        concrete = model.obj.get_concrete_function(*call_specs(model, inputs))
    except (KeyboardInterrupt, UnframeError):
        raise
    except Exception as exc:  # TF1-style code, Python control flow on a dynamic shape...
        raise trace_error(model, inputs, exc) from exc
    structured = concrete.structured_outputs
    if isinstance(structured, dict):
        return [str(k) for k in sorted(structured)]
    return [f"output_{i}" for i in range(len(tf.nest.flatten(structured)))]


def trace_error(model: TfModel, inputs: Sequence[TensorSpec], exc: BaseException) -> InputError:
    """TensorFlow can't trace the function at these shapes: its own telling line (the reason,
    and the last frame "in user code") leads the message."""
    shapes = ", ".join(f"{t.name} {_shape_text(t.shape)}" for t in inputs) or "no inputs"
    return InputError(f"{telling_line(exc)} ({model.source} can't be traced by TensorFlow with "
                      f"{shapes})", "fix the function (TF1-style graph code: freeze it to a .pb "
                      "GraphDef, or build its variables once outside the call)")


def _shape_text(shape: Any) -> str:
    return "?" if shape is None else "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def nchw_inputs(inputs: Sequence[TensorSpec], option: Any) -> list[str]:
    """Which inputs to make channels-first: all of rank 3-5 for ``True``, or the names given."""
    if not option:
        return []
    eligible = [t.name for t in inputs if t.shape is not None and 3 <= len(t.shape) <= 5]
    if option is True or (isinstance(option, str) and option.lower() in ("1", "true", "all")):
        if not eligible:
            raise UsageError("nchw_inputs: no input has rank 3 to 5 (channels-last images)",
                             "drop --nchw-inputs")
        return eligible
    names = [option] if isinstance(option, str) else list(option)
    bad = [n for n in names if n not in eligible]
    if bad:
        raise UsageError(f"nchw_inputs: {', '.join(map(repr, bad))} not an input of rank 3-5 "
                         f"(eligible: {', '.join(eligible) or 'none'})", "fix the input names")
    return names


def to_onnx_layout(feed: dict[str, np.ndarray], nchw: Sequence[str]) -> dict[str, np.ndarray]:
    return {k: np.ascontiguousarray(np.moveaxis(v, -1, 1)) if k in nchw else v
            for k, v in feed.items()}

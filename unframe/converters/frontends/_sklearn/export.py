"""scikit-learn -> ONNX through skl2onnx, with the precision route chosen from the samples.

``precision``:
- ``float``: float32 inputs (skl2onnx's default);
- ``double``: float64 inputs, so tree thresholds and scores keep scikit-learn's values;
- ``auto`` (default): convert with float32, run onnxruntime on the samples cast to float32 and
  scikit-learn on the samples as given; when a label differs, or a score misses the float32
  tolerance, switch to the double route (when that converts and loads; else keep float and say so).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from unframe import timing
from unframe.converters.base import SKLEARN_PATH, SKLEARN_STEP
from unframe.converters.frontends._sklearn import inputs as inputs_mod
from unframe.converters.frontends._sklearn.converters import EXTENSIONS, ONNXMLTOOLS, register_all
from unframe.converters.frontends._sklearn.converters.hist_gradient_boosting import fix_ml_opset
from unframe.converters.frontends._sklearn.inputs import InputPlan, walk
from unframe.converters.frontends._sklearn.runner import (
    PREDICT,
    SklearnRunner,
    labels_as_column,
    output_methods,
)
from unframe.distributions import dist_version
from unframe.errors import Blocker, ConversionError, InputError, UnsupportedError, UsageError
from unframe.validate import tolerances
from unframe.validate.compare import compare_arrays

PRECISIONS = ("auto", "float", "double")
ML_OPSET = 3
MIN_OPSET = 13  # Unsqueeze/ReduceSum with axes as inputs, used by unframe's converters


@dataclass
class Conversion:
    proto: onnx.ModelProto
    double: bool
    methods: list[str] | None  # the estimator method behind each output; None: no known mapping
    output_names: list[str]
    notes: list[str] = field(default_factory=list)


def check_fitted(model: Any, source: str) -> None:
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(model)
    except NotFittedError:
        raise InputError(f"{source} ({type(model).__name__}) is not fitted",
                         "call fit() on it before converting") from None
    except TypeError as exc:  # not an estimator at all
        raise InputError(f"{source} is not a scikit-learn estimator: {exc}",
                         "pass a fitted estimator or Pipeline") from None


def final_classifier_options(model: Any, zipmap: bool) -> dict[int, dict[str, Any]]:
    """zipmap for the estimator producing the outputs, when its converter takes the option."""
    from skl2onnx._supported_operators import get_model_alias
    from skl2onnx.common._registration import get_converter

    last = inputs_mod.final_estimator(model)
    try:
        allowed = get_converter(get_model_alias(type(last))).get_allowed_options() or {}
    except Exception:  # unknown model: the conversion itself reports it
        return {}
    return {id(last): {"zipmap": zipmap}} if "zipmap" in allowed else {}


def run_skl2onnx(model: Any, plan: InputPlan, *, double: bool, opset: int, zipmap: bool,
                 source: str) -> onnx.ModelProto:
    from skl2onnx import convert_sklearn
    from skl2onnx.common.exceptions import MissingConverter, MissingShapeCalculator

    try:
        with timing.tool("skl2onnx convert_sklearn"):
            proto, topology = convert_sklearn(
                model, initial_types=plan.initial_types(double),
                # onnxmltools would pick ai.onnx.ml 5, which skl2onnx refuses
                target_opset={"": opset, "ai.onnx.ml": ML_OPSET},
                options=final_classifier_options(model, zipmap) or None, intermediate=True)
    except (MissingConverter, MissingShapeCalculator) as exc:
        raise no_converter_error(model, str(exc), source) from None
    except RuntimeError as exc:
        if "Unable to find a shape calculator" in str(exc) or "Unable to find" in str(exc):
            raise no_converter_error(model, str(exc), source) from None
        raise ConversionError(f"skl2onnx failed on {source} ({type(model).__name__}): "
                              f"{_first_line(exc)}", "report it with --debug output") from exc
    except NotImplementedError as exc:
        raise UnsupportedError(f"{source}: {_first_line(exc)}", blockers=[
            Blocker(op=type(inputs_mod.final_estimator(model)).__name__, reason=_first_line(exc))]
        ) from None
    except Exception as exc:
        raise ConversionError(f"skl2onnx failed on {source} ({type(model).__name__}): "
                              f"{_first_line(exc)}", "report it with --debug output") from exc
    fix_ml_opset(proto)
    drop_map_types(proto)
    stamp_steps(proto, topology, model)
    return proto


def step_paths(model: Any) -> dict[int, str]:
    """id(estimator) -> its path in the model ("preprocess/num/scale"); the model itself: ""."""
    paths = {id(model): ""}

    def visit(est: Any, prefix: str) -> None:
        for name, child in inputs_mod.named_children(est):
            path = f"{prefix}/{name}" if prefix else name
            paths[id(child)] = path
            visit(child, path)

    visit(model, "")
    return paths


def stamp_steps(proto: onnx.ModelProto, topology: Any, model: Any) -> None:
    """Record on the node producing each estimator's outputs which estimator it is (node
    metadata, as torch's exporter records module paths), for the divergence locator."""
    paths = step_paths(model)
    producers = {out: node for node in proto.graph.node for out in node.output}
    labels: dict[int, tuple[int, str, str]] = {}  # node -> (depth, label, path): innermost wins
    for op in topology.unordered_operator_iterator():
        raw = getattr(op, "raw_operator", None)
        if raw is None or id(raw) not in paths:
            continue
        path = paths[id(raw)]
        label = f"pipeline step '{path}' ({type(raw).__name__})" if path else type(raw).__name__
        depth = path.count("/") + (1 if path else 0)
        for var in op.outputs:
            node = producers.get(getattr(var, "onnx_name", None))
            if node is not None and labels.get(id(node), (-1, "", ""))[0] < depth:
                labels[id(node)] = (depth, label, path)
    for node in proto.graph.node:
        if id(node) in labels:
            _, label, path = labels[id(node)]
            for key, value in ((SKLEARN_STEP, label), (SKLEARN_PATH, path)):
                entry = node.metadata_props.add()
                entry.key, entry.value = key, value


def drop_map_types(proto: onnx.ModelProto) -> list[str]:
    """onnx-ir can't hold map types (ZipMap's sequence(map) output): leave those outputs untyped
    (onnxruntime infers them). Returns the outputs changed."""
    changed = []
    for out in proto.graph.output:
        if out.type.HasField("sequence_type") or out.type.HasField("map_type"):
            out.ClearField("type")
            changed.append(out.name)
    keep = [v for v in proto.graph.value_info
            if not (v.type.HasField("sequence_type") or v.type.HasField("map_type"))]
    del proto.graph.value_info[:]
    proto.graph.value_info.extend(keep)
    return changed


def unconverted_classes(model: Any) -> list[str]:
    from skl2onnx._supported_operators import sklearn_operator_name_map

    return sorted({f"{type(e).__module__}.{type(e).__qualname__}" for e in walk(model)
                   if type(e) not in sklearn_operator_name_map
                   and type(e).__name__ not in ("Pipeline", "ColumnTransformer", "FeatureUnion")})


def no_converter_error(model: Any, message: str, source: str) -> UnsupportedError:
    names = unconverted_classes(model) or re.findall(r"<class '([^']+)'>", message)[:1] \
        or [type(model).__name__]
    hint = ("register a converter with skl2onnx.update_registered_converter(<class>, alias, "
            "shape_calculator, converter) before converting")
    blockers = [Blocker(op=n, reason="skl2onnx has no converter for this estimator", hint=hint)
                for n in names]
    return UnsupportedError(f"{source}: no ONNX converter for {', '.join(names)}", hint,
                            blockers=blockers)


def preflight(model: Any, source: str) -> None:
    """Refuse what unframe's converters can't express, naming every estimator, before skl2onnx
    runs (skl2onnx would wrap the reason in a generic error)."""
    from unframe.converters.frontends._sklearn.converters.hist_gradient_boosting import check_supported

    blockers = []
    for est in walk(model):
        if type(est).__name__.startswith("HistGradientBoosting"):
            try:
                check_supported(est)
            except NotImplementedError as exc:
                blockers.append(Blocker(op=type(est).__name__, reason=str(exc)))
    if blockers:
        raise UnsupportedError(f"{source}: {blockers[0].reason}", blockers=blockers)


def convert_route(model: Any, plan: InputPlan, *, double: bool, opset: int, zipmap: bool,
                  source: str) -> Conversion:
    proto = run_skl2onnx(model, plan, double=double, opset=opset, zipmap=zipmap, source=source)
    names = [o.name for o in proto.graph.output]
    has_zipmap = any(n.op_type == "ZipMap" for n in proto.graph.node)
    try:
        methods: list[str] | None = output_methods(model, len(names), zipmap=has_zipmap)
    except UnsupportedError:
        methods = None  # converting needs no reference; parity raises (SklearnFrontend.runner)
    return Conversion(proto, double, methods, names)


def float_mismatch(model: Any, plan: InputPlan, conv: Conversion) -> str:
    """Why the float32 graph changes scikit-learn's results on the samples ('' when it doesn't).
    scikit-learn sees the samples as given; onnxruntime sees them cast to float32."""
    from unframe.validate.onnxruntime import OnnxRuntimeRunner

    if plan.samples is not None:
        exact_feed = inputs_mod.sample_feeds(plan, double=True)[0]
        float_feed = inputs_mod.sample_feeds(plan, double=False)[0]
    else:
        float_feed = inputs_mod.generated_feeds(plan, double=False)[0]
        exact_feed = float_feed
    ref = SklearnRunner(model, plan, conv.methods, conv.output_names).run(exact_feed)
    got = OnnxRuntimeRunner(conv.proto).run(float_feed)
    problems = []
    for name, method in zip(conv.output_names, conv.methods, strict=False):
        if _is_map_sequence(got[name]):
            continue
        atol, rtol = (0.0, 0.0) if method == PREDICT and is_label(model) else \
            tolerances.DEFAULTS["float32"]
        res = compare_arrays(name, np.asarray(ref[name]), np.asarray(got[name]), atol, rtol)
        if not res.passed:
            problems.append(f"{name}: {res.reason}")
    return "; ".join(problems)


def is_label(model: Any) -> bool:
    from sklearn.base import is_classifier

    return is_classifier(model) or labels_as_column(model) \
        or hasattr(inputs_mod.final_estimator(model), "cluster_centers_")


def _is_map_sequence(value: Any) -> bool:
    arr = np.asarray(value)
    return arr.dtype == object and arr.size > 0 and isinstance(arr.flat[0], dict)


def choose_route(model: Any, plan: InputPlan, precision: str, *, opset: int, zipmap: bool,
                 source: str) -> Conversion:
    if precision not in PRECISIONS:
        raise UsageError(f"unknown sklearn precision {precision!r}",
                         f"use one of {', '.join(PRECISIONS)}")
    preflight(model, source)
    if precision == "double":
        return _double_or_raise(model, plan, opset, zipmap, source)
    conv = convert_route(model, plan, double=False, opset=opset, zipmap=zipmap, source=source)
    if precision == "float":
        return conv
    if conv.methods is None:
        conv.notes.append("precision auto: kept float32 (no scikit-learn method is known for "
                          "these outputs, so float32 can't be checked against it)")
        return conv
    why = float_mismatch(model, plan, conv)
    if not why:
        conv.notes.append("precision auto: float32 reproduces scikit-learn on the parity inputs")
        return conv
    try:
        double = _double_or_raise(model, plan, opset, zipmap, source)
    except Exception as exc:  # keep float, but say it differs
        conv.notes.append(f"precision auto: float32 changes results ({why}); the double route "
                          f"is unavailable ({_first_line(exc)}), kept float32")
        return conv
    double.notes.append(f"precision auto: switched to double because float32 changes results "
                        f"({why})")
    return double


def _double_or_raise(model: Any, plan: InputPlan, opset: int, zipmap: bool, source: str
                     ) -> Conversion:
    from unframe.validate.onnxruntime import OnnxRuntimeRunner

    if all(k != inputs_mod.FLOAT for k in plan.kinds):
        raise UsageError(f"{source} has no float inputs, so the double route changes nothing",
                         "use precision float or auto")
    if _infinite_tree_threshold(model):
        raise UnsupportedError(f"{source} has a tree split at +inf (one that sends only missing "
                               "values right); skl2onnx's double route loops forever on it",
                               "use precision float")
    conv = convert_route(model, plan, double=True, opset=opset, zipmap=zipmap, source=source)
    try:
        OnnxRuntimeRunner(conv.proto)
    except Exception as exc:
        raise ConversionError(f"the double-precision graph of {source} does not load in "
                              f"onnxruntime: {_first_line(exc)}",
                              "use precision float") from None
    return conv


def _infinite_tree_threshold(model: Any) -> bool:
    """A scikit-learn tree fitted on data with missing values may split at +inf; skl2onnx's
    double-precision threshold search (``find_switch_point``) never ends on it."""
    for est in walk(model):
        members = getattr(est, "estimators_", None)
        found = [est] + (list(np.asarray(members, dtype=object).ravel()) if members is not None
                         and not isinstance(members, str) else [])
        if any(np.isinf(getattr(getattr(m, "tree_", None), "threshold", np.zeros(0))).any()
               for m in found):
            return True
    return False


def converted_by(model: Any) -> dict[str, str]:
    """How each estimator class inside the model is converted."""
    ext = {name for name, _ in EXTENSIONS}
    mlt = {name for name, _ in ONNXMLTOOLS}
    out = {}
    for est in walk(model):
        name = type(est).__name__
        out[name] = "unframe extension" if name in ext else "onnxmltools" if name in mlt \
            else "skl2onnx"
    return out


def tool_versions(model: Any) -> dict[str, str]:
    dists = ["scikit-learn", "skl2onnx", "onnx"]
    how = converted_by(model)
    if "onnxmltools" in how.values():
        dists.append("onnxmltools")
        dists += [lib for lib in ("xgboost", "lightgbm")
                  if any(type(e).__module__.startswith(lib) for e in walk(model))]
    return {d: v for d in dists if (v := dist_version(d))}



def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def ensure_registered() -> list[str]:
    return register_all()

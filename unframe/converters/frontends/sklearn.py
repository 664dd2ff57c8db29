"""scikit-learn in: fitted estimators and pipelines (objects, .skops, trusted .pkl/.joblib) -> ONNX.

Conversion goes through skl2onnx; onnxmltools' converters are registered into it for XGBoost and
LightGBM wrappers (alone or inside pipelines); unframe's own converters fill skl2onnx's gaps
through ``skl2onnx.update_registered_converter`` (HistGradientBoosting with scikit-learn 1.9,
IsotonicRegression, GaussianProcessClassifier without a vendor op): see ``_sklearn/converters``.

Input types come from the samples or the fitted model (``_sklearn/inputs.py``); classifier
outputs are plain tensors (label + probability matrix) unless ``zipmap`` is set; the float32 or
float64 route is chosen by ``precision`` (``_sklearn/export.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unframe.converters.base import ConvertOptions, ExportResult, Frontend, InputSpec
from unframe.converters.registry import register_frontend
from unframe.errors import InputError
from unframe.validate.runner import Runner

DEFAULT_OPSET = 18


@register_frontend
class SklearnFrontend(Frontend):
    name = "sklearn"
    extra = "sklearn"
    requires = ("sklearn", "skl2onnx")
    packages = "scikit-learn, skl2onnx, skops, onnxmltools"
    description = ("fitted scikit-learn estimators and pipelines (.skops; .pkl/.joblib with "
                   "--trust), XGBoost and LightGBM scikit-learn wrappers and model files "
                   "(.json/.ubj, .txt)")
    suffixes = (".skops", ".pkl", ".joblib", ".json", ".ubj", ".txt")
    object_types = ("sklearn.base.BaseEstimator",)
    emits_ml_ops = True  # skl2onnx writes trees, linear models, SVMs... as ai.onnx.ml ops
    # "float_precision" is the CLI's --float-precision; "precision" is accepted too, but only
    # its auto/float/double values (fp16/fp32/bf16 belong to the coreml/tensorrt backends).
    option_names = ("zipmap", "precision", "float_precision")

    def distributions(self) -> tuple[str, ...]:
        return ("scikit-learn", "skl2onnx", "skops", "onnxmltools", "xgboost", "xgboost-cpu", "lightgbm")

    def default_opset(self) -> int:
        return min(DEFAULT_OPSET, _max_opset())

    def accepts_path(self, path: Path) -> bool:
        """.json, .ubj and .txt only when the first bytes are an XGBoost or LightGBM model."""
        from unframe.converters.frontends._sklearn.load import booster_kind

        if not super().accepts_path(path):
            return False
        return path.suffix.lower() in (".skops", ".pkl", ".joblib") or booster_kind(path) is not None

    def closest_opset(self, wanted: int) -> int:
        from unframe.converters.frontends._sklearn.export import MIN_OPSET

        return max(MIN_OPSET, min(int(wanted), _max_opset()))

    def load(self, source: Any, opts: ConvertOptions) -> Any:
        from unframe.converters.frontends._sklearn.load import load_file
        from unframe.converters.frontends._sklearn.quiet import warnings_to_debug_log

        if isinstance(source, (str, Path)):
            with warnings_to_debug_log(f"loading {Path(source).name}"):
                return load_file(Path(source), opts.trust)
        if not self.accepts_object(source):
            raise InputError(f"{type(source).__name__} is not a scikit-learn estimator",
                             "pass a fitted estimator, a Pipeline, or a .skops file")
        return source

    def to_onnx(self, native: Any, spec: InputSpec, opts: ConvertOptions) -> ExportResult:
        from unframe.converters.frontends._sklearn.quiet import warnings_to_debug_log

        with warnings_to_debug_log("converting with skl2onnx"):
            return self._to_onnx(native, spec, opts)

    def _to_onnx(self, native: Any, spec: InputSpec, opts: ConvertOptions) -> ExportResult:
        import onnx_ir as ir

        from unframe.converters.frontends._sklearn import export as ex
        from unframe.converters.frontends._sklearn import inputs

        ex.ensure_registered()
        source = _source_name(native)
        ex.check_fitted(native, source)
        name = spec.tensors[0].name if spec.tensors and len(spec.tensors) == 1 else None
        plan = inputs.plan_inputs(native, spec.samples, static=spec.static, name=name,
                                  source=source)
        opset = self.closest_opset(opts.opset) if opts.opset else self.default_opset()
        conv = ex.choose_route(native, plan, _precision(opts), opset=opset,
                               zipmap=bool(opts.get("zipmap", False)), source=source)
        feeds = (inputs.sample_feeds(plan, conv.double) if plan.samples is not None
                 else inputs.generated_feeds(plan, conv.double))
        return ExportResult(
            model=ir.serde.deserialize_model(conv.proto),
            tool="skl2onnx", route="skl2onnx float64 (double precision)" if conv.double
            else "skl2onnx float32", opset=opset, tool_versions=ex.tool_versions(native),
            notes=conv.notes + _how_notes(native), feeds=feeds,
            exact_outputs=_exact_outputs(native, conv), tolerances=_tolerances(native, conv),
            extra={"precision": "double" if conv.double else "float", "input_plan": plan,
                   "methods": None if conv.methods is None
                   else dict(zip(conv.output_names, conv.methods, strict=False)),
                   "converted_by": ex.converted_by(native)})

    def runner(self, native: Any, export: ExportResult) -> Runner:
        from unframe.converters.frontends._sklearn.runner import SklearnRunner, unmapped_outputs

        methods: dict[str, str] | None = export.extra["methods"]
        if methods is None:  # only parity needs the mapping: --no-validate converts without it
            raise unmapped_outputs(native, len(export.model.graph.outputs))
        return SklearnRunner(native, export.extra["input_plan"], list(methods.values()),
                             list(methods))

    def describe(self, native: Any) -> str:
        from unframe.converters.frontends._sklearn.inputs import walk

        names = [type(e).__name__ for e in walk(native)]
        return names[0] if len(names) == 1 else f"{names[0]}({', '.join(names[1:])})"


def _precision(opts: ConvertOptions) -> str:
    from unframe.converters.frontends._sklearn.export import PRECISIONS

    value = opts.get("float_precision")
    if value is None and opts.get("precision") in PRECISIONS:
        value = opts.get("precision")
    return str(value or "auto")


def _source_name(native: Any) -> str:
    return f"the {type(native).__name__}"


def _exact_outputs(native: Any, conv: Any) -> list[str]:
    from unframe.converters.frontends._sklearn.export import is_label
    from unframe.converters.frontends._sklearn.runner import PREDICT

    if not is_label(native) or conv.methods is None:
        return []
    return [n for n, m in zip(conv.output_names, conv.methods, strict=False) if m == PREDICT]


def _tolerances(native: Any, conv: Any) -> dict[str, tuple[float, float]]:
    """GaussianProcessClassifier's probability is a sum of erf terms with coefficients up to
    ~3500 that cancel: float32 rounding reaches ~2e-4 there (skl2onnx's own converter too)."""
    from unframe.converters.frontends._sklearn.inputs import final_estimator

    if conv.double or conv.methods is None \
            or type(final_estimator(native)).__name__ != "GaussianProcessClassifier":
        return {}
    return {n: (1e-3, 1e-3) for n, m in zip(conv.output_names, conv.methods, strict=False) if m != "predict"}


def _how_notes(native: Any) -> list[str]:
    from unframe.converters.frontends._sklearn.export import converted_by

    return [f"{cls} converted by {how}" for cls, how in converted_by(native).items()
            if how != "skl2onnx"]


def _max_opset() -> int:
    try:
        from skl2onnx import get_latest_tested_opset_version

        return int(get_latest_tested_opset_version())
    except Exception:  # skl2onnx missing: the pipeline reports the extra before exporting
        return DEFAULT_OPSET


def supported_estimators() -> list[tuple[str, str]]:
    """(class name, how it converts) for every estimator type this frontend converts:
    "skl2onnx", "unframe extension" or "onnxmltools". For docs/support.md."""
    from skl2onnx._supported_operators import sklearn_operator_name_map

    from unframe.converters.frontends._sklearn.converters import EXTENSIONS, ONNXMLTOOLS
    from unframe.converters.frontends._sklearn.export import ensure_registered

    ensure_registered()
    ext = {n for n, _ in EXTENSIONS}
    mlt = {n for n, _ in ONNXMLTOOLS}
    rows = {}
    for cls in sklearn_operator_name_map:
        if not isinstance(cls, type):
            continue
        name = cls.__name__
        rows[name] = "unframe extension" if name in ext else "onnxmltools" if name in mlt \
            else "skl2onnx"
    return sorted(rows.items())

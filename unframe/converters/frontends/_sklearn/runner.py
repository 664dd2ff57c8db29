"""The scikit-learn side of parity: the fitted estimator's own methods, keyed by ONNX output names.

skl2onnx's output conventions, which the reference follows:
- classifiers: ``label`` = predict (bool classes as int64), ``probabilities`` = predict_proba,
  or decision_function for models without probabilities. For binary models skl2onnx has three
  layouts of the one decision value d, measured with skl2onnx 1.20: [d] (LinearSVC,
  RidgeClassifier[CV]), [d, -d] (SVC, NuSVC) and [-d, d] (SGDClassifier, Perceptron, ...);
- regressors: ``variable`` = predict as [N, n_targets];
- clusterers with transform (KMeans): ``label`` = predict, ``scores`` = transform;
- outlier detectors (IsolationForest, OneClassSVM, LocalOutlierFactor(novelty=True)): ``label`` =
  predict (1 inlier, -1 outlier) as [N, 1], ``scores`` = decision_function as [N, 1];
- mixtures (GaussianMixture, BayesianGaussianMixture): ``label`` = predict as [N, 1],
  ``probabilities`` = predict_proba;
- transformers: ``variable`` = transform (dense).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from unframe.converters.frontends._sklearn.inputs import InputPlan, final_estimator, to_sklearn_input
from unframe.distributions import dist_version
from unframe.errors import UnsupportedError
from unframe.validate.runner import Runner

PREDICT, PROBA, PROBA_ZIPMAP, DECISION, DECISION_2COL, DECISION_SVC, TRANSFORM = (
    "predict", "predict_proba", "predict_proba_zipmap", "decision_function",
    "decision_function_2col", "decision_function_svc", "transform")
ONE_COLUMN_BINARY = {"LinearSVC", "RidgeClassifier", "RidgeClassifierCV"}
SVC_BINARY = {"SVC", "NuSVC"}
MIXTURES = {"GaussianMixture", "BayesianGaussianMixture"}


def output_methods(model: Any, n_outputs: int, zipmap: bool = False) -> list[str]:
    """Which estimator method produces each ONNX output, in output order."""
    from sklearn.base import is_classifier, is_outlier_detector, is_regressor

    last = final_estimator(model)
    if is_classifier(model):
        if zipmap:
            return [PREDICT, PROBA_ZIPMAP][:n_outputs]
        if hasattr(model, "predict_proba"):
            return [PREDICT, PROBA][:n_outputs]
        name = type(last).__name__
        if len(getattr(last, "classes_", ())) != 2 or name in ONE_COLUMN_BINARY:
            return [PREDICT, DECISION][:n_outputs]
        return [PREDICT, DECISION_SVC if name in SVC_BINARY else DECISION_2COL][:n_outputs]
    if is_regressor(model) or type(last).__name__ == "IsotonicRegression":
        return [PREDICT][:n_outputs]
    if is_outlier_detector(model):
        return [PREDICT, DECISION][:n_outputs]
    if type(last).__name__ in MIXTURES:
        return [PREDICT, PROBA][:n_outputs]
    if hasattr(model, "predict") and hasattr(model, "transform") and n_outputs == 2:
        return [PREDICT, TRANSFORM]  # KMeans-like clusterers
    if hasattr(model, "transform") and n_outputs == 1:
        return [TRANSFORM]
    raise unmapped_outputs(model, n_outputs)


def unmapped_outputs(model: Any, n_outputs: int) -> UnsupportedError:
    """Raised where a scikit-learn reference is needed (parity) for outputs no method maps to;
    the conversion itself does not need one, so --no-validate skips it."""
    return UnsupportedError(
        f"unframe can't check the outputs of {type(model).__name__} against scikit-learn "
        f"({n_outputs} ONNX outputs, no known method mapping)",
        "convert with validate=False (--no-validate)")


def labels_as_column(model: Any) -> bool:
    """skl2onnx writes an outlier detector's or a mixture's labels as [N, 1] (a classifier's as [N])."""
    from sklearn.base import is_outlier_detector

    return is_outlier_detector(model) or type(final_estimator(model)).__name__ in MIXTURES


def fitted_float_dtype(est: Any) -> np.dtype | None:
    """float32 when every fitted float array of the estimator is float32: it was fitted on
    float32 data, keeps its arrays in that dtype, and some estimators' Cython (KMeans) refuses
    another input dtype. None: any float dtype works."""
    dtypes = {v.dtype for k, v in vars(est).items()
              if k.endswith("_") and isinstance(v, np.ndarray) and v.dtype.kind == "f"}
    return np.dtype(np.float32) if dtypes == {np.dtype(np.float32)} else None


def apply(model: Any, method: str, x: Any) -> Any:
    """``model.<method>(x)``, a pipeline step by step so that each estimator gets its input in
    the float dtype it was fitted on (a float32-fitted KMeans after a float64 step would fail)."""
    if hasattr(model, "steps") and hasattr(model, "named_steps"):
        for _, step in model.steps[:-1]:
            if step is not None and not isinstance(step, str):
                x = apply(step, "transform", x)
        last = model.steps[-1][1]
        return x if last is None or isinstance(last, str) else apply(last, method, x)
    dtype = fitted_float_dtype(model)
    if dtype is not None and isinstance(x, np.ndarray) and x.dtype.kind == "f":
        x = x.astype(dtype, copy=False)
    return getattr(model, method)(x)


def call(model: Any, method: str, x: Any) -> np.ndarray:
    if method == PROBA_ZIPMAP:  # ZipMap's layout: one {class: probability} dict per row
        classes = final_estimator(model).classes_
        rows = _proba_or_decision(model, x)
        return np.array([{_plain(c): float(p) for c, p in zip(classes, row, strict=False)} for row in rows],
                        dtype=object)
    if method in (DECISION_2COL, DECISION_SVC):
        d = np.asarray(apply(model, "decision_function", x)).reshape(-1, 1)
        return np.hstack([d, -d] if method == DECISION_SVC else [-d, d])
    out = apply(model, method, x)
    if hasattr(out, "toarray"):
        out = out.toarray()
    out = np.asarray(out)
    if method == PREDICT and out.dtype == bool:
        out = out.astype(np.int64)  # skl2onnx encodes bool classes as int64 labels
    if method == PREDICT and out.ndim == 1 and (out.dtype.kind == "f" or labels_as_column(model)):
        out = out.reshape(-1, 1)  # skl2onnx regressors, outlier detectors and mixtures give [N, 1]
    if method == DECISION and out.ndim == 1:
        out = out.reshape(-1, 1)
    return out


def _proba_or_decision(model: Any, x: Any) -> np.ndarray:
    if hasattr(model, "predict_proba"):
        return np.asarray(apply(model, "predict_proba", x))
    return np.asarray(apply(model, "decision_function", x)).reshape(len(x), -1)


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


class SklearnRunner(Runner):
    """Runs the fitted estimator on ONNX-named feeds."""

    def __init__(self, model: Any, plan: InputPlan, methods: list[str], output_names: list[str]):
        self.model, self.plan, self.methods, self.names = model, plan, methods, output_names
        self.name = f"scikit-learn {dist_version('scikit-learn') or '?'}"

    def output_names(self) -> list[str]:
        return list(self.names)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from unframe.converters.frontends._sklearn.quiet import warnings_to_debug_log

        x = to_sklearn_input(self.plan, dict(feeds))
        with warnings_to_debug_log("running the estimator for parity"):
            return {name: call(self.model, method, x) for name, method in zip(self.names, self.methods, strict=False)}

"""LinearClassifier/Regressor and SVMClassifier/Regressor lowered to standard ONNX give
onnxruntime's results: every post transform, binary and multi-class, the four kernels, one-class
SVMs and liblinear models (probability estimates: test_svm_probability.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
import pytest
from mlt_models import assert_same, lowered, run_ort, single_node_model, varies
from onnx import TensorProto as TP
from onnx import helper as oh

from unframe.passes.ml_to_tensor import check

RNG = np.random.default_rng(0)
F = 3
X = RNG.normal(size=(200, F)).astype(np.float32)
POSTS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]


def ml(op: str, outputs: list[tuple[str, int]], **attrs: Any) -> Any:
    node = oh.make_node(op, ["X"], [n for n, _ in outputs], domain="ai.onnx.ml", name="ml", **attrs)
    return single_node_model(node, F, outputs=outputs, ml_opset=1)


def same_as_ort(model: Any, x: np.ndarray = X) -> None:
    ref = run_ort(model, {"X": x})
    assert varies([r for r in ref if r.dtype.kind == "f"]), "constant reference scores"
    low, report = lowered(model)
    assert report.lowered
    assert_same(ref, run_ort(low, {"X": x}))


CLASSIFIER = [("label", TP.INT64), ("scores", TP.FLOAT)]


@pytest.mark.parametrize("rows", [2, 3])
@pytest.mark.parametrize("post", POSTS)
def test_linear_classifier_multiclass(rows: int, post: str) -> None:
    coef = RNG.normal(size=rows * F).round(3).tolist()
    same_as_ort(ml("LinearClassifier", CLASSIFIER, coefficients=coef, intercepts=[0.1] * rows,
                   classlabels_ints=[3, 7, 9][:rows], post_transform=post))


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_linear_classifier_binary_one_row(post: str) -> None:
    same_as_ort(ml("LinearClassifier", CLASSIFIER, coefficients=[1.0, -2.0, 0.5], intercepts=[0.25],
                   classlabels_ints=[3, 7], post_transform=post))


def test_linear_classifier_string_labels() -> None:
    same_as_ort(ml("LinearClassifier", [("label", TP.STRING), ("scores", TP.FLOAT)],
                   coefficients=RNG.normal(size=3 * F).tolist(), intercepts=[0.0, 0.1, -0.1],
                   classlabels_strings=["a", "b", "c"], post_transform="SOFTMAX"))


@pytest.mark.parametrize("targets, post", [(1, "NONE"), (1, "PROBIT"), (2, "NONE"), (3, "SOFTMAX")])
def test_linear_regressor(targets: int, post: str) -> None:
    x = X / 8 if post == "PROBIT" else X  # keep PROBIT's argument inside (0, 1) mostly
    same_as_ort(ml("LinearRegressor", [("y", TP.FLOAT)], coefficients=RNG.normal(size=targets * F).tolist(),
                   intercepts=[0.3] * targets, targets=targets, post_transform=post), x)


def _svm_attrs(classes: int, kernel: str, per_class: list[int]) -> dict[str, Any]:
    n_sv = sum(per_class)
    pairs = classes * (classes - 1) // 2
    return dict(kernel_type=kernel, kernel_params=[0.3, 0.5, 2.0], vectors_per_class=per_class,
                support_vectors=RNG.normal(size=n_sv * F).round(3).tolist(),
                coefficients=RNG.normal(size=(classes - 1) * n_sv).round(3).tolist(),
                rho=RNG.normal(size=pairs).round(3).tolist(),
                classlabels_ints=list(range(10, 10 + classes)))


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("classes", [2, 3])
def test_svm_classifier(kernel: str, classes: int) -> None:
    per_class = [3, 4, 2][:classes]
    same_as_ort(ml("SVMClassifier", CLASSIFIER, **_svm_attrs(classes, kernel, per_class)))


@pytest.mark.parametrize("post", ["LOGISTIC", "SOFTMAX"])
def test_svm_classifier_binary_with_post_transform(post: str) -> None:
    same_as_ort(ml("SVMClassifier", CLASSIFIER, post_transform=post,
                   **_svm_attrs(2, "RBF", [4, 3])))


def test_svm_classifier_liblinear() -> None:
    same_as_ort(ml("SVMClassifier", CLASSIFIER, kernel_type="LINEAR", kernel_params=[0.0, 0.0, 0.0], coefficients=RNG.normal(size=3 * F).tolist(),
                   rho=[0.2], classlabels_ints=[1, 2, 3]))


def test_svm_probability_estimates_are_lowered() -> None:
    """libsvm's pairwise coupling: its numbers are checked in test_svm_probability.py."""
    model = ml("SVMClassifier", CLASSIFIER, prob_a=[-1.0], prob_b=[0.1], **_svm_attrs(2, "RBF", [2, 2]))
    assert check(ir.serde.deserialize_model(model)) == []


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(kernel: str, one_class: int) -> None:
    n_sv = 5
    same_as_ort(ml("SVMRegressor", [("y", TP.FLOAT)], kernel_type=kernel, kernel_params=[0.3, 0.5, 3.0],
                   n_supports=n_sv, support_vectors=RNG.normal(size=n_sv * F).tolist(),
                   coefficients=RNG.normal(size=n_sv).tolist(), rho=[0.1], one_class=one_class))


def test_svm_regressor_liblinear() -> None:
    same_as_ort(ml("SVMRegressor", [("y", TP.FLOAT)], kernel_type="LINEAR", n_supports=0, kernel_params=[0.0, 0.0, 0.0],
                   coefficients=[0.5, -1.0, 2.0], rho=[0.3]))

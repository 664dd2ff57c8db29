"""``SVC(probability=True)``: libsvm's pairwise coupling lowered to standard ONNX (a Loop of its
coordinate-descent sweeps), against onnxruntime's SVMClassifier on one-node models and against
scikit-learn's ``predict_proba`` on fitted estimators; the routes to Core ML (MIL evaluator) and
TensorRT (tensorrt-rtx build on the CPU); and scikit-learn's deprecation warnings kept off the
user's stderr."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from typing import Any

import numpy as np
import onnx_ir as ir
import pytest
from mlt_models import assert_same, lowered, run_ort, single_node_model, varies
from onnx import TensorProto as TP
from onnx import helper as oh

from unframe.passes.ml_to_tensor import check

pytest.importorskip("sklearn", reason="needs scikit-learn")
pytest.importorskip("skl2onnx", reason="needs skl2onnx")

import unframe  # noqa: E402

RNG = np.random.default_rng(0)
F = 4
X = RNG.normal(size=(300, F)).astype(np.float32)
CLASSIFIER = [("label", TP.INT64), ("probabilities", TP.FLOAT)]


def svm_with_estimates(classes: int, kernel: str, **extra: Any) -> Any:
    per_class = [3, 4, 2, 3][:classes]
    n_sv, pairs = sum(per_class), classes * (classes - 1) // 2
    attrs = dict(kernel_type=kernel, kernel_params=[0.3, 0.5, 2.0], vectors_per_class=per_class,
                 support_vectors=RNG.normal(size=n_sv * F).round(3).tolist(),
                 coefficients=RNG.normal(size=(classes - 1) * n_sv).round(3).tolist(),
                 rho=RNG.normal(size=pairs).round(3).tolist(), classlabels_ints=list(range(5, 5 + classes)),
                 prob_a=(-RNG.uniform(0.5, 3.0, size=pairs)).round(3).tolist(),
                 prob_b=RNG.normal(scale=0.3, size=pairs).round(3).tolist(), **extra)
    node = oh.make_node("SVMClassifier", ["X"], ["label", "probabilities"], domain="ai.onnx.ml", name="svc",
                        **attrs)
    return single_node_model(node, F, outputs=CLASSIFIER, ml_opset=1)


@pytest.mark.parametrize("kernel", ["LINEAR", "RBF", "POLY", "SIGMOID"])
@pytest.mark.parametrize("classes", [2, 3, 4])
def test_coupled_probabilities_match_onnxruntime(classes: int, kernel: str) -> None:
    model = svm_with_estimates(classes, kernel)
    ref = run_ort(model, {"X": X})
    assert varies([ref[1]]), "constant reference probabilities"
    low, report = lowered(model)
    assert report.lowered and not any(n.domain == "ai.onnx.ml" for n in low.graph.node)
    assert any(n.op_type == "Loop" for n in low.graph.node)
    got = run_ort(low, {"X": X})
    np.testing.assert_allclose(got[1].sum(axis=1), 1.0, atol=1e-5)
    assert_same(ref, got)


def test_estimates_with_a_post_transform_or_missing_pairs_are_refused() -> None:
    model = svm_with_estimates(3, "RBF", post_transform="SOFTMAX")
    reasons = [b.reason for b in check(ir.serde.deserialize_model(model))]
    assert reasons == ["post_transform SOFTMAX on probability estimates"]
    short = svm_with_estimates(3, "RBF")
    attr = next(a for a in short.graph.node[0].attribute if a.name == "prob_a")
    del attr.floats[-1]
    reasons = [b.reason for b in check(ir.serde.deserialize_model(short))]
    assert len(reasons) == 1 and "one per pair: 3" in reasons[0]


def fitted_svc(classes: int, kernel: str = "rbf") -> Any:
    from sklearn.svm import SVC

    y = np.digitize(X[:, 0] + 0.5 * X[:, 1] * X[:, 2], np.quantile(X[:, 0], np.linspace(0, 1, classes + 1)[1:-1]))
    with warnings.catch_warnings():  # 1.9 deprecates probability=True: the fit warns, not unframe
        warnings.simplefilter("ignore", FutureWarning)
        return SVC(probability=True, kernel=kernel, random_state=0).fit(X[:200], y[:200])


@pytest.mark.parametrize("classes, kernel", [(2, "rbf"), (3, "rbf"), (4, "linear"), (5, "poly")])
def test_lowered_svc_gives_scikit_learns_predict_proba(classes: int, kernel: str) -> None:
    """The same numbers as libsvm's coupling (which stops each row at its own sweep) to float32
    rounding, and the vote's label."""
    from skl2onnx import to_onnx

    svc = fitted_svc(classes, kernel)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        proto = to_onnx(svc, X[:1], options={"zipmap": False}, target_opset={"": 18, "ai.onnx.ml": 3})
        expected = svc.predict_proba(X)
    low, _ = lowered(proto)
    label, proba = run_ort(low, {"X": X})
    np.testing.assert_array_equal(label, svc.predict(X))
    assert np.abs(proba - expected).max() < 2e-5
    assert expected.std(axis=0).min() > 0.05  # probabilities that vary: the check can fail


def passed(result: Any, *stages: str) -> None:
    by_stage = {s.stage: s for s in result.report.stages}
    for stage in ("export", "lower", *stages):
        s = by_stage[stage]
        assert s.status == "passed" or (stage == "backend" and s.status == "skipped"), s.summary()


def test_svc_with_probabilities_to_coreml() -> None:
    """Held out before: the one estimator that reached neither Core ML nor TensorRT. The coupling
    stays float32 in the fp16 program (its nodes are marked KEEP_FP32)."""
    pytest.importorskip("coremltools", reason="needs coremltools")
    result = unframe.convert(fitted_svc(3), to="coreml", sample_inputs=X[:40])
    passed(result, "backend")
    backend = next(s for s in result.report.stages if s.stage == "backend")
    assert backend.status == "passed"  # the MIL evaluator ran the program


def test_svc_with_probabilities_builds_for_tensorrt() -> None:
    pytest.importorskip("tensorrt_rtx", reason="needs tensorrt-rtx")
    result = unframe.convert(fitted_svc(3), to="tensorrt", sample_inputs=X[:40])
    passed(result, "backend")
    assert isinstance(result.model, bytes) and len(result.model) > 1000


SCRIPT = textwrap.dedent("""
    import sys, warnings
    import numpy as np
    from sklearn.svm import SVC
    import unframe
    X = np.random.default_rng(0).normal(size=(120, 4)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        svc = SVC(probability=True, random_state=0).fit(X, (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5))
    print("---- converting", file=sys.stderr, flush=True)
    unframe.convert(svc, to="onnx", sample_inputs=X[:20])
    print("---- done", file=sys.stderr, flush=True)
""")


def test_scikit_learn_warnings_stay_off_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    """scikit-learn 1.9 warns (FutureWarning) each time skl2onnx reads ``probA_``; through
    unframe's conversion, nothing of it reaches stderr. A child process: pytest records warnings
    raised in the test itself instead of printing them."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT], timeout=300)
    assert proc.returncode == 0
    err = capfd.readouterr().err
    converting = err[err.index("---- converting"):err.index("---- done")]
    assert "Warning" not in converting, converting

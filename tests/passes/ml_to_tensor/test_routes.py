"""scikit-learn, XGBoost and LightGBM models through whole routes with the real runtimes: ONNX
with ``ml_to_tensor`` (onnxruntime), Core ML (package written by coremltools, checked by the MIL
evaluator at the default fp16 precision) and TensorRT (parsed and built on the CPU by
tensorrt-rtx; running the engine needs a GPU and is reported as skipped). Every parity stage must
pass, labels exactly; the route and provenance state the tree strategy and the host mappings."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="needs scikit-learn")
pytest.importorskip("skl2onnx", reason="needs skl2onnx")

import unframe  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.normal(size=(300, 5)).astype(np.float32)
Y3 = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 0.5)
Y_REG = X[:, 0] * 2 - X[:, 1] + np.sin(3 * X[:, 2])
X_NAN = X.copy()
X_NAN[::5, 1] = np.nan
X_NAN[::7, 3] = np.nan


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _backend_available(name: str) -> bool:
    from unframe.converters.registry import BACKENDS

    return BACKENDS.get(name).available()


def passed(result: Any, *stages: str) -> None:
    by_stage = {s.stage: s for s in result.report.stages}
    for stage in ("export", "lower", *stages):
        assert stage in by_stage, f"no {stage} parity stage"
        s = by_stage[stage]
        assert s.status == "passed" or (stage == "backend" and s.status == "skipped"), s.summary()
        if s.status == "passed":
            assert not s.weak, s.summary()


def lower_stage(result: Any) -> Any:
    return next(s for s in result.route.stages if s.kind == "lower")


def test_random_forest_to_coreml_keeps_labels_at_fp16() -> None:
    """fp16 is Core ML's default; the lowered comparisons and sums stay fp32, so labels match."""
    pytest.importorskip("coremltools", reason="needs coremltools")
    from sklearn.ensemble import RandomForestClassifier

    model = RandomForestClassifier(12, max_depth=6, random_state=0).fit(X, Y3)
    result = unframe.convert(model, to="coreml", sample_inputs=X[:80])
    passed(result, "backend")
    assert "perfect" in lower_stage(result).detail
    notes = json.loads(result.provenance["notes"])
    assert any("12 trees" in n and "perfect" in n for n in notes)
    assert "label" in result.flow.export.exact_outputs


def test_hist_gradient_boosting_with_missing_values_to_tensorrt() -> None:
    pytest.importorskip("tensorrt_rtx", reason="needs tensorrt-rtx")
    from sklearn.ensemble import HistGradientBoostingClassifier

    model = HistGradientBoostingClassifier(max_iter=20, random_state=0).fit(X_NAN, Y3)
    result = unframe.convert(model, to="tensorrt", sample_inputs=X_NAN[:80])
    passed(result, "backend")
    assert any(np.isnan(f["X"]).any() for f in result.flow.feeds)  # NaN rows were compared
    backend = next(s for s in result.report.stages if s.stage == "backend")
    assert backend.status == "passed" or "CUDA" in backend.reason


def test_column_transformer_with_string_columns_and_labels_to_coreml() -> None:
    """String inputs and string class labels cross to Core ML as indices under stated mappings."""
    pytest.importorskip("coremltools", reason="needs coremltools")
    import pandas as pd
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    df = pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "city": RNG.choice(["LA", "NY", "SF"], len(X))})
    y = np.array(["low", "mid", "high"], dtype=object)[Y3]
    pipe = Pipeline([("prep", ColumnTransformer([("num", StandardScaler(), ["a", "b"]),
                                                 ("cat", OneHotEncoder(), ["city"])])),
                     ("clf", LogisticRegression(max_iter=300))]).fit(df, y)
    result = unframe.convert(pipe, to="coreml", sample_inputs=df.iloc[:60])
    passed(result, "backend")
    mapping = next(n for n in result.notes if "host-side mappings" in n)
    stated = json.loads(mapping.split(": ", 1)[1])
    assert sorted(stated["inputs"]["city"]["vocabulary"]) == ["LA", "NY", "SF"]
    assert sorted(stated["outputs"]["label"]["labels"]) == ["high", "low", "mid"]


@pytest.mark.parametrize("lib", ["xgboost", "lightgbm"])
def test_boosting_libraries_to_coreml(lib: str) -> None:
    pytest.importorskip("coremltools", reason="needs coremltools")
    module = pytest.importorskip(lib, reason=f"needs {lib}")
    if lib == "xgboost":
        model = module.XGBClassifier(n_estimators=10, max_depth=3).fit(X_NAN, Y3)
    else:
        model = module.LGBMRegressor(n_estimators=10, verbose=-1).fit(X_NAN, Y_REG)
    result = unframe.convert(model, to="coreml", sample_inputs=X_NAN[:80])
    passed(result, "backend")


def test_svc_to_onnx_with_ml_to_tensor_raises_the_opset_first() -> None:
    """skl2onnx writes an SVC at opset 9; the lowering writes opset-13 ops, so it converts first."""
    from sklearn.svm import SVC

    model = SVC().fit(X, Y3 > 0)
    result = unframe.convert(model, to="onnx", sample_inputs=X[:60], ml_to_tensor=True)
    passed(result)
    graph = result.model
    assert not any(n.domain == "ai.onnx.ml" for n in graph.graph)
    assert "ai.onnx.ml" not in graph.opset_imports and graph.opset_imports[""] >= 13
    assert any("opset 9 -> 13" in n for n in result.notes)


def test_onnx_target_lowers_only_on_request() -> None:
    from sklearn.tree import DecisionTreeRegressor

    model = DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, Y_REG)
    plain = unframe.convert(model, to="onnx", sample_inputs=X[:40], explain=True)
    assert not any(s.kind == "lower" for s in plain.route.stages)
    asked = unframe.convert(model, to="onnx", sample_inputs=X[:40], ml_to_tensor=True)
    passed(asked)
    # a CPU runtime: perfect traversal (GEMM ran a depth-3 forest 3-5x slower, bench/ml_to_tensor.py)
    assert "1 trees, depth 3: perfect" in lower_stage(asked).detail
    forced = unframe.convert(model, to="onnx", sample_inputs=X[:40], ml_to_tensor=True, tree_strategy="gemm")
    passed(forced)
    assert "1 trees, depth 3: gemm" in lower_stage(forced).detail


def test_tree_strategy_rule_is_the_runtimes() -> None:
    """TensorRT (a GPU runtime) keeps hummingbird's GEMM for shallow trees; CPU runtimes don't."""
    from sklearn.tree import DecisionTreeRegressor

    from unframe.converters.registry import BACKENDS

    assert BACKENDS.get("tensorrt").tree_gemm_max_depth == 3
    assert BACKENDS.get("coreml").tree_gemm_max_depth == BACKENDS.get("onnx").tree_gemm_max_depth == 0
    model = DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, Y_REG)
    onnx_model = unframe.convert(model, to="onnx", sample_inputs=X[:40]).model
    plans = {t: unframe.convert(onnx_model, to=t, explain=True) for t in ("coreml", "tensorrt")}
    details = {t: next(s.detail for s in p.route.stages if s.kind == "lower") for t, p in plans.items()}
    assert "depth 3: perfect" in details["coreml"], details
    assert "depth 3: gemm" in details["tensorrt"], details


def test_explain_of_an_onnx_file_shows_each_ensembles_strategy(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from sklearn.ensemble import GradientBoostingRegressor

    from unframe.cli.main import cli

    model = GradientBoostingRegressor(n_estimators=5, max_depth=5, random_state=0).fit(X, Y_REG)
    src = tmp_path / "gbr.onnx"
    unframe.convert(model, to="onnx", sample_inputs=X[:40], output=src)
    out = CliRunner().invoke(cli, ["convert", str(src), "--to", "tensorrt", "--explain"])
    assert out.exit_code == 0, out.output
    assert "lower" in out.output and "5 trees, depth 5: perfect" in out.output
    forced = CliRunner().invoke(cli, ["convert", str(src), "--to", "onnx", "--ml-to-tensor",
                                      "--tree-strategy", "traversal", "-o", str(tmp_path / "t.onnx")])
    assert forced.exit_code == 0, forced.output
    assert "depth 5: traversal" in forced.output
    written = unframe.load(tmp_path / "t.onnx")
    assert not any(n.domain == "ai.onnx.ml" for n in written.graph)


def test_check_to_coreml_sees_the_lowered_graph(tmp_path: Path) -> None:
    pytest.importorskip("coremltools", reason="needs coremltools")
    from sklearn.ensemble import ExtraTreesClassifier

    model = ExtraTreesClassifier(5, max_depth=4, random_state=0).fit(X, Y3)
    src = tmp_path / "et.onnx"
    unframe.convert(model, to="onnx", sample_inputs=X[:40], output=src)
    result = unframe.check(src, to="coreml")
    assert result, [str(b) for b in result.blockers]
    assert any(s.kind == "lower" for s in result.route.stages)


def test_a_model_without_ml_ops_gets_no_lower_stage(mlp_path: Path) -> None:
    pytest.importorskip("coremltools", reason="needs coremltools")
    route = unframe.convert(mlp_path, to="coreml", explain=True).route
    assert not any(s.kind == "lower" for s in route.stages)


def test_unlowerable_ml_op_is_an_exit_4_blocker_on_coreml(tmp_path: Path) -> None:
    """A CategoryMapper (no lowering): refused before Core ML is touched, naming the op."""
    pytest.importorskip("coremltools", reason="needs coremltools")
    import onnx
    from onnx import TensorProto
    from onnx import helper as oh

    from unframe.errors import UnsupportedError

    node = oh.make_node("CategoryMapper", ["x"], ["y"], domain="ai.onnx.ml", name="mapper",
                        cats_strings=["a", "b"], cats_int64s=[1, 2])
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", TensorProto.STRING, [None])],
                          [oh.make_tensor_value_info("y", TensorProto.INT64, [None])])
    path = tmp_path / "mapper.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("ai.onnx.ml", 3)],
                            ir_version=10), path)
    with pytest.raises(UnsupportedError) as err:
        unframe.convert(path, to="coreml", sample_inputs={"x": np.array(["a", "b", "a"], dtype=object)})
    assert err.value.exit_code == 4
    assert any(b.op == "CategoryMapper" for b in err.value.blockers)


def test_core_ml_classifier_package_from_a_forest() -> None:
    """``class_labels``: a Core ML classifier package (label + {label: probability}), which
    takes one example at a time; the ONNX label and probabilities match it."""
    pytest.importorskip("coremltools", reason="needs coremltools")
    from sklearn.ensemble import RandomForestClassifier

    model = RandomForestClassifier(8, max_depth=5, random_state=0).fit(X, Y3)
    row = X[np.argmax(model.predict_proba(X)[:, 2])][None]  # a row of the last class
    result = unframe.convert(model, to="coreml", sample_inputs=row, static=True,
                             class_labels="0,1,2")
    passed(result, "backend")
    description = result.model.get_spec().description
    assert description.predictedFeatureName and description.predictedProbabilitiesName


@pytest.mark.parametrize("kind", ["hist_gradient_boosting", "lightgbm"])
def test_rows_on_float64_thresholds_go_where_the_estimator_sends_them(kind: str) -> None:
    """Both keep float64 thresholds; the float32 graph holds the largest float32 at or below each,
    so a float32 row lying exactly on one (as rounded) is decided as the estimator decides."""
    from unframe.validate.onnxruntime import OnnxRuntimeRunner

    if kind == "lightgbm":
        lightgbm = pytest.importorskip("lightgbm", reason="needs lightgbm")
        model = lightgbm.LGBMRegressor(n_estimators=8, verbose=-1).fit(X, Y_REG)
        dump = model.booster_.dump_model()["tree_info"]
        stack = [t["tree_structure"] for t in dump]
        splits = []
        while stack:
            node = stack.pop()
            if "threshold" in node:
                splits.append((node["split_feature"], node["threshold"]))
                stack += [node["left_child"], node["right_child"]]
    else:
        from sklearn.ensemble import HistGradientBoostingRegressor

        x64 = np.random.default_rng(1).normal(size=(300, 5))  # float64 data: thresholds too
        model = HistGradientBoostingRegressor(max_iter=10, random_state=0).fit(x64, Y_REG)
        splits = [(int(n["feature_idx"]), float(n["num_threshold"]))
                  for it in model._predictors for p in it for n in p.nodes if not n["is_leaf"]]
    rows = np.repeat(X[:1], len(splits), axis=0).astype(np.float32)
    for i, (feature, threshold) in enumerate(splits):
        rows[i, feature] = np.float32(threshold)  # rounded to nearest: up for about half
    rounded_up = sum(float(np.float32(t)) > t for _, t in splits)
    assert rounded_up > 0
    result = unframe.convert(model, to="onnx", sample_inputs=X[:40], ml_to_tensor=True,
                             float_precision="float")
    got = OnnxRuntimeRunner(result.model).run({"X": rows})["variable"].reshape(-1)
    np.testing.assert_allclose(got, model.predict(rows.astype(np.float64)), atol=1e-5)

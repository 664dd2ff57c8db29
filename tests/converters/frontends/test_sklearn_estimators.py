"""Every estimator family through the sklearn frontend, checked against scikit-learn with
onnxruntime (labels exact, scores within tolerance). Models are fitted here on seeded data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="needs scikit-learn")
pytest.importorskip("skl2onnx", reason="needs skl2onnx")

from unframe.converters.base import ConvertOptions, ExportResult, InputSpec  # noqa: E402
from unframe.converters.registry import FRONTENDS  # noqa: E402
from unframe.validate.compare import StageParity, compare  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.normal(size=(120, 4))
Y_MULTI = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 0.5)
Y_BIN = (X[:, 0] - X[:, 3] > 0).astype(int)
Y_REG = X[:, 0] * 2 - X[:, 1] + 0.1 * X[:, 2] ** 2
X_POS = np.abs(X)
X_NAN = X.copy()
X_NAN[::9, 1] = np.nan
X_STR = np.array(["red", "green", "blue"], dtype=object)[RNG.integers(0, 3, size=(120, 2))]


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    """OpenMP busy-waits when the machine is loaded (HistGradientBoosting fit/predict on 120 rows
    took seconds under a load of 14 on 2 cores); one thread is fast and deterministic."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def convert(model: Any, samples: Any, **options: Any) -> tuple[ExportResult, StageParity]:
    fe = FRONTENDS.get("sklearn")
    export = fe.to_onnx(fe.load(model, ConvertOptions()), InputSpec(samples=samples),
                        ConvertOptions(options=options))
    parity = compare(fe.runner(model, export), OnnxRuntimeRunner(export.model), export.feeds,
                     exact=export.exact_outputs, defaults=export.tolerances)
    return export, parity


def _xgb() -> Any:
    xgboost = pytest.importorskip("xgboost", reason="needs xgboost")
    return xgboost


def _lgbm() -> Any:
    return pytest.importorskip("lightgbm", reason="needs lightgbm")


def cases() -> list[tuple[str, Callable[[], Any], str, str]]:
    """(id, factory, X kind, y kind)."""
    from sklearn import (
        cluster,
        decomposition,
        ensemble,
        gaussian_process,
        impute,
        isotonic,
        linear_model,
        mixture,
        naive_bayes,
        neighbors,
        neural_network,
        preprocessing,
        svm,
        tree,
    )

    return [
        ("LogisticRegression", lambda: linear_model.LogisticRegression(), "x", "multi"),
        ("LinearRegression", lambda: linear_model.LinearRegression(), "x", "reg"),
        ("Ridge", lambda: linear_model.Ridge(alpha=0.5), "x", "reg"),
        ("Lasso", lambda: linear_model.Lasso(alpha=0.01), "x", "reg"),
        ("SGDClassifier", lambda: linear_model.SGDClassifier(random_state=0), "x", "bin"),
        ("RidgeClassifier", lambda: linear_model.RidgeClassifier(), "x", "bin"),
        ("DecisionTreeClassifier", lambda: tree.DecisionTreeClassifier(max_depth=5, random_state=0), "x", "multi"),
        ("DecisionTreeRegressor", lambda: tree.DecisionTreeRegressor(max_depth=5, random_state=0), "x", "reg"),
        ("RandomForestClassifier", lambda: ensemble.RandomForestClassifier(8, max_depth=4, random_state=0), "x", "multi"),
        ("RandomForestRegressor", lambda: ensemble.RandomForestRegressor(8, max_depth=4, random_state=0), "x", "reg"),
        ("ExtraTreesClassifier", lambda: ensemble.ExtraTreesClassifier(8, max_depth=4, random_state=0), "x", "bin"),
        ("GradientBoostingClassifier", lambda: ensemble.GradientBoostingClassifier(n_estimators=10, random_state=0), "x", "multi"),
        ("GradientBoostingRegressor", lambda: ensemble.GradientBoostingRegressor(n_estimators=10, random_state=0), "x", "reg"),
        ("AdaBoostClassifier", lambda: ensemble.AdaBoostClassifier(n_estimators=10, random_state=0), "x", "bin"),
        ("HistGradientBoostingClassifier-binary", lambda: ensemble.HistGradientBoostingClassifier(max_iter=15, random_state=0), "nan", "bin"),
        ("HistGradientBoostingClassifier-multi", lambda: ensemble.HistGradientBoostingClassifier(max_iter=15, random_state=0), "x", "multi"),
        ("HistGradientBoostingRegressor", lambda: ensemble.HistGradientBoostingRegressor(max_iter=15, random_state=0), "nan", "reg"),
        ("HistGradientBoostingRegressor-poisson", lambda: ensemble.HistGradientBoostingRegressor(loss="poisson", max_iter=15), "x", "pos"),
        ("SVC-binary", lambda: svm.SVC(), "x", "bin"),
        ("SVC-multi", lambda: svm.SVC(), "x", "multi"),
        ("SVC-probability", lambda: svm.SVC(probability=True, random_state=0), "x", "multi"),
        ("LinearSVC", lambda: svm.LinearSVC(), "x", "bin"),
        ("SVR", lambda: svm.SVR(), "x", "reg"),
        ("KNeighborsClassifier", lambda: neighbors.KNeighborsClassifier(5), "x", "multi"),
        ("KNeighborsRegressor", lambda: neighbors.KNeighborsRegressor(5), "x", "reg"),
        ("GaussianNB", lambda: naive_bayes.GaussianNB(), "x", "multi"),
        ("MultinomialNB", lambda: naive_bayes.MultinomialNB(), "pos", "multi"),
        ("BernoulliNB", lambda: naive_bayes.BernoulliNB(), "x", "bin"),
        ("MLPClassifier", lambda: neural_network.MLPClassifier(hidden_layer_sizes=(8,), max_iter=300, random_state=0), "x", "multi"),
        ("MLPRegressor", lambda: neural_network.MLPRegressor(hidden_layer_sizes=(8,), max_iter=300, random_state=0), "x", "reg"),
        ("KMeans", lambda: cluster.KMeans(3, n_init=1, random_state=0), "x", "none"),
        ("MiniBatchKMeans", lambda: cluster.MiniBatchKMeans(3, n_init=1, random_state=0), "x", "none"),
        ("IsolationForest", lambda: ensemble.IsolationForest(n_estimators=10, random_state=0), "x", "none"),
        ("OneClassSVM", lambda: svm.OneClassSVM(nu=0.2), "x", "none"),
        ("LocalOutlierFactor", lambda: neighbors.LocalOutlierFactor(novelty=True), "x", "none"),
        ("GaussianMixture", lambda: mixture.GaussianMixture(2, random_state=0), "x", "none"),
        ("PCA", lambda: decomposition.PCA(2), "x", "none"),
        ("TruncatedSVD", lambda: decomposition.TruncatedSVD(2, random_state=0), "x", "none"),
        ("StandardScaler", lambda: preprocessing.StandardScaler(), "x", "none"),
        ("MinMaxScaler", lambda: preprocessing.MinMaxScaler(), "x", "none"),
        ("RobustScaler", lambda: preprocessing.RobustScaler(), "x", "none"),
        ("SimpleImputer", lambda: impute.SimpleImputer(strategy="median"), "nan", "none"),
        ("OneHotEncoder", lambda: preprocessing.OneHotEncoder(), "str", "none"),
        ("IsotonicRegression", lambda: isotonic.IsotonicRegression(out_of_bounds="clip"), "1d", "reg"),
        ("GaussianProcessClassifier-binary", lambda: gaussian_process.GaussianProcessClassifier(random_state=0), "x", "bin"),
        ("GaussianProcessClassifier-multi", lambda: gaussian_process.GaussianProcessClassifier(random_state=0), "x", "multi"),
        ("XGBClassifier", lambda: _xgb().XGBClassifier(n_estimators=8, max_depth=3), "x", "multi"),
        ("XGBRegressor", lambda: _xgb().XGBRegressor(n_estimators=8, max_depth=3), "x", "reg"),
        ("LGBMClassifier", lambda: _lgbm().LGBMClassifier(n_estimators=8, verbose=-1), "x", "multi"),
        ("LGBMRegressor", lambda: _lgbm().LGBMRegressor(n_estimators=8, verbose=-1), "x", "reg"),
    ]


CASES = cases()


def data(x_kind: str, y_kind: str) -> tuple[np.ndarray, np.ndarray | None]:
    x = {"x": X, "pos": X_POS, "nan": X_NAN, "str": X_STR, "1d": X[:, 0]}[x_kind]
    y = {"multi": Y_MULTI, "bin": Y_BIN, "reg": Y_REG, "pos": np.exp(X[:, 0] / 2),
         "none": None}[y_kind]
    if x_kind == "1d":
        y = X[:, 0] ** 3 + 0.1 * RNG.normal(size=len(X))
    return x, y


@pytest.mark.parametrize("case_id, factory, x_kind, y_kind", CASES, ids=[c[0] for c in CASES])
def test_estimator_matches_sklearn(case_id: str, factory: Callable[[], Any], x_kind: str,
                                   y_kind: str) -> None:
    import warnings

    from sklearn.base import is_classifier

    x, y = data(x_kind, y_kind)
    model = factory()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(x, y) if y is not None else model.fit(x)
    export, parity = convert(model, x[:60])
    assert parity, parity.summary()
    assert parity.cases == 2  # dynamic batch: all samples and a smaller batch
    names = [v.name for v in export.model.graph.outputs]
    if is_classifier(model):
        assert names == ["label", "probabilities"]
        assert export.exact_outputs == ["label"]
        assert not any(n.op_type == "ZipMap" for n in export.model.graph)  # plain tensors
    if type(model).__name__ in ("KMeans", "MiniBatchKMeans", "IsolationForest", "OneClassSVM",
                                "LocalOutlierFactor", "GaussianMixture"):
        assert export.exact_outputs == ["label"]
    assert export.tool == "skl2onnx" and export.route.startswith("skl2onnx")


@pytest.mark.parametrize("validate", [True, False])
def test_isolation_forest_converts_with_and_without_validation(validate: bool) -> None:
    """skl2onnx converts it; unframe used to refuse it while exporting (no reference method for
    its outputs), so the suggested --no-validate failed the same way."""
    from sklearn.ensemble import IsolationForest

    import unframe

    x = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    model = IsolationForest(n_estimators=10, random_state=0).fit(x)
    result = unframe.convert(model, to="onnx", sample_inputs=x[:8], validate=validate)
    assert [v.name for v in result.model.graph.outputs] == ["label", "scores"]
    assert bool(result.report.stages) == validate
    if validate:
        assert result.report, result.report


def test_outputs_with_no_known_method_convert_and_only_parity_refuses() -> None:
    """NearestNeighbors' outputs (indices, distances) map to no estimator method: the conversion
    needs no reference, so it succeeds; asking for a reference (parity) says to skip validation."""
    from sklearn.neighbors import NearestNeighbors

    from unframe.errors import UnsupportedError

    model = NearestNeighbors(n_neighbors=2, radius=None).fit(X)
    fe = FRONTENDS.get("sklearn")
    export = fe.to_onnx(fe.load(model, ConvertOptions()), InputSpec(samples=X[:10]), ConvertOptions())
    assert len(export.model.graph.outputs) == 2 and export.exact_outputs == []
    assert any("precision auto: kept float32" in n for n in export.notes)
    with pytest.raises(UnsupportedError, match="no known method mapping") as err:
        fe.runner(model, export)
    assert "--no-validate" in err.value.hint


def test_at_least_25_estimator_types() -> None:
    kinds = {c[0].split("-")[0] for c in CASES}
    assert len(kinds) >= 25


def test_extensions_are_noted_and_domain_free() -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.gaussian_process import GaussianProcessClassifier

    for model in (HistGradientBoostingClassifier(max_iter=5).fit(X, Y_BIN),
                  GaussianProcessClassifier().fit(X[:40], Y_BIN[:40])):
        export, parity = convert(model, X[:30])
        assert parity, parity.summary()
        assert f"{type(model).__name__} converted by unframe extension" in export.notes
        # only standard domains: no vendor op (skl2onnx's GPC used a custom Solve)
        assert {n.domain for n in export.model.graph} <= {"", "ai.onnx.ml"}


def test_why_skl2onnx_hist_gradient_boosting_fails() -> None:
    """The gap the extension fills: skl2onnx's tree walker mixes Python bools into an INT list."""
    import onnx
    from skl2onnx.common.tree_ensemble import (
        add_tree_to_attribute_pairs_hist_gradient_boosting,
        get_default_tree_regressor_attribute_pairs,
    )
    from sklearn.ensemble import HistGradientBoostingRegressor

    model = HistGradientBoostingRegressor(max_iter=2).fit(X, Y_REG)
    attrs = get_default_tree_regressor_attribute_pairs()
    add_tree_to_attribute_pairs_hist_gradient_boosting(attrs, False, model._predictors[0][0], 0, 1.0,
                                                       0, False, True, dtype=np.float32)
    with pytest.raises((TypeError, ValueError)):
        onnx.helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml",
                              n_targets=1, **attrs)


def test_hist_gradient_boosting_categorical_is_refused() -> None:
    import pandas as pd
    from sklearn.ensemble import HistGradientBoostingClassifier

    from unframe.errors import UnsupportedError

    df = pd.DataFrame({"a": X[:, 0], "c": pd.Categorical(np.where(X[:, 1] > 0, "x", "y"))})
    model = HistGradientBoostingClassifier(max_iter=3, categorical_features=[False, True])
    model.fit(df.assign(c=df.c.cat.codes), Y_BIN)
    with pytest.raises(UnsupportedError, match="categorical"):
        convert(model, df.assign(c=df.c.cat.codes).to_numpy()[:10])


def test_pipeline_with_column_transformer_over_dataframe() -> None:
    import pandas as pd
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    rng = np.random.default_rng(1)
    n = 150
    df = pd.DataFrame({"age": rng.normal(40, 10, n), "income": rng.normal(5, 2, n),
                       "city": rng.choice(["paris", "lyon", "nice"], n),
                       "kids": rng.integers(0, 4, n)})
    df.loc[::11, "income"] = np.nan
    y = ((df.age > 40) & (df.city != "paris")).astype(int)
    pre = ColumnTransformer([
        ("num", make_pipeline(SimpleImputer(), StandardScaler()), ["age", "income", "kids"]),
        ("cat", OneHotEncoder(handle_unknown="ignore"), ["city"])])
    model = Pipeline([("pre", pre), ("clf", LogisticRegression())]).fit(df, y)
    export, parity = convert(model, df.iloc[:60])
    assert parity, parity.summary()
    inputs = {v.name: v.dtype for v in export.model.graph.inputs}
    import onnx_ir as ir

    assert inputs == {"age": ir.DataType.FLOAT, "income": ir.DataType.FLOAT,
                      "city": ir.DataType.STRING, "kids": ir.DataType.INT64}


@pytest.mark.parametrize("lib", ["xgboost", "lightgbm"])
def test_boosting_library_inside_pipeline(lib: str) -> None:
    pytest.importorskip(lib, reason=f"needs {lib}")
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    est = (_xgb().XGBClassifier(n_estimators=5, max_depth=3) if lib == "xgboost"
           else _lgbm().LGBMClassifier(n_estimators=5, verbose=-1))
    model = make_pipeline(StandardScaler(), est).fit(X, Y_MULTI)
    export, parity = convert(model, X[:50])
    assert parity, parity.summary()
    assert any("onnxmltools" in n for n in export.notes)
    assert "onnxmltools" in export.tool_versions


@pytest.mark.parametrize("kind", ["HistGradientBoostingClassifier", "GaussianProcessClassifier"])
def test_extension_classifiers_with_string_classes(kind: str) -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.gaussian_process import GaussianProcessClassifier

    labels = np.array(["cat", "dog", "eel"], dtype=object)[Y_MULTI]
    model = (HistGradientBoostingClassifier(max_iter=5) if kind.startswith("Hist")
             else GaussianProcessClassifier()).fit(X[:60], labels[:60])
    for precision in ("float", "double"):
        export, parity = convert(model, X[:40], float_precision=precision)
        assert parity, parity.summary()
        got = OnnxRuntimeRunner(export.model).run(export.feeds[0])["label"]
        assert set(got.tolist()) <= {"cat", "dog", "eel"}


@pytest.mark.parametrize("precision", ["float", "double"])
def test_isotonic_nan_outside_range_on_both_routes(precision: str) -> None:
    from sklearn.isotonic import IsotonicRegression

    x = X[:, 0]
    model = IsotonicRegression(out_of_bounds="nan", increasing=False).fit(x[:60], -x[:60] ** 3)
    samples = np.concatenate([x[60:], model.X_thresholds_])  # some outside, every threshold
    export, parity = convert(model, samples, float_precision=precision)
    assert parity, parity.summary()
    assert np.isnan(model.predict(samples)).any()  # the case is exercised

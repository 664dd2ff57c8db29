"""The sklearn frontend's inputs and options: files (.skops, trusted pickles), inferred input
types, zipmap, the precision routes, bad input, and the public API and CLI."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="needs scikit-learn")
pytest.importorskip("skl2onnx", reason="needs skl2onnx")

from sklearn.base import BaseEstimator, ClassifierMixin  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

from unframe.converters.base import ConvertOptions, ExportResult, InputSpec  # noqa: E402
from unframe.converters.registry import FRONTENDS  # noqa: E402
from unframe.errors import ConversionError, InputError, TrustRequiredError, UnsupportedError, UsageError  # noqa: E402
from unframe.validate.compare import compare  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.normal(size=(80, 3))
Y = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 0.7)


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def logreg() -> LogisticRegression:
    return LogisticRegression().fit(X, Y)


def frontend() -> Any:
    return FRONTENDS.get("sklearn")


def export(model: Any, samples: Any = None, **options: Any) -> ExportResult:
    return frontend().to_onnx(model, InputSpec(samples=samples), ConvertOptions(options=options))


def check(model: Any, exp: ExportResult) -> None:
    parity = compare(frontend().runner(model, exp), OnnxRuntimeRunner(exp.model), exp.feeds,
                     exact=exp.exact_outputs, defaults=exp.tolerances)
    assert parity, parity.summary()


# --- registration and detection --------------------------------------------------------------

def test_registered_with_suffixes_and_object_detection(logreg: LogisticRegression) -> None:
    fe = frontend()
    assert fe.name == "sklearn" and fe.extra == "sklearn"
    assert set(fe.suffixes) == {".skops", ".pkl", ".joblib", ".json", ".ubj", ".txt"}
    assert fe.accepts_object(logreg)
    assert not fe.accepts_object(np.zeros(3))


def test_boosting_wrappers_are_detected() -> None:
    xgboost = pytest.importorskip("xgboost", reason="needs xgboost")
    assert frontend().accepts_object(xgboost.XGBClassifier())


def test_supported_estimators_lists_every_route() -> None:
    from unframe.converters.frontends.sklearn import supported_estimators

    rows = dict(supported_estimators())
    for name in ("HistGradientBoostingClassifier", "HistGradientBoostingRegressor",
                 "IsotonicRegression", "GaussianProcessClassifier"):
        assert rows[name] == "unframe extension"
    assert rows["LogisticRegression"] == "skl2onnx"
    if pytest.importorskip("xgboost", reason="needs xgboost"):
        assert rows["XGBClassifier"] == "onnxmltools"
    assert len(rows) > 80


# --- files -----------------------------------------------------------------------------------

def test_skops_file_loads_by_default(tmp_path: Path, logreg: LogisticRegression) -> None:
    import skops.io as sio

    path = tmp_path / "model.skops"
    sio.dump(logreg, path)
    loaded = frontend().load(path, ConvertOptions())
    np.testing.assert_array_equal(loaded.predict(X), logreg.predict(X))


def test_skops_untrusted_types_are_listed(tmp_path: Path) -> None:
    import skops.io as sio

    path = tmp_path / "custom.skops"
    sio.dump(Doubler().fit(X, Y), path)
    name = f"{Doubler.__module__}.Doubler"
    with pytest.raises(TrustRequiredError, match=name) as err:
        frontend().load(path, ConvertOptions())
    assert name in err.value.details["untrusted_types"]
    loaded = frontend().load(path, ConvertOptions(trust=True))
    assert isinstance(loaded, Doubler)
    np.testing.assert_array_equal(loaded.predict(X), Doubler().fit(X, Y).predict(X))


@pytest.mark.parametrize("suffix", [".pkl", ".joblib"])
def test_pickles_need_trust(tmp_path: Path, logreg: LogisticRegression, suffix: str) -> None:
    import joblib

    path = tmp_path / f"model{suffix}"
    if suffix == ".pkl":
        path.write_bytes(pickle.dumps(logreg))
    else:
        joblib.dump(logreg, path)
    with pytest.raises(TrustRequiredError, match="--trust"):
        frontend().load(path, ConvertOptions())
    loaded = frontend().load(path, ConvertOptions(trust=True))
    np.testing.assert_array_equal(loaded.predict(X), logreg.predict(X))


def test_corrupt_skops_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.skops"
    path.write_bytes(b"not a zip")
    with pytest.raises(InputError, match="broken.skops"):
        frontend().load(path, ConvertOptions())


# --- inferred inputs -------------------------------------------------------------------------

def test_inputs_from_n_features_without_samples(logreg: LogisticRegression) -> None:
    exp = export(logreg)
    (inp,) = exp.model.graph.inputs
    assert inp.name == "X" and inp.shape[1] == 3
    assert [f["X"].shape[0] for f in exp.feeds] == [5, 3]  # generated, two batch sizes
    check(logreg, exp)


def test_dataframe_columns_without_samples_read_encoder_categories() -> None:
    import onnx_ir as ir
    import pandas as pd
    from sklearn.compose import make_column_transformer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    df = pd.DataFrame({"a": X[:, 0], "b": X[:, 1],
                       "color": np.array(["r", "g", "b"])[RNG.integers(0, 3, len(X))]})
    model = make_pipeline(
        make_column_transformer((StandardScaler(), ["a", "b"]), (OneHotEncoder(), ["color"])),
        LogisticRegression()).fit(df, Y)
    exp = export(model)
    assert {v.name: v.dtype for v in exp.model.graph.inputs} == {
        "a": ir.DataType.FLOAT, "b": ir.DataType.FLOAT, "color": ir.DataType.STRING}
    assert set(exp.feeds[0]["color"].ravel()) <= {"r", "g", "b"}
    check(model, exp)


def test_npz_style_samples_by_input_name(logreg: LogisticRegression) -> None:
    exp = export(logreg, [{"X": X[:10].astype(np.float32)}])
    assert exp.feeds[0]["X"].shape == (10, 3)
    check(logreg, exp)


def test_static_batch(logreg: LogisticRegression) -> None:
    fe = frontend()
    exp = fe.to_onnx(logreg, InputSpec(samples=X[:7], static=True), ConvertOptions())
    assert exp.model.graph.inputs[0].shape[0] == 7
    assert len(exp.feeds) == 1


# --- outputs and precision ------------------------------------------------------------------

def test_zipmap_option_keeps_zipmap(logreg: LogisticRegression) -> None:
    plain = export(logreg, X[:10])
    assert not any(n.op_type == "ZipMap" for n in plain.model.graph)
    zipped = export(logreg, X[:10], zipmap=True)
    assert any(n.op_type == "ZipMap" for n in zipped.model.graph)
    probs = OnnxRuntimeRunner(zipped.model).run(zipped.feeds[0])["output_probability"]
    ref = frontend().runner(logreg, zipped).run(zipped.feeds[0])["output_probability"]
    assert len(probs) == len(ref) == 10
    for got_row, ref_row in zip(probs, ref, strict=False):
        assert set(got_row) == set(ref_row) == set(logreg.classes_.tolist())
        np.testing.assert_allclose([got_row[c] for c in ref_row], list(ref_row.values()), atol=1e-5)
    from unframe.validate.compare import maps_to_matrix

    np.testing.assert_allclose(maps_to_matrix(probs), maps_to_matrix(ref), atol=1e-5)
    assert maps_to_matrix(np.zeros((2, 2))) is None


def near_threshold_model() -> tuple[Any, np.ndarray]:
    """Values 1e-9 apart: float32 rounds them all to 1.0, so float32 can't keep the split."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    x = (1.0 + np.arange(200) * 1e-9).reshape(-1, 1)
    y = (np.arange(200) >= 100).astype(int)
    return HistGradientBoostingClassifier(max_iter=5, min_samples_leaf=5).fit(x, y), x


def test_precision_auto_switches_to_double_when_float_changes_labels() -> None:
    model, x = near_threshold_model()
    assert 0 < model.predict(x).mean() < 1  # the model does separate the values
    exp = export(model, x)
    assert exp.extra["precision"] == "double" and "double" in exp.route
    assert any("switched to double" in n for n in exp.notes)
    assert exp.feeds[0]["X"].dtype == np.float64
    check(model, exp)
    # the float32 graph, fed the samples as float32, really does change the labels
    float_exp = export(model, x, float_precision="float")
    got = OnnxRuntimeRunner(float_exp.model).run({"X": x.astype(np.float32)})["label"]
    assert (got != model.predict(x)).any()


def test_precision_auto_keeps_float_when_it_reproduces(logreg: LogisticRegression) -> None:
    exp = export(logreg, X[:20])
    assert exp.extra["precision"] == "float" and exp.route == "skl2onnx float32"
    assert any("float32 reproduces" in n for n in exp.notes)


def test_precision_double_on_request(logreg: LogisticRegression) -> None:
    import onnx_ir as ir

    exp = export(logreg, X[:20], precision="double")
    assert exp.model.graph.inputs[0].dtype == ir.DataType.DOUBLE
    check(logreg, exp)


def test_backend_precision_values_are_not_ours(logreg: LogisticRegression) -> None:
    exp = export(logreg, X[:20], precision="fp16")  # coreml/tensorrt's option: ignored here
    assert exp.extra["precision"] == "float"


def test_unknown_precision_is_a_usage_error(logreg: LogisticRegression) -> None:
    with pytest.raises(UsageError, match="half"):
        export(logreg, X[:5], float_precision="half")


def test_double_unavailable_is_reported() -> None:
    from sklearn.svm import LinearSVC

    model = LinearSVC().fit(X, Y > 0)
    with pytest.raises(ConversionError, match="LinearSVC"):
        export(model, X[:10], float_precision="double")


# --- bad input -------------------------------------------------------------------------------

def test_unfitted_estimator() -> None:
    with pytest.raises(InputError, match="LogisticRegression.*not fitted"):
        export(LogisticRegression(), X[:5])


class Doubler(BaseEstimator, ClassifierMixin):
    """A custom estimator skl2onnx has no converter for."""

    def fit(self, x: Any, y: Any) -> Doubler:
        self.classes_ = np.unique(y)
        self.n_features_in_ = np.asarray(x).shape[1]
        return self

    def predict(self, x: Any) -> np.ndarray:
        return np.full(len(x), self.classes_[0])


def test_custom_estimator_names_class_and_hook() -> None:
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), Doubler()).fit(X, Y)
    with pytest.raises(UnsupportedError, match="Doubler") as err:
        export(model, X[:5])
    assert "update_registered_converter" in str(err.value)
    assert [b.op for b in err.value.blockers] == [f"{__name__}.Doubler"]


def test_wrong_number_of_features(logreg: LogisticRegression) -> None:
    with pytest.raises(InputError, match="4 feature.*fitted on 3"):
        export(logreg, RNG.normal(size=(5, 4)))


def test_dataframe_missing_columns() -> None:
    import pandas as pd

    df = pd.DataFrame(X, columns=["a", "b", "c"])
    model = LogisticRegression().fit(df, Y)
    with pytest.raises(InputError, match="lacks column.*c"):
        export(model, df[["a", "b"]])


def test_not_an_estimator() -> None:
    with pytest.raises(InputError, match="not a scikit-learn estimator"):
        frontend().load(object(), ConvertOptions())


# --- public API and CLI ----------------------------------------------------------------------

def test_api_convert(tmp_path: Path, logreg: LogisticRegression) -> None:
    import onnx

    import unframe

    out = tmp_path / "logreg.onnx"
    result = unframe.convert(logreg, to="onnx", sample_inputs=X[:20], output=out)
    assert result.report, result.report.summary()
    assert result.report.stages[0].status == "passed"
    model = onnx.load(out)
    props = {p.key: p.value for p in model.metadata_props}
    assert any("skl2onnx" in v for v in props.values())


def test_api_convert_pickle_needs_trust(tmp_path: Path, logreg: LogisticRegression) -> None:
    import unframe

    path = tmp_path / "m.pkl"
    path.write_bytes(pickle.dumps(logreg))
    with pytest.raises(TrustRequiredError):
        unframe.convert(path, to="onnx", output=tmp_path / "m.onnx")


def test_cli_converts_skops_file(tmp_path: Path, logreg: LogisticRegression) -> None:
    import onnx
    import skops.io as sio
    from click.testing import CliRunner

    from unframe.cli.main import cli

    src, out, samples = tmp_path / "m.skops", tmp_path / "m.onnx", tmp_path / "s.npz"
    sio.dump(logreg, src)
    np.savez(samples, X=X[:12])
    res = CliRunner().invoke(cli, ["convert", str(src), "-o", str(out), "--sample-inputs",
                                   str(samples)])
    assert res.exit_code == 0, res.output
    assert "parity" in res.output and "passed" in res.output
    sess_out = OnnxRuntimeRunner(onnx.load(out)).run({"X": X[:12].astype(np.float32)})
    np.testing.assert_array_equal(sess_out["label"], logreg.predict(X[:12]))


def test_cli_refuses_pickle_without_trust(tmp_path: Path, logreg: LogisticRegression) -> None:
    from click.testing import CliRunner

    from unframe.cli.main import cli

    src = tmp_path / "m.pkl"
    src.write_bytes(pickle.dumps(logreg))
    res = CliRunner().invoke(cli, ["convert", str(src), "-o", str(tmp_path / "m.onnx")])
    assert res.exit_code == TrustRequiredError.exit_code, res.output
    assert "--trust" in res.output


@pytest.mark.parametrize("first", ["PCA", "StandardScaler"])
def test_float32_fitted_pipeline_gets_float32_per_step(tmp_path: Path, first: str) -> None:
    """A pipeline fitted on float32 keeps float32 arrays (PCA) or not (StandardScaler keeps
    float64 statistics) and ends in KMeans, whose Cython refuses another dtype than its
    centers': each step is fed the dtype it was fitted on (this died with 'Buffer dtype
    mismatch', exit 1)."""
    import skops.io as sio
    from click.testing import CliRunner
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from unframe.cli.main import cli

    x = np.random.default_rng(3).normal(size=(120, 5)).astype(np.float32)
    step = PCA(3) if first == "PCA" else StandardScaler()
    model = make_pipeline(step, KMeans(3, n_init=1, random_state=0)).fit(x)
    assert model[-1].cluster_centers_.dtype == np.float32
    src, out, samples = tmp_path / "m.skops", tmp_path / "m.onnx", tmp_path / "s.npz"
    sio.dump(model, src)
    np.savez(samples, X=x[:20])
    res = CliRunner().invoke(cli, ["convert", str(src), "-o", str(out), "--sample-inputs",
                                   str(samples), "--json"])
    assert res.exit_code == 0, res.output
    import json

    stages = json.loads(res.stdout)["parity"]["stages"]
    assert stages and all(s["status"] == "passed" for s in stages)

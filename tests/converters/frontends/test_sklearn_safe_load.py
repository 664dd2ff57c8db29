"""Safe loading by validation: .skops files (and XGBoost/LightGBM model files) whose types skops
does not trust by default load without --trust once unframe has checked their content, and a
crafted file is exit 3 with the reason, before any library code builds or walks it.

Every validated type has a real file that loads and (where skl2onnx converts the estimator)
converts with parity, and at least one crafted variant; ``test_every_validator_is_covered``
fails when a registered validator lacks either.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="needs scikit-learn")
pytest.importorskip("skl2onnx", reason="needs skl2onnx")
pytest.importorskip("skops", reason="needs skops")

import skops.io as sio  # noqa: E402
from sklearn.base import BaseEstimator, ClassifierMixin  # noqa: E402

from tests.converters.frontends.skops_craft import Archive, class_names, ubj_dumps  # noqa: E402
from unframe.converters.base import ConvertOptions, InputSpec  # noqa: E402
from unframe.converters.frontends._sklearn.validators import VALIDATORS  # noqa: E402
from unframe.converters.frontends._sklearn.validators.structure import RULES  # noqa: E402
from unframe.converters.registry import FRONTENDS  # noqa: E402
from unframe.errors import InputError, TrustRequiredError  # noqa: E402
from unframe.validate.compare import compare  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.normal(size=(80, 4))
Y = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 0.5)
Y_BIN = (X[:, 0] - X[:, 3] > 0).astype(int)
Y_REG = X[:, 0] * 2 - X[:, 1] + 0.3 * X[:, 2] ** 2
X_NAN = X.copy()
X_NAN[::7, 1] = np.nan
ROOT = Path(__file__).resolve().parents[3]

_GP = "sklearn.gaussian_process.kernels."
_MI = "sklearn.feature_selection._mutual_info."
_UNI = "sklearn.feature_selection._univariate_selection."
_DM = "sklearn.metrics._dist_metrics."


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    """OpenMP busy-waits on a loaded machine; one thread is fast and deterministic."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def load(path: Path, trust: bool = False) -> Any:
    return FRONTENDS.get("sklearn").load(path, ConvertOptions(trust=trust))


# --- the models -------------------------------------------------------------------------------

def _lib(name: str) -> Any:
    return pytest.importorskip(name, reason=f"needs {name}")


def _knn(metric: str, algorithm: str, **params: Any) -> Callable[[], Any]:
    from sklearn.neighbors import KNeighborsRegressor

    return lambda: KNeighborsRegressor(3, algorithm=algorithm, metric=metric,
                                       metric_params=params or None)


def _gpr(kernel: Callable[[], Any], **params: Any) -> Callable[[], Any]:
    from sklearn.gaussian_process import GaussianProcessRegressor

    return lambda: GaussianProcessRegressor(kernel(), **{"alpha": 1e-2, "random_state": 0, **params})


def models() -> dict[str, tuple[Callable[[], Any], str, str]]:
    """id -> (factory, X kind, y kind); fitted once per module (``fitted``)."""
    from sklearn import (
        calibration,
        ensemble,
        feature_selection,
        gaussian_process,
        impute,
        linear_model,
        multiclass,
        neighbors,
        neural_network,
        pipeline,
        tree,
    )
    from sklearn.gaussian_process import kernels as K  # noqa: N812

    def kbest(fn: Any) -> Callable[[], Any]:
        return lambda: pipeline.make_pipeline(feature_selection.SelectKBest(fn, k=2),
                                              linear_model.LogisticRegression())

    return {
        "DecisionTreeClassifier": (lambda: tree.DecisionTreeClassifier(max_depth=5, random_state=0), "x", "multi"),
        "RandomForestRegressor": (lambda: ensemble.RandomForestRegressor(6, max_depth=5, random_state=0), "x", "reg"),
        "DecisionTreeRegressor-missing": (lambda: tree.DecisionTreeRegressor(max_depth=6, random_state=0), "nan", "missing"),
        "ExtraTreesClassifier": (lambda: ensemble.ExtraTreesClassifier(6, max_depth=4, random_state=0), "x", "bin"),
        "GradientBoostingClassifier": (lambda: ensemble.GradientBoostingClassifier(n_estimators=6, random_state=0), "x", "multi"),
        "IsolationForest": (lambda: ensemble.IsolationForest(n_estimators=6, random_state=0), "x", "none"),
        "HistGradientBoostingRegressor": (lambda: ensemble.HistGradientBoostingRegressor(max_iter=8, random_state=0), "nan", "reg"),
        "KNeighborsClassifier-kd": (lambda: neighbors.KNeighborsClassifier(5, algorithm="kd_tree"), "x", "multi"),
        "KNeighborsRegressor-ball-manhattan": (_knn("manhattan", "ball_tree"), "x", "reg"),
        "KNeighborsRegressor-kd-minkowski3": (lambda: neighbors.KNeighborsRegressor(3, algorithm="kd_tree", p=3), "x", "reg"),
        "KNeighborsRegressor-kd-chebyshev": (_knn("chebyshev", "kd_tree"), "x", "reg"),
        "KNeighborsRegressor-ball-seuclidean": (_knn("seuclidean", "ball_tree", V=np.arange(1, 5.0)), "x", "reg"),
        "KNeighborsRegressor-ball-mahalanobis": (_knn("mahalanobis", "ball_tree", VI=np.eye(4)), "x", "reg"),
        "KNeighborsRegressor-ball-haversine": (_knn("haversine", "ball_tree"), "x2", "reg"),
        "KNeighborsRegressor-ball-canberra": (_knn("canberra", "ball_tree"), "x", "reg"),
        "KNeighborsRegressor-ball-braycurtis": (_knn("braycurtis", "ball_tree"), "x", "reg"),
        **{f"KNeighborsRegressor-ball-{m}": (_knn(m, "ball_tree"), "bool", "reg")
           for m in ("hamming", "jaccard", "dice", "rogerstanimoto", "russellrao",
                     "sokalmichener", "sokalsneath")},
        "LocalOutlierFactor": (lambda: neighbors.LocalOutlierFactor(novelty=True), "x", "none"),
        "MLPClassifier-adam": (lambda: neural_network.MLPClassifier(hidden_layer_sizes=(8,), max_iter=300, random_state=0), "x", "multi"),
        "MLPRegressor-sgd": (lambda: neural_network.MLPRegressor(hidden_layer_sizes=(8,), solver="sgd", max_iter=200, random_state=0), "x", "reg"),
        "GaussianProcessClassifier": (lambda: gaussian_process.GaussianProcessClassifier(random_state=0), "x", "bin"),
        "GaussianProcessRegressor-sum": (_gpr(lambda: K.ConstantKernel() * K.RBF() + K.WhiteKernel()), "x", "reg"),
        "GaussianProcessRegressor-matern": (_gpr(lambda: K.Matern(nu=1.5)), "x", "reg"),
        "GaussianProcessRegressor-rq": (_gpr(lambda: K.RationalQuadratic()), "x", "reg"),
        "GaussianProcessRegressor-periodic": (_gpr(lambda: K.ExpSineSquared() + K.DotProduct() ** 2, alpha=0.1), "x1", "reg"),
        "SimpleImputer": (lambda: impute.SimpleImputer(strategy="median"), "nan", "none"),
        "VotingClassifier": (lambda: ensemble.VotingClassifier(
            [("lr", linear_model.LogisticRegression()), ("t", tree.DecisionTreeClassifier(max_depth=3))],
            voting="soft", flatten_transform=False), "x", "multi"),
        "CalibratedClassifierCV": (lambda: calibration.CalibratedClassifierCV(linear_model.LogisticRegression(), cv=2), "x", "bin"),
        "OneVsRestClassifier-constant": (lambda: multiclass.OneVsRestClassifier(linear_model.LogisticRegression()), "x", "label"),
        "TweedieRegressor": (lambda: linear_model.TweedieRegressor(alpha=0.1), "x", "reg"),
        **{f"SelectKBest-{fn}": (kbest(getattr(feature_selection, fn)), "pos" if fn == "chi2" else "x", "bin")
           for fn in ("f_classif", "f_regression", "r_regression", "chi2", "mutual_info_classif",
                      "mutual_info_regression")},
        "XGBClassifier": (lambda: _lib("xgboost").XGBClassifier(n_estimators=6, max_depth=3), "nan", "multi"),
        "XGBRegressor": (lambda: _lib("xgboost").XGBRegressor(n_estimators=6, max_depth=3), "x", "reg"),
        "XGBRFClassifier": (lambda: _lib("xgboost").XGBRFClassifier(n_estimators=4, max_depth=3), "x", "bin"),
        "XGBRFRegressor": (lambda: _lib("xgboost").XGBRFRegressor(n_estimators=4, max_depth=3), "x", "reg"),
        "LGBMClassifier": (lambda: _lib("lightgbm").LGBMClassifier(n_estimators=6, min_child_samples=5, verbose=-1), "x", "multi"),
        "LGBMRegressor": (lambda: _lib("lightgbm").LGBMRegressor(n_estimators=6, min_child_samples=5, verbose=-1), "nan", "reg"),
    }


MODELS = models()
# The validated types each model's file must contain (checked against the file itself).
COVERS: dict[str, set[str]] = {
    "DecisionTreeClassifier": {"sklearn.tree._tree.Tree"},
    "HistGradientBoostingRegressor": {
        "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
        "sklearn.ensemble._hist_gradient_boosting.binning._BinMapper"},
    "KNeighborsClassifier-kd": {"sklearn.neighbors._kd_tree.KDTree", _DM + "EuclideanDistance64"},
    "KNeighborsRegressor-ball-manhattan": {"sklearn.neighbors._ball_tree.BallTree",
                                           _DM + "ManhattanDistance64"},
    "KNeighborsRegressor-kd-minkowski3": {_DM + "MinkowskiDistance64"},
    "KNeighborsRegressor-kd-chebyshev": {_DM + "ChebyshevDistance64"},
    "KNeighborsRegressor-ball-seuclidean": {_DM + "SEuclideanDistance64"},
    "KNeighborsRegressor-ball-mahalanobis": {_DM + "MahalanobisDistance64"},
    "KNeighborsRegressor-ball-haversine": {_DM + "HaversineDistance64"},
    "KNeighborsRegressor-ball-canberra": {_DM + "CanberraDistance64"},
    "KNeighborsRegressor-ball-braycurtis": {_DM + "BrayCurtisDistance64"},
    **{f"KNeighborsRegressor-ball-{m}": {_DM + name + "Distance64"} for m, name in (
        ("hamming", "Hamming"), ("jaccard", "Jaccard"), ("dice", "Dice"),
        ("rogerstanimoto", "RogersTanimoto"), ("russellrao", "RussellRao"),
        ("sokalmichener", "SokalMichener"), ("sokalsneath", "SokalSneath"))},
    "MLPClassifier-adam": {"sklearn.neural_network._stochastic_optimizers.AdamOptimizer"},
    "MLPRegressor-sgd": {"sklearn.neural_network._stochastic_optimizers.SGDOptimizer"},
    "GaussianProcessClassifier": {"sklearn.gaussian_process._gpc._BinaryGaussianProcessClassifierLaplace",
                                  _GP + "RBF", _GP + "ConstantKernel", _GP + "Product"},
    "GaussianProcessRegressor-sum": {_GP + "Sum", _GP + "WhiteKernel"},
    "GaussianProcessRegressor-matern": {_GP + "Matern"},
    "GaussianProcessRegressor-rq": {_GP + "RationalQuadratic"},
    "GaussianProcessRegressor-periodic": {_GP + "ExpSineSquared", _GP + "DotProduct",
                                          _GP + "Exponentiation"},
    "SimpleImputer": {"numpy.dtype"},
    "VotingClassifier": {"sklearn.utils._bunch.Bunch"},
    "CalibratedClassifierCV": {"sklearn.calibration._CalibratedClassifier",
                               "sklearn.calibration._SigmoidCalibration"},
    "OneVsRestClassifier-constant": {"sklearn.multiclass._ConstantPredictor"},
    "TweedieRegressor": {"sklearn._loss.loss.HalfTweedieLossIdentity"},
    **{f"SelectKBest-{fn}": {(_MI if fn.startswith("mutual") else _UNI) + fn}
       for fn in ("f_classif", "f_regression", "r_regression", "chi2", "mutual_info_classif",
                  "mutual_info_regression")},
    "XGBClassifier": {"xgboost.core.Booster", "xgboost.sklearn.XGBClassifier"},
    "XGBRegressor": {"xgboost.sklearn.XGBRegressor"},
    "XGBRFClassifier": {"xgboost.sklearn.XGBRFClassifier"},
    "XGBRFRegressor": {"xgboost.sklearn.XGBRFRegressor"},
    "LGBMClassifier": {"lightgbm.basic.Booster", "lightgbm.sklearn.LGBMClassifier",
                       "collections.OrderedDict"},
    "LGBMRegressor": {"lightgbm.sklearn.LGBMRegressor"},
}
# skl2onnx can't convert these (its metric or kernel is not implemented; a tree's missing-value
# branches are not in its graph); loading is still checked against the original's predictions.
NO_CONVERSION = {"DecisionTreeRegressor-missing"} | {f"KNeighborsRegressor-ball-{m}" for m in (
    "seuclidean", "mahalanobis", "haversine", "canberra", "braycurtis", "hamming", "jaccard",
    "dice", "rogerstanimoto", "russellrao", "sokalmichener", "sokalsneath")} | {
    "KNeighborsRegressor-kd-chebyshev", "GaussianProcessRegressor-periodic", "XGBRFClassifier",
    "XGBRFRegressor"}


def data(x_kind: str, y_kind: str) -> tuple[np.ndarray, np.ndarray | None]:
    x = {"x": X, "nan": X_NAN, "pos": np.abs(X), "x1": X[:, :1], "x2": X[:, :2], "bool": (X > 0).astype(float)}[x_kind]
    y = {"multi": Y, "bin": Y_BIN, "reg": Y_REG, "none": None,
         "missing": np.where(np.isnan(X_NAN[:, 1]), 5.0, X[:, 0]),  # a split on missingness
         "label": np.c_[Y == 1, np.zeros(len(X), dtype=int)].astype(int)}[y_kind]
    return x, y


_FITTED: dict[str, tuple[Any, np.ndarray]] = {}


def fitted(case: str) -> tuple[Any, np.ndarray]:
    import warnings

    if case not in _FITTED:
        factory, x_kind, y_kind = MODELS[case]
        x, y = data(x_kind, y_kind)
        model = factory()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(x, y) if y is not None else model.fit(x)
        _FITTED[case] = (model, x)
    return _FITTED[case]


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    folder = tmp_path_factory.mktemp("archives")

    def get(case: str) -> Path:
        path = folder / f"{case}.skops"
        if not path.exists():
            sio.dump(fitted(case)[0], path)
        return path

    return get


def outputs(model: Any, x: np.ndarray) -> dict[str, np.ndarray]:
    found = {}
    for method in ("predict", "predict_proba", "decision_function", "transform"):
        if hasattr(model, method):
            try:
                found[method] = np.asarray(getattr(model, method)(x), dtype=float)
            except (AttributeError, NotImplementedError):
                continue
    return found


# --- real files load without --trust ---------------------------------------------------------

@pytest.mark.parametrize("case", list(MODELS))
def test_real_file_loads_without_trust_and_converts(case: str, archives: Callable[[str], Path]) -> None:
    import warnings

    original, x = fitted(case)
    path = archives(case)
    declared = class_names(path)
    assert COVERS.get(case, set()) <= declared, "the file lacks a type this case claims to cover"
    untrusted = set(sio.get_untrusted_types(file=path))
    if case not in ("SimpleImputer",) and "_BinMapper" not in str(COVERS.get(case)):
        assert untrusted, "skops trusts this file by default: the case proves nothing"
    with pytest.raises(Exception):  # noqa: B017 - skops itself refuses it without trust
        sio.load(path) if untrusted else (_ for _ in ()).throw(TypeError("trusted"))
    loaded = load(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want, got = outputs(original, x), outputs(loaded, x)
    assert want and want.keys() == got.keys()
    for method, ref in want.items():
        assert np.std(ref) > 1e-3 or np.abs(ref).max() > 0.1, f"{method} is degenerate"
        np.testing.assert_array_equal(got[method], ref, err_msg=method)
    if case in NO_CONVERSION:
        return
    fe = FRONTENDS.get("sklearn")
    export = fe.to_onnx(loaded, InputSpec(samples=x[:40]), ConvertOptions())
    parity = compare(fe.runner(loaded, export), OnnxRuntimeRunner(export.model), export.feeds,
                     exact=export.exact_outputs, defaults=export.tolerances)
    assert parity, parity.summary()


class Majority(BaseEstimator, ClassifierMixin):
    """A custom estimator: its type is neither trusted by skops nor validated by unframe."""

    def fit(self, x: Any, y: Any) -> Majority:
        self.classes_, counts = np.unique(y, return_counts=True)
        self.n_features_in_ = np.asarray(x).shape[1]
        self.top_ = self.classes_[np.argmax(counts)]
        return self

    def predict(self, x: Any) -> np.ndarray:
        return np.full(len(x), self.top_)

    def predict_proba(self, x: Any) -> np.ndarray:
        return np.tile((self.classes_ == self.top_).astype(float), (len(x), 1))


def test_types_that_need_trust_are_listed_exactly(tmp_path: Path) -> None:
    """A validated Tree beside an unknown type: the message names only the unknown one."""
    from sklearn.ensemble import StackingClassifier
    from sklearn.tree import DecisionTreeClassifier

    model = StackingClassifier([("t", DecisionTreeClassifier(max_depth=2)), ("m", Majority())],
                               cv=2).fit(X, Y_BIN)
    path = tmp_path / "stack.skops"
    sio.dump(model, path)
    assert "sklearn.tree._tree.Tree" in sio.get_untrusted_types(file=path)
    with pytest.raises(TrustRequiredError) as err:
        load(path)
    name = f"{Majority.__module__}.Majority"
    assert err.value.details["untrusted_types"] == [name]
    assert "sklearn.tree._tree.Tree" not in err.value.message
    np.testing.assert_array_equal(load(path, trust=True).predict(X), model.predict(X))


# --- crafted files ----------------------------------------------------------------------------

Mutation = Callable[[Archive], None]


def _tree(arch: Archive, index: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    node = arch.node("Tree", index)
    return node, Archive.state(node)


def _tree_nodes(fn: Callable[[np.ndarray], Any]) -> Mutation:
    return lambda arch: arch.edit_array(_tree(arch)[1]["nodes"], fn)


def _first_split(nodes: np.ndarray) -> int:
    return int(np.flatnonzero(nodes["left_child"] != -1)[0])


def _set(field: str, value: Any, which: Callable[[np.ndarray], Any] = _first_split) -> Callable[[np.ndarray], None]:
    def fn(nodes: np.ndarray) -> None:
        nodes[field][which(nodes)] = value
    return fn


def make_cycle(left: np.ndarray, right: np.ndarray, is_split: Callable[[int], bool]) -> None:
    """Detach the root's internal child b into a loop on itself: the root takes b's right child
    instead and b's right child becomes b, so every node keeps exactly one parent, and b's
    subtree is reachable only from b."""
    b = int(left[0]) if is_split(int(left[0])) else int(right[0])
    side = left if b == int(left[0]) else right
    side[0], right[b] = right[b], b


def _cycle(nodes: np.ndarray) -> None:
    make_cycle(nodes["left_child"], nodes["right_child"],
               lambda i: bool(nodes["left_child"][i] != -1))


def _drop_values(arch: Archive) -> None:
    del _tree(arch)[1]["values"]


def _values_shape(arch: Archive) -> None:
    arch.edit_array(_tree(arch)[1]["values"], lambda v: v[:, :, :1].copy())


def _node_count(arch: Archive) -> None:
    node = _tree(arch)[1]["node_count"]
    arch.set_json(node, Archive.get_json(node) + 5)


def _max_depth(arch: Archive) -> None:
    arch.set_json(_tree(arch)[1]["max_depth"], 1)


def _n_classes(arch: Archive) -> None:
    arch.edit_array(_tree(arch)[0]["__reduce__"]["args"]["content"][1], lambda c: np.r_[c, c])


def _tree_loader(arch: Archive) -> None:
    _tree(arch)[0]["__loader__"] = "ObjectNode"  # not skops' TreeNode: no Tree construction


def _predictor(fn: Callable[[np.ndarray], Any]) -> Mutation:
    def mutate(arch: Archive) -> None:
        arch.edit_array(Archive.state(arch.node("TreePredictor"))["nodes"], fn)
    return mutate


def _hgb_split(nodes: np.ndarray) -> int:
    return int(np.flatnonzero(nodes["is_leaf"] == 0)[0])


def _hgb_cycle(nodes: np.ndarray) -> None:
    make_cycle(nodes["left"], nodes["right"], lambda i: bool(nodes["is_leaf"][i] == 0))


def _hgb_categorical(nodes: np.ndarray) -> None:
    i = _hgb_split(nodes)
    nodes["is_categorical"][i], nodes["bitset_idx"][i] = 1, 3  # no bitset rows at all


def _bin_mapper(key: str, fn: Callable[[Any], Any]) -> Mutation:
    def mutate(arch: Archive) -> None:
        node = Archive.state(arch.node("_BinMapper"))[key]
        if node["__loader__"] == "JsonNode":
            arch.set_json(node, fn(Archive.get_json(node)))
        else:
            arch.edit_array(node, fn)
    return mutate


def _tree_state(cls: str, i: int) -> Callable[[Archive], dict[str, Any]]:
    return lambda arch: arch.node(cls)["content"]["content"][i]


def _kd(i: int, fn: Callable[[np.ndarray], Any], cls: str = "KDTree") -> Mutation:
    return lambda arch: arch.edit_array(_tree_state(cls, i)(arch), fn)


def _kd_swap(arr: np.ndarray) -> None:
    arr[0], arr[1] = arr[1], arr[1]  # a duplicate index: not a permutation


def _kd_range(nodes: np.ndarray) -> None:
    nodes["idx_end"][0] = nodes["idx_end"][0] + 50


def _kd_overlap(nodes: np.ndarray) -> None:
    nodes["idx_start"][2] = 0  # the right child re-covers the left child's points


def _kd_n_nodes(arch: Archive) -> None:
    arch.set_json(_tree_state("KDTree", 6)(arch), 15)


def _kd_metric(name: str) -> Mutation:
    def mutate(arch: Archive) -> None:
        _tree_state("KDTree", 11)(arch)["__class__"] = name
    return mutate


def _metric_p(cls: str, p: Any) -> Mutation:
    def mutate(arch: Archive) -> None:
        arch.set_json(arch.node(cls)["content"]["content"][0], p)
    return mutate


def _metric_array(cls: str, i: int, fn: Callable[[np.ndarray], Any]) -> Mutation:
    return lambda arch: arch.edit_array(arch.node(cls)["content"]["content"][i], fn)


def _loader(cls: str, loader: str = "ConstructorFromReduceNode") -> Mutation:
    """The same type name through another loader (a constructor call with the file's
    arguments, or a bare type reference)."""
    def mutate(arch: Archive) -> None:
        node = arch.node(cls)
        arch.unshare(node)
        node["__loader__"] = loader
        node["content"] = {"__class__": "tuple", "__module__": "builtins",
                           "__loader__": "TupleNode", "content": []}
    return mutate


def _attr(cls: str, key: str, value: float) -> Mutation:
    def mutate(arch: Archive) -> None:
        node = Archive.state(arch.node(cls))[key]
        arch.unshare(node)
        node.clear()
        node.update({"__class__": "float", "__module__": "builtins", "__loader__": "JsonNode",
                     "is_json": True, "content": json.dumps(value)})
    return mutate


def _xgb_doc(fn: Callable[[dict[str, Any]], Any]) -> Mutation:
    """Edit the model inside a skops-saved XGBoost booster's UBJSON buffer."""
    def mutate(arch: Archive) -> None:
        from unframe.converters.frontends._sklearn.validators.ubjson import loads

        handle = Archive.state(arch.node("Booster"))["handle"]
        doc = writable(loads(arch.members[handle["file"]]))
        fn(doc)
        arch.members[handle["file"]] = ubj_dumps(doc)
    return mutate


def writable(value: Any) -> Any:
    """A decoded UBJSON document with its (read-only, big-endian) arrays copied for editing."""
    if isinstance(value, dict):
        return {k: writable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [writable(v) for v in value]
    return value.astype(value.dtype.newbyteorder("=")) if isinstance(value, np.ndarray) else value


def _xgb_tree(fn: Callable[[dict[str, Any]], Any]) -> Mutation:
    return _xgb_doc(lambda doc: fn(doc["Model"]["learner"]["gradient_booster"]["model"]["trees"][0]))


def _xgb_first_split(tree: dict[str, Any]) -> int:
    return int(np.flatnonzero(np.asarray(tree["left_children"]) != -1)[0])


def _xgb_child(tree: dict[str, Any]) -> None:
    tree["left_children"][0] = 10_000


def _xgb_cycle(tree: dict[str, Any]) -> None:
    left, right = tree["left_children"], tree["right_children"]
    make_cycle(left, right, lambda i: bool(left[i] != -1))


def _xgb_feature(tree: dict[str, Any]) -> None:
    tree["split_indices"][_xgb_first_split(tree)] = 4


def _xgb_parent(tree: dict[str, Any]) -> None:
    tree["parents"][1] = 10_000


def _xgb_info(doc: dict[str, Any]) -> None:
    doc["Model"]["learner"]["gradient_booster"]["model"]["tree_info"][0] = 7


def _xgb_config(doc: dict[str, Any]) -> None:
    doc["Config"]["learner"]["learner_model_param"]["num_feature"] = "40"


def _xgb_truncate(arch: Archive) -> None:
    handle = Archive.state(arch.node("Booster"))["handle"]
    arch.members[handle["file"]] = arch.members[handle["file"]][:-20]


def _lgbm(fn: Callable[[str], str]) -> Mutation:
    def mutate(arch: Archive) -> None:
        node = Archive.state(arch.node("Booster"))["_handle"]
        arch.set_json(node, fn(Archive.get_json(node)))
    return mutate


def _lgbm_line(key: str, fn: Callable[[list[str]], list[str]]) -> Callable[[str], str]:
    """Edit ``key=`` of the first tree block."""
    def edit(text: str) -> str:
        line_at = text.index(f"\n{key}=", text.index("\nTree=0\n")) + 1
        end = text.index("\n", line_at)
        values = text[line_at:end].split("=", 1)[1].split(" ")
        return text[:line_at] + f"{key}=" + " ".join(fn(values)) + text[end:]
    return edit


def _lgbm_resize(text: str) -> str:
    """tree_sizes (byte lengths of the tree blocks) made consistent again after an edit."""
    head, _, body = text.partition("\ntree_sizes=")
    blocks = body.partition("\n")[2][1:]
    starts = [i for i in range(len(blocks))
              if blocks.startswith("Tree=", i) and (i == 0 or blocks[i - 1] == "\n")]
    ends = [*starts[1:], blocks.index("end of trees")]
    sizes = [len(blocks[s:e].encode()) for s, e in zip(starts, ends, strict=True)]
    return f"{head}\ntree_sizes={' '.join(map(str, sizes))}\n\n{blocks}"


def _lgbm_shift(text: str) -> str:
    """Move one byte from the second tree's size to the first's: LightGBM would then start
    reading tree 1 one byte late."""
    line_at = text.index("tree_sizes=")
    end = text.index("\n", line_at)
    sizes = [int(v) for v in text[line_at + len("tree_sizes="):end].split(" ")]
    sizes[0], sizes[1] = sizes[0] + 1, sizes[1] - 1
    return text[:line_at] + "tree_sizes=" + " ".join(map(str, sizes)) + text[end:]


def _lgbm_edit(key: str, fn: Callable[[list[str]], list[str]]) -> Mutation:
    return _lgbm(lambda text: _lgbm_resize(_lgbm_line(key, fn)(text)))


def _swap_first(values: list[str], new: str) -> list[str]:
    return [new, *values[1:]]


def _lgbm_cycle(text: str) -> str:
    """The same loop in LightGBM's child lists (a split is >= 0, a leaf negative)."""
    start = text.index("\nTree=0\n")
    arrays = {}
    for key in ("left_child", "right_child"):
        at = text.index(f"\n{key}=", start) + len(key) + 2
        arrays[key] = np.array(text[at:text.index("\n", at)].split(" "), dtype=np.int64)
    make_cycle(arrays["left_child"], arrays["right_child"], lambda i: i >= 0)
    for key, values in arrays.items():
        text = _lgbm_line(key, lambda _, v=values: [str(x) for x in v])(text)
    return text


CRAFTED: list[tuple[str, str, str, Mutation, str]] = [
    # (validated type or rule, variant, model case, mutation, message pattern)
    ("sklearn.tree._tree.Tree", "child-out-of-range", "DecisionTreeClassifier",
     _tree_nodes(_set("left_child", 999)), r"child index 999, outside \[1, \d+\)"),
    ("sklearn.tree._tree.Tree", "cycle", "DecisionTreeClassifier", _tree_nodes(_cycle),
     "on a cycle"),
    ("sklearn.tree._tree.Tree", "one-child", "DecisionTreeClassifier",
     _tree_nodes(_set("right_child", -1)), "one child"),
    ("sklearn.tree._tree.Tree", "feature-past-n-features", "RandomForestRegressor",
     _tree_nodes(_set("feature", 4)), r"splits on feature index 4, outside \[0, n_features\)"),
    ("sklearn.tree._tree.Tree", "nan-threshold", "GradientBoostingClassifier",
     _tree_nodes(_set("threshold", np.nan)), "has threshold nan"),
    ("sklearn.tree._tree.Tree", "node-count", "DecisionTreeClassifier", _node_count,
     "node_count is"),
    ("sklearn.tree._tree.Tree", "values-shape", "DecisionTreeClassifier", _values_shape,
     "values are float64"),
    ("sklearn.tree._tree.Tree", "missing-array", "DecisionTreeClassifier", _drop_values,
     "Tree's state has keys"),
    ("sklearn.tree._tree.Tree", "max-depth", "DecisionTreeClassifier", _max_depth,
     "max_depth is 1 but the tree is"),
    ("sklearn.tree._tree.Tree", "n-classes", "DecisionTreeClassifier", _n_classes,
     "n_classes has 2 entries for 1 outputs"),
    ("sklearn.tree._tree.Tree", "loader", "ExtraTreesClassifier", _tree_loader,
     "stored as ObjectNode, expected TreeNode"),
    ("sklearn.tree._tree.Tree", "nodes-dtype", "IsolationForest",
     _tree_nodes(lambda n: n[["left_child", "right_child"]].copy()), "nodes has fields"),
    ("sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor", "child-out-of-range",
     "HistGradientBoostingRegressor", _predictor(_set("left", 999, _hgb_split)),
     "child index 999"),
    ("sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor", "cycle",
     "HistGradientBoostingRegressor", _predictor(_hgb_cycle), "on a cycle"),
    ("sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor", "bitset-index",
     "HistGradientBoostingRegressor", _predictor(_hgb_categorical), r"has bitset_idx 3, outside"),
    ("sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor", "nan-threshold",
     "HistGradientBoostingRegressor", _predictor(_set("num_threshold", np.nan, _hgb_split)),
     "has threshold nan"),
    ("sklearn.ensemble._hist_gradient_boosting.binning._BinMapper", "missing-bin",
     "HistGradientBoostingRegressor", _bin_mapper("missing_values_bin_idx_", lambda v: 300),
     r"missing_values_bin_idx_ = 300"),
    ("sklearn.ensemble._hist_gradient_boosting.binning._BinMapper", "flags-length",
     "HistGradientBoostingRegressor", _bin_mapper("is_categorical_", lambda a: a[:2].copy()),
     "differ in length"),
    ("sklearn.neighbors._kd_tree.KDTree", "idx-not-permutation", "KNeighborsClassifier-kd",
     _kd(1, _kd_swap), "not a permutation"),
    ("sklearn.neighbors._kd_tree.KDTree", "node-range", "KNeighborsClassifier-kd",
     _kd(2, _kd_range), "outside"),
    ("sklearn.neighbors._kd_tree.KDTree", "overlapping-children", "KNeighborsClassifier-kd",
     _kd(2, _kd_overlap), "do not split its point range"),
    ("sklearn.neighbors._kd_tree.KDTree", "n-nodes", "KNeighborsClassifier-kd", _kd_n_nodes,
     "n_nodes differs"),
    ("sklearn.neighbors._kd_tree.KDTree", "bounds-shape", "KNeighborsClassifier-kd",
     _kd(3, lambda b: b[:, :, :2].copy()), "node_bounds has shape"),
    ("sklearn.neighbors._kd_tree.KDTree", "metric-not-allowed", "KNeighborsClassifier-kd",
     _kd_metric("PyFuncDistance64"), "metric .*PyFuncDistance64 is not one unframe accepts"),
    ("sklearn.neighbors._ball_tree.BallTree", "idx-not-permutation",
     "KNeighborsRegressor-ball-manhattan", _kd(1, _kd_swap, "BallTree"), "not a permutation"),
    ("sklearn.neighbors._ball_tree.BallTree", "radius", "KNeighborsRegressor-ball-manhattan",
     _kd(2, lambda n: n["radius"].__setitem__(0, np.nan), "BallTree"), "radius"),
    ("sklearn.neighbors._ball_tree.BallTree", "metric-weights-width",
     "KNeighborsRegressor-ball-seuclidean",
     _metric_array("SEuclideanDistance64", 1, lambda v: v[:3].copy()),
     "metric is for 3 features, the data has 4"),
    (_DM + "EuclideanDistance64", "p", "KNeighborsClassifier-kd",
     _metric_p("EuclideanDistance64", 3.0), "p is 3.0 for EuclideanDistance64"),
    (_DM + "ManhattanDistance64", "loader", "KNeighborsRegressor-ball-manhattan",
     _loader("ManhattanDistance64"), "expected ObjectNode"),
    (_DM + "MinkowskiDistance64", "p-nan", "KNeighborsRegressor-kd-minkowski3",
     _metric_p("MinkowskiDistance64", float("nan")), "Minkowski p is nan"),
    (_DM + "ChebyshevDistance64", "p", "KNeighborsRegressor-kd-chebyshev",
     _metric_p("ChebyshevDistance64", 2.0), "p is 2.0 for ChebyshevDistance64"),
    (_DM + "SEuclideanDistance64", "nan-weight", "KNeighborsRegressor-ball-seuclidean",
     _metric_array("SEuclideanDistance64", 1, lambda v: v.__setitem__(0, np.nan)), "NaN"),
    (_DM + "MahalanobisDistance64", "inf-weight", "KNeighborsRegressor-ball-mahalanobis",
     _metric_array("MahalanobisDistance64", 2, lambda m: m.__setitem__((0, 0), np.inf)), "NaN"),
    ("xgboost.core.Booster", "child-out-of-range", "XGBClassifier", _xgb_tree(_xgb_child),
     "tree 0: node 0 has child index 10000"),
    ("xgboost.core.Booster", "cycle", "XGBClassifier", _xgb_tree(_xgb_cycle),
     "tree 0: node .* is on a cycle"),
    ("xgboost.core.Booster", "split-index", "XGBRegressor", _xgb_tree(_xgb_feature),
     r"splits on feature 4, outside \[0, 4\)"),
    ("xgboost.core.Booster", "parents", "XGBClassifier", _xgb_tree(_xgb_parent),
     "parents do not match"),
    ("xgboost.core.Booster", "tree-info", "XGBClassifier", _xgb_doc(_xgb_info),
     "tree_info .* 7 is outside"),
    ("xgboost.core.Booster", "config", "XGBRegressor", _xgb_doc(_xgb_config),
     "configuration's num_feature differs"),
    ("xgboost.core.Booster", "truncated", "XGBRegressor", _xgb_truncate, "UBJSON"),
    ("lightgbm.basic.Booster", "child-out-of-range", "LGBMClassifier",
     _lgbm_edit("left_child", lambda v: _swap_first(v, "99")), "has child index 99, out of range"),
    ("lightgbm.basic.Booster", "cycle", "LGBMRegressor",
     _lgbm(lambda t: _lgbm_resize(_lgbm_cycle(t))), "on a cycle"),
    ("lightgbm.basic.Booster", "split-feature", "LGBMRegressor",
     _lgbm_edit("split_feature", lambda v: _swap_first(v, "7")), r"splits on feature 7, outside \[0, 4\)"),
    ("lightgbm.basic.Booster", "tree-sizes", "LGBMClassifier", _lgbm(_lgbm_shift),
     "text after the tree's blank line inside its tree_sizes span"),
    ("lightgbm.basic.Booster", "categorical-without-bitsets", "LGBMRegressor",
     _lgbm_edit("decision_type", lambda v: _swap_first(v, "1")), "cat_boundaries has 0 values"),
    ("lightgbm.basic.Booster", "per-iteration", "LGBMClassifier",
     _lgbm(lambda t: t.replace("num_tree_per_iteration=3", "num_tree_per_iteration=1", 1)),
     "num_tree_per_iteration 1 differs"),
]
# Plain types: the same type name through a loader that calls a constructor, and a NaN
# hyperparameter where the type has one.
_PLAIN_CASES = {
    "sklearn.neural_network._stochastic_optimizers.AdamOptimizer": ("MLPClassifier-adam", "AdamOptimizer"),
    "sklearn.neural_network._stochastic_optimizers.SGDOptimizer": ("MLPRegressor-sgd", "SGDOptimizer"),
    "sklearn.gaussian_process._gpc._BinaryGaussianProcessClassifierLaplace":
        ("GaussianProcessClassifier", "_BinaryGaussianProcessClassifierLaplace"),
    **{_GP + k: (case, k) for k, case in (
        ("ConstantKernel", "GaussianProcessClassifier"), ("RBF", "GaussianProcessClassifier"),
        ("Product", "GaussianProcessClassifier"), ("Sum", "GaussianProcessRegressor-sum"),
        ("WhiteKernel", "GaussianProcessRegressor-sum"), ("Matern", "GaussianProcessRegressor-matern"),
        ("RationalQuadratic", "GaussianProcessRegressor-rq"),
        ("ExpSineSquared", "GaussianProcessRegressor-periodic"),
        ("DotProduct", "GaussianProcessRegressor-periodic"),
        ("Exponentiation", "GaussianProcessRegressor-periodic"))},
    "sklearn.calibration._CalibratedClassifier": ("CalibratedClassifierCV", "_CalibratedClassifier"),
    "sklearn.calibration._SigmoidCalibration": ("CalibratedClassifierCV", "_SigmoidCalibration"),
    "sklearn.multiclass._ConstantPredictor": ("OneVsRestClassifier-constant", "_ConstantPredictor"),
    "sklearn._loss.loss.HalfTweedieLossIdentity": ("TweedieRegressor", "HalfTweedieLossIdentity"),
    "sklearn.utils._bunch.Bunch": ("VotingClassifier", "Bunch"),
    "numpy.dtype": ("SimpleImputer", "dtype"),
    "collections.OrderedDict": ("LGBMClassifier", "OrderedDict"),
    **{(_MI if fn.startswith("mutual") else _UNI) + fn: (f"SelectKBest-{fn}", fn)
       for fn in ("f_classif", "f_regression", "r_regression", "chi2", "mutual_info_classif",
                  "mutual_info_regression")},
    **{f"{lib}.{name}": (name, name) for lib, name in (
        ("xgboost.sklearn", "XGBClassifier"), ("xgboost.sklearn", "XGBRegressor"),
        ("xgboost.sklearn", "XGBRFClassifier"), ("xgboost.sklearn", "XGBRFRegressor"),
        ("lightgbm.sklearn", "LGBMClassifier"), ("lightgbm.sklearn", "LGBMRegressor"))},
    **{_DM + m: (f"KNeighborsRegressor-ball-{m[:-len('Distance64')].lower()}", m) for m in (
        "HaversineDistance64", "CanberraDistance64", "BrayCurtisDistance64", "HammingDistance64",
        "JaccardDistance64", "DiceDistance64", "RogersTanimotoDistance64",
        "RussellRaoDistance64", "SokalMichenerDistance64", "SokalSneathDistance64")},
}
for _type, (_case, _cls) in _PLAIN_CASES.items():
    _function = _type.startswith((_UNI, _MI))
    CRAFTED.append((_type, "loader", _case,
                    _loader(_cls, "TypeNode" if _function else "ConstructorFromReduceNode"),
                    "stored as"))
CRAFTED += [
    (_GP + "RBF", "nan-length-scale", "GaussianProcessClassifier",
     _attr("RBF", "length_scale", float("nan")), "length_scale is nan"),
    ("sklearn.neural_network._stochastic_optimizers.AdamOptimizer", "nan-beta",
     "MLPClassifier-adam", _attr("AdamOptimizer", "beta_1", float("inf")), "beta_1 is inf"),
    ("sklearn.calibration._SigmoidCalibration", "nan-a", "CalibratedClassifierCV",
     _attr("_SigmoidCalibration", "a_", float("nan")), "a_ is nan"),
]


def _structure(cls: str, key: str, value: Any, index: int = 0) -> Mutation:
    def mutate(arch: Archive) -> None:
        arch.set_json(Archive.state(arch.node(cls, index))[key], value)
    return mutate


def _forest_subset(arch: Archive) -> None:
    node = Archive.state(arch.node("IsolationForest"))["estimators_features_"]["content"][0]
    arch.edit_array(node, lambda cols: cols[:1].copy())


STRUCTURE: list[tuple[str, str, Mutation, str]] = [
    ("decision_tree", "DecisionTreeClassifier", _structure("DecisionTreeClassifier", "n_features_in_", 3),
     "tree_ has 4 features but the estimator takes 3"),
    ("tree_ensemble", "RandomForestRegressor", _structure("RandomForestRegressor", "n_features_in_", 2),
     "takes 4 features, the ensemble 2"),
    ("tree_ensemble", "IsolationForest", _forest_subset, "takes 4 features but is given 1 columns"),
    ("gradient_boosting", "GradientBoostingClassifier",
     _structure("GradientBoostingClassifier", "n_trees_per_iteration_", 5),
     "estimators_ has 3 trees per iteration, the model declares 5"),
    ("hist_gradient_boosting", "HistGradientBoostingRegressor",
     _structure("HistGradientBoostingRegressor", "n_features_in_", 2), "bin mapper describes 4"),
]


# A metric is read (and checked against the data width) by the tree holding it first.
CONTAINERS = {name: ("sklearn.neighbors._ball_tree.BallTree", "sklearn.neighbors._kd_tree.KDTree")
              for name in (_DM + m for m in (
                  "EuclideanDistance64", "ManhattanDistance64", "ChebyshevDistance64",
                  "MinkowskiDistance64", "SEuclideanDistance64", "MahalanobisDistance64",
                  "HaversineDistance64", "CanberraDistance64", "BrayCurtisDistance64",
                  "HammingDistance64", "JaccardDistance64", "DiceDistance64",
                  "RogersTanimotoDistance64", "RussellRaoDistance64", "SokalMichenerDistance64",
                  "SokalSneathDistance64"))}


def _crafted_id(entry: tuple[Any, ...]) -> str:
    return f"{entry[0].rsplit('.', 1)[-1]}-{entry[1]}"


@pytest.mark.parametrize("type_name, variant, case, mutate, pattern", CRAFTED,
                         ids=[_crafted_id(c) for c in CRAFTED])
def test_crafted_file_is_refused_before_anything_is_built(
        type_name: str, variant: str, case: str, mutate: Mutation, pattern: str, tmp_path: Path,
        archives: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from unframe.converters.frontends._sklearn.validators import _skops

    arch = Archive(archives(case))
    mutate(arch)
    path = arch.save(tmp_path / f"crafted-{variant}.skops")
    built: list[str] = []
    real = _skops.construct
    monkeypatch.setattr(_skops, "construct", lambda *a: built.append("x") or real(*a))
    with pytest.raises(InputError, match=pattern) as err:
        load(path)
    assert not built, "skops built objects from a file that failed validation"
    assert err.value.exit_code == 3 and str(path) in err.value.message
    assert err.value.details["type"] in (type_name, *CONTAINERS.get(type_name, ()))


@pytest.mark.parametrize("rule, case, mutate, pattern", STRUCTURE,
                         ids=[f"{s[0]}-{s[1]}" for s in STRUCTURE])
def test_inconsistent_estimator_is_refused_before_predicting(
        rule: str, case: str, mutate: Mutation, pattern: str, tmp_path: Path,
        archives: Callable[[str], Path]) -> None:
    arch = Archive(archives(case))
    mutate(arch)
    path = arch.save(tmp_path / f"inconsistent-{rule}.skops")
    with pytest.raises(InputError, match=pattern) as err:
        load(path)
    assert err.value.details["rule"] == rule


def test_crafted_tree_through_the_cli_is_exit_3_without_a_crash(
        tmp_path: Path, archives: Callable[[str], Path]) -> None:
    """A child index far outside the node array, converted in a separate process: a one-line
    error and exit 3, no traceback, no output (scikit-learn would read out of bounds)."""
    arch = Archive(archives("RandomForestRegressor"))
    _tree_nodes(_set("left_child", 2**40))(arch)
    src = arch.save(tmp_path / "forest.skops")
    out = tmp_path / "forest.onnx"
    proc = subprocess.run([sys.executable, "-m", "unframe.cli.main", "convert", str(src), "-o",
                           str(out), "--json"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=_env())
    assert proc.returncode == 3, proc.stderr
    assert "child index 1099511627776" in proc.stderr and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["error"] == "input"
    assert not out.exists()


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_every_validator_is_covered() -> None:
    """A validated type needs a real file that loads (and converts, where skl2onnx can) and a
    crafted variant; a structure rule needs a crafted variant."""
    validated = set(VALIDATORS.keys())
    loaded = set().union(*COVERS.values())
    crafted = {c[0] for c in CRAFTED}
    assert not validated - loaded, f"no real-file test: {sorted(validated - loaded)}"
    assert not validated - crafted, f"no crafted-file test: {sorted(validated - crafted)}"
    assert {r.__name__ for r in RULES} <= {s[0] for s in STRUCTURE}


def test_missing_array_member_is_exit_3(tmp_path: Path, archives: Callable[[str], Path]) -> None:
    arch = Archive(archives("DecisionTreeClassifier"))
    del arch.members[Archive.state(arch.node("Tree"))["nodes"]["file"]]
    with pytest.raises(InputError, match="not a readable skops file"):
        load(arch.save(tmp_path / "no-nodes.skops"))


def test_double_route_refuses_a_missing_value_split_instead_of_hanging() -> None:
    """skl2onnx's double-precision threshold search never ends on a +inf split."""
    import unframe
    from unframe.errors import UnsupportedError

    model, x = fitted("DecisionTreeRegressor-missing")
    assert np.isinf(model.tree_.threshold).any()  # the case is exercised
    with pytest.raises(UnsupportedError, match="loops forever"):
        unframe.convert(model, to="onnx", sample_inputs=x[:20], float_precision="double")


# --- XGBoost and LightGBM model files ---------------------------------------------------------

def _native(case: str, suffix: str, folder: Path) -> Path:
    model = fitted(case)[0]
    path = folder / f"{case}{suffix}"
    if suffix == ".txt":
        model.booster_.save_model(path)
    else:
        model.save_model(path)
    return path


NATIVE = [("XGBClassifier", ".json"), ("XGBRegressor", ".ubj"), ("LGBMClassifier", ".txt"),
          ("LGBMRegressor", ".txt")]


@pytest.mark.parametrize("case, suffix", NATIVE, ids=[f"{c}{s}" for c, s in NATIVE])
def test_booster_file_converts_through_the_cli(case: str, suffix: str, tmp_path: Path) -> None:
    """The library's own model file, detected by its first bytes, rebuilt as the scikit-learn
    wrapper and checked against it."""
    import onnxruntime as ort

    original, x = fitted(case)
    src = _native(case, suffix, tmp_path)
    assert FRONTENDS.get("sklearn").accepts_path(src)
    loaded = load(src)
    assert type(loaded).__name__ == case
    want = original.predict_proba(x) if hasattr(original, "predict_proba") else original.predict(x)
    got = loaded.predict_proba(x) if hasattr(loaded, "predict_proba") else loaded.predict(x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.savez(tmp_path / "s.npz", X=x[:30])
    out = tmp_path / "m.onnx"
    proc = subprocess.run([sys.executable, "-m", "unframe.cli.main", "convert", str(src), "-o",
                           str(out), "--sample-inputs", str(tmp_path / "s.npz"), "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    stages = json.loads(proc.stdout)["parity"]["stages"]
    assert stages and all(s["status"] == "passed" for s in stages)
    sess = ort.InferenceSession(str(out))
    labels = sess.run(None, {sess.get_inputs()[0].name: x[:30].astype(np.float32)})[0]
    assert labels.shape[0] == 30


def test_other_json_and_txt_files_are_not_claimed(tmp_path: Path) -> None:
    fe = FRONTENDS.get("sklearn")
    (tmp_path / "config.json").write_text('{"layers": []}')
    (tmp_path / "notes.txt").write_text("tree\nnot a model\n")
    assert not fe.accepts_path(tmp_path / "config.json")
    assert not fe.accepts_path(tmp_path / "notes.txt")


def _xgb_json(mutate: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def edit(path: Path) -> None:
        doc = json.loads(path.read_text())
        mutate(doc["learner"]["gradient_booster"]["model"]["trees"][1])
        path.write_text(json.dumps(doc))
    return edit


def _xgb_json_cycle(tree: dict[str, Any]) -> None:
    left, right = np.array(tree["left_children"]), np.array(tree["right_children"])
    make_cycle(left, right, lambda i: bool(left[i] != -1))
    tree["left_children"], tree["right_children"] = left.tolist(), right.tolist()


def _ubj_edit(mutate: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def edit(path: Path) -> None:
        from unframe.converters.frontends._sklearn.validators.ubjson import loads

        doc = writable(loads(path.read_bytes()))
        mutate(doc["learner"]["gradient_booster"]["model"]["trees"][0])
        path.write_bytes(ubj_dumps(doc))
    return edit


def _txt(edit: Callable[[str], str]) -> Callable[[Path], None]:
    return lambda path: path.write_text(edit(path.read_text()))


NATIVE_CRAFTED = [
    ("XGBClassifier", ".json", "child-out-of-range", _xgb_json(_xgb_child), "tree 1: node 0 has child index 10000"),
    ("XGBClassifier", ".json", "cycle", _xgb_json(_xgb_json_cycle), "tree 1: node .* is on a cycle"),
    ("XGBClassifier", ".json", "repeated-key", _txt(lambda t: t.replace('{"learner":', '{"version":[3],"learner":', 1)),
     "repeats a key"),
    ("XGBRegressor", ".ubj", "split-index", _ubj_edit(_xgb_feature), r"splits on feature 4, outside \[0, 4\)"),
    ("XGBRegressor", ".ubj", "truncated", lambda p: p.write_bytes(p.read_bytes()[:-9]), "truncated"),
    ("LGBMRegressor", ".txt", "cycle", _txt(lambda t: _lgbm_resize(_lgbm_cycle(t))), "on a cycle"),
    ("LGBMRegressor", ".txt", "split-feature",
     _txt(lambda t: _lgbm_resize(_lgbm_line("split_feature", lambda v: _swap_first(v, "9"))(t))),
     r"splits on feature 9, outside \[0, 4\)"),
    ("LGBMClassifier", ".txt", "tree-sizes-past-end",
     _txt(lambda t: t.replace("tree_sizes=", "tree_sizes=99999", 1)), "point past the end"),
    ("LGBMClassifier", ".txt", "nul", _txt(lambda t: t.replace("num_leaves=", "num_leaves\0=", 1)), "NUL"),
]


@pytest.mark.parametrize("case, suffix, variant, edit, pattern", NATIVE_CRAFTED,
                         ids=[f"{c[0]}{c[1]}-{c[2]}" for c in NATIVE_CRAFTED])
def test_crafted_booster_file_is_exit_3(case: str, suffix: str, variant: str,
                                        edit: Callable[[Path], None], pattern: str,
                                        tmp_path: Path) -> None:
    path = _native(case, suffix, tmp_path)
    edit(path)
    with pytest.raises(InputError, match=pattern) as err:
        load(path)
    assert err.value.exit_code == 3 and "save_model" in err.value.hint

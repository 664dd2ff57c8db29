"""scikit-learn reference pipelines with seeded synthetic data, exported through skl2onnx
(ZipMap off, so every output is a plain tensor).

Every builder is ``build(out_dir, opset)``: it writes ``model.onnx``, ``inputs.npz`` and
scikit-learn's own ``outputs.npz`` (keyed by the ONNX output names) into ``out_dir``. The fitted
estimator is not saved: pickles run code on load, and the ONNX file is what the zoo upgrades.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from zoo_common import MODEL_FILE, save_io, seed_everything

FEATURES = 8


def _data(classes: int | None) -> tuple[np.ndarray, np.ndarray]:
    rng = seed_everything()
    x = rng.standard_normal((200, FEATURES)).astype(np.float32)
    score = x[:, 0] * 1.5 - x[:, 1] + 0.5 * x[:, 2] * x[:, 3]
    if classes is None:
        return x, score.astype(np.float32)
    edges = np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1])
    return x, np.digitize(score, edges).astype(np.int64)


def _export(model: Any, x: np.ndarray, out_dir: Path, opset: int, classifier: bool) -> None:
    import onnx
    from skl2onnx import to_onnx

    sample = x[:6]
    options = {"zipmap": False} if classifier else None
    proto = to_onnx(model, sample[:1], target_opset={"": opset, "ai.onnx.ml": 3 if opset >= 18 else 1},
                    options={id(model): options} if options else None)
    onnx.save(proto, str(out_dir / MODEL_FILE))
    names = [o.name for o in proto.graph.output]
    if classifier:
        outputs = [model.predict(sample), model.predict_proba(sample).astype(np.float32)]
    else:
        outputs = [np.asarray(model.predict(sample), dtype=np.float32).reshape(len(sample), -1)]
    save_io(out_dir, {proto.graph.input[0].name: sample}, dict(zip(names, outputs, strict=True)))


def scaler_logreg(out_dir: Path, opset: int) -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = _data(3)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y)
    _export(model, x, out_dir, opset, classifier=True)


def random_forest(out_dir: Path, opset: int) -> None:
    from sklearn.ensemble import RandomForestClassifier

    x, y = _data(2)
    model = RandomForestClassifier(n_estimators=10, max_depth=5, random_state=0).fit(x, y)
    _export(model, x, out_dir, opset, classifier=True)


def pca_svc(out_dir: Path, opset: int) -> None:
    from sklearn.decomposition import PCA
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    x, y = _data(3)
    model = make_pipeline(StandardScaler(), PCA(4, random_state=0),
                          SVC(probability=True, random_state=0)).fit(x, y)
    _export(model, x, out_dir, opset, classifier=True)


def gradient_boosting(out_dir: Path, opset: int) -> None:
    from sklearn.ensemble import GradientBoostingRegressor

    x, y = _data(None)
    model = GradientBoostingRegressor(n_estimators=20, max_depth=3, random_state=0).fit(x, y)
    _export(model, x, out_dir, opset, classifier=False)


def mlp_regressor(out_dir: Path, opset: int) -> None:
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler

    x, y = _data(None)
    model = make_pipeline(MinMaxScaler(), MLPRegressor(hidden_layer_sizes=(32, 16), max_iter=300, random_state=0)).fit(x, y)
    _export(model, x, out_dir, opset, classifier=False)


def decision_tree(out_dir: Path, opset: int) -> None:
    from sklearn.tree import DecisionTreeClassifier

    x, y = _data(4)
    model = DecisionTreeClassifier(max_depth=6, random_state=0).fit(x, y)
    _export(model, x, out_dir, opset, classifier=True)

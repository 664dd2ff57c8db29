"""Registry coverage: every registered lowering is named by a test in this folder that compares
it with onnxruntime (or checks its refusal), and says what it becomes (docs/support.md)."""

from __future__ import annotations

from pathlib import Path

from unframe.passes.ml_to_tensor import LOWERINGS

HERE = Path(__file__).parent


def test_every_lowering_has_a_test() -> None:
    text = "\n".join(p.read_text() for p in HERE.glob("test_*.py") if p.name != Path(__file__).name)
    text += (HERE / "mlt_models.py").read_text()  # the tree models are built there
    missing = [op for op in LOWERINGS if f'"{op}"' not in text]
    assert not missing, f"lowerings without a test: {missing}"


def test_lowerings_cover_the_brief() -> None:
    wanted = {"TreeEnsembleClassifier", "TreeEnsembleRegressor", "TreeEnsemble", "LinearClassifier",
              "LinearRegressor", "SVMClassifier", "SVMRegressor", "Normalizer", "Scaler",
              "Binarizer", "Imputer", "OneHotEncoder", "LabelEncoder", "ArrayFeatureExtractor",
              "FeatureVectorizer", "ZipMap", "CastMap"}
    assert wanted <= set(LOWERINGS)


def test_every_lowering_says_what_it_becomes() -> None:
    for op, spec in LOWERINGS.items():
        assert spec.op_type == op and spec.summary and callable(spec.fn)

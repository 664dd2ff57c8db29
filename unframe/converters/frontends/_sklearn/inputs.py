"""Input types for skl2onnx, inferred so users never write ``initial_types``.

Two layouts:
- **matrix**: one input ``X`` of shape [N, n_features] (numpy samples, or a DataFrame whose
  columns are all numeric and feed no ColumnTransformer);
- **columns**: one [N, 1] input per DataFrame column, named after it, typed per column
  (strings -> StringTensorType, integers -> Int64TensorType, floats -> Float/DoubleTensorType).
  skl2onnx's ColumnTransformer converter then selects columns by input name.

Without samples the layout comes from ``feature_names_in_`` (columns, kinds read from the fitted
encoders) or ``n_features_in_`` (matrix).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unframe import limits
from unframe.errors import InputError, UsageError

FLOAT, INT, STR = "float", "int", "str"
MATRIX_NAME = "X"


@dataclass
class InputPlan:
    layout: str  # "matrix" | "columns"
    names: list[str]  # the ONNX input names (one for matrix)
    kinds: list[str]  # FLOAT / INT / STR per input
    n_features: int
    batch: int | None = None  # fixed batch size when static, else dynamic
    samples: Any = None  # the samples as given (numpy array or DataFrame), or None
    one_dimensional: bool = False  # the estimator takes 1-D X (IsotonicRegression)
    categories: dict[str, list[Any]] = field(default_factory=dict)  # per column, for generation

    def initial_types(self, double: bool) -> list[tuple[str, Any]]:
        from skl2onnx.common.data_types import (
            DoubleTensorType,
            FloatTensorType,
            Int64TensorType,
            StringTensorType,
        )

        real = DoubleTensorType if double else FloatTensorType
        by_kind = {FLOAT: real, INT: Int64TensorType, STR: StringTensorType}
        width = self.n_features if self.layout == "matrix" else 1
        return [(name, by_kind[kind]([self.batch, width])) for name, kind in zip(self.names, self.kinds, strict=False)]


def _is_dataframe(obj: Any) -> bool:
    return type(obj).__name__ == "DataFrame" and hasattr(obj, "columns")


def _column_kind(series: Any) -> str:
    import pandas as pd

    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_integer_dtype(dtype):
        return INT
    if pd.api.types.is_float_dtype(dtype):
        return FLOAT
    return STR


def _has_column_transformer(model: Any) -> bool:
    from sklearn.compose import ColumnTransformer

    return any(isinstance(est, ColumnTransformer) for est in walk(model))


def walk(model: Any) -> list[Any]:
    """The model and every estimator nested in it (pipelines, column transformers, unions)."""
    found = [model]
    for _, child in named_children(model):
        found.extend(walk(child))
    return found


def named_children(model: Any) -> list[tuple[str, Any]]:
    """(name, estimator) of a pipeline's steps, a column transformer's or a union's parts."""
    if hasattr(model, "steps"):
        pairs = [(n, s) for n, s in model.steps]
    elif hasattr(model, "transformers_"):
        pairs = [(n, t) for n, t, _ in model.transformers_]
    elif hasattr(model, "transformer_list"):
        pairs = [(n, t) for n, t in model.transformer_list]
    else:
        pairs = []
    return [(n, c) for n, c in pairs if not isinstance(c, str) and c is not None]


def final_estimator(model: Any) -> Any:
    while hasattr(model, "steps"):
        model = model.steps[-1][1]
    return model


def plan_inputs(model: Any, samples: Any, *, static: bool = False, name: str | None = None,
                source: str = "the model") -> InputPlan:
    if samples is not None:
        plan = _plan_from_samples(model, samples, source)
        if static:
            plan.batch = int(len(plan.samples))
    else:
        plan = _plan_from_model(model, source)
    if plan.layout == "matrix" and name:
        plan.names = [name]
    return plan


def normalize_samples(samples: Any) -> Any:
    """Samples as an array or DataFrame. Feeds by input name (an .npz from the CLI arrives as
    ``[{name: array}]``) become the array itself (one input) or a DataFrame (one per column)."""
    from collections.abc import Mapping

    if isinstance(samples, (list, tuple)) and len(samples) == 1 and isinstance(samples[0], Mapping):
        samples = samples[0]
    if isinstance(samples, Mapping):
        if len(samples) == 1:
            return np.asarray(next(iter(samples.values())))
        import pandas as pd

        return pd.DataFrame({str(k): np.asarray(v).reshape(-1) for k, v in samples.items()})
    return samples


def _plan_from_samples(model: Any, samples: Any, source: str) -> InputPlan:
    samples = normalize_samples(samples)
    if _is_dataframe(samples):
        return _plan_from_dataframe(model, samples, source)
    arr = np.asarray(samples)
    one_d = arr.ndim == 1 and _takes_1d(model)
    if one_d:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2:
        raise InputError(f"sample inputs for {source} have shape {list(arr.shape)}; scikit-learn "
                         "models take a 2-D array [n_samples, n_features]",
                         "pass a 2-D array or a DataFrame")
    _check_feature_count(model, arr.shape[1], source)
    kind = STR if arr.dtype.kind in "USO" else FLOAT
    return InputPlan("matrix", [MATRIX_NAME], [kind], int(arr.shape[1]), samples=arr,
                     one_dimensional=one_d)


def _plan_from_dataframe(model: Any, df: Any, source: str) -> InputPlan:
    expected = getattr(model, "feature_names_in_", None)
    if expected is not None:
        missing = [c for c in expected if c not in df.columns]
        if missing:
            raise InputError(f"sample DataFrame lacks column(s) {', '.join(map(str, missing))} "
                             f"that {source} was fitted on",
                             f"pass a DataFrame with columns {', '.join(map(str, expected))}")
        df = df[list(expected)]
    else:
        _check_feature_count(model, df.shape[1], source)
    kinds = [_column_kind(df[c]) for c in df.columns]
    if all(k != STR for k in kinds) and not _has_column_transformer(model):
        return InputPlan("matrix", [MATRIX_NAME], [FLOAT], int(df.shape[1]),
                         samples=df.to_numpy(dtype=np.float64))
    return InputPlan("columns", [str(c) for c in df.columns], kinds, int(df.shape[1]), samples=df)


def _plan_from_model(model: Any, source: str) -> InputPlan:
    names = getattr(model, "feature_names_in_", None)
    if names is not None and _has_column_transformer(model):
        kinds, categories = _column_kinds_from_encoders(model, [str(n) for n in names])
        return InputPlan("columns", [str(n) for n in names], kinds, len(names),
                         categories=categories)
    n = getattr(model, "n_features_in_", None)
    if n is None:
        raise UsageError(f"can't tell how many features {source} takes (no n_features_in_)",
                         "pass sample_inputs (a numpy array or DataFrame)")
    return InputPlan("matrix", [MATRIX_NAME], [FLOAT], int(n), one_dimensional=_takes_1d(model))


def _column_kinds_from_encoders(model: Any, names: list[str]) -> tuple[list[str], dict[str, list[Any]]]:
    """Columns an encoder saw as strings are string inputs; the rest are floats."""
    kinds = {n: FLOAT for n in names}
    categories: dict[str, list[Any]] = {}
    for est in walk(model):
        if not hasattr(est, "transformers_"):
            continue
        for _, trans, cols in est.transformers_:
            if isinstance(trans, str) or trans is None:
                continue
            col_names = [names[c] if isinstance(c, (int, np.integer)) else str(c)
                         for c in np.atleast_1d(cols)]
            for sub in walk(trans):
                for col, cats in zip(col_names, getattr(sub, "categories_", []) or [], strict=False):
                    cats = np.asarray(cats)
                    if cats.dtype.kind in "OUS":
                        kinds[col] = STR
                        categories[col] = [c for c in cats.tolist() if isinstance(c, str)]
    return [kinds[n] for n in names], categories


def _takes_1d(model: Any) -> bool:
    return type(final_estimator(model)).__name__ == "IsotonicRegression"


def _check_feature_count(model: Any, got: int, source: str) -> None:
    expected = getattr(model, "n_features_in_", None)
    if expected is not None and int(expected) != got:
        raise InputError(f"sample inputs have {got} feature(s) but {source} was fitted on "
                         f"{int(expected)}", f"pass samples with {int(expected)} columns")


# --- feeds -----------------------------------------------------------------------------------

def sample_feeds(plan: InputPlan, double: bool) -> list[dict[str, np.ndarray]]:
    """Parity feeds from the samples: all rows, and (dynamic batch) a smaller batch too."""
    full = _feed_from_samples(plan, double)
    rows = next(iter(full.values())).shape[0]
    if plan.batch is not None or rows < 2:
        return [full]
    half = max(1, rows // 2)
    return [full, {k: v[:half] for k, v in full.items()}]


def _feed_from_samples(plan: InputPlan, double: bool) -> dict[str, np.ndarray]:
    real = np.float64 if double else np.float32
    if plan.layout == "matrix":
        arr = np.asarray(plan.samples)
        arr = arr.astype(object) if plan.kinds[0] == STR else arr.astype(real)
        return {plan.names[0]: arr}
    df = plan.samples
    return {name: _column_array(df[name], kind, real) for name, kind in zip(plan.names, plan.kinds, strict=False)}


def _column_array(series: Any, kind: str, real: type) -> np.ndarray:
    if kind == STR:
        return series.astype(str).to_numpy(dtype=object).reshape(-1, 1)
    if kind == INT:
        return series.to_numpy(dtype=np.int64).reshape(-1, 1)
    return series.to_numpy(dtype=real).reshape(-1, 1)


def generated_feeds(plan: InputPlan, double: bool, seed: int = 0,
                    sizes: tuple[int, ...] = (5, 3)) -> list[dict[str, np.ndarray]]:
    real = np.float64 if double else np.float32
    feeds = []
    for i, n in enumerate(sizes if plan.batch is None else (plan.batch,)):
        rng = np.random.default_rng(seed + i)
        feed: dict[str, np.ndarray] = {}
        width = plan.n_features if plan.layout == "matrix" else 1
        limits.check_array((n, width * max(len(plan.names), 1)), np.float64, "the parity inputs")
        for name, kind in zip(plan.names, plan.kinds, strict=False):
            if kind == STR:
                choices = plan.categories.get(name) or ["a", "b", "c"]
                feed[name] = rng.choice(np.array(choices, dtype=object), size=(n, width))
            elif kind == INT:
                feed[name] = rng.integers(0, 3, size=(n, width)).astype(np.int64)
            else:
                feed[name] = rng.standard_normal((n, width)).astype(real)
        feeds.append(feed)
    return feeds


def to_sklearn_input(plan: InputPlan, feed: dict[str, np.ndarray]) -> Any:
    """Rebuild what the estimator takes from ONNX-named feeds (floats as float64: the same values
    the ONNX graph sees, in the dtype scikit-learn computes in)."""
    if plan.layout == "matrix":
        arr = np.asarray(feed[plan.names[0]])
        arr = arr.astype(np.float64) if arr.dtype.kind == "f" else arr
        return arr.reshape(-1) if plan.one_dimensional else arr
    import pandas as pd

    data = {}
    for name, kind in zip(plan.names, plan.kinds, strict=False):
        col = np.asarray(feed[name]).reshape(-1)
        data[name] = col.astype(np.float64) if kind == FLOAT else col.astype(np.int64) \
            if kind == INT else col.astype(object)
    return pd.DataFrame(data)

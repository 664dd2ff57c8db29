"""scikit-learn frontend overhead: ``unframe.convert(model, to="onnx", validate=False)`` against
the bare ``skl2onnx.to_onnx`` call on the same fitted models (same samples, same opset, zipmap off
for classifiers in both). Prints time ratios; ``run(quick)`` returns rows.

unframe is timed twice: with the default ``precision="auto"`` (which also runs onnxruntime and
scikit-learn once on the samples to check that float32 keeps scikit-learn's results) and with
``float_precision="float"`` (no check: the like-for-like overhead). Time is the median wall time
of the repetitions, in one process, after a warm-up; BLAS/OpenMP limited to one thread so that
the machine's load disturbs the figures less.

    .venv/bin/python bench/frontends_sklearn.py [--quick] [--out docs/benchmarks/frontends_sklearn.md]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

OPSET = 18


def models(quick: bool) -> list[tuple[str, Any, np.ndarray]]:
    """(name, fitted model, samples) on seeded data."""
    import pandas as pd
    from sklearn import ensemble, linear_model, neighbors, neural_network, preprocessing, svm
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline, make_pipeline

    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 10))
    y = (x[:, 0] + x[:, 1] > 0).astype(int) + (x[:, 2] > 0.5)
    out = [
        ("LogisticRegression", linear_model.LogisticRegression(max_iter=300).fit(x, y), x[:100]),
        ("RandomForestClassifier(50)", ensemble.RandomForestClassifier(50, max_depth=8, random_state=0).fit(x, y), x[:100]),
        ("HistGradientBoostingClassifier(50)", ensemble.HistGradientBoostingClassifier(max_iter=50, random_state=0).fit(x, y), x[:100]),
        ("scaler+MLPClassifier", make_pipeline(preprocessing.StandardScaler(), neural_network.MLPClassifier((32,), max_iter=200, random_state=0)).fit(x, y), x[:100]),
    ]
    if quick:
        return out
    df = pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "city": rng.choice(["x", "y", "z"], len(x))})
    ct = ColumnTransformer([("num", preprocessing.StandardScaler(), ["a", "b"]),
                            ("cat", preprocessing.OneHotEncoder(), ["city"])])
    out += [
        ("SVC", svm.SVC().fit(x, y), x[:100]),
        ("KNeighborsClassifier", neighbors.KNeighborsClassifier().fit(x, y), x[:100]),
        ("GradientBoostingRegressor(100)", ensemble.GradientBoostingRegressor(n_estimators=100, random_state=0).fit(x, x[:, 0]), x[:100]),
        ("HistGradientBoostingRegressor(100)", ensemble.HistGradientBoostingRegressor(max_iter=100, random_state=0).fit(x, x[:, 0]), x[:100]),
        ("ColumnTransformer+LogReg (DataFrame)", Pipeline([("ct", ct), ("lr", linear_model.LogisticRegression())]).fit(df, y), df.iloc[:100]),
    ]
    return out


def _bare(model: Any, samples: Any) -> Callable[[], Any]:
    """skl2onnx as a user would call it by hand: initial types written out, zipmap off."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, Int64TensorType, StringTensorType

    from unframe.converters.frontends._sklearn.export import final_classifier_options

    if hasattr(samples, "columns"):
        import pandas as pd

        def column_type(dtype: Any) -> Any:
            if pd.api.types.is_integer_dtype(dtype):
                return Int64TensorType([None, 1])
            if pd.api.types.is_float_dtype(dtype):
                return FloatTensorType([None, 1])
            return StringTensorType([None, 1])

        types = [(c, column_type(samples[c].dtype)) for c in samples.columns]
    else:
        types = [("X", FloatTensorType([None, samples.shape[1]]))]
    options = final_classifier_options(model, False) or None
    return lambda: to_onnx(model, initial_types=types, target_opset={"": OPSET, "ai.onnx.ml": 3},
                           options=options)


def _unframe(model: Any, samples: Any, **options: Any) -> Callable[[], Any]:
    import unframe

    return lambda: unframe.convert(model, to="onnx", sample_inputs=samples, validate=False,
                                   opset=OPSET, **options)


def _frontend(model: Any, samples: Any) -> Callable[[], Any]:
    """The sklearn frontend's own to_onnx (float route), without unframe.api around it."""
    from unframe.converters.base import ConvertOptions, InputSpec
    from unframe.converters.registry import FRONTENDS

    fe = FRONTENDS.get("sklearn")
    opts = ConvertOptions(opset=OPSET, options={"float_precision": "float"})
    return lambda: fe.to_onnx(model, InputSpec(samples=samples), opts)


def _interleaved(fns: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    """Median time of each function, the repetitions interleaved round-robin so that a change of
    machine load hits every tool alike."""
    for fn in fns.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def run(quick: bool) -> list[dict]:
    from threadpoolctl import threadpool_limits

    reps = 3 if quick else 7
    rows = []
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = models(quick)
        # Try bare skl2onnx on every model before unframe registers its converters into skl2onnx
        # (HistGradientBoosting then works through unframe's converter, also when called bare).
        bare_fails = {name: _bare_failure(model, samples) for name, model, samples in cases}
        for name, model, samples in cases:
            fns = {"unframe_auto_s": _unframe(model, samples),
                   "unframe_float_s": _unframe(model, samples, float_precision="float"),
                   "frontend_float_s": _frontend(model, samples)}
            if not bare_fails[name]:
                fns["skl2onnx_s"] = _bare(model, samples)
            row: dict[str, Any] = {"model": name, **_interleaved(fns, reps),
                                   "note": bare_fails[name]}
            row["auto_route"] = fns["unframe_auto_s"]().export.route
            bare = row.get("skl2onnx_s")
            for key, ratio in (("unframe_auto_s", "ratio_auto"), ("unframe_float_s", "ratio_float"),
                               ("frontend_float_s", "ratio_frontend")):
                row[ratio] = row[key] / bare if bare else None
            rows.append(row)
    return rows


def _bare_failure(model: Any, samples: Any) -> str:
    try:
        _bare(model, samples)()
    except Exception as exc:  # noqa: BLE001 - a gap unframe fills
        return f"bare skl2onnx fails: {str(exc).splitlines()[0][:70]}"
    return ""


def to_markdown(rows: list[dict], quick: bool) -> str:
    lines = [
        "# scikit-learn frontend vs bare skl2onnx",
        "",
        "`unframe.convert(model, to=\"onnx\", validate=False)` against `skl2onnx.to_onnx` with "
        f"hand-written initial types, opset {OPSET}, median of {3 if quick else 7} interleaved runs after a "
        "warm-up, one BLAS/OpenMP thread. `auto` is the default precision (checks float32 "
        "against scikit-learn on the samples); `float` skips that check. "
        "`frontend.to_onnx` is the sklearn frontend alone (float route), without `unframe.api`.",
        "Measured by `bench/frontends_sklearn.py` on this machine (2 cores, shared with other jobs, "
        "so absolute times are noisy).",
        "",
        "| model | skl2onnx (s) | unframe auto (s) | ratio | auto chose | unframe float (s) "
        "| ratio | frontend.to_onnx float (s) | ratio | note |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        def f(key: str, fmt: str = "{:.4f}", r: dict = r) -> str:
            return fmt.format(r[key]) if r.get(key) is not None else "-"

        lines.append(f"| {r['model']} | {f('skl2onnx_s')} | {f('unframe_auto_s')} | "
                     f"{f('ratio_auto', '{:.2f}x')} | {r.get('auto_route', '')} | {f('unframe_float_s')} | "
                     f"{f('ratio_float', '{:.2f}x')} | {f('frontend_float_s')} | "
                     f"{f('ratio_frontend', '{:.2f}x')} | {r.get('note', '')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = run(args.quick)
    text = to_markdown(rows, args.quick)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

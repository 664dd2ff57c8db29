"""scikit-learn, XGBoost and LightGBM estimators through the compiled routes, against the
estimator itself, on 10,000 rows: labels identical (%) and max |delta| of every probability or
score output, for

* ``onnx``: ONNX with ``ml_to_tensor`` (every ai.onnx.ml op compiled to standard ONNX), in
  onnxruntime;
* ``coreml``: the Core ML package (default fp16 target), in unframe's MIL evaluator;
* ``tensorrt``: pre-flight and the CPU build with tensorrt-rtx (running needs a GPU: "built").

The estimator list is the sklearn frontend's test list (``tests/converters/frontends/
test_sklearn_estimators.py``: every family the frontend supports, plus XGBoost and LightGBM).
Each is fitted on 1,500 seeded rows (300 for the kernel methods, whose graphs grow with the
training set) and evaluated on 10,000 rows in chunks of 2,000 (Core ML's default batch bound is
4,096): normal rows, rows with a feature placed exactly on a threshold of the exported trees
(tree models), and rows with NaN for the estimators that handle missing values.

Results are cached per (estimator, route) in ``--cache`` so the sweep can run in parts
(``--only``, ``--routes``); ``--out`` renders every cached result as markdown, and the JSON
beside it feeds docs/support.md's per-target columns.

    .venv/bin/python bench/sklearn_routes.py [--only NAME ...] [--routes onnx,coreml,tensorrt]
        [--cache docs/benchmarks/sklearn_routes.json] [--out docs/benchmarks/sklearn_routes.md]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ROWS = 10_000
CHUNK = 2_000
SMALL_FIT = {"KNeighbors", "LocalOutlierFactor", "GaussianProcess", "SVC", "SVR", "OneClassSVM"}
MISSING_OK = {"HistGradientBoosting", "XGB", "LGBM", "SimpleImputer"}
TARGET = 1e-5


def cases() -> list[tuple[str, Any, str, str]]:
    sys.path.insert(0, str(ROOT / "tests" / "converters" / "frontends"))
    import test_sklearn_estimators as t

    return t.cases()


def data(x_kind: str, y_kind: str, n: int, seed: int) -> tuple[np.ndarray, Any]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6))
    y = {"multi": (x[:, 0] + x[:, 1] > 0).astype(int) + (x[:, 2] > 0.5),
         "bin": (x[:, 0] - x[:, 3] > 0).astype(int),
         "reg": x[:, 0] * 2 - x[:, 1] + 0.1 * x[:, 2] ** 2,
         "pos": np.exp(x[:, 0] / 2), "none": None}[y_kind]
    if x_kind == "pos":
        x = np.abs(x)
    elif x_kind == "nan":
        x[rng.random(x.shape) < 0.1] = np.nan
    elif x_kind == "str":
        x = np.array(["red", "green", "blue"], dtype=object)[rng.integers(0, 3, size=(n, 2))]
    elif x_kind == "1d":
        x = x[:, 0]
        y = x ** 3 + 0.1 * rng.normal(size=n)
    return x, y


def thresholds_of(model: Any) -> list[tuple[int, float]]:
    """(feature, threshold) of every tree node in the exported graph (before lowering)."""
    import onnx_ir as ir

    from unframe.passes.ml_to_tensor import ml_nodes

    out: list[tuple[int, float]] = []
    for node in ml_nodes(model):
        feats = node.attributes.get("nodes_featureids")
        values = node.attributes.get("nodes_values") or node.attributes.get("nodes_splits") \
            or node.attributes.get("nodes_values_as_tensor")
        if feats is None or values is None:
            continue
        vals = values.value.numpy().reshape(-1) if values.type == ir.AttributeType.TENSOR \
            else np.asarray(values.value)
        out += list(zip(list(feats.value), vals.tolist(), strict=False))
    return out


def eval_rows(name: str, x_kind: str, export_model: Any, rng: np.random.Generator) -> Any:
    x, _ = data(x_kind, "none", ROWS, seed=1)
    if x_kind in ("str", "1d"):
        return x
    on_threshold = thresholds_of(export_model)
    if on_threshold:  # a fifth of the rows: one feature exactly on a tree threshold
        for row in range(0, ROWS, 5):
            f, t = on_threshold[rng.integers(len(on_threshold))]
            if f < x.shape[1]:
                x[row, f] = t
    if any(name.startswith(k) for k in MISSING_OK):
        x[rng.random(x.shape) < 0.05] = np.nan
    return x


def compare(ref: dict[str, np.ndarray], got: dict[str, np.ndarray], label_outputs: list[str]
            ) -> dict[str, Any]:
    """Labels identical (share of rows), max |delta| of the float outputs, and their scale
    (largest |reference|): the target is |delta| <= 1e-5 x max(1, scale)."""
    labels_same, deltas, scales = [], [], []
    for name, r in ref.items():
        g = np.asarray(got[name]).reshape(np.asarray(r).shape)
        r = np.asarray(r)
        if name in label_outputs or r.dtype.kind not in "f":
            labels_same.append(float(np.mean(r == g)))
        else:
            both_nan = np.isnan(r) & np.isnan(g.astype(np.float64))
            diff = np.abs(r.astype(np.float64) - g.astype(np.float64))
            deltas.append(float(np.max(np.where(both_nan, 0.0, diff))) if r.size else 0.0)
            scales.append(float(np.nanmax(np.abs(r))) if r.size else 0.0)
    return {"labels_identical": min(labels_same) if labels_same else None,
            "max_delta": max(deltas) if deltas else None,
            "scale": max(scales) if scales else None}


def at_target(row: dict[str, Any]) -> bool:
    lab, delta = row.get("labels_identical"), row.get("max_delta")
    return (lab is None or lab == 1.0) and \
        (delta is None or delta <= TARGET * max(1.0, row.get("scale") or 0.0))


def run_chunks(runner: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    n = len(next(iter(feeds.values())))
    parts: list[dict[str, np.ndarray]] = []
    for start in range(0, n, CHUNK):
        parts.append(runner.run({k: v[start:start + CHUNK] for k, v in feeds.items()}))
    return {k: np.concatenate([np.asarray(p[k]).reshape(len(np.asarray(p[k])), -1) if np.asarray(p[k]).ndim > 1
                               else np.asarray(p[k]) for p in parts]) for k in parts[0]}


def feeds_for(export: Any, x: Any) -> dict[str, np.ndarray]:
    from unframe.converters.frontends._sklearn import inputs

    plan = export.extra["input_plan"]
    plan_rows = inputs.InputPlan(plan.layout, plan.names, plan.kinds, plan.n_features,
                                 samples=x, one_dimensional=plan.one_dimensional)
    if plan.one_dimensional:
        plan_rows.samples = np.asarray(x).reshape(-1, 1)
    return inputs.sample_feeds(plan_rows, export.extra["precision"] == "double")[0]


def measure(name: str, model: Any, x_kind: str, route: str) -> dict[str, Any]:
    import unframe
    from unframe.converters.registry import FRONTENDS
    from unframe.passes.ml_to_tensor import MAPPING_KEY
    from unframe.passes.ml_to_tensor.host import MappedReference, encode_feed

    fe = FRONTENDS.get("sklearn")
    fit_x, _ = data(x_kind, "none", 200, seed=2)
    samples = fit_x[:200]
    t0 = time.perf_counter()
    plain = unframe.convert(model, to="onnx", sample_inputs=samples, opset=21, validate=False)
    x = eval_rows(name, x_kind, plain.model, np.random.default_rng(3))
    if route == "onnx":
        result = unframe.convert(model, to="onnx", sample_inputs=samples, opset=21, ml_to_tensor=True)
    else:
        result = unframe.convert(model, to=route, sample_inputs=samples)
    seconds = time.perf_counter() - t0
    lowered = result.flow.model
    strategies = [n.split(": ", 1)[1] for n in result.notes if n.startswith("ml_to_tensor: ") and "trees" in n]
    row: dict[str, Any] = {"status": "converted", "strategies": strategies,
                           "convert_s": round(seconds, 1),
                           "parity": [f"{s.stage}: {s.status}" for s in result.report.stages]}
    export = result.flow.export
    reference = fe.runner(model, export)
    feeds = feeds_for(export, x)
    mappings = json.loads(lowered.metadata_props.get(MAPPING_KEY, "{}"))
    if mappings:
        reference = MappedReference(reference, mappings)
        feeds = encode_feed(feeds, {k: v["vocabulary"] for k, v in mappings.get("inputs", {}).items()})
    if route == "tensorrt":
        backend = next(s for s in result.report.stages if s.stage == "backend")
        row["status"] = "built" if backend.status == "skipped" else backend.status
        row["reason"] = backend.reason
        return row
    if route == "onnx":
        from unframe.validate.onnxruntime import OnnxRuntimeRunner

        candidate = OnnxRuntimeRunner(result.model)
    else:
        backend = result.branch.backend
        candidate = backend.runner(result.artifact, result.branch.target)
    ref = run_chunks(reference, feeds)
    got = run_chunks(candidate, feeds)
    row.update(compare(ref, got, export.exact_outputs), rows=len(next(iter(feeds.values()))))
    return row


def render(results: dict[str, dict[str, Any]]) -> str:
    routes = ("onnx", "coreml", "tensorrt")
    lines = ["| estimator | " + " | ".join(routes) + " | tree strategy |",
             "|---|" + "---|" * (len(routes) + 1)]
    totals = {r: [0, 0] for r in routes}
    for name in sorted(results):
        cells, strategy = [], ""
        for r in routes:
            row = results[name].get(r)
            if row is None:
                cells.append("not run")
                continue
            strategy = strategy or ", ".join(row.get("strategies") or [])
            if row["status"] == "error":
                cells.append(f"fails: {row['error'][:70]}")
                continue
            if r == "tensorrt":
                ok = row["status"] == "built"
                cells.append("built (run needs a GPU)" if ok else row["status"])
            else:
                lab, delta = row.get("labels_identical"), row.get("max_delta")
                ok = at_target(row)
                parts = []
                if lab is not None:
                    parts.append(f"labels {lab:.2%}")
                if delta is not None:
                    parts.append(f"max Δ {delta:.1e}" + (f" (scale {row['scale']:.3g})"
                                                         if (row.get("scale") or 0) > 1 else ""))
                cells.append(("" if ok else "**miss** ") + ", ".join(parts))
            totals[r][0] += ok
            totals[r][1] += 1
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {strategy} |")
    summary = ", ".join(f"{r}: {ok}/{n} at target" for r, (ok, n) in totals.items())
    return (f"{ROWS:,} rows per estimator; target: labels 100% identical and max |Δ| <= {TARGET:g} "
            "against the estimator itself (x the output's scale where it exceeds 1: float32 "
            f"holds ~7 digits). {summary}.\n\n" + "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--routes", default="onnx,coreml,tensorrt")
    ap.add_argument("--cache", type=Path, default=ROOT / "docs" / "benchmarks" / "sklearn_routes.json")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from threadpoolctl import threadpool_limits

    results = json.loads(args.cache.read_text()) if args.cache.exists() else {}
    with threadpool_limits(1):
        for name, factory, x_kind, y_kind in cases():
            if args.only and not any(o == name or name.startswith(o) for o in args.only):
                continue
            small = any(name.startswith(k) for k in SMALL_FIT)
            x, y = data(x_kind, y_kind, 300 if small else 1500, seed=0)
            model = factory()
            model.fit(x, y) if y is not None else model.fit(x)
            for route in args.routes.split(","):
                try:
                    row = measure(name, model, x_kind, route)
                except Exception as exc:  # recorded, not hidden: the table shows it
                    row = {"status": "error", "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
                    traceback.print_exc()
                results.setdefault(name, {})[route] = row
                print(name, route, {k: v for k, v in row.items() if k != "parity"}, flush=True)
                args.cache.write_text(json.dumps(results, indent=1, sort_keys=True))
    if args.out:
        args.out.write_text(render(results) + "\n")
        print(render(results))


if __name__ == "__main__":
    main()

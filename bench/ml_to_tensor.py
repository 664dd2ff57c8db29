"""Compiled trees against the native ai.onnx.ml operator, in onnxruntime, in the same run.

A scikit-learn forest (100 trees, max_depth 8, fitted on seeded data so that the trees are
full) is exported by unframe's sklearn frontend (skl2onnx's TreeEnsemble* op), then lowered by
``unframe.passes.ml_to_tensor`` (auto picks by depth: perfect traversal at depth 8; tree
traversal is shown too); a depth-3 forest shows GEMM, hummingbird's choice at that depth and
the rule on a GPU runtime (TensorRT), against perfect traversal, which "auto" picks on CPU
runtimes (onnxruntime, Core ML) because of these figures. Both graphs run in onnxruntime on the
same 10,000 rows with one intra-op thread; the figure is
the median CPU time of the repetitions (steadier than wall time on this shared machine; with one
thread they coincide when the machine is idle), and the ratio compiled / native (target: <= 1.5).
``--threads N`` measures wall time with N threads instead. Outputs are checked equal (labels
exactly, scores within 1e-5) before timing.

    .venv/bin/python bench/ml_to_tensor.py [--quick] [--threads N] [--out docs/benchmarks/ml_to_tensor.md]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import median_cpu_time, median_time  # noqa: E402

ROWS = 10_000


def forest(kind: str, trees: int, depth: int) -> tuple[object, np.ndarray]:
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    rng = np.random.default_rng(0)
    x = rng.normal(size=(20_000, 20)).astype(np.float32)
    y_reg = x[:, 0] * 2 - x[:, 1] + np.sin(3 * x[:, 2]) + 0.1 * rng.normal(size=len(x))
    if kind == "classifier":
        y = (y_reg > 0).astype(int) + (x[:, 3] > 0.5)
        model = RandomForestClassifier(trees, max_depth=depth, random_state=0, n_jobs=1).fit(x, y)
    else:
        model = RandomForestRegressor(trees, max_depth=depth, random_state=0, n_jobs=1).fit(x, y_reg)
    rows = rng.normal(size=(ROWS, 20)).astype(np.float32)
    return model, rows


def export(model: object, rows: np.ndarray) -> object:
    from unframe.converters.base import ConvertOptions, InputSpec
    from unframe.converters.registry import FRONTENDS

    fe = FRONTENDS.get("sklearn")
    return fe.to_onnx(model, InputSpec(samples=rows[:100]),
                      ConvertOptions(options={"float_precision": "float"})).model


def session(model: object, threads: int) -> object:
    import onnx_ir as ir
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    return ort.InferenceSession(ir.to_proto(model).SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def measure(kind: str, trees: int, depth: int, threads: int, reps: int,
            strategies: tuple[str, ...]) -> list[dict]:
    from unframe.passes.ml_to_tensor import lower

    model, rows = forest(kind, trees, depth)
    native_model = export(model, rows)
    native = session(native_model, threads)
    feed = {native.get_inputs()[0].name: rows}
    ref = native.run(None, feed)
    native.run(None, feed)
    timer = median_cpu_time if threads == 1 else median_time
    t_native = timer(lambda: native.run(None, feed), reps)
    out = []
    for strategy in strategies:
        lowered = native_model.clone()
        t0 = time.perf_counter()
        # "auto": the rule the routes to onnx and coreml use (no GEMM on a CPU runtime)
        report = lower(lowered, tree_strategy=None if strategy == "auto" else strategy, gemm_max_depth=0)
        t_lower = time.perf_counter() - t0
        sess = session(lowered, threads)
        got = sess.run(None, feed)
        for r, g in zip(ref, got, strict=True):
            if r.dtype.kind in "iu":
                assert np.array_equal(r, g), f"{strategy}: labels differ"
            else:
                assert np.max(np.abs(r - g)) <= 1e-5 * max(1.0, float(np.max(np.abs(r)))), strategy
        sess.run(None, feed)
        t = timer(lambda s=sess: s.run(None, feed), reps)
        out.append({"model": f"{kind} {trees}x{depth}", "strategy": strategy,
                    "chosen": report.strategies()[0].rsplit(": ", 1)[-1],
                    "native_ms": t_native * 1e3, "compiled_ms": t * 1e3, "ratio": t / t_native,
                    "lower_s": t_lower})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="20 trees, 3 repetitions")
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (both)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    trees, reps = (20, 3) if args.quick else (100, 15)
    rows = []
    for kind in ("regressor", "classifier"):
        rows += measure(kind, trees, 8, args.threads, reps, ("auto", "traversal"))
        rows += measure(kind, trees, 3, args.threads, reps, ("auto", "gemm"))
    header = "| model | strategy | chosen | native ms | compiled ms | compiled / native | lowering s |"
    lines = [header, "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['strategy']} | {r['chosen']} | {r['native_ms']:.1f} | "
                     f"{r['compiled_ms']:.1f} | {r['ratio']:.2f} | {r['lower_s']:.2f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

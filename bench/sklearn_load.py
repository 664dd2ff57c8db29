"""Loading .skops tree ensembles by validation (unframe, no --trust) against skops' trusted load
(``skops.io.load(path, trusted=<the file's untrusted types>)``, which checks nothing) on the same
files, in the same run: a 500-tree RandomForest and HistGradientBoosting, XGBoost and LightGBM
models of similar size. Also the boosters' own model files (.ubj, .txt) against the library's
loader. Prints the time ratios; target: validation <= 1.2x the trusted load.

Time is the median wall time of interleaved repetitions after a warm-up, one BLAS/OpenMP thread
(the machine is shared; CPU time is printed too, as it is steadier under load).

    .venv/bin/python bench/sklearn_load.py [--quick] [--reps 7] [--out docs/benchmarks/sklearn_load.md]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy, xgboost, lightgbm load OpenMP

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def models(n_trees: int) -> list[tuple[str, Any]]:
    """(name, fitted model) on seeded data: 2000 rows, 20 features, three classes."""
    import lightgbm
    import xgboost
    from sklearn import ensemble

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 20))
    y = (x[:, 0] + x[:, 1] > 0).astype(int) + (x[:, 2] > 0.5)
    return [
        (f"RandomForestClassifier({n_trees}, depth 10)",
         ensemble.RandomForestClassifier(n_trees, max_depth=10, random_state=0).fit(x, y)),
        (f"HistGradientBoostingRegressor({n_trees})",
         ensemble.HistGradientBoostingRegressor(max_iter=n_trees, early_stopping=False,
                                                random_state=0).fit(x, x[:, 0] - x[:, 1] ** 2)),
        (f"XGBClassifier({n_trees // 3}x3 classes, depth 6)",
         xgboost.XGBClassifier(n_estimators=n_trees // 3, max_depth=6, n_jobs=1).fit(x, y)),
        (f"LGBMRegressor({n_trees})",
         lightgbm.LGBMRegressor(n_estimators=n_trees, n_jobs=1, verbose=-1).fit(x, x[:, 0] - x[:, 1] ** 2)),
    ]


def timed(fns: dict[str, Callable[[], Any]], reps: int) -> dict[str, tuple[float, float]]:
    """Median (wall, cpu) seconds per function, interleaved so load drifts hit all alike."""
    import gc

    for fn in fns.values():
        fn()  # warm-up: imports, first-call caches
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            gc.collect()
            gc.disable()
            try:
                w, c = time.perf_counter(), time.process_time()
                fn()
                wall[name].append(time.perf_counter() - w)
                cpu[name].append(time.process_time() - c)
            finally:
                gc.enable()
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in fns}


def skops_rows(items: list[tuple[str, Any]], folder: Path, reps: int) -> list[dict[str, Any]]:
    import skops.io as sio

    from unframe.converters.frontends._sklearn.validators import load_validated

    rows = []
    for name, model in items:
        path = folder / f"{name.split('(')[0]}.skops"
        sio.dump(model, path)
        trusted = sio.get_untrusted_types(file=path)
        t = timed({"skops": lambda p=path, tr=trusted: sio.load(p, trusted=tr),
                   "unframe": lambda p=path: load_validated(p)}, reps)
        rows.append({"file": f"{name} .skops", "MiB": path.stat().st_size / 2**20,
                     "baseline": "skops.io.load(trusted=...)", **_ratios(t["skops"], t["unframe"])})
    return rows


def native_rows(items: list[tuple[str, Any]], folder: Path, reps: int) -> list[dict[str, Any]]:
    import lightgbm
    import xgboost

    from unframe.converters.frontends._sklearn.load import load_lightgbm, load_xgboost

    rows = []
    for name, model in items:
        if isinstance(model, xgboost.XGBModel):
            path = folder / "xgb.ubj"
            model.save_model(path)
            baseline = lambda p=path, cls=type(model): cls().load_model(p)  # noqa: E731
            ours, label = (lambda p=path: load_xgboost(p)), "XGBClassifier().load_model"
        elif isinstance(model, lightgbm.LGBMModel):
            path = folder / "lgbm.txt"
            model.booster_.save_model(path)
            baseline = lambda p=path: lightgbm.Booster(model_file=str(p))  # noqa: E731
            ours, label = (lambda p=path: load_lightgbm(p)), "lightgbm.Booster(model_file=...)"
        else:
            continue
        t = timed({"lib": baseline, "unframe": ours}, reps)
        rows.append({"file": f"{name} {path.suffix}", "MiB": path.stat().st_size / 2**20,
                     "baseline": label, **_ratios(t["lib"], t["unframe"])})
    return rows


def _ratios(base: tuple[float, float], ours: tuple[float, float]) -> dict[str, Any]:
    return {"baseline s": base[0], "unframe s": ours[0], "ratio": ours[0] / base[0],
            "cpu ratio": ours[1] / base[1]}


def markdown(rows: list[dict[str, Any]], reps: int) -> str:
    lines = ["# Loading scikit-learn, XGBoost and LightGBM models by validation", "",
             "unframe's load without `--trust` (read the archive, validate every object of a type "
             "skops does not trust by default, let skops build it, check the built estimator's "
             "links) against the loader that checks nothing: `skops.io.load(path, trusted=<the "
             "file's untrusted types>)` for .skops files, the library's own loader for XGBoost "
             "`.ubj` and LightGBM `.txt` files. Target: at most 1.2x.",
             f"Measured by `bench/sklearn_load.py`: median wall time of {reps} interleaved runs "
             "after a warm-up, one BLAS/OpenMP thread, on this machine (2 cores shared with other "
             "jobs: absolute times are noisy, the CPU-time ratio is steadier).", "",
             "| file | MiB | baseline | baseline (s) | unframe (s) | ratio | CPU-time ratio |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['file']} | {r['MiB']:.1f} | `{r['baseline']}` | {r['baseline s']:.3f} "
                     f"| {r['unframe s']:.3f} | {r['ratio']:.2f}x | {r['cpu ratio']:.2f}x |")
    return "\n".join(lines + ["", *NOTES]) + "\n"


NOTES = [
    "Where the time goes:",
    "",
    "* scikit-learn tree ensembles (.skops): unframe reads each array of the archive once, "
    "checks all the trees of the file together in a few dozen vectorized numpy calls "
    "(`forest_depths`: bincount of parents, pointer jumping for cycles and depths), and hands "
    "the very arrays it checked to skops, which then skips reading them. skops' type audit runs "
    "once. What remains above skops' own load is the checks themselves.",
    "* XGBoost and LightGBM: the baseline is the library's C++ parser, which checks nothing "
    "(XGBoost even follows `parents` while loading). unframe must read the whole model before "
    "that parser does: XGBoost's UBJSON in Python (a few microseconds per token, some 45 tokens "
    "per tree besides the arrays) and LightGBM's text (per-tree line splitting; the numbers "
    "through numpy's C parser), then check all trees as one forest. That read is the gap; the "
    "tree checks themselves are a few percent. Closing it needs a compiled UBJSON reader.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 trees, 3 repetitions")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    reps = 3 if args.quick else args.reps
    warnings.simplefilter("ignore")
    with threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        items = models(100 if args.quick else 500)
        rows = skops_rows(items, Path(tmp), reps) + native_rows(items, Path(tmp), reps)
    text = markdown(rows, reps)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

"""Keras to ONNX, wall time: ``unframe.convert(model, to="onnx", sample_inputs=x)`` against the
anchor, tf2onnx's conversion plus an onnxruntime-vs-Keras check (issue 39).

Two sets of models:

* ``conv``: the Conv2DTranspose case of the issue, keras2onnx's ``test_conv2d_transpose_2``
  layer stack (``Input(128, 128, 3)`` -> ``Conv2DTranspose(256, 4, strides=2, padding="same",
  use_bias=False)`` -> ``BatchNormalization``), weights perturbed so the outputs are of order 1.
  Anchor: ``tf2onnx.convert.from_keras`` (opset 18, batch left open as unframe leaves it), one
  onnxruntime session on the sample, ``model.predict`` on it and ``np.allclose``.
* ``suite``: every model the keras2onnx unit tests (tf2onnx's wheel, ``tests/keras2onnx_unit_tests``,
  loaded as ``bench/peer_tf2onnx.py`` loads them) hand to onnxruntime. Anchor: the test's own path,
  timed as the test runs it: its ``convert_keras`` call (tf2onnx, same arguments), ``model.predict``
  on its data and its ``run_onnx_runtime`` check. unframe: the Keras model with the test's data as
  sample inputs (its ``channel_first_inputs`` as ``nchw_inputs``), default options, ``locate=False``
  (the locator only explains a failure).

Each side runs ``--repeat`` times, alternating (anchor, unframe, anchor, ...), in the same process;
a side's figure is its best run. unframe's best run is split into steps: ``load``; ``probes``
(first feed, dynamic-axis probes: ``_tf/pipeline.plan_axes``); ``builds`` (the export routes tried,
``tf2onnx``/Keras export calls, their count in brackets); ``finish`` (graph edits); ``selfchk`` (the
per-route numbers check); ``parity`` (the pipeline's parity stage); ``rest`` (planning, the ONNX
backend, provenance). Steps are timed by wrapping those functions from outside (no change to
unframe). The ratio is unframe / anchor; the suite's summary gives p50/p90 of the per-model
ratios and of each side's per-model seconds, over the models both sides convert.

    python bench/keras_speed.py [--case conv,suite] [--repeat 3] [--every N] [-k EXPR]
        [--out /tmp/keras_speed.json]

The suite imports ``parameterized``; ``PYTHONPATH=<checkout>`` measures another unframe.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

STEPS: Counter[str] = Counter()


# ------------------------------------------------------------------ unframe, split in steps ----
def install_step_timers() -> None:
    """Wrap the TF frontend's steps (module globals, called through their modules) with timers."""
    from unframe.converters.frontends._tf import export as routes
    from unframe.converters.frontends._tf import pipeline as tfp

    def timed(module: Any, name: str, key: str, count: bool = False) -> None:
        original = getattr(module, name)
        if getattr(original, "_timed", False):
            return

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                STEPS[key] += time.perf_counter() - started
                if count:
                    STEPS[key + "#"] += 1

        wrapper._timed = True  # type: ignore[attr-defined]
        setattr(module, name, wrapper)

    timed(tfp, "plan_axes", "probes")
    timed(routes, "try_attempt", "attempts", count=True)
    timed(tfp, "_finish", "finish")
    timed(tfp, "_check", "selfchk")


def unframe_run(model: Any, samples: Any, **options: Any) -> tuple[float, dict[str, float]]:
    import unframe

    STEPS.clear()
    started = time.perf_counter()
    result = unframe.convert(model, to="onnx", sample_inputs=samples, locate=False, **options)
    total = time.perf_counter() - started
    t = result.timings
    # the finish inside an attempt is part of its check; one made after the loop is not
    builds = STEPS["attempts"] - STEPS["selfchk"] - STEPS["finish"]
    parity = t.get("parity:export", 0.0) - (result.export.check_seconds if result.export else 0.0)
    split = {"load": t.get("load", 0.0), "probes": STEPS["probes"], "builds": builds,
             "attempts": STEPS["attempts#"], "finish": STEPS["finish"], "selfchk": STEPS["selfchk"],
             "parity": parity}
    split["rest"] = total - sum(v for k, v in split.items() if k != "attempts")
    return total, split


def best_of(repeat: int, anchor: Callable[[], None], ours: Callable[[], tuple[float, dict[str, float]]]
            ) -> dict[str, Any]:
    """Alternating runs, best of ``repeat`` per side."""
    a_times: list[float] = []
    u_runs: list[tuple[float, dict[str, float]]] = []
    for _ in range(repeat):
        started = time.perf_counter()
        anchor()
        a_times.append(time.perf_counter() - started)
        u_runs.append(ours())
    u_best = min(u_runs, key=lambda r: r[0])
    return {"anchor_s": min(a_times), "unframe_s": u_best[0], "ratio": u_best[0] / min(a_times),
            "split": u_best[1], "anchor_runs": a_times, "unframe_runs": [r[0] for r in u_runs]}


# ----------------------------------------------------------------------- the conv case ------
def conv_model(seed: int = 0) -> Any:
    import keras
    import numpy as np

    keras.utils.set_random_seed(seed)
    inp = keras.Input((128, 128, 3), name="image")
    x = keras.layers.Conv2DTranspose(256, (4, 4), strides=2, padding="same", use_bias=False)(inp)
    model = keras.Model(inp, keras.layers.BatchNormalization()(x))
    rng = np.random.default_rng(seed)
    kernel, gamma, beta, mean, var = model.get_weights()
    model.set_weights([w.astype("float32") for w in (
        rng.normal(0, 1 / np.sqrt(4 * 4 * 3), kernel.shape), rng.normal(1, 0.1, gamma.shape),
        rng.normal(0, 0.1, beta.shape), rng.normal(0, 0.1, mean.shape), rng.uniform(0.5, 1.5, var.shape))])
    return model


def conv_case(repeat: int) -> dict[str, Any]:
    import numpy as np
    import onnxruntime as ort
    import tensorflow as tf
    import tf2onnx

    model = conv_model()
    x = np.random.default_rng(1).normal(size=(1, 128, 128, 3)).astype(np.float32)

    def anchor() -> None:
        spec = [tf.TensorSpec((None, 128, 128, 3), tf.float32, name="image")]
        proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=18)
        session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        got = session.run(None, {session.get_inputs()[0].name: x})[0]
        want = model.predict(x, verbose=0)
        assert np.allclose(want, got, rtol=1e-3, atol=1e-4), "anchor: tf2onnx's graph differs"

    row = best_of(repeat, anchor, lambda: unframe_run(model, x))
    row["case"] = "Conv2DTranspose 128x128x3 -> 256, k4 s2 same, + BatchNorm"
    row["output_std"] = float(np.std(model.predict(x, verbose=0)))
    return row


# ------------------------------------------------------------------------ the Keras suite ----
class SuiteTimer:
    """pytest plugin for the child: times each model a keras2onnx unit test checks."""

    def __init__(self, log: Path, repeat: int, every: int) -> None:
        self.log, self.repeat, self.every = log, repeat, every
        self.case = ""
        self.index = 0

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        if self.every > 1:
            items[:] = [it for it in items if zlib.crc32(it.nodeid.encode()) % self.every == 0]
        utils = sys.modules["test_utils"]
        if not getattr(utils, "_timed", False):
            self._hook(utils)

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.case, self.index = nodeid, 0
        self._write({"event": "start", "case": nodeid})

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self._write({"event": "end", "case": nodeid})

    def _write(self, row: dict[str, Any]) -> None:
        with self.log.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def _hook(self, utils: Any) -> None:
        convert, run_ort = utils.convert_keras, utils.run_onnx_runtime
        state: dict[str, Any] = {}

        def convert_keras(model: Any, *args: Any, **kwargs: Any) -> Any:
            state.update(model=model, args=args, kwargs=kwargs)
            return convert(model, *args, **kwargs)

        def run_onnx_runtime(case_name: str, onnx_model: Any, data: Any, expected: Any, model_files: Any,
                             rtol: float = 1.e-3, atol: float = 1.e-6, **kwargs: Any) -> Any:
            model = state.pop("model", None)
            if model is not None and expected is not None:
                self._time_model(model, state, run_ort, case_name, data, rtol, atol)
            return run_ort(case_name, onnx_model, data, expected, model_files, rtol=rtol, atol=atol,
                           **kwargs)

        utils.convert_keras = convert_keras
        utils.run_onnx_runtime = run_onnx_runtime
        for mod in list(sys.modules.values()):  # the conftest's runner fixture holds its own reference
            if getattr(mod, "run_onnx_runtime", None) is run_ort and mod is not utils:
                mod.run_onnx_runtime = run_onnx_runtime
        utils._timed = True

    def _time_model(self, model: Any, state: dict[str, Any], run_ort: Any, case_name: str, data: Any,
                    rtol: float, atol: float) -> None:
        import numpy as np

        from unframe.errors import UnframeError

        args, kwargs = state.get("args", ()), dict(state.get("kwargs", {}))
        nchw = kwargs.get("channel_first_inputs")
        original = _original_convert()
        files: list[str] = []

        def anchor() -> None:
            proto = original(model, *args, **kwargs)
            preds = model.predict(data, verbose=0)
            if not run_ort(case_name, proto, data, preds, files, rtol=rtol, atol=atol):
                raise AssertionError("tf2onnx's graph differs from Keras")

        samples = data
        if nchw:  # the test's data is channels-first for those inputs; unframe takes Keras' layout
            names = [str(t.name).split(":")[0] for t in model.inputs]
            listed = data if isinstance(data, list) else [data]
            samples = [np.moveaxis(x, 1, -1) if n in nchw else x for n, x in zip(names, listed, strict=False)]
        options = {"nchw_inputs": list(nchw)} if nchw else {}
        row: dict[str, Any] = {"event": "model", "case": self.case, "index": self.index}
        self.index += 1
        try:
            anchor()
        except Exception as exc:  # noqa: BLE001 - not a model both sides convert: unframe alone, once
            row["anchor_failed"] = f"{type(exc).__name__}: {str(exc)[:160]}"
            try:
                row["unframe_s"], row["split"] = unframe_run(model, samples, **options)
            except UnframeError as err:
                row["unframe_failed"] = f"exit {err.exit_code}: {str(err)[:160]}"
            self._write(row)
            return
        try:
            row.update(best_of(self.repeat, anchor, lambda: unframe_run(model, samples, **options)))
        except UnframeError as err:
            row["unframe_failed"] = f"exit {err.exit_code}: {str(err)[:160]}"
        finally:
            for f in files:
                Path(f).unlink(missing_ok=True)
        self._write(row)


def _original_convert() -> Any:
    from tf2onnx.keras2onnx_api import convert_keras

    return convert_keras


def child(log: Path, repeat: int, every: int, deselect: list[str], keyword: str | None) -> int:
    import pytest
    from peer_tf2onnx import _onnx_mapping_standin, suite_dir

    _onnx_mapping_standin()
    install_step_timers()
    root = suite_dir()
    ini = Path(tempfile.mkdtemp(prefix="keras-speed-ini-")) / "pytest.ini"
    ini.write_text("[pytest]\n")
    args = ["-c", str(ini), "--rootdir", str(root), "-p", "no:cacheprovider", "-q", "--no-header",
            "-p", "no:randomly", str(root / "keras2onnx_unit_tests")]
    for d in deselect:
        args += ["--deselect", d]
    if keyword:
        args += ["-k", keyword]
    return pytest.main(args, plugins=[SuiteTimer(log, repeat, every)])


def suite(repeat: int, every: int, keyword: str | None, logdir: Path) -> list[dict[str, Any]]:
    """The suite in a child process, restarted past a case it died in."""
    from peer_tf2onnx import suite_dir

    log = logdir / "keras_speed.jsonl"
    log.unlink(missing_ok=True)
    skip: list[str] = []
    while True:
        cmd = [sys.executable, __file__, "--child", "--log", str(log), "--repeat", str(repeat),
               "--every", str(every)] + [a for d in skip for a in ("--deselect", d)]
        if keyword:
            cmd += ["-k", keyword]
        env = {**os.environ, "TF2ONNX_SKIP_TFLITE_TESTS": "TRUE", "TF2ONNX_SKIP_TFJS_TESTS": "TRUE"}
        proc = subprocess.run(cmd, cwd=str(suite_dir()), stdout=subprocess.DEVNULL, env=env,
                              stderr=(logdir / "keras_speed.stderr").open("a"))
        rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        open_case = None
        for row in rows:
            if row["event"] == "start":
                open_case = row["case"]
            elif row["event"] == "end":
                skip.append(row["case"])
                open_case = None
        if proc.returncode in (0, 1, 5) or open_case is None or open_case in skip:
            return [r for r in rows if r["event"] == "model"]
        skip.append(open_case)  # died inside it: go on past it


# ---------------------------------------------------------------------------------- report ----
def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return statistics.quantiles(ordered, n=100, method="inclusive")[int(q) - 1] if len(ordered) > 1 else ordered[0]


def split_text(split: dict[str, float]) -> str:
    keys = ("load", "probes", "builds", "finish", "selfchk", "parity", "rest")
    return " ".join(f"{k} {split[k]:.2f}" + (f" [{split['attempts']}]" if k == "builds" else "") for k in keys)


def print_row(name: str, row: dict[str, Any]) -> None:
    if "ratio" in row:
        print(f"{name[:70]:70s} {row['unframe_s']:7.2f} {row['anchor_s']:7.2f} {row['ratio']:6.2f}x  "
              f"{split_text(row['split'])}", flush=True)
    elif "unframe_s" in row:
        print(f"{name[:70]:70s} {row['unframe_s']:7.2f}       -      -   (anchor failed) "
              f"{split_text(row['split'])}", flush=True)
    else:
        print(f"{name[:70]:70s} failed: {row.get('unframe_failed', '')[:120]}", flush=True)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    both = [r for r in rows if "ratio" in r]
    if not both:
        return {"models": len(rows), "both": 0}
    ratios = [r["ratio"] for r in both]
    u = [r["unframe_s"] for r in both]
    a = [r["anchor_s"] for r in both]
    alone = [r["unframe_s"] for r in rows if "anchor_failed" in r and "unframe_s" in r]
    out = {"models": len(rows), "both": len(both), "ratio_p50": pct(ratios, 50), "ratio_p90": pct(ratios, 90),
           "unframe_p50_s": pct(u, 50), "unframe_p90_s": pct(u, 90), "anchor_p50_s": pct(a, 50),
           "anchor_p90_s": pct(a, 90), "p90_over_p90": pct(u, 90) / pct(a, 90),
           "unframe_alone": len(alone), "unframe_failed": sum("unframe_failed" in r for r in rows)}
    if alone:
        out["unframe_alone_p90_s"] = pct(alone, 90)
    steps = Counter()
    for r in both:
        steps.update({k: v for k, v in r["split"].items() if k != "attempts"})
    out["unframe_steps_total_s"] = {k: round(v, 2) for k, v in steps.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="conv,suite")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--every", type=int, default=1, help="suite: every Nth case (deterministic sample)")
    ap.add_argument("-k", dest="keyword")
    ap.add_argument("--out", default="/tmp/keras_speed.json")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--log")
    ap.add_argument("--deselect", action="append", default=[])
    args = ap.parse_args()
    if args.child:
        sys.argv = sys.argv[:1]  # the suite's common.py parses the command line on import
        sys.exit(child(Path(args.log), args.repeat, args.every, args.deselect, args.keyword))
    report: dict[str, Any] = {"repeat": args.repeat, "every": args.every}
    header = f"{'model':70s} {'unframe':>7s} {'anchor':>7s} {'ratio':>7s}  unframe's split (s)"
    if "conv" in args.case:
        install_step_timers()
        print(header)
        report["conv"] = conv_case(args.repeat)
        print_row(report["conv"]["case"], report["conv"])
    if "suite" in args.case:
        logdir = Path(args.out).with_suffix(".logs")
        logdir.mkdir(parents=True, exist_ok=True)
        rows = suite(args.repeat, args.every, args.keyword, logdir)
        print(header)
        for r in rows:
            print_row(f"{r['case'].split('::')[-1]}#{r['index']}", r)
        report["suite"] = {"summary": summarize(rows), "rows": rows}
        print(json.dumps(report["suite"]["summary"], indent=1))
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

"""TF/Keras frontend overhead: ``unframe.convert(model, to="onnx", validate=False)`` against the
bare ``tf2onnx.convert.from_keras`` call on the same Keras models (fresh model per call, same
input signature, same opset). Prints time and peak-memory ratios; ``run(quick)`` returns rows.

``unframe_s`` includes the frontend's per-route self-check (one TensorFlow run and one
onnxruntime session on one feed, so that a bad route can fall back); ``nocheck_ratio`` is the
same call with ``self_check=False``, which is what ``validate=False`` alone gives.

Time is the wall time of the call (median of the repetitions, in one process after a warm-up).
Peak memory is measured in a fresh process per (model, tool): the peak resident set size during the
call (sampled every 2 ms) minus the resident set size before it, after imports and a warm-up, so
it counts TensorFlow's C++ allocations too.

    .venv/bin/python bench/frontends_tf.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "converters" / "frontends"))

QUICK = ["small_cnn", "causal_conv1d", "two_io"]
FULL = ["small_cnn", "tiny_mobilenet", "mobilenet_v2", "text_rnn", "causal_conv1d", "attention",
        "two_io"]


def _peak_child(name: str, tool: str, queue: Any) -> None:
    import tensorflow  # noqa: F401
    import tf2onnx  # noqa: F401
    import tf_models

    import unframe  # noqa: F401

    builders = {**tf_models.BUILDERS, "mobilenet_v2": tf_models.mobilenet_v2}
    call = _bare(builders[name]) if tool == "bare" else _unframe(builders[name])
    _bare(builders["two_io"])()  # warm-up (imports, TF graph machinery), as in the timing runs
    _unframe(builders["two_io"])()
    queue.put(benchlib.peak_growth_mib(call))


def _bare(builder: Callable[[int], Any]) -> Callable[[], Any]:
    def call() -> Any:
        import tensorflow as tf
        import tf2onnx

        model = builder(0)
        spec = [tf.TensorSpec((None,) + tuple(t.shape[1:]), t.dtype, name=t.name)
                for t in model.inputs]
        return tf2onnx.convert.from_keras(model, input_signature=spec, opset=18)

    return call


def _unframe(builder: Callable[[int], Any], self_check: bool = True) -> Callable[[], Any]:
    def call() -> Any:
        import unframe

        return unframe.convert(builder(0), to="onnx", validate=False, self_check=self_check)

    return call


def run(quick: bool) -> list[dict]:
    import tf_models

    names = QUICK if quick else FULL
    reps = 1 if quick else 3
    builders = {**tf_models.BUILDERS, "mobilenet_v2": tf_models.mobilenet_v2}
    _bare(builders["two_io"])()  # warm-up: TF graph machinery, tf2onnx import
    _unframe(builders["two_io"])()
    rows = []
    for name in names:
        bare_t = benchlib.median_time(_bare(builders[name]), reps)
        uf_t = benchlib.median_time(_unframe(builders[name]), reps)
        nocheck_t = benchlib.median_time(_unframe(builders[name], self_check=False), reps)
        bare_m = benchlib.in_fresh_process(_peak_child, name, "bare")
        uf_m = benchlib.in_fresh_process(_peak_child, name, "unframe")
        rows.append({"model": name, "tf2onnx_s": bare_t, "unframe_s": uf_t,
                     "time_ratio": uf_t / bare_t, "nocheck_ratio": nocheck_t / bare_t,
                     "tf2onnx_MiB": bare_m, "unframe_MiB": uf_m})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    benchlib.print_rows(run(args.quick), width=14)


if __name__ == "__main__":
    main()

"""What hostile-input safety costs: the sandbox's child processes and the load-time checks.

    python bench/hostile.py [--reps 5]

1. A bare sandbox: starting a child and a first call; a call to a warm child.
2. TensorRT: parse + build of a small CNN in this process (the anchor: how unframe ran it before)
   against the same in the sandbox, a fresh child per conversion (how `unframe convert` runs it:
   child start, TensorRT import in the child, the network crossing back as engine bytes).
3. Core ML: reading an .mlpackage's description in this process (coremltools' load_spec) against
   in a child, each in a fresh interpreter (as `unframe inspect` runs once per process).
4. Keras: the HDF5 probe of a .keras file's weights in a child, against the Keras load itself.
5. ONNX load-time checks: `unframe.io.load_model` against onnx.load + onnx-ir's deserialize (the
   anchor: the same load without unframe's checks), on the model zoo's ONNX files.
6. onnxruntime on a graph from outside: session open + one run in the onnxruntime child against
   in this process (the child started once per process, as conversions reuse it).

Ratios are ours / anchor, medians of --reps runs, on this (shared, 2-core) machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "converters" / "backends" / "tensorrt")]


def median(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def row(name: str, anchor: float, ours: float, note: str = "") -> None:
    print(f"{name:<44} {anchor * 1000:>10.1f} {ours * 1000:>10.1f} {ours / anchor:>7.2f}x  {note}")


def bare(reps: int) -> None:
    from sandbox_targets import double

    from unframe import sandbox

    def cold() -> None:
        box = sandbox.Sandbox("bench")
        box.call(double, 1)
        box.close()

    box = sandbox.Sandbox("bench-warm")
    box.call(double, 1)
    warm = median(lambda: box.call(double, 1), reps * 20)
    box.close()
    print(f"{'bare child: start + first call':<44} {'-':>10} {median(cold, reps) * 1000:>10.1f}")
    print(f"{'bare child: a call to a warm child':<44} {'-':>10} {warm * 1000:>10.2f}")


def tensorrt(reps: int) -> None:
    import onnx_ir as ir
    from trt_models import cnn_model

    from unframe import sandbox
    from unframe.converters.backends.tensorrt import build as trt_build
    from unframe.converters.backends.tensorrt import trtmodule
    from unframe.converters.backends.tensorrt.profiles import make_profile

    trt = trtmodule.load_or_none()
    if trt is None:
        print("tensorrt: skipped (no tensorrt or tensorrt-rtx installed)")
        return
    model = cnn_model(batch=1)
    options = trt_build.BuildOptions(optimization_level=0)
    profile = make_profile(model, None, None, True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cnn.onnx"
        ir.save(model, path)

        def in_process() -> None:
            logger = trtmodule.CollectingLogger(trt)
            builder, network, _ = trt_build.parse(trt, path, logger)
            trt_build.build_network(trt, builder, network, logger, profile, options)

        def sandboxed() -> None:
            with sandbox.session():  # one conversion: a fresh child
                trt_build.build(path, profile, options)

        in_process()
        anchor = median(in_process, reps)
        ours = median(sandboxed, reps)
        row("tensorrt: parse + build a small CNN", anchor, ours, "fresh child per conversion")
        with sandbox.session():
            trt_build.build(path, profile, options)
            reused = median(lambda: trt_build.build(path, profile, options), reps)
        row("tensorrt: the same, child already running", anchor, reused, "parser and builder of one conversion")


def coreml(reps: int) -> None:
    import importlib.util

    if importlib.util.find_spec("coremltools") is None:
        print("coreml: skipped (coremltools not installed)")
        return
    from spine_utils import mlp_model

    import unframe

    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / "m.mlpackage"
        unframe.convert(mlp_model(batch=1), to="coreml", output=pkg)
        direct = ("from unframe.converters.backends.coreml.mil_eval._ct import import_coremltools; "
                  f"import_coremltools().utils.load_spec({str(pkg)!r})")
        child = f"from unframe.cli.inspect import describe; describe({str(pkg)!r})"
        anchor = median(lambda: _python(direct), reps)
        ours = median(lambda: _python(child), reps)
        row("coreml: read an .mlpackage, fresh process", anchor, ours, "inspect: all of coremltools in a child")


def _python(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, capture_output=True,
                   env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "3"})


def keras(reps: int) -> None:
    zoo = sorted((ROOT / "bench" / "out" / "zoo").rglob("model.keras"))
    if not zoo:
        print("keras: skipped (build the zoo first: unframe zoo build -o bench/out/zoo)")
        return
    import keras as k

    from unframe import sandbox
    from unframe.converters.frontends._tf import probes

    path = zoo[0]
    anchor = median(lambda: k.saving.load_model(path, compile=False), reps)

    def probe() -> None:
        with sandbox.session():
            probes.check_keras_file(path)

    row(f"keras: HDF5 probe of {path.parent.name}", anchor, median(probe, reps), "anchor: Keras' own load")


def onnx_checks(reps: int) -> None:
    import onnx
    import onnx_ir as ir

    from unframe import io

    paths = sorted((ROOT / "bench" / "out" / "zoo").rglob("model.onnx"))
    if not paths:
        print("onnx checks: skipped (build the zoo first: unframe zoo build -o bench/out/zoo)")
        return
    ratios, extra = [], []
    for path in paths:  # CPU time: steadier than wall time on a shared machine, all in this process
        anchor = median_cpu(lambda p=path: ir.serde.deserialize_model(onnx.load(p, load_external_data=False)), reps)
        ours = median_cpu(lambda p=path: io.load_model(p), reps)
        ratios.append(ours / anchor)
        extra.append(ours - anchor)
    geo = statistics.geometric_mean(ratios)
    print(f"onnx checks: load_model vs onnx.load + deserialize (CPU time) over {len(paths)} zoo models: "
          f"geomean {geo:.2f}x, worst {max(ratios):.2f}x, at most {max(extra) * 1000:.0f} ms more")


def onnxruntime_apart(reps: int) -> None:
    """onnxruntime on a graph from outside: its session in the child (``untrusted_graphs``, how
    an ONNX-source conversion runs it) against in this process; open + one run of a small CNN and
    of a 2-layer MLP, the child already started (one per process, reused by every conversion)."""
    import numpy as np
    import onnx_ir as ir
    from spine_utils import mlp_model
    from trt_models import cnn_model

    from unframe.validate.onnxruntime import OnnxRuntimeRunner, untrusted_graphs

    for label, model in (("small CNN", cnn_model(batch=1)), ("MLP", mlp_model())):
        proto = ir.to_proto(model) if isinstance(model, ir.Model) else model
        runner = OnnxRuntimeRunner(proto)
        feeds = {s.name: np.ones([d if isinstance(d, int) else 2 for d in s.shape], np.float32)
                 for s in runner.input_specs()}

        def once(runner_feeds: dict[str, Any] = feeds, m: Any = proto) -> None:
            OnnxRuntimeRunner(m).run(runner_feeds)

        anchor = median(once, reps * 4)
        with untrusted_graphs():
            t0 = time.perf_counter()
            once()  # the child's start and onnxruntime import (the first graph only)
            first = time.perf_counter() - t0
            ours = median(once, reps * 4)
        row(f"onnxruntime open+run, {label}: child vs here", anchor, ours,
            f"first in the process: {first * 1000:.0f} ms")


def median_cpu(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    print(f"{'what':<44} {'anchor ms':>10} {'ours ms':>10} {'ratio':>8}")
    for part in (bare, tensorrt, coreml, keras, onnx_checks, onnxruntime_apart):
        part(args.reps)


if __name__ == "__main__":
    main()

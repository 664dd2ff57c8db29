"""Throughput of ``unframe zoo upgrade`` (models per minute) with 1 and 2 local workers and on a
Dask LocalCluster of 2 workers, over the built reference zoo (``unframe zoo build``) or, when it
isn't built, a generated zoo of small ONNX CNNs at old opsets.

    .venv/bin/python bench/zoo.py [--src model_zoo/manifest.toml] [--opset 21] [--repeat 2] [--write]

The local pool's forkserver is warmed up before timing (it starts once per run in real use too);
the LocalCluster's start-up is excluded, each worker's first model includes its forkserver start.
The target is >= 1.7x from 1 to 2 local workers on 2 cores. ``--write`` records the figures in
docs/benchmarks/zoo.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from unframe.zoo.runner import UpgradeOptions, upgrade_zoo  # noqa: E402


def synthetic_zoo(root: Path, count: int = 16) -> Path:
    """Small CNNs (Conv, BatchNormalization, Relu, MaxPool, Gemm) at opsets 9-13 with seeded weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    for i in range(count):
        opset = 9 + i % 5
        nodes, inits, prev, ch = [], [], "x", 3
        for layer in range(6):
            out_ch = 16 + 8 * layer
            w = numpy_helper.from_array(rng.standard_normal((out_ch, ch, 3, 3)).astype(np.float32) * 0.1, f"w{layer}")
            stats = [numpy_helper.from_array(v.astype(np.float32), f"{n}{layer}") for n, v in
                     (("s", rng.uniform(0.5, 1.5, out_ch)), ("b", rng.standard_normal(out_ch)),
                      ("m", rng.standard_normal(out_ch) * 0.1), ("v", rng.uniform(0.5, 1.5, out_ch)))]
            inits += [w, *stats]
            nodes += [helper.make_node("Conv", [prev, f"w{layer}"], [f"c{layer}"], pads=[1, 1, 1, 1]),
                      helper.make_node("BatchNormalization", [f"c{layer}", *(t.name for t in stats)], [f"n{layer}"]),
                      helper.make_node("Relu", [f"n{layer}"], [f"r{layer}"])]
            prev, ch = f"r{layer}", out_ch
            if layer % 2 == 1:
                nodes.append(helper.make_node("MaxPool", [prev], [f"p{layer}"], kernel_shape=[2, 2], strides=[2, 2]))
                prev = f"p{layer}"
        inits.append(numpy_helper.from_array(rng.standard_normal((ch, 10)).astype(np.float32) * 0.1, "fc"))
        # Gemm's bias C is optional only from opset 11: the opset-9/10 models must carry one
        inits.append(numpy_helper.from_array(rng.standard_normal(10).astype(np.float32) * 0.1, "fc_bias"))
        nodes += [helper.make_node("GlobalAveragePool", [prev], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
                  helper.make_node("Gemm", ["f", "fc", "fc_bias"], ["y"])]
        graph = helper.make_graph(nodes, f"cnn{i}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 64, 64])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        onnx.checker.check_model(model, full_check=True)  # a bench input must be a valid model
        model.ir_version = 6
        (root / f"group{i % 3}").mkdir(parents=True, exist_ok=True)
        onnx.save(model, root / f"group{i % 3}" / f"cnn{i:02d}_op{opset}.onnx")
    return root


def _burn(_: int) -> float:
    started = time.perf_counter()
    x = 0
    for i in range(5_000_000):
        x += i
    return time.perf_counter() - started


def machine_scaling() -> float:
    """Control: how much faster two pure-Python CPU burners finish side by side than one after the
    other on this machine right now (2.0 on two idle cores). The zoo can't scale beyond it."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    with ctx.Pool(2) as pool:
        pool.map(_burn, [0, 0])  # warm
        started = time.perf_counter()
        pool.map(_burn, [0], chunksize=1)
        pool.map(_burn, [0], chunksize=1)
        serial = time.perf_counter() - started
        started = time.perf_counter()
        pool.map(_burn, [0, 1], chunksize=1)
        parallel = time.perf_counter() - started
    return serial / parallel


def measure(src: Path, opset: int, workers: int, executor: str, work: Path) -> tuple[float, int, int]:
    out = work / f"out-{executor}-{workers}-{time.monotonic_ns()}"
    result = upgrade_zoo(src, UpgradeOptions(opset=opset, out_dir=out, workers=workers, executor=executor,
                                             progress=False, timeout=600))
    totals = result.report["totals"]
    shutil.rmtree(out, ignore_errors=True)
    return float(totals["wall_seconds"]), int(totals["models"]), int(totals["ok"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, help="a folder or manifest (default: the built zoo, else generated)")
    parser.add_argument("--opset", type=int, default=21)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--write", action="store_true", help="record the figures in docs/benchmarks/zoo.md")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="unframe-bench-zoo-"))
    try:
        src, label = _source(args.src, work)
        # Warm the local forkserver (started once per run in real use) before timing.
        measure(src, args.opset, 1, "local", work)
        rows = []
        for executor, workers in (("local", 1), ("local", 2), ("dask", 2)):
            walls = []
            for _ in range(args.repeat):
                wall, models, ok = measure(src, args.opset, workers, executor, work)
                walls.append(wall)
            best = min(walls)
            rows.append((executor, workers, models, ok, best, statistics.median(walls), 60.0 * models / best))
            print(f"{executor:5} x{workers}: {models} models ({ok} ok), best {best:.1f} s, "
                  f"{60.0 * models / best:.1f} models/min", flush=True)
        speedup = rows[1][6] / rows[0][6]
        load = os.getloadavg()
        control = machine_scaling()
        print(f"speed-up 1 -> 2 local workers: {speedup:.2f}x (target >= 1.7x); "
              f"load average during the run {load[0]:.1f} on {os.cpu_count()} cores; "
              f"control (two CPU burners side by side vs one after the other): {control:.2f}x")
        if args.write:
            _write(rows, speedup, label, args, load, control)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _source(src: Path | None, work: Path) -> tuple[Path, str]:
    if src is not None:
        return src, str(src)
    built = ROOT / "model_zoo" / "built"
    if built.is_dir() and any(built.rglob("*.onnx")):
        return built, "model_zoo/built (the reference zoo)"
    return synthetic_zoo(work / "zoo"), "16 generated CNNs at opsets 9-13"


def _write(rows: list[tuple], speedup: float, label: str, args: argparse.Namespace, load: tuple,
           control: float) -> None:
    busy = load[0] > (os.cpu_count() or 1) * 1.5
    lines = ["# Zoo batch upgrade throughput", "",
             f"`bench/zoo.py`: {label} upgraded to opset {args.opset}, best of {args.repeat} runs, "
             f"{os.cpu_count()} cores, load average {load[0]:.1f} at the end of the run"
             + (" (other jobs shared the machine)." if busy else "."), "",
             "| executor | workers | models | ok | best wall (s) | median wall (s) | models/min |",
             "|---|---|---|---|---|---|---|"]
    for executor, workers, models, ok, best, median, rate in rows:
        name = "local process pool" if executor == "local" else "dask LocalCluster"
        lines.append(f"| {name} | {workers} | {models} | {ok} | {best:.1f} | {median:.1f} | {rate:.1f} |")
    lines += ["", f"Speed-up from 1 to 2 local workers: **{speedup:.2f}x** (target >= 1.7x).",
              f"Control measured right after: two pure-Python CPU burners side by side finished "
              f"**{control:.2f}x** faster than one after the other (2.0 on two idle cores), i.e. this is "
              "what the machine gave two processes at the time.", "",
              "Notes:",
              "- Each model runs in its own process forked from a preloaded forkserver (about 60-100 ms",
              "  of start-up and exit per model); the model's own work (load, opset conversion, two",
              "  onnxruntime sessions, parity on its saved inputs, atomic write) is 0.1-1 s for these models.",
              "- The coordinating process only journals (an fsync per start and per result, ~5 ms each here) and",
              "  launches workers, so the pool scales with free cores; the 1.7x target needs two idle cores.",
              "  When other jobs keep the load average far above the core count"
              + (", as when these figures" if busy else ","),
              ("  were taken, " if busy else "  ") + "the second worker gets little extra CPU and the ratio drops.",
              "- The Dask LocalCluster figure excludes the cluster's start-up; each Dask worker runs a model",
              "  per task in a process forked from its own forkserver (started by its first task).", ""]
    path = ROOT / "docs" / "benchmarks" / "zoo.md"
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

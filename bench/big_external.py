"""Opset conversion with parity of a model of large external-data weights, against one bare
onnxruntime session of the same model (issue 39).

    .venv/bin/python bench/big_external.py [--folder /tmp/big_external] [--tensors 8] [--side 8192]
        [--values zeros|random] [--reps 2] [--out docs/benchmarks/big_external.md]

The generator writes an opset-17 chain of ``--tensors`` MatMul -> Tanh pairs over float32
[side, side] weights (256 MiB each at 8192; 2 GiB in all) into one external data file, and a
ReduceMax with its axes as an attribute at the end (converted at opset 18, where axes become an
input: one node of the graph changes). ``--values zeros`` writes the data file sparse (zeros that
take no disk: fast to make, the outputs then constant, so parity is weak); ``random`` writes
seeded values (slow to write, 2 GiB of disk).

Each case runs as its own command, timed from outside; its peak memory is the largest sum of
the resident sets of the command and every process under it (sampled every 20 ms: unframe runs
onnxruntime in a child process for a graph from outside), so a second session in another process
counts:

- ``bare``: one onnxruntime session of the model, run once on a batch of 2 (Python's start and
  onnxruntime's import included);
- ``unframe``: ``unframe opset model.onnx --to 21 -o out.onnx`` with its default parity;
- ``unframe --no-validate``: the same without parity.

Each case runs ``--reps`` times, alternating; the best time and the lowest peak count. Targets:
unframe with parity <= 2x the bare session's time and <= 1.3x its peak memory.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def write_model(folder: Path, tensors: int = 8, side: int = 8192, values: str = "zeros") -> Path:
    """The model and its external data in ``folder`` (see the module's docstring)."""
    import numpy as np
    from onnx import TensorProto, helper, save

    folder.mkdir(parents=True, exist_ok=True)
    nbytes = side * side * 4
    data = folder / "model.onnx.data"
    rng = np.random.default_rng(0)
    with data.open("wb") as f:
        if values == "zeros":
            f.truncate(tensors * nbytes)
        else:
            for _ in range(tensors):  # scaled so that each Tanh sees values of order 1
                f.write((rng.standard_normal((side, side), dtype=np.float32) * (1.5 / side**0.5)).tobytes())
    inits, nodes, prev = [], [], "x"
    for i in range(tensors):
        t = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[side, side],
                        data_location=TensorProto.EXTERNAL)
        for key, value in (("location", data.name), ("offset", str(i * nbytes)), ("length", str(nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        inits.append(t)
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"s{i}"]))
        prev = f"s{i}"
    nodes.append(helper.make_node("ReduceMax", [prev], ["y"], axes=[-1], keepdims=1))
    graph = helper.make_graph(
        nodes, "big_external", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    save(model, str(path))
    return path


BARE = """
import sys, numpy as np, onnxruntime as ort
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
x = np.random.default_rng(0).standard_normal((2, int(sys.argv[2]))).astype(np.float32)
session.run(None, {"x": x})
"""


def tree_rss(pid: int) -> int:
    """Bytes resident in ``pid`` and every process under it."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def measure(cmd: list[str]) -> dict[str, Any]:
    """Wall time and the peak of the process tree's resident memory of ``cmd``."""
    peak = [0]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(proc.pid))
            time.sleep(0.02)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    out, err = proc.communicate()
    seconds = time.perf_counter() - started
    done.set()
    thread.join()
    return {"seconds": seconds, "peak_mb": peak[0] / 2**20, "exit": proc.returncode,
            "stderr": err.strip().splitlines()[-1][:300] if proc.returncode and err.strip() else "",
            "stdout": out}


def cases(model: Path, side: int) -> dict[str, list[str]]:
    unframe = str(VENV_BIN / "unframe")
    out = model.with_name("out21.onnx")
    return {
        "bare": [sys.executable, "-c", BARE, str(model), str(side)],
        "unframe": [unframe, "opset", str(model), "--to", "21", "-o", str(out), "--force"],
        "unframe --no-validate": [unframe, "opset", str(model), "--to", "21", "-o", str(out), "--force",
                                  "--no-validate"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/big_external"))
    parser.add_argument("--tensors", type=int, default=8)
    parser.add_argument("--side", type=int, default=8192)
    parser.add_argument("--values", choices=("zeros", "random"), default="random")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the model folder")
    args = parser.parse_args()
    model = write_model(args.folder, args.tensors, args.side, args.values)
    weights = args.tensors * args.side * args.side * 4 / 2**20
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for _ in range(args.reps):
            for name, cmd in cases(model, args.side).items():
                os.sync()
                runs.setdefault(name, []).append(measure(cmd))
                last = runs[name][-1]
                print(f"{name}: {last['seconds']:.2f} s, peak {last['peak_mb']:.0f} MiB, exit {last['exit']} "
                      f"{last['stderr']}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(args.folder, ignore_errors=True)
    best = {name: {"seconds": min(r["seconds"] for r in rs), "peak_mb": min(r["peak_mb"] for r in rs),
                   "exit": max(r["exit"] for r in rs)} for name, rs in runs.items()}
    bare = best["bare"]
    load = os.getloadavg()
    lines = [f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()} ({os.cpu_count()} CPUs, "
             f"load {load[0]:.1f}), {args.tensors} x {args.side}x{args.side} float32 = {weights:.0f} MiB of "
             f"external data ({args.values}), best of {args.reps}:", "",
             "| case | seconds | x bare | peak MiB (process tree) | x bare | exit |", "|---|---:|---:|---:|---:|---:|"]
    for name, b in best.items():
        lines.append(f"| {name} | {b['seconds']:.2f} | {b['seconds'] / bare['seconds']:.2f} | {b['peak_mb']:.0f} | "
                     f"{b['peak_mb'] / bare['peak_mb']:.2f} | {b['exit']} |")
    ours = best["unframe"]
    lines += ["", f"Targets (unframe with parity): time <= 2x: {'met' if ours['seconds'] <= 2 * bare['seconds'] else 'missed'}"
              f" ({ours['seconds'] / bare['seconds']:.2f}x); peak memory <= 1.3x: "
              f"{'met' if ours['peak_mb'] <= 1.3 * bare['peak_mb'] else 'missed'} ({ours['peak_mb'] / bare['peak_mb']:.2f}x)."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

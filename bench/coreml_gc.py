"""What coremltools' closing ``gc.collect()`` costs a Core ML conversion, by how much the calling
process holds: a full collection walks every container object alive, so a conversion in a
training script, a zoo run or a long fuzz campaign pays for all of it. unframe converts without
it (``coreml.backend.without_full_collection``); the anchor is the same conversion with it, in
the same process, heap and run.

    PYTHONPATH=. .venv/bin/python bench/coreml_gc.py [--reps 5]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    import onnx
    from spine_utils import mlp_model

    import unframe
    from unframe.converters.backends.coreml import backend

    folder = Path(tempfile.mkdtemp(prefix="unframe-gc-"))
    source = folder / "mlp.onnx"
    onnx.save(mlp_model(), source)
    unlimited = backend.without_full_collection

    def convert(i: int) -> float:
        started = time.perf_counter()
        unframe.convert(str(source), to="coreml", output=str(folder / f"m{i}.mlpackage"), validate=False)
        return time.perf_counter() - started

    held: list[object] = []
    count = 0
    print(f"{'objects held':>14} {'with gc.collect ms':>20} {'unframe ms':>12} {'ratio':>7}")
    for objects in (0, 1_000_000, 3_000_000):
        held.extend({"i": i, "row": [i, str(i)]} for i in range(objects - len(held)))
        with_gc, without = [], []
        for _ in range(args.reps):
            backend.without_full_collection = contextlib.nullcontext  # the anchor: coremltools as is
            count += 1
            with_gc.append(convert(count))
            backend.without_full_collection = unlimited
            count += 1
            without.append(convert(count))
        a, b = sorted(with_gc)[len(with_gc) // 2] * 1e3, sorted(without)[len(without) // 2] * 1e3
        print(f"{len(gc.get_objects()):>14,} {a:>20.0f} {b:>12.0f} {b / a:>6.2f}x", flush=True)


if __name__ == "__main__":
    main()

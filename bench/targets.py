"""Several targets in one call against one call per target, in one run.

`unframe.convert(src, to=[...all installed...])` loads and exports once and forks; the anchor is
the sum of `unframe.convert(src, to=t)` for each target t (the same file, the same checks). Both
write real artifacts into a temporary folder. Prints the medians and the ratio (< 1: the shared
prefix saves that fraction).

    .venv/bin/python bench/targets.py [--reps 3] [--models torch,keras]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from benchlib import median_time, print_rows  # noqa: E402


def torch_source(folder: Path) -> Path:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 10)).eval()
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 1.5)
    x = torch.randn(2, 3, 32, 32)
    path = folder / "cnn.pt2"
    torch.export.save(torch.export.export(model, (x,)), path)
    return path


def keras_source(folder: Path) -> Path:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((32, 32, 3), name="image")
    h = keras.layers.Conv2D(16, 3, activation="relu")(inp)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    model = keras.Model(inp, keras.layers.Dense(10)(h))
    path = folder / "cnn.keras"
    model.save(path)
    return path


SOURCES = {"torch": torch_source, "keras": keras_source}


def main() -> None:
    import unframe
    from unframe.route import get_backend, parse_targets

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--models", default="torch,keras")
    args = ap.parse_args()
    targets = parse_targets("all")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in args.models.split(","):
            src = SOURCES[name](root)

            def together(src: Path = src, counter: Any = iter(range(10**6))) -> None:
                unframe.convert(src, to=targets, output=root / f"{src.suffix[1:]}-all{next(counter)}")

            def apart(src: Path = src, counter: Any = iter(range(10**6))) -> None:
                out = root / f"{src.suffix[1:]}-one{next(counter)}"
                out.mkdir()
                for t in targets:
                    unframe.convert(src, to=t, output=out / f"m{get_backend(t).suffixes[0]}")

            together()  # warm imports and caches for both
            t_all = median_time(together, args.reps)
            t_sum = median_time(apart, args.reps)
            rows.append({"model": name, "targets": "+".join(targets), "--to all s": f"{t_all:.2f}",
                         "sum of singles s": f"{t_sum:.2f}", "ratio": f"{t_all / t_sum:.2f}"})
    print_rows(rows, width=18)
    print("ratio < 1: one call with every target is faster than one call per target")


if __name__ == "__main__":
    main()

"""A quick tour of the hub (< 2 minutes): one small model per installed framework, converted to
ONNX at an old opset through unframe.convert (each stage checked against the framework), then the
whole folder upgraded to a new opset by the zoo batch runner.

    .venv/bin/python model_zoo/demo.py [OUT_DIR]      (default: demo_out/)

``run_demo(out_dir)`` is what ``make demo`` calls.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
EXPORT_OPSET = 13
UPGRADE_OPSET = 21


def _torch_model() -> tuple[Any, Any]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 4)).eval()
    return model, torch.randn(2, 3, 16, 16)


def _keras_model() -> tuple[Any, Any]:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((12, 12, 3), name="image")
    x = keras.layers.Conv2D(4, 3, activation="relu")(inp)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inp, keras.layers.Dense(3, activation="softmax")(x))
    return model, np.random.default_rng(0).standard_normal((2, 12, 12, 3)).astype(np.float32)


def _sklearn_model() -> tuple[Any, Any]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 5)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    return make_pipeline(StandardScaler(), LogisticRegression()).fit(x, y), x[:4]


MODELS: list[tuple[str, str, Callable[[], tuple[Any, Any]]]] = [
    ("torch", "torch", _torch_model),
    ("keras", "tensorflow", _keras_model),
    ("sklearn", "sklearn", _sklearn_model),
]


def _other_backends(out_dir: Path, frameworks: tuple[str, ...]) -> None:
    """The torch model again, to every target installed here in one call: ONNX, a Core ML package
    (checked with the MIL evaluator), a TensorRT engine (parsed and built on the CPU; running it
    needs a GPU, and the report says so) and an OpenVINO IR through the shared ONNX export, a
    .tflite (litert-torch) and an ExecuTorch .pte converted from the module itself: each
    artifact run here and checked against torch or the graph it came from, one report lists all."""
    import unframe
    from unframe.route import parse_targets

    if (frameworks and "torch" not in frameworks) or importlib.util.find_spec("torch") is None:
        return
    targets = parse_targets("all")  # every backend installed here
    model, sample = _torch_model()
    folder = out_dir / "all_targets"
    result = unframe.convert(model, to=targets, sample_inputs=sample, output=folder)
    print(f"-- torch: {type(model).__name__} -> {', '.join(targets)} in one call ({folder})")
    print(result.route.describe())
    print(result)


def run_demo(out_dir: Path = Path("demo_out"), *, frameworks: tuple[str, ...] = ()) -> int:
    """Convert one model per installed framework, upgrade them all; returns a process exit code."""
    import unframe
    from unframe.zoo.report import print_table
    from unframe.zoo.runner import UpgradeOptions, upgrade_zoo

    src, upgraded = out_dir / "onnx", out_dir / f"opset{UPGRADE_OPSET}"
    shutil.rmtree(out_dir, ignore_errors=True)
    src.mkdir(parents=True)
    for name, module, make in MODELS:
        if frameworks and name not in frameworks:
            continue
        if importlib.util.find_spec(module) is None:
            print(f"-- {name}: not installed, skipped")
            continue
        model, sample = make()
        path = src / name / "model.onnx"
        path.parent.mkdir(parents=True)
        result = unframe.convert(model, to="onnx", opset=EXPORT_OPSET, sample_inputs=sample, output=path)
        print(f"-- {name}: {type(model).__name__} -> {path}")
        print(result.route.describe())
        for stage in result.report.stages:
            print(f"   {stage.summary()}")
        feeds = result.export.feeds if result.export else []
        if feeds:
            np.savez(path.parent / "inputs.npz", **feeds[0])
    _other_backends(out_dir, frameworks)
    print(f"\n-- upgrading every model under {src} to opset {UPGRADE_OPSET} (unframe zoo upgrade)")
    batch = upgrade_zoo(src, UpgradeOptions(opset=UPGRADE_OPSET, out_dir=upgraded, workers=2, force=True))
    print_table(batch.report)
    return 0 if batch.ok else 1


if __name__ == "__main__":
    sys.exit(run_demo(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("demo_out")))

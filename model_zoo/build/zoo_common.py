"""Helpers shared by the zoo build scripts: seeding, and saving a model's sample inputs and its
source framework's outputs beside it (``inputs.npz`` / ``outputs.npz``, keyed by ONNX names)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path

import numpy as np

SEED = 0
MODEL_FILE = "model.onnx"


def seed_everything(seed: int = SEED) -> np.random.Generator:
    random.seed(seed)
    np.random.seed(seed)
    return np.random.default_rng(seed)


def save_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write an .npz (no pickles: object arrays are refused so the files stay safe to load)."""
    plain = {k: np.asarray(v) for k, v in arrays.items()}
    for name, arr in plain.items():
        if arr.dtype == object:
            raise ValueError(f"{path}: output {name!r} is an object array; export without ZipMap")
    np.savez(path, **plain)


def save_io(out_dir: Path, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> None:
    save_arrays(out_dir / "inputs.npz", inputs)
    save_arrays(out_dir / "outputs.npz", outputs)


def onnx_output_names(path: Path) -> list[str]:
    import onnx

    return [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]

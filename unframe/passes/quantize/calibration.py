"""Calibration and held-out input sets.

``--calibration PATH`` is an ``.npz`` or a folder of them. In an ``.npz`` each array holds many
sets: ``x[i]`` is input ``x`` of set ``i`` (``np.savez(path, x=np.stack(sets))``); an array of the
input's own rank is a dataset of rows, cut into sets of the model's batch size. A folder holds one
set per ``.npz`` (as ``inputs.npz`` files are written). Without it, unframe draws sets the way
parity draws feeds (floats from N(0, 1), integers from the sample's range) and says that the
accuracy figures then prove little: real inputs are what a quantizer should see.

The last fifth of the sets (at least one, at most 64) is held out: the quantizer never sees it,
and the accuracy guard compares the quantized artifact with the float model on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unframe.errors import InputError

DRAWN_SETS = 40  # 32 to calibrate, 8 held out
MAX_HELD_OUT = 64  # sets: with one row each, the 98 % top-1 threshold tolerates one flipped row from 50

Feed = dict[str, np.ndarray]


def load_sets(path: Path, like: Mapping[str, np.ndarray]) -> list[Feed]:
    """The input sets at ``path`` for a model fed like ``like`` (a parity feed: names, ranks,
    batch size)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.npz"))
        if not files:
            raise InputError(f"{path}: no .npz files in the calibration folder", "put one input set per .npz there")
        return [_one_set(f, like) for f in files]
    if not path.is_file():
        raise InputError(f"{path}: calibration file not found", "pass an .npz of input sets or a folder of them")
    arrays = _read(path)
    missing = [n for n in like if n not in arrays]
    if missing:
        raise InputError(f"{path}: no array for input(s) {', '.join(missing)}",
                         f"save the sets by input name: {', '.join(like)}")
    counts = {n: _count(arrays[n], like[n]) for n in like}
    if len(set(counts.values())) != 1:
        raise InputError(f"{path}: the inputs hold different numbers of sets ({counts})",
                         "give every input the same number of sets")
    return [{n: _take(arrays[n], like[n], i) for n in like} for i in range(next(iter(counts.values())))]


def _read(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as exc:  # a truncated or foreign file: say so in one line
        raise InputError(f"{path}: not a readable .npz ({type(exc).__name__})",
                         "save the sets with numpy.savez") from None


def _one_set(path: Path, like: Mapping[str, np.ndarray]) -> Feed:
    arrays = _read(path)
    missing = [n for n in like if n not in arrays]
    if missing:
        raise InputError(f"{path}: no array for input(s) {', '.join(missing)}", "name the arrays by input")
    return {n: np.asarray(arrays[n], dtype=like[n].dtype) for n in like}


def _count(array: np.ndarray, like: np.ndarray) -> int:
    if array.ndim == like.ndim + 1:
        return int(array.shape[0])
    if array.ndim == like.ndim and like.ndim > 0:
        return int(array.shape[0]) // max(int(like.shape[0]), 1)
    raise InputError(f"a calibration array of shape {array.shape} for an input of shape {like.shape}",
                     "stack the sets on a new first axis (np.stack)")


def _take(array: np.ndarray, like: np.ndarray, i: int) -> np.ndarray:
    if array.ndim == like.ndim + 1:
        return np.asarray(array[i], dtype=like.dtype)
    rows = max(int(like.shape[0]), 1)
    return np.asarray(array[i * rows:(i + 1) * rows], dtype=like.dtype)


def draw_sets(like: Mapping[str, np.ndarray], count: int = DRAWN_SETS, seed: int = 7) -> list[Feed]:
    """``count`` sets shaped like ``like``: floats from N(0, 1); integers and booleans drawn from
    the values the sample holds (token ids, masks), so that they stay valid."""
    rng = np.random.default_rng(seed)
    sets = []
    for _ in range(count):
        feed: Feed = {}
        for name, value in like.items():
            value = np.asarray(value)
            if value.dtype.kind == "f":
                feed[name] = rng.standard_normal(value.shape).astype(value.dtype)
            elif value.dtype.kind in "iub" and value.size:
                feed[name] = rng.choice(value.reshape(-1), size=value.shape).astype(value.dtype)
            else:
                feed[name] = value.copy()
        sets.append(feed)
    return sets


def split(sets: Sequence[Feed]) -> tuple[list[Feed], list[Feed]]:
    """(calibration, held out): the last fifth held out, at least one and at most ``MAX_HELD_OUT``."""
    if len(sets) < 2:
        raise InputError(f"{len(sets)} calibration set(s): at least 2 are needed (one is held out "
                         "to check the quantized artifact)", "pass more input sets with --calibration")
    held = min(MAX_HELD_OUT, max(1, len(sets) // 5))
    return list(sets[:-held]), list(sets[-held:])


def calibration_sets(given: Any, like: Mapping[str, np.ndarray]) -> tuple[list[Feed], str, bool]:
    """(sets, where they came from, whether unframe drew them) for ``--calibration`` ``given``:
    a path, a list of feeds, or None (drawn)."""
    if given is None:
        return draw_sets(like), f"{DRAWN_SETS} sets drawn by unframe (random: the accuracy figures prove little)", True
    if isinstance(given, (str, Path)):
        sets = load_sets(Path(given), like)
        return sets, f"{len(sets)} sets from {given}", False
    sets = [{n: np.asarray(v) for n, v in dict(s).items()} for s in given]
    for i, feed in enumerate(sets):
        missing = [n for n in like if n not in feed]
        if missing:
            raise InputError(f"calibration set {i} has no value for input(s) {', '.join(missing)} "
                             f"(it has {', '.join(feed) or 'none'})", f"name the values by input: {', '.join(like)}")
    return sets, f"{len(sets)} sets given", False

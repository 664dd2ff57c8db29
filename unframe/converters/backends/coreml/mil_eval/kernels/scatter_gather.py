"""gather*, scatter* (iOS15/16/17 scatter_gather.py). Negative indices count from the end."""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import kernel

_UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
           "max": np.maximum, "min": np.minimum}


def _wrap(indices: Any, size: int) -> np.ndarray:
    idx = np.asarray(indices).astype(np.int64)
    return np.where(idx < 0, idx + size, idx)


@kernel("gather")
def gather(ctx: Any, x: np.ndarray, indices: Any, axis: Any = 0, batch_dims: Any = 0,
           validate_indices: Any = False) -> np.ndarray:
    x = np.asarray(x)
    ax, bd = int(axis) % x.ndim, int(batch_dims)
    idx = _wrap(indices, x.shape[ax])
    if bd == 0:
        return np.take(x, idx, axis=ax)
    batch = x.shape[:bd]
    xf = x.reshape((-1,) + x.shape[bd:])
    idf = idx.reshape((-1,) + idx.shape[bd:])
    out = np.stack([np.take(p, i, axis=ax - bd) for p, i in zip(xf, idf, strict=False)])
    return out.reshape(batch + out.shape[1:])


@kernel("gather_along_axis")
def gather_along_axis(ctx: Any, x: np.ndarray, indices: Any, axis: Any = 0,
                      validate_indices: Any = False) -> np.ndarray:
    x = np.asarray(x)
    ax = int(axis) % x.ndim
    return np.take_along_axis(x, _wrap(indices, x.shape[ax]), axis=ax)


@kernel("gather_nd")
def gather_nd(ctx: Any, x: np.ndarray, indices: Any, batch_dims: Any = 0,
              validate_indices: Any = False) -> np.ndarray:
    """indices [..., K] address the first K dims after the batch dims."""
    x = np.asarray(x)
    idx = np.asarray(indices).astype(np.int64)
    bd = int(batch_dims)
    if bd == 0:
        return _gather_nd_plain(x, idx)
    batch = x.shape[:bd]
    xf = x.reshape((-1,) + x.shape[bd:])
    idf = idx.reshape((-1,) + idx.shape[bd:])
    out = np.stack([_gather_nd_plain(p, i) for p, i in zip(xf, idf, strict=False)])
    return out.reshape(batch + out.shape[1:])


def _gather_nd_plain(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    k = idx.shape[-1]
    wrapped = [_wrap(idx[..., i], x.shape[i]) for i in range(k)]
    return x[tuple(wrapped)]


def _apply(out: np.ndarray, where: Any, updates: np.ndarray, mode: str) -> None:
    """Scatter updates into out[where]; repeated indices accumulate for the reducing modes."""
    if mode == "update":
        out[where] = updates
        return
    _UFUNCS[mode].at(out, where, updates)


@kernel("scatter")
def scatter(ctx: Any, data: np.ndarray, indices: Any, updates: np.ndarray, axis: Any = 0,
            mode: str = "add", validate_indices: Any = False) -> np.ndarray:
    out = np.array(data, copy=True)
    ax = int(axis) % out.ndim
    idx = _wrap(indices, out.shape[ax])
    upd = np.moveaxis(np.asarray(updates, out.dtype), ax, 0)
    moved = np.moveaxis(out, ax, 0)  # a view: writes land in out
    _apply(moved, (idx,), upd, str(mode))
    return out


@kernel("scatter_along_axis")
def scatter_along_axis(ctx: Any, data: np.ndarray, indices: Any, updates: np.ndarray, axis: Any = 0,
                       mode: str = "add", validate_indices: Any = False) -> np.ndarray:
    out = np.array(data, copy=True)
    ax = int(axis) % out.ndim
    idx = _wrap(indices, out.shape[ax])
    grids = list(np.indices(idx.shape, sparse=True))
    grids[ax] = idx
    _apply(out, tuple(grids), np.asarray(updates, out.dtype), str(mode))
    return out


@kernel("scatter_nd")
def scatter_nd(ctx: Any, data: np.ndarray, indices: Any, updates: np.ndarray, mode: str = "add",
               validate_indices: Any = False) -> np.ndarray:
    out = np.array(data, copy=True)
    idx = np.asarray(indices).astype(np.int64)
    where = tuple(_wrap(idx[..., i], out.shape[i]) for i in range(idx.shape[-1]))
    _apply(out, where, np.asarray(updates, out.dtype), str(mode))
    return out

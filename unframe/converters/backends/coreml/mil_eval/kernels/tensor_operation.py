"""Tensor-building and rearranging ops (iOS15/16/17 tensor_operation.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import kernel


@kernel("band_part")
def band_part(ctx: Any, x: np.ndarray, lower: Any = -1, upper: Any = -1) -> np.ndarray:
    rows, cols = x.shape[-2:]
    m = np.arange(rows)[:, None]
    n = np.arange(cols)[None, :]
    keep = ((int(lower) < 0) | (m - n <= int(lower))) & ((int(upper) < 0) | (n - m <= int(upper)))
    return np.where(keep, x, np.zeros((), x.dtype))


@kernel("cumsum")
def cumsum(ctx: Any, x: np.ndarray, axis: Any = 0, exclusive: Any = False, reverse: Any = False) -> np.ndarray:
    ax = int(axis)
    data = np.flip(x, axis=ax) if bool(reverse) else np.asarray(x)
    out = np.cumsum(data, axis=ax, dtype=data.dtype)
    if bool(exclusive):
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis=ax)),
                              np.take(out, np.arange(out.shape[ax] - 1), axis=ax)], axis=ax)
    return np.flip(out, axis=ax) if bool(reverse) else out


@kernel("fill")
def fill(ctx: Any, shape: Any, value: Any = 0.0) -> np.ndarray:
    return np.full([int(s) for s in np.atleast_1d(shape)], value, dtype=ctx.output_dtype())


@kernel("fill_like")
def fill_like(ctx: Any, ref_tensor: np.ndarray, value: Any = 0.0) -> np.ndarray:
    return np.full(np.shape(ref_tensor), value, dtype=ctx.output_dtype())


@kernel("non_zero")
def non_zero(ctx: Any, x: np.ndarray) -> np.ndarray:
    return np.transpose(np.nonzero(x)).astype(np.int32)


@kernel("one_hot")
def one_hot(ctx: Any, indices: np.ndarray, one_hot_vector_size: Any, axis: Any = -1, on_value: Any = 1,
            off_value: Any = 0) -> np.ndarray:
    depth = int(one_hot_vector_size)
    idx = np.asarray(indices).astype(np.int64)
    hot = idx[..., None] == np.arange(depth)
    out = np.where(hot, np.asarray(on_value), np.asarray(off_value)).astype(ctx.output_dtype())
    return np.moveaxis(out, -1, int(axis) % out.ndim)


@kernel("pad")
def pad(ctx: Any, x: np.ndarray, pad: Any, mode: str = "constant", constant_val: Any = 0.0) -> np.ndarray:
    """``pad`` holds (before, after) pairs for the last len(pad)//2 dims."""
    x = np.asarray(x)
    flat = [int(p) for p in np.atleast_1d(pad)]
    pairs = [(0, 0)] * (x.ndim - len(flat) // 2) + [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    if mode == "constant":
        return np.pad(x, pairs, mode="constant", constant_values=np.asarray(constant_val, x.dtype))
    return np.pad(x, pairs, mode={"reflect": "reflect", "replicate": "edge"}[str(mode)])


@kernel("range_1d")
def range_1d(ctx: Any, end: Any, start: Any, step: Any) -> np.ndarray:
    return np.arange(start, end, step).astype(ctx.output_dtype())


@kernel("tile")
def tile(ctx: Any, x: np.ndarray, reps: Any) -> np.ndarray:
    return np.tile(x, [int(r) for r in np.atleast_1d(reps)])


@kernel("argsort")
def argsort(ctx: Any, x: np.ndarray, axis: Any = -1, ascending: Any = False) -> np.ndarray:
    x = np.asarray(x)
    keyed = x if bool(ascending) else -x
    return np.argsort(keyed, axis=int(axis), kind="stable").astype(np.int32)


@kernel("topk")
def topk(ctx: Any, x: np.ndarray, k: Any = 1, axis: Any = -1, ascending: Any = False, sort: Any = True,
         return_indices: Any = True, output_indices_dtype: str = "int32") -> Any:
    x = np.asarray(x)
    ax = int(axis) % x.ndim
    keyed = x if bool(ascending) else -x
    order = np.argsort(keyed, axis=ax, kind="stable")
    indices = np.take(order, np.arange(int(k)), axis=ax)
    values = np.take_along_axis(x, indices, axis=ax)
    if len(ctx.op.outputs) == 1:  # iOS16+ return_indices=False
        return values
    return values, indices


@kernel("flatten2d")
def flatten2d(ctx: Any, x: np.ndarray, axis: Any = 1) -> np.ndarray:
    x = np.asarray(x)
    ax = int(axis) % x.ndim if x.ndim else 0
    return x.reshape(int(np.prod(x.shape[:ax])), int(np.prod(x.shape[ax:])))


@kernel("shape")
def shape(ctx: Any, x: np.ndarray) -> np.ndarray:
    return np.asarray(np.shape(x), dtype=np.int32)


@kernel("concat")
def concat(ctx: Any, values: list[np.ndarray], axis: Any, interleave: Any = False) -> np.ndarray:
    arrays = [np.asarray(v) for v in values]
    ax = int(axis)
    if not bool(interleave):
        return np.concatenate(arrays, axis=ax)
    stacked = np.stack(arrays, axis=(ax % arrays[0].ndim) + 1)
    shape_ = list(arrays[0].shape)
    shape_[ax] *= len(arrays)
    return stacked.reshape(shape_)


@kernel("split")
def split(ctx: Any, x: np.ndarray, axis: Any, num_splits: Any = None, split_sizes: Any = None) -> tuple:
    x = np.asarray(x)
    ax = int(axis)
    if split_sizes is not None:
        bounds = np.cumsum([int(s) for s in np.atleast_1d(split_sizes)])[:-1]
        return tuple(np.split(x, bounds, axis=ax))
    return tuple(np.split(x, int(num_splits), axis=ax))


@kernel("stack")
def stack(ctx: Any, values: list[np.ndarray], axis: Any) -> np.ndarray:
    return np.stack([np.asarray(v) for v in values], axis=int(axis))

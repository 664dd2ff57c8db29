"""max_pool, avg_pool, l2_pool over 1-3 spatial dims (iOS15 pool.py), with ceil_mode.

With ceil_mode a last, partial window is kept when it starts inside the input or its left
padding; its overhang past the declared padding never counts toward an average.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from unframe.converters.backends.coreml.mil_eval.kernels._util import ints, spatial_pads
from unframe.converters.backends.coreml.mil_eval.registry import kernel


def _out_size(size: int, k: int, s: int, before: int, after: int, ceil_mode: bool) -> int:
    span = size + before + after - k
    if not ceil_mode:
        return span // s + 1
    out = math.ceil(span / s) + 1
    if (out - 1) * s >= size + before:  # the last window would start in the right padding
        out -= 1
    return out


def _windows(x: np.ndarray, kernel_sizes: Any, strides: Any, pad_type: str, pad: Any,
             ceil_mode: Any, fill: float, pad_fill: float) -> np.ndarray:
    """x padded (declared pads with pad_fill, ceil overhang with fill), as strided windows."""
    nd = len(np.atleast_1d(kernel_sizes))
    ks, ss = ints(kernel_sizes, nd, 1), ints(strides, nd, 1)
    pads = spatial_pads(str(pad_type), x.shape[-nd:], ks, ss, [1] * nd, pad)
    lead = [(0, 0)] * (x.ndim - nd)
    xp = np.pad(x, lead + pads, constant_values=pad_fill)
    outs = [_out_size(x.shape[x.ndim - nd + i], ks[i], ss[i], *pads[i], bool(ceil_mode)) for i in range(nd)]
    extra = [max(0, (o - 1) * s + k - p) for o, s, k, p in zip(outs, ss, ks, xp.shape[-nd:], strict=False)]
    xp = np.pad(xp, lead + [(0, e) for e in extra], constant_values=fill)
    win = sliding_window_view(xp, ks, axis=tuple(range(x.ndim - nd, x.ndim)))
    win = win[(slice(None),) * (x.ndim - nd) + tuple(slice(None, (o - 1) * s + 1, s) for o, s in zip(outs, ss, strict=False))]
    return win.reshape(win.shape[:x.ndim] + (-1,))


@kernel("max_pool")
def max_pool(ctx: Any, x: np.ndarray, kernel_sizes: Any, strides: Any = None, pad_type: str = "valid",
             pad: Any = None, ceil_mode: Any = False) -> np.ndarray:
    low = -np.inf
    return np.max(_windows(x, kernel_sizes, strides, pad_type, pad, ceil_mode, low, low), axis=-1)


@kernel("avg_pool")
def avg_pool(ctx: Any, x: np.ndarray, kernel_sizes: Any, strides: Any = None, pad_type: str = "valid",
             pad: Any = None, ceil_mode: Any = False, exclude_padding_from_average: Any = False) -> np.ndarray:
    total = np.sum(_windows(x, kernel_sizes, strides, pad_type, pad, ceil_mode, 0.0, 0.0), axis=-1)
    ones = np.ones(x.shape[-len(np.atleast_1d(kernel_sizes)):], dtype=x.dtype)
    counted_pad = 0.0 if bool(exclude_padding_from_average) else 1.0
    count = np.sum(_windows(ones, kernel_sizes, strides, pad_type, pad, ceil_mode, 0.0, counted_pad), axis=-1)
    return total / count


@kernel("l2_pool")
def l2_pool(ctx: Any, x: np.ndarray, kernel_sizes: Any, strides: Any = None, pad_type: str = "valid",
            pad: Any = None, ceil_mode: Any = False) -> np.ndarray:
    win = _windows(x, kernel_sizes, strides, pad_type, pad, ceil_mode, 0.0, 0.0)
    return np.sqrt(np.sum(np.square(win), axis=-1))

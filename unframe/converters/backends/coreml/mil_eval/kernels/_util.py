"""Helpers shared by kernels: accumulation dtype, padding arithmetic, einsum letters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def acc_dtype(*arrays: np.ndarray) -> np.dtype:
    """Contractions accumulate in fp32 for fp16 inputs (and fp64 stays fp64)."""
    dtype = np.result_type(*[np.asarray(a).dtype for a in arrays])
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def ints(value: Any, count: int, default: int) -> list[int]:
    """A list of ``count`` ints from an optional const (None -> default)."""
    if value is None:
        return [default] * count
    return [int(v) for v in np.atleast_1d(value)]


def spatial_pads(pad_type: str, in_sizes: Sequence[int], kernel: Sequence[int],
                 strides: Sequence[int], dilations: Sequence[int],
                 custom: Sequence[int] | None) -> list[tuple[int, int]]:
    """(before, after) padding per spatial dim for pad_type valid/same/same_lower/custom."""
    nd = len(kernel)
    if pad_type == "custom":
        pad = ints(custom, 2 * nd, 0)
        return [(pad[2 * i], pad[2 * i + 1]) for i in range(nd)]
    if pad_type == "valid":
        return [(0, 0)] * nd
    if pad_type not in ("same", "same_lower"):
        raise ValueError(f"unknown pad_type {pad_type!r}")
    pads = []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations, strict=False):
        eff = (k - 1) * d + 1
        total = max(0, s * -(-size // s) - size + eff - s)
        small = total // 2
        # 'same' puts the odd element after, 'same_lower' before
        pads.append((small, total - small) if pad_type == "same" else (total - small, small))
    return pads

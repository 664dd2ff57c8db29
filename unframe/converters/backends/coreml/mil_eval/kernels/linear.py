"""linear, matmul, einsum (iOS15 linear.py; iOS17 only widens dtypes)."""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.kernels._util import acc_dtype
from unframe.converters.backends.coreml.mil_eval.registry import kernel


@kernel("linear")
def linear(ctx: Any, x: np.ndarray, weight: np.ndarray, bias: Any = None) -> np.ndarray:
    """x [*D, D_in] @ weight[D_out, D_in].T + bias[D_out]."""
    acc = acc_dtype(x, weight)
    out = np.asarray(x, acc) @ np.asarray(weight, acc).T
    if bias is not None:
        out = out + np.asarray(bias, acc)
    return out


@kernel("matmul")
def matmul(ctx: Any, x: np.ndarray, y: np.ndarray, transpose_x: Any = False,
           transpose_y: Any = False) -> np.ndarray:
    acc = acc_dtype(x, y)
    a, b = np.asarray(x, acc), np.asarray(y, acc)
    if bool(transpose_x) and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    if bool(transpose_y) and b.ndim >= 2:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


@kernel("einsum")
def einsum(ctx: Any, values: list[np.ndarray], equation: str) -> np.ndarray:
    acc = acc_dtype(*values)
    return np.einsum(str(equation), *[np.asarray(v, acc) for v in values], optimize=True)

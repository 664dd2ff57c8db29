"""Reductions (iOS15 reduction.py; iOS17 adds reduce_argmax/argmin output_dtype)."""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import kernel


def _axes(x: np.ndarray, axes: Any) -> tuple[int, ...] | None:
    if axes is None:
        return None  # reduce over every axis
    return tuple(int(a) % max(x.ndim, 1) for a in np.atleast_1d(axes))


def _reduction(op_type: str, fn: Any) -> None:
    def run(ctx: Any, x: np.ndarray, axes: Any = None, keep_dims: Any = False) -> np.ndarray:
        x = np.asarray(x)
        return fn(x, _axes(x, axes), bool(keep_dims))

    kernel(op_type)(run)


def _log_sum_exp(x: np.ndarray, axes: Any, keep: bool) -> np.ndarray:
    peak = np.max(x, axis=axes, keepdims=True)
    total = np.log(np.sum(np.exp(x - peak), axis=axes, keepdims=True)) + peak
    return total if keep else np.squeeze(total, axis=axes)


for _name, _fn in {
    "reduce_sum": lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    "reduce_mean": lambda x, a, k: np.mean(x, axis=a, keepdims=k),
    "reduce_max": lambda x, a, k: np.max(x, axis=a, keepdims=k),
    "reduce_min": lambda x, a, k: np.min(x, axis=a, keepdims=k),
    "reduce_prod": lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    "reduce_l1_norm": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "reduce_l2_norm": lambda x, a, k: np.sqrt(np.sum(np.square(x), axis=a, keepdims=k)),
    "reduce_sum_square": lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k),
    "reduce_log_sum": lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)),
    "reduce_log_sum_exp": _log_sum_exp,
}.items():
    _reduction(_name, _fn)


def _arg_reduction(op_type: str, fn: Any) -> None:
    def run(ctx: Any, x: np.ndarray, axis: Any = -1, keep_dims: Any = False,
            output_dtype: str = "int32") -> np.ndarray:
        x = np.asarray(x)
        return fn(x, axis=int(axis), keepdims=bool(keep_dims))

    kernel(op_type)(run)


_arg_reduction("reduce_argmax", np.argmax)
_arg_reduction("reduce_argmin", np.argmin)

"""Elementwise unary and binary ops (iOS15 elementwise_unary / elementwise_binary, iOS17 changes).

Binary ops broadcast numpy-style. Results are computed in the inputs' dtype; the evaluator
casts to the declared output dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import kernel


def _unary(op_type: str, fn: Any) -> None:
    kernel(op_type)(lambda ctx, x: fn(np.asarray(x)))


def _binary(op_type: str, fn: Any) -> None:
    kernel(op_type)(lambda ctx, x, y: fn(np.asarray(x), np.asarray(y)))


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return erf(x).astype(x.dtype)


for _name, _fn in {
    "abs": np.abs, "acos": np.arccos, "asin": np.arcsin, "atan": np.arctan, "atanh": np.arctanh,
    "ceil": np.ceil, "cos": np.cos, "cosh": np.cosh, "erf": _erf, "exp": np.exp, "exp2": np.exp2,
    "floor": np.floor, "logical_not": np.logical_not, "sign": np.sign, "sin": np.sin,
    "sinh": np.sinh, "sqrt": np.sqrt, "square": np.square, "tan": np.tan, "tanh": np.tanh,
    # MIL round is round-half-to-even like numpy (the spec's example rounds 2.5 to 2)
    "round": np.round,
}.items():
    _unary(_name, _fn)

for _name, _fn in {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum,
    "minimum": np.minimum, "pow": np.power, "equal": np.equal, "not_equal": np.not_equal,
    "greater": np.greater, "greater_equal": np.greater_equal, "less": np.less,
    "less_equal": np.less_equal, "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}.items():
    _binary(_name, _fn)


@kernel("real_div")
def real_div(ctx: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x, y = np.asarray(x), np.asarray(y)
    if np.issubdtype(x.dtype, np.integer) and np.issubdtype(y.dtype, np.integer):
        return np.trunc(np.divide(x, y)).astype(np.result_type(x, y))  # integer real_div truncates
    return np.divide(x, y)


@kernel("floor_div")
def floor_div(ctx: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.floor_divide(np.asarray(x), np.asarray(y))


@kernel("mod")
def mod(ctx: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # MIL: x - floor(x / y) * y, i.e. python/numpy semantics (sign of the divisor)
    return np.mod(np.asarray(x), np.asarray(y))


@kernel("clip")
def clip(ctx: Any, x: np.ndarray, alpha: Any, beta: Any) -> np.ndarray:
    return np.minimum(np.maximum(x, alpha), beta).astype(np.asarray(x).dtype)


@kernel("inverse")
def inverse(ctx: Any, x: np.ndarray, epsilon: Any = 1e-4) -> np.ndarray:
    x = np.asarray(x)
    return (np.asarray(1.0, x.dtype) / (x + np.asarray(epsilon, x.dtype))).astype(x.dtype)


@kernel("log")
def log(ctx: Any, x: np.ndarray, epsilon: Any = 1e-45) -> np.ndarray:
    x = np.asarray(x)
    return np.log(x + np.asarray(epsilon, x.dtype))


@kernel("rsqrt")
def rsqrt(ctx: Any, x: np.ndarray, epsilon: Any = 1e-12) -> np.ndarray:
    x = np.asarray(x)
    return (np.asarray(1.0, x.dtype) / np.sqrt(x + np.asarray(epsilon, x.dtype))).astype(x.dtype)


@kernel("threshold")
def threshold(ctx: Any, x: np.ndarray, alpha: Any) -> np.ndarray:
    x = np.asarray(x)
    return np.maximum(x, np.asarray(alpha, x.dtype))


@kernel("cast")
def cast(ctx: Any, x: Any, dtype: str) -> np.ndarray:
    # float -> int truncates toward zero (numpy astype), as the op's value_inference does
    return np.asarray(x).astype(ctx.output_dtype())


@kernel("identity")
def identity(ctx: Any, x: Any) -> Any:
    return np.array(x, copy=True)

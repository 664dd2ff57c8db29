"""Activations (iOS15 activation.py; iOS17 only widens alpha/beta dtypes)."""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import kernel


def _same(x: np.ndarray, value: Any) -> np.ndarray:
    """A parameter in x's dtype, so fp16 programs stay fp16."""
    return np.asarray(value, dtype=np.asarray(x).dtype)


def _channel_param(x: np.ndarray, param: np.ndarray) -> np.ndarray:
    """A per-channel [C] parameter broadcast against x's channel dim (axis 1)."""
    param = _same(x, param)
    if param.ndim == 1 and x.ndim >= 2:
        return param.reshape((1, -1) + (1,) * (x.ndim - 2))
    return param


@kernel("relu")
def relu(ctx: Any, x: np.ndarray) -> np.ndarray:
    return np.maximum(x, _same(x, 0))


@kernel("relu6")
def relu6(ctx: Any, x: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(x, _same(x, 0)), _same(x, 6))


@kernel("sigmoid")
def sigmoid(ctx: Any, x: np.ndarray) -> np.ndarray:
    one = _same(x, 1)
    return one / (one + np.exp(-x))


@kernel("silu")
def silu(ctx: Any, x: np.ndarray) -> np.ndarray:
    return x * sigmoid(ctx, x)


@kernel("softplus")
def softplus(ctx: Any, x: np.ndarray) -> np.ndarray:
    return np.logaddexp(_same(x, 0), x)


@kernel("softsign")
def softsign(ctx: Any, x: np.ndarray) -> np.ndarray:
    return x / (_same(x, 1) + np.abs(x))


@kernel("elu")
def elu(ctx: Any, x: np.ndarray, alpha: Any = 1.0) -> np.ndarray:
    return np.where(x > 0, x, _same(x, alpha) * np.expm1(np.minimum(x, _same(x, 0))))


@kernel("leaky_relu")
def leaky_relu(ctx: Any, x: np.ndarray, alpha: Any = 0.01) -> np.ndarray:
    return np.where(x >= 0, x, _same(x, alpha) * x)


@kernel("thresholded_relu")
def thresholded_relu(ctx: Any, x: np.ndarray, alpha: Any = 1.0) -> np.ndarray:
    return np.where(x >= _same(x, alpha), x, _same(x, 0))


@kernel("clamped_relu")
def clamped_relu(ctx: Any, x: np.ndarray, alpha: Any, beta: Any) -> np.ndarray:
    return np.minimum(_same(x, beta), np.where(x >= 0, x, _same(x, alpha) * x))


@kernel("linear_activation")
def linear_activation(ctx: Any, x: np.ndarray, alpha: Any, beta: Any = 0.0) -> np.ndarray:
    return _same(x, alpha) * x + _same(x, beta)


@kernel("scaled_tanh")
def scaled_tanh(ctx: Any, x: np.ndarray, alpha: Any = 1.0, beta: Any = 1.0) -> np.ndarray:
    return _same(x, alpha) * np.tanh(_same(x, beta) * x)


@kernel("sigmoid_hard")
def sigmoid_hard(ctx: Any, x: np.ndarray, alpha: Any = 0.2, beta: Any = 0.5) -> np.ndarray:
    return np.clip(_same(x, alpha) * x + _same(x, beta), _same(x, 0), _same(x, 1))


@kernel("prelu")
def prelu(ctx: Any, x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, _channel_param(x, alpha) * x)


@kernel("softplus_parametric")
def softplus_parametric(ctx: Any, x: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    a, b = _channel_param(x, alpha), _channel_param(x, beta)
    return a * np.logaddexp(_same(x, 0), b * x)


@kernel("gelu")
def gelu(ctx: Any, x: np.ndarray, mode: str = "EXACT") -> np.ndarray:
    if mode == "TANH_APPROXIMATION":
        inner = _same(x, np.sqrt(2 / np.pi)) * (x + _same(x, 0.044715) * x ** 3)
        return _same(x, 0.5) * x * (_same(x, 1) + np.tanh(inner))
    if mode == "SIGMOID_APPROXIMATION":
        return x * sigmoid(ctx, _same(x, 1.702) * x)
    from scipy.special import erf

    return _same(x, 0.5) * x * (_same(x, 1) + erf(x / _same(x, np.sqrt(2))).astype(x.dtype))


@kernel("softmax")
def softmax(ctx: Any, x: np.ndarray, axis: Any = -1) -> np.ndarray:
    shifted = x - np.max(x, axis=int(axis), keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=int(axis), keepdims=True)

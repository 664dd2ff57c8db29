"""batch_norm, instance_norm, layer_norm, l2_norm, local_response_norm (iOS15/iOS17 normalization.py).

Statistics are computed in the input dtype, so an fp16 program normalizes in fp16.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import kernel


def _per_channel(x: np.ndarray, value: Any, default: float) -> np.ndarray:
    if value is None:
        return np.asarray(default, x.dtype)
    return np.asarray(value, x.dtype).reshape((1, -1) + (1,) * (x.ndim - 2))


@kernel("batch_norm")
def batch_norm(ctx: Any, x: np.ndarray, mean: np.ndarray, variance: np.ndarray, gamma: Any = None,
               beta: Any = None, epsilon: Any = 1e-5) -> np.ndarray:
    eps = np.asarray(epsilon, x.dtype)
    scale = _per_channel(x, gamma, 1.0) / np.sqrt(_per_channel(x, variance, 1.0) + eps)
    return (x - _per_channel(x, mean, 0.0)) * scale + _per_channel(x, beta, 0.0)


@kernel("instance_norm")
def instance_norm(ctx: Any, x: np.ndarray, gamma: Any = None, beta: Any = None,
                  epsilon: Any = 1e-5) -> np.ndarray:
    axes = tuple(range(2, x.ndim))
    centred = x - np.mean(x, axis=axes, keepdims=True)
    var = np.mean(np.square(centred), axis=axes, keepdims=True)
    normed = centred / np.sqrt(var + np.asarray(epsilon, x.dtype))
    return normed * _per_channel(x, gamma, 1.0) + _per_channel(x, beta, 0.0)


@kernel("layer_norm")
def layer_norm(ctx: Any, x: np.ndarray, axes: Any = None, gamma: Any = None, beta: Any = None,
               epsilon: Any = 1e-5) -> np.ndarray:
    axes_ = tuple(range(x.ndim)) if axes is None else tuple(int(a) % x.ndim for a in np.atleast_1d(axes))
    centred = x - np.mean(x, axis=axes_, keepdims=True)
    var = np.mean(np.square(centred), axis=axes_, keepdims=True)
    normed = centred / np.sqrt(var + np.asarray(epsilon, x.dtype))
    shape = [x.shape[i] if i in axes_ else 1 for i in range(x.ndim)]
    if gamma is not None:
        normed = normed * np.asarray(gamma, x.dtype).reshape(shape)
    if beta is not None:
        normed = normed + np.asarray(beta, x.dtype).reshape(shape)
    return normed


@kernel("l2_norm")
def l2_norm(ctx: Any, x: np.ndarray, epsilon: Any = 1e-6) -> np.ndarray:
    """Each batch item (leading dims before the last three) divided by its L2 norm."""
    batch = x.shape[:-3]
    flat = x.reshape((int(np.prod(batch)) if batch else 1, -1))
    norms = np.sqrt(np.sum(np.square(flat), axis=1, keepdims=True) + np.asarray(epsilon, x.dtype))
    return (flat / norms).reshape(x.shape)


@kernel("local_response_norm")
def local_response_norm(ctx: Any, x: np.ndarray, size: Any, alpha: Any = 1e-4, beta: Any = 0.75,
                        k: Any = 1.0) -> np.ndarray:
    size_ = int(size)
    sq = np.square(x)
    # the window is centred on each channel: size//2 before, (size-1)//2 after
    padded = np.pad(sq, [(0, 0), (size_ // 2, (size_ - 1) // 2)] + [(0, 0)] * (x.ndim - 2))
    window = sum(padded[:, i:i + x.shape[1]] for i in range(size_))
    dt = x.dtype
    denom = (np.asarray(k, dt) + np.asarray(alpha, dt) / np.asarray(size_, dt) * window) ** np.asarray(beta, dt)
    return x / denom

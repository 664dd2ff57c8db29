"""Normalization: BatchNormalization InstanceNormalization LayerNormalization
GroupNormalization LpNormalization MeanVarianceNormalization LRN.

Statistics are computed in float32 in every 16-bit program: the variance squares ``x - mean``,
which leaves fp16's range once |x - mean| passes 256 (FCOS's GroupNorm heads, activations near
400: 61 of 80 outputs off by up to 72). The normalizations but BatchNormalization (whose
inference form only scales and shifts) are in ``unframe.validate.rounding.FLOAT32_INSIDE``: the
graph walk runs every MIL op they write in float32 (the fp16 cast pass leaves them alone), so each
reads its input as stored and its result is rounded to 16 bits once, as the rounding emulation
assumes. That honours LayerNormalization's and GroupNormalization's default ``stash_type`` (1,
float32), which an fp16 program used to ignore; a 16-bit stash_type is computed in float32 too
(statistics fp16 can't hold, and closer to the float32 reference). BatchNormalization in
training mode computes its batch statistics in float32 the same way (``in_fp32``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import broadcast_to_rank, in_fp32, mb, norm_axis, scalar


@translator("BatchNormalization")
def batch_norm(ctx: TranslateContext) -> Any:
    """y = x * s + t with s = scale / sqrt(var + eps), t = bias - mean * s (folded when constant).
    In training mode, the batch's own statistics (see :func:`_batch_norm_training`)."""
    if int(ctx.attr("training_mode", 0)):
        return _batch_norm_training(ctx)
    m, x = mb(), ctx.x(0)
    eps = float(ctx.attr("epsilon", 1e-5))
    rank = ctx.rank(0)
    consts = [ctx.const(i) for i in (1, 2, 3, 4)]
    if all(c is not None for c in consts):
        scale, bias, mean, var = (np.asarray(c, dtype=np.float64) for c in consts)
        s = scale / np.sqrt(var + eps)
        t = bias - mean * s
        dt = np.float16 if str(x.dtype) == "fp16" else np.float32
        return m.add(x=m.mul(x=x, y=broadcast_to_rank(s.astype(dt), rank, 1)),
                     y=broadcast_to_rank(t.astype(dt), rank, 1))
    scale, bias, mean, var = (broadcast_to_rank(ctx.x(i), rank, 1) for i in (1, 2, 3, 4))
    inv = m.rsqrt(x=var, epsilon=eps)
    return m.add(x=m.mul(x=m.mul(x=m.sub(x=x, y=mean), y=inv), y=scale), y=bias)


def _batch_norm_training(ctx: TranslateContext) -> Any:
    """training_mode=1 (a model exported in train mode, or BatchNorm used as a per-batch
    normalizer): statistics over every axis but the channels, in float32, and the running
    statistics the op also returns::

        y = (x - mean_b) / sqrt(var_b + eps) * scale + bias      (var_b: the population variance)
        running_mean = mean * momentum + mean_b * (1 - momentum)  (the same for running_var)
    """
    m, x = mb(), ctx.x(0)
    rank = ctx.rank(0)
    eps, momentum = float(ctx.attr("epsilon", 1e-5)), float(ctx.attr("momentum", 0.9))
    axes = [0, *range(2, rank)]
    with in_fp32(ctx):
        mean_b, centred, var_b = _moments(x, axes)
        y = m.mul(x=centred, y=m.rsqrt(x=var_b, epsilon=eps))
        y = m.add(x=m.mul(x=y, y=broadcast_to_rank(_value(ctx, 1), rank, 1)), y=broadcast_to_rank(_value(ctx, 2), rank, 1))
        keep, take = np.float32(momentum), np.float32(1.0 - momentum)
        running_mean = m.add(x=m.mul(x=_value(ctx, 3), y=keep), y=m.mul(x=m.squeeze(x=mean_b, axes=axes), y=take))
        running_var = m.add(x=m.mul(x=_value(ctx, 4), y=keep), y=m.mul(x=m.squeeze(x=var_b, axes=axes), y=take))
    return y, running_mean, running_var


def _moments(x: Any, axes: list[int]) -> tuple[Any, Any, Any]:
    """(mean, x - mean, population variance) over ``axes``, kept as broadcastable dims."""
    m = mb()
    mean = m.reduce_mean(x=x, axes=axes, keep_dims=True)
    centered = m.sub(x=x, y=mean)
    return mean, centered, m.reduce_mean(x=m.mul(x=centered, y=centered), axes=axes, keep_dims=True)


def _normalize(x: Any, axes: list[int], eps: float) -> tuple[Any, Any, Any]:
    """(x - mean) / sqrt(var + eps) over ``axes``; also returns mean and 1/std."""
    m = mb()
    mean, centered, var = _moments(x, axes)
    inv = m.rsqrt(x=var, epsilon=eps) if eps > 0 else m.inverse(x=m.sqrt(x=var))
    return m.mul(x=centered, y=inv), mean, inv


@translator("InstanceNormalization")
def instance_norm(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    rank = ctx.rank(0)
    y, _, _ = _normalize(x, list(range(2, rank)), float(ctx.attr("epsilon", 1e-5)))
    y = m.mul(x=y, y=broadcast_to_rank(_value(ctx, 1), rank, 1))
    return m.add(x=y, y=broadcast_to_rank(_value(ctx, 2), rank, 1))


def _value(ctx: TranslateContext, i: int) -> Any:
    c = ctx.const(i)
    return c if c is not None else ctx.x(i)


@translator("LayerNormalization")
def layer_norm(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    rank = ctx.rank(0)
    axis = norm_axis(int(ctx.attr("axis", -1)), rank)
    y, mean, inv = _normalize(x, list(range(axis, rank)), float(ctx.attr("epsilon", 1e-5)))
    y = m.mul(x=y, y=ctx.x(1))
    if ctx.has(2):
        y = m.add(x=y, y=ctx.x(2))
    return y, mean, inv


@translator("GroupNormalization")
def group_norm(ctx: TranslateContext) -> Any:
    """[N, C, *] -> [N, G, C/G * prod(*)] -> normalize the last axis -> [N, C, *] * scale + bias
    (opset 21: scale and bias are per channel)."""
    m, x = mb(), ctx.x(0)
    rank = ctx.rank(0)
    groups = int(ctx.attr("num_groups"))
    grouped = _group_reshape(x, groups)
    y, _, _ = _normalize(grouped, [2], float(ctx.attr("epsilon", 1e-5)))
    y = m.reshape(x=y, shape=m.shape(x=x) if not _static(x) else np.array([int(d) for d in x.shape], dtype=np.int32))
    y = m.mul(x=y, y=broadcast_to_rank(_value(ctx, 1), rank, 1))
    return m.add(x=y, y=broadcast_to_rank(_value(ctx, 2), rank, 1))


def _static(x: Any) -> bool:
    return all(isinstance(d, (int, np.integer)) for d in x.shape)


def _group_reshape(x: Any, groups: int) -> Any:
    m = mb()
    n = x.shape[0]
    if isinstance(n, (int, np.integer)):
        return m.reshape(x=x, shape=np.array([int(n), groups, -1], dtype=np.int32))
    lead = m.slice_by_index(x=m.shape(x=x), begin=np.array([0], dtype=np.int32), end=np.array([1], dtype=np.int32))
    return m.reshape(x=x, shape=m.concat(values=[lead, np.array([groups, -1], dtype=np.int32)], axis=0))


@translator("LpNormalization")
def lp_normalization(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    axis = int(ctx.attr("axis", -1))
    p = int(ctx.attr("p", 2))
    op = m.reduce_l2_norm if p == 2 else m.reduce_l1_norm
    norm = op(x=x, axes=[axis], keep_dims=True)
    safe = m.select(cond=m.equal(x=norm, y=scalar(0, x)), a=scalar(1, x), b=norm)
    return m.real_div(x=x, y=safe)


@translator("MeanVarianceNormalization")
def mean_variance_normalization(ctx: TranslateContext) -> Any:
    x = ctx.x(0)
    axes = [norm_axis(int(a), ctx.rank(0)) for a in ctx.attr("axes", [0, 2, 3])]
    y, _, _ = _normalize(x, axes, 1e-9)
    return y


@translator("LRN")
def lrn(ctx: TranslateContext) -> Any:
    return mb().local_response_norm(x=ctx.x(0), size=int(ctx.attr("size")),
                                    alpha=float(ctx.attr("alpha", 1e-4)),
                                    beta=float(ctx.attr("beta", 0.75)), k=float(ctx.attr("bias", 1.0)))

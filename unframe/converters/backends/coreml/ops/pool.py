"""Pooling: MaxPool AveragePool LpPool GlobalAveragePool GlobalMaxPool GlobalLpPool."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import mb, scalar
from unframe.converters.backends.coreml.ops.conv import mil_padding
from unframe.converters.backends.coreml.translate import TranslateContext


def _max_pool_check(node: ir.Node) -> list[str]:
    out = []
    dil = node.attributes.get("dilations")
    if dil is not None and any(int(d) != 1 for d in dil.value):
        out.append("MaxPool with dilations != 1 has no CoreML equivalent")
    if len(node.outputs) > 1 and node.outputs[1] is not None and node.outputs[1].name:
        out.append("MaxPool's Indices output has no CoreML equivalent")
    return out


def _window(ctx: TranslateContext) -> dict[str, Any]:
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    spatial = len(kernel)
    return dict(kernel_sizes=kernel, strides=[int(s) for s in ctx.attr("strides", [1] * spatial)],
                ceil_mode=bool(ctx.attr("ceil_mode", 0)), **mil_padding(ctx, spatial))


@translator("MaxPool", check=_max_pool_check)
def max_pool(ctx: TranslateContext) -> Any:
    return mb().max_pool(x=ctx.x(0), **_window(ctx))


def _avg_pool_check(node: ir.Node) -> list[str]:
    dil = node.attributes.get("dilations")
    if dil is not None and any(int(d) != 1 for d in dil.value):
        return ["AveragePool with dilations != 1 has no CoreML equivalent"]
    return []


@translator("AveragePool", check=_avg_pool_check)
def avg_pool(ctx: TranslateContext) -> Any:
    return mb().avg_pool(x=ctx.x(0), exclude_padding_from_average=not int(ctx.attr("count_include_pad", 0)),
                         **_window(ctx))


@translator("LpPool", check=_avg_pool_check)
def lp_pool(ctx: TranslateContext) -> Any:
    """(sum over the window of |x|^p)^(1/p) == (mean-with-padding * window size)^(1/p)."""
    m, x = mb(), ctx.x(0)
    p = float(ctx.attr("p", 2))
    win = _window(ctx)
    powered = m.pow(x=m.abs(x=x), y=scalar(p, x))
    avg = m.avg_pool(x=powered, exclude_padding_from_average=False, **win)
    total = m.mul(x=avg, y=scalar(float(np.prod(win["kernel_sizes"])), x))
    return m.pow(x=total, y=scalar(1.0 / p, x))


def _spatial(ctx: TranslateContext) -> list[int]:
    return list(range(2, ctx.rank(0)))


@translator("GlobalAveragePool")
def global_avg_pool(ctx: TranslateContext) -> Any:
    return mb().reduce_mean(x=ctx.x(0), axes=_spatial(ctx), keep_dims=True)


@translator("GlobalMaxPool")
def global_max_pool(ctx: TranslateContext) -> Any:
    return mb().reduce_max(x=ctx.x(0), axes=_spatial(ctx), keep_dims=True)


@translator("GlobalLpPool")
def global_lp_pool(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    p = float(ctx.attr("p", 2))
    total = m.reduce_sum(x=m.pow(x=m.abs(x=x), y=scalar(p, x)), axes=_spatial(ctx), keep_dims=True)
    return m.pow(x=total, y=scalar(1.0 / p, x))

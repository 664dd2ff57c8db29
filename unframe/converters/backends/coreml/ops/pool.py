"""Pooling: MaxPool AveragePool LpPool GlobalAveragePool GlobalMaxPool GlobalLpPool."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import cast, dtype_name, in_fp32, mb, scalar
from unframe.converters.backends.coreml.ops.conv import mil_padding


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
    x = ctx.x(0)
    kind = dtype_name(x)
    window = _window(ctx)
    if window["ceil_mode"] and window["pad_type"] == "custom":
        window = _ceil_as_padding(x, window)
    if kind != "int32":
        return mb().max_pool(x=x, **window)
    with in_fp32(ctx):
        return cast(mb().max_pool(x=cast(x, "fp32"), **window), kind)


def _ceil_as_padding(x: Any, window: dict[str, Any]) -> dict[str, Any]:
    """ONNX ceil_mode drops a last window that would start in the end padding; MIL keeps it.
    With static sizes, write ONNX's output size as explicit end padding in floor mode instead."""
    sizes = x.shape[2:]
    if not all(isinstance(s, (int, np.integer)) for s in sizes):
        return window
    pads = [int(p) for p in window["pad"]]
    out_pad = list(pads)
    for i, (n, k, s) in enumerate(zip(sizes, window["kernel_sizes"], window["strides"], strict=False)):
        begin, end = pads[2 * i], pads[2 * i + 1]
        out = -(-(int(n) + begin + end - k) // s) + 1
        if (out - 1) * s >= int(n) + begin:
            out -= 1
        out_pad[2 * i + 1] = max(end, (out - 1) * s + k - int(n) - begin)
    return {**window, "ceil_mode": False, "pad": np.array(out_pad, dtype=np.int32)}


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

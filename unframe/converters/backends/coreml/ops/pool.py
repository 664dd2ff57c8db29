"""Pooling: MaxPool AveragePool LpPool GlobalAveragePool GlobalMaxPool GlobalLpPool."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import cast, dtype_name, in_fp32, mb, scalar
from unframe.converters.backends.coreml.ops.conv import mil_padding


def _max_pool_check(node: ir.Node) -> list[str]:
    if len(node.outputs) > 1 and node.outputs[1] is not None and node.outputs[1].name:
        return ["MaxPool's Indices output has no CoreML equivalent"]
    return []


def _dilated(ctx: TranslateContext) -> bool:
    return any(int(d) != 1 for d in ctx.attr("dilations", []))


def _window(ctx: TranslateContext) -> dict[str, Any]:
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    spatial = len(kernel)
    return dict(kernel_sizes=kernel, strides=[int(s) for s in ctx.attr("strides", [1] * spatial)],
                ceil_mode=bool(ctx.attr("ceil_mode", 0)), **mil_padding(ctx, spatial))


@translator("MaxPool", check=_max_pool_check)
def max_pool(ctx: TranslateContext) -> Any:
    x = ctx.x(0)
    kind = dtype_name(x)
    if _dilated(ctx):
        if kind != "int32":
            return pool_by_slices(ctx, x, "max")
        with in_fp32(ctx):
            return cast(pool_by_slices(ctx, cast(x, "fp32"), "max"), kind)
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


@translator("AveragePool")
def avg_pool(ctx: TranslateContext) -> Any:
    """MIL's avg_pool, except where it has no such window: dilations, and ceil_mode past two
    spatial dims or with unequal pads (:func:`pool_by_slices`)."""
    window = _window(ctx)
    pads = window.get("pad")
    uneven = pads is not None and any(int(pads[2 * i]) != int(pads[2 * i + 1]) for i in range(len(pads) // 2))
    if _dilated(ctx) or (window["ceil_mode"] and (len(window["kernel_sizes"]) > 2 or uneven)):
        with in_fp32(ctx):  # the window's sum before the division
            return pool_by_slices(ctx, ctx.x(0), "avg")
    return mb().avg_pool(x=ctx.x(0), exclude_padding_from_average=not int(ctx.attr("count_include_pad", 0)),
                         **window)


@translator("LpPool")
def lp_pool(ctx: TranslateContext) -> Any:
    """(sum over the window of |x|^p)^(1/p) == (mean-with-padding * window size)^(1/p)."""
    m, x = mb(), ctx.x(0)
    p = float(ctx.attr("p", 2))
    with in_fp32(ctx):  # |x|^p leaves fp16's range long before the p-norm does
        powered = m.pow(x=m.abs(x=x), y=scalar(p, x))
        if _dilated(ctx):
            total = pool_by_slices(ctx, powered, "sum")
        else:
            win = _window(ctx)
            avg = m.avg_pool(x=powered, exclude_padding_from_average=False, **win)
            total = m.mul(x=avg, y=scalar(float(np.prod(win["kernel_sizes"])), x))
        return m.pow(x=total, y=scalar(1.0 / p, x))


def pool_by_slices(ctx: TranslateContext, x: Any, kind: str) -> Any:
    """A pooling window MIL's pools don't take (dilated; ceil_mode in 3-D), as what it is: one
    strided slice of the padded input per kernel offset, combined (max, sum, or the sum over
    the count of elements each window covers, computed here from the static sizes)::

        out[i] = reduce over k of x_padded[i * stride + k * dilation]

    ``kind``: "max", "avg" (AveragePool: count_include_pad counts the declared pads, never
    ceil_mode's extension past them, as onnxruntime) or "sum"."""
    m = mb()
    sizes = [int(d) if isinstance(d, (int, np.integer)) else None for d in x.shape[2:]]
    if any(d is None for d in sizes):
        raise ctx.err(f"{ctx.node.op_type} with dilations or 3-D ceil_mode needs static spatial sizes")
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    spatial = len(kernel)
    strides = [int(v) for v in ctx.attr("strides", [1] * spatial)]
    dilations = [int(v) for v in ctx.attr("dilations", [1] * spatial)]
    begin, end = _explicit_pads(ctx, sizes, kernel, strides, dilations)
    outs, extra = _pooled_sizes(sizes, kernel, strides, dilations, begin, end, bool(ctx.attr("ceil_mode", 0)))
    fill = float("-inf") if kind == "max" else 0.0
    pad = [0, 0, 0, 0] + [v for i in range(spatial) for v in (begin[i], end[i] + extra[i])]
    padded = m.pad(x=x, pad=np.array(pad, np.int32), mode="constant", constant_val=np.float32(fill))
    total = None
    for offset in itertools.product(*(range(k) for k in kernel)):
        piece = m.slice_by_index(
            x=padded, begin=np.array([0, 0, *(o * d for o, d in zip(offset, dilations, strict=True))], np.int32),
            end=np.array([0, 0, *(o * d + (n - 1) * s + 1 for o, d, n, s in zip(offset, dilations, outs, strides, strict=True))], np.int32),
            stride=np.array([1, 1, *strides], np.int32), begin_mask=[True, True] + [False] * spatial,
            end_mask=[True, True] + [False] * spatial)
        total = piece if total is None else (m.maximum(x=total, y=piece) if kind == "max" else m.add(x=total, y=piece))
    if kind != "avg":
        return total
    count = _window_counts(sizes, kernel, strides, dilations, begin, end, extra, outs,
                           include_pads=bool(int(ctx.attr("count_include_pad", 0))))
    return m.real_div(x=total, y=count.reshape((1, 1, *count.shape)).astype(np.float32))


def _explicit_pads(ctx: TranslateContext, sizes: list[int], kernel: list[int], strides: list[int],
                   dilations: list[int]) -> tuple[list[int], list[int]]:
    spatial = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for n, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
            total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
            small = total // 2
            begin.append(small if auto == "SAME_UPPER" else total - small)
            end.append(total - begin[-1])
        return begin, end
    if auto == "VALID":
        return [0] * spatial, [0] * spatial
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * spatial))]
    return pads[:spatial], pads[spatial:]


def _pooled_sizes(sizes: list[int], kernel: list[int], strides: list[int], dilations: list[int],
                  begin: list[int], end: list[int], ceil: bool) -> tuple[list[int], list[int]]:
    """Output sizes, and the padding ceil_mode adds past the end (onnxruntime's rule: a last
    window that would start in the end padding is dropped)."""
    outs, extra = [], []
    for n, k, s, d, b, e in zip(sizes, kernel, strides, dilations, begin, end, strict=True):
        span = n + b + e - ((k - 1) * d + 1)
        out = (-(-span // s) if ceil else span // s) + 1
        if ceil and (out - 1) * s >= n + b:
            out -= 1
        outs.append(out)
        extra.append(max(0, (out - 1) * s + (k - 1) * d + 1 - (n + b + e)))
    return outs, extra


def _window_counts(sizes: list[int], kernel: list[int], strides: list[int], dilations: list[int],
                   begin: list[int], end: list[int], extra: list[int], outs: list[int], *,
                   include_pads: bool) -> np.ndarray:
    """How many elements each window averages: the input's, plus the declared pads' when
    count_include_pad (never the ceil_mode extension)."""
    real = np.ones(sizes, np.float64)
    counted = np.pad(real, [(b, e) for b, e in zip(begin, end, strict=True)], constant_values=1.0 if include_pads else 0.0)
    counted = np.pad(counted, [(0, x) for x in extra])
    total = np.zeros(outs, np.float64)
    for offset in itertools.product(*(range(k) for k in kernel)):
        index = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                      for o, d, n, s in zip(offset, dilations, outs, strides, strict=True))
        total += counted[index]
    return total


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
    with in_fp32(ctx):
        total = m.reduce_sum(x=m.pow(x=m.abs(x=x), y=scalar(p, x)), axes=_spatial(ctx), keep_dims=True)
        return m.pow(x=total, y=scalar(1.0 / p, x))

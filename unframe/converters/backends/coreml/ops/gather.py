"""Indexing: Gather GatherElements GatherND ScatterElements ScatterND TopK CumSum."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import cast, dim, mb, norm_axis


def _positive(ctx: TranslateContext, indices: Any, size: Any, i: int) -> Any:
    """ONNX indices may be negative (counting from the end)."""
    m = mb()
    known = ctx.const(i)
    if known is not None and isinstance(size, int):
        arr = np.asarray(known).astype(np.int64)
        return np.where(arr < 0, arr + size, arr).astype(np.int32)
    idx = cast(indices, "int32")
    return m.select(cond=m.less(x=idx, y=np.int32(0)), a=m.add(x=idx, y=cast(size, "int32")
                    if not isinstance(size, int) else np.int32(size)), b=idx)


@translator("Gather")
def gather(ctx: TranslateContext) -> Any:
    x = ctx.x(0)
    axis = norm_axis(int(ctx.attr("axis", 0)), ctx.rank(0))
    idx = _positive(ctx, ctx.x(1), dim(x, axis), 1)
    return mb().gather(x=x, indices=idx, axis=axis)


@translator("GatherElements")
def gather_elements(ctx: TranslateContext) -> Any:
    x = ctx.x(0)
    axis = norm_axis(int(ctx.attr("axis", 0)), ctx.rank(0))
    idx = _positive(ctx, ctx.x(1), dim(x, axis), 1)
    return mb().gather_along_axis(x=x, indices=idx, axis=axis)


def _gather_nd_ios(node: ir.Node) -> int:
    batch = node.attributes.get("batch_dims")
    return 17 if batch is not None and int(batch.value) else 16


@translator("GatherND", needs_ios=_gather_nd_ios)
def gather_nd(ctx: TranslateContext) -> Any:
    batch_dims = int(ctx.attr("batch_dims", 0))
    idx = cast(ctx.x(1), "int32")
    if batch_dims == 0:
        return mb().gather_nd(x=ctx.x(0), indices=idx)
    if ctx.ios >= 17:
        return mb().gather_nd(x=ctx.x(0), indices=idx, batch_dims=batch_dims)
    raise ctx.err("GatherND with batch_dims needs --target iOS17 or newer")


_MODES = {"none": "update", "add": "add", "mul": "mul", "max": "max", "min": "min"}


@translator("ScatterElements")
def scatter_elements(ctx: TranslateContext) -> Any:
    x = ctx.x(0)
    axis = norm_axis(int(ctx.attr("axis", 0)), ctx.rank(0))
    idx = _positive(ctx, ctx.x(1), dim(x, axis), 1)
    mode = _MODES[ctx.attr("reduction", "none")]
    return mb().scatter_along_axis(data=x, indices=idx, updates=ctx.x(2), axis=axis, mode=mode)


@translator("ScatterND")
def scatter_nd(ctx: TranslateContext) -> Any:
    mode = _MODES[ctx.attr("reduction", "none")]
    return mb().scatter_nd(data=ctx.x(0), indices=cast(ctx.x(1), "int32"), updates=ctx.x(2), mode=mode)


@translator("TopK")
def top_k(ctx: TranslateContext) -> Any:
    k = ctx.ints(1)
    axis = int(ctx.attr("axis", -1))
    ascending = not int(ctx.attr("largest", 1))
    if k is None:
        return _dynamic_top_k(ctx, axis, ascending)
    values, indices = mb().topk(x=ctx.x(0), k=int(k[0]), axis=axis, ascending=ascending)
    return values, indices


def _dynamic_top_k(ctx: TranslateContext, axis: int, ascending: bool) -> Any:
    """MIL's topk takes a constant k; a k computed at run time (torchvision's detectors:
    ``min(topk_candidates, number of boxes)``) sorts the whole axis and keeps its first k, as
    coremltools' own frontends do. Ties keep the lower index first, as ONNX's TopK."""
    m = mb()
    x = ctx.x(0)
    axis = norm_axis(axis, ctx.rank(0))
    k = cast(ctx.x(1), "int32")
    if len(k.shape or ()) > 0:
        k = m.reshape(x=k, shape=np.zeros((0,), dtype=np.int32))
    order = m.argsort(x=x, axis=axis, ascending=ascending)
    first = m.range_1d(start=np.int32(0), end=k, step=np.int32(1))
    indices = m.gather(x=order, indices=first, axis=axis)
    return m.gather_along_axis(x=x, indices=indices, axis=axis), indices


@translator("CumSum")
def cumsum(ctx: TranslateContext) -> Any:
    axis = ctx.ints(1)
    if axis is None:
        raise ctx.err("CumSum axis must be constant")
    return mb().cumsum(x=ctx.x(0), axis=int(axis[0]), exclusive=bool(ctx.attr("exclusive", 0)),
                       reverse=bool(ctx.attr("reverse", 0)))

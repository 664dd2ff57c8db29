"""Indexing: Gather GatherElements GatherND ScatterElements ScatterND TopK CumSum."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import cast, dim, mb, norm_axis, shape_of


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
    if not _same_dims_off_axis(x, ctx.x(1), axis):
        x = _cut_to(x, ctx.x(1), axis)
    return mb().gather_along_axis(x=x, indices=idx, axis=axis)


def _cut_to(data: Any, indices: Any, axis: int) -> Any:
    """``data`` cut to the indices' sizes off ``axis`` (torch.gather's index may be smaller than
    its input there; MIL's gather_along_axis wants them equal). Each output element reads its
    own coordinates there, which the cut keeps."""
    m = mb()
    rank = len(data.shape)
    if all(isinstance(d, (int, np.integer)) for d in indices.shape):
        size: Any = np.array([-1 if i == axis else int(d) for i, d in enumerate(indices.shape)], np.int32)
    else:
        keep = np.array([i == axis for i in range(rank)])
        size = m.select(cond=keep, a=np.int32(-1), b=m.shape(x=indices))
    return m.slice_by_size(x=data, begin=np.zeros(rank, np.int32), size=size)


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
    if _same_dims_off_axis(x, ctx.x(1), axis):
        return mb().scatter_along_axis(data=x, indices=idx, updates=ctx.x(2), axis=axis, mode=mode)
    return _scatter_flat(x, idx, ctx.x(2), axis, mode)


def _same_dims_off_axis(data: Any, indices: Any, axis: int) -> bool:
    """MIL's scatter_along_axis asks for data's dims off the axis to *be* the indices' (its type
    inference asserts it); ONNX only bounds them. Symbolic dims (a dynamic batch, a count
    computed in the graph) prove nothing either way."""
    return all(i == axis or (isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer))
                             and int(a) == int(b))
               for i, (a, b) in enumerate(zip(data.shape, indices.shape, strict=True)))


def _scatter_flat(data: Any, idx: Any, updates: Any, axis: int, mode: str) -> Any:
    """ScatterElements whatever the indices' shape: each index element's position in ``data``
    as one flat offset (the index on ``axis``, the element's own coordinate on every other
    axis, times data's strides), then scatter_nd into the flattened data::

        data [N, 5], indices [M, 2] (axis 1) -> offset[m, j] = m * 5 + indices[m, j]
        -> scatter_nd(data [N * 5], offset [M * 2, 1], updates [M * 2]) -> reshape [N, 5]
    """
    m = mb()
    rank = len(data.shape)
    offset = None
    for d in range(rank):
        coordinate = idx if d == axis else _coordinate(idx, d, rank)
        stride = _stride(data, d)
        term = coordinate if isinstance(stride, int) and stride == 1 else m.mul(x=coordinate, y=stride)
        offset = term if offset is None else m.add(x=offset, y=term)
    flat = m.scatter_nd(data=m.reshape(x=data, shape=np.array([-1], np.int32)),
                        indices=m.reshape(x=offset, shape=np.array([-1, 1], np.int32)),
                        updates=m.reshape(x=updates, shape=np.array([-1], np.int32)), mode=mode)
    return m.reshape(x=flat, shape=shape_of(data))


def _coordinate(idx: Any, axis: int, rank: int) -> Any:
    """Each element's own coordinate on ``axis``, in ``idx``'s shape (int32)."""
    m = mb()
    size = dim(idx, axis)
    line = (np.arange(size, dtype=np.int32) if isinstance(size, int)
            else m.range_1d(start=np.int32(0), end=size, step=np.int32(1)))
    shape = [1] * rank
    shape[axis] = -1
    along = line.reshape(shape) if isinstance(line, np.ndarray) else m.reshape(x=line, shape=np.array(shape, np.int32))
    return m.add(x=m.mul(x=idx, y=np.int32(0)), y=along)  # broadcast to the indices' shape


def _stride(data: Any, axis: int) -> Any:
    """How many elements one step on ``axis`` of ``data`` skips: an int, or an int32 var."""
    rest = data.shape[axis + 1:]
    if all(isinstance(d, (int, np.integer)) for d in rest):
        return int(np.prod([int(d) for d in rest], dtype=np.int64))
    m = mb()
    tail = m.slice_by_index(x=m.shape(x=data), begin=np.array([axis + 1], np.int32),
                            end=np.array([len(data.shape)], np.int32))
    return m.reduce_prod(x=tail, axes=[0], keep_dims=False)


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

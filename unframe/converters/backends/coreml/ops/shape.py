"""Shape-producing ops: Shape Size ConstantOfShape Range EyeLike NonZero OneHot and the
window generators (Hann/Hamming/Blackman), which fold to constants."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.context import MIL_DTYPES, TranslateContext, np_const
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import cast, dtype_name, mb, shape_of, static_dims


@translator("Constant")
def constant(ctx: TranslateContext) -> Any:
    for name in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        val = ctx.attr(name)
        if val is None:
            continue
        if name.startswith("value_float"):
            val = np.asarray(val, dtype=np.float32)
        elif name.startswith("value_int"):
            val = np.asarray(val, dtype=np.int64)
        return mb().const(val=np_const(np.asarray(val)))
    raise ctx.err("Constant holds a string or sparse value, which CoreML can't take")


@translator("Shape")
def shape(ctx: TranslateContext) -> Any:
    x = ctx.x(0)
    rank = ctx.rank(0)
    start = int(ctx.attr("start", 0))
    end = ctx.attr("end")
    start = max(0, min(rank, start + rank if start < 0 else start))
    stop = rank if end is None else max(0, min(rank, int(end) + rank if int(end) < 0 else int(end)))
    full = shape_of(x)
    if isinstance(full, np.ndarray):
        return mb().const(val=full[start:stop])
    if start == 0 and stop == rank:
        return full
    return mb().slice_by_index(x=full, begin=np.array([start], dtype=np.int32),
                               end=np.array([stop], dtype=np.int32))


@translator("Size")
def size(ctx: TranslateContext) -> Any:
    x = ctx.x(0)
    if static_dims(x.shape):
        return mb().const(val=np.int32(np.prod([int(d) for d in x.shape])))
    return mb().reduce_prod(x=mb().shape(x=x), axes=[0], keep_dims=False)


@translator("ConstantOfShape")
def constant_of_shape(ctx: TranslateContext) -> Any:
    value = ctx.attr("value")
    val = np_const(np.asarray(value).reshape(-1)[0]) if value is not None else np.float32(0)
    target = ctx.ints(0)
    if target is not None:
        return mb().const(val=np.full(target, val, dtype=val.dtype))
    return mb().fill(shape=cast(ctx.x(0), "int32"), value=val)


@translator("Range")
def range_(ctx: TranslateContext) -> Any:
    start, limit, delta = ctx.const(0), ctx.const(1), ctx.const(2)
    if start is not None and limit is not None and delta is not None:
        dt = np_const(np.asarray(start)).dtype
        return mb().const(val=np.arange(start, limit, delta).astype(dt))
    return mb().range_1d(start=ctx.x(0), end=ctx.x(1), step=ctx.x(2))


@translator("EyeLike")
def eye_like(ctx: TranslateContext) -> Any:
    x = ctx.x(0)
    if not static_dims(x.shape):
        raise ctx.err("EyeLike needs a static input shape")
    to = ctx.attr("dtype")
    dt = ir.DataType(int(to)) if to is not None else ctx.onnx_in_type(0) or ir.DataType.FLOAT
    if dt not in MIL_DTYPES:
        raise ctx.err(f"EyeLike to {dt.name}, which CoreML can't hold")
    eye = np.eye(int(x.shape[0]), int(x.shape[1]), k=int(ctx.attr("k", 0)))
    return mb().const(val=np_const(eye.astype(dt.numpy())))


@translator("NonZero")
def non_zero(ctx: TranslateContext) -> Any:
    """MIL gives [count, rank]; ONNX wants [rank, count]."""
    return mb().transpose(x=mb().non_zero(x=ctx.x(0)), perm=[1, 0])


@translator("OneHot")
def one_hot(ctx: TranslateContext) -> Any:
    m = mb()
    depth = ctx.const(1)
    values = ctx.const(2)
    if depth is None or values is None:
        raise ctx.err("OneHot depth and values must be constant")
    d = int(np.asarray(depth).reshape(-1)[0])
    idx = cast(ctx.x(0), "int32") if dtype_name(ctx.x(0)) != "int32" else ctx.x(0)
    if dtype_name(ctx.x(0)).startswith("fp"):
        idx = m.cast(x=m.floor(x=ctx.x(0)), dtype="int32")
    # negative indices count from the end
    idx = m.select(cond=m.less(x=idx, y=np.int32(0)), a=m.add(x=idx, y=np.int32(d)), b=idx)
    vals = np_const(np.asarray(values))
    return m.one_hot(indices=idx, one_hot_vector_size=d, axis=int(ctx.attr("axis", -1)),
                     on_value=vals[1], off_value=vals[0])


def _window(fn_name: str) -> Any:
    def fn(ctx: TranslateContext) -> Any:
        n = int(np.asarray(ctx.need_const(0, "window size")).reshape(-1)[0])
        periodic = int(ctx.attr("periodic", 1))
        big_n = n if periodic else n - 1
        k = np.arange(n, dtype=np.float64)
        if fn_name == "hann":
            w = 0.5 - 0.5 * np.cos(2 * np.pi * k / big_n)
        elif fn_name == "hamming":
            w = 25 / 46 - (1 - 25 / 46) * np.cos(2 * np.pi * k / big_n)
        else:
            w = 0.42 - 0.5 * np.cos(2 * np.pi * k / big_n) + 0.08 * np.cos(4 * np.pi * k / big_n)
        to = ir.DataType(int(ctx.attr("output_datatype", 1)))
        return mb().const(val=np_const(w.astype(to.numpy())))

    fn.__name__ = f"translate_{fn_name}_window"
    return fn


translator("HannWindow")(_window("hann"))
translator("HammingWindow")(_window("hamming"))
translator("BlackmanWindow")(_window("blackman"))

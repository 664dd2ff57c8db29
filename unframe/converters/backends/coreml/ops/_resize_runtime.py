"""Resize whose output sizes are known only at run time (sizes or scales computed in the graph,
or a resized axis of dynamic length): each resized axis samples the input at coordinates the
program computes, with the formulas and the float32 arithmetic of onnxruntime::

    out_len = sizes[i]  (or floor(scales[i] * in_len))      scale = out_len / in_len
    y = range(out_len) -> x = coordinate(y, scale)           (e.g. half_pixel: (y + 0.5) / scale - 0.5)
    nearest: gather(v, clamp(round(x)))                      linear: lerp of the gathers at floor(x), floor(x) + 1

The coordinates and indices are computed in float32 in an fp16 program (``in_fp32``): fp16 holds
integers exactly only up to 2048. Cubic and antialiased resizes need constant sizes (their taps
and weights are built at conversion time by ``resize.interpolation_matrix``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops._util import cast, dim, dtype_name, in_fp32, mb

_F32 = np.float32


def resize_at_run_time(ctx: TranslateContext, x: Any, axes: list[int], attrs: dict[str, Any]) -> Any:
    """Resize ``x`` on ``axes`` with the node's run-time sizes or scales (see the module docstring)."""
    if attrs["mode"] == "cubic" or attrs["antialias"]:
        raise ctx.err(f"Resize mode {attrs['mode']!r}{' with antialias' if attrs['antialias'] else ''} "
                      "needs constant sizes or scales and static resized axes",
                      "export with static shapes, or use mode nearest or linear")
    if str(ctx.attr("keep_aspect_ratio_policy", "stretch")) != "stretch":
        raise ctx.err("Resize keep_aspect_ratio_policy needs constant sizes")
    m = mb()
    kind = dtype_name(x)
    work = x
    if kind in ("int32", "bool") and attrs["mode"] != "nearest":
        with in_fp32(ctx):
            work = cast(x, "fp32")
    for i, axis in enumerate(axes):
        if _unchanged(ctx, x, i, axis):
            continue
        with in_fp32(ctx):
            coordinate, in_len = _coordinates(ctx, x, i, axis, attrs)
            picks = _taps(coordinate, in_len, attrs)
        work = _sample(ctx, work, axis, picks, attrs)
    if work is not x and kind in ("int32", "bool") and attrs["mode"] != "nearest":
        with in_fp32(ctx):
            return m.cast(x=m.round(x=work), dtype=kind)
    return work


def _unchanged(ctx: TranslateContext, x: Any, i: int, axis: int) -> bool:
    """The size asked for axis ``i`` is the input's own (a Concat of Shape(x)'s leading dims)."""
    if not ctx.has(3):
        return False
    symbolic = getattr(ctx.inputs[3], "sym_val", None)
    if symbolic is None:
        return False
    entries = list(np.asarray(symbolic).reshape(-1))
    return i < len(entries) and entries[i] is not None and bool(entries[i] == x.shape[axis])


def _coordinates(ctx: TranslateContext, x: Any, i: int, axis: int, attrs: dict[str, Any]) -> tuple[Any, Any]:
    """(x_original of every output position on ``axis`` as float32, the input length as float32)."""
    m = mb()
    length = dim(x, axis)
    in_len = _F32(length) if isinstance(length, int) else m.cast(x=length, dtype="fp32")
    index = np.array([i], np.int32)
    if ctx.has(3):
        out_n = m.reshape(x=m.gather(x=cast(ctx.x(3), "int32"), indices=index, axis=0),
                          shape=np.zeros((0,), np.int32))
        out_len = m.cast(x=out_n, dtype="fp32")
        scale = m.real_div(x=out_len, y=in_len)
    else:
        scale = m.reshape(x=m.gather(x=cast(ctx.x(2), "fp32"), indices=index, axis=0),
                          shape=np.zeros((0,), np.int32))
        out_len = m.floor(x=m.mul(x=scale, y=in_len))  # onnxruntime truncates scale * length
        out_n = m.cast(x=out_len, dtype="int32")
    y = m.cast(x=m.range_1d(start=np.int32(0), end=out_n, step=np.int32(1)), dtype="fp32")
    return _transform(ctx, y, scale, in_len, out_len, i, attrs), in_len


def _transform(ctx: TranslateContext, y: Any, scale: Any, in_len: Any, out_len: Any, i: int,
               attrs: dict[str, Any]) -> Any:
    """onnxruntime's coordinate transformation, op for op in float32."""
    m = mb()
    mode = attrs["coord"]
    half, one = _F32(0.5), _F32(1.0)
    centred = m.sub(x=m.real_div(x=m.add(x=y, y=half), y=scale), y=half)
    many = m.greater(x=out_len, y=one)
    if mode == "half_pixel":
        return centred
    if mode == "asymmetric":
        return m.real_div(x=y, y=scale)
    if mode == "tf_half_pixel_for_nn":
        return m.real_div(x=m.add(x=y, y=half), y=scale)
    if mode == "pytorch_half_pixel":
        return m.select(cond=many, a=centred, b=_F32(0.0))
    if mode == "align_corners":
        spread = m.real_div(x=m.mul(x=y, y=m.sub(x=in_len, y=one)), y=m.maximum(x=m.sub(x=out_len, y=one), y=one))
        return m.select(cond=many, a=spread, b=_F32(0.0))
    if mode == "half_pixel_symmetric":
        adjustment = m.real_div(x=out_len, y=m.mul(x=scale, y=in_len))
        offset = m.mul(x=m.real_div(x=in_len, y=_F32(2.0)), y=m.sub(x=one, y=adjustment))
        return m.add(x=offset, y=centred)
    if mode == "tf_crop_and_resize":
        start, end = _roi(ctx, i)
        last = m.sub(x=in_len, y=one)
        span = m.real_div(x=m.mul(x=m.mul(x=y, y=m.sub(x=end, y=start)), y=last),
                          y=m.maximum(x=m.sub(x=out_len, y=one), y=one))
        inside = m.add(x=m.mul(x=start, y=last), y=span)
        middle = m.mul(x=m.mul(x=_F32(0.5), y=m.add(x=start, y=end)), y=last)
        return m.select(cond=many, a=inside, b=middle)
    raise ctx.err(f"unknown coordinate_transformation_mode {mode!r}")


def _roi(ctx: TranslateContext, i: int) -> tuple[Any, Any]:
    m = mb()
    if not ctx.has(1):
        return _F32(0.0), _F32(1.0)
    count = len(ctx.node.attributes["axes"].value) if "axes" in ctx.node.attributes else ctx.rank(0)
    roi = cast(ctx.x(1), "fp32")
    pick = [m.reshape(x=m.gather(x=roi, indices=np.array([k], np.int32), axis=0), shape=np.zeros((0,), np.int32))
            for k in (i, i + count)]
    return pick[0], pick[1]


def _taps(coordinate: Any, in_len: Any, attrs: dict[str, Any]) -> dict[str, Any]:
    """The int32 indices (and float32 weights) each output position reads."""
    m = mb()
    last = m.sub(x=in_len, y=_F32(1.0))
    outside = None
    if attrs["coord"] == "tf_crop_and_resize":
        outside = m.logical_or(x=m.less(x=coordinate, y=_F32(0.0)), y=m.greater(x=coordinate, y=last))
    if attrs["mode"] == "nearest":
        return {"index": _index(_nearest(coordinate, attrs["nearest_mode"]), last), "outside": outside}
    clamped = m.minimum(x=m.maximum(x=coordinate, y=_F32(0.0)), y=last)
    low = m.floor(x=clamped)
    weight = m.sub(x=clamped, y=low)
    return {"index": _index(low, last), "next": _index(m.add(x=low, y=_F32(1.0)), last),
            "weight": weight, "outside": outside}


def _nearest(coordinate: Any, rounding: str) -> Any:
    """onnxruntime's nearest pixel: floor/ceil, or the round to nearest whose tie goes down or up
    (frac compared with 0.5: ``floor(x + 0.5)`` would round 0.49999997 up in float32)."""
    m = mb()
    if rounding == "floor":
        return m.floor(x=coordinate)
    if rounding == "ceil":
        return m.ceil(x=coordinate)
    low = m.floor(x=coordinate)
    frac = m.sub(x=coordinate, y=low)
    up = m.greater(x=frac, y=_F32(0.5)) if rounding == "round_prefer_floor" else m.greater_equal(x=frac, y=_F32(0.5))
    return m.add(x=low, y=m.cast(x=up, dtype="fp32"))


def _index(value: Any, last: Any) -> Any:
    m = mb()
    return m.cast(x=m.minimum(x=m.maximum(x=value, y=_F32(0.0)), y=last), dtype="int32")


def _sample(ctx: TranslateContext, v: Any, axis: int, picks: dict[str, Any], attrs: dict[str, Any]) -> Any:
    m = mb()
    rank = len(v.shape)
    shape = [1] * rank
    shape[axis] = -1
    first = m.gather(x=v, indices=picks["index"], axis=axis)
    if attrs["mode"] == "nearest":
        out = first
    else:
        second = m.gather(x=v, indices=picks["next"], axis=axis)
        with in_fp32(ctx):
            w = m.reshape(x=picks["weight"], shape=np.array(shape, np.int32))
        out = m.add(x=first, y=m.mul(x=m.sub(x=second, y=first), y=w))
    if picks["outside"] is not None:
        with in_fp32(ctx):
            mask = m.reshape(x=picks["outside"], shape=np.array(shape, np.int32))
        fill = np.array(attrs["extrapolation"], dtype=np.float32 if dtype_name(out) != "int32" else np.int32)
        out = m.select(cond=mask, a=fill, b=out)
    return out

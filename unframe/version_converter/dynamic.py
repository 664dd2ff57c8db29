"""Run-time index arithmetic for downgrades whose older schema takes attributes (Slice-9, Split-12,
TopK-9...) where the node feeds the values at run time. Everything here exists at opset 9 and takes
int64 tensors of shape [1] (one value) or [D] (one per position along an axis).

A slice along one axis with run-time start/end/step is a mask over the positions (Compress, opset 9)::

    Slice(x, s, e, axes=[a], steps=t)  ->  Compress(Gather(x, order, axis=a), mask, axis=a)

where ``order`` is 0..D-1, reversed when t < 0 (so the kept elements come out in slice order), and
``mask`` keeps the positions i with 0 <= (i - s') * sign(t) < (e' - s') * sign(t) and
(i - s') % |t| == 0, s' and e' being s and e normalized and clamped as Slice-13 specifies.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step

INT64 = ir.TensorType(ir.DataType.INT64)
BOOL = ir.TensorType(ir.DataType.BOOL)
# Compress, Where, NonZero, ConstantOfShape and int64 comparisons: the masks need all of them
MIN_OPSET = 9


def final_target(step: Step) -> int:
    return step.walker.targets.get("", step.to_version)


def require_masks(step: Step, what: str) -> None:
    """Refuse (before any change) when the final target lacks the ops the masks are built from."""
    if final_target(step) < MIN_OPSET:
        step.refuse(f"{what} at run time need opset 9 ops (Where, Compress, int64 comparisons); "
                    f"the target opset {final_target(step)} lacks them")


def const1(step: Step, value: int) -> ir.Value:
    return step.const(np.asarray([value], dtype=np.int64))


def op(step: Step, op_type: str, inputs: list[ir.Value], type_: ir.TypeProtocol = INT64, **attrs: Any) -> ir.Value:
    out = step.op(op_type, inputs, attrs)
    out.type = type_
    return out


def as_int64(step: Step, value: ir.Value) -> ir.Value:
    if value.dtype == ir.DataType.INT64:
        return value
    return op(step, "Cast", [value], to=ir.DataType.INT64)


def axis_length(step: Step, x: ir.Value, axis: int) -> ir.Value:
    """D = x.shape[axis] as a [1] int64: a constant when static, else read from Shape(x)."""
    if x.shape is not None and isinstance(x.shape[axis], int):
        return const1(step, x.shape[axis])
    shape = op(step, "Shape", [x])
    return op(step, "Gather", [shape, const1(step, axis)])


def iota(step: Step, x: ir.Value, axis: int) -> ir.Value:
    """0..D-1 along ``axis``: a constant when static, else NonZero of D ones (opset 9 has no Range)."""
    if x.shape is not None and isinstance(x.shape[axis], int):
        return step.const(np.arange(x.shape[axis], dtype=np.int64))
    ones = op(step, "ConstantOfShape", [axis_length(step, x, axis)], value=ir.tensor(np.ones([1], dtype=np.int64)))
    where = op(step, "NonZero", [ones])
    return op(step, "Reshape", [where, const1(step, -1)])


def less(step: Step, a: ir.Value, b: ir.Value) -> ir.Value:
    return op(step, "Less", [a, b], BOOL)


def where(step: Step, cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    return op(step, "Where", [cond, a, b])


def clamp(step: Step, v: ir.Value, lo: ir.Value, hi: ir.Value) -> ir.Value:
    """min(max(v, lo), hi) in int64 (Max/Min only take floats before opset 12)."""
    return where(step, less(step, v, lo), lo, where(step, less(step, hi, v), hi, v))


def wrap_negative(step: Step, v: ir.Value, length: ir.Value) -> ir.Value:
    """v + D where v < 0 (a Slice start/end counted from the end)."""
    return where(step, less(step, v, const1(step, 0)), op(step, "Add", [v, length]), v)


def slice_axis(step: Step, x: ir.Value, axis: int, start: ir.Value, end: ir.Value,
               stride: ir.Value | None, stride_sign: int | None) -> ir.Value:
    """Slice-13 of ``x`` along one axis with run-time [1] int64 start/end/stride (None: 1).
    ``stride_sign``: +1/-1 when the stride's sign is known statically, None when it is not."""
    length, positions = axis_length(step, x, axis), iota(step, x, axis)
    zero = const1(step, 0)
    start, end = wrap_negative(step, start, length), wrap_negative(step, end, length)
    sign = None
    if stride is None or stride_sign == 1:
        start, end = clamp(step, start, zero, length), clamp(step, end, zero, length)
    else:
        x, positions, start, end, sign = _backwards(step, x, axis, start, end, stride, stride_sign,
                                                    length, positions)
        stride = op(step, "Mul", [stride, sign])
    dist, limit = op(step, "Sub", [positions, start]), op(step, "Sub", [end, start])
    if sign is not None:
        dist, limit = op(step, "Mul", [dist, sign]), op(step, "Mul", [limit, sign])
    mask = op(step, "And", [op(step, "Not", [less(step, dist, zero)], BOOL), less(step, dist, limit)], BOOL)
    if stride is not None:
        whole = op(step, "Mul", [op(step, "Div", [dist, stride]), stride])
        mask = op(step, "And", [mask, op(step, "Equal", [whole, dist], BOOL)], BOOL)
    return op(step, "Compress", [x, mask], x.type, axis=axis)


def _backwards(step: Step, x: ir.Value, axis: int, start: ir.Value, end: ir.Value, stride: ir.Value,
               stride_sign: int | None, length: ir.Value,
               positions: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value, ir.Value]:
    """Negative (or unknown-sign) strides: the clamping Slice-13 gives backward stepping, and x read
    in reverse so the kept elements come out last-first; returns x, positions, start, end, sign."""
    zero, minus = const1(step, 0), const1(step, -1)
    last = op(step, "Sub", [length, const1(step, 1)])
    reverse = op(step, "Sub", [last, positions])
    if stride_sign == -1:
        start, end = clamp(step, start, zero, last), clamp(step, end, minus, last)
        return op(step, "Gather", [x, reverse], x.type, axis=axis), reverse, start, end, minus
    back = less(step, stride, zero)
    high = where(step, back, last, length)
    start, end = clamp(step, start, zero, high), clamp(step, end, where(step, back, minus, zero), high)
    positions = where(step, back, reverse, positions)
    sign = where(step, back, minus, const1(step, 1))
    return op(step, "Gather", [x, positions], x.type, axis=axis), positions, start, end, sign

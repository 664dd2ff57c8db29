"""Run-time index arithmetic for downgrades whose older schema takes attributes (Slice-9, Split-12,
TopK-9...) where the node feeds the values at run time. Everything here exists at opset 9 and takes
int64 tensors of shape [1] (one value) or [D] (one per position along an axis).

A slice along one axis with run-time start/end/step is a mask over the positions (Compress, opset 9)::

    Slice(x, s, e, axes=[a], steps=t)  ->  Compress(Gather(x, order, axis=a), mask, axis=a)

where ``order`` is 0..D-1, reversed when t < 0 (so the kept elements come out in slice order), and
``mask`` keeps the positions i with 0 <= (i - s') * sign(t) < (e' - s') * sign(t) and
(i - s') % |t| == 0, s' and e' being s and e normalized and clamped as Slice-13 specifies.

Below opset 9 (no Where, Compress, NonZero, Range, ConstantOfShape; Less takes floats only) the same
values are built from opset-1 ops:

* ``less`` compares in double: Cast to double is monotone, so it can only merge values that are both
  beyond 2^53 in magnitude; every comparison here has a side that is 0, +-1 or an axis length (+1),
  so the double comparison is the int64 one.
* ``where`` selects ``a * m + b * (1 - m)`` with m = Cast(cond, int64): one product is 0, the other
  the chosen value, so nothing overflows even for INT64_MAX/INT64_MIN starts and ends.
* ``arange(n)`` is the iteration numbers a Loop of n trips scans out (an If takes n = 0 to
  ``Tile([0], [0])``: onnx.reference can't stack zero scan outputs)::

      arange(n) = If(Not(Equal(n, 0)))
                    then: Reshape(Loop(n, true, n) body(i, c, v): (c, v, scan i), [-1])
                    else: Tile([0], n)

* a slice along one axis is then a Gather of ``s' + t' * arange(count)``, s'/e' clamped as above,
  t' = t clamped to [-(D+1), D+1] (a larger |t| takes at most the first element, as D+1 does) and
  count = (max((e' - s') * sign, 0) + |t'| - 1) / |t'|: the ceiling of the slice length on
  non-negative int64 operands (exact; truncation and floor agree there).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step

INT64 = ir.TensorType(ir.DataType.INT64)
BOOL = ir.TensorType(ir.DataType.BOOL)
DOUBLE = ir.TensorType(ir.DataType.DOUBLE)
# Compress, Where, NonZero, ConstantOfShape and int64 comparisons: the masks need all of them
MIN_OPSET = 9


def final_target(step: Step) -> int:
    return step.walker.targets.get("", step.to_version)


def low(step: Step) -> bool:
    """True when the final target lacks the mask ops: the opset-1 forms below are built instead."""
    return final_target(step) < MIN_OPSET


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
    """a < b on int64; below opset 9 exact only when a or b lies within +-2^53 (module docstring)."""
    if low(step):
        a, b = _double(step, a), _double(step, b)
    return op(step, "Less", [a, b], BOOL)


def _double(step: Step, v: ir.Value) -> ir.Value:
    known = step.fold(v)
    if known is not None:
        return step.const(known.astype(np.float64))
    return op(step, "Cast", [v], DOUBLE, to=ir.DataType.DOUBLE)


def where(step: Step, cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    """cond ? a : b on int64 (broadcasting as Where does)."""
    if not low(step):
        return op(step, "Where", [cond, a, b])
    return select_by_product(step, cond, a, b, ir.DataType.INT64)


def select_by_product(step: Step, cond: ir.Value, a: ir.Value, b: ir.Value, dtype: ir.DataType) -> ir.Value:
    """cond ? a : b on integers without Where (before opset 9): a * m + b * (1 - m) with
    m = Cast(cond): one product is 0 and the other the chosen value, so nothing overflows."""
    type_ = ir.TensorType(dtype)
    pick = op(step, "Cast", [cond], type_, to=dtype)
    rest = op(step, "Sub", [step.const(np.asarray(1, dtype=dtype.numpy())), pick], type_)
    return op(step, "Add", [op(step, "Mul", [a, pick], type_), op(step, "Mul", [b, rest], type_)], type_)


def clamp(step: Step, v: ir.Value, lo: ir.Value, hi: ir.Value) -> ir.Value:
    """min(max(v, lo), hi) in int64 (Max/Min only take floats before opset 12); hi wins when lo > hi
    (a backward slice of an empty axis clamps into [0, -1]: -1 keeps it empty)."""
    v = where(step, less(step, v, lo), lo, v)
    return where(step, less(step, hi, v), hi, v)


def wrap_negative(step: Step, v: ir.Value, length: ir.Value) -> ir.Value:
    """v + D where v < 0 (a Slice start/end counted from the end); D is added only there, so an
    INT64_MAX end does not overflow."""
    negative = op(step, "Cast", [less(step, v, const1(step, 0))], to=ir.DataType.INT64)
    return op(step, "Add", [v, op(step, "Mul", [length, negative])])


def slice_axis(step: Step, x: ir.Value, axis: int, start: ir.Value, end: ir.Value,
               stride: ir.Value | None, stride_sign: int | None) -> ir.Value:
    """Slice-13 of ``x`` along one axis with run-time [1] int64 start/end/stride (None: 1).
    ``stride_sign``: +1/-1 when the stride's sign is known statically, None when it is not."""
    if low(step):
        return _gather_slice(step, x, axis, start, end, stride, stride_sign)
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


def _gather_slice(step: Step, x: ir.Value, axis: int, start: ir.Value, end: ir.Value,
                  stride: ir.Value | None, stride_sign: int | None) -> ir.Value:
    """The opset-1 slice along one axis: Gather of s' + t' * arange(count) (module docstring)."""
    length = axis_length(step, x, axis)
    zero, one = const1(step, 0), const1(step, 1)
    start, end = wrap_negative(step, start, length), wrap_negative(step, end, length)
    if stride is None:
        stride, stride_sign = one, 1
    back = const1(step, int(stride_sign == -1)) if stride_sign is not None else \
        op(step, "Cast", [less(step, stride, zero)], to=ir.DataType.INT64)
    high = op(step, "Sub", [length, back])  # backwards, the first index is at most D-1 and the end -1
    start = clamp(step, start, zero, high)
    end = clamp(step, end, op(step, "Neg", [back]), high)
    bound = op(step, "Add", [length, one])
    stride = clamp(step, stride, op(step, "Neg", [bound]), bound)
    sign = op(step, "Sub", [one, op(step, "Add", [back, back])])
    span = op(step, "Mul", [op(step, "Sub", [end, start]), sign])
    span = where(step, less(step, span, zero), zero, span)
    size = op(step, "Mul", [stride, sign])
    # a zero stride (invalid) must not divide by zero: it takes size 1 instead
    size = op(step, "Add", [size, op(step, "Cast", [op(step, "Equal", [size, zero], BOOL)], to=ir.DataType.INT64)])
    count = op(step, "Div", [op(step, "Sub", [op(step, "Add", [span, size]), one]), size])
    positions = op(step, "Add", [start, op(step, "Mul", [stride, arange(step, count)])])
    out = op(step, "Gather", [x, positions], x.type, axis=axis)
    out.shape = _unknown_along(x, axis)
    return out


def _unknown_along(x: ir.Value, axis: int) -> ir.Shape | None:
    if x.shape is None:
        return None
    return ir.Shape([None if d == axis else dim for d, dim in enumerate(x.shape)])


def arange(step: Step, count: ir.Value) -> ir.Value:
    """0..n-1 as int64 [n] for a run-time [1] int64 n >= 0, from opset-1 ops (module docstring)."""
    walker = step.walker
    some = op(step, "Not", [op(step, "Equal", [count, const1(step, 0)], BOOL)], BOOL)
    trips = op(step, "Reshape", [count, step.const(np.zeros([0], dtype=np.int64))])
    trips.shape = ir.Shape([])
    loop_branch = _Nodes(step)
    loop = loop_branch.add("Loop", [trips, step.const(np.asarray(True)), trips],
                           [ir.AttrGraph("body", _counting_body(step))], outputs=2)
    loop.outputs[0].type, loop.outputs[0].shape = INT64, ir.Shape([])
    # a scalar scan output stacks to [n] (onnx.reference gives [n, 1]): flattened either way
    numbers = loop_branch.add("Reshape", [loop.outputs[1], const1(step, -1)]).outputs[0]
    empty = _Nodes(step)
    nothing = empty.add("Tile", [const1(step, 0), count]).outputs[0]
    for value in (loop.outputs[1], numbers, nothing):
        value.type, value.shape = INT64, ir.Shape([None])
    graphs = [ir.Graph([], [out], nodes=nodes.nodes, name=walker.fresh_name("arange_branch"))
              for nodes, out in ((loop_branch, numbers), (empty, nothing))]
    out = op(step, "If", [some], INT64, then_branch=graphs[0], else_branch=graphs[1])
    out.shape = ir.Shape([None])
    return out


def _counting_body(step: Step) -> ir.Graph:
    """Loop body (i, cond, v) -> (cond, v, scan i)."""
    fresh = step.walker.fresh_name
    inputs = [ir.Value(name=fresh(n), type=t, shape=ir.Shape([]))
              for n, t in (("i", INT64), ("cond", BOOL), ("v", INT64))]
    body = _Nodes(step)
    outs = [body.add("Identity", [v]).outputs[0] for v in (inputs[1], inputs[2], inputs[0])]
    for out, source in zip(outs, (inputs[1], inputs[2], inputs[0]), strict=True):
        out.type, out.shape = source.type, ir.Shape([])
    return ir.Graph(inputs, outs, nodes=body.nodes, name=fresh("arange_body"))


class _Nodes:
    """Nodes of a subgraph, registered with the walker at the step's target (their semantics)."""

    def __init__(self, step: Step) -> None:
        self.step = step
        self.nodes: list[ir.Node] = []

    def add(self, op_type: str, inputs: list[ir.Value], attrs: list[ir.Attr] | None = None,
            outputs: int = 1) -> ir.Node:
        walker = self.step.walker
        node = ir.Node("", op_type, inputs, attrs or [], num_outputs=outputs,
                       name=walker.fresh_name(f"arange_{op_type}"))
        for out in node.outputs:
            out.name = walker.fresh_name(f"{node.name}_out")
        walker.register_new(node, self.step.to_version)
        self.nodes.append(node)
        return node

"""Pad: ``pads``/``value`` attributes -> inputs at 11; ``axes`` input at 18; ``wrap`` mode at 19.

10->11::  Pad(x, pads=p, value=v)      ->  Pad(x, Constant(p), Constant(v))
11->10::  Pad(x, pads, value)          ->  Pad(x, pads=folded, value=folded)
11->10::  Pad(x, pads, v) run-time (or a dtype Pad-2 lacks), mode constant (static rank r), for each axis d:
              Concat(Expand(v, shape with d: max(b, 0)), Slice(x, [max(-b, 0)], [e < 0 ? e : MAX], [d]),
                     Expand(v, shape with d: max(e, 0)), axis=d)          b, e = pads[d], pads[d + r]
11->10::  same, final target below 9: Tile(Reshape(v, [1] * r), block shape) for the Expand blocks,
              Where as 0/1 products and the Slice a Gather of a Loop-made arange (see dynamic.py)
18->17::  Pad(x, pads, value, axes)    ->  Pad(x, full-rank pads, value)   (static rank r):
              folded axes:   Gather(Concat(pads, [0]), Constant(index of each full position))
              run-time axes: MatMul(Reshape(pads, [2, k]), one-hot(axes) as [k, r]) flattened
                             (below opset 9: ReduceSum(Reshape(pads, [2, k, 1]) * one-hot, axis 1))
19->18::  Pad(x, pads, mode=wrap)      ->  per padded axis d (negative pads crop first):
              Gather(x, Constant(start + (arange(-b, D' + e) mod D')), axis=d)   (folded, static D)
              Gather(x, start + Mod(Range(-b, D' + e, 1), D'), axis=d)         (run-time, target >= 11)
              below 11: Range as a Loop-made arange, Mod as a - D' * (a / D') on a shifted >= 0
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

import unframe.version_converter.dynamic as dyn
from unframe.version_converter.context import Step
from unframe.version_converter.moves import drop_inputs_from, dtype_of, input_value, require_types
from unframe.version_converter.registry import adapter
from unframe.version_converter.types import check_types

INT64_MAX = np.iinfo(np.int64).max


@adapter("Pad", 10, 11)
def pad_10_11(node: ir.Node, step: Step) -> None:
    pads = step.attr("pads")
    value = step.attr("value", 0.0)
    dtype = dtype_of(step, node.inputs[0])
    step.drop_attr("pads")
    step.drop_attr("value")
    node.resize_inputs(3)
    node.replace_input_with(1, step.const(np.asarray(pads, dtype=np.int64)))
    if step.attr("mode", "constant") == "constant":
        node.replace_input_with(2, step.const(np.asarray(value, dtype=dtype)))
    else:
        node.resize_inputs(2)


def _attr_value(step: Step) -> tuple[bool, float | None]:
    """(True, value or None for the default) when the pad value fits Pad-2's float attribute."""
    if step.input(2) is None:
        return True, None
    value = step.fold(step.input(2))
    if value is None:
        return False, None
    if not value.size:
        return True, None
    scalar = value.reshape(-1)[0]
    # a double value float32 rounds would pad with a different number
    return np.isnan(scalar) or float(np.float32(scalar)) == float(scalar), float(scalar)


@adapter("Pad", 11, 10)
def pad_11_10(node: ir.Node, step: Step) -> None:
    pads = step.fold(step.input(1))
    value_ok, value = _attr_value(step)
    types_ok = step.to_schema is None or not check_types(node, step.to_schema)
    if pads is not None and value_ok and types_ok:
        drop_inputs_from(step, 1)
        step.set_attr("pads", ir.AttrInt64s("pads", [int(p) for p in pads.reshape(-1)]))
        if value is not None:
            step.set_attr("value", ir.AttrFloat32("value", value))
        return
    mode = step.attr("mode", "constant")
    if mode != "constant":
        require_types(step)
        step.refuse(f"mode={mode!r} with run-time pads: Pad before opset 11 takes them as an attribute")
    # no Pad is left: Slice, Concat and Expand/Tile take every dtype Pad-2 does not
    _runtime_constant_pad(node, step)


def _runtime_constant_pad(node: ir.Node, step: Step) -> None:
    x = node.inputs[0]
    rank = step.rank(x)
    if rank is None:
        step.refuse("run-time pads need a known input rank before opset 11")
    dtype = dtype_of(step, x)
    pads = dyn.as_int64(step, node.inputs[1])
    value = _scalar_value(step, dtype)
    if dyn.low(step):  # no Expand before opset 8: a [1, .., 1] value tiled to the block's shape
        value = dyn.op(step, "Reshape", [value, step.const(np.ones([rank], dtype=np.int64))], x.type)
    zero = dyn.const1(step, 0)
    dims: list[int | None] = [d if isinstance(d, int) else None for d in x.shape]
    out = x
    for d in range(rank):
        begin, end = (dyn.op(step, "Gather", [pads, dyn.const1(step, i)]) for i in (d, d + rank))
        begin_cut, end_cut = dyn.less(step, begin, zero), dyn.less(step, end, zero)
        start = dyn.where(step, begin_cut, dyn.op(step, "Neg", [begin]), zero)
        stop = dyn.where(step, end_cut, end, dyn.const1(step, INT64_MAX))
        dims[d] = None
        kept = step.op("Slice", [out, start, stop, dyn.const1(step, d)])
        kept.type, kept.shape = x.type, ir.Shape(dims)
        shape = dyn.op(step, "Shape", [kept])
        axis_mask = step.const(np.arange(rank) == d)
        fill = "Tile" if dyn.low(step) else "Expand"
        blocks = [dyn.op(step, fill, [value, dyn.where(step, axis_mask, dyn.where(step, cut, zero, n), shape)],
                         x.type) for cut, n in ((begin_cut, begin), (end_cut, end))]
        out = dyn.op(step, "Concat", [blocks[0], kept, blocks[1]], x.type, axis=d)
        out.shape = ir.Shape(dims)
    step.replace_with([out])


def _scalar_value(step: Step, dtype: np.dtype) -> ir.Value:
    value = step.input(2)
    if value is None:
        return step.const(np.zeros([], dtype=dtype))
    if step.rank(value) == 0:
        return value
    return dyn.op(step, "Reshape", [value, step.const(np.zeros([0], dtype=np.int64))], value.type)


@adapter("Pad", 18, 17)
def pad_18_17(node: ir.Node, step: Step) -> None:
    require_types(step)
    if step.input(3) is None:
        drop_inputs_from(step, 3)
        return
    rank = step.rank(node.inputs[0])
    if rank is None:
        step.refuse("the axes input needs a known input rank to expand pads below opset 18")
    axes, pads = step.fold(step.input(3)), step.fold(step.input(1))
    if axes is not None and pads is not None:
        full = step.const(_full_pads(axes, pads, rank))
    elif axes is not None:
        count = axes.size
        positions = _full_pads(axes, np.arange(2 * count), rank, fill=2 * count)
        padded = dyn.op(step, "Concat", [dyn.as_int64(step, node.inputs[1]), dyn.const1(step, 0)], axis=0)
        full = dyn.op(step, "Gather", [padded, step.const(positions)])
    else:
        full = _runtime_full_pads(node, step, rank)
    node.replace_input_with(1, full)
    drop_inputs_from(step, 3)


def _full_pads(axes: np.ndarray, pads: np.ndarray, rank: int, fill: int = 0) -> np.ndarray:
    full = np.full(2 * rank, fill, dtype=np.int64)
    axes = [int(a) % rank for a in axes.reshape(-1)]
    pads = pads.reshape(-1)
    for i, a in enumerate(axes):
        full[a] = pads[i]
        full[a + rank] = pads[i + len(axes)]
    return full


def _runtime_full_pads(node: ir.Node, step: Step, rank: int) -> ir.Value:
    """[begins; ends] (2 x k) @ one-hot(axes) (k x r), flattened: each axis' pads land at its place."""
    axes_value = node.inputs[3]
    count = None if axes_value.shape is None else axes_value.shape[0]
    if not isinstance(count, int):
        step.refuse("run-time Pad axes of unknown length can't be expanded to full-rank pads below opset 18")
    axes = dyn.wrap_negative(step, dyn.as_int64(step, axes_value), dyn.const1(step, rank))
    column = dyn.op(step, "Reshape", [axes, step.const(np.asarray([count, 1], dtype=np.int64))])
    hits = dyn.op(step, "Equal", [column, step.const(np.arange(rank, dtype=np.int64))], dyn.BOOL)
    one_hot = dyn.op(step, "Cast", [hits], to=ir.DataType.INT64)
    pads = dyn.as_int64(step, node.inputs[1])
    if dyn.low(step):  # MatMul takes no int64 before opset 9: the products summed over the k axes
        halves = dyn.op(step, "Reshape", [pads, step.const(np.asarray([2, count, 1], dtype=np.int64))])
        products = dyn.op(step, "Mul", [halves, one_hot])
        full = dyn.op(step, "ReduceSum", [products, dyn.const1(step, 1)], keepdims=0)
    else:
        halves = dyn.op(step, "Reshape", [pads, step.const(np.asarray([2, count], dtype=np.int64))])
        full = dyn.op(step, "MatMul", [halves, one_hot])
    return dyn.op(step, "Reshape", [full, dyn.const1(step, 2 * rank)])


@adapter("Pad", 19, 18)
def pad_19_18(node: ir.Node, step: Step) -> None:
    require_types(step)
    if step.attr("mode", "constant") != "wrap":
        return
    x = node.inputs[0]
    rank = step.rank(x)
    if rank is None:
        step.refuse("mode='wrap' needs a known input rank before opset 19")
    axes = _wrap_axes(step, rank)
    pads = step.fold(step.input(1))
    if pads is not None and all(isinstance(x.shape[a], int) for a in axes):
        _constant_wrap(node, step, axes, pads.reshape(-1))
    else:
        _runtime_wrap(node, step, axes)


def _wrap_axes(step: Step, rank: int) -> list[int]:
    if step.input(3) is None:
        return list(range(rank))
    axes = input_value(step, 3, "axes")
    return [int(a) % rank for a in axes.reshape(-1)]


def _wrap_indices(length: int, begin: int, end: int) -> np.ndarray | None:
    """The positions of x along one axis that wrap padding by (begin, end) reads; None when the
    cropped axis is empty but padding asks for elements."""
    start, stop = max(-begin, 0), length - max(-end, 0)
    kept = stop - start
    before, after = max(begin, 0), max(end, 0)
    if kept <= 0:
        return None if before + after else np.zeros([0], dtype=np.int64)
    return start + np.arange(-before, kept + after, dtype=np.int64) % kept


def _constant_wrap(node: ir.Node, step: Step, axes: list[int], pads: np.ndarray) -> None:
    x = node.inputs[0]
    dims = list(x.shape)
    plan = []
    for j, a in enumerate(axes):
        begin, end = int(pads[j]), int(pads[j + len(axes)])
        if begin == 0 and end == 0:
            continue
        indices = _wrap_indices(int(dims[a]), begin, end)
        if indices is None:
            step.refuse("mode='wrap' pads an axis the pads crop to nothing")
        plan.append((a, indices))
    out = x
    for a, indices in plan:
        dims[a] = len(indices)
        out = step.op("Gather", [out, step.const(indices)], {"axis": a})
        out.type, out.shape = x.type, ir.Shape(dims)
    if out is x:
        out = step.op("Identity", [x])
    step.replace_with([out])


def _runtime_wrap(node: ir.Node, step: Step, axes: list[int]) -> None:
    x = node.inputs[0]
    pads = dyn.as_int64(step, node.inputs[1])
    zero, one = dyn.const1(step, 0), dyn.const1(step, 1)
    scalar = step.const(np.zeros([0], dtype=np.int64))
    dims: list[int | None] = [d if isinstance(d, int) else None for d in x.shape]
    out = x
    for j, a in enumerate(axes):
        begin, end = (dyn.op(step, "Gather", [pads, dyn.const1(step, i)]) for i in (j, j + len(axes)))
        start = dyn.where(step, dyn.less(step, begin, zero), dyn.op(step, "Neg", [begin]), zero)
        cut_end = dyn.where(step, dyn.less(step, end, zero), dyn.op(step, "Neg", [end]), zero)
        kept = dyn.op(step, "Sub", [dyn.op(step, "Sub", [dyn.axis_length(step, out, a), cut_end]), start])
        before = dyn.where(step, dyn.less(step, begin, zero), zero, begin)
        after = dyn.where(step, dyn.less(step, end, zero), zero, end)
        # padding an axis cropped to nothing is an error: no division by zero, an index Gather rejects
        empty = dyn.less(step, kept, one)
        divisor = dyn.where(step, empty, one, kept)
        start = dyn.where(step, empty, dyn.const1(step, 1 << 62), start)
        if dyn.final_target(step) >= 11:
            low = dyn.op(step, "Reshape", [dyn.op(step, "Neg", [before]), scalar])
            high = dyn.op(step, "Reshape", [dyn.op(step, "Add", [kept, after]), scalar])
            span = dyn.op(step, "Range", [low, high, dyn.op(step, "Reshape", [one, scalar])])
            wrapped = dyn.op(step, "Mod", [span, divisor])
        else:
            wrapped = _wrapped_positions(step, before, kept, after, divisor)
        indices = dyn.op(step, "Add", [start, wrapped])
        dims[a] = None
        out = dyn.op(step, "Gather", [out, indices], x.type, axis=a)
        out.shape = ir.Shape(dims)
    step.replace_with([out])


def _wrapped_positions(step: Step, before: ir.Value, kept: ir.Value, after: ir.Value,
                       divisor: ir.Value) -> ir.Value:
    """(-b .. D' + e - 1) mod D' without Range (opset 11) or Mod (10): shifted by a multiple of D'
    that is at least b, every position is >= 0, where truncating division is floor division."""
    count = dyn.op(step, "Add", [dyn.op(step, "Add", [before, kept]), after])
    laps = dyn.op(step, "Div", [dyn.op(step, "Sub", [dyn.op(step, "Add", [before, divisor]), dyn.const1(step, 1)]),
                                divisor])
    shift = dyn.op(step, "Sub", [dyn.op(step, "Mul", [laps, divisor]), before])
    ahead = dyn.op(step, "Add", [dyn.arange(step, count), shift])
    return dyn.op(step, "Sub", [ahead, dyn.op(step, "Mul", [dyn.op(step, "Div", [ahead, divisor]), divisor])])

"""Reduce* ops: ``axes`` moved from an attribute to an input (ReduceSum at 13, the others at 18).

Upgrade::   y = ReduceMean_13(x, axes=[1])     ->  y = ReduceMean_18(x, Constant([1]))
Downgrade:: y = ReduceMean_18(x, axes_input)   ->  y = ReduceMean_13(x, axes=folded)   (an empty axes
            with noop_with_empty_axes=1 becomes Identity, without it a reduction over all axes)

Downgrade with runtime axes (data rank r and axes length k static), one axis at a time
(see ``dynaxes``), e.g. ReduceL2 with keepdims=0::

    y = ReduceL2_18(x, axes)
 -> s  = Mul(x, x)
    s2 = If(flags[2]) then ReduceSum(s,  axes=[2], keepdims=0) else Identity(s)
    s1 = If(flags[1]) then ReduceSum(s2, axes=[1], keepdims=0) else Identity(s2)
    s0 = If(flags[0]) then ReduceSum(s1, axes=[0], keepdims=0) else Identity(s1)
    y  = Sqrt(s0)

keepdims=0 goes from the last axis down, so removing an axis leaves the earlier indices as they were.
Sum/Max/Min/Prod/Mean/LogSumExp over a set of axes equal the same op over each axis in turn; the
others reduce with a Sum between an elementwise op before (Mul x,x or Abs) and after (Sqrt or Log).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

import unframe.version_converter.dynaxes as dynaxes
from unframe.version_converter.context import Step
from unframe.version_converter.moves import attr_to_input, drop_inputs_from, require_types
from unframe.version_converter.registry import adapter

MOVED_AT = {"ReduceSum": 13, **{op: 18 for op in (
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare")}}

# op -> (elementwise op before, per-axis reduction, elementwise op after)
DECOMPOSED = {
    "ReduceSumSquare": ("Square", "ReduceSum", None),
    "ReduceL1": ("Abs", "ReduceSum", None),
    "ReduceL2": ("Square", "ReduceSum", "Sqrt"),
    "ReduceLogSum": (None, "ReduceSum", "Log"),
}
# on integers these round at every axis (Mean, LogSumExp) or need a float op (Sqrt, Log)
FLOAT_ONLY = {"ReduceMean", "ReduceLogSumExp", "ReduceL2", "ReduceLogSum"}


def _upgrade(node: ir.Node, step: Step) -> None:
    attr_to_input(step, "axes", 1)


def _downgrade(node: ir.Node, step: Step) -> None:
    require_types(step)
    noop = step.attr("noop_with_empty_axes", 0)
    axes_input = step.input(1)
    axes = None if axes_input is None else step.fold(axes_input)
    if axes_input is not None and axes is None:
        length = dynaxes.static_length(axes_input)
        if length is None:
            step.refuse(f"input 'axes' must become an attribute at opset {step.to_version} but is neither a "
                        "constant nor of a static length")
        if length > 0:
            _runtime_axes(node, step, axes_input, length)
            return
        axes = np.zeros(0, np.int64)
    if axes is not None and axes.size == 0:
        axes = None
    if axes is None and noop:
        step.replace_with([step.op("Identity", [node.inputs[0]])])
        return
    step.drop_attr("noop_with_empty_axes")
    drop_inputs_from(step, 1)
    if axes is not None:
        step.set_attr("axes", ir.AttrInt64s("axes", [int(a) for a in axes.reshape(-1)]))


def _runtime_axes(node: ir.Node, step: Step, axes: ir.Value, count: int) -> None:
    x = node.inputs[0]
    rank = step.rank(x)
    if not rank:
        step.refuse(f"input 'axes' is not a constant and the data rank is {'unknown' if rank is None else 0}: "
                    f"its axes can't be applied one by one at opset {step.to_version}")
    if node.op_type in FLOAT_ONLY and (x.dtype is None or not x.dtype.is_floating_point()):
        step.refuse(f"input 'axes' is not a constant and {node.op_type} over integers can't be taken one "
                    "axis at a time")
    before, per_axis, after = DECOMPOSED.get(node.op_type, (None, node.op_type, None))
    keep = int(step.attr("keepdims", 1))
    flags = dynaxes.Flags(step, axes, rank, count)
    y = _elementwise(step, before, x)
    order = range(rank) if keep else range(rank - 1, -1, -1)
    y = flags.apply(y, order, lambda branch, v, j: branch.op(
        per_axis, [v], dynaxes.axis_attrs(j, keepdims=keep)))
    step.replace_with([_elementwise(step, after, y)])


def _elementwise(step: Step, op: str | None, x: ir.Value) -> ir.Value:
    if op is None:
        return x
    out = step.op("Mul", [x, x], version=dynaxes.BUILD_VERSION) if op == "Square" else \
        step.op(op, [x], version=dynaxes.BUILD_VERSION)
    out.type = x.type
    return out


for _op, _v in MOVED_AT.items():
    adapter(_op, _v - 1, _v, type_free=True)(_upgrade)
    adapter(_op, _v, _v - 1)(_downgrade)

"""Squeeze / Unsqueeze: ``axes`` attribute -> input at 13.

12->13::  Unsqueeze(x, axes=[0])   ->  Unsqueeze(x, Constant([0]))
13->12::  Unsqueeze(x, axes_input) ->  Unsqueeze(x, axes=folded)

13->12 with run-time axes (rank of x and length k of axes static), one axis at a time (see
``dynaxes``)::

    y = Squeeze_13(x, axes)            # x of rank 3
 -> y2 = If(flags[2]) then Squeeze(x,  axes=[2]) else Identity(x)
    y1 = If(flags[1]) then Squeeze(y2, axes=[1]) else Identity(y2)
    y  = If(flags[0]) then Squeeze(y1, axes=[0]) else Identity(y1)

    y = Unsqueeze_13(x, axes)          # output rank r + k; flags over the output positions
 -> y0 = If(flags[0]) then Unsqueeze(x, axes=[0]) else Identity(x)
    ...                                # up to position r + k - 1

Squeeze goes from the last axis down so that removing one leaves the earlier indices as they were;
Unsqueeze goes up, so that every earlier output position is in place when position j is inserted.
"""

from __future__ import annotations

import onnx_ir as ir

import unframe.version_converter.dynaxes as dynaxes
from unframe.version_converter.context import Step
from unframe.version_converter.moves import attr_to_input, input_to_attr, require_types
from unframe.version_converter.registry import adapter


def _upgrade(node: ir.Node, step: Step) -> None:
    attr_to_input(step, "axes", 1)


def _downgrade(node: ir.Node, step: Step) -> None:
    require_types(step)
    axes = step.input(1)
    if axes is not None and step.fold(axes) is None:
        _runtime_axes(node, step, axes)
        return
    present = input_to_attr(step, 1, "axes")
    if not present and node.op_type == "Unsqueeze":
        step.refuse("Unsqueeze without axes")


def _runtime_axes(node: ir.Node, step: Step, axes: ir.Value) -> None:
    count = dynaxes.static_length(axes)
    rank = step.rank(node.inputs[0])
    squeeze = node.op_type == "Squeeze"
    if rank is None or not count or (squeeze and rank == 0):
        what = "the data rank is unknown" if rank is None else \
            "the length of axes is not static and above 0" if not count else "the data is a scalar"
        step.refuse(f"input 'axes' must become an attribute at opset {step.to_version} but is not a constant, "
                    f"and {what}")
    positions = rank if squeeze else rank + count
    # a known dim other than 1 can't be squeezed (and Squeeze's shape inference rejects even an If
    # branch that would): the axes naming it fail at run time instead, as Squeeze_13 does
    dims = node.inputs[0].shape or ()
    never = [j for j, d in enumerate(dims) if squeeze and isinstance(d, int) and d != 1]
    if squeeze and len(never) == rank:
        step.refuse("Squeeze with run-time axes of a tensor with no dim that can be 1 always fails")
    flags = dynaxes.Flags(step, axes, positions, count, never)
    order = range(positions - 1, -1, -1) if squeeze else range(positions)
    step.replace_with([flags.apply(node.inputs[0], order, lambda branch, v, j: branch.op(
        node.op_type, [v], dynaxes.axis_attrs(j)))])


for _op in ("Squeeze", "Unsqueeze"):
    adapter(_op, 12, 13, type_free=True)(_upgrade)
    adapter(_op, 13, 12)(_downgrade)

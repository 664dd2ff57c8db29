"""Softmax, LogSoftmax, Hardmax across opset 13, where the axis semantics changed.

Before 13 the input is coerced to 2D at ``axis`` and normalized over the flattened trailing dims;
from 13 it is normalized over the one ``axis``. onnx's converter only renames the attribute, which
silently changes results when ``axis`` is not the last dimension.

Upgrade 12->13 (axis not last)::   y = Softmax_11(x, axis=a)
  ->  f = Flatten(x, axis=a); s = Softmax_13(f, axis=1); y = Reshape(s, Shape(x))
Downgrade 13->12 (axis not last):: y = Softmax_13(x, axis=a)
  ->  t = Transpose(x, perm moving a last); s = Softmax_11(t, axis=r-1); y = Transpose(s, inverse)
"""

from __future__ import annotations

import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.moves import require_types
from unframe.version_converter.registry import adapter

OPS = ("Softmax", "LogSoftmax", "Hardmax")


def _upgrade(node: ir.Node, step: Step) -> None:
    require_types(step)
    x = node.inputs[0]
    axis = step.attr("axis", 1)
    rank = step.rank(x)
    if rank is not None and axis % rank == rank - 1:
        step.set_attr("axis", rank - 1)
        return
    flat = step.op("Flatten", [x], {"axis": axis})
    norm = step.op(node.op_type, [flat], {"axis": 1})
    shape = step.op("Shape", [x])
    step.replace_with([step.op("Reshape", [norm, shape])])


def _downgrade(node: ir.Node, step: Step) -> None:
    require_types(step)
    x = node.inputs[0]
    axis = step.attr("axis", -1)
    rank = step.rank(x)
    if rank is None:
        if axis == -1:
            # the last axis is the same under both semantics; -1 is valid from opset 11
            if step.to_version >= 11:
                step.set_attr("axis", -1)
                return
        step.refuse(f"axis={axis} needs a known input rank to convert below opset 13")
    axis %= rank
    if axis == rank - 1:
        step.set_attr("axis", rank - 1)
        return
    perm = [d for d in range(rank) if d != axis] + [axis]
    inverse = [perm.index(d) for d in range(rank)]
    moved = step.op("Transpose", [x], {"perm": perm})
    norm = step.op(node.op_type, [moved], {"axis": rank - 1})
    step.replace_with([step.op("Transpose", [norm], {"perm": inverse})])


for _op in OPS:
    adapter(_op, 12, 13)(_upgrade)
    adapter(_op, 13, 12)(_downgrade)

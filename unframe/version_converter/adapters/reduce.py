"""Reduce* ops: ``axes`` moved from an attribute to an input (ReduceSum at 13, the others at 18).

Upgrade::   y = ReduceMean_13(x, axes=[1])     ->  y = ReduceMean_18(x, Constant([1]))
Downgrade:: y = ReduceMean_18(x, axes_input)   ->  y = ReduceMean_13(x, axes=folded)   (refused if
            axes is not foldable; an empty axes with noop_with_empty_axes=1 becomes Identity)
"""

from __future__ import annotations

import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.moves import attr_to_input, drop_inputs_from, input_value, require_types
from unframe.version_converter.registry import adapter

MOVED_AT = {"ReduceSum": 13, **{op: 18 for op in (
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare")}}


def _upgrade(node: ir.Node, step: Step) -> None:
    attr_to_input(step, "axes", 1)


def _downgrade(node: ir.Node, step: Step) -> None:
    require_types(step)
    noop = step.attr("noop_with_empty_axes", 0)
    axes = input_value(step, 1, "axes")
    if axes is not None and axes.size == 0:
        axes = None
    if axes is None and noop:
        step.replace_with([step.op("Identity", [node.inputs[0]])])
        return
    step.drop_attr("noop_with_empty_axes")
    drop_inputs_from(step, 1)
    if axes is not None:
        step.set_attr("axes", ir.AttrInt64s("axes", [int(a) for a in axes.reshape(-1)]))


for _op, _v in MOVED_AT.items():
    adapter(_op, _v - 1, _v)(_upgrade)
    adapter(_op, _v, _v - 1)(_downgrade)

"""Split: ``split`` attribute -> input at 13; ``num_outputs`` attribute at 18.

12->13::  Split(x, split=[2,3])            ->  Split(x, Constant([2,3]))
13->12::  Split(x, split_input)            ->  Split(x, split=folded)   (refused if not foldable)
17->18::  Split(x) with n outputs          ->  Split(x, num_outputs=n)  (18 needs one of the two)
18->17::  Split(x, num_outputs=n)          ->  Split(x) when the axis divides evenly, else
                                               Split(x, Constant(sizes)) from the static dim
"""

from __future__ import annotations

import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.moves import attr_to_input, input_to_attr, require_types
from unframe.version_converter.registry import adapter


@adapter("Split", 12, 13)
def split_12_13(node: ir.Node, step: Step) -> None:
    attr_to_input(step, "split", 1)


@adapter("Split", 13, 12)
def split_13_12(node: ir.Node, step: Step) -> None:
    require_types(step)
    input_to_attr(step, 1, "split")


@adapter("Split", 17, 18)
def split_17_18(node: ir.Node, step: Step) -> None:
    if step.input(1) is None:
        step.set_attr("num_outputs", len(node.outputs))


@adapter("Split", 18, 17)
def split_18_17(node: ir.Node, step: Step) -> None:
    require_types(step)
    n = step.attr("num_outputs")
    if n is None:
        return
    shape = step.static_shape(node.inputs[0])
    axis = step.attr("axis", 0)
    if shape is not None and shape[axis] % n != 0:
        size = -(-shape[axis] // n)
        sizes, left = [], shape[axis]
        for _ in range(n):  # chunks of ceil(d/n), the last smaller (zero-sized past the end)
            sizes.append(min(size, left))
            left -= sizes[-1]
        step.drop_attr("num_outputs")
        node.resize_inputs(2)
        node.replace_input_with(1, step.const(sizes, "int64"))
        return
    step.drop_attr("num_outputs")  # even split: opset 17 splits equally without ``split``

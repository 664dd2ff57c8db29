"""Split: ``split`` attribute -> input at 13; ``num_outputs`` attribute at 18.

12->13::  Split(x, split=[2,3])            ->  Split(x, Constant([2,3]))
13->12::  Split(x, split_input)            ->  Split(x, split=folded)   (outputs' shapes set from x's)
13->12::  Split(x, split) run-time, n outs ->  Slice(x, [o_i], [o_i + s_i], [axis]) for each output i,
                                               s_i = Gather(split, [i]), o_0 = [0], o_i+1 = o_i + s_i
                                               (Slice-10 takes run-time starts/ends; at opset 9 the
                                               Slice adapter makes each a Compress)
13->12::  same, final target below 9           ->  Gather(x, o_i + arange(s_i), axis) for each output i
                                               (arange from a Loop, see dynamic.py)
17->18::  Split(x) with n outputs          ->  Split(x, num_outputs=n)  (18 needs one of the two)
18->17::  Split(x, num_outputs=n)          ->  Split(x) when the axis divides evenly, else
                                               Split(x, Constant(sizes)) from the static dim
"""

from __future__ import annotations

import onnx_ir as ir

import unframe.version_converter.dynamic as dyn
from unframe.version_converter.context import Step
from unframe.version_converter.moves import attr_to_input, input_to_attr, require_types
from unframe.version_converter.registry import adapter


@adapter("Split", 12, 13, type_free=True)
def split_12_13(node: ir.Node, step: Step) -> None:
    attr_to_input(step, "split", 1)


@adapter("Split", 13, 12)
def split_13_12(node: ir.Node, step: Step) -> None:
    require_types(step)
    sizes = step.fold(step.input(1))
    if step.input(1) is not None and sizes is None:
        _runtime_split(node, step)
        return
    input_to_attr(step, 1, "split")
    if sizes is not None:
        _set_output_shapes(node, step, [int(v) for v in sizes.reshape(-1)])


def _set_output_shapes(node: ir.Node, step: Step, sizes: list[int]) -> None:
    """Inference leaves the outputs shapeless when ``split`` is computed (e.g. from Shape); later
    steps of the outputs' users need at least their rank (negative axes below opset 11)."""
    x = node.inputs[0]
    if x.shape is None or len(sizes) != len(node.outputs):
        return
    axis = step.attr("axis", 0) % len(x.shape)
    for out, size in zip(node.outputs, sizes, strict=True):
        if out.shape is None:
            dims = list(x.shape)
            dims[axis] = size
            out.shape = ir.Shape(dims)


def _runtime_split(node: ir.Node, step: Step) -> None:
    x, sizes = node.inputs[0], node.inputs[1]
    axis = step.attr("axis", 0)
    rank = step.rank(x)
    if axis < 0 and rank is None:
        step.refuse("a negative axis needs a known input rank below opset 11")
    axis = axis % rank if axis < 0 else axis
    axes = dyn.const1(step, axis)
    start = dyn.const1(step, 0)
    parts = []
    for i in range(len(node.outputs)):
        size = dyn.op(step, "Gather", [sizes, dyn.const1(step, i)])
        end = dyn.op(step, "Add", [start, size])
        if dyn.low(step):  # no run-time Slice: the part's positions are gathered
            positions = dyn.op(step, "Add", [start, dyn.arange(step, size)])
            part = dyn.op(step, "Gather", [x, positions], x.type, axis=axis)
        else:
            part = step.op("Slice", [x, start, end, axes])
            part.type = x.type
        parts.append(part)
        start = end
    step.replace_with(parts)


@adapter("Split", 17, 18, type_free=True)
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

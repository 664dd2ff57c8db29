"""Single-op changes: Shape start/end, Reshape allowzero, GridSample modes, DFT axis, Gemm's optional
C, Constant's typed value attributes, ArgMax/ArgMin select_last_index.

Shape 15->14::      Shape(x, start=s, end=e)     ->  Slice(Shape(x), [s], [e])
Reshape 14->13::    Reshape(x, c, allowzero=1)   ->  Reshape(x, c)        (c constant with no 0)
GridSample 19<->20:: mode bilinear/bicubic  <->  linear/cubic
DFT 19->20::        DFT(x, n, axis=a)            ->  DFT(x, n, Constant(a))
DFT 20->19::        DFT(x, n, axis_input)        ->  DFT(x, n, axis=folded)
Gemm 11->10::       Gemm(a, b)                   ->  Gemm(a, b, Constant(0))
Constant 12->11::   Constant(value_floats=[..])  ->  Constant(value=tensor)
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.generic import generic_step
from unframe.version_converter.moves import drop_inputs_from, dtype_of, input_value, require_types
from unframe.version_converter.registry import adapter

INT64_MAX = np.iinfo(np.int64).max


@adapter("Shape", 15, 14)
def shape_15_14(node: ir.Node, step: Step) -> None:
    start, end = step.attr("start", 0), step.attr("end")
    if start == 0 and end is None:
        generic_step(node, step)
        return
    require_types(step)
    step.drop_attr("start")
    step.drop_attr("end")
    full = step.op("Shape", [node.inputs[0]])
    begin = step.const(np.asarray([start], dtype=np.int64))
    stop = step.const(np.asarray([INT64_MAX if end is None else end], dtype=np.int64))
    step.replace_with([step.op("Slice", [full, begin, stop])])


@adapter("Reshape", 14, 13)
def reshape_14_13(node: ir.Node, step: Step) -> None:
    if step.attr("allowzero", 0):
        shape = step.fold(step.input(1))
        if shape is None or np.any(shape == 0):
            step.refuse("allowzero=1 with a shape that may hold 0 does not exist before opset 14")
        step.drop_attr("allowzero")
    generic_step(node, step)


_MODES_20 = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest"}


@adapter("GridSample", 19, 20)
def grid_sample_19_20(node: ir.Node, step: Step) -> None:
    mode = step.attr("mode", "bilinear")
    generic_step(node, step, semantics_handled=True)
    step.set_attr("mode", _MODES_20[mode])


@adapter("GridSample", 20, 19)
def grid_sample_20_19(node: ir.Node, step: Step) -> None:
    mode = step.attr("mode", "linear")
    back = {v: k for k, v in _MODES_20.items()}
    if mode not in back:
        step.refuse(f"mode={mode!r} does not exist before opset 20")
    if step.rank(node.inputs[0]) not in (None, 4):
        step.refuse("GridSample before opset 20 only takes 4-D inputs")
    generic_step(node, step, semantics_handled=True)
    step.set_attr("mode", back[mode])


@adapter("DFT", 19, 20)
def dft_19_20(node: ir.Node, step: Step) -> None:
    axis = step.drop_attr("axis")
    axis = 1 if axis is None else axis
    node.resize_inputs(3)
    node.replace_input_with(2, step.const(np.asarray(axis, dtype=np.int64)))


@adapter("DFT", 20, 19)
def dft_20_19(node: ir.Node, step: Step) -> None:
    axis = input_value(step, 2, "axis")
    axis_value = -2 if axis is None else int(axis.reshape(-1)[0])
    require_types(step)
    drop_inputs_from(step, 2)
    n = len(node.inputs)
    while n > 1 and node.inputs[n - 1] is None:
        n -= 1
    node.resize_inputs(n)
    step.set_attr("axis", ir.AttrInt64("axis", axis_value))


@adapter("Gemm", 11, 10)
def gemm_11_10(node: ir.Node, step: Step) -> None:
    if step.input(2) is None:
        dtype = dtype_of(step, node.inputs[0])
        node.resize_inputs(3)
        node.replace_input_with(2, step.const(np.zeros([], dtype=dtype)))
    generic_step(node, step)


_TYPED_VALUES = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                 "value_ints": np.int64, "value_string": object, "value_strings": object}


@adapter("Constant", 12, 11)
def constant_12_11(node: ir.Node, step: Step) -> None:
    for name, dtype in _TYPED_VALUES.items():
        if name in node.attributes:
            value = step.drop_attr(name)
            array = np.asarray(value, dtype=dtype)
            step.set_attr("value", ir.AttrTensor("value", ir.tensor(array)))
    generic_step(node, step)


def _argext_select_last(node: ir.Node, step: Step) -> None:
    """ArgMax(x, select_last_index=1) -> d - 1 - ArgMax(reverse(x, axis)) for a static axis length."""
    if not step.attr("select_last_index", 0):
        generic_step(node, step)
        return
    x = node.inputs[0]
    shape = step.static_shape(x)
    axis = step.attr("axis", 0)
    keepdims = step.attr("keepdims", 1)
    if shape is None:
        step.refuse("select_last_index=1 needs a static input shape before opset 12")
    axis %= len(shape)
    require_types(step)
    length = shape[axis]
    index = step.const(np.arange(length - 1, -1, -1, dtype=np.int64))
    flipped = step.op("Gather", [x, index], {"axis": axis})
    found = step.op(node.op_type, [flipped], {"axis": axis, "keepdims": keepdims})
    last = step.op("Sub", [step.const(np.asarray(length - 1, dtype=np.int64)), found])
    step.replace_with([last])


for _op in ("ArgMax", "ArgMin"):
    adapter(_op, 12, 11)(_argext_select_last)

"""Single-op changes: Shape start/end, Reshape allowzero, GridSample modes, DFT axis, Gemm's optional
C, Constant's typed value attributes, ArgMax/ArgMin select_last_index.

Shape 15->14::      Shape(x, start=s, end=e)     ->  Slice(Shape(x), [s], [e])
Reshape 14->13::    Reshape(x, c, allowzero=1)   ->  Reshape(x, c)        (c constant with no 0)
                    Reshape(x, c, allowzero=1)   ->  Constant(empty, shape c)   (c constant with a 0)
                    Reshape(x, s, allowzero=1)   ->  Tile(zeros([1]*k), s)      (x static and empty)
                    Reshape(x, s, allowzero=1)   ->  If(ReduceProd(s) == 0,            (x of unknown size,
                                                        {Tile(zeros([1]*k), s)},         s of length k)
                                                        {Reshape(x, s)})
GridSample 19<->20:: mode bilinear/bicubic  <->  linear/cubic
DFT 19->20::        DFT(x, n, axis=a)            ->  DFT(x, n, Constant(a))
DFT 20->19::        DFT(x, n, axis_input)        ->  DFT(x, n, axis=folded)
DFT 20->19::        DFT(x, n, axis) run-time     ->  If(axis' == 0, {DFT(x, n, axis=0)}, If(axis' == 1, ...
                                                     {DFT(x, n, axis=r-2)}))   axis' = axis < 0 ? axis + r : axis
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
    """allowzero=1: a constant shape without 0 reads the same at 13. One with a 0 (a literal empty
    dimension, which Reshape-13 would read as "copy") gives a tensor with no elements, so the result
    is that empty constant; a -1 beside a 0 is invalid with allowzero=1 and stays refused."""
    if step.attr("allowzero", 0):
        shape = step.fold(step.input(1))
        if shape is None:
            _allowzero_runtime_shape(node, step)
            return
        if np.any(shape < 0) and np.any(shape == 0):
            step.refuse("allowzero=1 with a shape that may hold 0 does not exist before opset 14")
        if np.any(shape == 0):
            require_types(step)
            empty = step.const(np.zeros([int(d) for d in shape], dtype=dtype_of(step, node.inputs[0])))
            step.replace_with([step.op("Identity", [empty])])
            return
        step.drop_attr("allowzero")
    generic_step(node, step)


def _allowzero_runtime_shape(node: ir.Node, step: Step) -> None:
    """A run-time shape with allowzero=1. Data with elements can only take a shape without 0 (so
    allowzero changes nothing); data with none gives a tensor with no elements of that shape, which
    Tile(zeros([1] * k), shape) is (Tile takes run-time repeats). When the data's size is known
    statically that decides it; otherwise (symbolic dimensions: HF models' views) the shape itself
    does at run time: a 0 in it means empty data, so If(prod(shape) == 0) picks the Tile."""
    data = step.static_shape(node.inputs[0])
    length = step.static_shape(node.inputs[1])
    if data is not None and int(np.prod(data)):
        require_types(step)
        step.drop_attr("allowzero")
        generic_step(node, step)
        return
    if length is None or len(length) != 1:
        step.refuse("allowzero=1 with a run-time shape needs the data's static shape or the shape's "
                    "length before opset 14")
    require_types(step)
    zeros = step.const(np.zeros([1] * length[0], dtype=dtype_of(step, node.inputs[0])))
    if data is not None:  # statically empty
        step.replace_with([step.op("Tile", [zeros, node.inputs[1]])])
        return
    shape = node.inputs[1]
    empty = step.op("Equal", [step.op("ReduceProd", [shape], {"keepdims": 0}),
                              step.const(np.asarray(0, dtype=np.int64))])
    tile = _walker_node(node, step, "Tile", [zeros, shape], [])
    reshape = _walker_node(node, step, "Reshape", [node.inputs[0], shape], [])
    choose = _walker_node(node, step, "If", [empty], [ir.AttrGraph("then_branch", _branch(step, tile)),
                                                      ir.AttrGraph("else_branch", _branch(step, reshape))])
    step.graph.insert_before(node, choose)
    step.replace_with([choose.outputs[0]])


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
    require_types(step)
    if step.input(2) is not None and step.fold(step.input(2)) is None:
        _dft_axis_chain(node, step)
        return
    axis = input_value(step, 2, "axis")
    axis_value = -2 if axis is None else int(axis.reshape(-1)[0])
    drop_inputs_from(step, 2)
    n = len(node.inputs)
    while n > 1 and node.inputs[n - 1] is None:
        n -= 1
    node.resize_inputs(n)
    step.set_attr("axis", ir.AttrInt64("axis", axis_value))


def _dft_axis_chain(node: ir.Node, step: Step) -> None:
    """A run-time axis takes one of the r - 1 valid values: If(axis == 0, DFT(axis=0), If(axis == 1, ...)),
    the last else branch being DFT(axis=r-2)."""
    x = node.inputs[0]
    rank = step.rank(x)
    if rank is None:
        step.refuse("a run-time DFT axis needs a known input rank before opset 20")
    axis = step.op("Cast", [node.inputs[2]], {"to": ir.DataType.INT64})
    negative = step.op("Less", [axis, step.const(np.asarray(0, dtype=np.int64))])
    wrapped = step.op("Add", [axis, step.const(np.asarray(rank, dtype=np.int64))])
    axis = step.op("Where", [negative, wrapped, axis])
    kept = [a for a in node.attributes.values() if a.name != "axis"]
    top = _walker_node(node, step, "DFT", list(node.inputs[:2]), [*kept, ir.AttrInt64("axis", rank - 2)])
    for candidate in range(rank - 3, -1, -1):
        cond = step.op("Equal", [axis, step.const(np.asarray(candidate, dtype=np.int64))])
        then = _walker_node(node, step, "DFT", list(node.inputs[:2]), [*kept, ir.AttrInt64("axis", candidate)])
        top = _walker_node(node, step, "If", [cond], [ir.AttrGraph("then_branch", _branch(step, then)),
                                                    ir.AttrGraph("else_branch", _branch(step, top))])
    step.graph.insert_before(node, top)
    step.replace_with([top.outputs[0]])


def _walker_node(node: ir.Node, step: Step, op: str, inputs: list[ir.Value | None], attrs: list[ir.Attr]) -> ir.Node:
    """A node of a branch (a DFT of one axis, a Reshape or Tile), or the If choosing between two;
    registered with the walker at the step's target version before the walk reaches the branches
    it sits in."""
    while inputs and inputs[-1] is None:
        inputs.pop()
    made = ir.Node("", op, inputs, attrs, name=step.walker.fresh_name(f"{node.name or node.op_type}_{op}"))
    out = made.outputs[0]
    out.name = step.walker.fresh_name(f"{made.name}_out")
    out.type = node.outputs[0].type  # each branch's shape depends on its axis (onesided halves it)
    step.walker.register_new(made, step.to_version)
    return made


def _branch(step: Step, only: ir.Node) -> ir.Graph:
    return ir.Graph([], [only.outputs[0]], nodes=[only], name=step.walker.fresh_name(f"{only.op_type}_branch"))


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

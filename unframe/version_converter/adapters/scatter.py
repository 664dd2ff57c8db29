"""Scatter (removed at 11) and ScatterElements (introduced at 11): the same computation.

Scatter 10->11::          Scatter(data, idx, upd, axis=a)          ->  ScatterElements(..., axis=a)
ScatterElements 11->10::  ScatterElements(data, idx, upd, axis=a)  ->  Scatter(..., axis=a)

ScatterND / ScatterElements ``reduction`` (add/mul at 16, max/min at 18): 16->15 (add, mul) and
18->17 (max, min) apply the updates one at a time in a Loop, so duplicate indices combine exactly
as the spec's sequential loop does::

    ScatterND(data, indices[..., k], updates, reduction=f)
->  idx2d = Flatten(indices, q-1);  upd2d = Flatten(updates, q-1)
    out = Loop(Gather(Shape(idx2d), 0), "", data) body(i, cond, acc):
        row = Reshape(i, [1]);  at = Gather(idx2d, row)                  # [1, k]
        cur = GatherND(acc, at)
        acc' = ScatterND(acc, at, f(cur, Reshape(Gather(upd2d, row), Shape(cur))))

    ScatterElements(data, indices, updates, axis=a, reduction=f)
->  the same loop on ScatterND(data, nd, updates, reduction=f), nd[..., d] = the position's own
    coordinate on d != a and indices on a (needs a static indices shape)
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.generic import generic_step
from unframe.version_converter.moves import require_types
from unframe.version_converter.registry import adapter


@adapter("Scatter", 10, 11)
def scatter_10_11(node: ir.Node, step: Step) -> None:
    step.replace_with([step.op("ScatterElements", list(node.inputs), {"axis": step.attr("axis", 0)})])


@adapter("ScatterElements", 11, 10)
def scatter_elements_11_10(node: ir.Node, step: Step) -> None:
    axis = step.attr("axis", 0)
    if axis < 0:
        rank = step.rank(node.inputs[0])
        if rank is None:
            step.refuse("negative axis needs a known rank before opset 11")
        axis %= rank
    step.replace_with([step.op("Scatter", list(node.inputs), {"axis": axis})])


_COMBINE = {"add": "Add", "mul": "Mul", "max": "Max", "min": "Min"}


class _Body:
    """Builds a subgraph's nodes, each registered with the walker at the step's target opset."""

    def __init__(self, step: Step) -> None:
        self.step, self.nodes = step, []

    def op(self, op: str, inputs: list[ir.Value], attrs: dict | None = None) -> ir.Value:
        walker = self.step.walker
        node = ir.Node("", op, inputs, [ir.convenience.convert_attribute(k, v) for k, v in (attrs or {}).items()],
                       name=walker.fresh_name(f"scatter_loop_{op}"))
        node.outputs[0].name = walker.fresh_name(f"{node.name}_out")
        self.nodes.append(node)
        return node.outputs[0]

    def register(self) -> None:
        for node in self.nodes:
            self.step.walker.register_new(node, self.step.to_version)


def _loop_body(step: Step, data: ir.Value, idx2d: ir.Value, upd2d: ir.Value, combine: str) -> ir.Graph:
    fresh = step.walker.fresh_name
    i = ir.Value(name=fresh("i"), type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
    cond = ir.Value(name=fresh("cond"), type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    acc = ir.Value(name=fresh("acc"), type=data.type, shape=data.shape)
    body = _Body(step)
    one = body.op("Constant", [], {"value": ir.tensor(np.asarray([1], dtype=np.int64))})
    row = body.op("Reshape", [i, one])
    at = body.op("Gather", [idx2d, row], {"axis": 0})
    cur = body.op("GatherND", [acc, at])
    update = body.op("Reshape", [body.op("Gather", [upd2d, row], {"axis": 0}), body.op("Shape", [cur])])
    new = body.op(_COMBINE[combine], [cur, update])
    out = body.op("ScatterND", [acc, at, new])
    keep = body.op("Identity", [cond])
    graph = ir.Graph([i, cond, acc], [keep, out], nodes=body.nodes, name=fresh("scatter_loop_body"))
    body.register()
    return graph


def _scatter_loop(step: Step, data: ir.Value, indices: ir.Value, updates: ir.Value, combine: str) -> ir.Value:
    """ScatterND(data, indices, updates, reduction=combine) applied one index tuple at a time."""
    q = step.rank(indices)
    idx2d = step.op("Flatten", [indices], {"axis": q - 1})
    upd2d = step.op("Flatten", [updates], {"axis": q - 1})
    idx2d.type, upd2d.type = indices.type, updates.type
    count = step.op("Gather", [step.op("Shape", [idx2d]), step.const(np.asarray(0, dtype=np.int64))], {"axis": 0})
    body = _loop_body(step, data, idx2d, upd2d, combine)
    out = step.op("Loop", [count, None, data], [ir.AttrGraph("body", body)])
    out.type, out.shape = data.type, data.shape
    return out


def _element_indices(step: Step, indices: ir.Value, axis: int) -> ir.Value:
    """ScatterElements indices as ScatterND index tuples: [*S, r], the own coordinates but on ``axis``."""
    shape = step.static_shape(indices)
    rank = len(shape)
    if indices.dtype != ir.DataType.INT64:
        indices = step.op("Cast", [indices], {"to": ir.DataType.INT64})
    column = step.op("Reshape", [indices, step.const(np.asarray([*shape, 1], dtype=np.int64))])
    grid = np.indices(shape, dtype=np.int64)[..., None]
    parts = [column if d == axis else step.const(grid[d]) for d in range(rank)]
    out = step.op("Concat", parts, {"axis": rank})
    out.type, out.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([*shape, rank])
    return out


def _reduction_loop(node: ir.Node, step: Step, reductions: tuple[str, ...]) -> None:
    reduction = step.attr("reduction", "none")
    if reduction not in reductions:
        generic_step(node, step)
        return
    data, indices, updates = node.inputs[:3]
    if step.rank(indices) is None or data.type is None:
        step.refuse(f"{node.op_type} reduction={reduction!r} needs the rank of its indices before opset "
                    f"{step.from_version}")
    axis = 0
    if node.op_type == "ScatterElements":
        rank = step.rank(data)
        if step.static_shape(indices) is None or rank is None:
            step.refuse(f"ScatterElements reduction={reduction!r} needs a static indices shape before opset "
                        f"{step.from_version}")
        axis = step.attr("axis", 0) % rank
    require_types(step)
    if node.op_type == "ScatterElements":
        indices = _element_indices(step, indices, axis)
    step.replace_with([_scatter_loop(step, data, indices, updates, reduction)])


def scatter_reduction_16_15(node: ir.Node, step: Step) -> None:
    _reduction_loop(node, step, ("add", "mul"))


def scatter_reduction_18_17(node: ir.Node, step: Step) -> None:
    _reduction_loop(node, step, ("max", "min"))


for _op in ("ScatterND", "ScatterElements"):
    adapter(_op, 16, 15)(scatter_reduction_16_15)
    adapter(_op, 18, 17)(scatter_reduction_18_17)

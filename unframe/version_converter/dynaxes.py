"""Axes held in a runtime tensor, applied one axis at a time under a runtime flag.

Used by the downgrades that must turn an ``axes`` input into an attribute when the input is not a
constant (Reduce* 18->17 and ReduceSum / Squeeze / Unsqueeze 13->12). With the data rank ``r`` and the
axes length ``k`` static, each position ``j`` gets a runtime flag "j is one of the axes", and the op is
applied to that single axis inside an ``If``::

    y = ReduceSum_13(x, axes)                     # axes: int64[k], runtime values

    flags = axis_flags(axes, r, k)                # bool scalars, one per position 0..r-1
    y0 = If(flags[0]) then ReduceSum(x,  axes=[0]) else Identity(x)
    y1 = If(flags[1]) then ReduceSum(y0, axes=[1]) else Identity(y0)
    ...

Before opset 11, If's shape inference requires both branches to have the same shape, so there each
branch output goes through ``Reshape(v, Reshape(Shape(v), [-1]))`` with a runtime ``-1``: the identity,
with a shape length that inference can't know.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step

# the per-axis nodes are built in the attribute form (valid at 12: Reduce*-11/12, Squeeze-11) and the
# walker moves them to the final target from there
BUILD_VERSION = 12
# If-11 is the first whose shape inference accepts branches of different shapes
IF_MIXED_SHAPES = 11

INT64, BOOL = int(ir.DataType.INT64), int(ir.DataType.BOOL)

BranchFn = Callable[["Branch", ir.Value, int], ir.Value]


def static_length(value: ir.Value) -> int | None:
    """``k`` when ``value`` is a 1-D tensor of static length ``k``."""
    shape = value.shape
    if shape is None or len(shape) != 1 or not isinstance(shape[0], int):
        return None
    return shape[0]


class Branch:
    """The nodes of one If branch, registered with the walker at ``BUILD_VERSION``."""

    def __init__(self, step: Step, dtype: ir.TypeProtocol | None) -> None:
        self.step = step
        self.type = dtype
        self.nodes: list[ir.Node] = []

    def op(self, op_type: str, inputs: list[ir.Value], attrs: Iterable[ir.Attr] = ()) -> ir.Value:
        walker = self.step.walker
        node = ir.Node("", op_type, inputs, list(attrs), num_outputs=1,
                       name=walker.fresh_name(f"{self.step.node.name or self.step.node.op_type}_{op_type}"))
        node.outputs[0].name = walker.fresh_name(f"{node.name}_out")
        walker.register_new(node, BUILD_VERSION)
        self.nodes.append(node)
        return node.outputs[0]

    def graph(self, output: ir.Value, hide: ir.Value | None) -> ir.Graph:
        if hide is not None:
            output = self.op("Reshape", [output, self.op("Reshape", [self.op("Shape", [output]), hide])])
        elif output.producer() is None or output.producer() not in self.nodes:
            output = self.op("Identity", [output])  # a branch outputs its own value, not an outer one
        output.type = self.type
        return ir.Graph([], [output], nodes=self.nodes, name=self.step.walker.fresh_name("branch"))


class Flags:
    """Per position ``j`` of ``rank``: a bool scalar "j is in axes" (negative axes count from the end).

    A runtime error (an out-of-range Gather) unless the axes are ``count`` distinct values in
    [-rank, rank-1] and none is in ``never``, so duplicated, out-of-range or impossible axes can't
    silently give another result. Positions in ``never`` get no If."""

    def __init__(self, step: Step, axes: ir.Value, rank: int, count: int, never: Iterable[int] = ()) -> None:
        self.step = step
        self.never = set(never)
        op = _typed(step)
        mask = _mask(step, axes, rank, count)
        self.zero = self._guard(mask, rank, count)
        checked = op("Add", [mask, self.zero], ir.DataType.INT64)
        self.flags = [op("Cast", [op("Gather", [checked, step.const(np.int64(j))], ir.DataType.INT64, axis=0)],
                         ir.DataType.BOOL, to=BOOL) for j in range(rank)]
        self.hide: ir.Value | None = None
        if step.walker.targets.get("", 0) < IF_MIXED_SHAPES:
            # a run-time -1 (from the guard), so that shape inference can't see through the Reshape
            self.hide = op("Sub", [self.zero, step.const(np.ones(1, np.int64))], ir.DataType.INT64)

    def _guard(self, mask: ir.Value, rank: int, count: int) -> ir.Value:
        """int64[1] zero; an out-of-range Gather when fewer than ``count`` positions are hit (a duplicate
        or out-of-range axis) or a position in ``never`` is."""
        step, op = self.step, _typed(self.step)
        found = op("ReduceSum", [mask], ir.DataType.INT64, axes=[0], keepdims=1)
        missing = op("Sub", [step.const(np.array([count], np.int64)), found], ir.DataType.INT64)
        if self.never:
            banned = step.const(np.array([j in self.never for j in range(rank)], np.int64))
            hits_banned = op("ReduceSum", [op("Mul", [mask, banned], ir.DataType.INT64)], ir.DataType.INT64,
                             axes=[0], keepdims=1)
            missing = op("Add", [missing, hits_banned], ir.DataType.INT64)
        return op("Gather", [step.const(np.zeros(1, np.int64)), missing], ir.DataType.INT64, axis=0)

    def apply(self, x: ir.Value, order: Iterable[int], then: BranchFn) -> ir.Value:
        """``x`` through ``then(branch, y, j)`` for each flagged position ``j``, in ``order``."""
        step, y = self.step, x
        for j in order:
            if j in self.never:
                continue
            yes, no = Branch(step, x.type), Branch(step, x.type)
            then_graph = yes.graph(then(yes, y, j), self.hide)
            else_graph = no.graph(y, self.hide)
            y = step.op("If", [self.flags[j]], [ir.AttrGraph("then_branch", then_graph),
                                               ir.AttrGraph("else_branch", else_graph)], version=BUILD_VERSION)
            y.type = x.type
        return y


def _mask(step: Step, axes: ir.Value, rank: int, count: int) -> ir.Value:
    """int64[rank]: 1 where the position is one of the axes. Equal and Or on int64/bool, so that it is
    valid down to opset 7 (Less takes no integers before 9)."""
    op = _typed(step)
    positions = np.arange(rank, dtype=np.int64)[None, :]
    column = op("Reshape", [axes, step.const(np.array([count, 1], np.int64))], ir.DataType.INT64)
    hits = op("Or", [op("Equal", [column, step.const(positions)], ir.DataType.BOOL),
                     op("Equal", [column, step.const(positions - rank)], ir.DataType.BOOL)], ir.DataType.BOOL)
    per_position = op("ReduceSum", [op("Cast", [hits], ir.DataType.INT64, to=INT64)],
                      ir.DataType.INT64, axes=[0], keepdims=0)
    # a duplicate counts once, so the guard sees fewer positions than axes
    return op("Cast", [op("Cast", [per_position], ir.DataType.BOOL, to=BOOL)], ir.DataType.INT64, to=INT64)


def _typed(step: Step) -> Callable[..., ir.Value]:
    def op(op_type: str, inputs: list[ir.Value], dtype: ir.DataType, **attrs: object) -> ir.Value:
        out = step.op(op_type, inputs, attrs, version=BUILD_VERSION)
        out.type = ir.TensorType(dtype)
        return out
    return op


def axis_attrs(axis: int, **ints: int) -> list[ir.Attr]:
    """``axes=[axis]`` plus the given int attributes, for a per-axis node in a branch."""
    return [ir.AttrInt64s("axes", [axis]), *(ir.AttrInt64(k, v) for k, v in ints.items())]

"""Clip: ``min``/``max`` attributes -> optional inputs at 11.

10->11::  Clip(x, min=a, max=b)     ->  Clip(x, Constant(a), Constant(b))   (scalars of x's dtype)
11->10::  Clip(x, lo, hi)           ->  Clip(x, min=lo, max=hi)             (lo, hi foldable)
11->10::  Clip(x, lo, hi)           ->  Min(Max(x, lo), hi)                 (lo or hi run-time)
          at a final target below 8 (no broadcasting) each bound is first brought to x's shape:
          lo -> Tile(Reshape(lo, [1]*rank), Shape(x))
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.moves import drop_inputs_from, dtype_of, require_types
from unframe.version_converter.registry import adapter


@adapter("Clip", 10, 11)
def clip_10_11(node: ir.Node, step: Step) -> None:
    lo, hi = step.attr("min"), step.attr("max")
    if lo is None and hi is None:
        return
    dtype = dtype_of(step, node.inputs[0])
    step.drop_attr("min")
    step.drop_attr("max")
    node.resize_inputs(3)
    if lo is not None:
        node.replace_input_with(1, step.const(np.asarray(lo, dtype=dtype)))
    if hi is not None:
        node.replace_input_with(2, step.const(np.asarray(hi, dtype=dtype)))
    drop_trailing(node)


def drop_trailing(node: ir.Node) -> None:
    n = len(node.inputs)
    while n > 1 and node.inputs[n - 1] is None:
        n -= 1
    node.resize_inputs(n)


def _attr_bound(step: Step, index: int) -> tuple[bool, float | None]:
    """(True, value or None when absent) when the bound fits Clip-6's float attribute exactly."""
    value = step.input(index)
    if value is None:
        return True, None
    folded = step.fold(value)
    if folded is None or folded.size != 1:
        return False, None
    scalar = folded.reshape(-1)[0]
    # a double bound that float32 rounds would clip at a different value
    if not np.isnan(scalar) and float(np.float32(scalar)) != float(scalar):
        return False, None
    return True, float(scalar)


@adapter("Clip", 11, 10)
def clip_11_10(node: ir.Node, step: Step) -> None:
    require_types(step)
    (lo_ok, lo), (hi_ok, hi) = _attr_bound(step, 1), _attr_bound(step, 2)
    if not (lo_ok and hi_ok):
        _clip_as_max_min(node, step)
        return
    drop_inputs_from(step, 1)
    if lo is not None:
        step.set_attr("min", ir.AttrFloat32("min", lo))
    if hi is not None:
        step.set_attr("max", ir.AttrFloat32("max", hi))


def _clip_as_max_min(node: ir.Node, step: Step) -> None:
    # Max first, then Min: when lo > hi every element becomes hi, as Clip-11+ specifies
    x = node.inputs[0]
    no_broadcast = step.walker.targets.get("", step.to_version) < 8
    rank = step.rank(x)
    if no_broadcast and rank is None:
        step.refuse("run-time min/max need a known input rank below opset 8 (Max/Min do not broadcast)")
    out = x
    for index, op in ((1, "Max"), (2, "Min")):
        bound = step.input(index)
        if bound is None:
            continue
        bound = _scalar(step, bound)
        if no_broadcast and rank:
            bound = _to_shape_of(step, bound, x, rank)
        out = step.op(op, [out, bound])
        out.type, out.shape = x.type, x.shape
    step.replace_with([out])


def _scalar(step: Step, bound: ir.Value) -> ir.Value:
    """The bound as a rank-0 tensor (runtimes accept a 1-element tensor, which would broadcast)."""
    if step.rank(bound) == 0:
        return bound
    scalar = step.op("Reshape", [bound, step.const(np.zeros([0], dtype=np.int64))])
    scalar.type, scalar.shape = bound.type, ir.Shape([])
    return scalar


def _to_shape_of(step: Step, bound: ir.Value, x: ir.Value, rank: int) -> ir.Value:
    ones = step.op("Reshape", [bound, step.const(np.ones([rank], dtype=np.int64))])
    ones.type, ones.shape = bound.type, ir.Shape([1] * rank)
    shape = step.op("Shape", [x])
    shape.type, shape.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([rank])
    tiled = step.op("Tile", [ones, shape])
    tiled.type, tiled.shape = x.type, x.shape
    return tiled

"""Clip: ``min``/``max`` attributes -> optional inputs at 11.

10->11::  Clip(x, min=a, max=b)     ->  Clip(x, Constant(a), Constant(b))   (scalars of x's dtype)
11->10::  Clip(x, lo, hi)           ->  Clip(x, min=lo, max=hi)             (refused if not foldable)
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.moves import drop_inputs_from, dtype_of, input_value, require_types
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


@adapter("Clip", 11, 10)
def clip_11_10(node: ir.Node, step: Step) -> None:
    require_types(step)
    lo = input_value(step, 1, "min")
    hi = input_value(step, 2, "max")
    drop_inputs_from(step, 1)
    if lo is not None:
        step.set_attr("min", ir.AttrFloat32("min", float(lo.reshape(-1)[0])))
    if hi is not None:
        step.set_attr("max", ir.AttrFloat32("max", float(hi.reshape(-1)[0])))

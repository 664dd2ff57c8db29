"""Slice: ``starts``/``ends``/``axes`` attributes -> inputs (plus ``steps``) at 10.

9->10::  Slice(x, starts=s, ends=e, axes=a)   ->  Slice(x, Constant(s), Constant(e), Constant(a))
10->9::  Slice(x, s, e, a, steps)             ->  Slice(x, starts=, ends=, axes=)  (steps must be 1)
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.moves import drop_inputs_from, input_value, require_types
from unframe.version_converter.registry import adapter


@adapter("Slice", 9, 10)
def slice_9_10(node: ir.Node, step: Step) -> None:
    starts, ends, axes = step.drop_attr("starts"), step.drop_attr("ends"), step.drop_attr("axes")
    node.resize_inputs(4 if axes is not None else 3)
    node.replace_input_with(1, step.const(np.asarray(starts, dtype=np.int64)))
    node.replace_input_with(2, step.const(np.asarray(ends, dtype=np.int64)))
    if axes is not None:
        node.replace_input_with(3, step.const(np.asarray(axes, dtype=np.int64)))


@adapter("Slice", 10, 9)
def slice_10_9(node: ir.Node, step: Step) -> None:
    require_types(step)
    starts = input_value(step, 1, "starts")
    ends = input_value(step, 2, "ends")
    axes = input_value(step, 3, "axes")
    steps = input_value(step, 4, "steps")
    if steps is not None and np.any(steps != 1):
        step.refuse("steps other than 1 do not exist before opset 10")
    if axes is not None and np.any(axes < 0):
        rank = step.rank(node.inputs[0])
        if rank is None:
            step.refuse("negative axes need a known input rank before opset 10")
        axes = axes % rank
    drop_inputs_from(step, 1)
    step.set_attr("starts", ir.AttrInt64s("starts", [int(v) for v in starts.reshape(-1)]))
    step.set_attr("ends", ir.AttrInt64s("ends", [int(v) for v in ends.reshape(-1)]))
    if axes is not None:
        step.set_attr("axes", ir.AttrInt64s("axes", [int(v) for v in axes.reshape(-1)]))

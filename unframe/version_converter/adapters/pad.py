"""Pad: ``pads``/``value`` attributes -> inputs at 11; ``axes`` input at 18; ``wrap`` mode at 19.

10->11::  Pad(x, pads=p, value=v)      ->  Pad(x, Constant(p), Constant(v))
11->10::  Pad(x, pads, value)          ->  Pad(x, pads=folded, value=folded)
18->17::  Pad(x, pads, value, axes)    ->  Pad(x, full-rank pads, value)   (axes folded, rank known)
19->18::  refused for mode="wrap"
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.moves import drop_inputs_from, dtype_of, input_value, require_types
from unframe.version_converter.registry import adapter


@adapter("Pad", 10, 11)
def pad_10_11(node: ir.Node, step: Step) -> None:
    pads = step.attr("pads")
    value = step.attr("value", 0.0)
    dtype = dtype_of(step, node.inputs[0])
    step.drop_attr("pads")
    step.drop_attr("value")
    node.resize_inputs(3)
    node.replace_input_with(1, step.const(np.asarray(pads, dtype=np.int64)))
    if step.attr("mode", "constant") == "constant":
        node.replace_input_with(2, step.const(np.asarray(value, dtype=dtype)))
    else:
        node.resize_inputs(2)


@adapter("Pad", 11, 10)
def pad_11_10(node: ir.Node, step: Step) -> None:
    require_types(step)
    pads = input_value(step, 1, "pads")
    value = input_value(step, 2, "constant_value")
    drop_inputs_from(step, 1)
    step.set_attr("pads", ir.AttrInt64s("pads", [int(p) for p in pads.reshape(-1)]))
    if value is not None and value.size:
        step.set_attr("value", ir.AttrFloat32("value", float(value.reshape(-1)[0])))


@adapter("Pad", 18, 17)
def pad_18_17(node: ir.Node, step: Step) -> None:
    require_types(step)
    if step.input(3) is None:
        drop_inputs_from(step, 3)
        return
    axes = input_value(step, 3, "axes")
    pads = input_value(step, 1, "pads")
    rank = step.rank(node.inputs[0])
    if rank is None:
        step.refuse("the axes input needs a known input rank to expand pads below opset 18")
    full = np.zeros(2 * rank, dtype=np.int64)
    axes = [int(a) % rank for a in axes.reshape(-1)]
    for i, a in enumerate(axes):
        full[a] = pads[i]
        full[a + rank] = pads[i + len(axes)]
    node.replace_input_with(1, step.const(full))
    drop_inputs_from(step, 3)


@adapter("Pad", 19, 18)
def pad_19_18(node: ir.Node, step: Step) -> None:
    require_types(step)
    if step.attr("mode", "constant") == "wrap":
        step.refuse("mode='wrap' does not exist before opset 19")

"""MaxPool / AveragePool: the ceil-mode window rule of opset 22.

Opset 22 added to both specs: "sliding windows that would start in the right padded region are
ignored" when ``ceil_mode=1`` (PyTorch's rule, which onnxruntime applies at every opset). Up to
opset 21 the spec's output size is plain ``ceil(...) + 1``, one window more on an axis where the
last window starts past the input, so a 22 graph carried down unchanged declares output shapes
the opset-21 spec contradicts (the checker refuses it).

22->21::  Pool(x, ceil_mode=1)  ->  Pool(x, ceil_mode=0, end pads widened where ceil mode kept a
          partial window), when the spatial sizes are known and the rule changes some axis.

On the axes where the rule drops a window, floor mode keeps exactly the windows opset 22 keeps
(same starts, same clipping). On the other axes, ceil mode's partial last window becomes a full
window over extra end padding: exact for MaxPool (padding never wins a max) and for AveragePool
with ``count_include_pad=0`` (padding isn't counted); refused for ``count_include_pad=1``, and
when the widened pad would reach the kernel size (onnxruntime rejects such pads).

Spatial sizes unknown: the node is left as it is; onnxruntime computes the same either way.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.moves import require_types
from unframe.version_converter.registry import adapter


def _axis_sizes(length: int, kernel: int, stride: int, dilation: int, begin: int, end: int
                ) -> tuple[int, int, int]:
    """(ceil-mode size by the opset-21 formula, by the opset-22 rule, floor-mode size)."""
    span = length + begin + end - (dilation * (kernel - 1) + 1)
    ceil_size = math.ceil(span / stride) + 1
    rule_size = ceil_size - 1 if (ceil_size - 1) * stride >= length + begin else ceil_size
    return ceil_size, rule_size, span // stride + 1


def _pool_22_21(node: ir.Node, step: Step) -> None:
    require_types(step)
    if not step.attr("ceil_mode", 0):
        return
    if step.attr("auto_pad", "NOTSET") not in ("NOTSET", ""):
        return  # the SAME/VALID formulas didn't change
    shape = step.static_shape(node.inputs[0])
    kernel = list(step.attr("kernel_shape") or [])
    if shape is None or not kernel:
        return
    spatial = list(shape[2:])
    n = len(spatial)
    strides = list(step.attr("strides") or [1] * n)
    dilations = list(step.attr("dilations") or [1] * n)
    pads = list(step.attr("pads") or [0] * (2 * n))
    sizes = [_axis_sizes(spatial[i], kernel[i], strides[i], dilations[i], pads[i], pads[n + i])
             for i in range(n)]
    if all(c == r for c, r, _ in sizes):
        return  # the rule drops nothing: ceil mode means the same at 21
    new_pads = list(pads)
    for i, (_, rule, floor) in enumerate(sizes):
        if floor == rule:
            continue
        # ceil mode kept a partial last window here: widen the end pad until floor mode keeps it
        new_pads[n + i] += (rule - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1 - (
            spatial[i] + pads[i] + pads[n + i])
        if node.op_type == "AveragePool" and step.attr("count_include_pad", 0):
            step.refuse("AveragePool with ceil_mode=1 and count_include_pad=1 where opset 22 drops "
                        "a window on one axis and keeps a partial one on another: opset 21 can't "
                        "express both")
        if new_pads[n + i] >= kernel[i]:
            step.refuse(f"{node.op_type} with ceil_mode=1: opset 21 would need an end pad of "
                        f"{new_pads[n + i]} on spatial axis {i}, not less than the kernel size")
    step.set_attr("ceil_mode", 0)
    if new_pads != pads:
        step.set_attr("pads", [int(p) for p in new_pads])


for _op in ("MaxPool", "AveragePool"):
    adapter(_op, 22, 21)(_pool_22_21)

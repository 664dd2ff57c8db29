"""MaxPool / AveragePool: ceil mode below opset 10, and the ceil-mode window rule of opset 22.

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

10->9::   Pool(x, ceil_mode=1)  ->  Pool(x, end pads widened as above): ceil_mode arrived at opset
          10; with SAME/VALID auto_pad it changes nothing and is dropped. Needs static spatial sizes.
"""

from __future__ import annotations

import math

import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.generic import generic_step
from unframe.version_converter.moves import require_types
from unframe.version_converter.registry import adapter


def _axis_sizes(length: int, kernel: int, stride: int, dilation: int, begin: int, end: int
                ) -> tuple[int, int, int]:
    """(ceil-mode size by the opset-21 formula, by the opset-22 rule, floor-mode size)."""
    span = length + begin + end - (dilation * (kernel - 1) + 1)
    ceil_size = math.ceil(span / stride) + 1
    rule_size = ceil_size - 1 if (ceil_size - 1) * stride >= length + begin else ceil_size
    return ceil_size, rule_size, span // stride + 1


def _spatial_sizes(value: ir.Value | None) -> list[int] | None:
    """The static spatial sizes (dims after N and C); the batch may be symbolic."""
    if value is None or value.shape is None or len(value.shape) < 3:
        return None
    dims = list(value.shape)[2:]
    return dims if all(isinstance(d, int) for d in dims) else None


def _floor_mode(node: ir.Node, step: Step, *, only_if_rule_differs: bool) -> None:
    """Rewrite ``ceil_mode=1`` as floor mode, widening end pads where ceil mode kept a partial
    window, so the output keeps the size onnxruntime computes (opset 22's rule)."""
    if not step.attr("ceil_mode", 0):
        return
    if step.attr("auto_pad", "NOTSET") not in ("NOTSET", ""):
        step.set_attr("ceil_mode", 0)  # SAME/VALID sizes are the same in both modes
        return
    spatial = _spatial_sizes(node.inputs[0])
    kernel = list(step.attr("kernel_shape") or [])
    if spatial is None or not kernel:
        if only_if_rule_differs:
            return  # onnxruntime computes the same at both opsets
        step.refuse(f"{node.op_type} with ceil_mode=1 needs static spatial sizes to be written in "
                    f"floor mode at opset {step.to_version}")
    n = len(spatial)
    strides = list(step.attr("strides") or [1] * n)
    dilations = list(step.attr("dilations") or [1] * n)
    pads = list(step.attr("pads") or [0] * (2 * n))
    sizes = [_axis_sizes(spatial[i], kernel[i], strides[i], dilations[i], pads[i], pads[n + i])
             for i in range(n)]
    if only_if_rule_differs and all(c == r for c, r, _ in sizes):
        return  # the rule drops nothing: ceil mode means the same at the target
    new_pads = list(pads)
    for i, (_, rule, floor) in enumerate(sizes):
        if floor == rule:
            continue
        # ceil mode kept a partial last window here: widen the end pad until floor mode keeps it
        new_pads[n + i] += (rule - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1 - (
            spatial[i] + pads[i] + pads[n + i])
        if node.op_type == "AveragePool" and step.attr("count_include_pad", 0):
            step.refuse(f"AveragePool with ceil_mode=1 and count_include_pad=1 keeps a partial last "
                        f"window on spatial axis {i}: opset {step.to_version} would count the "
                        "extra padding it needs")
        if new_pads[n + i] >= kernel[i]:
            step.refuse(f"{node.op_type} with ceil_mode=1: opset {step.to_version} would need an end "
                        f"pad of {new_pads[n + i]} on spatial axis {i}, not less than the kernel size")
    step.set_attr("ceil_mode", 0)
    if new_pads != pads:
        step.set_attr("pads", [int(p) for p in new_pads])


def _pool_22_21(node: ir.Node, step: Step) -> None:
    require_types(step)
    _floor_mode(node, step, only_if_rule_differs=True)


def _pool_10_9(node: ir.Node, step: Step) -> None:
    """ceil_mode (and dilations) arrived at opset 10: ceil mode becomes floor mode with widened
    pads; the generic step then drops ceil_mode=0 and refuses non-default dilations."""
    _floor_mode(node, step, only_if_rule_differs=False)
    generic_step(node, step, semantics_handled=True)


for _op in ("MaxPool", "AveragePool"):
    adapter(_op, 22, 21)(_pool_22_21)
    adapter(_op, 10, 9)(_pool_10_9)

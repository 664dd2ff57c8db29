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

AveragePool 19->18 and LpPool 18->17: dilations arrived there; Conv has had them at every opset,
so a dilated pool becomes a grouped Conv (group=C) with an all-ones kernel [C, 1, *k]::

    AveragePool(x, k, s, d, pads)  ->  Div(Conv(x, ones, group=C, k, s, d, pads'), count)
    LpPool(x, k, s, d, pads, p)    ->  Pow(Conv(Pow(Abs(x), p), ones, group=C, ...), 1/p)

``pads'`` is the pool's explicit padding (auto_pad SAME resolved by the spec's formula), with the end
pad widened so floor-mode Conv keeps ceil mode's partial last window (its taps past the padded input
add the zero the pool leaves out). ``count`` is the number of taps each window averages: inside the
padded input for count_include_pad=1, inside the real input for count_include_pad=0; it factors per
axis, so it is a constant built from static spatial sizes (or the kernel size when no window ever
leaves the padded input). Refused: unknown channel count, ceil mode or SAME padding or excluded pads
on unknown spatial sizes, auto_pad SAME with dilations (onnxruntime and onnx.reference size its
padding by the undilated kernel, the spec by the dilated one), and ceil mode where opset 22's rule
drops a window (the spec before 22 and the runtimes disagree there).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from unframe.errors import InputError
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


def _check_geometry(node: ir.Node, n: int, kernel: list[int], strides: list[int], dilations: list[int],
                    pads: list[int], spatial: list[int] | None) -> None:
    """Attribute lengths and signs a pool over ``n`` spatial axes must have (a malformed node is
    the model's fault, found by the opset campaign as an IndexError)."""
    wants = {"kernel_shape": (kernel, n, 1), "strides": (strides, n, 1), "dilations": (dilations, n, 1),
             "pads": (pads, 2 * n, 0)}
    for name, (values, length, least) in wants.items():
        if len(values) != length or any(int(v) < least for v in values):
            raise InputError(f"{node.op_type} node {node.name!r}: {name}={list(values)} doesn't fit its "
                             f"{n} spatial axes", "the model is broken; re-export it")
    if spatial is not None and len(spatial) != n:
        raise InputError(f"{node.op_type} node {node.name!r}: a {len(spatial)}-D window input with a "
                         f"{n}-D kernel_shape", "the model is broken; re-export it")


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
    _check_geometry(node, n, kernel, strides, dilations, pads, spatial)
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


def _explicit_pads(node: ir.Node, step: Step, kernel: list[int], strides: list[int],
                   dilations: list[int]) -> tuple[list[int], list[int] | None]:
    """(begin+end pads by the spec's auto_pad rules, static spatial sizes or None)."""
    n = len(kernel)
    spatial = _spatial_sizes(node.inputs[0])
    auto_pad = step.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad == "VALID":
        return [0] * (2 * n), spatial
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if any(d != 1 for d in dilations):
            # onnxruntime and onnx.reference size SAME padding by the undilated kernel, against the spec
            step.refuse(f"{node.op_type} with dilations and auto_pad={auto_pad}: the runtimes and the spec "
                        "disagree on its padding")
        if spatial is None:
            step.refuse(f"{node.op_type} with auto_pad={auto_pad} needs static spatial sizes before opset "
                        f"{step.from_version}")
        totals = [max(0, (-(-spatial[i] // strides[i]) - 1) * strides[i] + kernel[i] - spatial[i])
                  for i in range(n)]
        small = [t // 2 for t in totals]
        big = [t - t // 2 for t in totals]
        return (small + big if auto_pad == "SAME_UPPER" else big + small), spatial
    return list(step.attr("pads") or [0] * (2 * n)), spatial


def _axis_taps(length: int, out: int, kernel: int, stride: int, dilation: int, begin: int, end: int,
               include_pad: bool) -> np.ndarray:
    """How many taps of each window on one axis are averaged."""
    taps = np.arange(out)[:, None] * stride - begin + np.arange(kernel)[None, :] * dilation
    inside = (taps < length + end) if include_pad else (taps >= 0) & (taps < length)
    return inside.sum(axis=1)


def _window_counts(node: ir.Node, step: Step, geometry: tuple[list[int], ...], spatial: list[int] | None,
                   ceil: bool) -> np.ndarray | float:
    """The per-window tap count of an AveragePool (a scalar when every window is full)."""
    kernel, strides, dilations, pads = geometry
    n = len(kernel)
    include_pad = bool(step.attr("count_include_pad", 0))
    if spatial is None:
        if not include_pad and any(pads):
            step.refuse(f"AveragePool with dilations, pads and count_include_pad=0 needs static spatial "
                        f"sizes before opset {step.from_version}")
        return float(np.prod(kernel))
    outs = [_axis_sizes(spatial[i], kernel[i], strides[i], dilations[i], pads[i], pads[n + i])[0 if ceil else 2]
            for i in range(n)]
    count = np.ones([], dtype=np.int64)
    for i in range(n):
        axis = _axis_taps(spatial[i], outs[i], kernel[i], strides[i], dilations[i], pads[i], pads[n + i],
                          include_pad)
        count = np.multiply.outer(count, axis)
    return count


def _dilated_geometry(node: ir.Node, step: Step) -> tuple[tuple[list[int], ...], list[int] | None, bool]:
    """((kernel, strides, dilations, pads), static spatial sizes, ceil mode); refuses what Conv can't do."""
    kernel = list(step.attr("kernel_shape") or [])
    n = len(kernel)
    strides = list(step.attr("strides") or [1] * n)
    dilations = list(step.attr("dilations") or [1] * n)
    _check_geometry(node, n, kernel, strides, dilations, list(step.attr("pads") or [0] * (2 * n)),
                    _spatial_sizes(node.inputs[0]))
    pads, spatial = _explicit_pads(node, step, kernel, strides, dilations)
    ceil = bool(step.attr("ceil_mode", 0)) and (step.attr("auto_pad", "NOTSET") or "NOTSET") == "NOTSET"
    if ceil and spatial is None:
        step.refuse(f"{node.op_type} with dilations and ceil_mode=1 needs static spatial sizes before "
                    f"opset {step.from_version}")
    if ceil:
        for i in range(n):
            ceil_size, rule_size, _ = _axis_sizes(spatial[i], kernel[i], strides[i], dilations[i], pads[i],
                                                  pads[n + i])
            if ceil_size != rule_size:
                step.refuse(f"{node.op_type} with ceil_mode=1: its last window on spatial axis {i} starts "
                            "in the end padding, which the spec before opset 22 counts and runtimes drop")
    return (kernel, strides, dilations, pads), spatial, ceil


def _ones_conv(step: Step, x: ir.Value, channels: int, geometry: tuple[list[int], ...],
               spatial: list[int] | None, ceil: bool) -> ir.Value:
    """Sum of each dilated window per channel, with the end pads widened to keep ceil mode's windows."""
    kernel, strides, dilations, pads = geometry
    n = len(kernel)
    conv_pads = list(pads)
    if ceil and spatial is not None:
        for i in range(n):
            out = _axis_sizes(spatial[i], kernel[i], strides[i], dilations[i], pads[i], pads[n + i])[0]
            need = (out - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1
            conv_pads[n + i] += max(0, need - (spatial[i] + pads[i] + pads[n + i]))
    ones = step.const(np.ones([channels, 1, *kernel], dtype=step.node.inputs[0].dtype.numpy()))
    return step.op("Conv", [x, ones], {"kernel_shape": kernel, "strides": strides, "dilations": dilations,
                                       "pads": conv_pads, "group": channels})


def _pool_as_conv(node: ir.Node, step: Step) -> bool:
    """Rewrite a dilated AveragePool/LpPool as a grouped Conv; False when it has no dilations."""
    lp_ceil = node.op_type == "LpPool" and step.attr("ceil_mode", 0)  # LpPool's ceil_mode came with 18 too
    if all(d == 1 for d in step.attr("dilations") or []) and not lp_ceil:
        return False
    require_types(step)
    x = node.inputs[0]
    shape = x.shape
    if shape is None or len(shape) < 3 or not isinstance(shape[1], int) or x.dtype is None:
        step.refuse(f"{node.op_type} with dilations needs a known channel count and dtype before "
                    f"opset {step.from_version}")
    geometry, spatial, ceil = _dilated_geometry(node, step)
    if node.op_type == "AveragePool":
        count = _window_counts(node, step, geometry, spatial, ceil)
        total = _ones_conv(step, x, shape[1], geometry, spatial, ceil)
        out = step.op("Div", [total, step.const(np.asarray(count, dtype=x.dtype.numpy()))])
    else:
        p = int(step.attr("p", 2))
        dtype = x.dtype.numpy()
        powered = step.op("Abs", [x]) if p == 1 else step.op("Pow", [step.op("Abs", [x]), step.const(
            np.asarray(p, dtype=dtype))])
        powered.type, powered.shape = x.type, x.shape
        total = _ones_conv(step, powered, shape[1], geometry, spatial, ceil)
        out = total if p == 1 else step.op("Pow", [total, step.const(np.asarray(1.0 / p, dtype=dtype))])
    for value in {total, out}:
        value.type, value.shape = node.outputs[0].type, node.outputs[0].shape
    step.replace_with([out])
    return True


@adapter("AveragePool", 19, 18)
def average_pool_19_18(node: ir.Node, step: Step) -> None:
    if not _pool_as_conv(node, step):
        generic_step(node, step)


@adapter("LpPool", 18, 17)
def lp_pool_18_17(node: ir.Node, step: Step) -> None:
    if not _pool_as_conv(node, step):
        generic_step(node, step)

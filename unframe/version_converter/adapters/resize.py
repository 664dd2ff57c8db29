"""Upsample and Resize.

Upsample 8->9::  Upsample(x, scales=[..])        ->  Upsample(x, Constant(scales))
Upsample 9->8::  Upsample(x, scales)             ->  Upsample(x, scales=folded)
Upsample 9->10:: Upsample(x, scales)             ->  Resize_10(x, scales)     (Upsample removed at 10)
Resize 10->9::   Resize_10(x, scales)            ->  Upsample_9(x, scales)
Resize 10->11::  Resize_10(x, scales)            ->  Resize_11(x, roi=[], scales,
                                                      coordinate_transformation_mode="asymmetric",
                                                      nearest_mode="floor")
Resize 11->10::  only asymmetric coordinates, nearest(floor)/linear, scales (or sizes with a static
                 input shape), no exclude_outside
Resize 13->12::  empty roi/scales inputs made explicit (they are required before 13)
Resize 19->18::  refused for coordinate_transformation_mode="half_pixel_symmetric"
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.moves import input_value, require_types
from unframe.version_converter.registry import adapter


@adapter("Upsample", 8, 9)
def upsample_8_9(node: ir.Node, step: Step) -> None:
    scales = step.drop_attr("scales")
    node.resize_inputs(2)
    node.replace_input_with(1, step.const(np.asarray(scales, dtype=np.float32)))


@adapter("Upsample", 9, 8)
def upsample_9_8(node: ir.Node, step: Step) -> None:
    require_types(step)
    scales = input_value(step, 1, "scales")
    node.resize_inputs(1)
    step.set_attr("scales", ir.AttrFloat32s("scales", [float(s) for s in scales.reshape(-1)]))


@adapter("Upsample", 9, 10)
def upsample_9_10(node: ir.Node, step: Step) -> None:
    mode = step.attr("mode", "nearest")
    new = step.op("Resize", list(node.inputs), {"mode": mode})
    step.replace_with([new])


@adapter("Resize", 10, 9)
def resize_10_9(node: ir.Node, step: Step) -> None:
    mode = step.attr("mode", "nearest")
    new = step.op("Upsample", list(node.inputs), {"mode": mode})
    step.replace_with([new])


@adapter("Resize", 10, 11)
def resize_10_11(node: ir.Node, step: Step) -> None:
    scales = node.inputs[1]
    roi = step.const(np.zeros([0], dtype=np.float32))
    node.resize_inputs(3)
    node.replace_input_with(1, roi)
    node.replace_input_with(2, scales)
    step.set_attr("coordinate_transformation_mode", "asymmetric")
    if step.attr("mode", "nearest") == "nearest":
        step.set_attr("nearest_mode", "floor")


def _check_11_10(node: ir.Node, step: Step) -> list[str]:
    problems = []
    mode = step.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        problems.append(f"mode={mode!r} does not exist before opset 11")
    coord = step.attr("coordinate_transformation_mode", "half_pixel")
    if coord != "asymmetric" and not _is_identity_scale(node, step):
        problems.append(f"coordinate_transformation_mode={coord!r}: opset 10 only has asymmetric")
    if mode == "nearest" and step.attr("nearest_mode", "round_prefer_floor") != "floor":
        problems.append(f"nearest_mode={step.attr('nearest_mode', 'round_prefer_floor')!r}: opset 10 floors")
    if step.attr("exclude_outside", 0):
        problems.append("exclude_outside=1 does not exist before opset 11")
    return problems


def _is_identity_scale(node: ir.Node, step: Step) -> bool:
    scales = step.fold(step.input(2))
    return scales is not None and scales.size > 0 and bool(np.all(scales == 1))


@adapter("Resize", 11, 10)
def resize_11_10(node: ir.Node, step: Step) -> None:
    problems = _check_11_10(node, step)
    scales_in = step.input(2)
    folded = step.fold(scales_in) if scales_in is not None else None
    keep: ir.Value | None = None
    if scales_in is not None and (folded is None or folded.size > 0):
        keep = scales_in  # a real scales tensor (constant or computed) goes through as is
    else:
        sizes = step.fold(step.input(3)) if step.input(3) is not None else None
        shape = step.static_shape(node.inputs[0])
        if sizes is None or shape is None:
            problems.append("sizes needs constant sizes and a static input shape before opset 11")
    if problems:
        step.refuse("; ".join(problems))
    require_types(step)
    if keep is None:
        keep = step.const(np.asarray(sizes, dtype=np.float32) / np.asarray(shape, dtype=np.float32))
    for name in ("coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                 "extrapolation_value"):
        step.drop_attr(name)
    x = node.inputs[0]
    node.resize_inputs(2)
    node.replace_input_with(0, x)
    node.replace_input_with(1, keep)


@adapter("Resize", 12, 13)
def resize_12_13(node: ir.Node, step: Step) -> None:
    if step.attr("coordinate_transformation_mode") == "tf_half_pixel_for_nn":
        step.refuse("coordinate_transformation_mode='tf_half_pixel_for_nn' was removed at opset 13")


@adapter("Resize", 13, 12)
def resize_13_12(node: ir.Node, step: Step) -> None:
    require_types(step)
    if step.input(1) is None or step.input(2) is None:
        n = len(node.inputs)
        node.resize_inputs(max(n, 3))
        if step.input(1) is None:
            node.replace_input_with(1, step.const(np.zeros([0], dtype=np.float32)))
        if step.input(2) is None:
            node.replace_input_with(2, step.const(np.zeros([0], dtype=np.float32)))


@adapter("Resize", 19, 18)
def resize_19_18(node: ir.Node, step: Step) -> None:
    from unframe.version_converter.generic import generic_step

    if step.attr("coordinate_transformation_mode") == "half_pixel_symmetric":
        step.refuse("coordinate_transformation_mode='half_pixel_symmetric' does not exist before opset 19")
    generic_step(node, step)


@adapter("Resize", 18, 17)
def resize_18_17(node: ir.Node, step: Step) -> None:
    """Resize(x, roi, scales, axes=a) -> Resize(x, roi, full-rank scales) (1.0 / the input's static
    size on the axes not listed); antialias and keep_aspect_ratio_policy must be at their defaults."""
    from unframe.version_converter.generic import generic_step

    axes = step.attr("axes")
    if axes is None:
        generic_step(node, step)
        return
    rank = step.rank(node.inputs[0])
    if rank is None:
        step.refuse("axes needs a known input rank before opset 18")
    axes = [a % rank for a in axes]
    scales = step.fold(step.input(2)) if step.input(2) is not None else None
    sizes = step.fold(step.input(3)) if step.input(3) is not None else None
    if scales is not None and scales.size:
        full = np.ones(rank, dtype=np.float32)
        full[axes] = scales
        index, value = 2, full
    elif sizes is not None and sizes.size:
        shape = step.static_shape(node.inputs[0])
        if shape is None:
            step.refuse("sizes with axes needs a static input shape before opset 18")
        full_sizes = np.asarray(shape, dtype=np.int64)
        full_sizes[axes] = sizes
        index, value = 3, full_sizes
    else:
        step.refuse("scales/sizes with axes must be constants before opset 18")
    step.drop_attr("axes")
    generic_step(node, step)
    node.replace_input_with(index, step.const(value))

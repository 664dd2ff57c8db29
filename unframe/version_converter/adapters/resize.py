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
Resize 12->13::  tf_half_pixel_for_nn (removed at 13) as half_pixel: nearest floor -> round_prefer_ceil,
                 round_prefer_floor -> ceil (the same pixels); other roundings and linear refused
Resize 13->12::  empty roi/scales inputs made explicit (they are required before 13)
Resize 19->18::  refused for coordinate_transformation_mode="half_pixel_symmetric"
Resize 18->17::  Resize(x, roi, scales|sizes, axes=a)  ->  Resize(x, roi', full-rank scales|sizes)
                 constants spread at conversion time; run-time values spread as
                 scales' = Gather(Concat(scales, [1.0]), index)
                 sizes'  = Gather(Concat(sizes, Shape(x)), index)
                 roi'    = Gather(Concat(roi, [0, 1]), index)        (tf_crop_and_resize only)
                 keep_aspect_ratio_policy only with constant sizes whose kept scale gives whole sizes;
                 antialias=1 refused
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


# tf_half_pixel_for_nn samples q = (y + 0.5) / scale; half_pixel samples q - 0.5. Two nearest
# roundings of q are roundings of q - 0.5 (q - 0.5 is exact in float32 wherever it is >= 0):
# floor(q) == round-half-up(q - 0.5), round-half-down(q) == ceil(q - 0.5).
_TF_NN_AS_HALF_PIXEL = {"floor": "round_prefer_ceil", "round_prefer_floor": "ceil"}


@adapter("Resize", 12, 13)
def resize_12_13(node: ir.Node, step: Step) -> None:
    """tf_half_pixel_for_nn (tf2onnx's ResizeNearestNeighbor with half_pixel_centers, nearest
    floor) was removed at 13; written as half_pixel with the rounding that picks the same pixels."""
    if step.attr("coordinate_transformation_mode") != "tf_half_pixel_for_nn":
        return
    mode, rounding = step.attr("mode", "nearest"), step.attr("nearest_mode", "round_prefer_floor")
    if mode != "nearest" or rounding not in _TF_NN_AS_HALF_PIXEL:
        step.refuse(f"coordinate_transformation_mode='tf_half_pixel_for_nn' was removed at opset 13 "
                    f"(mode={mode!r}, nearest_mode={rounding!r} has no equivalent after it)")
    step.set_attr("coordinate_transformation_mode", "half_pixel")
    step.set_attr("nearest_mode", _TF_NN_AS_HALF_PIXEL[rounding])


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


def _is_given(step: Step, value: ir.Value | None) -> bool | None:
    """Whether an optional scales/sizes input holds values (None: can't tell before run time)."""
    if value is None:
        return False
    if value.shape is not None and len(value.shape) == 1 and isinstance(value.shape[0], int):
        return value.shape[0] > 0
    folded = step.fold(value)
    return None if folded is None else folded.size > 0


def _full_rank(step: Step, value: ir.Value, fill: ir.Value, index: list[int]) -> ir.Value:
    """Gather(Concat(value, fill), index): the per-axis values spread over every axis of x."""
    joined = step.op("Concat", [value, fill], {"axis": 0})
    out = step.op("Gather", [joined, step.const(np.asarray(index, dtype=np.int64))], {"axis": 0})
    out.type, out.shape = value.type, ir.Shape([len(index)])
    return out


def _kept_aspect_sizes(step: Step, axes: list[int], policy: str) -> np.ndarray:
    """The full-rank output sizes keep_aspect_ratio_policy gives; refuses unless they're constants
    and the kept scale lands on whole sizes (then ``size / in_size`` is that scale on every axis)."""
    sizes = step.fold(step.input(3))
    shape = step.static_shape(step.node.inputs[0])
    if sizes is None or shape is None:
        step.refuse(f"keep_aspect_ratio_policy={policy!r} needs constant sizes and a static input shape "
                    "before opset 18")
    ratios = [float(sizes[i]) / shape[a] for i, a in enumerate(axes)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    full = np.asarray(shape, dtype=np.int64)
    for a in axes:
        exact = scale * shape[a]
        if exact != round(exact):
            step.refuse(f"keep_aspect_ratio_policy={policy!r}: the kept scale {scale} gives a fractional "
                        f"size on axis {a}, which Resize-13's sizes can't carry with that scale")
        full[a] = round(exact)
    return full


def _roi_index(axes: list[int], rank: int) -> list[int]:
    """Index into Concat(roi[2k], [0, 1]) giving the full-rank [starts..., ends...] roi."""
    k = len(axes)
    pos = {a: i for i, a in enumerate(axes)}
    return [pos.get(a, 2 * k) for a in range(rank)] + [k + pos[a] if a in pos else 2 * k + 1 for a in range(rank)]


def _check_18_17(node: ir.Node, step: Step, rank: int | None, axes: list[int] | None) -> str:
    """Refuses what Resize-13 can't express; returns which input carries the target ("scales"/"sizes")."""
    if rank is None:
        step.refuse("axes / keep_aspect_ratio_policy need a known input rank before opset 18")
    if step.attr("antialias", 0):
        step.refuse("antialias=1 does not exist before opset 18 (no exact rewrite)")
    require_types(step)
    scales, sizes = _is_given(step, step.input(2)), _is_given(step, step.input(3))
    if scales is None or (not scales and sizes is None):
        step.refuse("with axes, whether scales or sizes is used must be known before opset 18")
    if step.attr("coordinate_transformation_mode") == "tf_crop_and_resize" and axes is not None:
        roi = step.input(1)
        if roi is not None and (roi.shape is None or roi.shape.rank() != 1 or roi.shape[0] not in (0, 2 * len(axes))):
            step.refuse("tf_crop_and_resize with axes needs a roi of known length before opset 18")
    return "scales" if scales else "sizes"


@adapter("Resize", 18, 17)
def resize_18_17(node: ir.Node, step: Step) -> None:
    """Resize(x, roi, scales|sizes, axes=a) -> Resize(x, roi', full-rank scales|sizes): the values of
    the axes not listed are 1.0 (scales), the input's size (sizes), 0 and 1 (roi starts and ends);
    constants are spread at conversion time, others with Gather(Concat(v, fill), index).
    keep_aspect_ratio_policy: only where constant sizes make its scale land on whole sizes."""
    from unframe.version_converter.generic import generic_step

    policy = step.attr("keep_aspect_ratio_policy", "stretch")
    if step.attr("axes") is None and policy == "stretch":
        generic_step(node, step)
        return
    x = node.inputs[0]
    rank = step.rank(x)
    given = step.attr("axes")
    which = _check_18_17(node, step, rank, given)
    axes = [a % rank for a in (given if given is not None else range(rank))]
    pos = {a: i for i, a in enumerate(axes)}
    if which == "sizes" and policy != "stretch":
        full = step.const(_kept_aspect_sizes(step, axes, policy))
    elif which == "sizes":
        full = _spread_sizes(step, x, axes, pos, rank)
    else:
        full = _spread_scales(step, axes, pos, rank)
    roi = step.input(1)
    if step.attr("coordinate_transformation_mode") != "tf_crop_and_resize":
        roi = None  # only tf_crop_and_resize reads roi
    elif roi is not None and given is not None and _is_given(step, roi):
        roi = _spread_roi(step, roi, axes, rank)
    for name in ("axes", "keep_aspect_ratio_policy"):
        step.drop_attr(name)
    generic_step(node, step)
    index = 2 if which == "scales" else 3
    node.resize_inputs(index + 1)
    node.replace_input_with(1, roi)
    node.replace_input_with(index, full)
    if index == 3:
        node.replace_input_with(2, None)


def _spread_scales(step: Step, axes: list[int], pos: dict[int, int], rank: int) -> ir.Value:
    scales = step.input(2)
    folded = step.fold(scales)
    if folded is not None:
        full = np.ones(rank, dtype=np.float32)
        full[axes] = folded
        return step.const(full)
    one = step.const(np.ones([1], dtype=np.float32))
    return _full_rank(step, scales, one, [pos.get(a, len(axes)) for a in range(rank)])


def _spread_sizes(step: Step, x: ir.Value, axes: list[int], pos: dict[int, int], rank: int) -> ir.Value:
    sizes = step.input(3)
    folded, shape = step.fold(sizes), step.static_shape(x)
    if folded is not None and shape is not None:
        full = np.asarray(shape, dtype=np.int64)
        full[axes] = folded
        return step.const(full)
    dims = step.op("Shape", [x])
    dims.type, dims.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([rank])
    return _full_rank(step, sizes, dims, [pos.get(a, len(axes) + a) for a in range(rank)])


def _spread_roi(step: Step, roi: ir.Value, axes: list[int], rank: int) -> ir.Value:
    index = _roi_index(axes, rank)
    dtype = roi.dtype.numpy() if roi.dtype is not None else np.float32
    folded = step.fold(roi)
    if folded is not None:
        return step.const(np.concatenate([folded.reshape(-1), [0, 1]]).astype(dtype)[index])
    return _full_rank(step, roi, step.const(np.asarray([0, 1], dtype=dtype)), index)

"""RoiAlign: coordinate_transformation_mode (added at opset 16, default "half_pixel").

RoiAlign-10 is the "output_half_pixel" mode: no half-pixel shift of the scaled ROI corners, and ROIs
narrower or shorter than one (scaled) pixel are widened to one pixel.

16->15, output_half_pixel::  RoiAlign(x, rois, idx, mode="output_half_pixel")  ->  RoiAlign(x, rois, idx)
16->15, half_pixel::         RoiAlign(x, rois, idx)  ->  RoiAlign(x, rois - 0.5 / spatial_scale, idx)

half_pixel scales the corners and subtracts half a pixel; subtracting 0.5 / spatial_scale before the
scaling is the same shift. It is exact only when every ROI is at least one scaled pixel wide and high
(half_pixel never widens a ROI) and the shifted corners scale to exactly the shifted values in the
rois' dtype: so rois must be constants, checked at conversion time; run-time rois are refused.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.generic import generic_step
from unframe.version_converter.moves import require_types
from unframe.version_converter.registry import adapter


def _shifted_rois(step: Step, spatial_scale: float) -> np.ndarray:
    """The rois whose scaled corners equal half_pixel's shifted ones; refuses where that isn't exact."""
    rois = step.fold(step.input(1))
    if rois is None:
        step.refuse("RoiAlign half_pixel needs constant rois before opset 16: RoiAlign-10 widens ROIs "
                    "under one pixel to one, which can't be ruled out for run-time rois")
    dtype = rois.dtype.type
    scale, half = dtype(spatial_scale), dtype(0.5)
    scaled = rois * scale
    if np.any(scaled[:, 2] - scaled[:, 0] < 1) or np.any(scaled[:, 3] - scaled[:, 1] < 1):
        step.refuse("RoiAlign half_pixel with a ROI under one scaled pixel: RoiAlign-10 would widen it")
    shifted = (rois - half / scale).astype(dtype)
    if not np.array_equal(shifted * scale, scaled - half):
        step.refuse(f"RoiAlign half_pixel: rois - 0.5 / spatial_scale does not scale exactly to the "
                    f"shifted corners in {rois.dtype}")
    return shifted


@adapter("RoiAlign", 16, 15)
def roi_align_16_15(node: ir.Node, step: Step) -> None:
    mode = step.attr("coordinate_transformation_mode", "half_pixel")
    require_types(step)
    if mode == "half_pixel":
        shifted = _shifted_rois(step, float(step.attr("spatial_scale", 1.0)))
        node.replace_input_with(1, step.const(shifted))
    elif mode != "output_half_pixel":
        step.refuse(f"RoiAlign coordinate_transformation_mode={mode!r} is unknown")
    step.drop_attr("coordinate_transformation_mode")
    generic_step(node, step)

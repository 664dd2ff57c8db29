"""Resize in every mode (nearest with its four rounding modes, linear, cubic, antialias,
exclude_outside, every coordinate transformation including tf_crop_and_resize).

ONNX Resize is separable, and along one axis it is linear in the input: out = W @ in (+ b for
extrapolated positions). So each resized axis becomes a MatMul with a constant interpolation
matrix built here from the op's definition:

    x [N, C, H, W] -> transpose H last -> @ W_h^T -> transpose back -> (same for W) -> y

which is exact for every mode MIL has no op for, and needs static sizes only on resized axes.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import cast, dtype_name, in_fp32, mb, norm_axis


def _resize_check(node: ir.Node) -> list[str]:
    mode = node.attributes.get("mode")
    value = mode.value if mode is not None else "nearest"
    if value not in ("nearest", "linear", "cubic"):
        return [f"Resize mode {value!r} is unknown"]
    return []


@translator("Resize", check=_resize_check)
def resize(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    rank = ctx.rank(0)
    axes = [norm_axis(int(a), rank) for a in ctx.attr("axes", list(range(rank)))]
    scales = ctx.const(2) if ctx.has(2) else None
    sizes = ctx.const(3) if ctx.has(3) else None
    if ctx.has(3) and sizes is None:
        sizes = _symbolic_sizes(ctx, x, axes)
    if (ctx.has(2) and scales is None) or (ctx.has(3) and sizes is None):
        raise ctx.err("Resize scales/sizes must be constant")
    roi = ctx.const(1) if ctx.has(1) else None
    plan = _plan(ctx, x, axes, scales, sizes, roi)
    kind = dtype_name(x)
    integral = kind in ("int32", "bool")
    with in_fp32(ctx) if integral else contextlib.nullcontext():
        work = cast(x, "fp32") if integral else x
        for axis, (in_size, out_size, scale, roi_pair) in plan.items():
            matrix, bias = interpolation_matrix(in_size, out_size, scale, roi_pair, _attrs(ctx))
            if out_size == in_size and bias is None and np.array_equal(matrix, np.eye(in_size)):
                continue
            work = _apply_along(work, axis, rank, matrix, bias)
        return m.cast(x=m.round(x=work), dtype=kind) if integral else work


def _symbolic_sizes(ctx: TranslateContext, x: Any, axes: list[int]) -> np.ndarray | None:
    """Run-time sizes whose unknown entries are the input's own dims on those axes (torch's
    interpolate: Concat(Shape(x)[:2], [h, w]) with a symbolic batch) resize only the known axes:
    each such entry becomes the input's dim (an object array; the axis is left alone)."""
    symbolic = getattr(ctx.inputs[3], "sym_val", None)
    if symbolic is None:
        return None
    entries = list(np.asarray(symbolic).reshape(-1))
    if len(entries) != len(axes):
        return None
    sizes = []
    for entry, axis in zip(entries, axes, strict=True):
        if isinstance(entry, (int, np.integer)) or getattr(entry, "is_Integer", False):
            sizes.append(int(entry))
        elif entry == x.shape[axis]:
            sizes.append(x.shape[axis])
        else:
            return None
    return np.asarray(sizes, dtype=object)


def _attrs(ctx: TranslateContext) -> dict[str, Any]:
    return {
        "mode": ctx.attr("mode", "nearest"),
        "coord": ctx.attr("coordinate_transformation_mode", "half_pixel"),
        "nearest_mode": ctx.attr("nearest_mode", "round_prefer_floor"),
        "cubic_a": float(ctx.attr("cubic_coeff_a", -0.75)),
        "exclude_outside": bool(int(ctx.attr("exclude_outside", 0))),
        "antialias": bool(int(ctx.attr("antialias", 0))),
        "extrapolation": float(ctx.attr("extrapolation_value", 0.0)),
    }


def _plan(ctx: TranslateContext, x: Any, axes: list[int], scales: Any, sizes: Any,
          roi: Any) -> dict[int, tuple[int, int, float, tuple[float, float]]]:
    rank = len(x.shape)
    plan = {}
    scale_list = [float(s) for s in np.asarray(scales).reshape(-1)] if scales is not None and np.asarray(scales).size else None
    size_list = ([s if _is_symbol(s) else int(s) for s in np.asarray(sizes).reshape(-1)]
                 if sizes is not None and np.asarray(sizes).size else None)
    roi_list = [float(r) for r in np.asarray(roi).reshape(-1)] if roi is not None and np.asarray(roi).size else None
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if size_list is not None and policy != "stretch":
        ratios = [size_list[i] / _static(ctx, x, a) for i, a in enumerate(axes)]
        common = min(ratios) if policy == "not_larger" else max(ratios)
        scale_list = [common] * len(axes)
        size_list = [int(common * _static(ctx, x, a) + 0.5) for a in axes]
    for i, axis in enumerate(axes):
        if size_list is not None:
            out = size_list[i]
            in_size = _static(ctx, x, axis) if out != x.shape[axis] else None
            if in_size is None:
                continue
            scale = scale_list[i] if scale_list is not None else out / in_size
        else:
            assert scale_list is not None
            scale = scale_list[i]
            if scale == 1.0 and ctx.attr("coordinate_transformation_mode") != "tf_crop_and_resize":
                continue
            in_size = _static(ctx, x, axis)
            out = int(scale * in_size)
        pair = (roi_list[i], roi_list[i + len(axes)]) if roi_list and len(roi_list) == 2 * len(axes) else (0.0, 1.0)
        plan[axis] = (in_size, out, scale, pair)
    del rank
    return plan


def _is_symbol(value: Any) -> bool:
    return not isinstance(value, (int, np.integer)) and not getattr(value, "is_Integer", True)


def _static(ctx: TranslateContext, x: Any, axis: int) -> int:
    d = x.shape[axis]
    if not isinstance(d, (int, np.integer)):
        raise ctx.err(f"Resize needs a static size on resized axis {axis}")
    return int(d)


def interpolation_matrix(in_size: int, out_size: int, scale: float, roi: tuple[float, float],
                         attrs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """W [out, in] (and a bias for tf_crop_and_resize's extrapolated rows) such that resizing a
    1-D signal v is W @ v + b."""
    matrix = np.zeros((out_size, in_size), dtype=np.float64)
    bias = np.zeros(out_size, dtype=np.float64)
    extrapolated = False
    for y in range(out_size):
        x_ori = _source_coordinate(y, in_size, out_size, scale, roi, attrs["coord"])
        if x_ori is None:
            bias[y] = attrs["extrapolation"]
            extrapolated = True
            continue
        ratio = 1.0 if float(x_ori).is_integer() else x_ori - math.floor(x_ori)
        coeffs = _coefficients(ratio, scale, attrs)
        n = len(coeffs)
        first = math.ceil(x_ori) - n // 2
        idx = np.arange(first, first + n)
        if attrs["exclude_outside"]:
            coeffs = np.where((idx < 0) | (idx >= in_size), 0.0, coeffs)
            coeffs = coeffs / coeffs.sum()
        for k, c in zip(np.clip(idx, 0, in_size - 1), coeffs, strict=False):
            matrix[y, k] += c
    return matrix, (bias if extrapolated else None)


def _source_coordinate(y: int, in_size: int, out_size: int, scale: float,
                       roi: tuple[float, float], mode: str) -> float | None:
    out_width = scale * in_size
    if mode == "align_corners":
        return 0.0 if out_width == 1 else y * (in_size - 1) / (out_width - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        x = (end - start) * (in_size - 1) / 2 if out_width == 1 else y * (end - start) * (in_size - 1) / (out_width - 1)
        x += start * (in_size - 1)
        return None if x < 0 or x > in_size - 1 else x
    if mode == "pytorch_half_pixel":
        return -0.5 if out_width == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_size / out_width
        center = in_size / 2
        return center * (1 - adjustment) + (y + 0.5) / scale - 0.5
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def _coefficients(ratio: float, scale: float, attrs: dict[str, Any]) -> np.ndarray:
    mode = attrs["mode"]
    if mode == "nearest":
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        nm = attrs["nearest_mode"]
        table = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                 "floor": False, "ceil": True}
        up = table[nm]
        return np.array([0.0, 1.0]) if up else np.array([1.0, 0.0])
    if mode == "linear":
        if attrs["antialias"]:
            s = min(scale, 1.0)
            start = int(np.floor(-1 / s) + 1)
            args = (np.arange(start, start + 2 - 2 * start) - ratio) * s
            c = np.clip(1 - np.abs(args), 0, 1)
            return c / c.sum()
        return np.array([1 - ratio, ratio])
    a = attrs["cubic_a"]
    if attrs["antialias"]:
        s = min(scale, 1.0)
        i_start = int(np.floor(-2 / s) + 1)
        c = np.array([_cubic_kernel(s * (i - ratio), a) for i in range(i_start, 2 - i_start)])
        return c / c.sum()
    return np.array([_cubic_kernel(d, a) for d in (-1 - ratio, -ratio, 1 - ratio, 2 - ratio)])


def _cubic_kernel(d: float, a: float) -> float:
    d = abs(d)
    if d <= 1:
        return (a + 2) * d**3 - (a + 3) * d**2 + 1
    if d < 2:
        return a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
    return 0.0


def _apply_along(x: Any, axis: int, rank: int, matrix: np.ndarray, bias: np.ndarray | None) -> Any:
    m = mb()
    dt = np.float16 if dtype_name(x) == "fp16" else np.float32
    perm = [i for i in range(rank) if i != axis] + [axis]
    moved = m.transpose(x=x, perm=perm) if axis != rank - 1 else x
    y = m.matmul(x=moved, y=matrix.T.astype(dt))
    if bias is not None:
        y = m.add(x=y, y=bias.astype(dt))
    if axis != rank - 1:
        inverse = [perm.index(i) for i in range(rank)]
        y = m.transpose(x=y, perm=inverse)
    return y

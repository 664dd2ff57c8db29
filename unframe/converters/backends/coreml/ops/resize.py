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
from unframe.converters.backends.coreml.ops._resize_runtime import resize_at_run_time
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
    roi = ctx.const(1) if ctx.has(1) else None
    plan = None
    if not ((ctx.has(2) and scales is None) or (ctx.has(3) and sizes is None) or (ctx.has(1) and roi is None)):
        try:
            plan = _plan(ctx, x, axes, scales, sizes, roi)
        except _NotStatic:
            plan = None
    if plan is None:  # sizes known at run time only, or a resized axis of dynamic length
        return resize_at_run_time(ctx, x, axes, _attrs(ctx))
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
            # float32, as onnxruntime: float(out) / float(in), and floor(scale * in) below
            scale = scale_list[i] if scale_list is not None else float(np.float32(out) / np.float32(in_size))
        else:
            assert scale_list is not None
            scale = scale_list[i]
            if scale == 1.0 and ctx.attr("coordinate_transformation_mode") != "tf_crop_and_resize":
                continue
            in_size = _static(ctx, x, axis)
            out = int(np.float32(scale) * np.float32(in_size))
        pair = (roi_list[i], roi_list[i + len(axes)]) if roi_list and len(roi_list) == 2 * len(axes) else (0.0, 1.0)
        plan[axis] = (in_size, out, scale, pair)
    del rank
    return plan


def _is_symbol(value: Any) -> bool:
    return not isinstance(value, (int, np.integer)) and not getattr(value, "is_Integer", True)


class _NotStatic(Exception):
    """A resized axis has a dynamic length: the interpolation matrix can't be built."""


def _static(ctx: TranslateContext, x: Any, axis: int) -> int:
    d = x.shape[axis]
    if not isinstance(d, (int, np.integer)):
        raise _NotStatic(axis)
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
    """Where output ``y`` samples the input, as onnxruntime (the parity reference) computes it:
    in float32, and with the integer output length where the spec says ``length_resized``.
    float64 picks other pixels: TF's 10x nearest downsample has scale float32(0.1), and output 1
    samples 1 / 0.1f == 10.0f in float32 but 9.99999985 in float64, which floors to input 9."""
    f = np.float32
    y32, s, half = f(y), f(scale), f(0.5)
    n_in, n_out = f(in_size), f(out_size)
    if mode == "align_corners":
        return 0.0 if out_size == 1 else float(y32 * (n_in - f(1)) / (n_out - f(1)))
    if mode == "asymmetric":
        return float(y32 / s)
    if mode == "tf_crop_and_resize":
        start, end = f(roi[0]), f(roi[1])
        x = (float(start * (n_in - f(1)) + (y32 * (end - start) * (n_in - f(1))) / (n_out - f(1)))
             if out_size > 1 else float(f(0.5 * (float(start) + float(end)) * (in_size - 1))))
        return None if x < 0 or x > in_size - 1 else x
    if mode == "pytorch_half_pixel":
        return float((y32 + half) / s - half) if out_size > 1 else 0.0
    if mode == "half_pixel":
        return float((y32 + half) / s - half)
    if mode == "tf_half_pixel_for_nn":  # removed at opset 13, but tf2onnx still writes it at 18
        return float((y32 + half) / s)
    if mode == "half_pixel_symmetric":
        adjustment = n_out / (s * n_in)
        offset = n_in / f(2) * (f(1) - adjustment)
        return float(f(float(offset) + (y + 0.5) / float(s) - 0.5))
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


def _grid_sample_check(node: ir.Node) -> list[str]:
    mode = node.attributes.get("mode")
    value = mode.value if mode is not None else "linear"
    if value not in ("linear", "bilinear", "nearest"):
        return [f"GridSample mode {value!r}: MIL's resample samples bilinear or nearest only"]
    return []


@translator("GridSample", check=_grid_sample_check)
def grid_sample(ctx: TranslateContext) -> Any:
    """MIL's resample, at the grid's positions in pixels (computed in float32, with the whole op:
    a 16-bit grid is a quarter pixel off at 500 pixels). ONNX's reflection reflects the
    *coordinate* about the image's borders ([0, n - 1] with align_corners, else [-0.5, n - 0.5])
    before interpolating; that is done here, and the reflected coordinate sampled with border
    padding (the neighbour past the border then reads the edge pixel, as onnxruntime)::

        grid [N, H', W', 2] (x, y in [-1, 1]) -> pixels -> (reflect) -> resample(unnormalized) -> [N, C, H', W']
    """
    m, x, grid = mb(), ctx.x(0), ctx.x(1)
    if ctx.rank(0) != 4:
        raise ctx.err(f"GridSample on a rank-{ctx.rank(0)} input: MIL's resample samples 2-D images only")
    sizes = x.shape[2:]
    if not all(isinstance(d, (int, np.integer)) for d in sizes):
        raise ctx.err("GridSample needs a static image height and width")
    height, width = (int(d) for d in sizes)
    align = bool(int(ctx.attr("align_corners", 0)))
    padding = str(ctx.attr("padding_mode", "zeros"))
    nearest = str(ctx.attr("mode", "linear")) == "nearest"
    with in_fp32(ctx):
        pixels = _grid_pixels(cast(grid, "fp32"), width, height, align)
        if padding == "reflection":
            if nearest:  # onnxruntime rounds the coordinate before it reflects it
                pixels = m.round(x=pixels)
            pixels = _reflect(pixels, width, height, align)
        return m.resample(x=cast(x, "fp32"), coordinates=pixels, sampling_mode="nearest" if nearest else "bilinear",
                          padding_mode={"zeros": "constant", "border": "border"}.get(padding, "border"),
                          padding_value=np.float32(0.0), coordinates_mode="unnormalized", align_corners=align)


def _grid_pixels(grid: Any, width: int, height: int, align: bool) -> Any:
    """Normalized (x, y) in [-1, 1] -> pixel units (0 = the first pixel's centre)."""
    m = mb()
    size = np.array([width, height], np.float32)
    if align:  # (n + 1) / 2 * (size - 1)
        return m.mul(x=m.add(x=grid, y=np.float32(1.0)), y=(size - 1) / 2)
    return m.real_div(x=m.sub(x=m.mul(x=m.add(x=grid, y=np.float32(1.0)), y=size), y=np.float32(1.0)),
                      y=np.float32(2.0))


def _reflect(pixels: Any, width: int, height: int, align: bool) -> Any:
    """Reflect each coordinate about [lo, hi] until it lies within: with t = (x - lo) mod 2r
    (r = hi - lo), x' = lo + (t if t < r else 2r - t)."""
    m = mb()
    lo = np.zeros(2, np.float32) if align else np.full(2, -0.5, np.float32)
    hi = np.array([width - 1, height - 1], np.float32) if align else np.array([width - 0.5, height - 0.5], np.float32)
    span = np.maximum(hi - lo, np.float32(1e-12)).astype(np.float32)
    t = m.mod(x=m.sub(x=pixels, y=lo), y=2 * span)
    folded = m.select(cond=m.less(x=t, y=span), a=t, b=m.sub(x=2 * span, y=t))
    return m.add(x=folded, y=lo)

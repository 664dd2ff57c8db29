"""Resizing ops (iOS15/16/17 image_resizing.py): upsample_*, resize_*, resize (iOS17), crop.

Bilinear ops are separable: the last two axes are interpolated one after the other, on sample
positions from the op's sampling_mode (see resize_bilinear's notes in coremltools).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import kernel


def grid(size_in: int, size_out: int, mode: str) -> np.ndarray:
    """Sample positions in input coordinates for one axis, per MIL sampling_mode."""
    i = np.arange(size_out, dtype=np.float64)
    if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
        if size_out == 1:
            return np.array([(size_in - 1) / 2 if mode == "ALIGN_CORNERS" else 0.0])
        pos = i * (size_in - 1) / (size_out - 1)
    elif mode == "DEFAULT":
        pos = i * size_in / size_out
    elif mode == "OFFSET_CORNERS":
        delta = max(1, size_in - 1) / size_out
        pos = 0.5 * delta + i * delta
    elif mode == "UNALIGN_CORNERS":
        spacing = size_in / size_out
        pos = i * spacing + 0.5 * spacing - 0.5
    else:
        raise ValueError(f"unknown sampling_mode {mode!r}")
    return np.clip(pos, 0, size_in - 1)


def _lerp_axis(x: np.ndarray, positions: np.ndarray, axis: int) -> np.ndarray:
    low = np.floor(positions).astype(np.int64)
    high = np.minimum(low + 1, x.shape[axis] - 1)
    frac = (positions - low).astype(x.dtype)
    shape = [1] * x.ndim
    shape[axis] = -1
    frac = frac.reshape(shape)
    a, b = np.take(x, low, axis=axis), np.take(x, high, axis=axis)
    return a + (b - a) * frac


def bilinear(x: np.ndarray, out_h: int, out_w: int, mode_h: Any, mode_w: Any = None) -> np.ndarray:
    """mode_*: a sampling_mode string or an explicit array of positions."""
    mode_w = mode_h if mode_w is None else mode_w
    pos_h = grid(x.shape[-2], out_h, mode_h) if isinstance(mode_h, str) else mode_h
    pos_w = grid(x.shape[-1], out_w, mode_w) if isinstance(mode_w, str) else mode_w
    return _lerp_axis(_lerp_axis(x, pos_h, x.ndim - 2), pos_w, x.ndim - 1)


def _upsample_positions(size_in: int, scale: float, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """Spacing is Xin / Xout (not 1 / scale), as the spec's notes define it."""
    size_out = int(np.floor(size_in * scale))
    if align_corners:
        return grid(size_in, size_out, "STRICT_ALIGN_CORNERS")
    spacing = size_in / size_out
    i = np.arange(size_out, dtype=np.float64)
    pos = i * spacing + 0.5 * spacing - 0.5 if half_pixel else i * spacing
    return np.clip(pos, 0, size_in - 1)


@kernel("upsample_bilinear")
def upsample_bilinear(ctx: Any, x: np.ndarray, scale_factor_height: Any = 1, scale_factor_width: Any = 1,
                      align_corners: Any = True, half_pixel_centers: Any = None) -> np.ndarray:
    # iOS15: align_corners=False means half-pixel centres; iOS16 adds half_pixel_centers
    # (default: not align_corners), where False gives the legacy i * spacing grid
    align = bool(align_corners)
    half = (not align) if half_pixel_centers is None else bool(half_pixel_centers)
    pos_h = _upsample_positions(x.shape[-2], float(scale_factor_height), align, half)
    pos_w = _upsample_positions(x.shape[-1], float(scale_factor_width), align, half)
    return bilinear(x, len(pos_h), len(pos_w), pos_h, pos_w)


def _nearest_axis(x: np.ndarray, size_out: int, axis: int) -> np.ndarray:
    size_in = x.shape[axis]
    index = np.minimum(np.floor(np.arange(size_out) * size_in / size_out).astype(np.int64), size_in - 1)
    return np.take(x, index, axis=axis)


@kernel("upsample_nearest_neighbor")
def upsample_nearest_neighbor(ctx: Any, x: np.ndarray, scale_factor_height: Any = 1,
                              scale_factor_width: Any = 1) -> np.ndarray:
    out_h = int(np.floor(x.shape[-2] * float(scale_factor_height)))
    out_w = int(np.floor(x.shape[-1] * float(scale_factor_width)))
    return _nearest_axis(_nearest_axis(x, out_h, x.ndim - 2), out_w, x.ndim - 1)


@kernel("resize_nearest_neighbor")
def resize_nearest_neighbor(ctx: Any, x: np.ndarray, target_size_height: Any, target_size_width: Any) -> np.ndarray:
    return _nearest_axis(_nearest_axis(x, int(target_size_height), x.ndim - 2), int(target_size_width), x.ndim - 1)


@kernel("resize_bilinear")
def resize_bilinear(ctx: Any, x: np.ndarray, target_size_height: Any = 1, target_size_width: Any = 1,
                    sampling_mode: str = "DEFAULT") -> np.ndarray:
    return bilinear(x, int(target_size_height), int(target_size_width), str(sampling_mode))


@kernel("resize")
def resize(ctx: Any, x: np.ndarray, shape: Any, resized_dims: Any, interpolation_mode: str = "LINEAR",
           sampling_mode: str = "DEFAULT") -> np.ndarray:
    """iOS17: resize the last ``resized_dims`` (1 or 2) dims to ``shape`` (0 keeps a dim)."""
    dims = int(resized_dims)
    targets = [int(s) for s in np.atleast_1d(shape)][-dims:]
    targets = [x.shape[x.ndim - dims + i] if t == 0 else t for i, t in enumerate(targets)]
    out = x
    for i, size_out in enumerate(targets):
        axis = x.ndim - dims + i
        if str(interpolation_mode) == "NEAREST_NEIGHBOR":
            out = _nearest_axis(out, size_out, axis)
        else:
            out = _lerp_axis(out, grid(out.shape[axis], size_out, str(sampling_mode)), axis)
    return out


@kernel("crop")
def crop(ctx: Any, x: np.ndarray, crop_height: Any, crop_width: Any) -> np.ndarray:
    """crop_height/crop_width are (amount cut at the start, amount cut at the end)."""
    top, bottom = (int(v) for v in np.atleast_1d(crop_height))
    left, right = (int(v) for v in np.atleast_1d(crop_width))
    return x[..., top:x.shape[-2] - bottom, left:x.shape[-1] - right]


def _to_pixels(coord: np.ndarray, size: int, mode: str, align_corners: bool) -> np.ndarray:
    """Sample coordinates in input pixel units (0 = centre of the first pixel)."""
    if mode == "unnormalized":
        return coord
    if mode == "normalized_minus_one_to_one":
        return (coord + 1) / 2 * (size - 1) if align_corners else ((coord + 1) * size - 1) / 2
    if mode == "normalized_zero_to_one":
        return coord * (size - 1) if align_corners else coord * size - 0.5
    raise ValueError(f"unknown coordinates_mode {mode!r}")


def _padded_index(index: np.ndarray, size: int, padding_mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(index inside the image, valid) for an index into the conceptually padded image."""
    if padding_mode == "constant":
        return np.clip(index, 0, size - 1), (index >= 0) & (index < size)
    if padding_mode == "border":
        return np.clip(index, 0, size - 1), np.ones(index.shape, bool)
    if padding_mode == "reflection":  # |1,2,3| -> |2,3,2,1,2,3,2,1,2|
        period = max(2 * size - 2, 1)
        m = np.abs(index) % period
        return np.where(m < size, m, period - m), np.ones(index.shape, bool)
    if padding_mode == "symmetric":  # |1,2,3| -> |3,2,1,1,2,3,3,2,1|
        m = np.mod(index, 2 * size)
        return np.where(m < size, m, 2 * size - 1 - m), np.ones(index.shape, bool)
    raise ValueError(f"unknown padding_mode {padding_mode!r}")


@kernel("resample")
def resample(ctx: Any, x: np.ndarray, coordinates: np.ndarray, sampling_mode: str, padding_mode: str,
             padding_value: Any, coordinates_mode: str, align_corners: Any) -> np.ndarray:
    """Sample x [B, C, H, W] at coordinates [B, H2, W2, 2] given as (w, h)."""
    _, _, height, width = x.shape
    coords = np.asarray(coordinates, np.float64)
    px = _to_pixels(coords[..., 0], width, str(coordinates_mode), bool(align_corners))
    py = _to_pixels(coords[..., 1], height, str(coordinates_mode), bool(align_corners))
    batch = np.arange(x.shape[0])[:, None, None]
    fill = np.asarray(padding_value, x.dtype)

    def fetch(iy: np.ndarray, ix: np.ndarray) -> np.ndarray:
        yy, vy = _padded_index(iy, height, str(padding_mode))
        xx, vx = _padded_index(ix, width, str(padding_mode))
        values = x[batch, :, yy, xx]  # [B, H2, W2, C]
        return np.where((vy & vx)[..., None], values, fill)

    if str(sampling_mode) == "nearest":
        out = fetch(np.rint(py).astype(np.int64), np.rint(px).astype(np.int64))
    else:
        y0, x0 = np.floor(py).astype(np.int64), np.floor(px).astype(np.int64)
        wy, wx = (py - y0)[..., None].astype(x.dtype), (px - x0)[..., None].astype(x.dtype)
        top = fetch(y0, x0) * (1 - wx) + fetch(y0, x0 + 1) * wx
        bottom = fetch(y0 + 1, x0) * (1 - wx) + fetch(y0 + 1, x0 + 1) * wx
        out = top * (1 - wy) + bottom * wy
    return np.moveaxis(out, -1, 1)

"""Weight-compression ops (iOS16 constexpr_ops.py, iOS18 compression.py).

These run once per program on constant inputs. affine dequantize, cast and blockwise
shift-scale are computed here; the palettized (LUT) and sparse forms are unpacked with the op's
own ``decompress`` from coremltools, because their bit-packed layouts are defined by that code.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import kernel


def _along_axis(value: Any, ndim: int, axis: int, dtype: Any) -> np.ndarray:
    """A scalar or per-channel vector shaped to broadcast along ``axis`` of an ndim tensor."""
    arr = np.asarray(value).astype(dtype)
    if arr.ndim == 1 and ndim > 1:
        shape = [1] * ndim
        shape[axis % ndim] = -1
        arr = arr.reshape(shape)
    return arr


@kernel("constexpr_affine_dequantize")
def constexpr_affine_dequantize(ctx: Any, quantized_data: np.ndarray, zero_point: Any, scale: Any,
                                axis: Any) -> np.ndarray:
    q = np.asarray(quantized_data)
    acc = np.asarray(scale).dtype
    zp = _along_axis(zero_point, q.ndim, int(axis), acc)
    return (q.astype(acc) - zp) * _along_axis(scale, q.ndim, int(axis), acc)


@kernel("constexpr_cast")
def constexpr_cast(ctx: Any, source_val: np.ndarray, output_dtype: str) -> np.ndarray:
    return np.asarray(source_val).astype(ctx.output_dtype())


def _blocks(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Repeat each block parameter over the block of data it covers."""
    for axis, (data_dim, param_dim) in enumerate(zip(shape, value.shape, strict=True)):
        if data_dim != param_dim:
            value = np.repeat(value, data_dim // param_dim, axis=axis)
    return value


@kernel("constexpr_blockwise_shift_scale")
def constexpr_blockwise_shift_scale(ctx: Any, data: np.ndarray, scale: np.ndarray,
                                    offset: Any = None) -> np.ndarray:
    scale = np.asarray(scale)
    values = np.asarray(data).astype(scale.dtype)
    if offset is not None:
        values = values - _blocks(np.asarray(offset).astype(scale.dtype), values.shape)
    return values * _blocks(scale, values.shape)


def _decompressed(ctx: Any) -> Any:
    result = ctx.op.materialized_val_inference()
    return tuple(result) if isinstance(result, (list, tuple)) else result


for _op in ("constexpr_lut_to_dense", "constexpr_sparse_to_dense", "constexpr_lut_to_sparse",
            "constexpr_sparse_blockwise_shift_scale"):
    kernel(_op)(lambda ctx, **inputs: _decompressed(ctx))


@kernel("quantize")
def quantize(ctx: Any, input: np.ndarray, scale: Any, axis: Any = None, zero_point: Any = None,
             output_dtype: str = "int8") -> np.ndarray:
    """round(x / scale) + zero_point, clipped to the output integer type (round half to even)."""
    x = np.asarray(input)
    ax = 0 if axis is None else int(axis)
    q = np.round(x / _along_axis(scale, x.ndim, ax, x.dtype))
    if zero_point is not None:
        q = q + _along_axis(zero_point, x.ndim, ax, x.dtype)
    dtype = ctx.output_dtype()
    info = np.iinfo(dtype)
    return np.clip(q, info.min, info.max).astype(dtype)


@kernel("dequantize")
def dequantize(ctx: Any, input: np.ndarray, scale: Any, axis: Any = None, zero_point: Any = None) -> np.ndarray:
    q = np.asarray(input)
    ax = 0 if axis is None else int(axis)
    dtype = ctx.output_dtype()
    values = q.astype(dtype)
    if zero_point is not None:
        values = values - _along_axis(zero_point, q.ndim, ax, dtype)
    return values * _along_axis(scale, q.ndim, ax, dtype)

"""QuantizeLinear and DequantizeLinear (per tensor, per axis, blocked), written out as float
math so every runtime rounds ties to even as ONNX does."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import cast, mb, norm_axis, round_half_even, scalar

_RANGES = {ir.DataType.UINT8: (0, 255), ir.DataType.INT8: (-128, 127),
           ir.DataType.UINT16: (0, 65535), ir.DataType.INT16: (-32768, 32767),
           ir.DataType.INT32: (-2**31, 2**31 - 1)}


def _quant_check(node: ir.Node) -> list[str]:
    out_t = node.outputs[0].dtype
    if out_t is not None and out_t not in _RANGES:
        return [f"quantized type {out_t.name} has no CoreML equivalent"]
    return []


def _dequant_check(node: ir.Node) -> list[str]:
    in_t = node.inputs[0].dtype if node.inputs and node.inputs[0] is not None else None
    if in_t is not None and in_t not in _RANGES:
        return [f"quantized type {in_t.name} has no CoreML equivalent"]
    return []


def _broadcast(ctx: TranslateContext, param: Any, x: Any) -> Any:
    """Per-tensor params pass; per-axis (1-D) ones reshape along ``axis``; blocked ones repeat."""
    m = mb()
    rank = len(x.shape)
    p_shape = param.shape if not isinstance(param, np.ndarray) else param.shape
    if len(p_shape) == 0 or (len(p_shape) == 1 and p_shape[0] == 1 and rank != 1):
        return param
    axis = norm_axis(int(ctx.attr("axis", 1)), rank)
    block = int(ctx.attr("block_size", 0))
    if block:
        reps = [1] * rank
        reps[axis] = block
        if isinstance(param, np.ndarray):
            return np.repeat(param, block, axis=axis)[tuple(slice(0, int(d)) if isinstance(d, (int, np.integer)) else slice(None) for d in x.shape)]
        raise ctx.err("blocked quantization needs constant scales")
    shape = [1] * rank
    shape[axis] = -1
    if isinstance(param, np.ndarray):
        return param.reshape(shape)
    return m.reshape(x=param, shape=np.array(shape, dtype=np.int32))


def _param(ctx: TranslateContext, i: int) -> Any:
    c = ctx.const(i)
    return c if c is not None else ctx.x(i)


@translator("QuantizeLinear", check=_quant_check)
def quantize_linear(ctx: TranslateContext) -> Any:
    m = mb()
    x = cast(ctx.x(0), "fp32")
    scale = _broadcast(ctx, _as_f32(_param(ctx, 1)), x)
    out_t = ctx.onnx_out_type(0) or ir.DataType.UINT8
    lo, hi = _RANGES[out_t]
    q = round_half_even(m.real_div(x=x, y=scale))
    if ctx.has(2):
        zp = _broadcast(ctx, _as_f32(_param(ctx, 2)), x)
        q = m.add(x=q, y=zp)
    q = m.clip(x=q, alpha=scalar(float(lo), q), beta=scalar(float(hi), q))
    return m.cast(x=q, dtype="int32")


@translator("DequantizeLinear", check=_dequant_check)
def dequantize_linear(ctx: TranslateContext) -> Any:
    m = mb()
    x = cast(ctx.x(0), "fp32")
    scale = _param(ctx, 1)
    if ctx.has(2):
        x = m.sub(x=x, y=_broadcast(ctx, _as_f32(_param(ctx, 2)), x))
    y = m.mul(x=x, y=_broadcast(ctx, _as_f32(scale), x))
    out_t = ctx.onnx_out_type(0)
    return cast(y, "fp16") if out_t == ir.DataType.FLOAT16 else y


def _as_f32(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.astype(np.float32)
    return cast(v, "fp32")

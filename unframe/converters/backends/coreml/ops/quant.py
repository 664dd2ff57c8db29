"""QuantizeLinear and DequantizeLinear (per tensor, per axis, blocked).

From iOS17 a QuantizeLinear of an activation whose every reader is a DequantizeLinear (the Q/DQ
pair a quantizer puts in front of a layer), with constant scale and zero point, int8 or uint8, is
MIL's own ``quantize`` -> ``dequantize`` pair: the int8 activation Core ML computes with, the form
``coremltools.optimize``'s activation quantization writes. Anything else is written out as float
math (round half to even, as ONNX), and a constant weight's DequantizeLinear folds to the float
weight (the backend quantizes weights with coremltools afterwards).
"""

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


NATIVE_IOS = 17  # MIL quantize / dequantize
_NATIVE = {ir.DataType.INT8: "int8", ir.DataType.UINT8: "uint8"}


def _known(value: ir.Value | None) -> np.ndarray | None:
    """A constant's value (an initializer or a Constant node's), else None."""
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    node = value.producer()
    if node is not None and node.op_type == "Constant" and "value" in node.attributes:
        return node.attributes["value"].as_tensor().numpy()
    return None


def _native_params(node: ir.Node) -> bool:
    """Constant scale (scalar or 1-D) and zero point, no blocks."""
    scale = _known(node.inputs[1]) if len(node.inputs) > 1 else None
    zero = node.inputs[2] if len(node.inputs) > 2 else None
    if scale is None or scale.ndim > 1 or (zero is not None and _known(zero) is None):
        return False
    return not node.attributes.get_int("block_size", 0)


def quantized_type(node: ir.Node) -> ir.DataType:
    """A QuantizeLinear's output type: as inferred, else its zero point's, else its
    ``output_dtype`` attribute (opset 21), else uint8 (ONNX's default)."""
    if node.outputs[0].dtype is not None:
        return node.outputs[0].dtype
    zero = node.inputs[2] if len(node.inputs) > 2 else None
    if zero is not None:
        if zero.dtype is not None:
            return zero.dtype
        if zero.const_value is not None:
            return zero.const_value.dtype
    attr = node.attributes.get_int("output_dtype", 0)
    return ir.DataType(attr) if attr else ir.DataType.UINT8


def native_quantize(node: ir.Node | None, ios: int) -> bool:
    """Whether this QuantizeLinear becomes MIL's ``quantize`` (see the module's doc)."""
    if node is None or node.op_type != "QuantizeLinear" or ios < NATIVE_IOS or not _native_params(node):
        return False
    out = node.outputs[0]
    if quantized_type(node) not in _NATIVE or out.is_graph_output() or _known(node.inputs[0]) is not None:
        return False
    readers = [user for user, _ in out.uses()]
    return bool(readers) and all(u.op_type == "DequantizeLinear" and u.inputs[0] is out and _native_params(u)
                                 for u in readers)


def _native_args(ctx: TranslateContext, node: ir.Node, scale_dtype: Any) -> dict[str, Any]:
    scale = _known(node.inputs[1]).astype(scale_dtype)
    args: dict[str, Any] = {"scale": scale}
    if scale.ndim == 1 and scale.size > 1:
        args["axis"] = norm_axis(int(ctx.attr("axis", 1)), ctx.rank(0))
    zero = _known(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
    if zero is not None:
        args["zero_point"] = zero
    return args


@translator("QuantizeLinear", check=_quant_check)
def quantize_linear(ctx: TranslateContext) -> Any:
    m = mb()
    if native_quantize(ctx.node, ctx.ios):
        x = ctx.x(0)
        dtype = np.float16 if str(x.dtype).endswith("fp16") else np.float32
        args = _native_args(ctx, ctx.node, dtype)
        return m.quantize(input=x, output_dtype=_NATIVE[quantized_type(ctx.node)], **args)
    x = cast(ctx.x(0), "fp32")
    scale = _broadcast(ctx, _as_f32(_param(ctx, 1)), x)
    lo, hi = _RANGES[quantized_type(ctx.node)]
    q = round_half_even(m.real_div(x=x, y=scale))
    if ctx.has(2):
        zp = _broadcast(ctx, _as_f32(_param(ctx, 2)), x)
        q = m.add(x=q, y=zp)
    q = m.clip(x=q, alpha=scalar(float(lo), q), beta=scalar(float(hi), q))
    return m.cast(x=q, dtype="int32")


@translator("DequantizeLinear", check=_dequant_check)
def dequantize_linear(ctx: TranslateContext) -> Any:
    m = mb()
    if native_quantize(ctx.node.inputs[0].producer(), ctx.ios):
        y = m.dequantize(input=ctx.x(0), **_native_args(ctx, ctx.node, np.float32))
        return cast(y, "fp16") if ctx.onnx_out_type(0) == ir.DataType.FLOAT16 else y
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

"""Bitwise integer ops: BitwiseAnd BitwiseOr BitwiseXor BitwiseNot BitShift.

MIL has no bitwise ops, but integer arithmetic says the same thing exactly. Integers travel as
int32 (``context.MIL_DTYPES``); a w-bit value (w = 8 for int8/uint8, 16, else 32) is its bits,
peeled off with ``mod 2`` and ``floor_div 2`` (an arithmetic shift, negative values included),
combined bit by bit, and summed back with their weights, the top bit's negative for a signed
type (two's complement)::

    a AND b = sum_k  a_k * b_k * 2^k            (k = w - 1: weight -2^(w-1) when signed)
    a OR b  = sum_k (a_k + b_k - a_k * b_k) * 2^k
    a XOR b = sum_k (a_k + b_k - 2 a_k b_k) * 2^k
    NOT a   = -1 - a (signed), 2^w - 1 - a (unsigned below 32 bits)
    a << s  = a * 2^s mod 2^w,   a >> s = floor(a / 2^s)    (s >= w: 0)

64-bit types hold int32 values here (a note says so for inputs); their bits above 31 follow the
sign, as two's complement extends it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import cast, mb

_D = ir.DataType
_WIDTH = {_D.INT8: 8, _D.UINT8: 8, _D.INT16: 16, _D.UINT16: 16}
_UNSIGNED = {_D.UINT8, _D.UINT16, _D.UINT32, _D.UINT64}


def _width(dtype: ir.DataType | None) -> tuple[int, bool]:
    """(bits held, signed) of an ONNX integer type as it travels in int32."""
    return _WIDTH.get(dtype, 32), dtype not in _UNSIGNED  # type: ignore[arg-type]


def _top_weight(width: int, signed: bool) -> np.int32:
    # 32 bits: the int32 pattern's top bit is -2^31 whether the ONNX type is signed or not
    return np.int32(-(1 << (width - 1)) if signed or width == 32 else 1 << (width - 1))


def _bitwise(ctx: TranslateContext, combine: Any) -> Any:
    m = mb()
    width, signed = _width(ctx.onnx_out_type(0))
    a, b = cast(ctx.x(0), "int32"), cast(ctx.x(1), "int32")
    total = None
    for k in range(width):
        bit_a, bit_b = m.mod(x=a, y=np.int32(2)), m.mod(x=b, y=np.int32(2))
        weight = _top_weight(width, signed) if k == width - 1 else np.int32(1 << k)
        term = m.mul(x=combine(bit_a, bit_b), y=weight)
        total = term if total is None else m.add(x=total, y=term)
        if k < width - 1:
            a, b = m.floor_div(x=a, y=np.int32(2)), m.floor_div(x=b, y=np.int32(2))
    return total


@translator("BitwiseAnd")
def bitwise_and(ctx: TranslateContext) -> Any:
    return _bitwise(ctx, lambda p, q: mb().mul(x=p, y=q))


@translator("BitwiseOr")
def bitwise_or(ctx: TranslateContext) -> Any:
    m = mb()
    return _bitwise(ctx, lambda p, q: m.sub(x=m.add(x=p, y=q), y=m.mul(x=p, y=q)))


@translator("BitwiseXor")
def bitwise_xor(ctx: TranslateContext) -> Any:
    m = mb()
    return _bitwise(ctx, lambda p, q: m.mod(x=m.add(x=p, y=q), y=np.int32(2)))


@translator("BitwiseNot")
def bitwise_not(ctx: TranslateContext) -> Any:
    width, signed = _width(ctx.onnx_out_type(0))
    top = np.int32(-1 if signed or width == 32 else (1 << width) - 1)
    return mb().sub(x=top, y=cast(ctx.x(0), "int32"))


@translator("BitShift")
def bit_shift(ctx: TranslateContext) -> Any:
    """Shift amounts of ``w`` or more give 0 (every bit shifted out); the powers of two come
    from a table indexed by the amount (exact, where ``pow`` would go through float)."""
    m = mb()
    width, _ = _width(ctx.onnx_out_type(0))
    x, shift = cast(ctx.x(0), "int32"), cast(ctx.x(1), "int32")
    powers = np.array([1 << k for k in range(31)], np.int32)
    index = m.minimum(x=m.maximum(x=shift, y=np.int32(0)), y=np.int32(30))
    power = m.gather(x=powers, indices=index, axis=0)
    if str(ctx.attr("direction")) == "LEFT":
        moved = m.mul(x=x, y=power)
        if width < 32:
            moved = m.mod(x=moved, y=np.int32(1 << width))
    else:
        moved = m.floor_div(x=x, y=power)
    return m.select(cond=m.less(x=shift, y=np.int32(min(width, 31))), a=moved,
                    b=m.mul(x=moved, y=np.int32(0)))

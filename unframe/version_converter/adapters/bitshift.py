"""BitShift: signed integers arrived at opset 28 (BitShift-11 takes uint8/16/32/64 only).

BitShift-28 on a signed T shifts right arithmetically (sign-extending) and discards the bits a left
shift moves past the sign bit; a shift Y that is negative or >= the bit width w of T gives the sign
fill: -1 for a right shift of a negative X, else 0. Downgraded by computing on the two's complement
bits in uint64, where every op used takes uint64 from opset 11 (Less/Greater 9, Add/Sub/Mul 7,
BitShift 11) and onnxruntime implements them::

    z = BitShift_28(x: int8, y: int8, direction=LEFT)
      ->  u = Cast(x, uint64); s = Cast(y, uint64); ok = Cast(Less(s, w), uint64)
          z = Cast(Mul(BitShift_11(u, Mul(s, ok), LEFT), ok), int8)

    z = BitShift_28(x: int8, y: int8, direction=RIGHT)
      ->  u = Cast(x, uint64); s = Cast(y, uint64); big = Cast(Greater(s, 63), uint64)
          c = Sub(s, Mul(Sub(s, 63), big))                                   # min(s, 63)
          z = Cast(Sub(BitShift_11(Add(u, 2^63), c, RIGHT), BitShift_11(2^63, c, RIGHT)), int8)

Why it is exact:

* Cast's integer conversions keep the low bits (two's complement): Cast(x, uint64) is x modulo
  2^64 (sign-extended), Cast(y, uint64) maps a negative y to a value >= 2^63, and the final Cast to
  T keeps the low w bits, which is the result whenever the uint64 result is congruent to it
  modulo 2^w. Multiplying by the 0/1 flag ``ok`` selects without Where (Where has no uint64
  kernel in onnxruntime), and the shift amount never reaches 64 (undefined in C++ runtimes).
* Left: for 0 <= y < w, u << y is x << y modulo 2^64, whose low w bits are BitShift-28's result;
  otherwise the shift is by 0 and the product with ok = 0 is the fill 0.
* Right: u + 2^63 (mod 2^64) is x + 2^63 as an unsigned number; shifting it right by c <= 63 gives
  floor(x / 2^c) + 2^(63 - c), and 2^63 >> c is 2^(63 - c), so the difference is floor(x / 2^c),
  the arithmetic shift. For y >= w or y < 0, c = min(s, 63) >= w - 1, and with
  -2^(w-1) <= x < 2^(w-1) floor(x / 2^c) is 0 for x >= 0 and -1 for x < 0: the fill.

Unsigned T keeps the generic step: BitShift-11 already takes it, and for a shift >= w onnxruntime's
BitShift-11 gives the 0 that BitShift-28 specifies.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from unframe.version_converter.context import Step
from unframe.version_converter.generic import generic_step
from unframe.version_converter.registry import adapter

_U64 = ir.DataType.UINT64
_SIGNED_BITS = {ir.DataType.INT8: 8, ir.DataType.INT16: 16, ir.DataType.INT32: 32, ir.DataType.INT64: 64}
_TOP = np.uint64(1 << 63)


@adapter("BitShift", 28, 27)
def bitshift_28_27(node: ir.Node, step: Step) -> None:
    x, y = node.inputs[0], node.inputs[1]
    dtype = x.type.dtype if isinstance(x.type, ir.TensorType) else None
    if dtype not in _SIGNED_BITS:
        generic_step(node, step)
        return
    final = int(step.walker.targets.get("", step.to_version))
    if final < 11:
        step.refuse("BitShift does not exist before opset 11")
    u, s = _cast(step, x, _U64), _cast(step, y, _U64)
    if step.attr("direction") == "LEFT":
        shifted = _left(step, u, s, _SIGNED_BITS[dtype])
    else:
        shifted = _right(step, u, s)
    out = _cast(step, shifted, dtype)
    out.shape = node.outputs[0].shape
    step.replace_with([out])


def _left(step: Step, u: ir.Value, s: ir.Value, bits: int) -> ir.Value:
    ok = _cast(step, _bool(step, "Less", s, step.const(np.uint64(bits))), _U64)
    shifted = _u64(step, "BitShift", [u, _u64(step, "Mul", [s, ok])], direction="LEFT")
    return _u64(step, "Mul", [shifted, ok])


def _right(step: Step, u: ir.Value, s: ir.Value) -> ir.Value:
    limit = step.const(np.uint64(63))
    big = _cast(step, _bool(step, "Greater", s, limit), _U64)
    clamped = _u64(step, "Sub", [s, _u64(step, "Mul", [_u64(step, "Sub", [s, limit]), big])])
    top = step.const(_TOP)
    offset = _u64(step, "BitShift", [_u64(step, "Add", [u, top]), clamped], direction="RIGHT")
    return _u64(step, "Sub", [offset, _u64(step, "BitShift", [top, clamped], direction="RIGHT")])


def _cast(step: Step, value: ir.Value, dtype: ir.DataType) -> ir.Value:
    out = step.op("Cast", [value], {"to": dtype})
    out.type, out.shape = ir.TensorType(dtype), value.shape
    return out


def _bool(step: Step, op: str, a: ir.Value, b: ir.Value) -> ir.Value:
    out = step.op(op, [a, b])
    out.type = ir.TensorType(ir.DataType.BOOL)
    return out


def _u64(step: Step, op: str, inputs: list[ir.Value], **attrs: str) -> ir.Value:
    out = step.op(op, inputs, attrs)
    out.type = ir.TensorType(_U64)
    return out

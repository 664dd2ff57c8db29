"""Elementwise math, comparison and logic: Add Sub Mul Div Pow Mod Max Min Sum Mean Abs Neg Exp
Log Sqrt Reciprocal Floor Ceil Round Sign trig/hyperbolic, IsNaN IsInf, Equal Greater Less
GreaterOrEqual LessOrEqual And Or Xor Not, Where, Clip."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import (
    cast,
    dtype_name,
    in_fp32,
    is_float,
    mb,
    round_half_even,
    scalar,
)


def align(a: Any, b: Any) -> tuple[Any, Any]:
    """Give both operands one element type: a constant follows the other operand (ONNX graphs
    from fp16 exporters sometimes carry fp32 constants that MIL, typed strictly, refuses)."""
    if dtype_name(a) == dtype_name(b):
        return a, b
    if b.val is not None:
        return a, cast(b, dtype_name(a))
    return cast(a, dtype_name(b)), b


def _binary(mil_op: str) -> Any:
    def fn(ctx: TranslateContext) -> Any:
        a, b = align(ctx.x(0), ctx.x(1))
        return getattr(mb(), mil_op)(x=a, y=b)

    fn.__name__ = f"translate_{mil_op}"
    return fn


for _onnx, _mil in {"Add": "add", "Sub": "sub", "Mul": "mul"}.items():
    translator(_onnx)(_binary(_mil))


@translator("Div")
def div(ctx: TranslateContext) -> Any:
    """Float division, or integer division truncating toward zero as ONNX does."""
    m, a, b = mb(), ctx.x(0), ctx.x(1)
    if is_float(a):
        return m.real_div(x=a, y=b)
    with in_fp32(ctx):
        q = m.real_div(x=cast(a, "fp32"), y=cast(b, "fp32"))
        trunc = m.mul(x=m.sign(x=q), y=m.floor(x=m.abs(x=q)))
        return m.cast(x=trunc, dtype=dtype_name(a))


@translator("Pow")
def pow_(ctx: TranslateContext) -> Any:
    m, a, b = mb(), ctx.x(0), ctx.x(1)
    out = dtype_name(a)
    work = "fp32" if out in ("int32", "fp32") or dtype_name(b) == "fp32" else out
    if out != "int32":
        return cast(m.pow(x=cast(a, work), y=cast(b, work)), out)
    with in_fp32(ctx):
        return cast(m.pow(x=cast(a, work), y=cast(b, work)), out)


@translator("Mod")
def mod(ctx: TranslateContext) -> Any:
    """fmod=0: the result takes the divisor's sign (floor modulo); fmod=1: the dividend's (C fmod)."""
    m, a, b = mb(), ctx.x(0), ctx.x(1)
    floor_mod = not int(ctx.attr("fmod", 0))
    if floor_mod and is_float(a):
        return m.mod(x=a, y=b)
    with in_fp32(ctx) if not is_float(a) else contextlib.nullcontext():
        af, bf = (a, b) if is_float(a) else (cast(a, "fp32"), cast(b, "fp32"))
        q = m.real_div(x=af, y=bf)
        whole = m.floor(x=q) if floor_mod else m.mul(x=m.sign(x=q), y=m.floor(x=m.abs(x=q)))
        return cast(m.sub(x=af, y=m.mul(x=whole, y=bf)), dtype_name(a))


def _fold(mil_op: str, ctx: TranslateContext) -> Any:
    out = ctx.x(0)
    for i in range(1, len(ctx.inputs)):
        if ctx.has(i):
            out = getattr(mb(), mil_op)(x=out, y=ctx.x(i))
    return out


@translator("Max")
def max_(ctx: TranslateContext) -> Any:
    return _fold("maximum", ctx)


@translator("Min")
def min_(ctx: TranslateContext) -> Any:
    return _fold("minimum", ctx)


@translator("Sum")
def sum_(ctx: TranslateContext) -> Any:
    return _fold("add", ctx)


@translator("Mean")
def mean(ctx: TranslateContext) -> Any:
    total = _fold("add", ctx)
    count = sum(1 for i in range(len(ctx.inputs)) if ctx.has(i))
    return mb().real_div(x=total, y=scalar(count, total))


def _unary(mil_op: str) -> Any:
    def fn(ctx: TranslateContext) -> Any:
        return getattr(mb(), mil_op)(x=ctx.x(0))

    fn.__name__ = f"translate_{mil_op}"
    return fn


for _onnx, _mil in {"Exp": "exp", "Log": "log", "Sqrt": "sqrt",
                    "Floor": "floor", "Ceil": "ceil", "Sin": "sin", "Cos": "cos", "Tan": "tan",
                    "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh",
                    "Cosh": "cosh", "Atanh": "atanh"}.items():
    translator(_onnx)(_unary(_mil))


@translator("Reciprocal")
def reciprocal(ctx: TranslateContext) -> Any:
    """1 / x exactly: MIL's ``inverse`` computes 1 / (x + epsilon) with epsilon 1e-4 by default,
    which is 0.6% off at x = 0.017 (an RMSNorm's mean square, for one)."""
    x = ctx.x(0)
    return mb().real_div(x=scalar(1, x), y=x)


@translator("Abs")
def abs_(ctx: TranslateContext) -> Any:
    return mb().abs(x=ctx.x(0))


@translator("Neg")
def neg(ctx: TranslateContext) -> Any:
    return mb().mul(x=ctx.x(0), y=scalar(-1, ctx.x(0)))


@translator("Sign")
def sign(ctx: TranslateContext) -> Any:
    x = ctx.x(0)
    if is_float(x):
        return mb().sign(x=x)
    with in_fp32(ctx):
        return mb().cast(x=mb().sign(x=cast(x, "fp32")), dtype=dtype_name(x))


@translator("Round")
def round_(ctx: TranslateContext) -> Any:
    return round_half_even(ctx.x(0))


@translator("Asinh")
def asinh(ctx: TranslateContext) -> Any:
    """log(x + sqrt(x^2 + 1)), odd-symmetrized so large negative x does not cancel."""
    m, x = mb(), ctx.x(0)
    ax = m.abs(x=x)
    r = m.log(x=m.add(x=ax, y=m.sqrt(x=m.add(x=m.mul(x=ax, y=ax), y=scalar(1, x)))))
    return m.mul(x=m.sign(x=x), y=r)


@translator("Acosh")
def acosh(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    return m.log(x=m.add(x=x, y=m.sqrt(x=m.sub(x=m.mul(x=x, y=x), y=scalar(1, x)))))


@translator("IsNaN")
def is_nan(ctx: TranslateContext) -> Any:
    x = ctx.x(0)
    return mb().not_equal(x=x, y=x)


@translator("IsInf")
def is_inf(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    pos = m.equal(x=x, y=scalar(np.inf, x))
    neg_ = m.equal(x=x, y=scalar(-np.inf, x))
    want_pos, want_neg = int(ctx.attr("detect_positive", 1)), int(ctx.attr("detect_negative", 1))
    if want_pos and want_neg:
        return m.logical_or(x=pos, y=neg_)
    if want_pos:
        return pos
    if want_neg:
        return neg_
    return m.logical_and(x=pos, y=neg_)  # always false, with the right shape


def _compare(mil_op: str) -> Any:
    def fn(ctx: TranslateContext) -> Any:
        a, b = align(ctx.x(0), ctx.x(1))  # bool operands arrive as int32 (legalize.py)
        return getattr(mb(), mil_op)(x=a, y=b)

    fn.__name__ = f"translate_{mil_op}"
    return fn


for _onnx, _mil in {"Equal": "equal", "Greater": "greater", "Less": "less",
                    "GreaterOrEqual": "greater_equal", "LessOrEqual": "less_equal"}.items():
    translator(_onnx)(_compare(_mil))


for _onnx, _mil in {"And": "logical_and", "Or": "logical_or", "Xor": "logical_xor"}.items():
    translator(_onnx)(_binary(_mil))


@translator("Not")
def not_(ctx: TranslateContext) -> Any:
    return mb().logical_not(x=ctx.x(0))


@translator("Where")
def where(ctx: TranslateContext) -> Any:
    m = mb()
    cond, (a, b) = ctx.x(0), align(ctx.x(1), ctx.x(2))
    if _smaller(a, cond) and _smaller(b, cond):
        # coremltools infers select's shape from a and b only: widen a to cover cond
        zeros = m.mul(x=m.cast(x=cond, dtype=dtype_name(a)), y=scalar(0, a))
        a = m.add(x=a, y=zeros)
    return m.select(cond=cond, a=a, b=b)


def _smaller(v: Any, cond: Any) -> bool:
    """Whether ``cond`` may broadcast ``v``: more dims, or a dim of 1 in ``v`` where ``cond``'s is
    larger or symbolic (a dynamic batch of the mask)."""
    vs, cs = list(v.shape), list(cond.shape)
    if len(vs) < len(cs):
        return True
    return any(d == 1 and not (isinstance(c, (int, np.integer)) and c == 1)
               for d, c in zip(vs[-len(cs):], cs, strict=False))


@translator("Clip")
def clip(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    lo, hi = ctx.const(1), ctx.const(2)
    if is_float(x) and ctx.has(1) and ctx.has(2) and lo is not None and hi is not None \
            and float(lo) <= float(hi):
        return m.clip(x=x, alpha=scalar(float(lo), x), beta=scalar(float(hi), x))
    out = x
    if ctx.has(1):
        out = m.maximum(x=out, y=ctx.x(1))
    if ctx.has(2):
        out = m.minimum(x=out, y=ctx.x(2))
    return out

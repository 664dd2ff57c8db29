"""Compute in a wider type when an older schema does not allow the node's dtype.

Used by the generic step on a downgrade whose only problems are dtypes. The type parameters
(``T``, ``T1``...) of the target schema whose bound dtype it does not allow are widened: every
input bound to one is Cast up, the op runs at the target on the wider type, and every output bound
to one is Cast back::

    y = Clip_13(x: int8, lo: int8, hi: int8)
      ->  y = Cast(Clip_11(Cast(x, float), Cast(lo, float), Cast(hi, float)), int8)

Inputs and outputs of other type parameters (indices, conditions, shapes) are left as they are.
Each rule below says why the result is the same:

* Selection and data movement (Max, Min, Clip, Where, Compress, OneHot's values, ReverseSequence,
  Unique, MaxPool, TopK, ReduceMax, ReduceMin): each output element is one of the input elements.
  A widening where every source value is a value of the wider type keeps the order and equality
  of the values, so the selected element is the same and Casting it back is exact. Two results
  are not input elements: an empty ReduceMax/ReduceMin gives the type's lowest/highest value, which
  Casts back correctly from a wider int for uint8/uint16 and from uint8 for bool, but not for signed
  ints (those widen only when the input's static shape has no zero dimension); a MaxPool window
  lying wholly in the padding would give the lowest value, so MaxPool widens only when every window
  holds an input element.
* Comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual) and IsInf: the bool output
  depends on the order/class of the values, which an exact widening keeps. Equal on uint64 only
  needs equality, which Cast to int64 (same width: every bit kept) keeps.
* Narrow-int arithmetic (Add, Sub, Mul, Div on int8/uint8/int16/uint16): computed in int32, or
  int64 for uint16 * uint16 whose product can exceed int32, so the wide result is the true
  integer result without overflow. Cast's integer narrowing discards the high bits (two's
  complement), and +, -, * modulo 2^n only depend on the operands modulo 2^n, so the Cast back
  gives the native wrapped result. Div's truncated quotient is the same in the wider type; its one
  overflow (-128 / -1) is 128 there and wraps back to -128 as natively.
* float16/bfloat16 arithmetic (Einsum, Celu, Elu, Range, QLinearMatMul's scales) is computed in
  float and rounded once by the Cast back. Every half value is a float, so this is at least as
  accurate as native half arithmetic, but NOT bit-identical to a runtime that rounds each
  intermediate to half. Range-27's default stash_type=1 specifies exactly this float computation.
* int64/uint64 Max/Min have no exact wider type: ``Where(Greater(a, b), a, b)`` (``Less`` for
  Min), chained over the inputs, selects the same element where Greater/Less and Where take the
  dtype at the final target (opset 9+); Where broadcasts like Max/Min. On uint64, which
  onnxruntime's Where lacks, Where selects the int64 reinterpretation of the bits (a same-width
  integer Cast keeps every bit both ways).

Below opset 9 (no Where, and Greater/Less/Equal take few types):

* int64/uint64 Greater/Less, and Max/Min, compare through exact halves: hi = Div(x, 2^32) (truncated),
  lo = x - hi * 2^32, both exact as doubles (|hi| <= 2^31, |lo| < 2^32). With truncated division
  the values sharing a hi form a contiguous run ordered by lo, and the runs are ordered by hi, so
  a > b iff hi_a > hi_b or (hi_a == hi_b and lo_a > lo_b). Max/Min then select a * m + b * (1 - m)
  with m the 0/1 pick in the integer type: one term is 0 and the other the chosen value, so
  nothing overflows.
* float Equal (Equal-7 takes bool/int32/int64 only): a == b iff neither a < b nor a > b, and
  neither is NaN; x is NaN iff neither x < +inf nor x > -inf.

Exact widenings: int8/uint8/int16/uint16 to int32, int64, float or double; int32/uint32 to int64
or double; float16/bfloat16 to float or double; bool to unsigned ints (reductions). The Casts
must exist at the final target for both types (bfloat16 Casts need opset 13). Anything else stays
refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from unframe import opset as facts
from unframe.version_converter.context import Step
from unframe.version_converter.dynamic import select_by_product

_D = ir.DataType
SELECT = {"Max", "Min", "Clip", "Where", "Compress", "OneHot", "ReverseSequence", "Unique", "MaxPool", "TopK",
          "ReduceMax", "ReduceMin"}
COMPARE = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsInf"}
INT_ARITH = {"Add", "Sub", "Mul", "Div"}
HALF_ARITH = {"Einsum", "Celu", "Elu", "Range", "QLinearMatMul"}
_NARROW_INTS = (_D.INT8, _D.UINT8, _D.INT16, _D.UINT16)
_HALVES = (_D.FLOAT16, _D.BFLOAT16)
# source dtype -> wider dtypes that hold every one of its values, preferred first
_EXACT: dict[ir.DataType, tuple[ir.DataType, ...]] = {
    **{d: (_D.INT32, _D.INT64, _D.FLOAT, _D.DOUBLE) for d in _NARROW_INTS},
    _D.INT32: (_D.INT64, _D.DOUBLE),
    _D.UINT32: (_D.INT64, _D.DOUBLE),
    **{d: (_D.FLOAT, _D.DOUBLE) for d in _HALVES},
}
_UNSIGNED_WIDE = (_D.UINT32, _D.UINT64)
_REDUCE = {"ReduceMax", "ReduceMin"}


def _type_str(dtype: ir.DataType) -> str:
    return f"tensor({dtype.name.lower()})"


def _allows(op: str, opset: int, index: int, *dtypes: ir.DataType) -> bool:
    """Whether ``op`` at ``opset`` takes every one of ``dtypes`` as its input ``index``."""
    from unframe.version_converter.types import allowed_types

    schema = facts.schema_at(op, opset)
    if schema is None:
        return False
    allowed = allowed_types(schema, schema.inputs, index) or frozenset()
    return all(_type_str(d) in allowed for d in dtypes)


def _candidates(node: ir.Node, step: Step, dtype: ir.DataType) -> tuple[ir.DataType, ...]:
    op = node.op_type
    if op in _REDUCE:
        return _reduce_candidates(node, step, dtype)
    if op == "MaxPool" and not _windows_all_inside(step):
        return ()
    if op in SELECT:
        return _EXACT.get(dtype, ())
    if op == "Equal" and dtype == _D.UINT64:
        return (_D.INT64,)  # a same-width reinterpretation: a bijection, so equality is kept (order is not)
    if op in COMPARE:
        return _EXACT.get(dtype, ())
    if op in INT_ARITH and dtype in _NARROW_INTS:
        return (_D.INT64,) if op == "Mul" and dtype == _D.UINT16 else (_D.INT32, _D.INT64)
    if op in HALF_ARITH and dtype in _HALVES:
        return (_D.FLOAT,)
    return ()


def _reduce_candidates(node: ir.Node, step: Step, dtype: ir.DataType) -> tuple[ir.DataType, ...]:
    """An empty ReduceMax/ReduceMin gives the type's lowest/highest value. For uint8/uint16 those
    (0, all ones) are the low bits of any wider int's lowest/highest (INT32_MIN = 0x80000000,
    INT32_MAX = 0x7fffffff), which the Cast back keeps; bool goes through uint8 (Cast(INT32_MIN,
    bool) would be true); a signed narrow type's are not (INT32_MIN -> 0, not -128), so signed ints
    widen only when no reduction can be empty."""
    if dtype == _D.BOOL:
        return (_D.UINT8, *_UNSIGNED_WIDE)
    if dtype in (_D.UINT8, _D.UINT16):
        return (_D.INT32, _D.INT64, *_UNSIGNED_WIDE)
    if dtype in _HALVES:
        return _EXACT[dtype]
    shape = step.static_shape(node.inputs[0])
    return _EXACT.get(dtype, ()) if shape is not None and all(shape) else ()


def _windows_all_inside(step: Step) -> bool:
    """Whether every MaxPool window holds an input element, so the result never is the padding's
    lowest value (which differs per type): unit dilations, floor mode, and each pad smaller than the
    kernel (an automatic SAME pad is at most kernel - 1)."""
    kernel = list(step.attr("kernel_shape", []))
    pads = list(step.attr("pads", [0] * 2 * len(kernel)))
    dilations = list(step.attr("dilations", [1] * len(kernel)))
    return (step.attr("ceil_mode", 0) == 0 and all(d == 1 for d in dilations)
            and len(pads) == 2 * len(kernel) and all(p < k for p, k in zip(pads, kernel * 2, strict=True)))


def _param_of(params: Sequence[Any], index: int) -> str | None:
    if not params:
        return None
    if index >= len(params) and params[-1].option.value != 2:  # beyond a non-variadic last input
        return None
    return params[min(index, len(params) - 1)].type_str


def _bad_params(node: ir.Node, step: Step) -> dict[str, ir.DataType] | None:
    """The target's type parameters whose bound dtype it does not allow -> that dtype; None when
    a value has no parameter of the schema or one parameter is bound to two dtypes."""
    from unframe.version_converter.types import allowed_types

    schema = step.to_schema
    bound: dict[str, ir.DataType] = {}
    bad: dict[str, ir.DataType] = {}
    for values, params in ((node.inputs, schema.inputs), (node.outputs, schema.outputs)):
        for i, value in enumerate(values):
            if value is None:
                continue
            param = _param_of(params, i)
            if param is None:
                return None
            if not isinstance(value.type, ir.TensorType):
                continue  # e.g. an untyped value inside an expansion: its parameter's other values decide
            dtype = value.type.dtype
            if bound.setdefault(param, dtype) != dtype:
                return None
            if _type_str(dtype) not in (allowed_types(schema, params, i) or frozenset()):
                bad[param] = dtype
    return bad


def _choose(node: ir.Node, step: Step, bad: dict[str, ir.DataType]) -> dict[str, ir.DataType] | None:
    """A wider dtype per bad type parameter that the target takes and that Casts reach at the final
    target; None when one has none."""
    final = min(int(step.walker.targets.get("", step.to_version)), step.to_version)
    constraints = {tc.type_param_str: set(tc.allowed_type_strs) for tc in step.to_schema.type_constraints}
    wide: dict[str, ir.DataType] = {}
    for param, dtype in bad.items():
        allowed = constraints.get(param, {param})  # a parameter may be a plain type: "tensor(float)"
        choice = next((w for w in _candidates(node, step, dtype)
                       if _type_str(w) in allowed and _allows("Cast", final, 0, dtype, w)), None)
        if choice is None:
            return None
        wide[param] = choice
    return wide


def widen(node: ir.Node, step: Step) -> bool:
    """Rewrite ``node`` to compute in a wider type at ``step.to_version``; False when no exact
    widening applies (the caller then refuses)."""
    if step.domain or step.upgrade or step.to_schema is None:
        return False
    bad = _bad_params(node, step)
    if not bad:
        return False
    wide = _choose(node, step, bad)
    if wide is None:
        return _select_by_compare(node, step, bad) or _before_where(node, step, bad)
    schema = step.to_schema
    inputs = []
    for i, value in enumerate(node.inputs):
        param = _param_of(schema.inputs, i)
        if value is not None and param in wide:
            cast = step.op("Cast", [value], {"to": wide[param]})
            cast.type, cast.shape = ir.TensorType(wide[param]), value.shape
            value = cast
        inputs.append(value)
    new = step.add_node(node.op_type, inputs, list(node.attributes.values()), num_outputs=len(node.outputs))
    results: list[ir.Value | None] = []
    for j, (old, out) in enumerate(zip(node.outputs, new.outputs, strict=True)):
        param = _param_of(schema.outputs, j)
        out.type, out.shape = old.type, old.shape
        if param in wide:
            out.type = ir.TensorType(wide[param])
            if old.uses() or old.is_graph_output():
                out = step.op("Cast", [out], {"to": bad[param]})
                out.type, out.shape = ir.TensorType(bad[param]), old.shape
        results.append(out if old.uses() or old.is_graph_output() else None)
    step.replace_with(results)
    return True


def _select_by_compare(node: ir.Node, step: Step, bad: dict[str, ir.DataType]) -> bool:
    """int64/uint64 Max/Min: a chain of Where(Greater(a, b), a, b) (Less for Min)."""
    compare = {"Max": "Greater", "Min": "Less"}.get(node.op_type)
    dtypes = set(bad.values())
    final = min(int(step.walker.targets.get("", step.to_version)), step.to_version)
    if compare is None or len(dtypes) != 1 or any(v is None for v in node.inputs):
        return False
    (dtype,) = dtypes
    if not (_allows(compare, final, 0, dtype) and _allows("Where", final, 1, dtype)
            and _allows(compare, step.to_version, 0, dtype) and _allows("Where", step.to_version, 1, dtype)):
        return False
    out = node.outputs[0]
    result = node.inputs[0]
    for value in node.inputs[1:]:
        pick = step.op(compare, [result, value])
        pick.type = ir.TensorType(_D.BOOL)
        result = _where(step, pick, result, value, dtype)
    if len(node.inputs) == 1:
        result = step.op("Identity", [result])
    result.type, result.shape = ir.TensorType(dtype), out.shape
    step.replace_with([result])
    return True


def _where(step: Step, pick: ir.Value, a: ir.Value, b: ir.Value, dtype: ir.DataType) -> ir.Value:
    """Where(pick, a, b); on uint64 (no onnxruntime kernel) it selects the int64 reinterpretation
    of the bits instead: a same-width integer Cast keeps every bit, so the round trip is exact."""
    if dtype != _D.UINT64:
        result = step.op("Where", [pick, a, b])
        result.type = ir.TensorType(dtype)
        return result
    bits = []
    for value in (a, b):
        cast = step.op("Cast", [value], {"to": _D.INT64})
        cast.type, cast.shape = ir.TensorType(_D.INT64), value.shape
        bits.append(cast)
    chosen = step.op("Where", [pick, *bits])
    chosen.type = ir.TensorType(_D.INT64)
    result = step.op("Cast", [chosen], {"to": dtype})
    result.type = ir.TensorType(dtype)
    return result


_LOW_COMPARE = {"Max": "Greater", "Min": "Less", "Greater": "Greater", "Less": "Less"}
_FLOATS = (_D.FLOAT, _D.DOUBLE, _D.FLOAT16)


def _before_where(node: ir.Node, step: Step, bad: dict[str, ir.DataType]) -> bool:
    """The forms for targets below 9 (see the module docstring): int64/uint64 order through exact
    halves, Max/Min by a 0/1 multiply, float Equal through Less/Greater."""
    dtypes = set(bad.values())
    if len(dtypes) != 1 or any(v is None for v in node.inputs) or not node.inputs:
        return False
    (dtype,) = dtypes
    out = node.outputs[0]
    if node.op_type == "Equal" and dtype in _FLOATS and len(node.inputs) == 2:
        result = _float_equal(step, *node.inputs, dtype)
    elif node.op_type in _LOW_COMPARE and dtype in (_D.INT64, _D.UINT64):
        if node.op_type in ("Greater", "Less") and len(node.inputs) != 2:
            return False
        result = node.inputs[0]
        for value in node.inputs[1:]:
            pick = _wide_int_compare(step, _LOW_COMPARE[node.op_type], result, value, dtype)
            result = pick if node.op_type in ("Greater", "Less") else select_by_product(step, pick, result, value, dtype)
        if len(node.inputs) == 1:
            result = step.op("Identity", [result])
    else:
        return False
    result.type, result.shape = out.type, out.shape
    step.replace_with([result])
    return True


def _typed(value: ir.Value, dtype: ir.DataType) -> ir.Value:
    value.type = ir.TensorType(dtype)
    return value


def _halves(step: Step, x: ir.Value, dtype: ir.DataType) -> tuple[ir.Value, ir.Value]:
    """(hi, lo) of an int64/uint64: hi = x / 2^32 truncated (as int64), lo = x - hi * 2^32 (double)."""
    import numpy as np

    unit = step.const(np.asarray(1 << 32, dtype=dtype.numpy()))
    hi = _typed(step.op("Div", [x, unit]), dtype)
    lo = _typed(step.op("Sub", [x, _typed(step.op("Mul", [hi, unit]), dtype)]), dtype)
    hi_int = hi if dtype == _D.INT64 else _typed(step.op("Cast", [hi], {"to": _D.INT64}), _D.INT64)
    return hi_int, _typed(step.op("Cast", [lo], {"to": _D.DOUBLE}), _D.DOUBLE)


def _wide_int_compare(step: Step, op: str, a: ir.Value, b: ir.Value, dtype: ir.DataType) -> ir.Value:
    """a > b (op Greater) or a < b (Less) for int64/uint64 with double and int64 comparisons only."""
    hi_a, lo_a = _halves(step, a, dtype)
    hi_b, lo_b = _halves(step, b, dtype)
    hi_a_d = _typed(step.op("Cast", [hi_a], {"to": _D.DOUBLE}), _D.DOUBLE)
    hi_b_d = _typed(step.op("Cast", [hi_b], {"to": _D.DOUBLE}), _D.DOUBLE)
    by_hi = _typed(step.op(op, [hi_a_d, hi_b_d]), _D.BOOL)
    same_hi = _typed(step.op("Equal", [hi_a, hi_b]), _D.BOOL)
    by_lo = _typed(step.op("And", [same_hi, _typed(step.op(op, [lo_a, lo_b]), _D.BOOL)]), _D.BOOL)
    return _typed(step.op("Or", [by_hi, by_lo]), _D.BOOL)


def _float_equal(step: Step, a: ir.Value, b: ir.Value, dtype: ir.DataType) -> ir.Value:
    """a == b on floats with Less/Greater/And/Or/Not: ordered neither way and neither is NaN."""
    import numpy as np

    def boolean(op: str, *inputs: ir.Value) -> ir.Value:
        return _typed(step.op(op, list(inputs)), _D.BOOL)

    inf = step.const(np.asarray(np.inf, dtype=dtype.numpy()))
    minus_inf = step.const(np.asarray(-np.inf, dtype=dtype.numpy()))

    def is_number(x: ir.Value) -> ir.Value:
        return boolean("Or", boolean("Less", x, inf), boolean("Greater", x, minus_inf))

    unordered = boolean("Not", boolean("Or", boolean("Less", a, b), boolean("Greater", a, b)))
    return boolean("And", boolean("And", unordered, is_number(a)), is_number(b))

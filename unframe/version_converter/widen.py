"""Compute in a wider type when an older schema does not allow the node's dtype.

Used by the generic step on a downgrade whose only problems are dtypes. Only for ops whose result
is a selection or a comparison of their inputs, where computing on exactly widened values gives
the same answer:

* Max / Min: Cast every input to a wider type, compute, Cast the result back. The result is one
  of the inputs, so casting it back is exact.
* Equal / Less / Greater / LessOrEqual / GreaterOrEqual: Cast the inputs; the bool output is
  unchanged.

A widening is exact when every value of the source type is a value of the wider one:
int8/uint8/int16/uint16 to int32, int64, double or float; int32/uint32 to int64 or double;
float16/bfloat16 to float or double. int64/uint64 have no exact wider type here. The Casts must
exist at the final target for both types (bfloat16 Casts need opset 13). Anything else stays
refused.
"""

from __future__ import annotations

import onnx.defs
import onnx_ir as ir

from unframe.version_converter.context import Step

_D = ir.DataType
SELECT = {"Max", "Min"}
COMPARE = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}
# source dtype -> wider dtypes that hold every one of its values, preferred first
_EXACT: dict[ir.DataType, tuple[ir.DataType, ...]] = {
    _D.INT8: (_D.INT32, _D.INT64, _D.DOUBLE, _D.FLOAT),
    _D.UINT8: (_D.INT32, _D.INT64, _D.DOUBLE, _D.FLOAT),
    _D.INT16: (_D.INT32, _D.INT64, _D.DOUBLE, _D.FLOAT),
    _D.UINT16: (_D.INT32, _D.INT64, _D.DOUBLE, _D.FLOAT),
    _D.INT32: (_D.INT64, _D.DOUBLE),
    _D.UINT32: (_D.INT64, _D.DOUBLE),
    _D.FLOAT16: (_D.FLOAT, _D.DOUBLE),
    _D.BFLOAT16: (_D.FLOAT, _D.DOUBLE),
}


def _type_str(dtype: ir.DataType) -> str:
    return f"tensor({dtype.name.lower()})"


def _cast_allows(opset: int, *dtypes: ir.DataType) -> bool:
    try:
        schema = onnx.defs.get_schema("Cast", opset, "")
    except Exception:
        return False
    allowed = set()
    for tc in schema.type_constraints:
        allowed |= set(tc.allowed_type_strs)
    return all(_type_str(d) in allowed for d in dtypes)


def widen(node: ir.Node, step: Step) -> bool:
    """Rewrite ``node`` to compute in a wider type at ``step.to_version``; False when no exact
    widening applies (the caller then refuses)."""
    if step.domain or node.op_type not in SELECT | COMPARE or step.upgrade:
        return False
    inputs = list(node.inputs)
    dtypes = {v.type.dtype for v in inputs if v is not None and isinstance(v.type, ir.TensorType)}
    if len(dtypes) != 1 or any(v is None for v in inputs):
        return False
    (dtype,) = dtypes
    from unframe.version_converter.generic import _allowed

    allowed = _allowed(step.to_schema, step.to_schema.inputs, 0) or frozenset()
    final = int(step.walker.targets.get("", step.to_version))
    wide = next((w for w in _EXACT.get(dtype, ()) if _type_str(w) in allowed
                 and _cast_allows(min(final, step.to_version), dtype, w)), None)
    if wide is None:
        return False
    cast_inputs = []
    for value in inputs:
        cast = step.op("Cast", [value], {"to": wide})
        cast.type, cast.shape = ir.TensorType(wide), value.shape
        cast_inputs.append(cast)
    result = step.op(node.op_type, cast_inputs)
    out = node.outputs[0]
    if node.op_type in SELECT:
        result.type, result.shape = ir.TensorType(wide), out.shape
        result = step.op("Cast", [result], {"to": dtype})
        result.type = ir.TensorType(dtype)
    else:
        result.type = ir.TensorType(_D.BOOL)
    result.shape = out.shape
    step.replace_with([result])
    return True

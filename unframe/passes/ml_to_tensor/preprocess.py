"""Scaler, Normalizer, Binarizer, Imputer, OneHotEncoder, LabelEncoder (numbers),
ArrayFeatureExtractor, FeatureVectorizer: element-wise and lookup ops, as onnxruntime computes them.

Before / after (one line each)::

    Scaler(x)                 ->  (Cast(x, float) - offset) * scale
    Normalizer(x, MAX|L1|L2)  ->  x / d, d = max(x) | sum|x| | sqrt(sum x^2) per row (d == 0: x)
    Binarizer(x)              ->  Cast(x > threshold, type of x)
    Imputer(x)                ->  Where(x == replaced (IsNaN for NaN), imputed, x)
    OneHotEncoder(x)          ->  Cast(Equal(Unsqueeze(trunc(x), -1), categories), float)
    LabelEncoder(x)           ->  keys matched with Equal, value picked by ArgMax, else default
    ArrayFeatureExtractor(x,i)->  Gather(x, i, axis=-1)   ([1, k] for a 1-D x)
    FeatureVectorizer(a, b..) ->  Concat(first d_i columns of each, zero-padded, as float)

A numeric OneHotEncoder matches the integer part of ``x`` (truncated toward zero) against its
categories, and Normalizer's MAX divides by the row's largest value ignoring NaN, as onnxruntime
does (measured on 1.31).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from unframe.passes.ml_to_tensor.builder import Emitter
from unframe.passes.ml_to_tensor.registry import LowerContext, Unsupported, attr_value, lowering

F = ir.DataType.FLOAT
B = ir.DataType.BOOL
I64 = ir.DataType.INT64


def as_float(emit: Emitter, x: ir.Value) -> ir.Value:
    return emit.cast(x, F)


def trunc(emit: Emitter, x: ir.Value) -> ir.Value:
    """Toward zero: Floor above 0, Ceil below (ONNX has no Trunc); NaN stays NaN."""
    negative = emit.op("Less", [x, emit.scalar(0.0, np.float32)], dtype=B)
    return emit.where(negative, emit.op("Ceil", [x], dtype=F), emit.op("Floor", [x], dtype=F))


@lowering("Scaler", summary="(Cast(x) - offset) * scale")
def scaler(ctx: LowerContext) -> Sequence[ir.Value]:
    emit = ctx.emit
    offset = np.asarray(ctx.attr("offset", [0.0]), np.float32)
    scale = np.asarray(ctx.attr("scale", [1.0]), np.float32)
    x = as_float(emit, ctx.x)
    x = emit.op("Sub", [x, emit.const(offset, "offset")], dtype=F)
    return [emit.op("Mul", [x, emit.const(scale, "scale")], dtype=F)]


@lowering("Normalizer", summary="x / (max | sum|x| | sqrt(sum x^2)) per row")
def normalizer(ctx: LowerContext) -> Sequence[ir.Value]:
    emit = ctx.emit
    x = as_float(emit, ctx.x)
    norm = ctx.attr("norm", "MAX")
    if norm == "MAX":
        finite = emit.where(emit.op("IsNaN", [x], dtype=B), emit.scalar(-np.inf, np.float32), x)
        d = emit.reduce("ReduceMax", finite, [-1], keepdims=True)
    elif norm == "L1":
        d = emit.reduce("ReduceSum", emit.op("Abs", [x], dtype=F), [-1], keepdims=True)
    elif norm == "L2":
        d = emit.op("Sqrt", [emit.reduce("ReduceSum", emit.op("Mul", [x, x], dtype=F), [-1],
                                         keepdims=True)], dtype=F)
    else:
        raise Unsupported(f"unknown norm {norm!r}")
    zero = emit.op("Equal", [d, emit.scalar(0.0, np.float32)], dtype=B)
    d = emit.where(zero, emit.scalar(1.0, np.float32), d)
    return [emit.op("Div", [x, d], dtype=F)]


@lowering("Binarizer", summary="Cast(x > threshold)")
def binarizer(ctx: LowerContext) -> Sequence[ir.Value]:
    emit = ctx.emit
    x = ctx.x
    above = emit.op("Greater", [x, emit.const(np.asarray(ctx.attr("threshold", 0.0), _np(x)),
                                              "threshold")], dtype=B)
    return [emit.cast(above, x.dtype or F)]


def _np(x: ir.Value) -> np.dtype:
    return np.dtype(x.dtype.numpy()) if x.dtype is not None else np.dtype(np.float32)


@lowering("Imputer", summary="Where(x == replaced_value, imputed, x)")
def imputer(ctx: LowerContext) -> Sequence[ir.Value]:
    emit = ctx.emit
    x = ctx.x
    floats = ctx.attr("imputed_value_floats")
    if floats:
        replaced = float(ctx.attr("replaced_value_float", 0.0))
        imputed = np.asarray(floats, _np(x))
        hit = emit.op("IsNaN", [x], dtype=B) if np.isnan(replaced) else \
            emit.op("Equal", [x, emit.const(np.asarray(replaced, _np(x)), "replaced")], dtype=B)
    else:
        replaced_i = int(ctx.attr("replaced_value_int64", 0))
        imputed = np.asarray(ctx.attr("imputed_value_int64s", [0]), _np(x))
        hit = emit.op("Equal", [x, emit.const(np.asarray(replaced_i, _np(x)), "replaced")], dtype=B)
    return [emit.where(hit, emit.const(imputed, "imputed"), x)]


@lowering("OneHotEncoder",
          summary="Equal(trunc(x), categories) as float (strings: see host-side mappings)")
def one_hot(ctx: LowerContext) -> Sequence[ir.Value]:
    emit = ctx.emit
    x = ctx.x
    strings = ctx.attr("cats_strings")
    if strings:  # a string input kept as strings (onnx target): Equal takes strings from opset 19
        if emit.opset < 19:
            raise Unsupported("OneHotEncoder on strings needs opset 19 (string Equal)")
        cats = emit.const(np.asarray(strings, dtype=object), "categories")
        hit = emit.op("Equal", [emit.unsqueeze(x, [-1]), cats], dtype=B)
        return [emit.cast(hit, F)]
    cats_i = np.asarray(ctx.attr("cats_int64s", []), np.int64)
    if x.dtype in (ir.DataType.INT64, ir.DataType.INT32):
        hit = emit.op("Equal", [emit.unsqueeze(emit.cast(x, I64), [-1]), emit.const(cats_i, "categories")],
                      dtype=B)
    else:
        value = trunc(emit, as_float(emit, x))
        hit = emit.op("Equal", [emit.unsqueeze(value, [-1]),
                                emit.const(cats_i.astype(np.float32), "categories")], dtype=B)
    return [emit.cast(hit, F)]


# -- LabelEncoder ----------------------------------------------------------------------------------

_KEYS = ("keys_int64s", "keys_floats", "keys_strings", "keys_tensor")
_VALUES = ("values_int64s", "values_floats", "values_strings", "values_tensor")


def _table(node: ir.Node, names: Sequence[str]) -> np.ndarray | None:
    for name in names:
        value = attr_value(node, name)
        if value is None or (isinstance(value, list) and not value):
            continue
        if name.endswith("strings"):
            return np.asarray(value, dtype=object)
        if name.endswith("int64s"):
            return np.asarray(value, np.int64)
        if name.endswith("floats"):
            return np.asarray(value, np.float32)
        return np.asarray(value).reshape(-1)
    return None


def _default(node: ir.Node, values: np.ndarray) -> np.ndarray:
    tensor = attr_value(node, "default_tensor")
    if tensor is not None:
        return np.asarray(tensor).reshape(-1)[:1].astype(values.dtype)
    if values.dtype == object:
        return np.asarray([attr_value(node, "default_string", "_Unused")], dtype=object)
    if values.dtype.kind == "f":
        return np.asarray([attr_value(node, "default_float", -0.0)], dtype=values.dtype)
    return np.asarray([attr_value(node, "default_int64", -1)], dtype=values.dtype)


def _check_label_encoder(node: ir.Node) -> list[str]:
    keys = _table(node, _KEYS)
    values = _table(node, _VALUES)
    if keys is None or values is None or len(keys) != len(values):
        return ["keys and values are missing or of different lengths"]
    return []


@lowering("LabelEncoder", check=_check_label_encoder,
          summary="Equal against the keys, ArgMax picks the value, Where the default")
def label_encoder(ctx: LowerContext) -> Sequence[ir.Value]:
    emit = ctx.emit
    node = ctx.node
    keys, values = _table(node, _KEYS), _table(node, _VALUES)
    if keys is None or values is None:
        raise Unsupported("keys or values missing")
    if keys.dtype == object and emit.opset < 19:
        raise Unsupported("LabelEncoder on strings needs opset 19 (string Equal)")
    x = ctx.x
    hit = emit.op("Equal", [emit.unsqueeze(x, [-1]), emit.const(keys, "keys")], dtype=B)  # [..., K]
    found = emit.reduce("ReduceMax", emit.cast(hit, ir.DataType.INT32), [-1], keepdims=False)
    index = emit.op("ArgMax", [emit.cast(hit, ir.DataType.INT32)],
                    {"axis": -1, "keepdims": 0}, dtype=I64)
    picked = emit.gather(emit.const(values, "values"), index)
    default = emit.const(_default(node, values), "default")
    matched = emit.op("Greater", [found, emit.const(np.asarray(0, np.int32), "zero")], dtype=B)
    return [emit.where(matched, picked, default)]


# -- ArrayFeatureExtractor / FeatureVectorizer -----------------------------------------------------

@lowering("ArrayFeatureExtractor", summary="Gather(x, indices, axis=-1)")
def array_feature_extractor(ctx: LowerContext) -> Sequence[ir.Value]:
    emit = ctx.emit
    x = ctx.x
    index = ctx.node.inputs[1]
    if index is None:
        raise Unsupported("the indices input is missing")
    flat = emit.reshape(emit.cast(index, I64), [-1])
    out = emit.op("Gather", [x, flat], {"axis": -1}, dtype=x.dtype)
    rank = len(x.shape) if x.shape is not None else None
    if rank == 1:  # onnxruntime answers [1, k] for a 1-D input
        out = emit.unsqueeze(out, [0])
    return [out]


def _check_feature_vectorizer(node: ir.Node) -> list[str]:
    dims = attr_value(node, "inputdimensions", [])
    if len(dims) != len([v for v in node.inputs if v is not None]):
        return ["inputdimensions does not name one width per input"]
    return []


@lowering("FeatureVectorizer", check=_check_feature_vectorizer,
          summary="Concat of each input's first d columns (zero-padded) as float")
def feature_vectorizer(ctx: LowerContext) -> Sequence[ir.Value]:
    emit = ctx.emit
    parts = []
    for value, width in zip([v for v in ctx.node.inputs if v is not None],
                            [int(d) for d in ctx.attr("inputdimensions", [])], strict=True):
        x = as_float(emit, value)
        if x.shape is not None and len(x.shape) == 1:
            x = emit.unsqueeze(x, [0])
        have = x.shape[-1] if x.shape is not None and isinstance(x.shape[-1], int) else None
        if have is None or have > width:
            x = emit.op("Slice", [x, emit.const(np.asarray([0], np.int64), "starts"),
                                  emit.const(np.asarray([width], np.int64), "ends"),
                                  emit.const(np.asarray([-1], np.int64), "axes")], dtype=F)
        if have is None or have < width:  # onnxruntime pads a narrower input with zeros
            pads = emit.const(np.asarray([0, 0, 0, width], np.int64), "pads")
            x = emit.op("Pad", [x, pads], dtype=F)
            x = emit.op("Slice", [x, emit.const(np.asarray([0], np.int64), "starts"),
                                  emit.const(np.asarray([width], np.int64), "ends"),
                                  emit.const(np.asarray([-1], np.int64), "axes")], dtype=F)
        parts.append(x)
    return [emit.op("Concat", parts, {"axis": -1}, dtype=F) if len(parts) > 1 else parts[0]]

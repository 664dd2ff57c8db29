"""Integer CumSum, summed exactly in float32 digits, for TensorRT.

TensorRT's table lists CumSum for FP32, FP16 and BF16 only (onnx-tensorrt 10.15; tensorrt-rtx
1.7's parser and CPU builder also take INT32 and INT64, undocumented and not checked on a GPU
here). BLOOM sums its int64 ``attention_mask`` for its ALiBi positions; nothing in the graph
bounds those values (``prepare.FloatCumSumPass`` covers sums of a BOOL cast, each term 0 or 1).

A sum is linear, so an integer is split into base-16 digits, every digit summed in float32, and
the digit sums recombined in the integer type:

    x = sum_i d_i 16**i,  |d_i| <= 15   =>   cumsum(x) = sum_i cumsum(d_i) 16**i

A partial sum of digits is an integer of magnitude at most 15 N over an axis of N elements, which
float32 holds exactly while 15 N <= 2**24: exact for **any** int32/int64 values when the summed
axis has at most ``MAX_EXACT_LENGTH`` (1,118,481) elements. The recombination wraps modulo 2**64
(2**32) as the integer CumSum itself does. A static axis longer than that is left alone (pre-flight
names the int64 CumSum); a dynamic one is checked against the engine's optimization profile
before the build (``check_profile``).

The digits come from integer division by 16**i: whether the runtime truncates or floors a
negative quotient, ``q_i - 16 q_(i+1)`` is an exact remainder below 16 in magnitude and the digits
add back up to ``x``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.tensorrt.rewrite import NodeBuilder
from unframe.errors import UnsupportedError
from unframe.opset import DEFAULT_DOMAINS, FALLBACK_OPSET, main_opset
from unframe.passes import KEEP_FP32

BASE_BITS = 4
BASE = 1 << BASE_BITS
FLOAT_EXACT_INTEGERS = 1 << 24
MAX_EXACT_LENGTH = FLOAT_EXACT_INTEGERS // (BASE - 1)
DIGITS = {ir.DataType.INT64: 64 // BASE_BITS, ir.DataType.INT32: 32 // BASE_BITS}
# node metadata: the longest axis the rewrite is exact for, and the symbolic dim it sums over
EXACT_LENGTH_KEY = "unframe.tensorrt.exact_length"
AXIS_DIM_KEY = "unframe.tensorrt.summed_dim"


class DigitCumSumPass(ir.passes.InPlacePass):
    """Integer CumSum as float32 CumSum of base-16 digits (see the module docstring).

    Before::  p = CumSum(mask: int64[B, S], axis=1)
    After::   q = Div(Unsqueeze(mask, -1), [1, 16, ..., 16**15])             # int64[B, S, 16]
              d = Concat(q[..., :-1] - 16 q[..., 1:], q[..., -1:])             # digits, |d| <= 15
              s = Cast(CumSum(Cast(d, FLOAT), axis=1), INT64)                 # exact: 15 S <= 2**24
              p = s[..., 0] + 16 s[..., 1] + ... + 16**15 s[..., 15]              # by pairs, in int64

    Runs after ``FloatCumSumPass``, which sums a BOOL cast with one Cast each way. Needs a
    constant axis (the parser does too) and opset 13 (ReduceSum's axes input).
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if main_opset(model, default=FALLBACK_OPSET) < 13:
            return ir.passes.PassResult(model, modified=False)
        count = 0
        for node in list(model.graph):
            if node.op_type != "CumSum" or node.domain not in DEFAULT_DOMAINS or len(node.inputs) < 2:
                continue
            data, axis_value = node.inputs[0], node.inputs[1]
            axis = _constant_axis(axis_value)
            if data is None or data.dtype not in DIGITS or axis is None or not _short_enough(data, axis):
                continue
            nodes, result = _digit_sum(model.graph, node, data, axis, f"{node.name or 'CumSum'}_digits{count}")
            result.type, result.shape = node.outputs[0].type, node.outputs[0].shape
            ir.convenience.replace_nodes_and_values(model.graph, node, [node], nodes,
                                                    [node.outputs[0]], [result])
            count += 1
        return ir.passes.PassResult(model, modified=bool(count))


def _constant_axis(value: ir.Value | None) -> int | None:
    if value is None or value.const_value is None or value.is_graph_input():
        return None
    array = value.const_value.numpy().reshape(-1)
    return int(array[0]) if array.size == 1 else None


def _summed_dim(data: ir.Value, axis: int) -> int | str | None:
    if data.shape is None or not len(data.shape):
        return None
    dim = data.shape[axis % len(data.shape)]
    return dim if isinstance(dim, int) else getattr(dim, "value", None)


def _short_enough(data: ir.Value, axis: int) -> bool:
    dim = _summed_dim(data, axis)
    return not isinstance(dim, int) or dim <= MAX_EXACT_LENGTH


def _digit_sum(graph: ir.Graph, node: ir.Node, data: ir.Value, axis: int,
               prefix: str) -> tuple[list[ir.Node], ir.Value]:
    b = NodeBuilder(graph, prefix)
    dtype = data.dtype
    assert dtype is not None
    np_type = dtype.numpy()
    k = DIGITS[dtype]
    powers = b.const("powers", (np.int64(BASE) ** np.arange(k, dtype=np.int64)).astype(np_type))
    # 16**(k-1) fits the type: k digits of 4 bits are exactly its width
    last = b.vector(-1)
    quotients = b.op("Div", [b.op("Unsqueeze", [data, last], dtype), powers], dtype)
    upper = b.op("Slice", [quotients, b.vector(1), b.vector(k), last], dtype)
    lower = b.op("Slice", [quotients, b.vector(0), b.vector(k - 1), last], dtype)
    remainders = b.op("Sub", [lower, b.op("Mul", [upper, b.scalar(BASE, np_type)], dtype)], dtype)
    top = b.op("Slice", [quotients, b.vector(k - 1), b.vector(k), last], dtype)
    digits = b.op("Concat", [remainders, top], dtype, axis=-1)
    as_float = b.op("Cast", [digits], ir.DataType.FLOAT, to=ir.DataType.FLOAT)
    # the digits sit on a new last axis: a negative axis counts one further from the end
    summed = b.op("CumSum", [as_float, b.scalar(axis if axis >= 0 else axis - 1, np.int64)],
                  ir.DataType.FLOAT, **{name: attr.value for name, attr in node.attributes.items()})
    cumsum = summed.producer()
    assert cumsum is not None
    cumsum.metadata_props[EXACT_LENGTH_KEY] = str(MAX_EXACT_LENGTH)
    cumsum.metadata_props[KEEP_FP32] = "1"  # float16 holds integers exactly only to 2048
    dim = _summed_dim(data, axis)
    if isinstance(dim, str):
        cumsum.metadata_props[AXIS_DIM_KEY] = dim
    return b.nodes, _recombine(b, b.op("Cast", [summed], dtype, to=dtype), k, np_type)


def _recombine(b: NodeBuilder, sums: ir.Value, k: int, np_type: type) -> ir.Value:
    """``sum_i sums[..., i] 16**i`` by pairs (digit i + base * digit i+1, then base squared),
    in integer Mul and Add: onnxruntime's int64 ReduceSum rounds past 2**53 (measured: 2**59 - 1
    summed with 1 and 2 gives 2**59)."""
    dtype = sums.producer().outputs[0].dtype  # type: ignore[union-attr]
    assert dtype is not None
    base, width = BASE, k
    last, two = b.vector(-1), b.vector(2)
    while width > 1:
        even = b.op("Slice", [sums, b.vector(0), b.vector(width), last, two], dtype)
        odd = b.op("Slice", [sums, b.vector(1), b.vector(width), last, two], dtype)
        sums = b.op("Add", [even, b.op("Mul", [odd, b.scalar(base, np_type)], dtype)], dtype)
        base, width = base * base, width // 2
    return b.op("Squeeze", [sums, last], dtype)


def check_profile(model: ir.Model, profile: Mapping[str, object]) -> None:
    """Refuse an engine whose profile lets a digit-summed axis grow past ``MAX_EXACT_LENGTH``.

    The summed axis is found by its symbolic dim name among the inputs' dims; when the name is
    not an input's (a dim computed inside the graph), every dynamic dim of the profile counts."""
    for node in model.graph:
        limit = node.metadata_props.get(EXACT_LENGTH_KEY)
        if limit is None:
            continue
        longest = _profile_max(model, profile, node.metadata_props.get(AXIS_DIM_KEY))
        if longest is not None and longest > int(limit):
            raise UnsupportedError(
                f"integer CumSum {node.name!r}: the engine's profile lets its axis reach {longest} "
                f"elements; unframe sums integers exactly for TensorRT over at most {limit}",
                "give --shapes a smaller max for that dim")


def _profile_max(model: ir.Model, profile: Mapping[str, object], dim_name: str | None) -> int | None:
    found = _maxima(model, profile, dim_name) if dim_name else []
    found = found or _maxima(model, profile, None)
    return max(found) if found else None


def _maxima(model: ir.Model, profile: Mapping[str, object], dim_name: str | None) -> list[int]:
    """The profile's max of each dynamic input dim (named ``dim_name``, when given)."""
    found: list[int] = []
    for value in model.graph.inputs:
        shape = profile.get(value.name or "")
        if shape is None or value.shape is None:
            continue
        for axis, dim in enumerate(value.shape):
            if isinstance(dim, int) or (dim_name is not None and getattr(dim, "value", None) != dim_name):
                continue
            found.append(int(shape.max[axis]))  # type: ignore[attr-defined]
    return found

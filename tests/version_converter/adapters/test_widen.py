"""Downgrades that compute in an exactly wider type (unframe/version_converter/widen.py): narrow
ints, bools and halves where the older schema only takes wider types, and int64 Max/Min as
Where(Greater) chains. Golden node cases, each converted, fully checked and run against its
expected outputs; and the non-exact cases that must stay refused."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from adapter_cases import check_path
from nodecases import case
from onnx import TensorProto, helper

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_max_int8", [11, 7], ()),
    ("test_min_uint16", [7], ()),
    ("test_equal_uint8", [7], ()),
    ("test_greater_int16", [7], ()),
    ("test_max_uint32", [9], ()),
    ("test_equal_uint64", [9, 7], ()),  # equality only: uint64 reinterpreted as int64
    ("test_greater_equal_uint64", [9], ()),
    # narrow-int arithmetic in int32 (int64 for uint16 * uint16), Cast back wraps like the native op
    ("test_add_int8", [13, 7], ()),
    ("test_sub_uint8", [11], ()),
    ("test_mul_uint16", [9], ()),
    ("test_mul_int16", [7], ()),
    ("test_div_int8", [13, 7], ()),
    ("test_div_uint16", [11], ()),
    # bool reductions through uint8, then uint32 where ReduceMax lacks uint8; the empty set is false
    ("test_reduce_max_bool_inputs", [19, 11], ("axes",)),
    ("test_reduce_max_empty_set_bool", [19], ()),
    ("test_reduce_min_bool_inputs", [18, 7], ("axes",)),
    # halves in float: selection (exact) and arithmetic (rounded once)
    ("test_attention_3d_causal_bf16_expanded", [15], ()),  # its Where on bfloat16
    ("test_compress_bfloat16", [25, 13], ()),
    ("test_onehot_with_bfloat16_values", [13], ()),
    ("test_reversesequence_bfloat16", [21], ()),
    ("test_unique_bfloat16_sorted_without_axis", [13], ()),
    ("test_isinf_float16", [19, 11], ()),
    ("test_einsum_batch_matmul_bfloat16", [13], ()),
    ("test_celu_float16", [25, 11], ()),
    ("test_celu_bfloat16_expanded", [13], ()),
    ("test_range_float16_type_positive_delta", [11], ()),
    ("test_range_bfloat16_type_positive_delta", [13], ()),
    ("test_qlinearmatmul_3D_int8_float16", [11], ()),
    # narrow ints in float for selection ops
    ("test_clip_default_int8_min", [11, 7], ()),
    ("test_clip_default_int8_inbounds", [9], ()),
    ("test_maxpool_2d_uint8", [11, 7], ()),
]

COMPARE_PAIRS: list[tuple[str, list[int]]] = [
    ("test_max_int64", [11, 9]),
    ("test_min_uint64", [9]),
    ("test_max_uint64", [11]),
    ("test_min_int64", [11]),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[p[0] for p in PAIRS])
def test_widened_cases_match_their_expected_outputs(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    check_path(name, targets, freeze)
    irm = ir.from_proto(case(name, freeze).model)
    convert_opset(irm, targets[-1])
    assert "Cast" in {n.op_type for n in ir.to_proto(irm).graph.node}, "no widening happened"


@pytest.mark.parametrize(("name", "targets"), COMPARE_PAIRS, ids=[p[0] for p in COMPARE_PAIRS])
def test_int64_max_min_select_by_comparison(name: str, targets: list[int]) -> None:
    check_path(name, targets)
    irm = ir.from_proto(case(name).model)
    convert_opset(irm, targets[-1])
    assert "Where" in {n.op_type for n in ir.to_proto(irm).graph.node}


BELOW_WHERE_PAIRS: list[tuple[str, list[int]]] = [
    ("test_max_int64", [7]), ("test_min_uint64", [7]), ("test_max_uint64", [7]), ("test_min_int64", [7]),
    ("test_greater_uint64", [7]), ("test_less_uint64", [7]),
    ("test_greater_equal_expanded", [7]), ("test_less_equal_bcast_expanded", [9]), ("test_equal", [7]),
]


@pytest.mark.parametrize(("name", "targets"), BELOW_WHERE_PAIRS, ids=[p[0] for p in BELOW_WHERE_PAIRS])
def test_compare_and_select_below_opset_9(name: str, targets: list[int]) -> None:
    """No Where, and Greater/Less/Equal take few types: int64 order through exact halves, Max/Min by
    a 0/1 multiply, float Equal through Less/Greater."""
    check_path(name, targets)
    irm = ir.from_proto(case(name).model)
    convert_opset(irm, targets[-1])
    assert "Where" not in {n.op_type for n in ir.to_proto(irm).graph.node}


_EDGES_I64 = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).min + 1, -(1 << 32) - 1, -(1 << 32),
                       -(1 << 32) + 1, -1, 0, 1, (1 << 32) - 1, 1 << 32, (1 << 32) + 1,
                       np.iinfo(np.int64).max - 1, np.iinfo(np.int64).max], dtype=np.int64)
_EDGES_U64 = np.array([0, 1, (1 << 32) - 1, 1 << 32, (1 << 32) + 1, (1 << 63) - 1, 1 << 63,
                       np.iinfo(np.uint64).max - 1, np.iinfo(np.uint64).max], dtype=np.uint64)


def _binary(op: str, dtype: int, out_dtype: int, opset: int) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"])], "g",
                              [helper.make_tensor_value_info("a", dtype, [None, 1]),
                               helper.make_tensor_value_info("b", dtype, [1, None])],
                              [helper.make_tensor_value_info("y", out_dtype, [None, None])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("op", ["Max", "Min", "Greater", "Less"])
@pytest.mark.parametrize("edges", [_EDGES_I64, _EDGES_U64], ids=["int64", "uint64"])
def test_wide_int_order_at_opset_7_on_edge_values(op: str, edges: np.ndarray) -> None:
    """Every pair of edge values (around 0, +-2^32 and the type's ends), broadcast a[:, None] op b[None, :]."""
    dtype = onnx.helper.np_dtype_to_tensor_dtype(edges.dtype)
    out = TensorProto.BOOL if op in ("Greater", "Less") else dtype
    irm = ir.from_proto(_binary(op, dtype, out, 13))
    convert_opset(irm, 7)
    model = ir.to_proto(irm)
    onnx.checker.check_model(model, full_check=True)
    a, b = edges[:, None], edges[None, :]
    want = {"Max": np.maximum, "Min": np.minimum, "Greater": np.greater, "Less": np.less}[op](a, b)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"a": a, "b": b})[0]
    np.testing.assert_array_equal(got, want)


def test_float_equal_at_opset_7_on_special_values() -> None:
    values = np.array([np.nan, -np.inf, -1.5, -0.0, 0.0, 1e-45, 1.5, np.inf], dtype=np.float32)
    irm = ir.from_proto(_binary("Equal", TensorProto.FLOAT, TensorProto.BOOL, 13))
    convert_opset(irm, 7)
    model = ir.to_proto(irm)
    onnx.checker.check_model(model, full_check=True)
    a, b = values[:, None], values[None, :]
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"a": a, "b": b})[0]
    np.testing.assert_array_equal(got, a == b)


def test_equal_on_strings_has_no_form_at_opset_7() -> None:
    with pytest.raises(UnsupportedError, match="string"):
        convert_opset(ir.from_proto(case("test_equal_string").model), 7)


@pytest.mark.parametrize("name", ["test_compress_bfloat16", "test_range_bfloat16_type_positive_delta",
                                  "test_einsum_sum_bfloat16"])
def test_bfloat16_below_13_is_refused(name: str) -> None:
    """Cast has no bfloat16 before opset 13."""
    with pytest.raises(UnsupportedError, match="bfloat16"):
        convert_opset(ir.from_proto(case(name).model), 11)


def test_equal_on_strings_is_refused() -> None:
    """Equal takes strings from opset 19 only; a string has no wider numeric form."""
    with pytest.raises(UnsupportedError, match="string"):
        convert_opset(ir.from_proto(case("test_equal_string").model), 13)


def _reduce_max_int8(dim: int | str) -> ir.Model:
    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["y"], keepdims=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [dim, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [])])
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


def test_signed_reduction_that_may_be_empty_is_refused() -> None:
    """An empty ReduceMax gives int8's lowest value, -128; in int32 it would give INT32_MIN, which
    Casts back to 0."""
    with pytest.raises(UnsupportedError, match="int8"):
        convert_opset(_reduce_max_int8("n"), 11)
    model = _reduce_max_int8(2)
    convert_opset(model, 11)
    proto = ir.to_proto(model)
    onnx.checker.check_model(proto, full_check=True)
    import onnxruntime as ort

    x = np.array([[-128, 5, -3], [7, -9, 100]], dtype=np.int8)
    got = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert got[0] == 100


def test_maxpool_whose_windows_may_lie_in_padding_is_refused() -> None:
    """With a dilation, a window may hold only padding: its result is the type's lowest value."""
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[3, 3], pads=[1, 1, 1, 1])],
        "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)])
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)]))
    with pytest.raises(UnsupportedError, match="uint8"):
        convert_opset(model, 11)

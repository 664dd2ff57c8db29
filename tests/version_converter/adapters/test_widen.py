"""Downgrades that compute in an exactly wider type (unframe/version_converter/widen.py): narrow
ints, bools and halves where the older schema only takes wider types, and int64 Max/Min as
Where(Greater) chains. Golden node cases, each converted, fully checked and run against its
expected outputs; and the non-exact cases that must stay refused."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
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


def test_int64_has_no_exact_wider_type() -> None:
    irm = ir.from_proto(case("test_max_int64").model)
    with pytest.raises(UnsupportedError, match="int64"):  # Greater-7 has no int64 either
        convert_opset(irm, 7)
    assert isinstance(ir.to_proto(irm), onnx.ModelProto)


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

"""Golden node cases through the misc adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import onnx_ir as ir
import pytest
from adapter_cases import check_path
from onnx import TensorProto, helper

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_shape_start_1", [14, 15], ()),
    ("test_reshape_reordered_all_dims", [13, 14, 25], ()),
    # allowzero=1 on empty data: the empty result as Tile(zeros, shape), the shape a graph input
    ("test_reshape_allowzero_reordered", [13, 7], ()),
    ("test_reshape_allowzero_reordered", [11], ("shape",)),  # the shape a constant: an empty Constant
    ("test_gridsample_bicubic", [19, 20], ()),
    ("test_dft_axis", [19, 20], ("axis",)),
    # run-time DFT axis: a chain of If nodes, one DFT(axis=a) per valid axis
    ("test_dft_axis", [19], ()),
    ("test_dft_rfft", [17], ()),
    ("test_dft_inverse", [17], ()),
    ("test_gemm_default_no_bias", [10], ()),
    ("test_argmax_default_axis_random_select_last_index", [11], ()),
    ("test_argmin_default_axis_random_select_last_index", [11], ()),
    ("test_constant", [11], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def test_runtime_dft_axis_of_unknown_rank_refused() -> None:
    graph = helper.make_graph(
        [helper.make_node("DFT", ["x", "", "axis"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("axis", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    irm = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]))
    with pytest.raises(UnsupportedError, match="run-time DFT axis needs a known input rank"):
        convert_opset(irm, 19)


def test_allowzero_with_runtime_shape_on_data_of_unknown_size_is_refused() -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3]),
                               helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]))
    with pytest.raises(UnsupportedError, match="allowzero=1 with a run-time shape needs the data's static shape"):
        convert_opset(model, 13)

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


def _runtime_allowzero_model(shape_dims: list[int] | None) -> ir.Model:
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3]),
                               helper.make_tensor_value_info("s", TensorProto.INT64, shape_dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8))


@pytest.mark.parametrize("target", [13, 11])
def test_allowzero_with_runtime_shape_on_data_of_unknown_size_chooses_at_run_time(target: int) -> None:
    """HF decoders' views: data of symbolic size, a run-time shape. Data with elements reshapes as
    before; empty data takes a shape holding 0 literally (Reshape-13 would copy the input's dim)."""
    import numpy as np
    import onnxruntime as ort

    reference = ort.InferenceSession(ir.to_proto(_runtime_allowzero_model([2])).SerializeToString())
    converted = _runtime_allowzero_model([2])
    convert_opset(converted, target)  # in place
    assert any(n.op_type == "If" for n in converted.graph)
    session = ort.InferenceSession(ir.to_proto(converted).SerializeToString())
    rng = np.random.default_rng(0)
    cases = [(rng.standard_normal((4, 3)).astype(np.float32), np.asarray([2, 6])),
             (rng.standard_normal((4, 3)).astype(np.float32), np.asarray([-1, 4])),
             (np.zeros((0, 3), np.float32), np.asarray([0, 7]))]  # Reshape-13 would give (3, 7): an error
    for x, shape in cases:
        [want] = reference.run(None, {"x": x, "s": shape})
        [got] = session.run(None, {"x": x, "s": shape})
        assert got.shape == want.shape and np.array_equal(got, want), (shape, got.shape, want.shape)


def test_allowzero_with_runtime_shape_of_unknown_length_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="allowzero=1 with a run-time shape needs the data's static shape"):
        convert_opset(_runtime_allowzero_model(None), 13)

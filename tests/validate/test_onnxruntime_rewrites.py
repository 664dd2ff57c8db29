"""The parity runner runs the graph as written: onnxruntime's rewrites that change results are off
(``DISABLED_REWRITES``). Pad_Fusion folds a zero Pad into MaxPool, whose padding reads as -inf."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from unframe.validate.onnxruntime import OnnxRuntimeRunner


def _pad_then_maxpool() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "p"], ["y"]),
         helper.make_node("MaxPool", ["y"], ["z"], kernel_shape=[3, 3], strides=[2, 2])], "stem",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2, 3, 3])],
        [numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "p")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _by_hand(x: np.ndarray) -> np.ndarray:
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))  # zeros, as the Pad says
    out = np.empty((1, 2, 3, 3), np.float32)
    for i in range(3):
        for j in range(3):
            out[:, :, i, j] = padded[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(2, 3))
    return out


def test_a_zero_pad_before_maxpool_is_not_folded_into_it():
    x = -np.abs(np.random.default_rng(0).standard_normal((1, 2, 6, 6))).astype(np.float32) - 0.1
    expected = _by_hand(x)
    assert np.all(expected[:, :, 0, 0] == 0)  # the border windows see the Pad's zeros
    model = _pad_then_maxpool()
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    plain = ort.InferenceSession(model.SerializeToString(), opts).run(None, {"x": x})[0]
    if np.array_equal(plain, expected):
        pytest.skip(f"onnxruntime {ort.__version__} no longer folds a zero Pad into MaxPool")
    got = OnnxRuntimeRunner(model).run({"x": x})["z"]
    np.testing.assert_array_equal(got, expected)


def test_a_written_graph_with_the_pattern_says_so(tmp_path):
    import unframe

    src = tmp_path / "stem.onnx"
    onnx.save(_pad_then_maxpool(), src)
    result = unframe.convert(str(src), to="onnx", output=str(tmp_path / "out.onnx"))
    assert any("disabled_optimizers=['Pad_Fusion']" in n for n in result.notes), result.notes
    relu = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"]), onnx.helper.make_node("MaxPool", ["y"], ["z"], kernel_shape=[3, 3])],
        "g", [onnx.helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [onnx.helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2, 4, 4])])
    onnx.save(onnx.helper.make_model(relu, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=9), src)
    result = unframe.convert(str(src), to="onnx", output=str(tmp_path / "out2.onnx"))
    assert not any("Pad_Fusion" in n for n in result.notes)

"""Integer arithmetic the translators compute in float (an integer Div or Mod, Sign, MaxPool and
Resize of integers) stays float32 in an fp16 program: fp16 holds integers exactly only up to 2048.
Found by a trained RetinaNet, whose ``topk_index // num_classes`` and ``% num_classes`` over 9,207
candidates pointed the fp16 package at other anchors and classes. Checked exactly against
onnxruntime with the MIL evaluator on the saved package, at fp16 compute (the default)."""

from __future__ import annotations

import numpy as np
import pytest
from coreml_helpers import convert_and_compare, to_ir
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from unframe.validate.onnxruntime import OnnxRuntimeRunner

pytestmark = pytest.mark.usefixtures("coreml")


def _index_math_graph() -> object:
    """idx: int64 [N] (candidate indices, as TopK gives them) -> idx // 3, idx % 3 (floor and C
    modulo), the sign of idx - 5000, and the indices laid out as an image resized (linear, int32)."""
    nodes = [
        helper.make_node("Div", ["idx", "three"], ["anchor"]),
        helper.make_node("Mod", ["idx", "three"], ["label"]),
        helper.make_node("Mod", ["idx", "seven"], ["cmod"], fmod=1),
        helper.make_node("Sub", ["idx", "mid"], ["centred"]),
        helper.make_node("Sign", ["centred"], ["side"]),
        helper.make_node("Cast", ["idx"], ["idx32"], to=T.INT32),
        helper.make_node("Reshape", ["idx32", "image"], ["grid"]),
        helper.make_node("Resize", ["grid", "", "twice"], ["pooled"], mode="linear"),
    ]
    inits = [numpy_helper.from_array(np.array(3, np.int64), "three"),
             numpy_helper.from_array(np.array(-7, np.int64), "seven"),
             numpy_helper.from_array(np.array(5000, np.int64), "mid"),
             numpy_helper.from_array(np.array([1, 1, 8, 8], np.int64), "image"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "twice")]
    outputs = [helper.make_tensor_value_info(n, T.INT64, [64]) for n in ("anchor", "label", "cmod", "side")]
    outputs.append(helper.make_tensor_value_info("pooled", T.INT32, [1, 1, 16, 16]))
    graph = helper.make_graph(nodes, "index_math", [helper.make_tensor_value_info("idx", T.INT64, [64])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_integer_division_and_modulo_of_large_indices_are_exact_at_fp16(tmp_path):
    model = to_ir(_index_math_graph())
    idx = np.random.default_rng(0).permutation(9207)[:64].astype(np.int64)
    idx[:4] = [2049, 2051, 9205, 8191]  # past fp16's exact integers, odd ones included
    assert int(idx.max()) > 2048
    artifact, parity = convert_and_compare(model, [{"idx": idx}], tmp_path)
    assert parity, parity.reason
    from unframe.converters.backends.coreml.backend import CoreMLBackend
    from unframe.converters.base import Target

    got = CoreMLBackend().runner(artifact, Target("coreml")).run({"idx": idx})
    want = OnnxRuntimeRunner(_index_math_graph()).run({"idx": idx})
    for name, expected in want.items():
        np.testing.assert_array_equal(np.asarray(got[name]).astype(np.int64), expected.astype(np.int64),
                                      err_msg=name)
    np.testing.assert_array_equal(want["anchor"], idx // 3)  # onnxruntime as numpy says

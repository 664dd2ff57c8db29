"""Constant 9->8: non-float constants become initializers (Constant-1 holds only float tensors).
Golden cases: function-expanded node cases full of int64 Constants (shapes, axes), converted to
opset 8, checked with the full checker and run against their expected outputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from adapter_cases import check_path
from onnx import TensorProto
from onnx import helper as oh

from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_depthtospace_example_expanded", [8], ()),
    ("test_depthtospace_crd_mode_example_expanded", [8, 7], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[p[0] for p in PAIRS])
def test_golden_cases(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    assert "Constant_9_8" in check_path(name, targets, freeze)


def test_int_constants_become_initializers_and_float_ones_stay() -> None:
    shape = oh.make_node("Constant", [], ["shape"], value=onnx.numpy_helper.from_array(
        np.array([3, 2], dtype=np.int64)))
    scale = oh.make_node("Constant", [], ["scale"], value=onnx.numpy_helper.from_array(
        np.array(2.0, dtype=np.float32)))
    graph = oh.make_graph(
        [shape, scale, oh.make_node("Reshape", ["x", "shape"], ["r"]), oh.make_node("Mul", ["r", "scale"], ["y"])],
        "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    irm = ir.from_proto(model)
    convert_opset(irm, 7)
    out = ir.to_proto(irm)
    onnx.checker.check_model(out, full_check=True)
    assert [n.op_type for n in out.graph.node] == ["Constant", "Reshape", "Mul"]
    assert [i.name for i in out.graph.initializer] == ["shape"]
    import onnxruntime as ort

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, x.reshape(3, 2) * 2)

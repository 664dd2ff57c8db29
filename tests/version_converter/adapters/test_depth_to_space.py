"""DepthToSpace 11->10 and SpaceToDepth 28->27 with mode=CRD: Reshape / Transpose / Reshape."""

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
    ("test_depthtospace_crd_mode_example", [10, 7], ()),
    ("test_depthtospace_example", [10, 9], ()),
    ("test_spacetodepth_crd_mode_example", [27, 9], ()),
    ("test_spacetodepth_dcr_mode_example", [27], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[p[0] for p in PAIRS])
def test_golden_cases(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


@pytest.mark.parametrize(("op", "opset", "dims", "x_shape"), [
    ("DepthToSpace", 11, ["N", "C", "H", "W"], (2, 18, 2, 3)),
    ("DepthToSpace", 11, ["N", 18, "H", 3], (1, 18, 4, 3)),
    ("SpaceToDepth", 28, ["N", "C", "H", "W"], (2, 2, 6, 9)),
])
def test_run_time_sizes(op: str, opset: int, dims: list, x_shape: tuple[int, ...]) -> None:
    """Sizes unknown at conversion time come from Shape(x); the result matches the original op."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    node = oh.make_node(op, ["x"], ["y"], blocksize=3, mode="CRD")
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 10
    x = np.arange(np.prod(x_shape), dtype=np.float32).reshape(x_shape)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    irm = ir.from_proto(model)
    convert_opset(irm, 9)
    out_model = ir.to_proto(irm)
    onnx.checker.check_model(out_model, full_check=True)
    assert op not in {n.op_type for n in out_model.graph.node}
    got = ort.InferenceSession(out_model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, expected)

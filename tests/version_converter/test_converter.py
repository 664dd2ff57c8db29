"""The converter as a whole: refusals list every blocker and leave the model untouched, subgraphs,
model-local functions, function-body expansion, external data never read, checker, the pass."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nodecases import check_path  # noqa: E402

from unframe.errors import UnsupportedError  # noqa: E402
from unframe.version_converter import ConvertVersionPass, convert_opset, preflight  # noqa: E402


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           opset: int, initializers: list[onnx.TensorProto] = (), functions: list[onnx.FunctionProto] = ()
           ) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid("local", 1)] * bool(functions)
    model = helper.make_model(graph, opset_imports=imports, functions=list(functions))
    model.ir_version = 8 if functions or opset > 14 else 7
    return model


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _two_blocker_model() -> onnx.ModelProto:
    """A bf16 Add (no bf16 Add before 13) and a Reduce whose axes is a runtime input."""
    nodes = [helper.make_node("Add", ["a", "a"], ["b"], name="bf16_add"),
             helper.make_node("Cast", ["b"], ["c"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["c", "axes"], ["y"], name="dynamic_reduce")]
    return _model(nodes, [helper.make_tensor_value_info("a", TensorProto.BFLOAT16, [2, 3]),
                          helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], 14)


def test_refusal_lists_every_blocker_and_leaves_the_model_untouched() -> None:
    model = ir.from_proto(_two_blocker_model())
    before = ir.to_proto(model).SerializeToString()
    with pytest.raises(UnsupportedError) as info:
        convert_opset(model, 11)
    blocked = {(b.node, b.op) for b in info.value.blockers}
    # no bf16 Add or Cast before 13; axes can't become an attribute when it is a runtime input
    assert blocked == {("bf16_add", "Add"), ("cast", "Cast"), ("dynamic_reduce", "ReduceSum")}
    assert all(b.reason for b in info.value.blockers)
    assert ir.to_proto(model).SerializeToString() == before
    assert {(b.node, b.op) for b in preflight(model, 11)} == blocked
    assert preflight(model, 21) == []


def test_preflight_does_not_modify() -> None:
    model = ir.from_proto(_two_blocker_model())
    before = ir.to_proto(model).SerializeToString()
    preflight(model, 7)
    assert ir.to_proto(model).SerializeToString() == before


@pytest.mark.parametrize(("name", "targets"), [
    ("test_if", [9, 21]), ("test_loop11", [13, 21]), ("test_if_seq", [13, 24]),
    ("test_scan9_sum", [11, 9, 21]), ("test_loop13_seq", [21, 13]),
])
def test_subgraphs(name: str, targets: list[int]) -> None:
    check_path(name, targets)


def test_softmax_inside_if_branch_is_rewritten() -> None:
    """A Softmax(axis=0) in a subgraph must be converted, not just the main graph."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    branch = helper.make_graph([helper.make_node("Softmax", ["x"], ["s"], axis=0)], "then", [],
                               [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 3, 4])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "else", [],
                              [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3, 4])])
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=other)]
    model = _model(nodes, [x, helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])], 13)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32),
             "cond": np.array(True)}
    want = _run(model, feeds)[0]
    irm = ir.from_proto(model)
    convert_opset(irm, 11)
    out = ir.to_proto(irm)
    onnx.checker.check_model(out, full_check=True)
    np.testing.assert_allclose(_run(out, feeds)[0], want, rtol=1e-5, atol=1e-6)


def test_model_local_function_is_converted() -> None:
    fn = helper.make_function("local", "Normalize", ["x"], ["y"],
                              [helper.make_node("ReduceMean", ["x"], ["m"], axes=[1], keepdims=1),
                               helper.make_node("Sub", ["x", "m"], ["y"])],
                              opset_imports=[helper.make_opsetid("", 13)])
    nodes = [helper.make_node("Normalize", ["x"], ["y"], domain="local")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], 13, functions=[fn])
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)}
    want = _run(model, feeds)[0]
    irm = ir.from_proto(model)
    convert_opset(irm, 18)
    out = ir.to_proto(irm)
    assert {o.domain: o.version for o in out.functions[0].opset_import}[""] == 18
    reduce = next(n for n in out.functions[0].node if n.op_type == "ReduceMean")
    assert len(reduce.input) == 2  # axes became an input
    onnx.checker.check_model(out, full_check=True)
    np.testing.assert_allclose(_run(out, feeds)[0], want, rtol=1e-6)


@pytest.mark.parametrize(("name", "target"), [
    ("test_gelu_default_1", 17), ("test_gelu_tanh_1", 13), ("test_layer_normalization_2d_axis0", 13),
    ("test_hardswish", 13), ("test_mish", 13), ("test_celu", 9),
])
def test_expansion_through_function_body(name: str, target: int) -> None:
    fired = check_path(name, [target])
    assert any(f.startswith("expand:") for f in fired)


def test_external_data_is_never_read(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("ReduceSum", ["h"], ["y"], axes=[1], keepdims=0)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], 11,
                   initializers=[numpy_helper.from_array(w, "W")])
    path = tmp_path / "m.onnx"
    onnx.save(model, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    (tmp_path / "weights.bin").write_bytes(b"garbage")  # reading it would fail
    irm = ir.load(path)
    result = convert_opset(irm, 18)
    assert result.target_opset == 18
    assert isinstance(irm.graph.initializers["W"].const_value, ir.ExternalTensor)
    out = ir.to_proto(irm)
    assert out.graph.initializer[0].data_location == TensorProto.EXTERNAL
    reduce = next(n for n in out.graph.node if n.op_type == "ReduceSum")
    assert len(reduce.input) == 2


def test_pass_and_result_fields() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=0)], [x],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], 11)
    irm = ir.from_proto(model)
    conv = ConvertVersionPass(17)
    result = conv(irm)
    assert result.modified and result.model is irm
    assert conv.last is not None and conv.last.path == ["ai.onnx 11->17"]
    assert conv.last.to_dict()["target_opset"] == 17
    out = ir.to_proto(irm)
    assert out.ir_version == 8
    assert [n.op_type for n in out.graph.node] == ["Flatten", "Softmax", "Shape", "Reshape"]
    feeds = {"x": np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)}
    np.testing.assert_allclose(_run(out, feeds)[0], _run(model, feeds)[0], rtol=1e-6)

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

from nodecases import case, check_path  # noqa: E402

from unframe.errors import UnsupportedError  # noqa: E402
from unframe.version_converter import ConvertVersionPass, OpsetConversion, convert_opset, preflight  # noqa: E402


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
    """A bf16 Add (no bf16 Add before 13) and a Reduce whose axes is a runtime input of unknown length."""
    nodes = [helper.make_node("Add", ["a", "a"], ["b"], name="bf16_add"),
             helper.make_node("Cast", ["b"], ["c"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["c", "axes"], ["y"], name="dynamic_reduce")]
    return _model(nodes, [helper.make_tensor_value_info("a", TensorProto.BFLOAT16, [2, 3]),
                          helper.make_tensor_value_info("axes", TensorProto.INT64, None)],
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


@pytest.mark.parametrize(("name", "target"), [
    ("test_attention_local_window", 23),          # left/right_window_size: attributes Attention-23 lacks
    ("test_attention_4d_gqa_causal_nonpad_decode", 21),  # nonpad_kv_seqlen: an input Attention-23 lacks
])
def test_refused_step_expands_through_the_function_body(name: str, target: int) -> None:
    """A downgrade step the target can't take is not a dead end when the op has a function body:
    the node is expanded and the expansion converted (checked against the case's outputs)."""
    model = case(name).model
    with pytest.raises(UnsupportedError):  # no Attention at the target can take this node...
        _convert_without_expansion(model, target)
    fired = check_path(name, [target])     # ...but its definition can
    assert "expand:Attention" in fired


def _convert_without_expansion(model: onnx.ModelProto, target: int) -> None:
    """Convert with expansion-on-refusal switched off: what the step adapters alone can do."""
    from unframe.version_converter import walker

    original = walker.Walker._expand_instead
    walker.Walker._expand_instead = lambda self, node, domain, at, why: False
    try:
        convert_opset(ir.from_proto(model), target)
    finally:
        walker.Walker._expand_instead = original


def _large_weight_model(opset: int) -> onnx.ModelProto:
    """A MatMul by a 256 KB weight (a 'large' initializer, never copied), then a dynamic-axes
    ReduceSum whose axes length is unknown (refused below 13) and a bf16 Add (refused below 13)."""
    w = numpy_helper.from_array(np.arange(256 * 256, dtype=np.float32).reshape(256, 256) / 1e4, "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
             helper.make_node("ReduceSum", ["m", "axes"], ["r"], name="dynamic_reduce", keepdims=1),
             helper.make_node("Add", ["b", "b"], ["y2"], name="bf16_add")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256]),
                          helper.make_tensor_value_info("axes", TensorProto.INT64, None),
                          helper.make_tensor_value_info("b", TensorProto.BFLOAT16, [3])],
                  [helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
                   helper.make_tensor_value_info("y2", TensorProto.BFLOAT16, [3])], opset, [w])


@pytest.mark.parametrize("ir_version", [7, 3])
def test_refused_model_is_restored_with_its_own_weight_values(ir_version: int) -> None:
    """The walk converts in place; a refusal restores the model from its weight-less snapshot, and
    the large initializer is the very same value (its tensor never copied), in graph and inputs."""
    proto = _large_weight_model(14)
    if ir_version < 4:  # before IR 4 every initializer is also a graph input
        proto.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [256, 256]))
    proto.ir_version = ir_version
    model = ir.from_proto(proto)
    weight = model.graph.initializers["w"]
    before = ir.to_proto(model).SerializeToString()
    with pytest.raises(UnsupportedError) as info:
        convert_opset(model, 11)
    assert {b.node for b in info.value.blockers} >= {"dynamic_reduce", "bf16_add"}
    assert ir.to_proto(model).SerializeToString() == before
    assert model.ir_version == ir_version
    assert model.graph.initializers["w"] is weight and weight.graph is model.graph
    assert [n.name for n in weight.uses()[0][0].graph] == ["matmul", "dynamic_reduce", "bf16_add"]
    assert {use.node.name for use in weight.uses()} == {"matmul"}
    assert (weight in model.graph.inputs) == (ir_version < 4)
    convert_opset(model, 21)  # the restored model still converts
    assert model.graph.initializers["w"] is weight


def _fast_and_full(model: onnx.ModelProto, target: int) -> tuple[ir.Model, ir.Model, bool, OpsetConversion]:
    """The model converted twice: as convert_opset chooses (recording whether the fast path took it)
    and with the fast path switched off (the full walk: inference, snapshot, checker)."""
    from unframe.version_converter import walker

    original = walker.Walker.convert_generic_only
    taken: list[bool] = []

    def spy(self: walker.Walker, graphs: list) -> bool:
        taken.append(original(self, graphs))
        return taken[-1]

    walker.Walker.convert_generic_only = spy
    try:
        fast = ir.from_proto(model)
        result = convert_opset(fast, target)
        walker.Walker.convert_generic_only = lambda self, graphs: False
        full = ir.from_proto(model)
        convert_opset(full, target)
    finally:
        walker.Walker.convert_generic_only = original
    return fast, full, taken == [True], result


@pytest.mark.parametrize(("name", "target"), [("test_gemm_default_single_elem_vector_bias", 21),
                                              ("test_conv_with_strides_padding", 22), ("test_lstm_defaults", 23)])
def test_fast_path_gives_the_full_walks_model(name: str, target: int) -> None:
    """Upgrades whose steps are all generic and type-widening skip type inference; the result must be
    the one the full walk (inference, snapshot, checker) gives."""
    fast, full, taken, _ = _fast_and_full(case(name).model, target)
    assert taken
    assert ir.to_proto(fast).SerializeToString() == ir.to_proto(full).SerializeToString()


@pytest.mark.parametrize(("name", "target"), [("test_rotary_embedding_expanded", 9),
                                              ("test_rotary_embedding_no_position_ids_expanded", 7)])
def test_ranks_filled_where_shape_inference_leaves_none(name: str, target: int) -> None:
    """onnx infers no rank after a Split with run-time sizes; the ranks the op fixes anyway (Split,
    elementwise broadcasting, Concat...) are filled in, so Concat(axis=-1) can go below opset 11."""
    from unframe.version_converter import types

    model = case(name).model
    fill = types.fill_ranks
    types.fill_ranks = lambda graphs: None  # without the filled ranks the conversion is refused
    try:
        with pytest.raises(UnsupportedError, match="negative axis needs a known rank"):
            convert_opset(ir.from_proto(model), target)
    finally:
        types.fill_ranks = fill
    check_path(name, [target])


def test_blockers_inside_an_expansion_name_the_node_the_user_has() -> None:
    """Attention-24 to opset 9: its body can't get there either; the one blocker names the Attention
    node, why it was expanded and the first node of the body that stops, not eight inner nodes."""
    with pytest.raises(UnsupportedError) as info:
        convert_opset(ir.from_proto(case("test_attention_4d_gqa_causal_nonpad_decode").model), 9)
    (blocker,) = info.value.blockers
    assert blocker.op == "Attention"
    assert "opset 23 takes 3..6" in blocker.reason
    assert "its function body does not reach opset 9 either" in blocker.reason


def _reduce_and_squeeze(opset: int, extra: dict[str, int] | None = None) -> onnx.ModelProto:
    """ReduceMean(axes attribute) and Squeeze/Unsqueeze(axes attribute): type-free adapters to 13/18."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[-1], keepdims=1, **(extra or {})),
             helper.make_node("Sub", ["x", "m"], ["d"], name="sub"),
             helper.make_node("Unsqueeze", ["d"], ["u"], name="unsqueeze", axes=[0]),
             helper.make_node("Squeeze", ["u"], ["y"], name="squeeze", axes=[0])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], opset)


def test_fast_path_takes_type_free_adapters_and_matches_the_full_walk() -> None:
    model = _reduce_and_squeeze(11)
    feeds = {"x": np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)}
    fast, full, taken, result = _fast_and_full(model, 25)
    assert taken
    assert {"ReduceMean_17_18", "Squeeze_12_13", "Unsqueeze_12_13"} <= set(result.adapters_used)
    out = ir.to_proto(fast)
    assert out.SerializeToString() == ir.to_proto(full).SerializeToString()
    onnx.checker.check_model(out, full_check=True)
    np.testing.assert_allclose(_run(out, feeds)[0], _run(model, feeds)[0], rtol=1e-6)


def test_fast_path_undoes_its_adapters_when_a_later_step_refuses() -> None:
    """The type-free ReduceMax 17->18 adapter runs, then 18->20 refuses an attribute no schema has:
    the fast path undoes the adapter, the full walk reports the blocker, the model is as it was."""
    from unframe.version_converter import walker

    proto = _reduce_and_squeeze(13, {"bogus": 1})
    proto.graph.node[0].op_type = "ReduceMax"
    model = ir.from_proto(proto)
    before = ir.to_proto(model).SerializeToString()
    original = walker.Walker._convert_undoably
    undone: list[tuple[bool, dict[str, int]]] = []

    def spy(self: walker.Walker, adapted: list) -> bool:
        undone.append((original(self, adapted), dict(self.fired)))
        return undone[-1][0]

    walker.Walker._convert_undoably = spy
    try:
        with pytest.raises(UnsupportedError, match="attribute 'bogus' does not exist") as info:
            convert_opset(model, 20)
    finally:
        walker.Walker._convert_undoably = original
    assert undone == [(False, {"ReduceMax_17_18": 1})]  # the adapter ran, then was undone
    assert [b.node for b in info.value.blockers] == ["mean"]
    assert ir.to_proto(model).SerializeToString() == before

"""Rank-6 window chains folded to rank 5 for CoreML (unframe/converters/backends/coreml/rank.py):
each rewrite proven on onnxruntime against the original graph, then converted and checked by the
MIL evaluator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from coreml_helpers import convert_and_compare
from onnx import TensorProto, helper, numpy_helper

from unframe.converters.backends.coreml.rank import fold_high_rank_windows
from unframe.validate.onnxruntime import OnnxRuntimeRunner

B, H, W, C, WIN = 2, 8, 12, 5, 4  # windows of 4x4 over an 8x12 map


def _swin_block(runtime_target: bool) -> onnx.ModelProto:
    """Window partition and reverse as Swin exports them: [B, H, W, C] -> [B, H/w, w, W/w, w, C]
    -> Transpose (0, 1, 3, 2, 4, 5) -> [B * windows, w, w, C], a per-window op, and back. With
    ``runtime_target`` the rank-6 targets are computed from the input's shape (a dynamic batch)."""
    nodes, inits = [], []

    def const(name: str, values: list[int]) -> str:
        inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name

    if runtime_target:
        nodes += [helper.make_node("Shape", ["x"], ["xs"]),
                  helper.make_node("Slice", ["xs", const("s0", [0]), const("s1", [1])], ["batch"]),
                  helper.make_node("Concat", ["batch", const("rest6", [H // WIN, WIN, W // WIN, WIN, C])],
                                   ["target6"], axis=0),
                  helper.make_node("Concat", ["batch", const("rest6b", [H // WIN, W // WIN, WIN, WIN, C])],
                                   ["target6b"], axis=0)]
    else:
        const("target6", [B, H // WIN, WIN, W // WIN, WIN, C])
        const("target6b", [B, H // WIN, W // WIN, WIN, WIN, C])
    nodes += [
        helper.make_node("Reshape", ["x", "target6"], ["p6"], name="partition"),
        helper.make_node("Transpose", ["p6"], ["t6"], name="swap", perm=[0, 1, 3, 2, 4, 5]),
        helper.make_node("Reshape", ["t6", const("windows", [-1, WIN, WIN, C])], ["win"], name="windows"),
        helper.make_node("Mul", ["win", const("scale", [3])], ["win_f"]),  # int -> cast below
        helper.make_node("Reshape", ["win_f", "target6b"], ["r6"], name="reverse"),
        helper.make_node("Transpose", ["r6"], ["rt6"], name="unswap", perm=[0, 1, 3, 2, 4, 5]),
        helper.make_node("Reshape", ["rt6", const("back", [-1, H, W, C])], ["y"], name="back"),
    ]
    inits = [i for i in inits if i.name != "scale"] + [numpy_helper.from_array(np.float32([3.0]), "scale")]
    graph = helper.make_graph(nodes, "swin_windows",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, H, W, C])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, H, W, C])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _ranks(proto: onnx.ModelProto) -> list[int]:
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    return [len(v.type.tensor_type.shape.dim) for v in inferred.graph.value_info]


@pytest.mark.parametrize("runtime_target", [False, True], ids=["constant-targets", "runtime-targets"])
def test_the_fold_keeps_every_element_where_it_was(runtime_target: bool):
    proto = _swin_block(runtime_target)
    model = ir.serde.deserialize_model(proto)
    assert fold_high_rank_windows(model) == 2
    folded = ir.serde.serialize_model(model)
    assert max(_ranks(folded)) == 5 and max(_ranks(proto)) == 6
    x = np.random.default_rng(0).standard_normal((B, H, W, C)).astype(np.float32)
    want = OnnxRuntimeRunner(proto).run({"x": x})["y"]
    got = OnnxRuntimeRunner(folded).run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)  # the same elements, moved the same way
    assert float(np.abs(want).max()) > 1.0


def test_a_transpose_that_keeps_no_two_axes_together_folds_in_two_steps():
    """Was left alone (a blocker: MaxViT's window partition (0, 2, 4, 3, 5, 1) keeps no two axes
    together); now two Transposes of rank-5 views with a Reshape between them."""
    proto = _swin_block(False)
    for node in proto.graph.node:
        if node.op_type == "Transpose":
            node.attribute[0].CopyFrom(helper.make_attribute("perm", [0, 2, 4, 1, 3, 5]))
    for init in proto.graph.initializer:  # the reverse chain's views: [B, H/w, W/w, w, w, C] read back
        if init.name == "back":
            init.CopyFrom(numpy_helper.from_array(np.array([B, -1, C], np.int64), "back"))
    proto.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    model = ir.serde.deserialize_model(proto)
    assert fold_high_rank_windows(model) == 2
    folded = ir.serde.serialize_model(model)
    assert max(_ranks(folded)) == 5 and max(_ranks(proto)) == 6
    x = np.random.default_rng(1).standard_normal((B, H, W, C)).astype(np.float32)
    np.testing.assert_array_equal(OnnxRuntimeRunner(folded).run({"x": x})["y"],
                                  OnnxRuntimeRunner(proto).run({"x": x})["y"])


def test_a_rank_6_value_used_twice_is_left_alone():
    proto = _swin_block(False)
    proto.graph.output.append(helper.make_tensor_value_info("p6", TensorProto.FLOAT, None))
    model = ir.serde.deserialize_model(proto)
    assert fold_high_rank_windows(model) == 1  # the reverse chain only


@pytest.mark.usefixtures("coreml")
def test_swin_windows_convert_to_coreml_with_parity(tmp_path: Path):
    """Was exit 4 (rank-6 blockers) for every Swin; now translated at rank 5 and checked by the
    MIL evaluator against onnxruntime on the original graph."""
    model = ir.serde.deserialize_model(_swin_block(True))
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((B, H, W, C)).astype(np.float32)} for _ in range(2)]
    artifact, parity = convert_and_compare(model, feeds, tmp_path)
    assert parity, parity.reason
    assert any("folded to rank 5" in n for n in artifact.notes)
    assert parity.scale > 1.0


def test_dynamo_style_reshapes_with_allowzero_and_a_minus_one_batch_fold():
    """torch's dynamo exporter writes every Reshape with allowzero=1 and the batch as -1
    (torchvision's swin_t): the fold takes them, -1 merged with a size stays -1."""
    proto = _swin_block(False)
    for init in proto.graph.initializer:
        if init.name in ("target6", "target6b"):
            values = numpy_helper.to_array(init).copy()
            values[0] = -1
            init.CopyFrom(numpy_helper.from_array(values, init.name))
    for node in proto.graph.node:
        if node.op_type == "Reshape":
            node.attribute.append(helper.make_attribute("allowzero", 1))
    model = ir.serde.deserialize_model(proto)
    assert fold_high_rank_windows(model) == 2
    folded = ir.serde.serialize_model(model)
    merged = {i.name: numpy_helper.to_array(i).tolist() for i in folded.graph.initializer if "rank5" in i.name}
    assert sorted(merged.values()) == sorted([[-1, WIN, W // WIN, WIN, C], [-1, W // WIN, WIN, WIN, C]])
    x = np.random.default_rng(2).standard_normal((B, H, W, C)).astype(np.float32)
    np.testing.assert_array_equal(OnnxRuntimeRunner(folded).run({"x": x})["y"],
                                  OnnxRuntimeRunner(proto).run({"x": x})["y"])


def _layernorm_views(batch: str | int = "N") -> onnx.ModelProto:
    """What tf2onnx leaves in Keras ConvNeXt's LayerNorm (NCHW after its transpose optimizer):
    the mean m[N, 1, H, W] viewed through rank 6 and back, then subtracted from x."""
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("axes0", [0]), ("axis1", [1]), ("t6", [1, 1, -1, 0, 0, 1]), ("t4", [-1, 1, 0, 0]))]
    nodes = [helper.make_node("ReduceMean", ["x", "axis1"], ["m"], keepdims=1),
             helper.make_node("Unsqueeze", ["m", "axes0"], ["u"]),
             helper.make_node("Reshape", ["u", "t6"], ["r6"], name="to_rank6"),
             helper.make_node("Squeeze", ["r6", "axes0"], ["s5"]),
             helper.make_node("Reshape", ["s5", "t4"], ["m4"], name="back"),
             helper.make_node("Sub", ["x", "m4"], ["y"])]
    graph = helper.make_graph(nodes, "ln_views", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 6, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 6, 4, 5])], inits)
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9))


def test_a_chain_of_views_through_rank_6_becomes_one_reshape():
    proto = _layernorm_views()
    assert max(_ranks(proto)) == 6
    model = ir.serde.deserialize_model(proto)
    assert fold_high_rank_windows(model) == 1
    assert [n.op_type for n in model.graph] == ["ReduceMean", "Reshape", "Sub"]
    folded = ir.serde.serialize_model(model)
    assert max(_ranks(folded)) == 4
    x = np.random.default_rng(3).standard_normal((3, 6, 4, 5)).astype(np.float32) + 2
    want = OnnxRuntimeRunner(proto).run({"x": x})["y"]
    np.testing.assert_array_equal(OnnxRuntimeRunner(folded).run({"x": x})["y"], want)
    assert float(np.abs(want).max()) > 1.0


def test_a_chain_whose_last_shape_needs_two_unknowns_is_left_alone():
    """x[N, 6, H, 5], N and H dynamic: [N, 1, H, 5] -> Unsqueeze(0) -> Reshape [-1, 1, 1, 0, 1, 5]
    -> Reshape [0, 1, 0, -1] = [N, 1, 1, 5H]: no single target of the input says that."""
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("axes0", [0]), ("axis1", [1]), ("t6", [-1, 1, 1, 0, 1, 5]), ("t4", [0, 1, 0, -1]))]
    nodes = [helper.make_node("ReduceMean", ["x", "axis1"], ["m"], keepdims=1),
             helper.make_node("Unsqueeze", ["m", "axes0"], ["u"]),
             helper.make_node("Reshape", ["u", "t6"], ["r6"]),
             helper.make_node("Reshape", ["r6", "t4"], ["y"])]
    graph = helper.make_graph(nodes, "views", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6, "H", 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    proto = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                                                ir_version=9))
    x = np.ones((2, 6, 3, 5), np.float32)
    assert OnnxRuntimeRunner(proto).run({"x": x})["y"].shape == (2, 1, 1, 15)  # a valid graph
    assert fold_high_rank_windows(ir.serde.deserialize_model(proto)) == 0


@pytest.mark.usefixtures("coreml")
def test_the_layernorm_views_convert_to_coreml_with_parity(tmp_path: Path):
    model = ir.serde.deserialize_model(_layernorm_views())
    rng = np.random.default_rng(4)
    feeds = [{"x": (rng.standard_normal((2, 6, 4, 5)) * 2 + 1).astype(np.float32)} for _ in range(2)]
    artifact, parity = convert_and_compare(model, feeds, tmp_path)
    assert parity, parity.reason
    assert parity.scale > 1.0


def test_the_chain_folds_without_value_info():
    """tf2onnx's graphs carry no shapes for these values: the fold infers them."""
    proto = _layernorm_views()
    del proto.graph.value_info[:]
    model = ir.serde.deserialize_model(proto)
    assert fold_high_rank_windows(model) == 1
    x = np.random.default_rng(5).standard_normal((2, 6, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(OnnxRuntimeRunner(ir.serde.serialize_model(model)).run({"x": x})["y"],
                                  OnnxRuntimeRunner(proto).run({"x": x})["y"])


def _unfold_graph() -> onnx.ModelProto:
    """torch's F.unfold(x, 3, stride=2, padding=1) as dynamo exports it: two Gathers of window
    offsets with [3, 8] indices (the second makes rank 6), a Transpose, a Reshape."""
    idx = np.array([[2 * j + i for j in range(8)] for i in range(3)], np.int64)
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"], mode="constant"),
             helper.make_node("Gather", ["p", "idx"], ["g1"], axis=2),
             helper.make_node("Gather", ["g1", "idx"], ["g2"], axis=4),
             helper.make_node("Transpose", ["g2"], ["t"], perm=[0, 1, 2, 4, 3, 5]),
             helper.make_node("Reshape", ["t", "cols"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
             numpy_helper.from_array(idx, "idx"), numpy_helper.from_array(np.array([2, 36, -1], np.int64), "cols")]
    graph = helper.make_graph(nodes, "unfold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 36, 64])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def test_torchs_unfold_gathers_fold_to_rank_5(tmp_path: Path):
    """The rank-6 Gather is a Gather of flat indices viewed as rank 6, which the fold then takes
    apart (was a blocker: 'outputs a rank-6 tensor')."""
    proto = _unfold_graph()
    assert max(_ranks(proto)) == 6
    model = ir.serde.deserialize_model(proto)
    assert fold_high_rank_windows(model) == 1
    folded = ir.serde.serialize_model(model)
    assert max(_ranks(folded)) == 5
    x = np.random.default_rng(2).standard_normal((2, 4, 16, 16)).astype(np.float32)
    want = OnnxRuntimeRunner(proto).run({"x": x})["y"]
    np.testing.assert_array_equal(OnnxRuntimeRunner(folded).run({"x": x})["y"], want)
    _, parity = convert_and_compare(ir.serde.deserialize_model(proto), [{"x": x}], tmp_path, precision="fp32")
    assert parity and parity.outputs[0].max_abs == 0.0, parity.reason
